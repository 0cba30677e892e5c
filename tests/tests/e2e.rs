//! End-to-end: Tally's priority plugin in a real slurmctld with slurmdbd and
//! MariaDB, on the loopback test bed. Run by `tests/e2e/run.sh`, which
//! brings the bed up with `tests/e2e/tally.toml` (2 nodes x 8 GPUs, one pair
//! of teams per test, recalculation every 2 s) and tears it down.
//!
//! Jobs are submitted as the Unix users of the config's `[users]` (each with
//! its team as default Slurm account) through the test bed's `submit_as`.
//! The bed runs all three plugins: priority/tally, job_submit/tally and
//! preempt/tally with PreemptMode=REQUEUE.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The test bed's run dir: `TALLY_RUN_DIR` when set (the 24.11 bed's inside
/// `testbed/trixie.sh run`), else the host bed's default.
struct RunDir;
impl std::fmt::Display for RunDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = std::env::var("TALLY_RUN_DIR").ok().filter(|d| !d.is_empty());
        f.write_str(dir.as_deref().unwrap_or("/var/tmp/tally-testbed"))
    }
}
const RUN_DIR: RunDir = RunDir;
const ALLOCATED: u64 = 1 << 31;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn config() -> String {
    std::env::var("TALLY_E2E_CONFIG").expect("TALLY_E2E_CONFIG: run these through tests/e2e/run.sh")
}

