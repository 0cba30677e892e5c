//! Every problem a config file can have, with the message a user sees.

use super::*;
use tally_allocator::{HOUR_S, WEEK_S};

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
    assert_eq!(c.window_s, WEEK_S);
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
    assert_eq!((c.window_s, c.bucket_s, c.calc_period_s), (WEEK_S, 3600, 60));
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
    assert!(c.cluster.gpu_types.is_empty(), "GPU types are shown, not enabled");
    // The commented [cluster.gpu_types] example, enabled, is valid.
    let text = std::fs::read_to_string(path).unwrap();
    let on = text.replace(
        "# [cluster.gpu_types]\n# h100 = 1.0\n# b200 = { weight = 2.2, gpus = 64 }",
        "[cluster.gpu_types]\nh100 = 1.0\nb200 = { weight = 2.2, gpus = 64 }",
    );
    assert_ne!(on, text);
    let typed = Config::parse(&on, path).unwrap();
    assert!((typed.capacity(256).units - (64.0 * 2.2 + 192.0)).abs() < 1e-9);
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
    // MAX_CLUSTER_GPUS: 2^22.
    (
        "[cluster]\ngpus = 4294967295\n",
        "t.toml: cluster.gpus: 4294967295 GPUs is more than a cluster may have: at most 4194304 (2^22, well past the largest GPU clusters)",
    ),
    (
        "[cluster]\ngpus = 8\ngpus_per_node = 4194305\n",
        "t.toml: cluster.gpus_per_node: 4194305 GPUs is more than a cluster may have: at most 4194304 (2^22, well past the largest GPU clusters)",
    ),
    (
        "[cluster.gpu_types]\nb200 = { weight = 2.2, gpus = 4194305 }\n",
        "t.toml:2: cluster.gpu_types.b200.gpus: 4194305 is not a number of GPUs (1 to 4194304), or leave it out to count Slurm's nodes",
    ),
    (
        "[cluster.gpu_types]\nb200 = { weight = 2.2, gpus = 4194304 }\nh100 = { gpus = 1 }\n",
        "t.toml: cluster.gpu_types: the types' GPUs add up to 4194305: a cluster may have at most 4194304 GPUs (tally_config::MAX_CLUSTER_GPUS)",
    ),
    ("[clutser]\ngpus = 3\n", "t.toml:1: clutser: unknown field `clutser`, expected one of `cluster`, `ledger`, `contracts`, `priority`, `planner`, `log`, `reports`, `accounts`, `users`"),
    ("[users]\nalice = \"ghost\"\n", "t.toml:2: users.alice: account `ghost` is not declared under [accounts]"),
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
    (
        "[cluster]\ngpus = 96\n[cluster.gpu_types]\nh100 = 1.0\nb200 = 0\n",
        "t.toml:5: cluster.gpu_types.b200: weight 0 of GPU type `b200` is not a finite number > 0 (one GPU-hour of it costs `weight` GPU-hours of budget; e.g. b200 = 2.2)",
    ),
    (
        "[cluster.gpu_types]\nb200 = -2.2\n",
        "t.toml:2: cluster.gpu_types.b200: weight -2.2 of GPU type `b200` is not a finite number > 0 (one GPU-hour of it costs `weight` GPU-hours of budget; e.g. b200 = 2.2)",
    ),
    (
        "[cluster.gpu_types]\nb200 = inf\n",
        "t.toml:2: cluster.gpu_types.b200: weight inf of GPU type `b200` is not a finite number > 0 (one GPU-hour of it costs `weight` GPU-hours of budget; e.g. b200 = 2.2)",
    ),
    (
        "[cluster.gpu_types]\nb200 = \"2.2\"\n",
        "t.toml:2: cluster.gpu_types.b200: invalid type: string \"2.2\", expected a weight (a number > 0, e.g. b200 = 2.2) or a table such as b200 = { weight = 2.2, gpus = 32 }",
    ),
    (
        "[cluster.gpu_types]\n\"h 100\" = 1.0\n",
        "t.toml:2: cluster.gpu_types.h 100: GPU type `h 100` is not a GRES type as Slurm spells it (1 to 64 letters, digits, `_`, `-` or `.`, starting with a letter or digit, as in gres.conf's Type=: e.g. h100, a100_80g)",
    ),
    (
        "[cluster.gpu_types]\n\"gpu:h100\" = 1.0\n",
        "t.toml:2: cluster.gpu_types.gpu:h100: GPU type `gpu:h100` is not a GRES type as Slurm spells it (1 to 64 letters, digits, `_`, `-` or `.`, starting with a letter or digit, as in gres.conf's Type=: e.g. h100, a100_80g)",
    ),
    ("[cluster.gpu_types]\n100 = 1.0\n", "t.toml:2: cluster.gpu_types.100: GPU type `100` is only digits: Slurm would read `gpu:100` as a count, not a type"),
    (
        "[cluster.gpu_types]\nb200 = { weight = 2.2, gpu = 32 }\n",
        "t.toml:2: cluster.gpu_types.b200.gpu: unknown field `gpu`, expected `weight` or `gpus`",
    ),
    (
        "[cluster.gpu_types]\nb200 = { weight = 2.2, gpus = 0 }\n",
        "t.toml:2: cluster.gpu_types.b200.gpus: GPU type `b200`: gpus = 0; give the number of GPUs of this type (at least 1), or leave it out to count Slurm's nodes",
    ),
    (
        "[cluster.gpu_types]\nb200 = { weight = 2.2, gpus = -4 }\n",
        "t.toml:2: cluster.gpu_types.b200.gpus: -4 is not a number of GPUs (1 to 4194304), or leave it out to count Slurm's nodes",
    ),
    (
        "[cluster]\ngpus = 16\n[cluster.gpu_types]\nh100 = { gpus = 8 }\nb200 = { weight = 2.2, gpus = 16 }\n",
        "t.toml: cluster.gpu_types: the types' GPUs add up to 24, more than cluster.gpus = 16 (every type's GPUs are part of cluster.gpus)",
    ),
    (
        "[cluster.gpu_types]\nH100 = 1\nh100 = 1.5\n",
        "t.toml:3: cluster.gpu_types.h100: GPU types `H100` and `h100` differ only in case: Slurm matches types as written; keep one spelling",
    ),
    ("[cluster]\ngpu_types = 3\n", "t.toml:2: cluster.gpu_types: invalid type: integer `3`, expected a map"),
    (
        "[cluster]\ngpus = 8\n[cluster.gpu_types]\nb200 = { weight = 0.1, gpus = 8 }\n[accounts.a]\ngpu_hours = 200\n",
        "t.toml: accounts: children of `root` are given 200.0 GPU-hours per window, more than its 134.4",
    ),
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
fn the_planner_grid_is_bounded() {
    // The planner thread inside slurmctld allocates GPUs × steps: 4 million
    // GPUs over 24 steps would be gigabytes (an abort) at its first plan.
    let text = "[cluster]\ngpus = 4194304\n[planner]\nenabled = true\n";
    assert_eq!(
        Config::parse(text, "t.toml").unwrap_err().to_string(),
        "t.toml: planner.horizon: 24 steps of 1h on 4194304 GPUs is 100663296 GPU-steps: the planner allows at most 10000000 \
         (a shorter horizon or longer steps)"
    );
    // Not enabled: nothing is planned. A large cluster with a short horizon: fine.
    assert!(Config::parse("[cluster]\ngpus = 4194304\n[planner]\nenabled = false\n", "t.toml").is_ok());
    let c = Config::parse("[cluster]\ngpus = 65536\n[planner]\nenabled = true\nhorizon = \"8h\"\n", "t.toml").unwrap();
    assert_eq!(c.planner.map(|p| p.rules.steps), Some(8));
}

