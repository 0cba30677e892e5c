//! The runs preempt/tally preempted: how the priority plugin learns that a
//! requeue was the scheduler's own preemption, so that the job's next run
//! is protected for its whole contract (`allocator::runs`, rule 4 of
//! docs/design.md), while a requeue by its user or an admin is not.
//!
//! Slurm asks a preempt plugin for a victim's grace time exactly when it
//! preempts it (`slurm_job_preempt` → `_job_check_grace_internal`, once per
//! preemption, 22.05 and 24.11 alike), and never otherwise. preempt/tally
//! notes the victim's run there ([`Notes::note`]: memory only, no IO on
//! Slurm's call path); its thread writes the notes to
//! `StateSaveLocation/tally/preempted.state` atomically ([`save`]); the
//! priority plugin's thread reads them every recalculation ([`load`]) into
//! its run book (`RunBook::preempted`, which takes a note before or after
//! it saw the run end, and again without harm).
//!
//! ```text
//! tally-preempted 1
//! preempted 4711 1796080000 1796090000 restore 57600 0
//!     # job, start of the run preempted, when; then why: the rule that
//!     # made it a victim (unallocated, restore, time_slice; `other`: a
//!     # victim preempt/tally did not offer), the GPU-seconds the
//!     # preemption threw away, the seconds of contract it had left (0
//!     # unless Slurm preempted inside a contract)
//! ```
//! A line of an older Tally ends after `when`: its why is not known.
//! Bounded: notes older than [`KEEP_S`] are dropped, and at most
//! [`MAX_NOTES`] are kept (the newest). A bad line is skipped. A note lost
//! in a crash (at most the last second's) costs its job the fresh
//! contract, nothing else.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use tally_allocator::{PreemptReason, DAY_S};

pub const FILE_NAME: &str = "preempted.state";
const MAGIC: &str = "tally-preempted 1";
/// Notes older than this are dropped: a requeued job starts again within
/// minutes (Slurm's `cred_expire + 1` and the queue), and the priority
/// plugin reads the file every recalculation.
pub const KEEP_S: u64 = DAY_S;
/// The most notes kept (the newest): a day of a busy cluster's preemptions.
pub const MAX_NOTES: usize = 65_536;
/// The largest file read: [`MAX_NOTES`] lines of three numbers, with room.
pub const MAX_BYTES: u64 = 8 << 20;

/// One preempted run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Note {
    pub job_id: u32,
    /// When the run that was preempted had started (unix s).
    pub run_start_s: u64,
    /// When it was preempted (unix s).
    pub at_s: u64,
    /// Why, and what it cost (`None`: noted by an older Tally).
    pub why: Option<Why>,
}

/// Why a run was preempted, and what it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Why {
    /// The rule that made it a victim; `None`: preempt/tally did not offer
    /// it (Slurm preempted it by another path).
    pub reason: Option<PreemptReason>,
    /// GPU-seconds (budget units with GPU types) the preemption threw away
    /// ([`tally_allocator::lost_gpu_seconds`]).
    pub lost_gpu_s: u64,
    /// Seconds of its contract the run had left: more than 0 is a broken
    /// promise, which Tally's rule never gives.
    pub contract_left_s: u64,
}

impl Why {
    /// The reason's name; `other` for a victim preempt/tally did not offer.
    pub fn reason_name(&self) -> &'static str {
        self.reason.map_or(OTHER, PreemptReason::name)
    }
}

/// The reason of a victim preempt/tally did not offer.
pub const OTHER: &str = "other";

/// The notes of preempt/tally, newest last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notes {
    notes: Vec<Note>,
}

impl Notes {
    pub fn new() -> Notes {
        Notes::default()
    }

    /// Note a preemption (a run seen twice is noted once).
    pub fn note(&mut self, n: Note) {
        if n.job_id == 0 || n.run_start_s == 0 || self.notes.iter().rev().take(64).any(|o| o.job_id == n.job_id && o.run_start_s == n.run_start_s) {
            return;
        }
        self.notes.push(n);
        if self.notes.len() > MAX_NOTES {
            let excess = self.notes.len() - MAX_NOTES;
            self.notes.drain(..excess);
        }
    }

    /// Take in the notes of `other` not noted here (another writer's: the
    /// file as another slurmctld left it on a fail-over), keeping the
    /// order by when each run was preempted and the [`MAX_NOTES`] newest.
    /// A run noted in both keeps this book's note. Returns how many came in.
    pub fn merge(&mut self, other: &Notes) -> usize {
        let known: std::collections::HashSet<(u32, u64)> = self.notes.iter().map(|n| (n.job_id, n.run_start_s)).collect();
        let fresh: Vec<Note> = other.notes.iter().filter(|n| !known.contains(&(n.job_id, n.run_start_s))).copied().collect();
        if fresh.is_empty() {
            return 0;
        }
        let count = fresh.len();
        self.notes.extend(fresh);
        // (Stable: notes of one second keep the order they were noted in.)
        self.notes.sort_by_key(|n| n.at_s);
        if self.notes.len() > MAX_NOTES {
            let excess = self.notes.len() - MAX_NOTES;
            self.notes.drain(..excess);
        }
        count
    }