/// Run a command (bounded by `timeout`), return stdout; panic with stderr.
fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new("timeout").arg("60").arg(cmd).args(args).current_dir(root()).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// sbatch as `user` (default account = its team), `gpus` on one node:
/// Ok(job id) or Err(what sbatch printed).
fn try_submit(user: &str, gpus: u32, comment: &str, secs: u32, extra: &[&str]) -> Result<u32, String> {
    let gres = format!("--gres=gpu:{gpus}");
    let wrap = format!("sleep {secs}");
    let mut args = vec!["-c", r#"source testbed/lib.sh && submit_as "$@""#, "submit", user, "-N1", "--wrap", &wrap];
    // (0: the GPUs come with `extra`, e.g. a typed --gres.)
    if gpus > 0 {
        args.push(&gres);
    }
    if !comment.is_empty() {
        args.extend(["--comment", comment]);
    }
    args.extend(extra);
    let out = Command::new("timeout").arg("60").arg("bash").args(&args).current_dir(root()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() {
        Ok(stdout.parse().unwrap_or_else(|_| panic!("sbatch printed {stdout:?}")))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Submit as `user`; panics if refused.
fn submit(user: &str, gpus: u32, comment: &str, secs: u32) -> u32 {
    try_submit(user, gpus, comment, secs, &[]).unwrap_or_else(|e| panic!("sbatch refused: {e}"))
}

/// `squeue` field of one job (`None` once the job has left the queue).
fn field(id: u32, fmt: &str) -> Option<String> {
    let out = sh("squeue", &["-h", "-j", &id.to_string(), "-o", fmt]);
    let v = out.trim();
    (!v.is_empty()).then(|| v.to_string())
}

fn state(id: u32) -> String {
    field(id, "%T").unwrap_or_default()
}

fn prio(id: u32) -> u64 {
    field(id, "%Q").and_then(|p| p.parse().ok()).unwrap_or(0)
}

fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out after {secs}s waiting for {what}\n{}",
            sh("squeue", &["-o", "%.6i %.12a %.6u %.9T %.12Q %k %r %S"])
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn cancel(id: u32) {
    sh("scancel", &[&id.to_string()]);
}

/// Cancel everything and wait for an empty queue.
fn clean() {
    let ids = sh("squeue", &["-h", "-o", "%i"]);
    // A heterogeneous job is cancelled whole (`123`, not `123+1`).
    let mut ids: Vec<&str> = ids.split_whitespace().map(|i| i.split('+').next().unwrap_or(i)).collect();
    ids.sort_unstable();
    ids.dedup();
    if !ids.is_empty() {
        sh("scancel", &ids);
    }
    wait_until(180, "an empty queue", || sh("squeue", &["-h", "-o", "%i"]).trim().is_empty());
}

/// GPU-seconds charged to `account` in the ledger the plugin last saved
/// (all buckets).
fn used_gpu_s(account: &str) -> f64 {
    let text = std::fs::read_to_string(format!("{RUN_DIR}/state/tally/ledger.state")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            // A record and its checksum (` ~xxxxxxxx`, version 3 on).
            let l = l.rsplit_once(" ~").map_or(l, |(record, _)| record);
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 5 && f[0] == "use" && f[2] == account).then(|| f[4].parse::<f64>().unwrap_or(0.0))
        })
        .sum()
}

/// `tally share -P -n -o Account,Rank`: account → rank (sshare's -P
/// keeps the tree's indent).
fn ranks() -> BTreeMap<String, u32> {
    let out = sh(&format!("{}/target/release/tally", root().display()), &["share", "-P", "-n", "-o", "Account,Rank", "-c", &config()]);
    out.lines()
        .filter_map(|l| {
            let (account, rank) = l.split_once('|')?;
            Some((account.trim().to_string(), rank.parse().ok()?))
        })
        .collect()
}

/// Occupy both nodes with 8-GPU jobs of `user`; return their ids once running.
fn fill(user: &str, comment: &str) -> Vec<u32> {
    let ids = vec![submit(user, 8, comment, 900), submit(user, 8, comment, 900)];
    wait_until(60, "fillers to run", || ids.iter().all(|&i| state(i) == "RUNNING"));
    ids
}

#[test]
fn e2e_1_under_budget_team_runs_before_earlier_over_budget_work() {
    clean();
    let fillers = fill("ob", "contract=1h");
    wait_until(30, "order_busy to be charged", || used_gpu_s("order_busy") > 0.0);
    let early = submit("ob", 8, "contract=1h", 900);
    std::thread::sleep(Duration::from_millis(1100)); // a later submit second
    let late = submit("oi", 8, "contract=1h", 900);
    wait_until(15, "the under-budget job to outrank the earlier one", || prio(late) > prio(early));
    assert!(prio(early) >= ALLOCATED && prio(late) >= ALLOCATED);
    cancel(fillers[0]);
    wait_until(60, "the under-budget job to start", || state(late) == "RUNNING");
    assert_eq!(state(early), "PENDING", "submitted first, over budget: still waiting");
    clean();
}

#[test]
fn e2e_2_unallocated_jobs_sort_below_allocated_ones() {
    clean();
    let fillers = fill("tb", "contract=1h");
    wait_until(30, "tier_busy to be charged", || used_gpu_s("tier_busy") > 0.0);
    let free = submit("ti", 8, "", 900); // under-used team, but no contract
    let zero = submit("ti", 8, "contract=0", 900);
    std::thread::sleep(Duration::from_millis(1100));
    let paid = submit("tb", 8, "contract=30m", 900); // over-used team, allocated
    wait_until(15, "priorities", || prio(paid) > 0 && prio(free) > 0);
    assert!(prio(paid) >= ALLOCATED, "contract > 0: allocated tier ({})", prio(paid));
    assert!(prio(free) < ALLOCATED && prio(zero) < ALLOCATED, "no contract / contract=0: unallocated tier");
    assert!(prio(paid) > prio(free));
    cancel(fillers[0]);
    wait_until(60, "the allocated job to start", || state(paid) == "RUNNING");
    assert_eq!(state(free), "PENDING");
    assert_eq!(state(zero), "PENDING");
    // Unallocated work is never charged.
    cancel(fillers[1]);
    wait_until(60, "an unallocated job to run", || state(free) == "RUNNING" || state(zero) == "RUNNING");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(used_gpu_s("tier_idle"), 0.0, "unallocated jobs are not charged");
    clean();
}

#[test]
fn e2e_3_priorities_follow_usage_and_a_restart_keeps_it() {
    clean();
    // Fillers of a third team, protected by their contract (unallocated ones
    // would be preempted by usage_a's and usage_b's jobs at once).
    let fillers = fill("tb", "contract=1h");
    let a1 = submit("ua", 8, "contract=1h", 900);
    let b1 = submit("ub", 8, "contract=1h", 900);
    // No usage yet: equal ratios, ties broken by name: usage_a first.
    wait_until(15, "usage_a to rank first", || prio(a1) > prio(b1));
    cancel(fillers[0]);
    wait_until(60, "usage_a's job to start", || state(a1) == "RUNNING");
    let a2 = submit("ua", 8, "contract=1h", 900);
    // usage_a now runs 8 GPUs, far above its rate: usage_b's job (its team
    // runs nothing) is owed first.
    wait_until(30, "usage_b's job to go first", || prio(b1) > prio(a2));
    wait_until(30, "the ledger to rank usage_b before usage_a", || {
        let r = ranks();
        r["usage_b"] < r["usage_a"]
    });

    // Let usage build up, then restart slurmctld.
    std::thread::sleep(Duration::from_secs(20));
    let before = used_gpu_s("usage_a");
    let t0 = Instant::now();
    assert!(before >= 8.0 * 15.0, "usage_a charged while running: {before} GPU-s");
    sh("bash", &["testbed/restart-ctld.sh"]);
    let log = std::fs::read_to_string(format!("{RUN_DIR}/log/slurmctld.log")).unwrap();
    assert!(log.contains("priority/tally: loaded ledger"), "the restarted slurmctld loaded the ledger");
    // Right after the restart the order is unchanged (usage was kept)…
    assert!(prio(b1) > prio(a2), "after restart: {} vs {}", prio(b1), prio(a2));
    // …and the next save neither lost nor double-charged usage: at most what
    // 8 GPUs ran meanwhile (plus a tick) was added.
    let saved_at = |s: &str| s.lines().find_map(|l| l.strip_prefix("saved_at ")).map(str::to_string);
    let first = saved_at(&std::fs::read_to_string(format!("{RUN_DIR}/state/tally/ledger.state")).unwrap());
    wait_until(30, "a save after the restart", || {
        saved_at(&std::fs::read_to_string(format!("{RUN_DIR}/state/tally/ledger.state")).unwrap()) != first
    });
    let after = used_gpu_s("usage_a");
    let allowed = before + 8.0 * (t0.elapsed().as_secs_f64() + 3.0);
    assert!(after >= before, "usage lost over the restart: {before} -> {after}");
    assert!(after <= allowed, "usage double-charged over the restart: {before} -> {after} (at most {allowed})");
    clean();
}

#[test]
fn e2e_4_sprio_shows_tallys_factors() {
    clean();
    let _fillers = fill("tb", "contract=1h");
    let paid = submit("ti", 4, "contract=1h", 900);
    let free = submit("ti", 4, "", 900);
    // With a time limit within the contract maximum: a long job that cannot
    // checkpoint of a team this far over its share would be held (its begin
    // time ahead), and sprio lists only jobs that wait now.
    let nice = try_submit("tb", 4, "contract=1h", 900, &["-t", "60"]).unwrap();
    sh("scontrol", &["update", &format!("jobid={nice}"), "nice=3"]);
    wait_until(15, "priorities", || [paid, free, nice].iter().all(|&j| prio(j) > 0));
    std::thread::sleep(Duration::from_secs(3)); // one more tick after the nice change
    let r = ranks();
    let out = sh("sprio", &["-h", "-o", "%i %Y %S %A %F %J %Q %N"]);
    let mut seen = 0;
    for line in out.lines() {
        let f: Vec<i64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
        let (id, total, site, age, fs, js, qos, nice_col) = (f[0] as u32, f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
        assert_eq!(total, site + age + fs + js + qos - nice_col, "job {id}: columns add up to PRIORITY");
        assert_eq!(total as u64, prio(id), "job {id}: sprio agrees with squeue");
        let team = if id == nice { "tier_busy" } else { "tier_idle" };
        // FAIRSHARE = need (bits 29-28) | level (27-18) | team (17-8).
        assert_eq!((fs >> 8) & 0x3ff, i64::from(1023 - r[team]), "job {id}: FAIRSHARE carries the team's 7-day rank");
        assert_eq!(fs & 0xff, 0, "job {id}: nothing below the team field in FAIRSHARE");
        if id == paid {
            assert_eq!(fs >> 28, 2, "tier_idle runs nothing: its allocated job is owed GPUs now");
        }
        if id == nice {
            assert_eq!(fs >> 28, 0, "tier_busy runs 16 GPUs, far above its rate: not owed");
        }
        if id == free {
            assert_eq!(site, 0, "unallocated: SITE 0");
        } else {
            assert_eq!(site, (1 << 31) - 1, "allocated: SITE 2^31-1");
        }
        if id == nice {
            assert_eq!(nice_col, 3 * 2, "NICE column is nice x 2 (bit 0 is the quick bit)");
        }
        seen += 1;
    }
    assert_eq!(seen, 3, "{out}");
    clean();
}

// ---- issue 4: contracts enforced by job_submit/tally and preempt/tally ----

#[test]
fn e2e_5_bad_contracts_are_refused_at_submit() {
    clean();
    let cases: &[(&str, &[&str], &str)] = &[
        ("contract=9h", &[], "tally: contract=9h exceeds the 8h maximum (allowed: 0 to 8h, e.g. contract=2h)"),
        ("contract=2x", &[], "tally: contract=2x: unknown unit `x` in `2x` (use d, h, m or s)"),
        ("contract=", &[], "tally: contract= has no value"),
        ("contract=-1h", &[], "tally: contract=-1h: negative duration"),
        ("contract=8h1m", &[], "exceeds the 8h maximum"),
        ("contract=1h", &["--time=30"], "tally: contract=1h is longer than the job's time limit of 30m"),
    ];
    for (comment, extra, msg) in cases {
        let err = try_submit("cb", 1, comment, 60, extra).expect_err(comment);
        assert!(err.contains(msg), "{comment}: sbatch said:\n{err}");
        println!("refused {comment:?}: {}", err.lines().find(|l| l.contains("tally:")).unwrap_or("").trim());
    }
    assert!(sh("squeue", &["-h", "-o", "%i"]).trim().is_empty(), "nothing was half-submitted");
    // Accepted comments come out in one spelling, the user's text kept.
    // (Held, so that it is still pending for the updates below: a free
    // node would start it at once, and a started job's contract is fixed.)
    let id = try_submit("cb", 1, "Contract=90m lr=3e-4", 60, &["--hold"]).unwrap();
    assert_eq!(field(id, "%k").as_deref(), Some("contract=1h30m lr=3e-4"));
    // Updates are checked too.
    let out = Command::new("scontrol").args(["update", &format!("jobid={id}"), "comment=contract=9h"]).output().unwrap();
    assert!(!out.status.success(), "scontrol update with contract=9h was accepted");
    assert_eq!(field(id, "%k").as_deref(), Some("contract=1h30m lr=3e-4"), "the refused update changed nothing");
    sh("scontrol", &["update", &format!("jobid={id}"), "comment=contract=45m,resumable"]);
    assert_eq!(field(id, "%k").as_deref(), Some("contract=45m,resumable"));
    clean();
}

#[test]
fn e2e_6_unallocated_work_is_preempted_within_a_scheduling_cycle() {
    clean();
    let fillers = fill("cb", "contract=0");
    let t = Instant::now();
    let paid = submit("ci", 8, "contract=1h", 900);
    wait_until(30, "the allocated job to preempt unallocated work", || state(paid) == "RUNNING");
    println!("allocated job started {:.1} s after submission by preempting unallocated work", t.elapsed().as_secs_f64());
    let requeued: Vec<u32> = fillers.iter().copied().filter(|&f| state(f) != "RUNNING").collect();
    assert_eq!(requeued.len(), 1, "exactly one 8-GPU filler made room");
    // Requeued, back in the queue with its comment.
    assert!(matches!(state(requeued[0]).as_str(), "PENDING" | "REQUEUED" | "PREEMPTED"), "{}", state(requeued[0]));
    assert_eq!(field(requeued[0], "%k").as_deref(), Some("contract=0"));
    // Unallocated jobs do not preempt each other.
    let free = submit("ci", 8, "", 900);
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(state(free), "PENDING", "an unallocated job preempted someone");
    clean();
}

#[test]
fn e2e_7_contracts_protect_then_expire_and_resumable_victims_go_first() {
    clean();
    // Node 1: two 4-GPU jobs with a 1-minute contract, one resumable.
    // Node 2: an 8-GPU job with an 8-hour contract. All allocated to contract_busy.
    let plain = submit("cb", 4, "contract=1m", 900);
    let resumable = submit("cb", 4, "contract=1m,resumable", 900);
    let long = submit("cb", 8, "contract=8h", 900);
    wait_until(60, "the contract jobs to run", || [plain, resumable, long].iter().all(|&j| state(j) == "RUNNING"));
    wait_until(30, "contract_busy to be charged", || used_gpu_s("contract_busy") > 0.0);
    let started = Instant::now();
    // contract_idle has used nothing: it far outranks contract_busy.
    let p = submit("ci", 4, "contract=1h", 900);
    // Inside their contracts nobody is preempted, however under-served the preemptor.
    while started.elapsed() < Duration::from_secs(40) {
        assert_eq!(state(p), "PENDING", "preempted inside a contract");
        for j in [plain, resumable, long] {
            assert_eq!(state(j), "RUNNING", "job {j} lost its contract");
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    // Once the 1-minute contracts run out, the resumable job goes; the one
    // that cannot checkpoint is never thrown away (it runs to its end).
    wait_until(90, "the preemptor to start after the contracts ran out", || state(p) == "RUNNING");
    println!("preemptor started {:.0} s after submission (contracts of 1 min)", started.elapsed().as_secs_f64());
    assert_ne!(state(resumable), "RUNNING", "the resumable victim was taken");
    assert_eq!(state(plain), "RUNNING", "the non-resumable one stayed");
    assert_eq!(state(long), "RUNNING", "the 8 h contract stayed");
    clean();
}

#[test]
fn e2e_8_debug_job_starts_within_seconds_on_a_full_cluster() {
    clean();
    // A full cluster: unallocated 4-GPU jobs everywhere.
    let fillers: Vec<u32> = (0..4).map(|_| submit("cb", 4, "contract=0", 900)).collect();
    wait_until(60, "fillers to run", || fillers.iter().all(|&i| state(i) == "RUNNING"));
    let t = Instant::now();
    let debug = submit("ci", 2, "contract=10m", 300);
    wait_until(60, "the debug job to start", || state(debug) == "RUNNING");
    let wait = t.elapsed().as_secs_f64();
    println!("debug job (2 GPUs, contract=10m) waited {wait:.1} s on a full cluster");
    assert_eq!(fillers.iter().filter(|&&f| state(f) != "RUNNING").count(), 1, "one filler made room");
    clean();
}

/// How long job `id` has run (squeue's %M: `[[D-]HH:]MM:SS`), 0 if not running.
fn ran_s(id: u32) -> u64 {
    let t = field(id, "%M").unwrap_or_default();
    let (days, rest) = t.split_once('-').map_or((0, t.as_str()), |(d, r)| (d.parse().unwrap_or(0), r));
    let secs = rest.split(':').fold(0u64, |acc, p| acc * 60 + p.parse::<u64>().unwrap_or(0));
    days * 86_400 + secs
}

#[test]
fn e2e_15_a_run_started_after_a_preemption_keeps_its_whole_contract_a_requeue_does_not() {
    clean();
    // One node: an 8 h contract, never a victim here. The other: a
    // resumable job with a 20 s contract.
    let long = submit("cb", 8, "contract=8h", 900);
    let r = submit("cb", 8, "contract=20s,resumable", 900);
    wait_until(60, "both to run", || state(long) == "RUNNING" && state(r) == "RUNNING");
    wait_until(60, "the 20 s contract to run out", || ran_s(r) >= 22);
    // 1. A debug job of the same team takes it at once (time-slicing).
    let t = Instant::now();
    let d1 = submit("cb", 2, "contract=10s", 6);
    wait_until(30, "the first debug job to start", || state(d1) == "RUNNING");
    println!("debug job started {:.1} s after submission by time-slicing its team's job", t.elapsed().as_secs_f64());
    assert_ne!(state(r), "RUNNING", "the job past its contract yielded");
    assert_eq!(state(long), "RUNNING");
    // 2. Its next run has a whole contract again: a second debug job waits.
    wait_until(90, "the preempted job to run again", || state(r) == "RUNNING");
    let back = Instant::now();
    let d2 = submit("cb", 2, "contract=10s", 6);
    while back.elapsed() < Duration::from_secs(15) {
        assert_eq!(state(r), "RUNNING", "preempted {:.0} s into a run the scheduler started after preempting it", back.elapsed().as_secs_f64());
        assert_eq!(state(d2), "PENDING");
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_until(45, "the second debug job once the new run's contract is over", || state(d2) == "RUNNING");
    println!("second debug job started {:.1} s after the preempted job ran again (contract 20 s)", back.elapsed().as_secs_f64());
    // 3. A requeue by an admin (or the user) buys no fresh contract: once
    //    the job has used its contract, it is a victim from the first
    //    second of its next run.
    wait_until(90, "the job to run again", || state(r) == "RUNNING");
    wait_until(60, "its contract to run out", || ran_s(r) >= 22);
    sh("scontrol", &["requeue", &r.to_string()]);
    wait_until(90, "the requeued job to run again", || state(r) == "RUNNING");
    let again = Instant::now();
    let d3 = submit("cb", 2, "contract=10s", 6);
    wait_until(12, "a debug job to take the requeued job at once", || state(d3) == "RUNNING");
    println!("third debug job started {:.1} s after the requeued job ran again", again.elapsed().as_secs_f64());
    clean();
}

/// Appends `extra` to the test bed's config copy and reconfigures, until
/// the plugin runs on it (its active copy has it: on 24.11 a reconfigure
/// restarts slurmctld); restores the config whatever happens.
struct ConfigExtra {
    original: String,
}

impl ConfigExtra {
    fn new(extra: &str) -> ConfigExtra {
        let original = std::fs::read_to_string(config()).unwrap();
        std::fs::write(config(), format!("{original}\n{extra}")).unwrap();
        sh("scontrol", &["reconfigure"]);
        let active = format!("{RUN_DIR}/state/tally/tally.toml.active");
        wait_until(60, "the plugin to run on the changed config", || {
            std::fs::read_to_string(&active).is_ok_and(|a| a.contains(extra.trim())) && sh("scontrol", &["ping"]).contains("UP")
        });
        ConfigExtra { original }
    }
}

impl Drop for ConfigExtra {
    fn drop(&mut self) {
        let _ = std::fs::write(config(), &self.original);
        let _ = Command::new("scontrol").arg("reconfigure").status();
    }
}

/// Turns `[planner]` on in the test bed's config copy; restores the config
/// and the partition whatever happens.
struct PlannerOn {
    _config: ConfigExtra,
}

impl PlannerOn {
    fn new() -> PlannerOn {
        PlannerOn { _config: ConfigExtra::new("[planner]\nenabled = true\ninterval = \"2s\"\nstep = \"10m\"\nhorizon = \"4h\"\n") }
    }
}

impl Drop for PlannerOn {
    fn drop(&mut self) {
        // (Before the config is restored, which the field's drop does.)
        let _ = Command::new("scontrol").args(["update", "PartitionName=gpu", "State=UP"]).status();
    }
}

#[test]
fn e2e_9_planner_starts_the_job_that_fits_the_hole_first() {
    clean();
    let _on = PlannerOn::new();
    // plan_busy holds node 1 whole and half of node 2 (and so ranks below plan_idle).
    let big = submit("pb", 8, "contract=1h", 900);
    wait_until(60, "the 8-GPU job to run", || state(big) == "RUNNING");
    let half = submit("pb", 4, "contract=1h", 900);
    wait_until(60, "the 4-GPU job to run", || state(half) == "RUNNING");
    // Nothing new starts while the partition is down: the queue stays for us to read.
    sh("scontrol", &["update", "PartitionName=gpu", "State=DOWN"]);
    // Needs a free node: none until `big` ends.
    let whole = submit("pi", 8, "contract=1h", 600);
    // Fits the 4 GPUs left on node 2; a time limit within the contract
    // maximum (without one, a job that cannot checkpoint of a team over its
    // share waits while plan_idle is owed: docs/design.md rule 9).
    let fits = try_submit("pb", 4, "contract=1h", 600, &["-t", "60"]).unwrap();
    let r = ranks();
    wait_until(30, "usage to rank plan_busy below plan_idle", || {
        let r = ranks();
        r["plan_idle"] < r["plan_busy"]
    });
    const PLAN: u64 = 1 << 30;
    wait_until(30, "the planner to mark the job that fits", || prio(fits) & PLAN != 0);
    let (p_whole, p_fits) = (prio(whole), prio(fits));
    println!("ranks {r:?}; priority of the 8-GPU job of plan_idle {p_whole:#x}, of the 4-GPU job of plan_busy {p_fits:#x}");
    assert_eq!(p_whole & PLAN, 0, "the 8-GPU job cannot start now: no plan bit");
    assert!((p_whole >> 28) & 3 > (p_fits >> 28) & 3, "plan_idle's job is owed GPUs now, plan_busy's is not");
    assert!(p_fits > p_whole, "the job the plan starts now goes first");
    // sprio: the plan bit is the PARTITION column.
    let sp = sh("sprio", &["-h", "-j", &fits.to_string(), "-o", "%i %P"]);
    assert!(sp.split_whitespace().nth(1).and_then(|v| v.parse::<f64>().ok()) == Some(PLAN as f64), "sprio: {sp}");
    let log = std::fs::read_to_string(format!("{RUN_DIR}/log/slurmctld.log")).unwrap_or_default();
    assert!(log.contains("priority/tally: plan: "), "the planner logs each re-plan");
    // Open the partition: the 4-GPU job starts; the 8-GPU one still waits for a node.
    sh("scontrol", &["update", "PartitionName=gpu", "State=UP"]);
    wait_until(60, "the planned job to start", || state(fits) == "RUNNING");
    assert_eq!(state(whole), "PENDING");
    clean();
}

/// Jobs in the queue (any state).
fn queue_len() -> usize {
    sh("squeue", &["-h", "-o", "%i"]).lines().count()
}

#[test]
fn e2e_10_a_kill_9_in_a_submit_storm_loses_nothing() {
    clean();
    // storm_a holds both nodes with protected jobs; storm_b runs nothing
    // and is owed: its jobs would preempt storm_a's but for the contracts.
    let fillers = fill("sa", "contract=1h");
    wait_until(30, "storm_a to be charged", || used_gpu_s("storm_a") > 0.0);
    // slurmctld itself forgets what happened since its last state save when
    // killed with -9: a filler that started after it comes back PENDING
    // and its step is killed ("Registered PENDING JobId=… on node"). That
    // is Slurm's durability, not Tally's: wait until slurmctld has saved
    // the fillers as running, so the test checks what Tally decides.
    // Nor does slurmctld start again (26.05: "fatal: No Assoc usage file
    // … to recover", unless started with -i) when it is killed before its
    // first full state save (every 5 minutes, and at shutdown) after a fresh
    // start: a clean restart writes it.
    if !std::path::Path::new(&format!("{RUN_DIR}/state/assoc_usage")).exists() {
        sh("bash", &["testbed/restart-ctld.sh"]);
    }
    let running_since = std::time::SystemTime::now();
    // Something slurmctld must save after that: it saves job state when
    // jobs change, and the fillers may have been saved before
    // `running_since` (then nothing else changes; seen on 24.11).
    let nudge = try_submit("sa", 1, "contract=0", 60, &["--hold"]).unwrap();
    cancel(nudge);
    wait_until(60, "slurmctld to save its job state with the fillers running", || {
        std::fs::metadata(format!("{RUN_DIR}/state/job_state")).and_then(|m| m.modified()).is_ok_and(|t| t > running_since)
    });
    // The storm: 2,000 submissions from 8 shells at once, of both teams.
    let storm: Vec<std::process::Child> = (0..8)
        .map(|w| {
            let user = if w % 2 == 0 { "sa" } else { "sb" };
            let script = format!(
                "source testbed/lib.sh; for i in $(seq 250); do submit_as {user} -N1 --gres=gpu:1 --comment contract=1h --wrap 'sleep 60' >/dev/null 2>&1 || true; done"
            );
            Command::new("bash").args(["-c", &script]).current_dir(root()).spawn().expect("a storm shell")
        })
        .collect();
    // kill -9 twice in the middle of it (no fini, no last save), at 300
    // and at 1,000 jobs queued.
    let before = used_gpu_s("storm_a");
    let t0 = Instant::now();
    for at in [300, 1000] {
        wait_until(240, "the storm to be under way", || queue_len() >= at);
        let killed = Instant::now();
        let out = Command::new("bash").arg("testbed/restart-ctld.sh").env("TALLY_KILL", "1").current_dir(root()).output().unwrap();
        assert!(out.status.success(), "restart after kill -9: {}", String::from_utf8_lossy(&out.stderr));
        println!("kill -9 at {} jobs queued: slurmctld answering again {:.1} s later", queue_len(), killed.elapsed().as_secs_f64());
    }
    for mut c in storm {
        let _ = c.wait();
    }
    let queued = queue_len();
    assert!(queued >= 1000, "the storm went on after the restarts: {queued} jobs queued");
    // Every job has a priority again (0 would be held) within two periods.
    // The held nudge may come back too (26.05: its cancel was not saved
    // before the kill): held by its user, it is no job Tally orders.
    wait_until(30, "every pending job to have Tally's priority", || {
        let p = sh("squeue", &["-h", "-t", "PD", "-o", "%Q %r"]);
        p.lines()
            .filter(|l| !l.ends_with(" JobHeldUser"))
            .all(|l| l.split(' ').next().and_then(|v| v.parse::<u64>().ok()).is_some_and(|v| v >= ALLOCATED))
    });
    // The ledger: nothing lost (it holds at least the last save before the
    // kill, at most one period behind), nothing charged twice (at most what
    // 16 GPUs ran since, plus a period).
    let saved_at = |s: &str| s.lines().find_map(|l| l.strip_prefix("saved_at ")).map(str::to_string);
    let first = saved_at(&std::fs::read_to_string(format!("{RUN_DIR}/state/tally/ledger.state")).unwrap());
    wait_until(30, "a save after the restart", || {
        saved_at(&std::fs::read_to_string(format!("{RUN_DIR}/state/tally/ledger.state")).unwrap()) != first
    });
    let after = used_gpu_s("storm_a");
    let allowed = before + 16.0 * (t0.elapsed().as_secs_f64() + 3.0);
    assert!(after >= before, "usage lost over the kill: {before} -> {after}");
    assert!(after <= allowed, "usage charged twice over the kill: {before} -> {after} (at most {allowed})");
    println!(
        "{queued} jobs queued after the storm, all with Tally's priority; storm_a charged {before:.0} GPU-s before the kills, {after:.0} after ({:.0} s of 16 GPUs later: at most {allowed:.0})",
        t0.elapsed().as_secs_f64()
    );
    // Contracts still protect: storm_b is owed GPUs, storm_a's fillers stay.
    assert!(fillers.iter().all(|&f| state(f) == "RUNNING"), "a protected job was preempted after the restart");
    let log = std::fs::read_to_string(format!("{RUN_DIR}/log/slurmctld.log")).unwrap();
    assert!(!log.contains("internal error"), "a panic was caught in slurmctld");
    clean();
}

/// sacct of the bed as `tally trace import --format sacct` documents it,
/// for the jobs `ids`, with `columns`.
fn sacct(ids: &[u32], columns: &str) -> String {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    let out = Command::new("timeout")
        .args(["60", "sacct", "-a", "-X", "-D", "-P", "-j", &ids.join(","), "-o", columns])
        .env("SLURM_TIME_FORMAT", "%s")
        .output()
        .expect("sacct");
    assert!(out.status.success(), "sacct: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn e2e_11_the_beds_own_history_imports_with_its_gpu_seconds() {
    clean();
    let jobs = [submit("sa", 2, "contract=1h,resumable", 3), submit("sb", 4, "contract=30m", 4)];
    // Done, and in the accounting database (slurmdbd writes a moment later).
    wait_until(120, "both jobs to finish and reach sacct", || {
        jobs.iter().all(|&j| field(j, "%T").is_none()) && sacct(&jobs, "JobIDRaw,State").lines().filter(|l| l.contains("COMPLETED")).count() == 2
    });
    let history = format!("{RUN_DIR}/history.txt");
    std::fs::write(&history, sacct(&jobs, tally_sim::sacct::HISTORY_COLUMNS)).unwrap();
    let tally = format!("{}/target/release/tally", root().display());
    let csv = sh(&tally, &["trace", "import", "--format", "sacct", "--config", &config(), &history]);
    let trace = tally_sim::trace::parse_csv(&csv).unwrap_or_else(|e| panic!("{e}\n{csv}"));
    assert_eq!(trace.jobs.len(), 2, "{csv}");
    // sacct's own account of each job, from columns the import does not read.
    let own = sacct(&jobs, "JobIDRaw,ElapsedRaw,AllocTRES,Account,User");
    for line in own.lines().skip(1) {
        let f: Vec<&str> = line.split('|').collect();
        let id: u64 = f[0].parse().unwrap();
        let elapsed: u64 = f[1].parse().unwrap();
        let gpus: u64 = f[2].split(',').find_map(|t| t.strip_prefix("gres/gpu=")).and_then(|g| g.parse().ok()).unwrap_or(0);
        let j = trace.jobs.iter().find(|j| j.job_id == id).unwrap_or_else(|| panic!("job {id} not imported:\n{csv}"));
        assert_eq!(u64::from(j.gpus) * j.duration_s, gpus * elapsed.max(1), "job {id}: GPU-seconds\n{csv}\n{own}");
        assert_eq!((j.account.as_str(), j.user.as_str()), (f[3], f[4]), "job {id}");
    }
    let first = trace.jobs.iter().find(|j| j.job_id == u64::from(jobs[0])).unwrap();
    assert_eq!((first.gpus, first.contract_s, first.resumable), (2, 3600, true));
    let second = trace.jobs.iter().find(|j| j.job_id == u64::from(jobs[1])).unwrap();
    assert_eq!((second.gpus, second.contract_s, second.resumable), (4, 1800, false));
    // `tally budget` replays the imported history under two budgets.
    let trace_file = format!("{RUN_DIR}/history.csv");
    std::fs::write(&trace_file, &csv).unwrap();
    let proposed = format!("{RUN_DIR}/proposed.toml");
    std::fs::write(&proposed, std::fs::read_to_string(config()).unwrap().replace("[accounts.storm_a]\nshare = 8", "[accounts.storm_a]\nshare = 4"))
        .unwrap();
    let out = sh(&tally, &["budget", "--config", &proposed, "--current", &config(), "--trace", &trace_file, "--quiet"]);
    assert!(out.lines().any(|l| l.trim_start().starts_with("storm_a")), "{out}");
}

/// `tally share --json` rows by account.
fn share_rows(accounts: &str) -> (BTreeMap<String, serde_json::Value>, u64) {
    share_rows_of(accounts, None)
}

/// [`share_rows`] of the ledger at `state` (default: the plugin's).
fn share_rows_of(accounts: &str, state: Option<&str>) -> (BTreeMap<String, serde_json::Value>, u64) {
    let config = config();
    let mut args = vec!["share", "--json", "-A", accounts, "-c", &config];
    if let Some(state) = state {
        args.extend(["--state", state]);
    }
    let out = sh(&format!("{}/target/release/tally", root().display()), &args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let rows = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["user"].is_null())
        .map(|r| (r["account"].as_str().unwrap().to_string(), r.clone()))
        .collect();
    (rows, v["saved_at"].as_u64().unwrap())
}

#[test]
fn e2e_12_share_shows_the_owed_and_delivered_the_workload_caused() {
    clean();
    let busy = fill("vb", "contract=10m");
    let started: u64 = busy.iter().map(|&j| field(j, "%S").and_then(|s| unix(&s)).unwrap()).max().unwrap();
    let busy_asked: u64 = busy.iter().map(|&j| field(j, "%V").and_then(|s| unix(&s)).unwrap()).min().unwrap();
    let waiting = [submit("vi", 8, "contract=1h", 600), submit("vi", 8, "contract=1h", 600)];
    let submitted = unix(&field(waiting[0], "%V").unwrap()).unwrap();
    std::thread::sleep(Duration::from_secs(12));
    let (rows, saved_at) = share_rows("see_busy,see_idle");
    let num = |a: &str, k: &str| rows[a][k].as_f64().unwrap_or_else(|| panic!("{a}.{k}: {:?}", rows[a]));
    let calc = 2.0;
    // Each team's rate: 2% of 16 GPUs.
    let rate = 0.02 * 16.0;
    assert!((num("see_busy", "rate_gpus") - rate).abs() < 1e-9);
    // Delivered: see_busy's 16 GPUs since they started, charged to the last
    // save (within one calc period, and a second of clock granularity).
    let ran = (saved_at - started) as f64;
    let delivered_s = num("see_busy", "delivered_gpu_hours") * 3600.0 / 16.0;
    assert!(delivered_s <= ran + 1.0 && delivered_s >= ran - calc - 1.0, "delivered {delivered_s} s of 16 GPUs, ran {ran} s: {:?}", rows["see_busy"]);
    // Owed, hour by hour: min(rate × the time the plugin measured in the
    // hour, the GPU-hours asked in it). Both teams asked for far more than
    // their rate since their jobs were submitted, so at least rate × that
    // time (within a calc period) is owed, and at most rate × the time
    // since the hour began.
    for (team, since) in [("see_busy", busy_asked), ("see_idle", submitted)] {
        let measured = num(team, "owed_gpu_hours") * 3600.0 / rate;
        let wall = (saved_at - since) as f64;
        let hour = (saved_at - (since - since % 3600)) as f64;
        assert!(
            measured <= hour + 1.0 && measured >= wall - 2.0 * calc - 1.0,
            "{team}: owed for {measured} s, asked for {wall} s, hour began {hour} s ago: {:?}",
            rows[team]
        );
    }
    // see_idle ran nothing: delivered 0 of what it is owed; short now by its rate.
    assert_eq!(num("see_idle", "delivered_gpu_hours"), 0.0);
    assert_eq!(rows["see_idle"]["delivered_fraction"].as_f64(), Some(0.0));
    assert!((num("see_idle", "short_now_gpus") - rate).abs() < 1e-9, "{:?}", rows["see_idle"]);
    assert_eq!(num("see_idle", "waiting_gpus"), 16.0);
    // The table says the same, in sshare's idiom.
    let table = sh(&format!("{}/target/release/tally", root().display()), &["share", "-A", "see_idle", "-c", &config()]);
    assert!(table.lines().any(|l| l.starts_with("             Account       User     Budget")), "{table}");
    assert!(table.lines().any(|l| l.starts_with(" see_idle ") && l.trim_end().ends_with(" 0.0")), "{table}");
    // `tally explain` of the second waiting job names the first as ahead
    // of it and the full cluster as what blocks it.
    let tally = format!("{}/target/release/tally", root().display());
    let out = sh(&tally, &["explain", &waiting[1].to_string(), "--json", "-c", &config()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(v["ahead"]["count"], 1, "{out}");
    assert_eq!(v["ahead"]["first"][0]["job"], waiting[0].to_string(), "{out}");
    assert!(v["blocks"].as_array().unwrap().iter().any(|b| b["kind"] == "no_free_gpus"), "{out}");
    // Nothing it may preempt: see_busy's jobs are inside their contracts.
    assert_eq!(v["preemption"]["may_preempt"], false, "{out}");
    assert!(v["preemption"]["protected"].as_array().unwrap().iter().all(|p| p["why"].as_str().unwrap().starts_with("contract until")), "{out}");
    let text = sh(&tally, &["explain", &waiting[1].to_string(), "-c", &config()]);
    assert!(text.contains("Ahead of it: 1 pending job") && text.contains("no free GPUs"), "{text}");
    for j in busy.iter().chain(&waiting) {
        cancel(*j);
    }
}

/// Unix seconds of a squeue time (`SLURM_TIME_FORMAT` is not set: ISO).
fn unix(t: &str) -> Option<u64> {
    let out = Command::new("date").args(["-d", t, "+%s"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Resumes a node when the test ends, however it ends.
struct Undrain(&'static str);

impl Drop for Undrain {
    fn drop(&mut self) {
        let _ = Command::new("scontrol").args(["update", &format!("NodeName={}", self.0), "State=RESUME"]).status();
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn e2e_13_a_drained_node_empties_as_its_contracts_end() {
    clean();
    // Node n1: a resumable job with a 1-minute contract and one that cannot
    // checkpoint with a 2-minute contract (preemption never takes it past
    // its contract; a drain does, at its contract's end).
    let resumable = try_submit("cb", 4, "contract=1m,resumable", 900, &["-w", "n1"]).unwrap();
    let plain = try_submit("cb", 4, "contract=2m", 900, &["-w", "n1"]).unwrap();
    wait_until(60, "both jobs to run on n1", || state(resumable) == "RUNNING" && state(plain) == "RUNNING");
    let start = |id| field(id, "%S").and_then(|t| unix(&t)).expect("a start time");
    let (end_r, end_p) = (start(resumable) + 60, start(plain) + 120);
    sh("scontrol", &["update", "NodeName=n1", "State=DRAIN", "Reason=e2e: failing GPU"]);
    let _resume = Undrain("n1");
    // Inside its contract a job stays, drain or not (a second of slack for
    // squeue's whole-second start times).
    while now_s() + 1 < end_r {
        assert_eq!(state(resumable), "RUNNING", "requeued inside its contract");
        assert_eq!(state(plain), "RUNNING", "requeued inside its contract");
        std::thread::sleep(Duration::from_secs(2));
    }
    // Then each goes within a few calc periods of its contract's end.
    wait_until(30, "the resumable job to be requeued after its contract", || state(resumable) != "RUNNING");
    println!("resumable job requeued {} s after its contract ended", now_s().saturating_sub(end_r));
    while now_s() + 1 < end_p {
        assert_eq!(state(plain), "RUNNING", "the non-resumable job was requeued inside its contract");
        std::thread::sleep(Duration::from_secs(2));
    }
    wait_until(30, "the non-resumable job to be requeued at its contract's end", || state(plain) != "RUNNING");
    println!("non-resumable job requeued {} s after its contract ended", now_s().saturating_sub(end_p));
    // Back in the queue (not lost), and n1 empty: DRAINED. A requeued job
    // shows COMPLETING until slurmd confirms its end (CI once caught it
    // there), so that passing state is waited out first.
    for j in [resumable, plain] {
        wait_until(60, "a requeued job to finish COMPLETING", || state(j) != "COMPLETING");
        assert!(matches!(state(j).as_str(), "PENDING" | "REQUEUED" | "CONFIGURING"), "job {j}: {}", state(j));
    }
    // (`drained*`: also not responding for a while, as a slurmd of this
    // bed sometimes is after the kill -9 test; empty all the same.)
    // Empty and drained: IDLE+DRAIN (DRAINING while a job is still on it).
    let node_state = || {
        sh("scontrol", &["show", "node", "n1", "-o"])
            .split_whitespace()
            .find_map(|w| w.strip_prefix("State=").map(str::to_string))
            .unwrap_or_default()
    };
    let t = Instant::now();
    while !(node_state().starts_with("IDLE") && node_state().contains("DRAIN")) {
        // (Slurm frees the node once slurmd confirms the requeued jobs'
        // ends: seconds here, longer when a slurmd of this bed is slow to
        // answer after the kill -9 test.)
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "n1 not drained after 180 s: State={}\n{}",
            node_state(),
            sh("sinfo", &["-N", "-n", "n1", "-o", "%N %P %T %E"])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The log said what the drain waited for, and on which contract.
    let log = std::fs::read_to_string(format!("{RUN_DIR}/log/slurmctld.log")).unwrap_or_default();
    assert!(log.contains(&format!("host drain: n1 waits on job {plain}, inside its contract")), "no drain wait line for job {plain}");
    assert!(log.contains(&format!("host drain: requeueing job {resumable}: past its contract, resumable")), "no requeue line");
    clean();
}

#[test]
fn e2e_14_gpu_types_are_charged_at_their_weights() {
    clean();
    // The bed's nodes: n1 has 8 H100s, n2 8 B200s (TALLY_GPU_TYPES).
    // (A node in two partitions is listed once for each.)
    let nodes: std::collections::BTreeSet<String> = sh("sinfo", &["-h", "-N", "-n", "n1,n2", "-o", "%N %G"]).lines().map(str::to_string).collect();
    assert_eq!(nodes.into_iter().collect::<Vec<_>>(), ["n1 gpu:h100:8", "n2 gpu:b200:8"]);
    let _weights = ConfigExtra::new("[cluster.gpu_types]\nh100 = 1.0\nb200 = 2.2\n");
    let before = (used_gpu_s("usage_a"), used_gpu_s("usage_b"));
    // The same 4 GPUs for the same time: an untyped ask on the H100 node,
    // a typed one (the B200s) for the other team.
    let on_h100 = try_submit("ua", 4, "contract=1h", 900, &["-w", "n1"]).unwrap();
    let on_b200 = try_submit("ub", 0, "contract=1h", 900, &["--gres=gpu:b200:4"]).unwrap();
    wait_until(60, "both jobs to run", || state(on_h100) == "RUNNING" && state(on_b200) == "RUNNING");
    std::thread::sleep(Duration::from_secs(20));
    cancel(on_h100);
    cancel(on_b200);
    wait_until(60, "both jobs to end", || field(on_h100, "%T").is_none() && field(on_b200, "%T").is_none());
    // Each job's run as Slurm measured it, and the ledger's charge.
    let elapsed: Vec<f64> = sacct(&[on_h100, on_b200], "ElapsedRaw").lines().skip(1).filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(elapsed.len(), 2, "sacct's ElapsedRaw of both jobs");
    // The plugin charges to a job's end at the next recalculation (2 s here).
    let charged = |account: &str, was: f64, want: f64| {
        let mut got = 0.0;
        wait_until(30, "the runs to be charged", || {
            got = used_gpu_s(account) - was;
            (got - want).abs() <= 0.1 * want
        });
        got
    };
    let want = (4.0 * elapsed[0], 2.2 * 4.0 * elapsed[1]);
    let got = (charged("usage_a", before.0, want.0), charged("usage_b", before.1, want.1));
    println!(
        "charged {:.0} units for 4 H100s x {:.0} s (want {:.0}), {:.0} for 4 B200s x {:.0} s (want {:.0})",
        got.0, elapsed[0], want.0, got.1, elapsed[1], want.1
    );
    let share = sh(&format!("{}/target/release/tally", root().display()), &["share", "-c", &config()]);
    assert!(share.contains("budget units"), "tally share says its unit with GPU types:\n{share}");
    clean();
}

/// The sudoers file e2e_16 writes, removed however the test ends.
struct Sudoers(&'static str);
impl Drop for Sudoers {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// The reports as docs/reports.md deploys them: the package's tally, run by
/// a user who is not an admin through the documented sudoers line, as the
/// SlurmUser. Their view holds their team and nothing of another team's:
/// no row, no job, whatever file or environment they bring.
#[test]
fn e2e_16_private_reports_stay_private_through_sudo() {
    let tally = "/usr/bin/tally"; // the package's, installed by the run script
    assert!(std::path::Path::new(tally).exists(), "{tally}: the e2e runs install Tally's package");
    // Both teams have usage in the ledger and a job in the queue.
    let theirs = submit("ub", 1, "contract=1h", 600);
    let mine = submit("ua", 1, "contract=1h", 600);
    wait_until(60, "both jobs to run", || state(theirs) == "RUNNING" && state(mine) == "RUNNING");
    let was = used_gpu_s("usage_b");
    wait_until(30, "usage_b's run to be charged", || used_gpu_s("usage_b") > was);
    // An admin sees both (so what follows can fail).
    let all = sh(tally, &["share", "-P", "-n", "-o", "Account", "-c", &config()]);
    assert!(all.lines().any(|l| l.trim() == "usage_b") && all.lines().any(|l| l.trim() == "usage_a"), "{all}");

    let show_config = sh("scontrol", &["show", "config"]);
    let slurm_user = show_config
        .lines()
        .find_map(|l| l.trim().strip_prefix("SlurmUser"))
        .and_then(|v| v.trim_start().strip_prefix('=')?.trim().split('(').next().map(str::to_string))
        .expect("scontrol show config: SlurmUser");
    let path = "/etc/sudoers.d/tally-e2e";
    let mut rule = format!("ALL ALL=({slurm_user}) NOPASSWD: {tally} share, {tally} share *, {tally} explain *\n");
    // A Slurm under its own prefix (the source-built beds): its commands
    // are not on sudo's secure_path, and docs/reports.md says to add them.
    let squeue = sh("bash", &["-c", "command -v squeue"]);
    let slurm_bin = std::path::Path::new(squeue.trim()).parent().expect("squeue's directory").display().to_string();
    if slurm_bin != "/usr/bin" {
        rule = format!("Defaults!{tally} secure_path=\"{slurm_bin}:/usr/sbin:/usr/bin:/sbin:/bin\"\n{rule}");
    }
    std::fs::write(path, &rule).unwrap();
    let _sudoers = Sudoers(path);
    sh("chmod", &["0440", path]);
    sh("visudo", &["-c", "-f", path]);

    // A config and a ledger copy of ua's own, in a directory ua owns.
    let own = format!("{RUN_DIR}/e2e-ua");
    let _ = std::fs::remove_dir_all(&own);
    std::fs::create_dir_all(&own).unwrap();
    let evil = format!("{own}/open.toml");
    std::fs::write(&evil, std::fs::read_to_string(config()).unwrap() + "\n[reports]\nprivate = false\n").unwrap();
    let svg = format!("{own}/chart.svg");
    sh("chown", &["-R", "ua", &own]);
    let as_ua = |args: &[&str]| {
        let out = Command::new("timeout")
            .args(["60", "runuser", "-u", "ua", "--", "sudo", "-n", "-u", &slurm_user, tally])
            .args(args)
            .env("SLURM_CONF", "/nonexistent/slurm.conf")
            .env("TALLY_CONFIG", &evil)
            .current_dir("/")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let others: Vec<String> = std::fs::read_to_string(config())
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("[accounts.")?.strip_suffix(']').map(str::to_string))
        .filter(|a| a != "usage_a")
        .collect();
    assert!(others.iter().any(|a| a == "usage_b"));
    let leaks = |text: &str| -> Vec<String> { others.iter().filter(|a| text.contains(a.as_str())).cloned().collect() };

    // The plain report and its long and all-users forms: ua's team only.
    for args in [&["share"][..], &["share", "-l"], &["share", "-a", "-P"], &["share", "--json"]] {
        let (ok, out, err) = as_ua(args);
        assert!(ok, "sudo tally {args:?} as ua: {err}");
        assert!(out.contains("usage_a"), "ua sees their team:\n{out}");
        assert!(leaks(&out).is_empty(), "another team in ua's view ({:?}):\n{out}", leaks(&out));
        assert!(!out.contains("|ub|"), "another user's row in ua's view:\n{out}");
    }
    let (ok, out, _) = as_ua(&["share", "-A", "usage_b", "-P"]);
    assert!(!ok || leaks(&out).is_empty(), "-A of another team:\n{out}");
    // ua's own job is explained; another team's is refused.
    let (ok, out, err) = as_ua(&["explain", &mine.to_string()]);
    assert!(ok && out.contains("usage_a"), "{out}{err}");
    let (ok, out, err) = as_ua(&["explain", &theirs.to_string()]);
    assert!(!ok && out.is_empty(), "another team's job explained to ua:\n{out}");
    assert!(err.contains("not yours nor your accounts'"), "{err}");
    // Files of the caller's choosing: refused, nothing shown or written.
    let ledger = format!("{RUN_DIR}/state/tally/ledger.state");
    for args in [
        &["share", "-c", evil.as_str()][..],
        &["share", "--state", ledger.as_str()],
        &["share", "--svg", svg.as_str()],
        &["explain", &theirs.to_string(), "-c", evil.as_str()],
        &["explain", &theirs.to_string(), "--squeue-json", "/dev/null"],
    ] {
        let (ok, out, err) = as_ua(args);
        assert!(!ok && out.is_empty(), "sudo tally {args:?} as ua:\n{out}");
        assert!(err.contains("may be given by admins only"), "{err}");
    }
    assert!(!std::path::Path::new(&svg).exists(), "nothing written for ua");
    // The chart on stdout is theirs only too.
    let (ok, out, err) = as_ua(&["share", "--svg", "-"]);
    assert!(ok && out.contains("<svg") && leaks(&out).is_empty(), "{err}{}", leaks(&out).join(","));
    let _ = std::fs::remove_dir_all(&own);
    // The bed's logs (slurmctld's says who was refused what) are no more
    // readable than Slurm keeps its own.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
    assert_eq!(mode(&format!("{RUN_DIR}/log")), 0o700, "{RUN_DIR}/log");
    for e in std::fs::read_dir(format!("{RUN_DIR}/log")).unwrap().flatten() {
        let p = e.path().display().to_string();
        if p.ends_with(".out") {
            assert_eq!(mode(&p) & 0o077, 0, "{p} is readable by others");
        }
    }
    let (ok, out, _) = as_ua(&["share", "--state", &format!("{RUN_DIR}/log/slurmctld.log")]);
    assert!(!ok && out.is_empty());
    clean();
}

/// `sacctmgr -i` (bounded), panicking with its output on failure.
fn sacctmgr(args: &[&str]) {
    let out = Command::new("timeout").args(["30", "sacctmgr", "-i"]).args(args).output().unwrap();
    assert!(out.status.success(), "sacctmgr {args:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// The associations e2e_17 adds, removed however the test ends.
struct Associations;
impl Drop for Associations {
    fn drop(&mut self) {
        for args in [&["remove", "user", "cb", "account=e2e_lab"][..], &["remove", "user", "cb", "account=root"], &["remove", "account", "e2e_lab"]] {
            let _ = Command::new("timeout").args(["30", "sacctmgr", "-i"]).args(args).output();
        }
    }
}

/// Accounts Slurm lets the user use but with no budget of their own in
/// tally.toml (`root`, one outside the tree) hold no contract: refused at
/// sbatch and at `scontrol update account=…` alike. An update's refusal
/// says why where the release lets it (24.11: scontrol prints it).
#[test]
fn e2e_17_updates_are_judged_as_submissions_and_say_why() {
    clean();
    drop(Associations); // what an interrupted run left
    sacctmgr(&["add", "account", "e2e_lab", "parent=root"]);
    let _associations = Associations;
    sacctmgr(&["add", "user", "cb", "account=e2e_lab"]);
    sacctmgr(&["add", "user", "cb", "account=root"]);
    // slurmctld hears of new associations from slurmdbd: wait until sbatch
    // -A takes them (an unallocated job goes anywhere).
    wait_until(60, "the new associations to reach slurmctld", || {
        try_submit("cb", 1, "contract=0", 5, &["-A", "e2e_lab", "--hold"]).map(cancel).is_ok()
    });
    for (account, msg) in
        [("e2e_lab", "tally: account `e2e_lab` has no budget in"), ("root", "tally: account `root` is the whole cluster, not a team with a budget")]
    {
        let err = try_submit("cb", 1, "contract=1h", 60, &["-A", account]).expect_err(account);
        assert!(err.contains(msg), "sbatch -A {account}: {err}");
    }
    // A pending contract job of the team: moving it to such an account is
    // refused the same way, and leaves it where it was.
    let id = try_submit("cb", 1, "contract=45m", 60, &["--hold", "--time=60"]).unwrap();
    let version = sh("scontrol", &["version"]);
    let says_why = !version.contains("22.05");
    for account in ["e2e_lab", "root"] {
        let out = Command::new("scontrol").args(["update", &format!("jobid={id}"), &format!("account={account}")]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "scontrol update account={account} of a contract job was accepted");
        assert_eq!(field(id, "%a").as_deref(), Some("contract_busy"), "the refused update changed nothing");
        if says_why {
            assert!(err.contains("tally: account"), "{version}: scontrol said: {err}");
        }
        println!("scontrol update account={account}: {}", err.trim());
    }
    // A time limit below the contract: refused, and (24.11) the reason given.
    let out = Command::new("scontrol").args(["update", &format!("jobid={id}"), "timelimit=30"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a time limit below the contract was accepted");
    if says_why {
        assert!(err.contains("tally: contract=45m is longer than the job's time limit of 30m"), "{version}: scontrol said: {err}");
    } else {
        assert!(err.contains("Requested time limit is invalid"), "{err}");
    }
    println!("scontrol update timelimit=30: {}", err.trim());
    // Unallocated, it may go anywhere Slurm lets it.
    sh("scontrol", &["update", &format!("jobid={id}"), "comment=contract=0"]);
    sh("scontrol", &["update", &format!("jobid={id}"), "account=e2e_lab"]);
    assert_eq!(field(id, "%a").as_deref(), Some("e2e_lab"));
    clean();
}

/// Puts the bed's config back and restarts slurmctld on it, however e2e_18 ends.
struct RestoreConfig(String);
impl Drop for RestoreConfig {
    fn drop(&mut self) {
        let _ = std::fs::write(config(), &self.0);
        let _ = Command::new("bash").arg("testbed/restart-ctld.sh").current_dir(root()).status();
    }
}

/// One config in force for the three plugins: an edit nobody reconfigured
/// changes nothing at submission, and a broken tally.toml at a restart
/// leaves every plugin on the last good config, no job accepted unchecked.
#[test]
fn e2e_18_one_config_in_force_for_every_plugin() {
    clean();
    let original = std::fs::read_to_string(config()).unwrap();
    let _restore = RestoreConfig(original.clone());
    let unchecked = || std::fs::read_to_string(format!("{RUN_DIR}/log/slurmctld.log")).unwrap_or_default().matches("accepted unchecked").count();
    let before = unchecked();
    // In force: contracts of up to 8h. An edit to 4h, not reconfigured,
    // given time to be (wrongly) picked up:
    std::fs::write(config(), format!("{original}\n[contracts]\nmax = \"4h\"\n")).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let id = try_submit("cb", 1, "contract=6h", 60, &["--hold"]).unwrap_or_else(|e| panic!("contract=6h under the 8h in force: {e}"));
    cancel(id);
    // A broken file at a restart: the last good config, in every plugin.
    std::fs::write(config(), "[contracts]\nmax = \"1x\"\n").unwrap();
    sh("bash", &["testbed/restart-ctld.sh"]);
    for (comment, said) in [("contract=9h", "exceeds the 8h maximum"), ("contract=1x", "unknown unit `x`")] {
        let err = try_submit("cb", 1, comment, 60, &["--hold"]).expect_err(comment);
        assert!(err.contains(said), "{comment}: {err}");
    }
    let id = try_submit("cb", 1, "contract=6h", 60, &["--hold"]).unwrap_or_else(|e| panic!("contract=6h under the last good 8h: {e}"));
    cancel(id);
    assert_eq!(unchecked(), before, "a job was accepted unchecked");
    clean();
}

/// The exporter's address in these tests.
const EXPORTER: &str = "127.0.0.1:19817";

/// A daemon of the test, killed when the test ends, however it ends.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tally exporter` on `listen`, every 2 s (more arguments: `extra`).
fn exporter(listen: &str, extra: &[&str]) -> Daemon {
    let tally = format!("{}/target/release/tally", root().display());
    let log = std::fs::File::create(format!("{RUN_DIR}/log/exporter-{}.log", listen.replace([':', '.'], "-"))).unwrap();
    let child = Command::new(tally)
        .args(["exporter", "--listen", listen, "--interval", "2s", "-c", &config()])
        .args(extra)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let d = Daemon(child);
    wait_until(30, "the exporter to serve", || http_get(listen, "/metrics").is_some_and(|(code, _)| code == 200));
    d
}

/// The user and password the test's exporters ask for (`--show-accounts`
/// needs them: loopback is not private), and Prometheus and curl give.
const EXPORTER_USER: &str = "tally-e2e";
const EXPORTER_PASSWORD: &str = "e2e-exporter-password";

/// A web config with basic authentication for [`EXPORTER_USER`]: its path
/// (written once per run, the hash by `tally exporter hash-password`).
fn web_config() -> String {
    let (web, pw) = (format!("{RUN_DIR}/exporter-web.yml"), format!("{RUN_DIR}/exporter-password"));
    if !std::path::Path::new(&web).exists() {
        std::fs::write(&pw, EXPORTER_PASSWORD).unwrap();
        std::fs::write(&web, format!("basic_auth_users:\n  {EXPORTER_USER}: {}\n", hash_password(EXPORTER_PASSWORD))).unwrap();
    }
    web
}

/// `tally exporter hash-password` of `password`: its bcrypt hash.
fn hash_password(password: &str) -> String {
    use std::io::Write;
    let tally = format!("{}/target/release/tally", root().display());
    let mut child = Command::new(tally)
        .args(["exporter", "hash-password"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{password}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "tally exporter hash-password failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// GET `path` of `addr` (with [`EXPORTER_USER`]'s password, which an
/// exporter without a web config ignores): (status, body), `None` when
/// nothing answers.
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let user = format!("{EXPORTER_USER}:{EXPORTER_PASSWORD}");
    let out = Command::new("curl").args(["-s", "-m", "20", "-u", &user, "-w", "\n%{http_code}", &format!("http://{addr}{path}")]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    let code: u16 = code.trim().parse().ok()?;
    (code != 0).then(|| (code, body.to_string()))
}

/// Prometheus on loopback, stopped when the test ends.
/// An exporter on `listen` (accounts shown) reading a copy of the
/// plugin's ledger in `RUN_DIR/<dir>`; the copy's path.
fn exporter_on_a_copy(dir: &str, listen: &str) -> (Daemon, String) {
    let dir = format!("{RUN_DIR}/{dir}");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = format!("{dir}/ledger.state");
    std::fs::copy(format!("{RUN_DIR}/state/tally/ledger.state"), &copy).unwrap();
    (exporter(listen, &["--state", &copy, "--show-accounts", "--web-config", &web_config()]), copy)
}

struct Prometheus;

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        web_config();
        let pw = format!("{RUN_DIR}/exporter-password");
        sh("bash", &["testbed/prometheus.sh", "start", "--user", EXPORTER_USER, "--password-file", &pw, target, "2s"]);
        Prometheus
    }

    /// An instant query's series: labels → value.
    fn query(&self, expr: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let out = sh("bash", &["testbed/prometheus.sh", "query", expr]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert_eq!(v["status"], "success", "{expr}: {out}");
        v["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{expr}: {out}"))
            .iter()
            .map(|s| {
                let labels = s["metric"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect();
                (labels, s["value"][1].as_str().and_then(|x| x.parse().ok()).unwrap_or(f64::NAN))
            })
            .collect()
    }

    /// The value of the one series `expr` selects (`None`: none yet).
    fn value(&self, expr: &str) -> Option<f64> {
        let r = self.query(expr);
        assert!(r.len() <= 1, "{expr}: {r:?}");
        r.first().map(|(_, v)| *v)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = Command::new("bash").args(["testbed/prometheus.sh", "stop"]).current_dir(root()).status();
    }
}

/// The exporter, scraped by a real Prometheus: every account figure the
/// dashboards query equals `tally share --json`'s; preemptions are counted
/// by reason, waits by class; the page shows the team's rows and jobs in a
/// real browser; a ledger that cannot be read leaves the last figures,
/// marked stale.
#[test]
fn e2e_19_prometheus_scrapes_what_share_says_and_the_page_shows_the_team() {
    clean();
    // The bed's config keeps reports private (the default): the accounts
    // are served to the password's holders, as an admin's exporter would.
    let _exporter = exporter(EXPORTER, &["--show-accounts", "--web-config", &web_config()]);
    let prom = Prometheus::start(EXPORTER);
    wait_until(60, "Prometheus's first scrape", || prom.value("tally_ledger_stale").is_some());
    let preempted_before = prom.value("tally_preemptions_total{reason=\"unallocated\"}").expect("served from the start");
    let lost_before = prom.value("tally_preemption_lost_gpu_seconds_total{reason=\"unallocated\"}").unwrap();
    // see_busy holds both nodes, half of it with unallocated work (contract
    // 0); see_idle's job then takes the unallocated job's GPUs.
    let unalloc = submit("vb", 8, "contract=0", 900);
    let busy = submit("vb", 8, "contract=10m", 900);
    wait_until(60, "see_busy's jobs to run", || state(unalloc) == "RUNNING" && state(busy) == "RUNNING");
    std::thread::sleep(Duration::from_secs(3));
    let idle = submit("vi", 8, "contract=1h", 600);
    wait_until(60, "see_idle's job to preempt the unallocated one", || state(idle) == "RUNNING");
    let pending = submit("vi", 8, "contract=2h", 600);
    wait_until(30, "the exporter to list see_idle's jobs", || {
        http_get(EXPORTER, "/account/see_idle").is_some_and(|(_, body)| body.contains(&format!(">{pending}<")) && body.contains(&format!(">{idle}<")))
    });

    // The page, in headless Chromium: the team's row and its jobs.
    let png = format!("{RUN_DIR}/exporter-see_idle.png");
    // (At 3x: Tesseract misreads small text.)
    sh(
        "bash",
        &[
            "-c",
            r#"TALLY_SCREENSHOT_SCALE=3 bash testbed/screenshot.sh "$@""#,
            "shot",
            &format!("http://{EXPORTER_USER}:{EXPORTER_PASSWORD}@{EXPORTER}/account/see_idle"),
            &png,
            "1280",
            "900",
        ],
    );
    sh("bash", &["testbed/ocr-check.sh", &png, "see_idle", &idle.to_string(), &pending.to_string(), "2h", "running", "pending"]);
    // A job's page is what `tally explain` says of it.
    let (code, body) = http_get(EXPORTER, &format!("/job/{pending}")).unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&format!("Job {pending}  PENDING")) && body.contains("What blocks it now") && body.contains("Start estimate"), "{body}");

    // Everything ends.
    for j in [unalloc, busy, idle, pending] {
        cancel(j);
    }
    wait_until(60, "an empty queue", || sh("squeue", &["-h", "-o", "%i"]).trim().is_empty());
    // The preemption, by its reason, and the work it threw away.
    wait_until(30, "the preemption to be counted", || {
        prom.value("tally_preemptions_total{reason=\"unallocated\"}").unwrap_or(0.0) > preempted_before
    });
    assert!(prom.value("tally_preemption_lost_gpu_seconds_total{reason=\"unallocated\"}").unwrap() >= lost_before + 8.0 * 3.0);
    assert_eq!(prom.value("sum(tally_contract_violations_total)"), Some(0.0));
    // Waits: the allocated jobs' first starts, and the unallocated one's.
    assert!(prom.value("tally_job_wait_seconds_count{class=\"allocated\"}").unwrap() >= 2.0);
    assert!(prom.value("tally_job_wait_seconds_count{class=\"unallocated\"}").unwrap() >= 1.0);
    assert!(prom.value("tally_ledger_age_seconds").unwrap() < 30.0);
    assert!(prom.value("tally_recalculation_duration_seconds").unwrap() > 0.0);

    // Prometheus must say exactly what share says of one ledger. The live
    // one never stands still (an hour's owed, min(rate, asked), still grows
    // after the queue empties, while the rate catches up what was asked):
    // both read a copy, Prometheus through an exporter on it.
    let third = "127.0.0.1:19820";
    let (_frozen, frozen_ledger) = exporter_on_a_copy("exporter-frozen", third);
    let prom = Prometheus::start(third);
    wait_until(60, "Prometheus's first scrape of the copy", || prom.value("tally_ledger_stale").is_some());
    let (rows, _) = share_rows_of("see_busy,see_idle", Some(&frozen_ledger));
    let fields = [
        ("tally_account_rate_gpus", "rate_gpus", 1.0),
        ("tally_account_allocated_gpu_seconds", "allocated_gpu_hours", 3600.0),
        ("tally_account_used_gpu_seconds", "used_gpu_hours", 3600.0),
        ("tally_account_usage_ratio", "ratio", 1.0),
        ("tally_account_rank", "rank", 1.0),
        ("tally_account_fair_share", "fair_share", 1.0),
        ("tally_account_running_gpus", "running_gpus", 1.0),
        ("tally_account_waiting_gpus", "waiting_gpus", 1.0),
        ("tally_account_short_gpus", "short_now_gpus", 1.0),
        ("tally_account_owed_gpu_seconds", "owed_gpu_hours", 3600.0),
        ("tally_account_delivered_gpu_seconds", "delivered_gpu_hours", 3600.0),
        ("tally_account_delivered_ratio", "delivered_fraction", 1.0),
        ("tally_account_delivered_window_ratio", "delivered_fraction_window", 1.0),
        ("tally_account_unallocated_gpu_seconds", "unallocated_gpu_hours", 3600.0),
    ];
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    for account in ["see_busy", "see_idle"] {
        let row = &rows[account];
        assert!(row["used_gpu_hours"].as_f64().unwrap() > 0.0 || account == "see_idle", "{row:?}");
        let differ = || -> Vec<String> {
            fields
                .iter()
                .filter_map(|(series, key, scale)| {
                    let want = row[*key].as_f64().map(|v| v * scale);
                    let got = prom.value(&format!("{series}{{account=\"{account}\"}}"));
                    let agree = match (want, got) {
                        (Some(w), Some(g)) => same(w, g),
                        (None, None) => true,
                        _ => false,
                    };
                    (!agree).then(|| format!("{series}: Prometheus {got:?}, share {key} {want:?}"))
                })
                .collect()
        };
        let start = Instant::now();
        let mut left = differ();
        while !left.is_empty() && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(500));
            left = differ();
        }
        assert!(left.is_empty(), "{account}: Prometheus and tally share --json differ after 30 s:\n{}", left.join("\n"));
        // The tree, for the budget owners' panels.
        let info = prom.query(&format!("tally_account_info{{account=\"{account}\"}}"));
        assert_eq!(info.first().map(|(l, _)| l["path"].as_str()), Some(format!("root/{account}").as_str()), "{info:?}");
    }
    // A ledger that cannot be read: the last good figures, marked stale.
    let second = "127.0.0.1:19818";
    let (_stale, copy) = exporter_on_a_copy("exporter-stale", second);
    let used = |text: &str| text.lines().find(|l| l.starts_with("tally_account_used_gpu_seconds{account=\"see_busy\"}")).map(str::to_string);
    let before = used(&http_get(second, "/metrics").unwrap().1).expect("see_busy's usage");
    std::fs::remove_file(&copy).unwrap();
    let sample = |text: &str, name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok());
    wait_until(20, "the exporter to mark its figures stale", || {
        http_get(second, "/metrics").is_some_and(|(_, t)| sample(&t, "tally_ledger_stale") == Some(1.0))
    });
    let (_, text) = http_get(second, "/metrics").unwrap();
    assert_eq!(used(&text), Some(before), "the last good figures");
    assert!(sample(&text, "tally_exporter_read_errors_total").is_some_and(|n| n >= 1.0), "{text}");
    let (_, page) = http_get(second, "/").unwrap();
    assert!(page.contains("last good figures"), "{page}");
    // Without --show-accounts, [reports] private: no account, no job.
    let private = "127.0.0.1:19819";
    let _private = exporter(private, &[]);
    let (_, text) = http_get(private, "/metrics").unwrap();
    assert!(!text.contains("account=") && !text.contains("see_busy") && text.contains("tally_jobs{"), "{text}");
    assert_eq!(http_get(private, "/account/see_busy").map(|(code, _)| code), Some(403));
    assert_eq!(http_get(private, &format!("/job/{pending}")).map(|(code, _)| code), Some(403));
}

/// Jobs of an array (or any job id) in a state (`-t R`, `-t PD`).
fn count_in(id: u32, states: &str) -> usize {
    sh("squeue", &["-h", "-j", &id.to_string(), "-t", states, "-o", "%i"]).lines().filter(|l| !l.trim().is_empty()).count()
}

/// The `need` field of a pending job's priority (docs/design.md rule 8:
/// 3 = the debug lane); for an array, its pending record's.
fn need(id: u32) -> u64 {
    let out = sh("squeue", &["-h", "-j", &id.to_string(), "-t", "PD", "-o", "%Q"]);
    let p: u64 = out.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    (p >> 28) & 3
}

/// sbatch as `user` with `args` as given (a heterogeneous job's `:`).
fn submit_raw(user: &str, args: &[&str]) -> u32 {
    let mut all = vec!["-c", r#"source testbed/lib.sh && submit_as "$@""#, "submit", user];
    all.extend(args);
    sh("bash", &all).trim().parse().expect("a job id")
}

#[test]
fn e2e_20_a_flood_of_debug_shaped_jobs_takes_nothing_from_an_owed_team() {
    clean();
    const LANE: u64 = 3;
    // flood_a holds both nodes: an 8-GPU job that cannot checkpoint (no
    // time limit: never thrown away once started) and a 4-task array of
    // 2-GPU `contract=1m` jobs (debug-shaped, 8 h limits).
    let long = submit("fa", 8, "contract=1m", 900);
    let pieces = try_submit("fa", 2, "contract=1m", 900, &["--array=0-3", "-t", "8:00:00"]).unwrap();
    wait_until(60, "flood_a's work to run", || state(long) == "RUNNING" && count_in(pieces, "R") == 4);
    let t0 = Instant::now();
    // The flood: more debug-shaped jobs of flood_a, an array among them.
    let flood_array = try_submit("fa", 2, "contract=1m", 900, &["--array=0-7", "-t", "8:00:00"]).unwrap();
    let flood: Vec<u32> = (0..4).map(|_| try_submit("fa", 2, "contract=1m", 900, &["-t", "8:00:00"]).unwrap()).collect();
    // flood_b is owed (it runs nothing): its 8-GPU job waits.
    let owed = submit("fb", 8, "contract=1h", 300);
    std::thread::sleep(Duration::from_secs(5));
    // flood_a's debug jobs running (8 GPUs) fill its allowance (two debug
    // jobs, 4 GPUs): no lane for the flood, the array's record included.
    for &f in flood.iter().chain([&flood_array]) {
        assert_ne!(need(f), LANE, "flood job {f} took the debug lane");
    }
    // Inside the contracts nothing moves.
    while t0.elapsed() < Duration::from_secs(45) {
        assert_eq!(state(owed), "PENDING");
        assert_eq!(count_in(pieces, "R"), 4, "a piece was taken inside its contract");
        std::thread::sleep(Duration::from_secs(2));
    }
    // Past their 1-minute contracts the debug-shaped pieces have no shield:
    // the owed job takes their node within a recalculation (2 s) and
    // Slurm's kill (KillWait 5 s) of the contracts' end.
    wait_until(60, "the owed job to take the flood's node", || state(owed) == "RUNNING");
    println!("owed job started {:.0} s after the pieces' contracts began (contracts of 1 min)", t0.elapsed().as_secs_f64() + 5.0);
    assert_eq!(state(long), "RUNNING", "the job that cannot checkpoint is never thrown away");
    assert!(count_in(pieces, "R") < 4, "the node came from the debug-shaped pieces");
    // None of the flood started: the freed GPUs went to the owed team.
    assert_eq!(count_in(flood_array, "R") + flood.iter().map(|&f| count_in(f, "R")).sum::<usize>(), 0, "the flood took GPUs");

    // Classed by what it will hold (flood_b has its whole allowance): a
    // 2-GPU debug job takes the lane; the same job --exclusive (the whole
    // node's 8 GPUs), a heterogeneous job of 2 + 8 GPUs and an array of three
    // such tasks (6 GPUs, more than the allowance of two debug jobs) do
    // not; an array of one task does.
    let plain = submit("fb", 2, "contract=1m", 60);
    let exclusive = try_submit("fb", 2, "contract=1m", 60, &["--exclusive"]).unwrap();
    let het = submit_raw("fb", &["-N1", "--gres=gpu:2", "--comment", "contract=1m", ":", "-N1", "--gres=gpu:8", "--wrap", "sleep 60"]);
    let three = try_submit("fb", 2, "contract=1m", 60, &["--array=0-2"]).unwrap();
    // Slurm gives a heterogeneous job its id, and an array its tasks, only
    // after the priority plugin's priority_p_set: the recalculation that
    // sees them runs at once (poked) and corrects them; Slurm starts
    // neither at submission.
    let t = Instant::now();
    wait_until(10, "the recalculation to class the new jobs", || need(het) != LANE && need(three) != LANE);
    println!("the heterogeneous job and the array left the lane {:.1} s after submission", t.elapsed().as_secs_f64());
    assert_eq!(need(plain), LANE, "a 2-GPU debug job takes the lane");
    assert_ne!(need(exclusive), LANE, "--exclusive holds the whole node");
    assert_ne!(need(het), LANE, "a heterogeneous job holds all its components");
    assert_ne!(need(three), LANE, "an array is as many jobs as its tasks");
    // With the plain one gone, an array of one task is one debug job.
    cancel(plain);
    let one = try_submit("fb", 2, "contract=1m", 60, &["--array=0-0"]).unwrap();
    wait_until(20, "an array of one task in the lane", || need(one) == LANE);
    clean();
}

#[test]
fn e2e_21_a_long_job_that_cannot_checkpoint_waits_while_another_team_is_owed() {
    clean();
    let tally = format!("{}/target/release/tally", root().display());
    // contract_busy (a rate of about one GPU) runs an 8-GPU job on one node.
    let filler = submit("cb", 8, "contract=1h", 900);
    wait_until(60, "contract_busy's job to run", || state(filler) == "RUNNING");
    // contract_idle is owed: its two-node job waits for GPUs. With both
    // teams asking for 16 GPUs, each one's fair share is 8.
    let owed = submit_raw("ci", &["-N2", "--gres=gpu:8", "--comment", "contract=1h", "--wrap", "sleep 300"]);
    // A recalculation sees it: contract_idle is owed.
    ledger_saved_after(now_s());
    // contract_busy's 4-GPU job that cannot checkpoint and has no time
    // limit (a long job), and the same job resumable.
    let long = submit("cb", 4, "contract=1h", 900);
    let resumable = submit("cb", 4, "contract=1h,resumable", 900);
    // Tally holds the long one back by its begin time from its submission
    // (backfill would start it before the next recalculation; Slurm shows
    // Reason=BeginTime at its next pass); the resumable one is not held:
    // whatever it takes, a restoration can take back without loss.
    let held = |when: &str| {
        let job = sh("scontrol", &["-o", "show", "job", &long.to_string()]);
        let eligible = job.split_whitespace().find_map(|f| f.strip_prefix("EligibleTime=")).and_then(unix);
        assert!(eligible.is_some_and(|t| t > now_s() + 30), "the long job was not held {when}: EligibleTime {eligible:?}");
    };
    held("at submission");
    wait_until(30, "Slurm to show the hold", || field(long, "%r").as_deref() == Some("BeginTime"));
    for _ in 0..8 {
        assert_eq!(state(long), "PENDING", "the long job started while contract_idle is owed");
        assert_ne!(field(resumable, "%r").as_deref(), Some("BeginTime"), "the resumable job was held");
        std::thread::sleep(Duration::from_secs(1));
    }
    // Its begin time set back (Slurm recalculates the priority after an
    // update): held again at once, not left to backfill until the next
    // recalculation.
    sh("scontrol", &["update", &format!("JobId={long}"), "StartTime=now"]);
    held("after StartTime=now");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(state(long), "PENDING", "the long job started after StartTime=now while contract_idle is owed");
    let text = sh(&tally, &["explain", &long.to_string(), "-c", &config()]);
    assert!(text.contains("held by Tally") && text.contains("contract_idle is"), "{text}");
    // contract_idle no longer waits: the hold goes within a recalculation and the
    // long job starts on the GPUs left free.
    cancel(owed);
    let t = Instant::now();
    wait_until(30, "the long job to start once no other team is owed", || state(long) == "RUNNING");
    println!("the long job started {:.1} s after the owed team's job left", t.elapsed().as_secs_f64());
    clean();
}

/// `tally` with `args`: (exit status success, stdout, stderr).
fn tally_run(args: &[&str]) -> (bool, String, String) {
    let tally = format!("{}/target/release/tally", root().display());
    let out = Command::new("timeout").arg("120").arg(&tally).args(args).current_dir(root()).output().unwrap_or_else(|e| panic!("{tally}: {e}"));
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// What e2e_23 adds to slurmdbd, removed when it ends (and before it
/// starts, should a run have left some): other tests follow on the bed.
struct Slurmdbd23;
impl Slurmdbd23 {
    fn remove() {
        let quiet = |args: &[&str]| {
            let _ = Command::new("timeout").arg("60").arg("sacctmgr").arg("-i").args(args).output();
        };
        let _ = Command::new("timeout").args(["60", "scancel", "-A", "x_orphan"]).output();
        quiet(&["delete", "user", "name=e2e23u", "cluster=tally"]);
        quiet(&["delete", "user", "name=ob", "account=x_orphan", "cluster=tally"]);
        quiet(&["delete", "account", "name=x_orphan,imp_a,imp_b", "cluster=tally"]);
        quiet(&["delete", "account", "name=imp_top", "cluster=tally"]);
    }
}
impl Drop for Slurmdbd23 {
    fn drop(&mut self) {
        Slurmdbd23::remove();
    }
}

#[test]
fn e2e_23_the_account_tree_imports_from_slurmdbd_and_check_flags_each_mismatch() {
    clean();
    Slurmdbd23::remove();
    let cleanup = Slurmdbd23;
    // A subtree of other Fairshare values beside the bed's accounts (all
    // Fairshare=1): a number, and `parent` (an equal share).
    sh("sacctmgr", &["-i", "add", "account", "imp_top", "parent=root", "cluster=tally", "fairshare=40"]);
    sh("sacctmgr", &["-i", "add", "account", "imp_a", "parent=imp_top", "cluster=tally", "fairshare=3"]);
    sh("sacctmgr", &["-i", "add", "account", "imp_b", "parent=imp_top", "cluster=tally", "fairshare=parent"]);

    // The import: written once, kept without --force.
    let file = format!("{RUN_DIR}/e2e23-imported.toml");
    let _ = std::fs::remove_file(&file);
    let (ok, _, err) = tally_run(&["config", "import", "--from-sacctmgr", "--cluster", "tally", "--out", &file]);
    assert!(ok, "{err}");
    let (ok, _, err) = tally_run(&["config", "import", "--from-sacctmgr", "--out", &file]);
    assert!(!ok && err.contains("exists: give --force to replace it"), "{err}");
    let text = std::fs::read_to_string(&file).unwrap();
    let imported = tally_config::Config::parse(&text, &file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(imported.cluster.gpus, Some(16), "the bed's GPUs as sinfo counts them\n{text}");

    // Round trip: every account of slurmdbd under its parent, with its
    // Fairshare over its siblings' as a share; the users' default accounts.
    let assoc = sh("sacctmgr", &["-nP", "show", "associations", "cluster=tally", "format=Account,ParentName,User,Fairshare"]);
    let rows: Vec<Vec<&str>> = assoc.lines().map(|l| l.split('|').collect()).filter(|f: &Vec<&str>| f.len() == 4).collect();
    let accounts: Vec<&Vec<&str>> = rows.iter().filter(|f| f[2].is_empty() && f[0] != "root").collect();
    let tree = &imported.tree;
    assert_eq!(tree.len() - 1, accounts.len(), "{text}");
    for f in &accounts {
        let (name, parent, fs) = (f[0], f[1], f[3]);
        let id = tree.id(name).unwrap_or_else(|| panic!("{name} is not imported\n{text}"));
        assert_eq!(tree.node(id).parent.map(|p| tree.node(p).name.as_str()), Some(parent), "{name}'s parent");
        let siblings: Vec<&str> = accounts.iter().filter(|s| s[1] == parent).map(|s| s[3]).collect();
        let numbered: Vec<f64> = siblings.iter().filter_map(|s| s.parse::<f64>().ok()).filter(|&v| v > 0.0).collect();
        let mean = if numbered.is_empty() { 1.0 } else { numbered.iter().sum::<f64>() / numbered.len() as f64 };
        let weight = |s: &str| s.parse::<f64>().unwrap_or(mean);
        let own_users: f64 = if parent == "root" {
            0.0
        } else {
            rows.iter().filter(|u| !u[2].is_empty() && u[0] == parent).filter_map(|u| u[3].parse::<f64>().ok()).sum()
        };
        let want = 100.0 * weight(fs) / (siblings.iter().map(|s| weight(s)).sum::<f64>() + own_users);
        match tree.node(id).budget {
            Some(tally_allocator::Budget::Share(got)) => assert!((got - want).abs() < 0.001, "{name}: share {got}, Fairshare gives {want}\n{text}"),
            other => panic!("{name}: {other:?}, Fairshare gives {want}\n{text}"),
        }
    }
    assert_eq!(tree.node(tree.id("imp_b").unwrap()).budget, Some(tally_allocator::Budget::Share(50.0)), "Fairshare=parent: the sibling's 3\n{text}");
    let e2e = tally_config::Config::load(std::path::Path::new(&config())).unwrap();
    for (user, account) in &e2e.users {
        assert_eq!(imported.users.get(user), Some(account), "user {user}'s default account\n{text}");
    }
    let (ok, out, err) = tally_run(&["config", "check", &file]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = tally_run(&["config", "check", &file, "--against-slurmdbd", "--cluster", "tally"]);
    assert!(ok && out.contains("slurmdbd: OK (no mismatch)"), "the imported tree agrees with slurmdbd:\n{out}{err}");

    // Each mismatch, for real: an account slurmdbd has and the tree does
    // not, with a job under it and a user whose default account it is;
    // and a tree account slurmdbd does not know.
    sh("sacctmgr", &["-i", "add", "account", "x_orphan", "parent=root", "cluster=tally"]);
    sh("sacctmgr", &["-i", "add", "user", "ob", "account=x_orphan", "cluster=tally"]);
    sh("sacctmgr", &["-i", "add", "user", "e2e23u", "account=x_orphan", "cluster=tally"]);
    let mut job = None;
    wait_until(60, "slurmctld to take a job under x_orphan", || {
        job = try_submit("ob", 0, "", 1, &["--account=x_orphan"]).ok();
        job.is_some()
    });
    let job = job.unwrap_or_default();
    let in_sacct = || sh("sacct", &["-X", "-n", "-P", "-j", &job.to_string(), "-o", "Account"]).trim() == "x_orphan";
    wait_until(60, "sacct to have the job under x_orphan", in_sacct);
    wait_until(120, "the job under x_orphan to end", || state(job).is_empty());
    let edited = format!("{RUN_DIR}/e2e23-edited.toml");
    std::fs::write(&edited, format!("{text}\n[accounts.ghost_23]\nparent = \"imp_top\"\n")).unwrap();
    let (ok, out, err) = tally_run(&["config", "check", &edited, "--against-slurmdbd", "--cluster", "tally"]);
    println!("{out}{err}");
    assert!(!ok, "a mismatch fails the check");
    let line = |prefix: &str| out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no line `{prefix}`:\n{out}"));
    let orphan = line("job account not in tree: x_orphan: ");
    assert!(orphan.contains("job(s) in the last 7d (sacct)") && orphan.ends_with("add [accounts.x_orphan] share = N to tally.toml"), "{orphan}");
    let ghost = line("tree account not in slurmdbd: ghost_23: ");
    assert!(ghost.contains("sacctmgr -i add account ghost_23 parent=imp_top cluster=tally"), "{ghost}");
    let user = line("default account not in tree: user e2e23u: default account x_orphan is not in tally.toml");
    assert!(user.contains("sacctmgr -i modify user e2e23u set defaultaccount="), "{user}");
    assert!(err.contains("3 mismatch(es) with slurmdbd"), "exactly these three:\n{out}{err}");
    // The import's own file, read again, still agrees (the new account
    // had no say in it) only once x_orphan is gone: cleaned up below.
    drop(cleanup);
    let (ok, out, err) = tally_run(&["config", "check", &file, "--against-slurmdbd", "--cluster", "tally"]);
    println!("{out}{err}");
    let _ = (std::fs::remove_file(&file), std::fs::remove_file(&edited));
    clean();
    // x_orphan is deleted, its job remains in sacct: a note, not a mismatch.
    // imp_* are deleted too: the imported file's tree now has accounts
    // slurmdbd lacks, which the check says.
    assert!(!ok && out.contains("tree account not in slurmdbd: imp_top: "), "{out}{err}");
    assert!(out.contains("(sacct) are in neither tally.toml nor slurmdbd (deleted since; nothing to do): "), "{out}");
    assert!(!out.contains("job account not in tree: x_orphan"), "{out}");
}

/// testbed/ha.sh `cmd` (on, kill-primary, start-primary, off): panics
/// with its output when it fails.
fn ha(cmd: &str) {
    let out = Command::new("timeout").args(["300", "bash", "testbed/ha.sh", cmd]).current_dir(root()).output().unwrap();
    assert!(out.status.success(), "ha.sh {cmd} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// A backup slurmctld for the test's length (`ha.sh on`); one controller
/// again when it ends, however it ends.
struct Ha;

impl Ha {
    fn on() -> Ha {
        // (The guard first: a failed `on` is undone too.)
        let pair = Ha;
        ha("on");
        pair
    }
}

impl Drop for Ha {
    fn drop(&mut self) {
        let _ = Command::new("timeout").args(["300", "bash", "testbed/ha.sh", "off"]).current_dir(root()).status();
    }
}

/// The ledger the plugin last saved: its `saved_at` and the GPU-seconds of
/// each account (all buckets, as [`used_gpu_s`]), from one read.
fn ledger() -> (u64, BTreeMap<String, f64>) {
    let text = std::fs::read_to_string(format!("{RUN_DIR}/state/tally/ledger.state")).unwrap_or_default();
    let mut used = BTreeMap::new();
    let mut saved_at = 0;
    for l in text.lines() {
        let l = l.rsplit_once(" ~").map_or(l, |(record, _)| record);
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() == 2 && f[0] == "saved_at" {
            saved_at = f[1].parse().unwrap_or(0);
        } else if f.len() == 5 && f[0] == "use" {
            *used.entry(f[2].to_string()).or_insert(0.0) += f[4].parse::<f64>().unwrap_or(0.0);
        }
    }
    (saved_at, used)
}

/// The ledger once the plugin saved it after `after` (unix s).
fn ledger_saved_after(after: u64) -> (u64, BTreeMap<String, f64>) {
    let mut l = ledger();
    wait_until(30, "a save of the ledger", || {
        l = ledger();
        l.0 > after
    });
    l
}

/// The jobs preempt/tally noted as preempted (job ids, one per run).
fn preempted_notes() -> Vec<u32> {
    let text = std::fs::read_to_string(format!("{RUN_DIR}/state/tally/preempted.state")).unwrap_or_default();
    text.lines().filter_map(|l| l.strip_prefix("preempted ")?.split(' ').next()?.parse().ok()).collect()
}

/// Whether the slurmctld of the bed's pid file `name` (slurmctld,
/// slurmctld-backup) runs priority/tally's recalculation thread, the one
/// writer of the ledger; `None` when that slurmctld is not running.
fn recalc_thread(name: &str) -> Option<bool> {
    let pid = std::fs::read_to_string(format!("{RUN_DIR}/pid/{name}.pid")).ok()?.trim().to_string();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(tasks.filter_map(Result::ok).any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "tally-recalc")))
}

/// The exporter's figures (`tally exporter --once`) and share's of one
/// frozen copy of the ledger and the notes: the accounts' ledger figures
/// agree, and every note is counted by its reason.
fn exporter_agrees_with_share(accounts: &[&str]) {
    let dir = format!("{RUN_DIR}/ha-frozen");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["ledger.state", "preempted.state"] {
        std::fs::copy(format!("{RUN_DIR}/state/tally/{f}"), format!("{dir}/{f}")).unwrap();
    }
    let state = format!("{dir}/ledger.state");
    let tally = format!("{}/target/release/tally", root().display());
    let out = sh(&tally, &["exporter", "--once", "--show-accounts", "--state", &state, "-c", &config()]);
    // (A series `name{…labels…} value`, or `name value` without labels.)
    let metric = |name: &str, labels: &str| -> Option<f64> {
        let (open, bare) = (format!("{name}{{"), format!("{name} "));
        let line = out.lines().find(|l| if labels.is_empty() { l.starts_with(&bare) } else { l.starts_with(&open) && l.contains(labels) })?;
        line.rsplit(' ').next()?.parse().ok()
    };
    let (rows, _) = share_rows_of(&accounts.join(","), Some(&state));
    for account in accounts {
        let row = &rows[*account];
        for (name, field, scale) in [
            ("tally_account_used_gpu_seconds", "used_gpu_hours", 3600.0),
            ("tally_account_usage_ratio", "ratio", 1.0),
            ("tally_account_rate_gpus", "rate_gpus", 1.0),
        ] {
            let exported = metric(name, &format!("account=\"{account}\"")).unwrap_or_else(|| panic!("{name} of {account} not exported:\n{out}"));
            let shared = row[field].as_f64().unwrap() * scale;
            assert!((exported - shared).abs() <= 1e-6 * shared.abs().max(1.0), "{account}: {name} {exported}, share's {field} {shared}");
        }
    }
    let notes = std::fs::read_to_string(format!("{dir}/preempted.state")).unwrap();
    let unallocated = notes.lines().filter(|l| l.starts_with("preempted ") && l.split(' ').nth(4) == Some("unallocated")).count();
    assert_eq!(metric("tally_preemptions_total", "reason=\"unallocated\""), Some(unallocated as f64), "every preemption noted is counted:\n{out}");
    assert_eq!(metric("tally_contract_violations_total", ""), Some(0.0), "no contract broken:\n{out}");
}

/// Controller fail-over (docs/reliability.md): a primary and a backup
/// slurmctld on one StateSaveLocation (testbed/ha.sh). Under load the
/// primary is killed with SIGKILL; the backup takes over with Tally's
/// ledger, marks, notes and active config; then the primary comes back and
/// takes control again. Through both: one writer of the ledger (the
/// controller in control), nothing charged twice and nothing lost (the
/// ledger's charge equals the GPUs × seconds the jobs ran), contracts
/// protect, submissions are judged, the order holds, every preemption's
/// note is kept, and the exporter says what share says.
#[test]
fn e2e_24_a_backup_controller_takes_over_and_hands_back_without_charging_twice() {
    clean();
    let t_start = Instant::now();
    let pair = Ha::on();
    assert_eq!(recalc_thread("slurmctld"), Some(true), "the primary runs priority/tally's thread");
    assert_eq!(recalc_thread("slurmctld-backup"), Some(false), "a standby backup loads no priority plugin: one writer of the ledger");
    // Every ended job charged: the ledger to measure from.
    let (_, base) = ledger_saved_after(now_s());
    let t = ["-t", "60"];
    // storm_a holds n1 with a contract job; storm_b's unallocated work
    // fills n2, two 4-GPU jobs.
    let protected = try_submit("sa", 8, "contract=30m", 900, &t).unwrap();
    let spare = [try_submit("sb", 4, "contract=0", 900, &t).unwrap(), try_submit("sb", 4, "contract=0", 900, &t).unwrap()];
    wait_until(60, "the jobs to run", || state(protected) == "RUNNING" && spare.iter().all(|&j| state(j) == "RUNNING"));
    // storm_b's contract job takes one of them (a preemption the primary notes).
    let first = try_submit("sb", 4, "contract=30m", 900, &t).unwrap();
    wait_until(60, "storm_b's job to preempt unallocated work", || state(first) == "RUNNING");
    let gone: Vec<u32> = spare.iter().copied().filter(|&j| state(j) != "RUNNING").collect();
    assert_eq!(gone.len(), 1, "one unallocated job made room");
    let (victim1, victim2) = (gone[0], if spare[0] == gone[0] { spare[1] } else { spare[0] });
    wait_until(30, "the primary's note of the preemption", || preempted_notes().contains(&victim1));
    // Waiting: order_idle (running nothing: owed GPUs, which only the
    // contract job could give) and storm_a, which has used far more.
    let owed = try_submit("oi", 8, "contract=30m", 900, &t).unwrap();
    let more = try_submit("sa", 8, "contract=30m", 900, &t).unwrap();
    wait_until(30, "the under-used team's job to go first", || prio(owed) > prio(more));
    // slurmctld's own loss on SIGKILL (jobs changed since its last state
    // save) is Slurm's durability, not Tally's (see e2e_10): kill once the
    // running jobs are saved.
    let running_since = std::time::SystemTime::now();
    let nudge = try_submit("sa", 1, "contract=0", 60, &["--hold"]).unwrap();
    cancel(nudge);
    wait_until(60, "slurmctld to save its job state", || {
        std::fs::metadata(format!("{RUN_DIR}/state/job_state")).and_then(|m| m.modified()).is_ok_and(|m| m > running_since)
    });
    let starts: BTreeMap<u32, u64> = [protected, first].iter().map(|&j| (j, field(j, "%S").and_then(|s| unix(&s)).unwrap())).collect();

    // 1. kill -9 the primary: the backup takes over.
    let killed = Instant::now();
    let before = ledger();
    ha("kill-primary");
    println!("the backup took control {:.1} s after the primary's kill -9", killed.elapsed().as_secs_f64());
    assert!(sh("scontrol", &["ping"]).contains("Slurmctld(backup) at"), "two controllers configured");
    assert_eq!(recalc_thread("slurmctld"), None, "the primary is gone");
    assert_eq!(recalc_thread("slurmctld-backup"), Some(true), "the backup in control runs priority/tally");
    let backup_log = std::fs::read_to_string(format!("{RUN_DIR}/log/slurmctld-backup.log")).unwrap();
    assert!(backup_log.contains("priority/tally: loaded ledger"), "the backup loaded the shared ledger");
    // The order holds at once (the ledger and the ranking came over)…
    assert!(prio(owed) > prio(more) && prio(more) >= ALLOCATED, "after take-over: {} vs {}", prio(owed), prio(more));
    // …submissions are judged by job_submit/tally on the active config…
    let refused = try_submit("sb", 1, "contract=9h", 60, &[]).expect_err("contract=9h under the backup");
    assert!(refused.contains("tally: contract=9h exceeds the 8h maximum"), "{refused}");
    let held = try_submit("sb", 1, "Contract=90m", 60, &["--hold", "-t", "120"]).unwrap();
    assert_eq!(field(held, "%k").as_deref(), Some("contract=1h30m"), "the backup's job_submit/tally rewrote the contract");
    cancel(held);
    // …and contracts protect: order_idle is owed and only storm_a's contract
    // job could make room for it.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(8) {
        assert_eq!(state(protected), "RUNNING", "a contract job was preempted after the take-over");
        assert_eq!(state(first), "RUNNING");
        assert_eq!(state(owed), "PENDING");
        std::thread::sleep(Duration::from_millis(500));
    }
    // The backup preempts too; the primary's note stays beside its own.
    let second = try_submit("sb", 4, "contract=30m", 900, &t).unwrap();
    wait_until(60, "storm_b's second job to preempt under the backup", || state(second) == "RUNNING");
    assert_ne!(state(victim2), "RUNNING");
    wait_until(30, "the backup's note of its preemption", || preempted_notes().contains(&victim2));
    let notes = preempted_notes();
    assert!(notes.contains(&victim1), "the backup wrote its notes over the primary's: job {victim1}'s preemption is gone from {notes:?}");
    // The ledger: what ran, charged once.
    let mut starts = starts;
    starts.insert(second, field(second, "%S").and_then(|s| unix(&s)).unwrap());
    let gpus: BTreeMap<u32, f64> = [(protected, 8.0), (first, 4.0), (second, 4.0)].into();
    let check_charges = |when: &str, (saved_at, used): &(u64, BTreeMap<String, f64>)| {
        for (account, jobs) in [("storm_a", vec![protected]), ("storm_b", vec![first, second])] {
            let charged = used.get(account).copied().unwrap_or(0.0) - base.get(account).copied().unwrap_or(0.0);
            let ran: f64 = jobs.iter().map(|j| gpus[j] * saved_at.saturating_sub(starts[j]) as f64).sum();
            let slack: f64 = jobs.iter().map(|j| gpus[j] * 3.0).sum();
            println!("{when}: {account} charged {charged:.0} GPU-s, ran {ran:.0} GPU-s by the ledger's save");
            assert!(charged <= ran + slack, "{when}: {account} charged twice: {charged} GPU-s for {ran} run");
            assert!(charged >= ran - slack, "{when}: {account} charge lost: {charged} GPU-s for {ran} run");
        }
    };
    let after_takeover = ledger_saved_after(before.0.max(now_s()));
    assert!(after_takeover.1["storm_a"] >= before.1["storm_a"], "usage lost over the take-over");
    check_charges("after the take-over", &after_takeover);
    exporter_agrees_with_share(&["storm_a", "storm_b"]);

    // 2. The primary comes back and takes control; the backup stops its
    //    plugin (and saves: one writer again).
    let back = Instant::now();
    ha("start-primary");
    println!("the primary took control back {:.1} s after it started", back.elapsed().as_secs_f64());
    assert_eq!(recalc_thread("slurmctld"), Some(true));
    assert_eq!(recalc_thread("slurmctld-backup"), Some(false), "the backup in standby again stopped priority/tally's thread");
    assert!(prio(owed) > prio(more), "after the hand-back: {} vs {}", prio(owed), prio(more));
    for j in [protected, first, second] {
        assert_eq!(state(j), "RUNNING", "job {j} after the hand-back");
    }
    let refused = try_submit("sb", 1, "contract=9h", 60, &[]).expect_err("contract=9h under the primary again");
    assert!(refused.contains("exceeds the 8h maximum"), "{refused}");
    let after_handback = ledger_saved_after(now_s());
    check_charges("after the hand-back", &after_handback);
    let notes = preempted_notes();
    assert!(notes.contains(&victim1) && notes.contains(&victim2), "the notes after the hand-back: {notes:?}");
    exporter_agrees_with_share(&["storm_a", "storm_b"]);
    let log = std::fs::read_to_string(format!("{RUN_DIR}/log/slurmctld.log")).unwrap() + &backup_log;
    assert!(!log.contains("internal error"), "a panic was caught in a slurmctld");
    clean();
    drop(pair);
    println!("fail-over and hand-back checked in {:.0} s", t_start.elapsed().as_secs_f64());
}

/// `--show-accounts` behind the exporter-toolkit's web config: a real
/// Prometheus scrapes over TLS with basic authentication and sees every
/// account; another local user (nobody) on the same node, without the
/// password, gets a 401 and no account name, whichever path it asks for.
#[test]
fn e2e_22_prometheus_scrapes_through_auth_and_others_get_nothing_private() {
    let listen = "127.0.0.1:19822";
    let dir = format!("{RUN_DIR}/e2e22");
    std::fs::create_dir_all(&dir).unwrap();
    let tally = format!("{}/target/release/tally", root().display());
    // A self-signed certificate for 127.0.0.1, and a hash of the password
    // by the exporter's own helper.
    let (crt, key, pw) = (format!("{dir}/server.crt"), format!("{dir}/server.key"), format!("{dir}/password"));
    sh(
        "openssl",
        &["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=tally-e2e"]
            .into_iter()
            .chain(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", &key, "-out", &crt])
            .collect::<Vec<_>>(),
    );
    let password = format!("e2e-{}", std::process::id());
    std::fs::write(&pw, &password).unwrap();
    let hash = hash_password(&password);
    let web = format!("{dir}/web.yml");
    std::fs::write(&web, format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: {hash}\n"))
        .unwrap();

    // On loopback alone, --show-accounts is refused: every local user
    // reaches 127.0.0.1.
    let out = Command::new(&tally).args(["exporter", "--listen", listen, "--show-accounts", "-c", &config()]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--show-accounts"), "{out:?}");

    let log = std::fs::File::create(format!("{RUN_DIR}/log/exporter-e2e22.log")).unwrap();
    let child = Command::new(&tally)
        .args(["exporter", "--listen", listen, "--interval", "2s", "-c", &config(), "--web.config.file", &web, "--show-accounts"])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let _exporter = Daemon(child);
    // curl as `user` (`None`: this process): (status, body).
    let curl = |user: Option<&str>, path: &str, extra: &[&str]| -> (u16, String) {
        let url = format!("https://{listen}{path}");
        let mut c = match user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", u, "--regid", "nogroup", "--clear-groups", "curl"]);
                c
            }
            None => Command::new("curl"),
        };
        let out = c.args(["-s", "-m", "20", "-w", "\n%{http_code}"]).args(extra).arg(&url).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    };
    let with_password = format!("prometheus:{password}");
    wait_until(30, "the exporter to serve over TLS", || curl(None, "/metrics", &["--cacert", &crt, "-u", &with_password]).0 == 200);

    sh("bash", &["testbed/prometheus.sh", "start", "--user", "prometheus", "--password-file", &pw, "--ca-file", &crt, listen, "2s"]);
    let prom = Prometheus;
    wait_until(60, "Prometheus to scrape per-account series through TLS and basic auth", || {
        prom.query("tally_account_rate_gpus").iter().any(|(labels, _)| labels.get("account").is_some_and(|a| a == "see_idle"))
    });
    assert_eq!(prom.value("up{job=\"tally\"}"), Some(1.0));

    // Another local user: no password, a wrong one, plain HTTP; /metrics and
    // the pages. Nothing names an account.
    let accounts: Vec<String> = ranks().into_keys().collect();
    assert!(accounts.iter().any(|a| a == "see_idle"), "{accounts:?}");
    for (path, extra) in
        [("/metrics", &[][..]), ("/metrics", &["-u", "prometheus:wrong"][..]), ("/", &[][..]), ("/account/see_idle", &[][..]), ("/job/1", &[][..])]
    {
        let (code, body) = curl(Some("nobody"), path, &[&["-k"][..], extra].concat());
        assert_eq!(code, 401, "nobody {path} {extra:?}: {body}");
        assert!(!accounts.iter().any(|a| body.contains(a.as_str())), "nobody {path}: {body}");
    }
    let out = Command::new("setpriv")
        .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "curl", "-s", "-m", "10", &format!("http://{listen}/metrics")])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("see_idle"), "plain HTTP answered: {out:?}");
    // With the password, the same user reads it: the password decides,
    // not the uid.
    let (code, body) = curl(Some("nobody"), "/metrics", &["-k", "-u", &with_password]);
    assert!(code == 200 && body.contains("account=\"see_idle\""), "{code}: {body}");
}