#[test]
fn several_problems_are_reported_together() {
    let err = Config::parse("[cluster]\ngpus = 0\ngpus_per_node = 0\n[priority]\ncalc_period = \"0s\"\n", "t.toml").unwrap_err();
    let keys: Vec<&str> = err.problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, vec!["cluster.gpus", "cluster.gpus_per_node", "priority.calc_period"]);
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let err = Config::load(Path::new("/nonexistent/tally.toml")).unwrap_err();
    assert!(err.to_string().starts_with("/nonexistent/tally.toml: cannot read:"), "{err}");
}

#[test]
fn long_jobs() {
    let c = Config::parse("", "t.toml").unwrap();
    assert_eq!(c.contracts.long_jobs, tally_allocator::LongJobs::Warn);
    let c = Config::parse("[contracts]\nlong_jobs = \"reject\"\n", "t.toml").unwrap();
    assert_eq!(c.contracts.long_jobs, tally_allocator::LongJobs::Reject);
    let err = Config::parse("[contracts]\nlong_jobs = \"maybe\"\n", "t.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "t.toml: contracts.long_jobs: expected \"warn\" or \"reject\" (what job_submit does with a job that is not resumable and longer than contracts.max), found \"maybe\""
    );
}

/// `[contracts] max_requeues` (a requeue budget for jobs that cannot
/// checkpoint) is dropped: Tally never requeues such a job once it is
/// allocated and started. A file that still sets it loads, whatever the
/// value (even one the old range refused), with a warning that names the
/// key and its line, and the rules are those of a file without it.
#[test]
fn max_requeues_is_dropped_with_a_warning() {
    let text = "[cluster]\ngpus = 8\n[contracts]\nmax = \"4h\"\nmax_requeues = 2\nlong_jobs = \"reject\"\n";
    let c = Config::parse(text, "t.toml").unwrap();
    assert_eq!(
        c.warning_lines(),
        vec![
            "t.toml:5: contracts.max_requeues: is no longer used and is ignored: Tally never requeues an allocated job that cannot checkpoint \
             (other than a debug job): past its contract it runs to its end, and a long one starts only on its team's fair share or on GPUs no \
             other team asks for; remove the key"
        ]
    );
    let without = Config::parse("[cluster]\ngpus = 8\n[contracts]\nmax = \"4h\"\nlong_jobs = \"reject\"\n", "t.toml").unwrap();
    assert_eq!((c.contracts, c.submit), (without.contracts, without.submit), "nothing changes");
    for value in ["0", "1000", "\"3\"", "[1]"] {
        let c = Config::parse(&format!("[contracts]\nmax_requeues = {value}\n"), "t.toml").unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!(c.warnings.iter().map(|w| (w.key.as_str(), w.line)).collect::<Vec<_>>(), vec![("contracts.max_requeues", Some(2))], "{value}");
    }
    // With the dropped keys of [priority], in the file's order.
    let c = Config::parse("[priority]\nage_unit = \"1m\"\n[contracts]\nmax_requeues = 0\n", "t.toml").unwrap();
    assert_eq!(
        c.warnings.iter().map(|w| (w.key.as_str(), w.line)).collect::<Vec<_>>(),
        vec![("priority.age_unit", Some(2)), ("contracts.max_requeues", Some(4))]
    );
}

