//! Fuzz target bodies for Tally's parsers.
//!
//! Each `pub fn NAME(data: &[u8])` is one target. It feeds the bytes (as
//! text, invalid UTF-8 replaced) to a parser and checks properties that must
//! hold for *every* input; a panic anywhere, in the parser or in a property,
//! is a finding. The same bodies run under:
//!
//! - libFuzzer: `fuzz_targets/NAME.rs`, built by `cargo +nightly fuzz run NAME`;
//! - the stable smoke: `tests/smoke.rs` (`cargo test --manifest-path
//!   fuzz/Cargo.toml`) runs every body over its seed corpus
//!   (`corpus/NAME/`) and a few thousand deterministic mutations of it;
//! - replay: `cargo run --manifest-path fuzz/Cargo.toml --bin NAME -- FILE`
//!   (stable, a plain backtrace with `RUST_BACKTRACE=1`).
//!
//! Targets: [`contract`] (comment parser, rules, normalisation),
//! [`duration`] (`parse_duration`/`format_duration`), [`config`]
//! (`tally.toml`), [`scenario`] (planner scenarios), [`state`] (the ledger's
//! state file), [`trace`] (the canonical trace CSV), [`import`] (ElasticFlow
//! and SWF importers).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use tally_allocator::{
    format_duration, parse_comment, parse_duration, Contract, ContractRules, LongJobVerdict, LongJobs, MissingContract, Snapshot, HOUR_S, WEEK_S,
};

pub mod smoke;

/// The targets, by name, as the smoke test and the replay binaries see them.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("contract", contract),
    ("duration", duration),
    ("config", config),
    ("scenario", scenario),
    ("state", state),
    ("trace", trace),
    ("import", import),
];

