//! The ledger on disk: `StateSaveLocation/tally/ledger.state`.
//!
//! Saved atomically — a new temporary file beside it (`O_EXCL`,
//! `O_NOFOLLOW`, mode 0600, removed on any error), fsync, rename over the
//! old one, fsync the directory — so a crash leaves either the old or the
//! new state, never half of one, and nobody else can read or swap it.
//!
//! Loading never loses what the file holds:
//! - a bad line costs that line (reported), not the ledger, and the file
//!   as it was is kept beside it (`ledger.state.damaged-<time>`); every
//!   line carries a checksum, so a torn write or a hand edit is found, not
//!   believed; bytes that are not UTF-8 are damage like any other;
//! - a file that is not a Tally state at all is moved aside (never
//!   deleted) and Tally starts from an empty ledger;
//! - a file that cannot be read now (an IO error, even `EMFILE`; larger
//!   than [`MAX_BYTES`]; written by a newer Tally) is left in place and
//!   saving is *held*: the plugin keeps charging in memory, retries the
//!   load every period, and merges what it loads.
//!
//! A missing file is normal on first start.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use tally_allocator::{Snapshot, StateError};

pub const FILE_NAME: &str = "ledger.state";
/// The largest ledger read (read on slurmctld's main thread at start-up):
/// far above a year of hourly buckets for thousands of users.
pub const MAX_BYTES: u64 = 256 << 20;

/// `<state_save_location>/tally/ledger.state`
pub fn path_in(state_save_location: &Path) -> PathBuf {
    state_save_location.join("tally").join(FILE_NAME)
}