/// A key an earlier Tally accepted loads with a warning that says what
/// replaced it, whatever its value; a key never known is still an error.
#[test]
fn dropped_keys_warn_and_are_ignored() {
    let c = Config::parse("[cluster]\ngpus = 8\n[priority]\nage_unit = \"1m\"\ndebug_lane_gpus = 2\n", "t.toml").unwrap();
    assert_eq!(
        c.warning_lines(),
        vec![
            "t.toml:4: priority.age_unit: is no longer used and is ignored: the priority has no age field; equal priorities run in submit order (Slurm's tie-break); remove the key",
            "t.toml:5: priority.debug_lane_gpus: is no longer used and is ignored: the debug lane holds the debug class, set by priority.debug_max_gpus and priority.debug_max_contract; remove the key",
        ]
    );
    assert_eq!(c.priority, Config::parse("[cluster]\ngpus = 8\n", "t.toml").unwrap().priority, "nothing changes");
    // Any value: the key is gone, its type with it.
    assert!(Config::parse("[priority]\nage_unit = [1, 2]\n", "t.toml").is_ok());
    let err = Config::parse("[priority]\nage_units = \"1m\"\n", "t.toml").unwrap_err();
    assert!(err.to_string().contains("unknown field `age_units`"), "{err}");
    for (key, _) in DROPPED_KEYS {
        let (table, name) = key.split_once('.').unwrap();
        assert_eq!(Config::parse(&format!("[{table}]\n{name} = 1\n"), "t.toml").unwrap().warnings.len(), 1, "{key}");
    }
}