    /// Drop notes older than [`KEEP_S`] at `now`.
    pub fn prune(&mut self, now: u64) {
        self.notes.retain(|n| n.at_s.saturating_add(KEEP_S) > now);
    }

    pub fn iter(&self) -> impl Iterator<Item = &Note> {
        self.notes.iter()
    }

    pub fn len(&self) -> usize {
        self.notes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.notes.is_empty()
    }

    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(16 + 32 * self.notes.len());
        s.push_str(MAGIC);
        s.push('\n');
        for n in &self.notes {
            s.push_str(&format!("preempted {} {} {}", n.job_id, n.run_start_s, n.at_s));
            if let Some(w) = n.why {
                s.push_str(&format!(" {} {} {}", w.reason_name(), w.lost_gpu_s, w.contract_left_s));
            }
            s.push('\n');
        }
        s
    }

    /// The notes of a file's text; bad lines are skipped and counted.
    /// `None`: not a notes file at all.
    pub fn parse(text: &str) -> Option<(Notes, usize)> {
        let mut lines = text.lines();
        if lines.next().map(str::trim) != Some(MAGIC) {
            return None;
        }
        let mut notes = Notes::new();
        let mut bad = 0;
        for line in lines.map(str::trim).filter(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            let (head, why) = match f.as_slice() {
                ["preempted", job, start, at] => ((job, start, at), Some(None)),
                ["preempted", job, start, at, reason, lost, left] => {
                    let reason = if *reason == OTHER { Some(None) } else { PreemptReason::parse(reason).map(Some) };
                    let why = reason
                        .zip(lost.parse().ok())
                        .zip(left.parse().ok())
                        .map(|((reason, lost_gpu_s), contract_left_s)| Some(Why { reason, lost_gpu_s, contract_left_s }));
                    ((job, start, at), why)
                }
                _ => {
                    bad += 1;
                    continue;
                }
            };
            let (job, start, at) = head;
            match (job.parse().ok(), start.parse().ok(), at.parse().ok(), why) {
                (Some(job_id), Some(run_start_s), Some(at_s), Some(why)) => notes.note(Note { job_id, run_start_s, at_s, why }),
                _ => bad += 1,
            }
        }
        Some((notes, bad))
    }
}

/// `<state_save_location>/tally/preempted.state`
pub fn path_in(state_save_location: &Path) -> PathBuf {
    state_save_location.join("tally").join(FILE_NAME)
}

/// Write the notes atomically (0600, [`crate::statefile::save_atomic`]).
pub fn save(path: &Path, notes: &Notes) -> io::Result<()> {
    crate::statefile::save_atomic(path, &notes.to_text())
}

/// Write `notes` with those the file holds that `notes` lacks, pruned at
/// `now` (atomically, as [`save`]); `notes` becomes what was written.
///
/// Two slurmctld share the file on a fail-over: the backup's preempt/tally
/// loaded the notes when the backup started, and the primary noted runs
/// after that. Whichever writes takes the other's notes in first, so a
/// controller that takes over never writes its stale book over the notes
/// of the one before it (which `tally exporter` counts, and the priority
/// plugin reads). A file that cannot be read is not merged: its problem is
/// returned with the write's outcome, the write goes ahead.
pub fn save_merged(path: &Path, notes: &mut Notes, now: u64) -> (io::Result<()>, Option<String>) {
    let problem = match load(path) {
        Ok(on_disk) => {
            notes.merge(&on_disk);
            None
        }
        Err(problem) => Some(problem),
    };
    notes.prune(now);
    (save(path, notes), problem)
}

