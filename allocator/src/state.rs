//! The ledger's saved form: a small line-oriented text that both the plugin
//! (which writes it atomically under StateSaveLocation/tally/) and the
//! reports read. Pure: strings in, strings out.
//!
//! ```text
//! tally-state 1
//! saved_at 1796083200
//! geometry 3600 604800            # bucket_s window_s
//! charged 4711 1796083140         # job id, charged up to (unix s)
//! use 498912 pretrain alice 7200  # bucket, account, user, GPU-seconds
//! ```
//! `charged` marks make charging idempotent: a job is charged from its mark
//! on, so a restart that reloads ledger and marks together never charges the
//! same second twice.

use crate::ledger::{Ledger, UsageKey};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use thiserror::Error;

const MAGIC: &str = "tally-state 1";

/// Ledger, charging marks and when they were saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub saved_at: u64,
    pub ledger: Ledger,
    /// job id → unix second up to which the job has been charged.
    pub charged_until: BTreeMap<u64, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StateError {
    #[error("not a Tally state file (first line is not `{MAGIC}`)")]
    NotState,
    #[error("line {line}: {what}")]
    Line { line: usize, what: String },
}

impl Snapshot {
    pub fn new(ledger: Ledger) -> Snapshot {
        Snapshot { saved_at: 0, ledger, charged_until: BTreeMap::new() }
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{MAGIC}");
        let _ = writeln!(s, "saved_at {}", self.saved_at);
        let _ = writeln!(s, "geometry {} {}", self.ledger.bucket_s(), self.ledger.window_s());
        for (job, until) in &self.charged_until {
            let _ = writeln!(s, "charged {job} {until}");
        }
        for (bucket, key, gs) in self.ledger.entries() {
            let _ = writeln!(s, "use {bucket} {} {} {gs}", key.account, key.user);
        }
        s
    }

    /// Parse a saved state into a ledger of the given geometry. Usage saved
    /// with another bucket size is moved to the bucket holding the start of
    /// its old bucket.
    pub fn parse(text: &str, bucket_s: u64, window_s: u64) -> Result<Snapshot, StateError> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, l)) if l.trim() == MAGIC => {}
            _ => return Err(StateError::NotState),
        }
        let ledger = Ledger::new(bucket_s, window_s)
            .map_err(|e| StateError::Line { line: 0, what: e.to_string() })?;
        let mut snap = Snapshot::new(ledger);
        let mut old_bucket_s = bucket_s;
        for (i, line) in lines {
            let n = i + 1;
            let bad = |what: &str| StateError::Line { line: n, what: what.to_string() };
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            let num = |k: usize| -> Result<u64, StateError> {
                fields.get(k).and_then(|f| f.parse().ok()).ok_or_else(|| bad("expected a whole number"))
            };
            match fields.first().copied() {
                None => {}
                Some(c) if c.starts_with('#') => {}
                Some("saved_at") => snap.saved_at = num(1)?,
                Some("geometry") => {
                    old_bucket_s = num(1)?;
                    if old_bucket_s == 0 {
                        return Err(bad("bucket of 0 seconds"));
                    }
                }
                Some("charged") => {
                    snap.charged_until.insert(num(1)?, num(2)?);
                }
                Some("use") => {
                    if fields.len() != 5 {
                        return Err(bad("expected `use <bucket> <account> <user> <gpu_seconds>`"));
                    }
                    let bucket = num(1)?;
                    let gs: f64 = fields[4].parse().map_err(|_| bad("GPU-seconds is not a number"))?;
                    if !(gs.is_finite() && gs >= 0.0) {
                        return Err(bad("GPU-seconds must be finite and >= 0"));
                    }
                    let start = bucket.checked_mul(old_bucket_s).ok_or_else(|| bad("bucket out of range"))?;
                    snap.ledger.add(start / bucket_s, &UsageKey::new(fields[2], fields[3]), gs);
                }
                Some(other) => return Err(bad(&format!("unknown record `{other}`"))),
            }
        }
        Ok(snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut l = Ledger::new(3600, 7 * 86_400).unwrap();
        l.charge(&UsageKey::new("a", "u"), 2, 1000, 9000);
        l.charge(&UsageKey::new("b", "v"), 1, 0, 10);
        let mut s = Snapshot::new(l);
        s.saved_at = 9000;
        s.charged_until.insert(42, 9000);
        let text = s.to_text();
        assert_eq!(Snapshot::parse(&text, 3600, 7 * 86_400), Ok(s));
    }

    #[test]
    fn rebuckets_on_new_geometry() {
        let text = "tally-state 1\ngeometry 3600 604800\nuse 3 a u 100\n";
        let s = Snapshot::parse(text, 7200, 604_800).unwrap();
        assert_eq!(s.ledger.entries().map(|(b, _, v)| (b, v)).collect::<Vec<_>>(), vec![(1, 100.0)]);
    }

    #[test]
    fn corrupt_input_is_an_error_with_a_line() {
        assert_eq!(Snapshot::parse("garbage", 3600, 3600), Err(StateError::NotState));
        assert_eq!(Snapshot::parse("", 3600, 3600), Err(StateError::NotState));
        let e = Snapshot::parse("tally-state 1\nuse 1 a u\n", 3600, 3600).unwrap_err();
        assert!(matches!(e, StateError::Line { line: 2, .. }), "{e}");
        let e = Snapshot::parse("tally-state 1\nuse 1 a u NaN\n", 3600, 3600).unwrap_err();
        assert!(matches!(e, StateError::Line { line: 2, .. }), "{e}");
        let e = Snapshot::parse("tally-state 1\nfrobnicate\n", 3600, 3600).unwrap_err();
        assert_eq!(e.to_string(), "line 2: unknown record `frobnicate`");
    }
}
