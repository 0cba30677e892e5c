//! The ledger on disk: `StateSaveLocation/tally/ledger.state`.
//!
//! Saved atomically — write a temporary file beside it, fsync, rename over
//! the old one, fsync the directory — so a crash leaves either the old or
//! the new state, never half of one. A corrupt file is moved aside (never
//! deleted) and Tally starts from an empty ledger; a missing one is normal on
//! first start.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use tally_allocator::Snapshot;

pub const FILE_NAME: &str = "ledger.state";

/// `<state_save_location>/tally/ledger.state`
pub fn path_in(state_save_location: &Path) -> PathBuf {
    state_save_location.join("tally").join(FILE_NAME)
}

/// Write `text` to `path` atomically.
pub fn save_atomic(path: &Path, text: &str) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "state path has no directory"))?;
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.tmp.{}", FILE_NAME, std::process::id()));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// What loading found.
#[derive(Debug)]
pub enum Loaded {
    Ok(Snapshot),
    /// No file yet.
    Missing,
    /// Unreadable or corrupt; moved to the path given (if the move worked).
    SetAside { problem: String, moved_to: Option<PathBuf> },
}

/// Load the state for a ledger of the given geometry.
pub fn load(path: &Path, bucket_s: u64, window_s: u64, now: u64) -> Loaded {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Loaded::Missing,
        Err(e) => return set_aside(path, format!("cannot read: {e}"), now),
    };
    match Snapshot::parse(&text, bucket_s, window_s) {
        Ok(s) => Loaded::Ok(s),
        Err(e) => set_aside(path, e.to_string(), now),
    }
}

/// Load without touching the file (for plugins that only follow the ledger
/// the priority plugin writes): a corrupt file is reported, not moved.
pub fn load_readonly(path: &Path, bucket_s: u64, window_s: u64) -> Loaded {
    match fs::read_to_string(path) {
        Ok(text) => match Snapshot::parse(&text, bucket_s, window_s) {
            Ok(s) => Loaded::Ok(s),
            Err(e) => Loaded::SetAside { problem: e.to_string(), moved_to: None },
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Loaded::Missing,
        Err(e) => Loaded::SetAside { problem: format!("cannot read: {e}"), moved_to: None },
    }
}

fn set_aside(path: &Path, problem: String, now: u64) -> Loaded {
    let aside = path.with_file_name(format!("{FILE_NAME}.corrupt-{now}"));
    let moved_to = fs::rename(path, &aside).ok().map(|_| aside);
    Loaded::SetAside { problem, moved_to }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_allocator::{Ledger, UsageKey};

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tally-statefile-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn save_then_load() {
        let path = path_in(&tmpdir("roundtrip"));
        let mut l = Ledger::new(3600, 7200).unwrap();
        l.charge(&UsageKey::new("a", "u"), 1, 0, 100);
        let snap = Snapshot::new(l);
        save_atomic(&path, &snap.to_text()).unwrap();
        save_atomic(&path, &snap.to_text()).unwrap(); // over an existing file
        match load(&path, 3600, 7200, 5) {
            Loaded::Ok(s) => assert_eq!(s, snap),
            other => panic!("{other:?}"),
        }
        // No temporary files left behind.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
    }

    #[test]
    fn missing_and_corrupt() {
        let dir = tmpdir("corrupt");
        let path = path_in(&dir);
        assert!(matches!(load(&path, 3600, 7200, 5), Loaded::Missing));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "tally-state 1\nuse x\n").unwrap();
        match load(&path, 3600, 7200, 42) {
            Loaded::SetAside { problem, moved_to } => {
                assert!(problem.starts_with("line 2:"), "{problem}");
                let aside = moved_to.unwrap();
                assert!(aside.ends_with("ledger.state.corrupt-42"));
                assert_eq!(fs::read_to_string(aside).unwrap(), "tally-state 1\nuse x\n");
            }
            other => panic!("{other:?}"),
        }
        assert!(!path.exists());
    }
}
