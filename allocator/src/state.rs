//! The ledger's saved form: a small line-oriented text that both the plugin
//! (which writes it atomically under StateSaveLocation/tally/) and the
//! reports read. Pure: strings in, strings out.
//!
//! ```text
//! tally-state 3
//! saved_at 1796083200
//! geometry 3600 604800            # bucket_s window_s
//! run 4711 1796080000 3140 1796083140 1 8 7200 0 0 pretrain alice
//!     # job, start, charged run s, last seen, active, GPUs, contract s,
//!     # resumable, earlier runs' protection s, account, user (see crate::runs)
//! requeue 4711 1796070000 1796070000
//!     # job, start of the run closed last, start of a run the scheduler
//!     # preempted (0: none); only where one is not 0
//! use 498912 pretrain alice 7200  # bucket, account, user, GPU-seconds
//! owe 498912 pretrain 14400 28800 0
//!     # bucket, account, entitled, asked and unallocated GPU-seconds
//!     # (see crate::fairness::OwedBook)
//! load pretrain 32 8               # account, allocated GPUs running and
//!                                  # waiting at saved_at
//! gpus b200 32                     # GPUs of a type on Slurm's nodes (`-`:
//!                                  # untyped), with [cluster.gpu_types]
//! tick 18250                       # microseconds the last recalculation took
//! ```
//! With `[cluster.gpu_types]` every amount is in budget units (GPU-seconds
//! weighted by type, [`crate::gpu_types`]), a `run` of weighted GPUs ends
//! with the weight (`… pretrain alice 2.2`), and the `gpus` records keep
//! the nodes' GPUs per type the plugin ranked with (so the reports and the
//! other plugins use the same capacity). Without it nothing differs.
//! Names are escaped (`%20` for a space, `%25` for `%`, `%00` for an empty
//! name), so a user name with a space (AD, SSSD) stays one field.
//!
//! `run` records make charging idempotent: a job is charged from what its
//! record says was charged, so a restart that reloads ledger and records
//! together never charges the same second twice. Version 1 files (`charged
//! <job> <unix s>` marks) are read: the mark becomes the record of the run
//! when the job is next seen.
//!
//! (Every line after the first ends with ` ~` and its checksum, left out
//! above: [`seal`]. A torn write or a hand-edited record fails it and is
//! skipped, never believed; version 2 files, without checksums, are read.)
//!
//! Reading is lenient line by line: a bad line is skipped and reported
//! ([`Parsed::skipped`]), so one damaged line costs one record, not the
//! ledger. `owe`, `load`, `gpus` and `requeue` records and a run's weight came after
//! version 2's first release:
//! an older Tally skips them line by line (and says so) and keeps the rest,
//! so they need no new version. Only a file that is not a Tally state at all, or one written by a
//! newer version, is refused as a whole ([`StateError`]).

use crate::contract::Contract;
use crate::fairness::{Asked, OwedBook};
use crate::gpu_types::{Inventory, Weight};
use crate::ledger::{Ledger, UsageKey};
use crate::runs::{RunBook, RunRecord};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use thiserror::Error;

const MAGIC: &str = "tally-state";
/// The version this code writes. Version 3: every line after the first
/// ends with its checksum ([`seal`]).
pub const VERSION: u32 = 3;
/// The most GPU-seconds one `use` line may hold: the ledger's range (sums
/// saturate there, and what saturated reads back the same). Above it is
/// damage, not usage.
pub const MAX_GPU_SECONDS: f64 = u64::MAX as f64;

/// Ledger, run records, what was owed, and when they were saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub saved_at: u64,
    pub ledger: Ledger,
    pub runs: RunBook,
    /// Entitled and asked per account and bucket, measured live.
    pub owed: OwedBook,
    /// Allocated GPUs (running, waiting) per account at `saved_at`: the
    /// input of the entitlement of that moment ([`crate::Load`]).
    pub load: BTreeMap<String, (f64, f64)>,
    /// GPUs per type on Slurm's nodes when saved (`None`: untyped), with
    /// `[cluster.gpu_types]` only: what the capacity was computed from
    /// ([`crate::GpuWeights::capacity_units`]). Empty otherwise.
    pub inventory: Inventory,
    /// Wall time of the plugin's last recalculation before the save,
    /// microseconds (0: not known). For the reports; no rule reads it.
    pub tick_us: u64,
}

