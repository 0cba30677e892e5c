//! The `tally` binary as a user runs it.

use std::process::Command;
use tally_allocator::HOUR;

fn tally(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .env_remove("TALLY_CONFIG")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run tally");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs `tally args`, which must fail with `want` in its stderr.
fn fails_with(args: &[&str], want: &str) {
    let (ok, _, err) = tally(args);
    assert!(!ok, "tally {args:?} should fail");
    assert!(err.contains(want), "{err}");
}

fn temp_config(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tally-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn config_check_prints_the_allocation_tree() {
    let (ok, out, err) = tally(&["config", "check", "examples/tally.toml", "--gpus", "64"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("examples/tally.toml: OK (18 accounts, 15 teams)"), "{out}");
    assert!(out.contains("cluster: 64 GPUs x 168 h = 10752.0 GPU-hours per window"), "{out}");
    // pretrain = 45% x 40% of 10752 GPU-hours.
    let line = out.lines().find(|l| l.trim_start().starts_with("pretrain ")).expect("pretrain row");
    assert!(line.contains("1935.4"), "{line}");
    assert!(line.contains("18.00%"), "{line}");
}

#[test]
fn config_check_uses_the_file_size_without_gpus() {
    let (ok, out, _) = tally(&["config", "check", "examples/tally.toml"]);
    assert!(ok);
    assert!(out.contains("cluster: 256 GPUs"), "{out}");
}

#[test]
fn broken_config_prints_file_key_errors_and_fails() {
    let path = temp_config("broken.toml", "[accounts.a]\nshare = 60\n[accounts.b]\nparent = \"a\"\nshare = 101\n");
    let (ok, out, err) = tally(&["config", "check", &path]);
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.trim(), format!("{path}:3: accounts.b.share: account `b`: share 101 is not a percentage in (0, 100]"));
}

#[test]
fn budgets_that_do_not_fit_the_cluster_size_fail() {
    let path = temp_config("fit.toml", "[accounts.a]\ngpu_hours = 2000\n");
    fails_with(
        &["config", "check", &path, "--gpus", "8"],
        "accounts: children of `root` are given 2000.0 GPU-hours per window, more than its 1344.0",
    );
    let (ok, _, _) = tally(&["config", "check", &path, "--gpus", "16"]);
    assert!(ok);
}

#[test]
fn missing_cluster_size_is_explained() {
    let path = temp_config("nosize.toml", "[accounts.a]\nshare = 50\n");
    fails_with(&["config", "check", &path], "no cluster size: give --gpus N or set [cluster] gpus in the file");
}

#[test]
fn demo_ranks_orders_and_protects_contracts() {
    let (ok, out, err) = tally(&["demo", "--config", "examples/tally.toml"]);
    assert!(ok, "{err}");
    // The least-used team (semantic, 0.2 of its allocation) ranks first.
    assert!(out.contains("   0  semantic"), "{out}");
    // The 8h contract that started an hour ago is protected; only the
    // unallocated job may go for the debug job of the most short team.
    assert!(out.contains("protected: 7h of contract left"), "{out}");
    assert!(out.contains("may preempt (Unallocated)"), "{out}");
    assert!(out.contains("victim order (cumulative): 90"), "{out}");
    // What each team runs against its rate, and the need field of the queue.
    assert!(out.contains("== Now: what each team runs against its rate =="), "{out}");
    assert!(out.contains(" owed "), "{out}");
}

const MICRO_TRACE: &str = "job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority
1,0,1000,4,a,a-u1,training,0,true,0
2,5,50,2,b,b-u1,training,30,false,3
3,7,500,2,a,a-u1,debug,300,false,0
4,100,200,1,b,b-u1,interactive,60,false,0
";
const MICRO_CONFIG: &str = "[cluster]\ngpus = 4\ngpus_per_node = 4\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n";

#[test]
fn sim_compares_policies_and_is_deterministic() {
    let trace = temp_config("micro.csv", MICRO_TRACE);
    let config = temp_config("micro.toml", MICRO_CONFIG);
    let args = ["sim", "--trace", &trace, "--config", &config, "--gpus", "4", "--json", "--quiet"];
    let (ok, out, err) = tally(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let policies = v["policies"].as_array().unwrap();
    let names: Vec<&str> = policies.iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["fifo", "multifactor", "tally"]);
    let t = &policies[2];
    assert_eq!(t["contract_violations"], 0);
    assert_eq!(t["completed"], 4);
    // Job 2 (b, allocated) preempts job 1 (a, unallocated) at once.
    assert!(t["preemptions"].as_u64().unwrap() >= 1);
    assert_eq!(policies[0]["preemptions"], 0);
    // Waits per class and over every job that started.
    let waits = t["waits"].as_object().unwrap();
    let per_class: u64 = waits.iter().filter(|(c, _)| *c != "all").map(|(_, w)| w["jobs"].as_u64().unwrap()).sum();
    assert_eq!((waits["all"]["jobs"].as_u64(), per_class), (Some(4), 4), "{waits:?}");
    let max_p99 = waits.iter().filter(|(c, _)| *c != "all").filter_map(|(_, w)| w["p99_s"].as_u64()).max();
    assert_eq!(waits["all"]["p99_s"].as_u64(), max_p99, "the slowest job's wait is the p99 of 4 jobs");
    // Both figures of delivered / owed: hour by hour, and per team over the
    // whole window (never below the hourly one, never above 1).
    for p in policies {
        let (hourly, window) =
            (p["fairness"]["delivered_over_owed"].as_f64().unwrap(), p["fairness_window"]["delivered_over_owed"].as_f64().unwrap());
        assert!(hourly <= window + 1e-12 && window <= 1.0, "{}: hourly {hourly}, window {window}", p["policy"]);
        for t in p["teams"].as_array().unwrap() {
            if let (Some(h), Some(w)) = (t["ratio"].as_f64(), t["window_ratio"].as_f64()) {
                assert!(h <= w + 1e-12 && w <= 1.0, "{t}");
            }
        }
    }
    // Byte-identical on a second run.
    let (_, again, _) = tally(&args);
    assert_eq!(out, again);
    // The table names every policy and the fifo ratio column.
    let (ok, table, _) = tally(&["sim", "--trace", &trace, "--config", &config, "--gpus", "4", "--quiet"]);
    assert!(ok);
    assert!(table.contains("goodput") && table.contains("contract violations"), "{table}");
    assert!(table.contains("delivered / owed, hour by hour") && table.contains("delivered / owed over the window"), "{table}");
}

#[test]
fn sim_writes_plots() {
    let trace = temp_config("plots.csv", MICRO_TRACE);
    let config = temp_config("plots.toml", MICRO_CONFIG);
    let dir = std::env::temp_dir().join(format!("tally-cli-plots-{}", std::process::id()));
    let (ok, _, err) = tally(&["sim", "--trace", &trace, "--config", &config, "--gpus", "4", "--quiet", "--plots", dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    let titles = [
        ("occupancy.svg", "Occupancy per day"),
        ("delivery.svg", "Delivered / owed GPU-hours per team"),
        ("waits-training.svg", "Wait before start: training"),
        ("waits-debug.svg", "Wait before start: debug"),
    ];
    for (f, title) in titles {
        let svg = std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{f}: {e}"));
        let texts: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).map(str::trim).collect();
        // The title and a legend entry per policy compared.
        for want in [title, "fifo", "multifactor", "tally"] {
            assert!(texts.contains(&want), "{f}: {want:?} not in {texts:?}");
        }
        if f.starts_with("waits") {
            assert!(texts.contains(&"1s") && texts.contains(&"1m"), "{f}: log time ticks: {texts:?}");
        }
    }
}

#[test]
fn plan_svg_draws_a_cell_per_busy_gpu_step() {
    let svg = std::env::temp_dir().join(format!("tally-cli-plan-{}.svg", std::process::id()));
    let (ok, out, err) = tally(&["plan", "--scenario", "examples/scenarios/mixed.toml", "--svg", svg.to_str().unwrap()]);
    assert!(ok, "{err}");
    // The text grid's busy cells: letters and realtime marks on the `gpu N` rows.
    let busy: usize = out
        .lines()
        .filter(|l| l.trim_start().starts_with("gpu "))
        .map(|l| l.split_whitespace().nth(2).unwrap_or("").chars().filter(|&c| c != '.').count())
        .sum();
    assert!(busy > 50, "{out}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let cells = doc.descendants().filter(|n| n.has_tag_name("rect") && n.attribute("fill") != Some("#FFFFFF")).count();
    assert_eq!(cells, busy);
    let grey = doc.descendants().filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some("#888888")).count();
    let marks = out.lines().filter(|l| l.trim_start().starts_with("gpu ")).flat_map(|l| l.chars()).filter(|&c| c == '@').count();
    assert_eq!(grey, marks);
    let texts: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).map(str::trim).collect();
    assert!(texts.iter().any(|t| t.starts_with("plan: GPUs (rows) x steps (columns)")), "{texts:?}");
    assert!(texts.contains(&"GPU") && texts.contains(&"step") && texts.contains(&"23"), "{texts:?}");
}

#[test]
fn sim_refuses_bad_input_with_line_numbers() {
    let trace =
        temp_config("bad.csv", "job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority\n1,0,10,0,a,u,training,0,false,0\n");
    let config = temp_config("bad.toml", MICRO_CONFIG);
    fails_with(&["sim", "--trace", &trace, "--config", &config, "--gpus", "4"], "line 2: column `gpus`");
    let good = temp_config("good.csv", MICRO_TRACE);
    fails_with(
        &["sim", "--trace", &good, "--config", &config, "--gpus", "4", "--compare", "fifo,lottery"],
        "unknown policy `lottery` (known: fifo, multifactor, tally, tally+planner, planner)",
    );
}

#[test]
fn trace_import_and_augment_round_trip() {
    let ef = temp_config("ef.csv", "job_id,submission_time,duration,num_gpu\nx1,100,700,2\nx2,50,900,8\n");
    let out = std::env::temp_dir().join(format!("tally-cli-ef-{}.csv", std::process::id()));
    let (ok, _, err) = tally(&["trace", "import", "--format", "elasticflow", &ef, "-o", out.to_str().unwrap()]);
    assert!(ok, "{err}");
    let canon = std::fs::read_to_string(&out).unwrap();
    assert!(canon.starts_with("job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority\n1,50,900,8,"), "{canon}");
    let (ok, a1, err) = tally(&["trace", "augment", "--config", "examples/tally.toml", "--seed", "7", "--gpus", "256", out.to_str().unwrap()]);
    assert!(ok, "{err}");
    let (_, a2, _) = tally(&["trace", "augment", "--config", "examples/tally.toml", "--seed", "7", "--gpus", "256", out.to_str().unwrap()]);
    assert_eq!(a1, a2, "same seed, same bytes");
}

#[test]
fn a_clusters_sacct_history_becomes_a_trace_the_simulator_replays() {
    let history = temp_config(
        "history.txt",
        "JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Comment\n\
         7|1796000000|1796000060|1796003660|COMPLETED|nlp|ana|cpu=4,gres/gpu=8|contract=2h\n\
         8|1796000100|1796000200|1796000300|PREEMPTED|vision|bo|gres/gpu=4|contract=1h,resumable\n\
         8|1796000100|1796001000|1796004000|COMPLETED|vision|bo|gres/gpu=4|contract=1h,resumable\n\
         9|1796000200|Unknown|Unknown|CANCELLED|nlp|ana||contract=1h\n",
    );
    let (ok, csv, err) = tally(&["trace", "import", "--format", "sacct", "--config", "examples/tally.toml", &history]);
    assert!(ok, "{err}");
    assert_eq!(
        csv,
        "job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority\n\
         7,0,3600,8,nlp,ana,training,7200,false,0\n\
         8,100,3100,4,vision,bo,training,3600,true,0\n"
    );
    assert!(err.contains("t = 0 is Unix time 1796000000; requeues: 1;") && err.contains("jobs skipped: 1 (1 never started)"), "{err}");
    // `tally history import` is the same import under the name.
    let (ok, again, _) = tally(&["history", "import", "--config", "examples/tally.toml", &history]);
    assert!(ok && again == csv, "{again}");
    // The simulator takes it as it is.
    let trace = temp_config("history.csv", &csv);
    let (ok, out, err) = tally(&["sim", "--trace", &trace, "--config", "examples/tally.toml", "--gpus", "16", "--compare", "tally"]);
    assert!(ok && out.contains("jobs completed"), "{out}{err}");
    fails_with(
        &["trace", "import", "--format", "sacct", "--config", "examples/tally.toml", &temp_config("h.txt", "JobIDRaw|Start\n")],
        "no header with Submit",
    );
}

#[test]
fn a_new_install_seeds_its_ledger_from_the_history() {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (t1, t2) = (now - 7200, now - 3600);
    // nlp is in the tree and funded; the second job is unallocated (no contract).
    let history = temp_config(
        "seed-history.txt",
        &format!(
            "JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Comment\n\
             1|{t1}|{t1}|{t2}|COMPLETED|pretrain|ana|gres/gpu=8|contract=2h\n\
             2|{t1}|{t1}|{t2}|COMPLETED|pretrain|ana|gres/gpu=4|\n"
        ),
    );
    let state = std::env::temp_dir().join(format!("tally-cli-seed-{}.state", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let args = ["trace", "import", "--format", "sacct", "--config", "examples/tally.toml", "--seed-ledger", state.to_str().unwrap(), &history];
    let (ok, _, err) = tally(&args);
    assert!(ok, "{err}");
    assert!(err.contains("seeded 8.0 GPU-hours") && err.contains("1 runs of unallocated work not charged"), "{err}");
    let text = std::fs::read_to_string(&state).unwrap();
    let gpu_s: f64 = text
        .lines()
        .filter_map(|l| {
            // A record and its checksum (` ~xxxxxxxx`).
            let (record, _) = l.rsplit_once(" ~")?;
            let f: Vec<&str> = record.split(' ').collect();
            (f.len() == 5 && f[0] == "use" && f[2] == "pretrain").then(|| f[4].parse::<f64>().unwrap())
        })
        .sum();
    assert_eq!(gpu_s, 8.0 * HOUR, "{text}");
    // Never over an existing ledger.
    fails_with(&args, "an existing ledger is never overwritten");
    let _ = std::fs::remove_file(&state);
}

#[test]
fn budget_replays_the_history_under_both_configs_side_by_side() {
    let team = |a: u32, b: u32| format!("[cluster]\ngpus = 8\n[accounts.a]\nshare = {a}\n[accounts.b]\nshare = {b}\n");
    let now = temp_config("budget-now.toml", &team(50, 50));
    let new = temp_config("budget-new.toml", &team(75, 25));
    // Both teams ask for the whole cluster for a day.
    let mut csv = String::from("job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority\n");
    for i in 0..24 {
        csv.push_str(&format!("{},{},3600,4,a,ana,training,3600,false,0\n", 2 * i + 1, i * 3600));
        csv.push_str(&format!("{},{},3600,4,b,bo,training,3600,false,0\n", 2 * i + 2, i * 3600));
        csv.push_str(&format!("{},{},3600,4,a,ana,training,3600,false,0\n", 100 + i, i * 3600));
    }
    let trace = temp_config("budget.csv", &csv);
    let (ok, out, err) = tally(&["budget", "--config", &new, "--current", &now, "--trace", &trace]);
    assert!(ok, "{err}");
    let row = |team: &str| -> Vec<String> {
        out.lines().find(|l| l.starts_with(&format!("{team} "))).unwrap_or_else(|| panic!("{out}")).split_whitespace().map(str::to_string).collect()
    };
    // TEAM, RATE NOW, OWED NOW, DELIV NOW, RATE NEW, OWED NEW, DELIV NEW, CHANGE
    assert_eq!((row("a")[1].as_str(), row("a")[4].as_str()), ("4.0", "6.0"), "{out}");
    assert_eq!((row("b")[1].as_str(), row("b")[4].as_str()), ("4.0", "2.0"), "{out}");
    let owed = |r: &[String], k: usize| r[k].parse::<f64>().unwrap();
    assert!(owed(&row("a"), 5) > owed(&row("a"), 2) && owed(&row("b"), 5) < owed(&row("b"), 2), "{out}");
    // The same config twice: no change anywhere.
    let (ok, same, _) = tally(&["budget", "--config", &now, "--current", &now, "--trace", &trace]);
    assert!(ok && same.lines().filter(|l| l.starts_with("a ") || l.starts_with("b ")).all(|l| l.ends_with("+0.0")), "{same}");
    fails_with(&["budget", "--config", &new, "--current", &now, "--trace", &trace, "--policy", "fifo"], "not a budget-aware policy");
}

#[test]
fn plan_beats_fifo_and_its_json_plan_checks_out() {
    for name in ["training-heavy", "mixed", "realtime-contention", "uniform-priority", "scale-64"] {
        let file = format!("examples/scenarios/{name}.toml");
        let (ok, out, err) = tally(&["plan", "--scenario", &file, "--json"]);
        assert!(ok, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let ours = &v["plan"];
        let fifo = &v["fifo"];
        assert!(ours["score"]["value"].as_f64().unwrap() >= fifo["score"]["value"].as_f64().unwrap(), "{name}: value");
        // An independent check of the JSON plan: no GPU used twice in a step,
        // blocks contiguous and aligned to a power of two.
        let steps = ours["score"]["busy_per_step"].as_array().unwrap().len();
        let mut used = vec![std::collections::BTreeSet::new(); steps];
        for b in ours["batch"].as_array().unwrap() {
            let gpus: Vec<u64> = b["gpus"].as_array().unwrap().iter().map(|g| g.as_u64().unwrap()).collect();
            let n = gpus.len() as u64;
            assert!(n.is_power_of_two() && gpus[0] % n.min(8) == 0, "{name}: block {gpus:?}");
            assert!(gpus.windows(2).all(|w| w[1] == w[0] + 1));
            let start = b["start_step"].as_u64().unwrap() as usize;
            let end = (start + b["steps"].as_u64().unwrap() as usize).min(steps);
            for (t, at_t) in used.iter_mut().enumerate().take(end).skip(start) {
                for &g in &gpus {
                    assert!(at_t.insert(g), "{name}: GPU {g} twice at step {t}");
                }
            }
        }
        for svc in ours["realtime"].as_array().unwrap() {
            for (t, gpus) in svc["gpus_per_step"].as_array().unwrap().iter().enumerate() {
                for g in gpus.as_array().unwrap() {
                    assert!(used[t].insert(g.as_u64().unwrap()), "{name}: realtime GPU clashes at step {t}");
                }
            }
        }
    }
    let (ok, out, _) = tally(&["plan", "--scenario", "examples/scenarios/mixed.toml"]);
    assert!(ok);
    assert!(out.contains("fifo+peak") && out.contains("realtime coverage risk: chat: covered at every step"), "{out}");
    let bad =
        temp_config("bad-scenario.toml", "[cluster]\ngpus = 8\n[horizon]\nsteps = 4\n[[jobs]]\nid = 1\ngpus = 3\nduration = \"1h\"\npriority = 1\n");
    fails_with(&["plan", "--scenario", &bad], ":5: jobs[0].gpus: 3 is not a power of two of at most 8 GPUs");
}

#[test]
fn full_mode_reports_a_bound_no_plan_exceeds() {
    // Full mode is in the default build (HiGHS). Its bound must cover its own
    // plan, the fast plan and FIFO, and the table shows all three. A long
    // time limit: the proof takes ~0.4 s alone, but this must not depend on
    // how loaded the machine is (the default 1 s limit can cut it off).
    let (ok, out, err) = tally(&["plan", "--scenario", "examples/scenarios/mixed.toml", "--mode", "full", "--time-limit", "60s", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["mode"], "full", "{err}");
    let bound = v["bound"].as_f64().expect("a finite bound on an 8-GPU scenario");
    let full = v["plan"]["score"]["value"].as_f64().unwrap();
    let fast = v["fast_value"].as_f64().unwrap();
    let fifo = v["fifo"]["score"]["value"].as_f64().unwrap();
    assert!(full >= fast - 1e-9, "full mode never worse than its warm start: {full} < {fast}");
    for x in [full, fast, fifo] {
        assert!(x <= bound + 1e-6 * bound.abs(), "value {x} above the bound {bound}");
    }
    let (ok, out, err) = tally(&["plan", "--scenario", "examples/scenarios/mixed.toml", "--mode", "full", "--time-limit", "60s"]);
    assert!(ok, "{err}");
    assert!(out.contains("full          fast     fifo+peak     full/fifo"), "{out}");
    assert!(out.contains("bound ") && out.contains("fast's gap "), "{out}");
    // The label claims a proof only at gap 0, and the gap is always there.
    let gap = v["gap"].as_f64().expect("the gap, always");
    assert_eq!(v["proved_optimal"].as_bool(), Some(gap <= 1e-6), "{out}");
    assert_eq!(out.contains("proved optimal"), gap <= 1e-6, "{out}");
    let (ok, out, err) = tally(&["plan", "--scenario", "examples/scenarios/mixed.toml", "--mode", "full", "--time-limit", "60s", "--gap", "0"]);
    assert!(ok, "{err}");
    assert!(out.contains("exact model: proved optimal by HiGHS): full's gap 0.00%"), "{out}");
    fails_with(&["plan", "--scenario", "examples/scenarios/mixed.toml", "--mode", "full", "--time-limit", "soon"], "--time-limit");
}

#[test]
fn plan_blames_the_scenario_for_a_running_job_off_its_blocks() {
    // Before: "fast plan invalid (a bug): ...", or a panic past the last GPU.
    let job = |first: u32| {
        format!("[cluster]\ngpus = 8\n[horizon]\nsteps = 4\n[[jobs]]\nid = 1\ngpus = 4\nduration = \"2h\"\npriority = 1\nrunning_since = \"1h\"\nfirst_gpu = {first}\n")
    };
    for (name, first) in [("unaligned.toml", 2), ("outside.toml", 100)] {
        let path = temp_config(name, &job(first));
        let (ok, out, err) = tally(&["plan", "--scenario", &path]);
        assert!(!ok && out.is_empty(), "{out}");
        assert_eq!(
            err.trim(),
            format!("{path}:5: jobs[0].first_gpu: {first} is not where a block of 4 GPUs can start: allowed are multiples of 4 from 0 to 4 (a block is aligned to its size inside one node of 8 GPUs)")
        );
    }
    let path = temp_config("steps.toml", "[cluster]\ngpus = 8\n[horizon]\nsteps = 1e12\n");
    fails_with(
        &["plan", "--scenario", &path],
        ":4: horizon.steps: `1000000000000.0` is a floating-point number: steps is a whole number from 1 to 10000",
    );
}

#[test]
fn trace_augment_refuses_more_debug_jobs_than_it_can_hold() {
    // A week of trace at 10^9 debug jobs a day: 5 × 10^9 jobs, terabytes,
    // an abort before. Refused by the size of what it would generate.
    let trace = temp_config(
        "week.csv",
        "job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority\n1,0,60,1,-,-,training,0,false,0\n2,604800,60,1,-,-,training,0,false,0\n",
    );
    let augment =
        |per_day: &str| tally(&["trace", "augment", "--config", "examples/tally.toml", "--gpus", "256", "--debug-per-day", per_day, &trace]);
    let (ok, out, err) = augment("1e9");
    assert!(!ok && out.is_empty(), "{out}");
    assert_eq!(
        err.trim(),
        "--debug-per-day: debug_per_day 1000000000 would add about 5000000000 debug jobs over the trace's 5.0 working days \
         (Mon-Fri 09:00-18:00 between its first and last submission); at most 10000000 are allowed (debug_per_day up to 2000000 for this trace)"
    );
    let (ok, _, err) = augment("40");
    assert!(ok, "{err}");
    assert!(err.contains("debug jobs added"), "{err}");
}

/// The subcommands `tally PATH --help` lists (without `help`).
fn help_subcommands(path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let (ok, out, err) = tally(&args);
    assert!(ok, "{err}");
    out.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn man_writes_one_page_per_command_the_help_lists() {
    // The pages a user can find from `tally --help`, walked down every level.
    let mut want = vec!["tally".to_string()];
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let refs: Vec<&str> = path.iter().map(String::as_str).collect();
        for sub in help_subcommands(&refs) {
            let mut p = path.clone();
            p.push(sub);
            want.push(format!("tally-{}", p.join("-")));
            todo.push(p);
        }
    }
    want.sort();
    assert!(want.len() > 10, "{want:?}");
    assert!(want.contains(&"tally-config-check".to_string()), "{want:?}");

    let dir = std::env::temp_dir().join(format!("tally-cli-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, out, err) = tally(&["man", "--out", dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    let printed: Vec<&str> = out.lines().collect();
    let mut files: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    let mut names: Vec<String> = files.iter().map(|f| f.strip_suffix(".1").expect("section 1 pages only").to_string()).collect();
    names.sort();
    assert_eq!(names, want, "one page per command of `tally --help`, none for the hidden `man`");
    assert_eq!(printed.len(), files.len(), "{out}");
    assert!(printed[0].ends_with("/tally.1"), "{out}");

    let page = |name: &str| std::fs::read_to_string(dir.join(format!("{name}.1"))).unwrap();
    let top = page("tally");
    assert!(top.contains("\n.TH tally 1 "), "{top}");
    for name in &want[1..] {
        assert!(top.contains(&format!(".BR {name} (1)")), "tally.1 refers to {name}(1)");
        assert!(page(name).contains(".BR tally (1)"), "{name}.1 refers back to tally(1)");
    }
    assert!(top.contains(".BR tally.toml (5)") && top.contains("TALLY_CONFIG"), "{top}");
    // Options come from the clap definitions.
    let share = page("tally-share");
    for flag in ["helpformat", "parsable2", "svg"] {
        assert!(share.contains(&format!("\\-\\-{flag}")), "tally-share.1 has --{flag}");
    }

    // groff finds nothing to warn about (when it is installed).
    if std::process::Command::new("groff").arg("--version").output().is_ok() {
        for f in &files {
            let out = std::process::Command::new("groff").args(["-man", "-ww", "-z"]).arg(dir.join(f)).output().unwrap();
            assert!(out.status.success() && out.stderr.is_empty(), "{f}: {}", String::from_utf8_lossy(&out.stderr));
        }
    } else {
        eprintln!("groff not installed: the pages' roff was not checked");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn man_says_what_is_wrong_with_an_unwritable_directory() {
    let file = temp_config("not-a-dir", "");
    let (ok, _, err) = tally(&["man", "--out", &file]);
    assert!(!ok);
    assert!(err.starts_with(&format!("tally man: cannot create {file}")), "{err}");
}

const TYPED_CONFIG: &str = "[cluster]\ngpus = 16\ngpus_per_node = 8\n[cluster.gpu_types]\nh100 = 1.0\nb200 = { weight = 2.2, gpus = 8 }\n\
                            [accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n";

#[test]
fn config_check_prints_the_typed_capacity() {
    let path = temp_config("typed.toml", TYPED_CONFIG);
    let (ok, out, err) = tally(&["config", "check", &path]);
    assert!(ok, "{err}");
    // 8 B200s at 2.2 and 8 more GPUs at 1 (h100 has no count: the plugin counts the nodes).
    assert!(
        out.contains("cluster: 16 GPUs (8 b200 x 2.2, 8 untyped x 1 = 25.6 budget units) x 168 h = 4300.8 budget-unit-hours per window"),
        "{out}"
    );
    assert!(out.contains("GPU-HOURS and GPUS below are budget units"), "{out}");
    assert!(out.contains("  h100: no count in the file: priority/tally counts Slurm's nodes"), "{out}");
    let a = out.lines().find(|l| l.trim_start().starts_with("a ")).expect("row a");
    assert!(a.contains("2150.4") && a.contains("12.80"), "{a}");
    // A bad weight: the file, the line, the key and what is allowed.
    let bad = temp_config("badweight.toml", "[cluster]\ngpus = 16\n[cluster.gpu_types]\nb200 = -1\n");
    fails_with(
        &["config", "check", &bad],
        &format!("{bad}:4: cluster.gpu_types.b200: weight -1 of GPU type `b200` is not a finite number > 0 (one GPU-hour of it costs `weight` GPU-hours of budget; e.g. b200 = 2.2)"),
    );
}

#[test]
fn sim_replays_typed_gpus() {
    let config = temp_config("typed-sim.toml", TYPED_CONFIG);
    let trace = temp_config(
        "typed.csv",
        "job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority,gpu_type\n\
         1,0,3600,8,a,a-u1,training,3600,false,0,h100\n\
         2,0,3600,8,b,b-u1,training,3600,false,0,b200\n",
    );
    let args =
        ["sim", "--trace", &trace, "--config", &config, "--gpus", "16", "--gpu-types", "h100=8,b200=8", "--compare", "tally", "--json", "--quiet"];
    let (ok, out, err) = tally(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["cluster"]["capacity_units"], 25.6);
    let teams = v["policies"][0]["teams"].as_array().unwrap();
    let delivered = |t: &str| teams.iter().find(|x| x["team"] == t).unwrap()["delivered_gpu_hours"].as_f64().unwrap();
    assert_eq!(delivered("a"), 8.0);
    assert!((delivered("b") - 17.6).abs() < 1e-9);
    // Without counts for h100 its job never runs, and the replay says why.
    let (ok, _, err) = tally(&["sim", "--trace", &trace, "--config", &config, "--gpus", "16", "--compare", "tally", "--quiet"]);
    assert!(ok, "{err}");
    assert!(err.contains("warning: jobs ask for GPU types the simulated cluster has no GPUs of (h100: 1)"), "{err}");
    fails_with(
        &["sim", "--trace", &trace, "--config", &config, "--gpus", "16", "--gpu-types", "a100=8"],
        "--gpu-types: `a100` is not a type of [cluster.gpu_types]",
    );
    fails_with(
        &["sim", "--trace", &trace, "--config", &config, "--gpus", "12", "--gpu-types", "h100=8,b200=8"],
        "--gpus 12: [cluster.gpu_types] counts 16 typed GPUs, more than the 12 GPUs simulated",
    );
}

#[test]
fn plan_measures_generated_instances_and_refuses_bad_names() {
    let (ok, out, err) = tally(&["plan", "--instances", "10", "--quiet"]);
    assert!(ok, "{err}");
    assert!(out.contains("scale-64 #2") && out.contains("validator violations: 0"), "{out}");
    let (ok, out, err) = tally(&["plan", "--generated", "mixed:3"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("generated mixed:3: 8 GPUs") && out.contains("jobs must finish inside the horizon"), "{out}");
    fails_with(
        &["plan", "--generated", "tiny:3"],
        "no family \"tiny\" (families: training-heavy, mixed, realtime-contention, uniform-priority, scale-64)",
    );
    fails_with(&["plan", "--generated", "mixed"], "write FAMILY:SEED");
    // More search effort: said in the JSON, never below the greedy; 0 refused.
    let (ok, out, err) = tally(&["plan", "--generated", "training-heavy:5", "--effort", "3", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["effort"], 3, "{out}");
    assert!(v["plan"]["score"]["value"].as_f64().unwrap() >= v["greedy_value"].as_f64().unwrap() - 1e-9, "{out}");
    fails_with(&["plan", "--generated", "mixed:1", "--effort", "0"], "0 is not in 1..=100");
}

/// Run by sudo for another user (`SUDO_UID` set by sudo and not the
/// process's uid), nothing the caller chose decides what they see: a config
/// of their own saying `private = false`, a ledger of their choosing, saved
/// squeue output or an output file are refused, and nothing is shown or
/// written. (The cluster's own files decide; the end-to-end suite runs the
/// documented sudoers set-up for real.)
#[test]
fn under_sudo_a_caller_chooses_no_file() {
    let open =
        temp_config("open.toml", "[cluster]\ngpus = 8\n[reports]\nprivate = false\n[accounts.mine]\nshare = 1\n[accounts.theirs]\nshare = 1\n");
    let state = std::env::temp_dir().join(format!("tally-cli-sudo-{}.state", std::process::id()));
    std::fs::write(&state, "tally-state 2\nuse 0 theirs eve 3600\n").unwrap();
    let svg = std::env::temp_dir().join(format!("tally-cli-sudo-{}.svg", std::process::id()));
    let state_arg = state.display().to_string();
    let svg_arg = svg.display().to_string();
    let uid: u32 = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap();
    let runs: [&[&str]; 4] = [
        &["share", "-c", &open, "--state", &state_arg],
        &["share", "-c", &open],
        &["share", "--svg", &svg_arg],
        &["explain", "1", "-c", &open, "--state", &state_arg, "--squeue-json", "/dev/null"],
    ];
    for args in runs {
        let out = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(args)
            .env("SUDO_UID", (uid + 1).to_string())
            .env("SUDO_USER", "tally-test-nobody")
            .env("SLURM_CONF", "/nonexistent/slurm.conf")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "tally {args:?} under sudo for a user: {stdout}");
        assert!(stdout.is_empty() && !stdout.contains("theirs"), "{stdout}");
        // Refused as chosen files (the site's files read, the caller no admin)
        // or for want of the site's own files: never from the caller's.
        assert!(stderr.contains("may be given by admins only") || stderr.contains("reads the cluster's own files and no others"), "{stderr}");
        assert!(!stderr.contains("/nonexistent/slurm.conf"), "SLURM_CONF from the caller's environment is not the cluster's: {stderr}");
    }
    assert!(!svg.exists(), "no file written for the caller");
    let _ = std::fs::remove_file(&state);
}

/// Last month's tally.toml, with a key this release dropped, still loads:
/// `tally config check` says what to remove and why, and passes.
#[test]
fn a_dropped_key_is_a_warning_not_an_error() {
    let old = temp_config("old.toml", "[cluster]\ngpus = 8\n[priority]\nage_unit = \"1m\"\n[accounts.a]\nshare = 1\n");
    let (ok, out, err) = tally(&["config", "check", &old]);
    assert!(ok, "{err}");
    assert!(out.contains(": OK ("), "{out}");
    assert!(err.contains("old.toml:4: priority.age_unit: is no longer used and is ignored"), "{err}");
    let typo = temp_config("typo.toml", "[cluster]\ngpus = 8\n[priority]\nage_units = \"1m\"\n");
    fails_with(&["config", "check", &typo], "unknown field `age_units`");
}

/// Runs `tally args` and gives it 10 seconds: a `tally` still running then
/// is killed and the test fails, so a read that blocks (a FIFO) or grows
/// without end (/dev/zero) fails the test instead of hanging it or
/// exhausting the machine. Returns (success, stderr).
fn tally_at_once(args: &[&str]) -> (bool, String) {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .env_remove("TALLY_CONFIG")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tally");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tally {args:?} had not exited after 10 s (killed): a read that blocks or never ends");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.success(), err)
}

/// A FIFO in this test process's temporary directory that no one writes.
fn temp_fifo(name: &str) -> String {
    let path = temp_config(name, "");
    std::fs::remove_file(&path).unwrap();
    assert!(Command::new("mkfifo").arg(&path).status().expect("mkfifo").success());
    path
}

#[test]
fn sim_refuses_a_cluster_past_the_gpu_bound_at_once() {
    // Before: the simulator laid out 536 million nodes and was OOM-killed at 24 GB.
    let trace = temp_config("bound.csv", MICRO_TRACE);
    let config = temp_config("bound.toml", MICRO_CONFIG);
    let (ok, err) = tally_at_once(&["sim", "--trace", &trace, "--config", &config, "--gpus", "4294967295", "--quiet"]);
    assert!(!ok);
    assert!(
        err.contains("'--gpus <N>': 4294967295 GPUs is more than a cluster may have: at most 4194304 (2^22, well past the largest GPU clusters)"),
        "{err}"
    );
    assert_eq!(tally_config::MAX_CLUSTER_GPUS, 4194304, "the bound the help texts and this test name");
    fails_with(&["sim", "--trace", &trace, "--config", &config, "--gpus", "8", "--gpus-per-node", "4194305"], "at most 4194304");
    fails_with(&["sim", "--trace", &trace, "--config", &config, "--gpus", "0"], "'--gpus <N>': at least 1 GPU (1 to 4194304)");
    fails_with(&["config", "check", "examples/tally.toml", "--gpus", "4194305"], "at most 4194304");
    fails_with(&["budget", "--config", &config, "--trace", &trace, "--gpus", "99999999999"], "at most 4194304");
    fails_with(&["trace", "augment", "--config", &config, "--gpus", "4194305", &trace], "at most 4194304");
    // At the bound: accepted (a replay of the four jobs on 4M GPUs in nodes of 8).
    let (ok, _, err) = tally(&["sim", "--trace", &trace, "--config", &config, "--gpus", "4194304", "--compare", "fifo", "--quiet", "--json"]);
    assert!(ok, "{err}");
}

#[test]
fn share_refuses_a_device_as_its_ledger() {
    // Before: /dev/zero was read until memory ran out (12 GB).
    let (ok, err) = tally_at_once(&["share", "--state", "/dev/zero", "-c", "examples/tally.toml"]);
    assert!(!ok);
    assert_eq!(err.trim(), "/dev/zero: is a character device, not a regular file: a ledger is read from a regular file");
}

#[test]
fn a_fifo_named_as_a_file_is_refused_at_once() {
    // Before: open(2) of a FIFO no one writes blocked forever.
    let fifo = temp_fifo("named.fifo");
    let (ok, err) = tally_at_once(&["config", "check", &fifo]);
    assert!(!ok);
    assert_eq!(err.trim(), format!("{fifo}: is a FIFO, not a regular file: a tally.toml is read from a regular file"));
    let (ok, err) = tally_at_once(&["share", "--state", &fifo, "-c", "examples/tally.toml"]);
    assert!(!ok);
    assert_eq!(err.trim(), format!("{fifo}: is a FIFO, not a regular file: a ledger is read from a regular file"));
    let trace_is_fifo = |args: &[&str]| {
        let (ok, err) = tally_at_once(args);
        assert!(!ok && err.contains(&format!("{fifo}: is a FIFO, not a regular file: a trace is read from a regular file")), "{args:?}: {err}");
        err
    };
    trace_is_fifo(&["sim", "--trace", &fifo, "--config", "examples/tally.toml", "--gpus", "8"]);
    trace_is_fifo(&["history", "predict", "--trace", &fifo]);
    // Where `-` reads standard input, the refusal says so.
    let err = trace_is_fifo(&["trace", "import", "--format", "swf", &fifo]);
    assert!(err.contains("or give `-` to read standard input"), "{err}");
    let (ok, err) = tally_at_once(&["explain", "1", "-c", "examples/tally.toml", "--state", "/nonexistent", "--squeue-json", &fifo]);
    assert!(
        !ok && err.contains(&format!("{fifo}: is a FIFO, not a regular file: saved `squeue --json` output is read from a regular file")),
        "{err}"
    );
    std::fs::remove_file(&fifo).unwrap();
}

#[test]
fn numeric_arguments_that_size_work_are_bounded() {
    // Refused before any work starts (before: 10,001 plans, or the whole
    // suite on 1,025 threads, ran until killed).
    let refused = |args: &[&str], want: &str| {
        let (ok, err) = tally_at_once(args);
        assert!(!ok && err.contains(want), "tally {args:?}: {err}");
    };
    refused(&["plan", "--instances", "10001", "--quiet"], "'--instances <N>': 10001 is not in 1..=10000");
    refused(&["sim", "suite", "--threads", "1025", "--quiet"], "'--threads <N>': 1025 is not in 1..=1024");
    refused(&["history", "predict", "--trace", "/nonexistent", "--window", "10001"], "'--window <N>': 10001 is not in 1..=10000");
    refused(
        &["history", "predict", "--trace", "/nonexistent", "--window", "5", "--min-samples", "6"],
        "--min-samples 6 is more than --window 5: a key keeps its last 5 durations only, so it would never be used (1 to --window)",
    );
}

/// Without `--config` or `$TALLY_CONFIG`, `tally share` reads the config in
/// force (priority/tally's active copy beside the ledger), as the exporter
/// does, even when /etc/slurm/tally.toml is missing.
#[test]
fn share_reads_the_config_in_force_beside_the_ledger() {
    let dir = std::env::temp_dir().join(format!("tally-cli-active-{}", std::process::id()));
    let tally_dir = dir.join("state").join("tally");
    std::fs::create_dir_all(&tally_dir).unwrap();
    let conf = dir.join("slurm.conf");
    std::fs::write(&conf, format!("ClusterName=t\nStateSaveLocation={}\n", dir.join("state").display())).unwrap();
    std::fs::write(tally_dir.join("tally.toml.active"), "[cluster]\ngpus = 8\n[accounts.activeteam]\nshare = 100\n").unwrap();
    let share = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(["share", "-P", "-n", "-o", "Account"])
            .args(extra)
            .env_remove("TALLY_CONFIG")
            .env("SLURM_CONF", &conf)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, out, err) = share(&[]);
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l.trim() == "activeteam"), "the active copy's account: {out}");
    // A config given wins over the one in force.
    let (ok, out, err) = share(&["-c", "examples/tally.toml"]);
    assert!(ok, "{err}");
    assert!(!out.contains("activeteam") && out.contains("pretrain"), "{out}");
    // Without an active copy: the site's path, named in the error.
    std::fs::remove_file(tally_dir.join("tally.toml.active")).unwrap();
    if !std::path::Path::new(tally_config::DEFAULT_PATH).exists() {
        let (ok, _, err) = share(&[]);
        assert!(!ok && err.contains(tally_config::DEFAULT_PATH), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An argument longer than a path's limit is refused before parsing, and
/// no message quotes more than the start of one.
#[test]
fn long_arguments_are_refused_and_never_echoed_whole() {
    let long = "x".repeat(100_000);
    let (ok, out, err) = tally(&["share", "-A", &long]);
    assert!(!ok && out.is_empty());
    assert!(err.contains("at most 4096 bytes") && err.len() < 400, "{}", &err[..err.len().min(400)]);
    let medium = "y".repeat(4000);
    for args in [
        vec!["share", "-c", "examples/tally.toml", "--state", "/nonexistent", "-A", &medium],
        vec!["share", "-c", "examples/tally.toml", "--state", "/nonexistent", "-o", &medium],
    ] {
        let (ok, _, err) = tally(&args);
        assert!(!ok && err.contains("(4000 bytes)") && err.len() < 1000, "{args:?}: {}", &err[..err.len().min(400)]);
    }
}

#[test]
fn version_names_the_release_and_the_commit() {
    for flag in ["--version", "-V"] {
        let (ok, out, err) = tally(&[flag]);
        assert!(ok, "{err}");
        assert!(out.starts_with(&format!("tally {}", env!("CARGO_PKG_VERSION"))), "{out}");
        // cli/build.rs: the short commit and its date in a git checkout,
        // nothing outside one.
        let commit = env!("TALLY_COMMIT");
        if commit.is_empty() {
            assert_eq!(out.trim_end(), format!("tally {}", env!("CARGO_PKG_VERSION")));
        } else {
            assert_eq!(out.trim_end(), format!("tally {} ({commit})", env!("CARGO_PKG_VERSION")));
        }
    }
    // The manual pages carry the same version (the `.TH` line's source).
    let (_, out, _) = tally(&["--version"]);
    let version = out.trim_end().strip_prefix("tally ").unwrap();
    let dir = std::env::temp_dir().join(format!("tally-cli-man-version-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, _, err) = tally(&["man", "--out", dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    let top = std::fs::read_to_string(dir.join("tally.1")).unwrap();
    let th = top.lines().find(|l| l.starts_with(".TH tally 1 ")).expect("a .TH line");
    assert!(th.contains(&format!("\"Tally {version}\"")), "{th}");
    std::fs::remove_dir_all(&dir).unwrap();
}