#[test]
fn quick_jobs_the_debug_class_and_the_lane() {
    let c = Config::parse("", "t.toml").unwrap();
    let p = c.priority;
    assert_eq!((p.quick_time_limit_s, p.debug_max_gpus, p.debug_max_contract_s, p.debug_lane), (1800, 2, 900, true));
    let c = Config::parse("[priority]\nquick_time_limit = \"1h\"\ndebug_lane = false\ndebug_max_gpus = 8\ndebug_max_contract = \"30m\"\n", "t.toml")
        .unwrap();
    let p = c.priority;
    assert_eq!((p.quick_time_limit_s, p.debug_max_gpus, p.debug_max_contract_s, p.debug_lane), (3600, 8, 1800, false));
    // The debug contract follows a shorter contract maximum.
    let c = Config::parse("[contracts]\nmax = \"10m\"\n", "t.toml").unwrap();
    assert_eq!(c.priority.debug_max_contract_s, 600);
    let err =
        Config::parse("[contracts]\nmax = \"1h\"\n[priority]\ndebug_lane_gpus = 2\ndebug_max_gpus = 100\ndebug_max_contract = \"2h\"\n", "t.toml")
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "t.toml: priority.debug_max_gpus: 100 is too many (0 to 64, default 2; 0 turns the debug class off): debug jobs are small\n\
         t.toml: priority.debug_max_contract: must be longer than 0 and at most contracts.max (1h; default \"15m\"): the longest contract of a debug job"
    );
}

/// A file in this test process's own temporary directory.
fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tally-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Comment lines filling exactly `len` bytes: a valid (empty) tally.toml.
fn comments(len: usize) -> Vec<u8> {
    let mut text = Vec::with_capacity(len);
    while text.len() < len {
        let room = len - text.len();
        let line = (room - 1).min(99);
        if line == 0 {
            text.push(b'\n');
        } else {
            text.push(b'#');
            text.extend(std::iter::repeat_n(b'x', line - 1));
            text.push(b'\n');
        }
    }
    text
}

#[test]
fn a_file_over_the_size_cap_is_refused_before_it_is_parsed() {
    let cap = MAX_FILE_BYTES as usize;
    assert_eq!(cap, 16 << 20, "the cap the message names");
    // Exactly at the cap: read and validated (it is all comments).
    let at = temp_file("at-cap.toml", &comments(cap));
    assert_eq!(Config::load(&at).unwrap().tree.len(), 1);
    // One byte over: refused with its size, the limit and what is allowed.
    let over = temp_file("over-cap.toml", &comments(cap + 1));
    let err = Config::load(&over).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: the file is 16777217 bytes (16.0 MiB); a tally.toml may be at most 16777216 bytes (16 MiB): \
             slurmctld reads it on its main thread (a tree of 1,000 accounts is about 50 KB)",
            over.display()
        )
    );
    std::fs::remove_file(at).unwrap();
    std::fs::remove_file(over).unwrap();
}

#[test]
fn a_file_that_is_not_regular_is_refused_by_what_it_is() {
    // A FIFO would block the open (and slurmctld's main thread with it).
    let fifo = std::env::temp_dir().join(format!("tally-config-test-{}", std::process::id())).join("fifo.toml");
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&fifo);
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // On a thread: a read that blocks fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || tx.send(Config::load(&path).map(|_| ()).map_err(|e| e.to_string())));
    let err = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("refused at once, not blocked").unwrap_err();
    assert_eq!(err, format!("{}: is a FIFO, not a regular file: a tally.toml is read from a regular file", fifo.display()));
    std::fs::remove_file(fifo).unwrap();
    let err = scenario::load(std::path::Path::new("/dev/zero")).unwrap_err().to_string();
    assert_eq!(err, "/dev/zero: is a character device, not a regular file: a scenario is read from a regular file");
}