/// A parsed state and the lines that were skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub snapshot: Snapshot,
    /// (1-based line, what was wrong).
    pub skipped: Vec<(usize, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StateError {
    #[error("not a Tally state file (first line is not `{MAGIC} <version>`)")]
    NotState,
    #[error("written by a newer Tally (state version {0}; this one reads up to {VERSION})")]
    Newer(u32),
    #[error("line {line}: {what}")]
    Line { line: usize, what: String },
}

/// A name as one whitespace-free field.
pub fn escape(name: &str) -> String {
    if name.is_empty() {
        return "%00".to_string();
    }
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == '%' || c.is_whitespace() || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of [`escape`]; `None` for a malformed field.
pub fn unescape(field: &str) -> Option<String> {
    if field == "%00" {
        return Some(String::new());
    }
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == 0 {
            // Never written (a NUL is `%00`, the empty name): not ours.
            return None;
        }
        if bytes[i] == b'%' {
            let hex = field.get(i + 1..i + 3)?;
            let b = u8::from_str_radix(hex, 16).ok()?;
            if b == 0 {
                return None;
            }
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl Snapshot {
    pub fn new(ledger: Ledger) -> Snapshot {
        let owed = OwedBook::new(ledger.bucket_s(), ledger.window_s());
        Snapshot { saved_at: 0, ledger, runs: RunBook::new(), owed, load: BTreeMap::new(), inventory: Inventory::new(), tick_us: 0 }
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{MAGIC} {VERSION}");
        let _ = writeln!(s, "saved_at {}", self.saved_at);
        let _ = writeln!(s, "geometry {} {}", self.ledger.bucket_s(), self.ledger.window_s());
        for (job, r) in self.runs.iter() {
            let _ = write!(
                s,
                "run {job} {} {} {} {} {} {} {} {} {} {}",
                r.start_s,
                r.charged_s,
                r.seen_s,
                u8::from(r.active),
                r.gpus,
                r.contract.min_runtime_s,
                u8::from(r.contract.resumable),
                r.earlier_s,
                escape(&r.account),
                escape(&r.user)
            );
            if !r.weight.is_one() {
                let _ = write!(s, " {}", r.weight);
            }
            s.push('\n');
            if r.prev_start_s != 0 || r.preempted_run_s != 0 {
                let _ = writeln!(s, "requeue {job} {} {}", r.prev_start_s, r.preempted_run_s);
            }
        }
        for (job, mark) in self.runs.legacy_marks() {
            let _ = writeln!(s, "charged {job} {mark}");
        }
        for (bucket, key, gs) in self.ledger.whole_entries() {
            let _ = writeln!(s, "use {bucket} {} {} {gs}", escape(&key.account), escape(&key.user));
        }
        for (bucket, account, a) in self.owed.entries() {
            let _ = writeln!(s, "owe {bucket} {} {} {} {}", escape(account), a.entitled_gs, a.asked_gs, a.unallocated_gs);
        }
        for (account, (running, waiting)) in &self.load {
            let _ = writeln!(s, "load {} {running} {waiting}", escape(account));
        }
        for (gpu_type, n) in &self.inventory {
            let _ = writeln!(s, "gpus {} {n}", gpu_type.as_deref().map_or("-".to_string(), escape));
        }
        if self.tick_us > 0 {
            let _ = writeln!(s, "tick {}", self.tick_us);
        }
        // Every record line sealed with its checksum (the header stays as
        // it is: its version says how to read the rest).
        let mut out = String::with_capacity(s.len() + s.len() / 4);
        for (i, line) in s.lines().enumerate() {
            if i == 0 {
                out.push_str(line);
            } else {
                out.push_str(&seal(line));
            }
            out.push('\n');
        }
        out
    }

    /// Parse a saved state into a ledger of the given geometry. Usage saved
    /// with another bucket size is moved to the bucket holding the start of
    /// its old bucket. Bad lines are skipped and listed.
    pub fn parse(text: &str, bucket_s: u64, window_s: u64) -> Result<Parsed, StateError> {
        let mut lines = text.lines().enumerate();
        let version = match lines.next().map(|(_, l)| l.split_ascii_whitespace().collect::<Vec<_>>()) {
            Some(f) if f.len() == 2 && f[0] == MAGIC => f[1].parse::<u32>().map_err(|_| StateError::NotState)?,
            _ => return Err(StateError::NotState),
        };
        if version == 0 {
            return Err(StateError::NotState);
        }
        if version > VERSION {
            return Err(StateError::Newer(version));
        }
        let ledger = Ledger::new(bucket_s, window_s).map_err(|e| StateError::Line { line: 0, what: e.to_string() })?;
        let mut snap = Snapshot::new(ledger);
        let mut skipped = Vec::new();
        let mut old_bucket_s = bucket_s;
        let mut legacy = BTreeMap::new();
        for (i, line) in lines {
            let record = if version >= 3 && !line.trim().is_empty() { unseal(line) } else { Ok(line) };
            if let Err(what) = record.and_then(|r| parse_line(r, &mut snap, &mut old_bucket_s, &mut legacy)) {
                skipped.push((i + 1, what));
            }
        }
        for (job, mark) in legacy {
            snap.runs.set_legacy_mark(job, mark);
        }
        Ok(Parsed { snapshot: snap, skipped })
    }
}

/// `line ~xxxxxxxx`: the line and its FNV-1a (32-bit) checksum in hex, so
/// that a torn write or a hand edit of a record is found, not believed.
pub fn seal(line: &str) -> String {
    format!("{line} ~{:08x}", fnv1a(line.as_bytes()))
}

/// The record of a sealed line; `Err` says why it is not to be believed.
pub fn unseal(line: &str) -> Result<&str, String> {
    let (record, sum) = line.rsplit_once(" ~").ok_or_else(|| "no checksum (a torn or edited line)".to_string())?;
    let want = u32::from_str_radix(sum.trim_end(), 16).map_err(|_| "checksum field is not hex (a torn or edited line)".to_string())?;
    if sum.trim_end().len() != 8 || fnv1a(record.as_bytes()) != want {
        return Err("checksum does not match (a torn or edited line)".into());
    }
    Ok(record)
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

fn parse_line(line: &str, snap: &mut Snapshot, old_bucket_s: &mut u64, legacy: &mut BTreeMap<u64, u64>) -> Result<(), String> {
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    let num = |k: usize| -> Result<u64, String> {
        fields.get(k).and_then(|f| f.parse().ok()).ok_or_else(|| format!("field {} is not a whole number", k + 1))
    };
    let name = |k: usize| -> Result<String, String> {
        fields.get(k).and_then(|f| unescape(f)).ok_or_else(|| format!("field {} is not an escaped name", k + 1))
    };
    let amount = |k: usize| -> Result<f64, String> {
        fields
            .get(k)
            .and_then(|f| f.parse::<f64>().ok())
            .filter(|x| x.is_finite() && (0.0..=MAX_GPU_SECONDS).contains(x))
            .ok_or_else(|| format!("field {} is not a number from 0 to {MAX_GPU_SECONDS:e}", k + 1))
    };
    let flag = |k: usize| -> Result<bool, String> {
        match num(k)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(format!("field {} is not 0 or 1", k + 1)),
        }
    };
    match fields.first().copied() {
        None => {}
        Some(c) if c.starts_with('#') => {}
        Some("saved_at") => snap.saved_at = num(1)?,
        Some("geometry") => {
            let b = num(1)?;
            if b == 0 {
                return Err("bucket of 0 seconds".into());
            }
            *old_bucket_s = b;
        }
        Some("charged") => {
            if fields.len() != 3 {
                return Err("expected `charged <job> <unix s>`".into());
            }
            legacy.insert(num(1)?, num(2)?);
        }
        Some("run") => {
            if fields.len() != 12 && fields.len() != 13 {
                return Err(
                    "expected `run <job> <start> <charged> <seen> <active> <gpus> <contract> <resumable> <earlier> <account> <user> [<weight>]`"
                        .into(),
                );
            }
            let weight = match fields.get(12) {
                None => Weight::ONE,
                Some(f) => f.parse::<f64>().ok().and_then(Weight::new).ok_or_else(|| "field 13 is not a weight (a number > 0)".to_string())?,
            };
            let gpus = u32::try_from(num(6)?).map_err(|_| "GPU count out of range".to_string())?;
            let r = RunRecord {
                start_s: num(2)?,
                charged_s: num(3)?,
                seen_s: num(4)?,
                active: flag(5)?,
                gpus,
                weight,
                contract: Contract::new(num(7)?, flag(8)?),
                earlier_s: num(9)?,
                account: name(10)?.into(),
                user: name(11)?.into(),
                prev_start_s: 0,
                preempted_run_s: 0,
            };
            snap.runs.insert(num(1)?, r);
        }
        Some("requeue") => {
            if fields.len() != 4 {
                return Err("expected `requeue <job> <start of the run closed last> <start of a run the scheduler preempted>`".into());
            }
            let (prev, preempted) = (num(2)?, num(3)?);
            if !snap.runs.set_requeue(num(1)?, prev, preempted) {
                return Err("no `run` record of this job before it".into());
            }
        }
        Some("use") => {
            if fields.len() != 5 {
                return Err("expected `use <bucket> <account> <user> <gpu_seconds>`".into());
            }
            let bucket = num(1)?;
            // Whole GPU-seconds, as written (exact past 2^53); a fraction
            // (older or hand-written files) is rounded.
            let whole = match fields[4].parse::<u64>() {
                Ok(w) => w,
                Err(_) => {
                    let gs: f64 = fields[4].parse().map_err(|_| "GPU-seconds is not a number".to_string())?;
                    if !(gs.is_finite() && (0.0..=MAX_GPU_SECONDS).contains(&gs)) {
                        return Err(format!("GPU-seconds must be a number from 0 to {MAX_GPU_SECONDS:e} (the ledger's range)"));
                    }
                    gs.round() as u64
                }
            };
            let start = bucket.checked_mul(*old_bucket_s).ok_or_else(|| "bucket out of range".to_string())?;
            let key = UsageKey { account: name(2)?.into(), user: name(3)?.into() };
            snap.ledger.add_whole(start / snap.ledger.bucket_s(), &key, whole);
        }
        Some("owe") => {
            if fields.len() != 6 {
                return Err("expected `owe <bucket> <account> <entitled_gs> <asked_gs> <unallocated_gs>`".into());
            }
            let bucket = num(1)?;
            let start = bucket.checked_mul(*old_bucket_s).ok_or_else(|| "bucket out of range".to_string())?;
            let asked = Asked { entitled_gs: amount(3)?, asked_gs: amount(4)?, unallocated_gs: amount(5)? };
            snap.owed.add(start / snap.owed.bucket_s(), &name(2)?.into(), asked);
        }
        Some("load") => {
            if fields.len() != 4 {
                return Err("expected `load <account> <running GPUs> <waiting GPUs>`".into());
            }
            snap.load.insert(name(1)?, (amount(2)?, amount(3)?));
        }
        Some("gpus") => {
            if fields.len() != 3 {
                return Err("expected `gpus <type, or - for untyped> <GPUs>`".into());
            }
            let n = u32::try_from(num(2)?).map_err(|_| "GPU count out of range".to_string())?;
            let gpu_type = match fields[1] {
                "-" => None,
                _ => Some(name(1)?.into()),
            };
            snap.inventory.insert(gpu_type, n);
        }
        Some("tick") => {
            if fields.len() != 2 {
                return Err("expected `tick <microseconds>`".into());
            }
            snap.tick_us = num(1)?;
        }
        Some(other) => return Err(format!("unknown record `{other}`")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HOUR, HOUR_S, WEEK_S};

    fn parse(text: &str, b: u64, w: u64) -> Result<Snapshot, StateError> {
        Snapshot::parse(text, b, w).map(|p| p.snapshot)
    }

    #[test]
    fn round_trip() {
        let mut l = Ledger::new(HOUR_S, WEEK_S).unwrap();
        l.charge(&UsageKey::new("a", "u"), 2, 1000, 9000);
        l.charge(&UsageKey::new("b", "Jane Doe"), 1, 0, 10);
        l.charge(&UsageKey::new("c", ""), 1, 0, 10);
        let mut s = Snapshot::new(l);
        s.saved_at = 9000;
        s.tick_us = 18_250;
        s.runs.insert(
            42,
            RunRecord {
                start_s: 1000,
                charged_s: 8000,
                seen_s: 9000,
                active: true,
                account: "a".into(),
                user: "100% me".into(),
                gpus: 2,
                weight: Weight::ONE,
                contract: Contract::new(7200, true),
                earlier_s: 5,
                prev_start_s: 500,
                preempted_run_s: 500,
            },
        );
        s.runs.insert(
            44,
            RunRecord {
                start_s: 2000,
                charged_s: 10,
                seen_s: 2010,
                active: true,
                account: "b".into(),
                user: "u".into(),
                gpus: 8,
                weight: Weight::new(2.2).unwrap(),
                contract: Contract::new(3600, false),
                earlier_s: 0,
                prev_start_s: 0,
                preempted_run_s: 0,
            },
        );
        s.inventory.insert(Some("b200".into()), 32);
        s.inventory.insert(None, 8);
        s.runs.set_legacy_mark(43, 8000);
        let held = crate::fairness::Held { rate_gpus: 2.5, demand_gpus: 1.0 / 3.0, unallocated_gpus: 0.0 };
        s.owed.record(&"a".into(), held, 1000, 9000);
        s.load.insert("Jane Doe's team".into(), (8.0, 0.5));
        let text = s.to_text();
        assert!(text.contains("\nowe 0 a 6500 "), "{text}");
        assert!(text.contains(" b Jane%20Doe "), "{text}");
        let sealed = |l: &str| format!("\n{}\n", seal(l));
        assert!(text.starts_with("tally-state 3\n"), "{text}");
        assert!(text.contains(&sealed("run 42 1000 8000 9000 1 2 7200 1 5 a 100%25%20me")), "{text}");
        assert!(text.contains(&sealed("requeue 42 500 500")), "{text}");
        assert!(text.contains(&sealed("run 44 2000 10 2010 1 8 3600 0 0 b u 2.2")), "{text}");
        assert!(text.ends_with(&format!("{}{}{}", sealed("gpus - 8"), &sealed("gpus b200 32")[1..], &sealed("tick 18250")[1..])), "{text}");
        assert_eq!(Snapshot::parse(&text, 3600, WEEK_S), Ok(Parsed { snapshot: s, skipped: vec![] }));
    }

    #[test]
    fn a_torn_or_edited_record_is_found_not_believed() {
        let mut l = Ledger::new(HOUR_S, WEEK_S).unwrap();
        l.charge(&UsageKey::new("pretrain", "alice"), 1, 0, 2_830);
        l.charge(&UsageKey::new("vision", "bob"), 1, 0, 100);
        let text = Snapshot::new(l).to_text();
        let use_line = text.lines().find(|l| l.starts_with("use") && l.contains("pretrain")).unwrap();
        // Cut in the middle of the number (a torn write), or the number edited.
        let cut = &use_line[..use_line.find("alice ").unwrap() + "alice 2".len()];
        let edited = use_line.replace(" 2830 ", " 1 ");
        for bad in [cut.to_string(), edited] {
            let damaged = text.replace(use_line, &bad);
            let p = Snapshot::parse(&damaged, 3600, WEEK_S).unwrap();
            assert_eq!(p.skipped.len(), 1, "{damaged}");
            assert!(p.skipped[0].1.contains("a torn or edited line"), "{:?}", p.skipped);
            let u = p.snapshot.ledger.usage(100);
            assert_eq!(u.account_gpu_hours("pretrain"), 0.0, "the damaged record is not believed");
            assert!(u.account_gpu_hours("vision") > 0.0, "the others are kept");
        }
        // Version 2 files (no checksums) are still read.
        let v2 = Snapshot::parse("tally-state 2\nuse 0 a u 3600\n", 3600, WEEK_S).unwrap();
        assert!(v2.skipped.is_empty());
    }

    #[test]
    fn names_escape_and_unescape() {
        for n in ["", "alice", "Jane Doe", "a%b", "tab\there", "ünï cödé", "%00"] {
            let e = escape(n);
            assert!(!e.is_empty() && !e.contains(char::is_whitespace), "{n:?} -> {e:?}");
            assert_eq!(unescape(&e).as_deref(), Some(n), "{e}");
        }
        for bad in ["%", "%4", "%zz", "%FF", "a%0", "a\0b"] {
            assert_eq!(unescape(bad), None, "{bad}");
        }
    }

    #[test]
    fn rebuckets_on_new_geometry() {
        let text = "tally-state 1\ngeometry 3600 604800\nuse 3 a u 100\n";
        let s = parse(text, 7200, 604_800).unwrap();
        assert_eq!(s.ledger.entries().map(|(b, _, v)| (b, v)).collect::<Vec<_>>(), vec![(1, 100.0)]);
    }

    #[test]
    fn version_one_marks_are_kept() {
        let s = parse("tally-state 1\ncharged 7 5000\n", 3600, 3600).unwrap();
        assert_eq!(s.runs.legacy_marks().collect::<Vec<_>>(), vec![(7, 5000)]);
    }

    #[test]
    fn a_bad_line_costs_that_line_only() {
        assert_eq!(parse("garbage", 3600, 3600), Err(StateError::NotState));
        assert_eq!(parse("", 3600, 3600), Err(StateError::NotState));
        assert_eq!(parse("tally-state 4\nuse 1 a u 5\n", 3600, 3600), Err(StateError::Newer(4)));
        let p = Snapshot::parse("tally-state 2\nuse 1 a u\nuse 1 a u NaN\nfrobnicate\nuse 1 b v 5\n", 3600, 3600).unwrap();
        assert_eq!(p.skipped.iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(p.skipped[2].1, "unknown record `frobnicate`");
        let o = Snapshot::parse("tally-state 2\nowe 1 a 5 NaN 0\nowe 1 a 5 1\nload a -1 0\nload a inf 0\nowe 1 a 5 6 7\nload b 2 3\n", 3600, 3600)
            .unwrap();
        assert_eq!(o.skipped.iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![2, 3, 4, 5]);
        assert_eq!(o.snapshot.owed.entries().map(|(b, a, x)| (b, a.to_string(), x.asked_gs)).collect::<Vec<_>>(), vec![(1, "a".into(), 6.0)]);
        assert_eq!(o.snapshot.load.get("b"), Some(&(2.0, 3.0)));
        let g = Snapshot::parse(
            "tally-state 2\ngpus h100 8 9\ngpus h100 -1\nrun 1 2 3 4 1 8 0 0 0 a u 0\nrun 1 2 3 4 1 8 0 0 0 a u x\ngpus h100 8\n",
            3600,
            3600,
        )
        .unwrap();
        assert_eq!(g.skipped.iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![2, 3, 4, 5]);
        assert_eq!(g.skipped[2].1, "field 13 is not a weight (a number > 0)");
        assert_eq!(g.snapshot.inventory.into_iter().collect::<Vec<_>>(), vec![(Some("h100".into()), 8)]);
        // Found by fuzzing (fuzz/corpus/state): sums past u64 saturate, damage is skipped.
        let q = Snapshot::parse("tally-state 2\nuse 0 a u 1e20\nuse 0 a u 1e15\nuse 0 a u 1e15\nuse 1 a u 1e15\n", 3600, 7200).unwrap();
        assert_eq!(q.skipped.len(), 1);
        assert_eq!(q.snapshot.ledger.usage(3600).account_gpu_hours("a"), 3e15 / HOUR);
        // What saturated saves and reads back the same (a sum of lines, or of
        // buckets merged by a new geometry, is never refused on reload).
        let r = Snapshot::parse("tally-state 2\nuse 0 a u 1.8e19\nuse 0 a u 1.8e19\nuse 1 a u 1e15\n", 3600, 7200).unwrap();
        let text = r.snapshot.to_text();
        for (b, w) in [(3600, 7200), (7200, 7200)] {
            let again = Snapshot::parse(&text, b, w).unwrap();
            assert!(again.skipped.is_empty(), "{:?}", again.skipped);
            let twice = Snapshot::parse(&again.snapshot.to_text(), b, w).unwrap();
            assert!(twice.skipped.is_empty() && twice.snapshot == again.snapshot);
        }
        assert_eq!(p.snapshot.ledger.entries().map(|(_, k, v)| (k.account.clone(), v)).collect::<Vec<_>>(), vec![("b".into(), 5.0)]);
    }
}
