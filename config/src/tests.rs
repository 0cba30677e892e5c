//! Every problem a config file can have, with the message a user sees.

use super::*;

const GOOD: &str = r#"
[cluster]
gpus = 64
[ledger]
window = "7d"
bucket = "1h"
[contracts]
max = "8h"
missing = "1h"
[priority]
calc_period = "30s"
[accounts.ai]
share = 60
[accounts.nlp]
parent = "ai"
share = 50
[accounts.ops]
gpu_hours = 500
[users]
alice = "nlp"
"#;

#[test]
fn good_config_validates() {
    let c = Config::parse(GOOD, "good.toml").unwrap();
    assert_eq!(c.window_s, 7 * 86_400);
    assert_eq!(c.calc_period_s, 30);
    assert_eq!(c.contracts.missing, MissingContract::Default(Contract::new(3600, false)));
    assert_eq!(c.tree.len(), 4);
    assert_eq!(c.account_for(None, "alice"), Some("nlp"));
    assert_eq!(c.account_for(Some("ops"), "alice"), Some("ops"));
    assert_eq!(c.account_for(Some(""), "nobody"), None);
    let a = c.allocation(64).unwrap();
    assert!((a.gpu_hours[c.tree.id("nlp").unwrap()] - 0.3 * 64.0 * 168.0).abs() < 1e-9);
}

#[test]
fn empty_file_gets_documented_defaults() {
    let c = Config::parse("", "empty.toml").unwrap();
    assert_eq!((c.window_s, c.bucket_s, c.calc_period_s), (7 * 86_400, 3600, 60));
    assert_eq!(c.contracts, ContractRules::default());
    assert!(c.submit.require_funded_account);
    assert!(!c.submit.power_of_two_gpus);
    assert_eq!(c.cluster.gpus_per_node, 8);
}

#[test]
fn shipped_example_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/tally.toml");
    let c = Config::load(Path::new(path)).unwrap();
    assert_eq!(c.tree.leaves().count(), 15);
    assert_eq!(c.tree.node(0).children.len(), 3);
    c.allocation(256).unwrap();
}

/// (file text, expected message, exactly)
const BROKEN: &[(&str, &str)] = &[
    (
        "[accounts.a]\nshare = 60\n[accounts.b]\nshare = 50\n",
        "t.toml: accounts: children of `root` are given 110.0% of it, more than 100%",
    ),
    (
        "[accounts.a]\nshare = 140\n",
        "t.toml:1: accounts.a.share: account `a`: share 140 is not a percentage in (0, 100]",
    ),
    ("[accounts.a]\nshare = -5\n", "t.toml:1: accounts.a.share: account `a`: share -5 is not a percentage in (0, 100]"),
    (
        "[accounts.a]\ngpu_hours = -1.5\n",
        "t.toml:1: accounts.a.gpu_hours: account `a`: gpu_hours -1.5 is not a finite number >= 0",
    ),
    ("[accounts.a]\ngpu_hours = nan\n", "t.toml:1: accounts.a.gpu_hours: account `a`: gpu_hours NaN is not a finite number >= 0"),
    ("[accounts.a]\ngpu_hours = inf\n", "t.toml:1: accounts.a.gpu_hours: account `a`: gpu_hours inf is not a finite number >= 0"),
    (
        "[accounts.a]\nparent = \"nope\"\nshare = 5\n",
        "t.toml:1: accounts.a.parent: account `a` has unknown parent `nope`",
    ),
    (
        "[accounts.a]\nparent = \"b\"\nshare = 5\n[accounts.b]\nparent = \"a\"\nshare = 5\n",
        "t.toml:1: accounts.a.parent: cycle in the account tree: a -> b -> a",
    ),
    (
        "\n[accounts.a]\nshare = 5\ngpu_hours = 10\n",
        "t.toml:2: accounts.a: give `share` (percent of the parent) or `gpu_hours` (per window), not both",
    ),
    ("[accounts.a]\nshar = 5\n", "t.toml:2: accounts.a.shar: unknown field `shar`, expected one of `parent`, `share`, `gpu_hours`"),
    ("[ledger]\nwindow = \"7x\"\n", "t.toml:2: ledger.window: unknown unit `x` in `7x` (use d, h, m or s)"),
    ("[ledger]\nwindow = 7\n", "t.toml:2: ledger.window: `7` has no unit: write it as a string such as \"7m\" or \"7h\""),
    (
        "[ledger]\nwindow = \"90m\"\nbucket = \"1h\"\n",
        "t.toml: ledger.window: 1h30m is not a whole number of buckets of 1h (e.g. window = \"7d\", bucket = \"1h\")",
    ),
    ("[contracts]\nmax = \"-8h\"\n", "t.toml:2: contracts.max: negative duration `-8h` (durations are >= 0)"),
    (
        "[contracts]\nmissing = \"maybe\"\n",
        "t.toml: contracts.missing: expected \"unallocated\", \"reject\" or a default contract such as \"1h\": `maybe` is not a duration (write e.g. 90m, 2h or 1h30m)",
    ),
    ("[contracts]\nmissing = \"9h\"\n", "t.toml: contracts.missing: default contract 9h exceeds contracts.max 8h"),
    ("[cluster]\ngpus = 0\n", "t.toml: cluster.gpus: must be at least 1 (or left out to count the nodes' GPUs)"),
    ("[cluster]\ngpus = -3\n", "t.toml:2: cluster.gpus: invalid value: integer `-3`, expected u32"),
    ("[clutser]\ngpus = 3\n", "t.toml:1: clutser: unknown field `clutser`, expected one of `cluster`, `ledger`, `contracts`, `priority`, `planner`, `log`, `accounts`, `users`"),
    ("[users]\nalice = \"ghost\"\n", "t.toml: users.alice: account `ghost` is not declared under [accounts]"),
    ("[accounts.root]\nshare = 5\n", "t.toml:1: accounts.root: `root` is the implicit top of the tree and cannot be declared"),
    (
        "[cluster]\ngpus = 8\n[accounts.a]\nshare = 10\n[accounts.b]\nparent = \"a\"\ngpu_hours = 500\n",
        "t.toml:3: accounts.a: children of `a` are given 500.0 GPU-hours per window, more than its 134.4",
    ),
    ("[accounts.a\nshare = 5\n", "t.toml:1: invalid table header\nexpected `.`, `]`"),
    (
        "[planner]\nenabled = true\n",
        "t.toml: planner.enabled: the planner needs the cluster's size: set [cluster] gpus (and gpus_per_node)",
    ),
    ("[planner]\ninterval = \"0s\"\n", "t.toml: planner.interval: must be longer than 0 (default \"30m\"; Dharma re-plans every 30-60 min)"),
    ("[planner]\nstep = \"1h\"\nhorizon = \"30m\"\n", "t.toml: planner.horizon: 30m must hold 1 to 1000 steps of 1h (default \"24h\")"),
    ("[planner]\ndecay = 1.5\n", "t.toml: planner.decay: 1.5 is not in (0, 1] (default 0.97 per step)"),
    ("[planner]\nmax_jobs = 0\n", "t.toml: planner.max_jobs: 0 is not in 1..=100000 (default 300)"),
    ("[planner]\nhorizon = 24\n", "t.toml:2: planner.horizon: `24` has no unit: write it as a string such as \"24m\" or \"24h\""),
];

