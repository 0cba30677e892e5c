//! The stable smoke of every fuzz body: its seed corpus plus a few thousand
//! deterministic mutations (`TALLY_FUZZ_SMOKE_MUTATIONS`, default 3000).
//! A smoke, not fuzzing: see src/smoke.rs and docs/reliability.md.

use tally_fuzz::smoke::{smoke, CappedAlloc};

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

fn mutations() -> usize {
    std::env::var("TALLY_FUZZ_SMOKE_MUTATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000)
}

fn run(target: &'static str) {
    let body = tally_fuzz::TARGETS.iter().find(|(n, _)| *n == target).map(|(_, b)| *b).expect("known target");
    let (seeds, inputs) = smoke(target, body, mutations());
    eprintln!("smoke {target}: {seeds} seeds, {inputs} inputs, no panic");
}

#[test]
fn smoke_contract() {
    run("contract");
}

#[test]
fn smoke_duration() {
    run("duration");
}

#[test]
fn smoke_config() {
    run("config");
}

#[test]
fn smoke_scenario() {
    run("scenario");
}

#[test]
fn smoke_state() {
    run("state");
}

#[test]
fn smoke_trace() {
    run("trace");
}

#[test]
fn smoke_import() {
    run("import");
}

#[test]
fn every_target_has_a_smoke_and_a_libfuzzer_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let me = std::fs::read_to_string(dir.join("tests/smoke.rs")).unwrap();
    for (name, _) in tally_fuzz::TARGETS {
        assert!(me.contains(&format!("fn smoke_{name}()")), "no smoke test for {name}");
        assert!(dir.join(format!("fuzz_targets/{name}.rs")).is_file(), "no fuzz_targets/{name}.rs");
        assert!(!tally_fuzz::files_under(&tally_fuzz::smoke::corpus_dir(name)).is_empty(), "no seeds for {name}");
    }
}

/// The state seed is what the code writes (regenerate it with
/// `TALLY_FUZZ_WRITE_SEEDS=1 cargo test --manifest-path fuzz/Cargo.toml state_seed`).
#[test]
fn state_seed_is_what_the_code_writes() {
    use tally_allocator::runs::RunRecord;
    use tally_allocator::{Contract, Ledger, Snapshot, UsageKey, Weight, HOUR_S, WEEK_S};
    let mut l = Ledger::new(HOUR_S, WEEK_S).unwrap();
    l.charge(&UsageKey::new("pretrain", "alice"), 8, 1_796_080_000, 1_796_083_140);
    l.charge(&UsageKey::new("climate", "carol smith"), 2, 1_796_079_000, 1_796_083_200);
    l.charge(&UsageKey::new("vision", "dave"), 1, 1_795_500_000, 1_795_503_600);
    let mut s = Snapshot::new(l);
    s.saved_at = 1_796_083_200;
    s.runs.insert(
        4711,
        RunRecord {
            start_s: 1_796_080_000,
            charged_s: 3140,
            seen_s: 1_796_083_140,
            active: true,
            account: "pretrain".into(),
            user: "alice".into(),
            gpus: 8,
            weight: Weight::ONE,
            contract: Contract::new(7200, false),
            earlier_s: 0,
            prev_start_s: 0,
            preempted_run_s: 0,
        },
    );
    s.runs.insert(
        4712,
        RunRecord {
            start_s: 0,
            charged_s: 4200,
            seen_s: 1_796_083_200,
            active: false,
            account: "climate".into(),
            user: "carol smith".into(),
            gpus: 2,
            weight: Weight::ONE,
            contract: Contract::new(3600, true),
            earlier_s: 600,
            prev_start_s: 0,
            preempted_run_s: 0,
        },
    );
    s.runs.set_legacy_mark(4700, 1_796_000_000);
    let text = s.to_text();
    let file = tally_fuzz::smoke::corpus_dir("state").join("seed-small.state");
    if std::env::var_os("TALLY_FUZZ_WRITE_SEEDS").is_some() {
        std::fs::write(&file, &text).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "{} is stale", file.display());
}