/// Read the notes; a missing file is no notes. Errors say what is wrong.
pub fn load(path: &Path) -> Result<Notes, String> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Notes::new()),
        Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
    };
    let mut text = String::new();
    f.take(MAX_BYTES + 1).read_to_string(&mut text).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(format!("{} is larger than {} MiB: not Tally's notes", path.display(), MAX_BYTES >> 20));
    }
    match Notes::parse(&text) {
        Some((notes, 0)) => Ok(notes),
        Some((notes, bad)) => {
            log::warn!("{}: {bad} bad lines skipped", path.display());
            Ok(notes)
        }
        None => Err(format!("{} is not Tally's preemption notes (first line is not `{MAGIC}`)", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_round_trip_bounded_and_deduplicated() {
        let mut n = Notes::new();
        let why = Why { reason: Some(PreemptReason::Restore), lost_gpu_s: 57_600, contract_left_s: 0 };
        n.note(Note { job_id: 7, run_start_s: 1000, at_s: 5000, why: Some(why) });
        n.note(Note { job_id: 7, run_start_s: 1000, at_s: 5001, why: None });
        n.note(Note { job_id: 0, run_start_s: 1000, at_s: 5001, why: None });
        n.note(Note { job_id: 8, run_start_s: 2000, at_s: 90_000, why: None });
        assert_eq!(n.len(), 2);
        assert_eq!(n.to_text(), "tally-preempted 1\npreempted 7 1000 5000 restore 57600 0\npreempted 8 2000 90000\n");
        let (back, bad) =
            Notes::parse(&format!("{}garbage line\npreempted x 1 2\npreempted 9 1 2 because 0 0\npreempted 9 1 2 restore -1 0\n", n.to_text()))
                .unwrap();
        assert_eq!((back, bad), (n.clone(), 4));
        // A victim Slurm took by another path, inside its contract.
        let (other, bad) = Notes::parse("tally-preempted 1\npreempted 9 100 200 other 800 3400\n").unwrap();
        let w = other.iter().next().and_then(|n| n.why).unwrap();
        assert_eq!((w.reason, w.reason_name(), w.lost_gpu_s, w.contract_left_s, bad), (None, "other", 800, 3400, 0));
        assert_eq!(Notes::parse("ledger\n"), None);
        n.prune(5000 + KEEP_S);
        assert_eq!(n.iter().map(|x| x.job_id).collect::<Vec<_>>(), vec![8]);
        for i in 0..(MAX_NOTES as u32 + 10) {
            n.note(Note { job_id: i + 1, run_start_s: 1, at_s: 100_000, why: None });
        }
        assert_eq!(n.len(), MAX_NOTES);
        assert_eq!(n.iter().last().map(|x| x.job_id), Some(MAX_NOTES as u32 + 10));
    }

    #[test]
    fn a_merge_takes_the_other_writers_notes_once_in_order() {
        let why = Why { reason: Some(PreemptReason::Unallocated), lost_gpu_s: 80, contract_left_s: 0 };
        let mut mine = Notes::new();
        mine.note(Note { job_id: 1, run_start_s: 10, at_s: 100, why: Some(why) });
        mine.note(Note { job_id: 3, run_start_s: 30, at_s: 300, why: None });
        let mut theirs = Notes::new();
        theirs.note(Note { job_id: 2, run_start_s: 20, at_s: 200, why: None });
        // The same run in both: this book's note stays.
        theirs.note(Note { job_id: 3, run_start_s: 30, at_s: 301, why: Some(why) });
        assert_eq!(mine.merge(&theirs), 1);
        assert_eq!(mine.iter().map(|n| (n.job_id, n.at_s)).collect::<Vec<_>>(), vec![(1, 100), (2, 200), (3, 300)]);
        assert_eq!(mine.merge(&theirs), 0, "a second merge takes nothing");
        // Bounded: the newest MAX_NOTES stay.
        let mut many = Notes::new();
        for i in 0..MAX_NOTES as u32 {
            many.note(Note { job_id: i + 10, run_start_s: 1, at_s: 1_000 + u64::from(i), why: None });
        }
        assert_eq!(mine.merge(&many), MAX_NOTES);
        assert_eq!(mine.len(), MAX_NOTES);
        assert_eq!(mine.iter().next().map(|n| n.at_s), Some(1_000));
    }

    #[test]
    fn a_merged_save_keeps_the_notes_another_controller_wrote() {
        let dir = std::env::temp_dir().join(format!("tally-preempted-merge-{}", std::process::id()));
        let path = path_in(&dir);
        let now = 10 * KEEP_S;
        // The backup's book, loaded when it started: one note about to age out.
        let mut backup = Notes::new();
        backup.note(Note { job_id: 5, run_start_s: 1, at_s: now - KEEP_S, why: None });
        // The primary noted a run since, then died.
        let mut primary = Notes::new();
        primary.note(Note { job_id: 5, run_start_s: 1, at_s: now - KEEP_S, why: None });
        primary.note(Note { job_id: 6, run_start_s: 2, at_s: now - 60, why: None });
        save(&path, &primary).unwrap();
        // The backup, in control, preempts a run: the file keeps the primary's.
        backup.note(Note { job_id: 7, run_start_s: 3, at_s: now, why: None });
        let (written, problem) = save_merged(&path, &mut backup, now);
        assert!(written.is_ok() && problem.is_none());
        let on_disk = load(&path).unwrap();
        assert_eq!(on_disk.iter().map(|n| n.job_id).collect::<Vec<_>>(), vec![6, 7], "job 5's note aged out, 6 kept, 7 added");
        assert_eq!(on_disk, backup, "the book is what was written");
        // A file that is not notes: said, and written over with the book.
        std::fs::write(&path, "nope\n").unwrap();
        let (written, problem) = save_merged(&path, &mut backup, now);
        assert!(written.is_ok() && problem.is_some_and(|p| p.contains("not Tally's preemption notes")));
        assert_eq!(load(&path).unwrap(), backup);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn saved_and_loaded() {
        let dir = std::env::temp_dir().join(format!("tally-preempted-{}", std::process::id()));
        let path = path_in(&dir);
        assert_eq!(load(&path), Ok(Notes::new()), "missing: none");
        let mut n = Notes::new();
        n.note(Note { job_id: 42, run_start_s: 10, at_s: 20, why: None });
        save(&path, &n).unwrap();
        assert_eq!(load(&path), Ok(n));
        std::fs::write(&path, "nope\n").unwrap();
        assert!(load(&path).unwrap_err().contains("not Tally's preemption notes"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