#[test]
fn broken_configs_name_file_line_key_and_expectation() {
    let mut wrong = Vec::new();
    for (text, want) in BROKEN {
        match Config::parse(text, "t.toml") {
            Ok(_) => wrong.push(format!("accepted:\n{text}")),
            Err(e) if e.to_string() != *want => wrong.push(format!("input:\n{text}\n  got: {e}\n want: {want}")),
            Err(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn planner_is_off_by_default_and_configurable() {
    assert_eq!(Config::parse(GOOD, "good.toml").unwrap().planner, None);
    let text = format!("{GOOD}\n[planner]\nenabled = true\ninterval = \"45m\"\nstep = \"30m\"\nhorizon = \"12h\"\nmax_jobs = 50\n");
    let p = Config::parse(&text, "good.toml").unwrap().planner.expect("enabled");
    assert_eq!((p.interval_s, p.rules.step_s, p.rules.steps, p.rules.max_jobs), (2700, 1800, 24, 50));
    assert_eq!((p.rules.decay, p.rules.default_duration_s), (0.97, 3600));
    // Written but not enabled: validated, not run.
    let text = format!("{GOOD}\n[planner]\ninterval = \"45m\"\n");
    assert_eq!(Config::parse(&text, "good.toml").unwrap().planner, None);
}

#[test]
fn several_problems_are_reported_together() {
    let err = Config::parse("[cluster]\ngpus = 0\ngpus_per_node = 0\n[priority]\nage_unit = \"1m\"\n", "t.toml").unwrap_err();
    let keys: Vec<&str> = err.problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, vec!["cluster.gpus", "cluster.gpus_per_node", "priority.age_unit"]);
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let err = Config::load(Path::new("/nonexistent/tally.toml")).unwrap_err();
    assert!(err.to_string().starts_with("/nonexistent/tally.toml: cannot read:"), "{err}");
}

#[test]
fn requeue_budget_and_long_jobs() {
    let c = Config::parse(GOOD, "good.toml").unwrap();
    assert_eq!((c.contracts.max_requeues, c.contracts.long_jobs), (0, tally_allocator::LongJobs::Warn));
    let c = Config::parse("[contracts]\nmax_requeues = 2\nlong_jobs = \"reject\"\n", "t.toml").unwrap();
    assert_eq!((c.contracts.max_requeues, c.contracts.long_jobs), (2, tally_allocator::LongJobs::Reject));
    let err = Config::parse("[contracts]\nmax_requeues = 1000\nlong_jobs = \"maybe\"\n", "t.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "t.toml: contracts.max_requeues: 1000 is too many (0 to 100; default 0): each requeue of a job that is not resumable throws its work away\n\
         t.toml: contracts.long_jobs: expected \"warn\" or \"reject\" (what job_submit does with a job that is not resumable and longer than contracts.max), found \"maybe\""
    );
    let err = Config::parse("[priority]\nage_unit = \"1m\"\n", "t.toml").unwrap_err();
    assert!(err.to_string().contains("priority.age_unit: is no longer used"), "{err}");
}

#[test]
fn quick_jobs_and_the_debug_lane() {
    let c = Config::parse("", "t.toml").unwrap();
    assert_eq!((c.priority.quick_time_limit_s, c.priority.debug_lane_max_gpus), (1800, None));
    let c = Config::parse("[priority]\nquick_time_limit = \"1h\"\ndebug_lane = true\n", "t.toml").unwrap();
    assert_eq!((c.priority.quick_time_limit_s, c.priority.debug_lane_max_gpus), (3600, Some(2)));
    let err = Config::parse("[priority]\ndebug_lane = true\ndebug_lane_gpus = 0\n", "t.toml").unwrap_err();
    assert_eq!(err.to_string(), "t.toml: priority.debug_lane_gpus: must be at least 1 (default 2): the most GPUs a job in the debug lane may ask for");
}