fn text(data: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Contract rules to check comments against: the default, a tight cluster
/// with a default contract and an unallocated floor, one that refuses
/// missing contracts and long jobs, and one with the largest maximum a
/// config can give.
fn rule_sets() -> [ContractRules; 4] {
    let d = ContractRules::default();
    [
        d,
        ContractRules {
            max_s: HOUR_S,
            unallocated_below_s: 600,
            missing: MissingContract::Default(Contract::new(1800, false)),
            long_jobs: LongJobs::Warn,
        },
        ContractRules { missing: MissingContract::Reject, long_jobs: LongJobs::Reject, ..d },
        ContractRules { max_s: u64::MAX, unallocated_below_s: u64::MAX, missing: MissingContract::Default(Contract::new(u64::MAX, true)), ..d },
    ]
}

/// The job comment: `parse_comment`, `ContractRules::resolve`,
/// `normalise_comment`, `check_time_limit`, `long_job` and every error's
/// text. Properties, for each rule set:
/// - `resolve` fails exactly when parsing or the rules refuse;
/// - a resolved contract's `canonical()` spelling parses back to the same
///   contract with no user text, and resolves to the same contract;
/// - `long_job` answers for exactly the long jobs (`is_long`);
/// - `normalise_comment` succeeds exactly when `resolve` does; its output
///   resolves to the same contract, keeps the user's text as parsed, and
///   normalises to itself.
pub fn contract(data: &[u8]) {
    let s = text(data);
    let parsed = parse_comment(&s);
    if let Err(e) = &parsed {
        let _ = e.to_string();
    }
    for rules in rule_sets() {
        let resolved = rules.resolve(Some(&s));
        match (&parsed, &resolved) {
            (Err(pe), Err(re)) => assert_eq!(pe, re, "resolve reports the parse error"),
            (Err(pe), Ok(c)) => panic!("parse_comment failed ({pe}) but resolve gave {c:?}"),
            (Ok(p), r) => assert_eq!(&rules.resolve_parsed(p), r, "resolve == resolve_parsed(parse_comment)"),
        }
        match &resolved {
            Ok(c) => {
                assert!(c.min_runtime_s <= rules.max_s, "{c:?} above the maximum {}", rules.max_s);
                let canon = c.canonical();
                let back = parse_comment(&canon).unwrap_or_else(|e| panic!("canonical {canon:?} does not parse: {e}"));
                assert_eq!(back.contract_s, Some(c.min_runtime_s), "canonical {canon:?}");
                assert_eq!(back.resumable, c.resumable, "canonical {canon:?}");
                assert!(back.rest.is_empty(), "canonical {canon:?} left user text {:?}", back.rest);
                assert_eq!(rules.resolve(Some(&canon)), Ok(*c), "canonical {canon:?} resolves differently");
                assert!(rules.check_time_limit(*c, Some(c.min_runtime_s)).is_ok());
                assert!(rules.check_time_limit(*c, None).is_ok());
                if c.min_runtime_s > 0 {
                    let e = rules.check_time_limit(*c, Some(c.min_runtime_s - 1)).expect_err("limit below contract");
                    let _ = e.to_string();
                }
                for limit in [None, Some(0), Some(rules.max_s), Some(rules.max_s.saturating_add(1)), Some(u64::MAX)] {
                    // Every long job, and only a long job, gets the warning (or the refusal).
                    assert_eq!(rules.long_job(*c, limit).is_some(), rules.is_long(*c, limit), "{c:?}, limit {limit:?}");
                    if let Some(LongJobVerdict::Warn(e) | LongJobVerdict::Refuse(e)) = rules.long_job(*c, limit) {
                        let _ = e.to_string();
                    }
                }
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
        let normalised = rules.normalise_comment(&s);
        assert_eq!(normalised.is_ok(), resolved.is_ok(), "normalise {normalised:?} vs resolve {resolved:?}");
        if let Ok(n) = &normalised {
            assert_eq!(rules.resolve(Some(n)), resolved, "normalised {n:?} resolves differently");
            let rest = parse_comment(n).map(|p| p.rest);
            assert_eq!(rest, parsed.clone().map(|p| p.rest), "normalised {n:?} changed the user's text");
            assert_eq!(rules.normalise_comment(n).as_ref(), Ok(n), "normalising {n:?} again changes it");
        }
    }
}

/// Durations: `parse_duration` never panics; what it accepts formats to a
/// spelling that parses back to the same seconds and is a fixed point; and
/// `format_duration` of any `u64` (the first 8 bytes) parses back.
pub fn duration(data: &[u8]) {
    let s = text(data);
    match parse_duration(&s) {
        Ok(secs) => {
            let f = format_duration(secs);
            assert_eq!(parse_duration(&f), Ok(secs), "{s:?} -> {secs} -> {f:?}");
            assert_eq!(format_duration(parse_duration(&f).unwrap_or(0)), f);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    if let Some(bytes) = data.get(..8) {
        let n = u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
        let f = format_duration(n);
        assert_eq!(parse_duration(&f), Ok(n), "format_duration({n}) = {f:?}");
    }
}

/// `tally.toml`: `Config::parse` never panics; an error has at least one
/// problem and a text; a valid config gives a ledger
/// (`new_ledger` must not panic), allocations for a few cluster sizes, a
/// fair-share ranking, and contract rules that resolve comments.
pub fn config(data: &[u8]) {
    let s = text(data);
    match tally_config::Config::parse(&s, "fuzz.toml") {
        Ok(c) => {
            let ledger = c.new_ledger();
            assert_eq!((ledger.bucket_s(), ledger.window_s()), (c.bucket_s, c.window_s));
            for gpus in [c.ranking_gpus(), 1, 8, 256, u32::MAX] {
                match c.allocation(gpus) {
                    Ok(a) => {
                        for (id, _) in c.tree.walk() {
                            let _ = (a.rate_gpus(id), a.fraction(id));
                        }
                    }
                    Err(e) => {
                        assert!(!e.problems.is_empty());
                        let _ = e.to_string();
                    }
                }
            }
            for now in [0, 1_796_083_200, u64::MAX] {
                if let Err(e) = c.fair_share(&ledger, now) {
                    let _ = e.to_string();
                }
            }
            for comment in ["", "contract=1h resumable x", "contract=0", "contract=8h"] {
                if let Ok(n) = c.contracts.normalise_comment(comment) {
                    assert_eq!(c.contracts.normalise_comment(&n).as_ref(), Ok(&n));
                }
            }
            for user in c.users.keys() {
                assert!(c.account_for(None, user).is_some());
            }
        }
        Err(e) => {
            assert!(!e.problems.is_empty(), "an error without a problem");
            assert!(!e.to_string().is_empty());
        }
    }
}

/// Planner scenarios: `scenario::parse` never panics (nor allocates without
/// bound); a valid scenario keeps the documented limits.
pub fn scenario(data: &[u8]) {
    let s = text(data);
    match tally_config::scenario::parse(&s, "fuzz.toml") {
        Ok(sc) => {
            assert!((1..=10_000).contains(&sc.steps), "steps {}", sc.steps);
            assert!(sc.step_s > 0 && sc.gpus > 0 && sc.gpus_per_node.is_power_of_two());
            assert!(sc.decay > 0.0 && sc.decay <= 1.0);
            for j in &sc.jobs {
                assert!(j.gpus.is_power_of_two() && j.gpus <= sc.gpus, "{j:?}");
                assert!(j.duration_steps >= 1, "{j:?}");
            }
            for sv in &sc.services {
                assert_eq!(sv.demand.len(), sc.steps, "service {} demand", sv.name);
            }
        }
        Err(e) => {
            assert!(!e.problems.is_empty(), "an error without a problem");
            let _ = e.to_string();
        }
    }
}

/// The ledger's state file (`allocator::state`): `Snapshot::parse` never
/// panics, for the usual geometry and for a re-bucketing one; what parses
/// re-serialises with `to_text` into text that parses with no skipped line
/// to the same snapshot and serialises to the same text; the parsed
/// ledger's window sums and pruning do not panic. The input as a name:
/// `escape` gives one whitespace-free field that `unescape` reads back.
pub fn state(data: &[u8]) {
    use tally_allocator::state::{escape, unescape};
    let s = text(data);
    for (bucket_s, window_s) in [(HOUR_S, WEEK_S), (2 * HOUR_S, WEEK_S)] {
        match Snapshot::parse(&s, bucket_s, window_s) {
            Ok(parsed) => {
                let snap = &parsed.snapshot;
                let t = snap.to_text();
                let again = Snapshot::parse(&t, bucket_s, window_s).unwrap_or_else(|e| panic!("to_text output does not parse: {e}\n{t}"));
                assert!(again.skipped.is_empty(), "to_text output has bad lines {:?}\n{t}", again.skipped);
                assert_eq!(&again.snapshot, snap, "round trip changed the snapshot\n{t}");
                assert_eq!(again.snapshot.to_text(), t);
                for now in [0, snap.saved_at, u64::MAX] {
                    let _ = snap.ledger.usage(now);
                }
                let mut pruned = snap.ledger.clone();
                pruned.prune(snap.saved_at);
                let _ = pruned.usage(snap.saved_at);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    if !s.contains('\0') {
        let field = escape(&s);
        assert!(!field.is_empty() && !field.contains(|c: char| c.is_ascii_whitespace()), "escape({s:?}) = {field:?}");
        assert_eq!(unescape(&field).as_deref(), Some(&*s), "escape({s:?}) = {field:?}");
    }
}

/// The canonical trace CSV: `parse_csv` never panics; what parses writes
/// back (`to_csv`) as text that parses to the same trace and writes to the
/// same text; the trace's summaries do not panic.
pub fn trace(data: &[u8]) {
    use tally_sim::trace::{parse_csv, to_csv};
    let s = text(data);
    match parse_csv(&s) {
        Ok(t) => {
            let csv = to_csv(&t);
            let again = parse_csv(&csv).unwrap_or_else(|e| panic!("to_csv output does not parse: {e}\n{csv}"));
            assert_eq!(again, t, "round trip changed the trace\n{csv}");
            assert_eq!(to_csv(&again), csv);
            let _ = (t.span_s(), t.gpu_hours(), t.mean_busy_gpus(), t.max_job_id(), t.class_counts());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// The importers: `elasticflow` and `swf` (with 1, 3 and 2^32-1 processors
/// per GPU) never panic, and what they import is a valid canonical trace:
/// `to_csv` of it parses back to the same trace.
pub fn import(data: &[u8]) {
    use tally_sim::import::{elasticflow, swf, SwfOptions};
    use tally_sim::trace::{parse_csv, to_csv, Trace};
    let s = text(data);
    let check = |t: &Trace| {
        let csv = to_csv(t);
        let again = parse_csv(&csv).unwrap_or_else(|e| panic!("imported trace is not canonical: {e}\n{csv}"));
        assert_eq!(&again, t, "imported trace changed on a round trip\n{csv}");
    };
    match elasticflow(&s) {
        Ok(t) => check(&t),
        Err(e) => {
            let _ = e.to_string();
        }
    }
    for procs_per_gpu in [1, 3, u32::MAX] {
        match swf(&s, &SwfOptions { procs_per_gpu }) {
            Ok(r) => {
                check(&r.trace);
                let _ = r.skip_summary(3);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

/// Files under `path` (itself if a file), sorted, hidden files left out.
pub fn files_under(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(path)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The replay binaries' `main`: run `body` over every file (or every file of
/// every directory) given as an argument, naming each first, so that a
/// panic's backtrace follows the name of the input that caused it.
pub fn replay_main(name: &'static str, body: fn(&[u8])) {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() {
        eprintln!("usage: {name} FILE_OR_DIR...  (runs the `{name}` fuzz body over each file)");
        std::process::exit(2);
    }
    let mut n = 0;
    for arg in &args {
        for file in files_under(arg) {
            let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            eprintln!("{name}: {} ({} bytes)", file.display(), data.len());
            smoke::with_current(name, &data, || body(&data));
            n += 1;
        }
    }
    eprintln!("{name}: {n} inputs, no panic");
}