/// Write `text` to `path` atomically, readable by its owner only.
pub fn save_atomic(path: &Path, text: &str) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "state path has no directory"))?;
    if !dir.is_dir() {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(FILE_NAME);
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    // A temporary file of an earlier crash of this process id.
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all());
    drop(f);
    let done = written.and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = done {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// What loading found.
#[derive(Debug)]
pub enum Loaded {
    /// Loaded; `skipped` lines were bad, `warnings` are about the file
    /// (mode, owner).
    Ok { snapshot: Box<Snapshot>, skipped: Vec<(usize, String)>, warnings: Vec<String> },
    /// No file yet.
    Missing,
    /// Not a Tally state at all; moved to the path given (if the move worked).
    SetAside { problem: String, moved_to: Option<PathBuf> },
    /// Not readable now; left in place: do not save over it.
    Held { problem: String },
}

/// Load the state for a ledger of the given geometry; `euid` is the
/// process's (slurmctld's) effective uid, which should own the file.
pub fn load(path: &Path, bucket_s: u64, window_s: u64, now: u64, euid: u32) -> Loaded {
    match read(path, bucket_s, window_s, Some(euid)) {
        Err(Unread::NotState(problem)) => set_aside(path, problem, now),
        Err(Unread::Missing) => Loaded::Missing,
        Err(Unread::Held(problem)) => Loaded::Held { problem },
        Ok(Loaded::Ok { snapshot, skipped, mut warnings }) if !skipped.is_empty() => {
            // A damaged file is kept as it was (the next save replaces it).
            let aside = path.with_file_name(format!("{FILE_NAME}.damaged-{now}"));
            warnings.push(match fs::copy(path, &aside) {
                Ok(_) => format!("{} bad lines skipped; the file as it was is kept at {}", skipped.len(), aside.display()),
                Err(e) => format!("{} bad lines skipped; could not keep a copy at {}: {e}", skipped.len(), aside.display()),
            });
            Loaded::Ok { snapshot, skipped, warnings }
        }
        Ok(l) => l,
    }
}

/// Load without touching the file (for plugins that only follow the ledger
/// the priority plugin writes): a file that is not a state is reported, not moved.
pub fn load_readonly(path: &Path, bucket_s: u64, window_s: u64) -> Loaded {
    match read(path, bucket_s, window_s, None) {
        Err(Unread::NotState(problem)) => Loaded::SetAside { problem, moved_to: None },
        Err(Unread::Missing) => Loaded::Missing,
        Err(Unread::Held(problem)) => Loaded::Held { problem },
        Ok(l) => l,
    }
}

enum Unread {
    Missing,
    NotState(String),
    Held(String),
}

fn read(path: &Path, bucket_s: u64, window_s: u64, euid: Option<u32>) -> Result<Loaded, Unread> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Unread::Missing),
        Err(e) => return Err(Unread::Held(format!("cannot open: {e}"))),
    };
    let meta = f.metadata().map_err(|e| Unread::Held(format!("cannot stat: {e}")))?;
    if meta.len() > MAX_BYTES {
        return Err(Unread::Held(format!(
            "{} bytes, more than the {} MiB a ledger may have: move it away to start afresh",
            meta.len(),
            MAX_BYTES >> 20
        )));
    }
    let mut bytes = Vec::new();
    f.take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|e| Unread::Held(format!("cannot read: {e}")))?;
    // Bytes that are not UTF-8 are damage, not a reason to stop saving: the
    // lines they touch fail their checksums (or the header), the rest stands.
    let text = String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    let mut warnings = Vec::new();
    if meta.mode() & 0o077 != 0 {
        warnings.push(format!("mode {:04o}: others can read or change it (Tally writes it 0600)", meta.mode() & 0o7777));
    }
    if let Some(euid) = euid.filter(|&e| meta.uid() != e) {
        warnings.push(format!("owned by uid {}, not by slurmctld's uid {euid} (SlurmUser)", meta.uid()));
    }
    match Snapshot::parse(&text, bucket_s, window_s) {
        Ok(p) => Ok(Loaded::Ok { snapshot: Box::new(p.snapshot), skipped: p.skipped, warnings }),
        Err(e @ StateError::Newer(_)) => Err(Unread::Held(e.to_string())),
        Err(e) => Err(Unread::NotState(e.to_string())),
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
    use tally_allocator::HOUR_S;
    use tally_allocator::{Ledger, UsageKey};

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tally-statefile-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// Our own uid, as the owner of the directory the test made (the
    /// plugin passes `geteuid()`).
    fn owner(path: &Path) -> u32 {
        fs::metadata(path.parent().unwrap()).map_or(u32::MAX, |m| m.uid())
    }

    fn snapshot() -> Snapshot {
        let mut l = Ledger::new(HOUR_S, 7200).unwrap();
        l.charge(&UsageKey::new("a", "Jane Doe"), 1, 0, 100);
        Snapshot::new(l)
    }

    #[test]
    fn save_then_load() {
        let path = path_in(&tmpdir("roundtrip"));
        let snap = snapshot();
        save_atomic(&path, &snap.to_text()).unwrap();
        save_atomic(&path, &snap.to_text()).unwrap(); // over an existing file
        match load(&path, 3600, 7200, 5, owner(&path)) {
            Loaded::Ok { snapshot, skipped, warnings } => {
                assert_eq!(*snapshot, snap);
                assert!(skipped.is_empty() && warnings.is_empty(), "{skipped:?} {warnings:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        // No temporary files left behind.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
    }

    #[test]
    fn a_symlink_in_place_of_the_temporary_file_is_not_followed() {
        let dir = tmpdir("symlink");
        let path = path_in(&dir);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let target = dir.join("victim");
        fs::write(&target, "precious").unwrap();
        // The temporary name of this process, planted as a symlink: removed, not written through.
        let tmp = path.parent().unwrap().join(format!(".{FILE_NAME}.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&target, &tmp).unwrap();
        save_atomic(&path, &snapshot().to_text()).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
        assert!(matches!(load(&path, 3600, 7200, 5, owner(&path)), Loaded::Ok { .. }));
    }

    #[test]
    fn a_failed_save_leaves_no_temporary_file_and_the_old_state() {
        let dir = tmpdir("failsave");
        let path = path_in(&dir);
        save_atomic(&path, "tally-state 2\n").unwrap();
        // The rename target is a non-empty directory: the rename fails.
        let blocked = path.parent().unwrap().join("blocked");
        fs::create_dir_all(blocked.join("x")).unwrap();
        assert!(save_atomic(&blocked, "tally-state 2\n").is_err());
        let names: Vec<String> =
            fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(names.iter().all(|n| !n.contains(".tmp.")), "{names:?}");
    }

    #[test]
    fn missing_bad_lines_not_a_state_and_unreadable() {
        let dir = tmpdir("corrupt");
        let path = path_in(&dir);
        assert!(matches!(load(&path, 3600, 7200, 5, owner(&path)), Loaded::Missing));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        // One bad line: skipped, the rest kept, the file untouched and a
        // copy of it kept beside it.
        fs::write(&path, "tally-state 2\nuse x\nuse 0 a u 5\n").unwrap();
        match load(&path, 3600, 7200, 42, owner(&path)) {
            Loaded::Ok { snapshot, skipped, warnings } => {
                assert_eq!(skipped.iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![2]);
                assert_eq!(snapshot.ledger.entries().count(), 1);
                assert!(warnings.iter().any(|w| w.contains("ledger.state.damaged-42")), "{warnings:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(fs::read_to_string(path.with_file_name("ledger.state.damaged-42")).unwrap(), "tally-state 2\nuse x\nuse 0 a u 5\n");
        // Bytes that are not UTF-8 (4 KiB of noise): not a state, set
        // aside, and saving goes on (it was held forever before).
        let noise: Vec<u8> = (0u32..4096).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        assert!(std::str::from_utf8(&noise).is_err());
        fs::write(&path, &noise).unwrap();
        assert!(matches!(load(&path, 3600, 7200, 43, owner(&path)), Loaded::SetAside { moved_to: Some(_), .. }));
        assert!(!path.exists());
        // A ledger whose second line is noise: that line skipped, the rest read.
        let mut text = b"tally-state 2\n".to_vec();
        text.extend_from_slice(&[0xff, 0xfe, b'\n']);
        text.extend_from_slice(b"use 0 a u 5\n");
        fs::write(&path, &text).unwrap();
        assert!(matches!(load(&path, 3600, 7200, 44, owner(&path)), Loaded::Ok { ref skipped, .. } if skipped.len() == 1));
        // A newer version: held, left in place.
        fs::write(&path, "tally-state 99\n").unwrap();
        assert!(matches!(load(&path, 3600, 7200, 42, owner(&path)), Loaded::Held { .. }));
        assert!(path.exists());
        // Unreadable now (a directory where the file should be): held, not moved.
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert!(matches!(load(&path, 3600, 7200, 42, owner(&path)), Loaded::Held { .. }), "{:?}", load(&path, 3600, 7200, 42, owner(&path)));
        assert!(path.is_dir());
        fs::remove_dir(&path).unwrap();
        // Too large: held.
        let f = File::create(&path).unwrap();
        f.set_len(MAX_BYTES + 1).unwrap();
        match load(&path, 3600, 7200, 42, owner(&path)) {
            Loaded::Held { problem } => assert!(problem.contains("more than the 256 MiB"), "{problem}"),
            other => panic!("{other:?}"),
        }
        // Not a state at all: moved aside, never deleted.
        fs::write(&path, "garbage").unwrap();
        match load(&path, 3600, 7200, 42, owner(&path)) {
            Loaded::SetAside { moved_to, .. } => {
                let aside = moved_to.unwrap();
                assert!(aside.ends_with("ledger.state.corrupt-42"));
                assert_eq!(fs::read_to_string(aside).unwrap(), "garbage");
            }
            other => panic!("{other:?}"),
        }
        assert!(!path.exists());
    }

    #[test]
    fn a_file_others_can_read_is_reported() {
        let path = path_in(&tmpdir("mode"));
        save_atomic(&path, &snapshot().to_text()).unwrap();
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        match load(&path, 3600, 7200, 5, owner(&path)) {
            Loaded::Ok { warnings, .. } => assert!(warnings.iter().any(|w| w.starts_with("mode 0644")), "{warnings:?}"),
            other => panic!("{other:?}"),
        }
    }
}