#[test]
fn a_file_that_is_not_utf8_is_an_error() {
    let path = temp_file("latin1.toml", b"[accounts.caf\xe9]\nshare = 5\n");
    let err = Config::load(&path).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{}: cannot read: not UTF-8 text", path.display())), "{err}");
}

/// `n` accounts with GPU-hour budgets, one `[accounts.aNNNNN]` table each;
/// `broken(i)` makes account `i` give both a share and GPU-hours. Returns
/// the text and the line of each account's table.
fn many_accounts(n: usize, broken: impl Fn(usize) -> bool) -> (String, Vec<usize>) {
    let mut text = String::from("[cluster]\ngpus = 1024\n");
    let mut lines = Vec::with_capacity(n);
    let mut line = 3;
    for i in 0..n {
        text.push_str(&format!("\n[accounts.a{i:05}]\n"));
        lines.push(line + 1);
        if broken(i) {
            text.push_str("share = 1\n");
            line += 1;
        }
        text.push_str("gpu_hours = 1 # a comment that makes the file longer\n");
        line += 3;
    }
    (text, lines)
}

#[test]
fn a_large_config_loads_and_its_problems_keep_their_lines() {
    let n = 20_000;
    let (text, _) = many_accounts(n, |_| false);
    let c = Config::parse(&text, "big.toml").unwrap();
    assert_eq!(c.tree.len(), n + 1);
    // Problems at the start, the middle and the end name their own lines.
    let bad = [0, 7, 9_999, 19_998, 19_999];
    let (text, lines) = many_accounts(n, |i| bad.contains(&i));
    let err = Config::parse(&text, "big.toml").unwrap_err();
    let got: Vec<(String, Option<usize>)> = err.problems.iter().map(|p| (p.key.clone(), p.line)).collect();
    let want: Vec<(String, Option<usize>)> = bad.iter().map(|&i| (format!("accounts.a{i:05}"), Some(lines[i]))).collect();
    assert_eq!(got, want);
    assert_eq!(text.lines().nth(lines[19_999] - 1), Some("[accounts.a19999]"));
    // A tree problem found after the per-account pass: the last account's line.
    let text = format!("{text_ok}\n[accounts.zz]\nparent = \"nope\"\n", text_ok = many_accounts(n, |_| false).0);
    let err = Config::parse(&text, "big.toml").unwrap_err();
    let last = text.lines().count() - 1;
    assert_eq!(err.to_string(), format!("big.toml:{last}: accounts.zz.parent: account `zz` has unknown parent `nope`"));
}

#[test]
fn account_names_with_upper_case_are_refused_with_the_lower_case_spelling() {
    let err = Config::parse("[accounts.ai]\nshare = 50\n[accounts.NLP]\nparent = \"ai\"\nshare = 50\n", "t.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "t.toml:3: accounts.NLP: account name `NLP` has upper-case letters: Slurm stores account names in lower case; write `nlp`"
    );
    // A [users] mapping to an upper-case account: the same rule, its line.
    let err = Config::parse("[accounts.nlp]\nshare = 50\n[users]\nbob = \"nlp\"\nalice = \"NLP\"\n", "t.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "t.toml:5: users.alice: account name `NLP` has upper-case letters: Slurm stores account names in lower case; write `nlp`"
    );
}

#[test]
fn unallocated_below_above_the_maximum_is_refused_with_its_line() {
    let err = Config::parse("[contracts]\nmax = \"8h\"\nunallocated_below = \"9h\"\n", "t.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "t.toml:3: contracts.unallocated_below: 9h is longer than contracts.max 8h, so every contract would count as \
         unallocated (allowed: 0 to contracts.max)"
    );
    // The default maximum (8h) counts too; equal to it is allowed.
    assert!(Config::parse("[contracts]\nunallocated_below = \"8h1s\"\n", "t.toml").is_err());
    let c = Config::parse("[contracts]\nunallocated_below = \"8h\"\n", "t.toml").unwrap();
    assert_eq!(c.contracts.unallocated_below_s, 8 * HOUR_S);
}

#[test]
fn accepted_keys_are_the_keys_serde_accepts() {
    let keys = raw::accepted_keys();
    for k in ["cluster.gpus", "ledger.window", "contracts.long_jobs", "planner.decay", "reports.admins", "accounts.*.gpu_hours", "users.*"] {
        assert!(keys.iter().any(|x| x == k), "{k} in {keys:?}");
    }
    // Each listed key is known to the deserializer (a value of the wrong
    // type may be refused, an unknown field may not)...
    for key in &keys {
        let (table, name) = key.rsplit_once('.').unwrap();
        let table = table.replace('*', "x");
        let name = name.replace('*', "x");
        if let Err((k, _, message)) = raw::parse(&format!("[{table}]\n{name} = 0\n")) {
            assert!(!message.contains("unknown field"), "{key}: {k}: {message}");
        }
    }
    // ... and a key next to them is not.
    let (_, _, message) = raw::parse("[cluster]\nzone = 0\n").unwrap_err();
    assert!(message.contains("unknown field"), "{message}");
}

#[test]
fn gpu_types_weigh_gpus_into_budget_units() {
    // The issue's spelling, weights only: charging weights, the capacity
    // of [cluster] gpus at weight 1 until Slurm's nodes say how many of
    // each type there are.
    let text = "[cluster]\ngpus = 96\n[cluster.gpu_types]\nh100 = 1.0\nb200 = 2.2\n[accounts.a]\nshare = 50\n";
    let c = Config::parse(text, "t.toml").unwrap();
    assert_eq!((c.weight_of(Some("b200")).get(), c.weight_of(Some("h100")).get()), (2.2, 1.0));
    assert_eq!((c.weight_of(Some("a100")).get(), c.weight_of(None).get()), (1.0, 1.0));
    assert_eq!(c.capacity(96).units, 96.0);
    let nodes: Inventory = [(Some("h100".into()), 64), (Some("b200".into()), 32)].into_iter().collect();
    assert!((c.capacity_with(96, &nodes).units - (64.0 + 32.0 * 2.2)).abs() < 1e-9);
    let a = c.tree.id("a").unwrap();
    let alloc = c.allocation_with(96, &nodes).unwrap();
    assert!((alloc.rate_gpus(a) - (64.0 + 70.4) / 2.0).abs() < 1e-9);
    // Counts in the file: [cluster] gpus may be left out (their sum), and
    // the file's count wins over the nodes'.
    let text = "[cluster.gpu_types]\nh100 = { gpus = 64 }\nb200 = { weight = 2.2, gpus = 32 }\n";
    let c = Config::parse(text, "t.toml").unwrap();
    assert_eq!(c.cluster.gpus, Some(96));
    assert!((c.capacity(96).units - 134.4).abs() < 1e-9);
    assert!((c.capacity_with(96, &[(Some("b200".into()), 8)].into_iter().collect()).units - 134.4).abs() < 1e-9);
    assert!(c.planner.is_none() && crate::Config::parse(&format!("{text}[planner]\nenabled = true\n"), "t.toml").is_ok());
    // Without the table nothing changes, whatever the nodes have.
    let c = Config::parse(GOOD, "good.toml").unwrap();
    assert!(c.cluster.gpu_types.is_empty());
    assert_eq!(c.capacity_with(64, &nodes), c.capacity(64));
    assert_eq!(c.capacity(64), tally_allocator::Capacity::new(64, WEEK_S));
    // Some types without a count and no [cluster] gpus: the size is unknown.
    let c = Config::parse("[cluster.gpu_types]\nh100 = { gpus = 64 }\nb200 = 2.2\n", "t.toml").unwrap();
    assert_eq!(c.cluster.gpus, None);
}
