//! Real-Slurm replay harness: a GPU job trace replayed on the loopback test
//! bed, time-compressed by a speedup factor K (default 180: one trace hour is
//! 20 real seconds), under Slurm's `priority/multifactor` (with QOS
//! preemption, as the simulator models it) or under Tally's three plugins.
//! What really ran is collected from `sacct` for scoring.
//!
//! [`replay`] brings the bed down and up afresh for the policy (so neither
//! usage nor the ledger of an earlier run is kept), submits every trace job
//! as its user at its compressed submit time, waits until all ended or a
//! deadline, cancels what is left, waits for the queue to drain and dumps
//! `sacct`. It leaves the bed up; [`bed_down`] (or `testbed/down.sh`) stops
//! it. `tests/e2e/replay.sh` and `src/bin/replay.rs` wrap it in one command.
//!
//! Files, under `<run dir>/replay/<policy>/`: `accounts` (the bed's accounts
//! file), `tally.toml` (the config slurmctld reads, Tally only), `job.sh`
//! (every job's script), `progress/<slurm id>` (resumable jobs' progress),
//! `out/<slurm id>.out` (the jobs' output, all runs appended), `idmap.tsv`
//! (trace id ↔ Slurm id, submit times and lag), `sacct.txt` (the dump),
//! `summary.txt`.
//!
//! # The sacct dump
//!
//! `TZ=UTC SLURM_TIME_FORMAT=%s sacct -D -X -P -a --noconvert -S <first
//! submission - 60 s> -E now -o` [`SACCT_FIELDS`], keeping the header and the
//! lines of the replay's jobs (the unfiltered dump is `sacct-raw.txt`). One
//! line per *run* of a job, a job's runs one after the other in time order.
//! Times are unix seconds (`SLURM_TIME_FORMAT=%s`; `None` when unset);
//! `Elapsed` and `Timelimit` are `[D-]HH:MM:SS`. Observed on this bed
//! (22.05.8, the settings of [`slurm_extra`], replays of 2026-12-02):
//!
//! ```text
//! JobIDRaw|Account|User|Submit|Eligible|Start|End|State|AllocTRES|Comment|Elapsed|JobName|QOS|NodeList|Timelimit|ExitCode
//! ```
//! * a job that ran once, to its end (a 2-node one):
//!   `29|semantic|semantic-u1|1796247001|1796247001|1796247002|1796247006|COMPLETED|billing=16,cpu=2,gres/gpu=16,node=2|contract=2s,resumable|00:00:04|t93|normal|n[1-2]|00:01:00|0:0`
//! * a run ended by a preemption (PreemptMode=REQUEUE, both policies), then
//!   the run after the requeue, same JobIDRaw:
//!   `267|climate|climate-u4|1796247965|1796247965|1796247965|1796248024|PREEMPTED|billing=8,cpu=1,gres/gpu=8,node=1|contract=59s,resumable|00:00:59|t95|normal|n1|00:03:00|0:0`
//!   `267|climate|climate-u4|1796248024|1796248030|1796248402|1796248473|COMPLETED|billing=8,cpu=1,gres/gpu=8,node=1|contract=59s,resumable|00:01:11|t95|normal|n1|00:03:00|0:0`
//!   Each run keeps its own Start, End, Elapsed, AllocTRES and NodeList. The
//!   preempted run's State is `PREEMPTED` (never `REQUEUED`), ExitCode `0:0`.
//!   The next run's Submit is the requeue time (= the previous End, +1 s
//!   when that equals the previous Submit) and its Eligible Submit + 6 s
//!   (cred_expire + 1). Only the first line's Submit is the job's real
//!   submission. A resumable job's runs add up to its work (its script
//!   resumes); a non-resumable one's last run is its whole work. A run can
//!   be preempted in the second it started (Elapsed `00:00:00`, seen under
//!   multifactor: backfill starts a scavenger job, a high-QOS job takes it).
//! * a job cancelled while pending (at the deadline): Start `None`,
//!   AllocTRES empty, Elapsed `00:00:00`, NodeList `None assigned`:
//!   `15|biology|biology-u5|1796246920|1796246920|None|1796246924|CANCELLED by 0|||00:00:00|probe|normal|None assigned|00:01:00|0:0`
//!   (with sacct's default time format Start shows a time: judge "ran" by
//!   AllocTRES, not by Start).
//! * a job cancelled while running (at the deadline): End = the cancel time:
//!   `364|biology|biology-u5|1796248091|1796248091|1796248474|1796248635|CANCELLED by 0|billing=8,cpu=1,gres/gpu=8,node=1|contract=0,resumable|00:02:41|t165|normal|n1|00:05:00|0:0`
//!
//! Comments: under Tally, job_submit/tally rewrites the contract in its one
//! spelling (`contract=80s` is stored as `contract=1m20s`); multifactor keeps
//! what was submitted. QOS is `normal` for every Tally job (the default).
//! A job's GPUs are `gres/gpu=` of AllocTRES (all nodes together).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tally_allocator::{HOUR, MINUTE_S, WEEK_S};
use tally_sim::trace::{parse_csv, Class, Trace};

/// Fake GPUs per test-bed node.
pub const GPUS_PER_NODE: u32 = 8;
/// One trace hour = 20 real seconds.
pub const DEFAULT_SPEEDUP: f64 = 180.0;
/// Added to a job's compressed duration for its time limit (Slurm kills a
/// job at its limit; the script's own overhead must fit).
pub const TIME_LIMIT_MARGIN_S: f64 = 30.0;
/// The fields of the sacct dump: the scoring's ten first, then a few for
/// reading it by eye (JobName is `t<trace id>`).
pub const SACCT_FIELDS: &str =
    "JobIDRaw,Account,User,Submit,Eligible,Start,End,State,AllocTRES,Comment,Elapsed,JobName,QOS,NodeList,Timelimit,ExitCode";
/// sbatch processes at once (sbatch through runuser takes ~10-20 ms; bursts
/// of jobs sharing a second are submitted in parallel).
pub const SUBMIT_WORKERS: usize = 4;
/// The main scheduler on every event (batch_sched_delay=0: a submission or
/// a job end queues a pass at the next 0.1 s tick of slurmctld's background
/// loop) and over the whole queue every second (sched_interval=1: eligibility
/// that arrives by the clock, e.g. a requeued job's begin time, or a --begin).
/// Backfill every second (bf_interval=1, its minimum) over up to 2000 jobs
/// (bf_max_job_test), resuming where it yielded its locks (bf_continue), at
/// 1 s resolution (bf_resolution=1: compressed jobs last seconds to minutes).
pub const SCHEDULER_PARAMETERS: &str = "sched_interval=1,batch_sched_delay=0,bf_interval=1,bf_continue,bf_resolution=1,bf_max_job_test=2000";
/// The three QOS of the multifactor policy: `high` (debug, interactive,
/// realtime) may preempt `scavenger` (contract 0: did not opt out);
/// `normal` (contract > 0) is neither preemptor nor victim.
pub const QOS_LINES: [&str; 3] = ["qos normal priority=0", "qos scavenger priority=0", "qos high priority=1 preempt=scavenger"];
/// Every user association's QOS settings.
pub const USER_QOS: &str = "qos=normal,high,scavenger defaultqos=normal";

/// The scheduling policy of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// `priority/multifactor` with fair share, age and QOS; `preempt/qos`.
    Multifactor,
    /// `priority/tally`, `job_submit/tally`, `preempt/tally`.
    Tally,
}

impl Policy {
    pub const ALL: [Policy; 2] = [Policy::Multifactor, Policy::Tally];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Multifactor => "multifactor",
            Policy::Tally => "tally",
        }
    }

    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == s.trim())
    }
}

/// What to replay, and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// A canonical trace CSV (docs/traces.md).
    pub trace_csv: PathBuf,
    /// K: trace seconds per real second.
    pub speedup: f64,
    /// GPUs of the bed: `gpus / 8` nodes.
    pub gpus: u32,
    /// GPUs of one more, smaller node (0: none), the same under every
    /// policy: the debug capacity a Tally config may name
    /// (`TALLY_SMALL_NODE_GPUS` of testbed/up.sh).
    pub small_node_gpus: u32,
    pub policy: Policy,
    /// Tally config, already time-scaled (tests/e2e/replay-tally.toml). Its
    /// tree gives the accounts (both policies) and the Fairshare values
    /// (multifactor); slurmctld reads a copy (Tally).
    pub tally_config: PathBuf,
    /// Real seconds allowed after the last submission before what is left is
    /// cancelled.
    pub drain_s: u64,
    /// The test bed's run dir (TALLY_RUN_DIR).
    pub run_dir: PathBuf,
    /// The workspace root (testbed/, target/release/tally, target/plugins).
    pub repo: PathBuf,
}

impl ReplayOptions {
    /// Defaults: K = 180, 48 GPUs, tests/e2e/replay-tally.toml, 600 s of
    /// drain, /var/tmp/tally-testbed.
    pub fn new(policy: Policy, trace_csv: impl Into<PathBuf>) -> ReplayOptions {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let repo = repo.canonicalize().unwrap_or(repo);
        ReplayOptions {
            trace_csv: trace_csv.into(),
            speedup: DEFAULT_SPEEDUP,
            gpus: 48,
            small_node_gpus: 0,
            policy,
            tally_config: repo.join("tests/e2e/replay-tally.toml"),
            drain_s: 600,
            run_dir: PathBuf::from("/var/tmp/tally-testbed"),
            repo,
        }
    }

    /// `<run dir>/replay/<policy>`: this replay's files.
    pub fn dir(&self) -> PathBuf {
        self.run_dir.join("replay").join(self.policy.name())
    }

    fn nodes(&self) -> u32 {
        self.gpus.div_ceil(GPUS_PER_NODE)
    }
}

// ---- the plan ------------------------------------------------------------------------------

/// One trace job as it is submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedJob {
    pub trace_id: u64,
    pub user: String,
    pub account: String,
    /// GPUs of the trace row.
    pub gpus: u32,
    /// `-N`.
    pub nodes: u32,
    /// `--gres=gpu:<this>` (per node).
    pub gpus_per_node: u32,
    /// Real seconds after t0 (trace time 0): `submit_s / K`.
    pub at_s: f64,
    /// Seconds the script "works": max(1, round(duration_s / K)).
    pub work_s: u64,
    /// `--time` in minutes: ceil((max(duration_s, contract_s) / K + 30 s) / 60).
    pub time_limit_min: u64,
    /// `--comment`.
    pub comment: String,
    /// `--qos` (multifactor only).
    pub qos: Option<&'static str>,
    /// `--nice` (Tally only; see [`plan`]).
    pub nice: Option<u32>,
    pub resumable: bool,
}

/// The QOS a trace job gets under multifactor (the simulator's rule).
pub fn qos_of(class: Class, contract_s: u64) -> &'static str {
    match class {
        Class::Debug | Class::Interactive | Class::Realtime => "high",
        _ if contract_s == 0 => "scavenger",
        _ => "normal",
    }
}

/// `contract=<round(contract_s/K)>s[,resumable]`, at least 1 s when the
/// trace's contract is > 0; `contract=0[,resumable]` for contract 0
/// (unallocated work can be resumable too: the simulator and Tally's victim
/// order count it).
pub fn comment_of(contract_s: u64, resumable: bool, speedup: f64) -> String {
    let c = if contract_s == 0 { "contract=0".to_string() } else { format!("contract={}s", ((contract_s as f64 / speedup).round() as u64).max(1)) };
    if resumable {
        format!("{c},resumable")
    } else {
        c
    }
}

/// Every trace job, in trace order, as it will be submitted.
///
/// GPUs: `-N1 --gres=gpu:g` for g ≤ 8, `-N ceil(g/8) --gres=gpu:8` above (a
/// row wider than 8 GPUs that is not a multiple of 8 is rounded up to whole
/// nodes: Slurm's `--gres` is per node, and the simulator places such jobs
/// on whole nodes too).
///
/// Priority inside the team (trace `priority`, higher first): Tally reads it
/// as `-nice`, but users may not give a negative nice, so under Tally each
/// job gets `--nice = pmax - priority` (pmax = the trace's largest priority,
/// at least 0): the same order inside a team. Multifactor gets no nice (the
/// simulator's multifactor ignores the column).
pub fn plan(trace: &Trace, speedup: f64, policy: Policy) -> Vec<PlannedJob> {
    let pmax = trace.jobs.iter().map(|j| j.priority).max().unwrap_or(0).max(0);
    trace
        .jobs
        .iter()
        .map(|j| {
            let (nodes, per_node) = if j.gpus <= GPUS_PER_NODE { (1, j.gpus) } else { (j.gpus.div_ceil(GPUS_PER_NODE), GPUS_PER_NODE) };
            let longest = j.duration_s.max(j.contract_s) as f64 / speedup;
            let nice = i64::from(pmax) - i64::from(j.priority);
            PlannedJob {
                trace_id: j.job_id,
                user: j.user.to_lowercase(),
                account: j.account.to_lowercase(),
                gpus: j.gpus,
                nodes,
                gpus_per_node: per_node,
                at_s: j.submit_s as f64 / speedup,
                work_s: ((j.duration_s as f64 / speedup).round() as u64).max(1),
                time_limit_min: ((longest + TIME_LIMIT_MARGIN_S) / MINUTE_S as f64).ceil() as u64,
                comment: comment_of(j.contract_s, j.resumable, speedup),
                qos: (policy == Policy::Multifactor).then(|| qos_of(j.class, j.contract_s)),
                nice: (policy == Policy::Tally && nice > 0).then(|| nice.min(i64::from(u32::MAX)) as u32),
                resumable: j.resumable,
            }
        })
        .collect()
}

impl PlannedJob {
    /// sbatch's arguments (after `sbatch`), the script and its two
    /// arguments (work seconds, resumable 0/1) last.
    pub fn sbatch_args(&self, script: &Path, out_dir: &Path) -> Vec<String> {
        let mut a = vec![
            "--parsable".to_string(),
            format!("--job-name=t{}", self.trace_id),
            format!("--account={}", self.account),
            format!("--nodes={}", self.nodes),
            format!("--gres=gpu:{}", self.gpus_per_node),
            format!("--time={}", self.time_limit_min),
            format!("--comment={}", self.comment),
            "--requeue".to_string(),
            format!("--output={}/%j.out", out_dir.display()),
            "--open-mode=append".to_string(),
        ];
        if let Some(q) = self.qos {
            a.push(format!("--qos={q}"));
        }
        if let Some(n) = self.nice {
            a.push(format!("--nice={n}"));
        }
        a.push(script.display().to_string());
        a.push(self.work_s.to_string());
        a.push(if self.resumable { "1" } else { "0" }.to_string());
        a
    }
}

/// The batch script every job runs: `job.sh <work_s> <resumable 0|1>`.
///
/// A non-resumable job sleeps its work from zero on every run. A resumable
/// one reads `<progress_dir>/<job id>` (seconds done by earlier runs; the
/// job id survives a requeue), then advances it once a second on a clock
/// anchored at its start (no drift), writing it atomically, so a requeued
/// run only sleeps what is left (at most the last second is lost).
pub fn job_script(progress_dir: &Path) -> String {
    format!(
        r#"#!/bin/bash
# Tally replay job (tests/src/replay.rs). Usage: job.sh <work_s> <resumable: 0|1>
work=$1 resumable=$2
progress={progress}/$SLURM_JOB_ID
echo "job $SLURM_JOB_ID run ${{SLURM_RESTART_COUNT:-0}} on $SLURMD_NODENAME at $(date +%s): work ${{work}}s, resumable $resumable"
if [[ $resumable != 1 ]]; then
    exec sleep "$work"
fi
done=0
if [[ -s $progress ]]; then read -r done <"$progress" || done=0; fi
[[ $done =~ ^[0-9]+$ ]] || done=0
echo "resuming at ${{done}}s"
base=$done
t0=${{EPOCHREALTIME/[.,]/}}
k=0
while (( done < work )); do
    k=$(( k + 1 ))
    wait_us=$(( t0 + k * 1000000 - ${{EPOCHREALTIME/[.,]/}} ))
    if (( wait_us > 0 )); then sleep "$(( wait_us / 1000000 )).$(printf '%06d' $(( wait_us % 1000000 )))"; fi
    done=$(( base + k ))
    printf '%d\n' "$done" >"$progress.tmp" && mv -f "$progress.tmp" "$progress"
done
echo "done at $(date +%s)"
"#,
        progress = progress_dir.display()
    )
}

// ---- bed settings ------------------------------------------------------------------------------

/// Whole minutes as Slurm's `D-HH:MM:SS` (for PriorityDecayHalfLife and
/// PriorityMaxAge, which Slurm reads in minutes): `secs` rounded to the
/// nearest minute, at least 1.
pub fn slurm_minutes(secs: f64) -> String {
    let m = ((secs / MINUTE_S as f64).round() as u64).max(1);
    format!("{}-{:02}:{:02}:00", m / 1440, (m / 60) % 24, m % 60)
}

/// TALLY_SLURM_EXTRA for a replay: lines that replace up.sh's defaults for
/// their keys. (AccountingStoreFlags=job_comment, AccountingStorageEnforce=
/// associations,limits and the partition's TRESBillingWeights
/// "CPU=0,GRES/gpu=1.0" are up.sh's defaults already; MinJobAge=10 too:
/// finished jobs leave slurmctld after 10-20 s, sacct keeps them.)
pub fn slurm_extra(policy: Policy, speedup: f64) -> String {
    let mut s = String::new();
    // A requeued batch job waits cred_expire + 1 s before it may start again;
    // 5 is the smallest value slurm_cred.c accepts (default 120).
    s.push_str("AuthInfo=cred_expire=5\n");
    s.push_str("JobRequeue=1\n");
    s.push_str("PreemptMode=REQUEUE\n");
    let _ = writeln!(s, "SchedulerParameters={SCHEDULER_PARAMETERS}");
    s.push_str("MinJobAge=10\n");
    match policy {
        Policy::Multifactor => {
            let week = slurm_minutes(WEEK_S as f64 / speedup);
            let _ = writeln!(s, "PriorityDecayHalfLife={week}");
            // Slurm's minimum: 1 minute (= 3 trace hours at K = 180).
            s.push_str("PriorityCalcPeriod=1\n");
            s.push_str("PriorityWeightFairshare=10000\n");
            s.push_str("PriorityWeightAge=1000\n");
            let _ = writeln!(s, "PriorityMaxAge={week}");
            s.push_str("PriorityWeightQOS=2000\n");
            s.push_str("PriorityWeightJobSize=0\n");
            s.push_str("PriorityWeightPartition=0\n");
            s.push_str("PriorityFavorSmall=NO\n");
            s.push_str("PreemptType=preempt/qos\n");
        }
        Policy::Tally => {
            s.push_str("JobSubmitPlugins=tally\n");
            s.push_str("PreemptType=preempt/tally\n");
        }
    }
    s
}

/// `[accounts.<name>] share = N` of a tally.toml, as Slurm Fairshare values
/// (rounded to whole numbers, at least 1). A small reader of that one table
/// shape (the `config` crate is the only one that parses tally.toml with
/// serde); an account with `gpu_hours` instead of a share is an error.
pub fn config_shares(toml: &str) -> Result<BTreeMap<String, u32>, String> {
    let mut out = BTreeMap::new();
    let mut section: Option<String> = None;
    for (n, raw) in toml.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            section = line.strip_prefix("[accounts.").and_then(|r| r.strip_suffix(']')).map(|name| name.trim().trim_matches('"').to_lowercase());
            continue;
        }
        let Some(acc) = &section else { continue };
        let Some((key, value)) = line.split_once('=') else { continue };
        match key.trim() {
            "share" => {
                let v: f64 = value.trim().parse().map_err(|_| format!("line {}: share of {acc}: not a number: {}", n + 1, value.trim()))?;
                out.insert(acc.clone(), (v.round() as u32).max(1));
            }
            "gpu_hours" => {
                return Err(format!(
                    "line {}: account {acc} has a gpu_hours budget: give it a share for the replay (Slurm Fairshare is relative)",
                    n + 1
                ))
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The bed's accounts file: the QOS, the config's tree (`tally config
/// accounts` output) with each account's Fairshare, then every user of the
/// trace with the account of its rows (the first one its default) and the
/// QOS settings. Trace accounts must be in the tree.
pub fn accounts_file(tree: &str, shares: &BTreeMap<String, u32>, trace: &Trace) -> Result<String, String> {
    let mut out = String::from("# Tally replay: QOS, accounts of the config's tree with their Fairshare, users of the trace\n");
    for q in QOS_LINES {
        let _ = writeln!(out, "{q}");
    }
    let mut accounts = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for line in tree.lines() {
        let words: Vec<&str> = line.split('#').next().unwrap_or("").split_whitespace().collect();
        match words.as_slice() {
            ["account", name, parent] => {
                let name = name.to_lowercase();
                accounts.insert(name.clone());
                match shares.get(&name) {
                    Some(s) => writeln!(out, "account {name} {} fairshare={s}", parent.to_lowercase()),
                    None => writeln!(out, "account {name} {}", parent.to_lowercase()),
                }
                .expect("write to String");
            }
            ["user", name, account] => {
                let (name, account) = (name.to_lowercase(), account.to_lowercase());
                if seen.insert((name.clone(), account.clone())) {
                    let _ = writeln!(out, "user {name} {account} {USER_QOS}");
                }
            }
            [] => {}
            _ => return Err(format!("tally config accounts printed an unexpected line: {line}")),
        }
    }
    let valid = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) && !s.starts_with(['-', '.']);
    for j in &trace.jobs {
        let (user, account) = (j.user.to_lowercase(), j.account.to_lowercase());
        if !accounts.contains(&account) {
            return Err(format!("trace job {}: account {:?} is not in the config's tree", j.job_id, j.account));
        }
        if !valid(&user) {
            return Err(format!("trace job {}: user {:?} cannot be a Unix user", j.job_id, j.user));
        }
        if seen.insert((user.clone(), account.clone())) {
            let _ = writeln!(out, "user {user} {account} {USER_QOS}");
        }
    }
    Ok(out)
}

// ---- sacct ---------------------------------------------------------------------------------------

/// A `sacct -P` dump split into its header and rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SacctTable {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl SacctTable {
    /// Splits the text: the first non-blank line is the header, every other
    /// non-blank line a row with as many `|`-separated fields (a row with
    /// more fields is joined back into its `Comment` when there is one: a
    /// comment may contain `|`).
    pub fn parse(text: &str) -> Result<SacctTable, String> {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header: Vec<String> = match lines.next() {
            Some(h) => h.split('|').map(str::to_string).collect(),
            None => return Ok(SacctTable::default()),
        };
        let comment = header.iter().position(|h| h == "Comment");
        let mut rows = Vec::new();
        for (n, line) in lines.enumerate() {
            let mut f: Vec<String> = line.split('|').map(str::to_string).collect();
            if f.len() > header.len() {
                if let Some(c) = comment {
                    let extra = f.len() - header.len();
                    let joined = f[c..=c + extra].join("|");
                    f.splice(c..=c + extra, [joined]);
                }
            }
            if f.len() != header.len() {
                return Err(format!("sacct row {}: {} fields, header has {}: {line}", n + 1, f.len(), header.len()));
            }
            rows.push(f);
        }
        Ok(SacctTable { header, rows })
    }

    pub fn col(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    /// Field `name` of row `row`.
    pub fn get(&self, row: usize, name: &str) -> Option<&str> {
        Some(self.rows.get(row)?.get(self.col(name)?)?.as_str())
    }
}

/// The header and the lines of `sacct` whose JobIDRaw is a key of `ids`.
pub fn only_jobs(sacct: &str, ids: &BTreeMap<u32, u64>) -> String {
    let mut out = String::new();
    for (n, line) in sacct.lines().enumerate() {
        let keep = n == 0 || line.split('|').next().and_then(|i| i.parse::<u32>().ok()).is_some_and(|i| ids.contains_key(&i));
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Slurm states after which a job (or a run of it) is over for good.
pub fn is_final_state(state: &str) -> bool {
    let s = state.split_whitespace().next().unwrap_or("");
    matches!(s, "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY" | "BOOT_FAIL" | "DEADLINE")
}

pub use tally_sim::trace::utc_iso;

// ---- results -----------------------------------------------------------------------------------

/// Summary of a list of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LagSummary {
    pub n: usize,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p95_s: f64,
    pub max_s: f64,
}

impl LagSummary {
    pub fn of(values: &[f64]) -> LagSummary {
        if values.is_empty() {
            return LagSummary::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
        LagSummary { n: v.len(), mean_s: v.iter().sum::<f64>() / v.len() as f64, p50_s: q(0.5), p95_s: q(0.95), max_s: v[v.len() - 1] }
    }
}

impl std::fmt::Display for LagSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "n={} mean={:.3}s p50={:.3}s p95={:.3}s max={:.3}s", self.n, self.mean_s, self.p50_s, self.p95_s, self.max_s)
    }
}

/// Wall times of one replay, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Timings {
    /// down.sh + up.sh.
    pub bring_up_s: f64,
    /// First submission to the last job's end (or the deadline).
    pub replay_s: f64,
    /// Deadline: cancel, queue drained, sacct complete.
    pub drain_s: f64,
    /// CPU seconds slurmctld used during the replay (user + system).
    pub slurmctld_cpu_s: f64,
}

/// What a replay collected.
#[derive(Debug, Clone)]
pub struct ReplayOutput {
    /// The sacct dump (see the module docs), also in `sacct_path`.
    pub sacct: String,
    pub sacct_path: PathBuf,
    /// Slurm job id → trace job id, every submitted job.
    pub id_map: BTreeMap<u32, u64>,
    /// Unix time of trace time 0: trace second s was submitted at
    /// `t0_unix + s / speedup` (t0 may lie before the replay's start when
    /// the trace does not start near 0).
    pub t0_unix: u64,
    pub speedup: f64,
    /// Real seconds from each job's compressed submit time to sbatch's
    /// return (the job then exists in slurmctld).
    pub submit_lag_s: LagSummary,
    /// Trace jobs sbatch refused: (trace id, what sbatch said).
    pub refused: Vec<(u64, String)>,
    /// Trace jobs.
    pub jobs: usize,
    /// Jobs still in the queue at the deadline (then cancelled).
    pub cancelled_at_deadline: usize,
    pub timings: Timings,
    /// This replay's directory (`<run dir>/replay/<policy>`).
    pub dir: PathBuf,
}

// ---- running things ------------------------------------------------------------------------------

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Runs `prog args` bounded by `timeout secs`; Ok(stdout) or Err(stderr).
fn run(secs: u64, prog: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("timeout").arg(secs.to_string()).arg(prog).args(args).stdin(Stdio::null()).output().map_err(|e| format!("{prog}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{prog} {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A test-bed script (`testbed/<name>`) with the run dir and `env`; its
/// output goes to our stderr.
fn testbed(opts: &ReplayOptions, name: &str, env: &[(&str, String)]) -> Result<(), String> {
    let mut cmd = Command::new("bash");
    cmd.arg(opts.repo.join("testbed").join(name))
        .env("TALLY_RUN_DIR", &opts.run_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd.status().map_err(|e| format!("testbed/{name}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("testbed/{name} failed ({status})"))
    }
}

/// Stops the bed (`testbed/down.sh` for `opts.run_dir`).
pub fn bed_down(opts: &ReplayOptions) -> Result<(), String> {
    testbed(opts, "down.sh", &[])
}

/// sbatch as `user` (as the bed's `submit_as`, without its bash: `runuser
/// -u <user> -- sbatch` in the bed's world-writable jobs dir, so munge
/// authenticates the job as that user). Ok(job id) or Err(what sbatch said).
pub fn sbatch_as(run_dir: &Path, user: &str, args: &[String]) -> Result<u32, String> {
    let out = Command::new("timeout")
        .args(["60", "runuser", "-u", user, "--", "sbatch"])
        .args(args)
        .current_dir(run_dir.join("jobs"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("runuser: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{}{}", stdout.trim(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    let id = stdout.trim().split(';').next().unwrap_or("");
    id.parse().map_err(|_| format!("sbatch printed {:?}", stdout.trim()))
}

/// `squeue -t all`: job id → state, every job slurmctld still holds.
fn queue_states() -> Result<BTreeMap<u32, String>, String> {
    let out = run(30, "squeue", &["-h", "-t", "all", "-o", "%i|%T"])?;
    Ok(out.lines().filter_map(|l| l.split_once('|')).filter_map(|(i, s)| Some((i.trim().parse().ok()?, s.trim().to_string()))).collect())
}

fn ctld_cpu_s(run_dir: &Path) -> Option<f64> {
    let pid = std::fs::read_to_string(run_dir.join("pid/slurmctld.pid")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0) // USER_HZ is 100 on Linux/x86-64
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn mkdir_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| format!("{}: {e}", path.display()))
}

/// Everything a bring-up needs: the files under `opts.dir()`, then down.sh
/// and up.sh with the policy's settings. Returns the trace.
fn prepare_and_bring_up(opts: &ReplayOptions) -> Result<Trace, String> {
    use std::os::unix::fs::PermissionsExt;
    if opts.gpus == 0 || opts.gpus % GPUS_PER_NODE != 0 {
        return Err(format!("gpus must be a positive multiple of {GPUS_PER_NODE}, got {}", opts.gpus));
    }
    if opts.small_node_gpus > GPUS_PER_NODE {
        return Err(format!("the small node has 0 to {GPUS_PER_NODE} GPUs, got {}", opts.small_node_gpus));
    }
    if !opts.speedup.is_finite() || opts.speedup <= 0.0 {
        return Err(format!("speedup must be > 0, got {}", opts.speedup));
    }
    let text = std::fs::read_to_string(&opts.trace_csv).map_err(|e| format!("{}: {e}", opts.trace_csv.display()))?;
    let trace = parse_csv(&text).map_err(|e| format!("{}: {e}", opts.trace_csv.display()))?;
    if trace.jobs.is_empty() {
        return Err(format!("{}: no jobs", opts.trace_csv.display()));
    }
    if let Some(j) = trace.jobs.iter().find(|j| j.gpus.div_ceil(GPUS_PER_NODE) > opts.nodes()) {
        return Err(format!("trace job {} asks for {} GPUs, more than the bed's {}", j.job_id, j.gpus, opts.gpus));
    }
    let config_text = std::fs::read_to_string(&opts.tally_config).map_err(|e| format!("{}: {e}", opts.tally_config.display()))?;
    let tally = opts.repo.join("target/release/tally");
    let config = opts.tally_config.display().to_string();
    run(60, &tally.display().to_string(), &["config", "check", &config])
        .map_err(|e| format!("{e}\n(build the CLI: cargo build --release -p tally-cli)"))?;
    let tree = run(60, &tally.display().to_string(), &["config", "accounts", &config])?;
    let accounts = accounts_file(&tree, &config_shares(&config_text)?, &trace)?;

    let dir = opts.dir();
    mkdir_mode(&opts.run_dir, 0o755)?;
    mkdir_mode(&opts.run_dir.join("replay"), 0o755)?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    mkdir_mode(&dir, 0o755)?;
    mkdir_mode(&dir.join("progress"), 0o1777)?;
    mkdir_mode(&dir.join("out"), 0o1777)?;
    write(&dir.join("accounts"), &accounts)?;
    let script = dir.join("job.sh");
    write(&script, &job_script(&dir.join("progress")))?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).map_err(|e| format!("{}: {e}", script.display()))?;

    let mut env = vec![
        ("TALLY_NODES", opts.nodes().to_string()),
        ("TALLY_SMALL_NODE_GPUS", opts.small_node_gpus.to_string()),
        ("TALLY_ACCOUNTS", dir.join("accounts").display().to_string()),
        ("TALLY_SLURM_EXTRA", slurm_extra(opts.policy, opts.speedup)),
    ];
    match opts.policy {
        Policy::Multifactor => env.push(("TALLY_PRIORITY_TYPE", "priority/multifactor".into())),
        Policy::Tally => {
            let copy = dir.join("tally.toml");
            write(&copy, &config_text)?;
            let plugins = opts.repo.join("target/plugins");
            if !plugins.join("priority_tally.so").exists() {
                return Err(format!("{}: no plugins (make plugins)", plugins.display()));
            }
            env.push(("TALLY_PRIORITY_TYPE", "priority/tally".into()));
            env.push(("TALLY_PLUGIN_DIR", plugins.display().to_string()));
            env.push(("TALLY_ENV", format!("TALLY_CONFIG={}", copy.display())));
        }
    }
    // Fresh: down first, so that up.sh never keeps an earlier replay's state.
    testbed(opts, "down.sh", &[])?;
    testbed(opts, "up.sh", &env)?;
    Ok(trace)
}

struct Submitted {
    trace_id: u64,
    target: f64,
    returned: f64,
    result: Result<u32, String>,
}

/// Replays the trace on a fresh bed (see the module docs). Progress goes to
/// stderr. Leaves the bed up.
pub fn replay(opts: &ReplayOptions) -> Result<ReplayOutput, String> {
    let started = Instant::now();
    let trace = prepare_and_bring_up(opts)?;
    let bring_up_s = started.elapsed().as_secs_f64();
    let dir = opts.dir();
    let plan = plan(&trace, opts.speedup, opts.policy);
    let k = opts.speedup;
    eprintln!(
        "[replay] {}: {} jobs, {:.1} trace hours ({:.0} s real at K={k}), {} GPUs{}; bed up in {bring_up_s:.1}s",
        opts.policy.name(),
        plan.len(),
        trace.span_s() as f64 / HOUR,
        trace.span_s() as f64 / k,
        opts.gpus,
        if opts.small_node_gpus > 0 { format!(" and a node of {}", opts.small_node_gpus) } else { String::new() }
    );

    // t0 = unix time of trace time 0, a whole second; the first job goes 3 s from now.
    let first_at = plan.iter().map(|p| p.at_s).fold(f64::INFINITY, f64::min);
    let last_at = plan.iter().map(|p| p.at_s).fold(0.0, f64::max);
    let t0_unix = (unix_now().ceil() as u64 + 3).saturating_sub(first_at.floor() as u64);
    let t0 = t0_unix as f64;
    let start_unix = t0 + first_at;
    let deadline = t0 + last_at + opts.drain_s as f64;
    let cpu0 = ctld_cpu_s(&opts.run_dir);

    // Submission workers.
    let script = dir.join("job.sh");
    let out_dir = dir.join("out");
    let (job_tx, job_rx) = mpsc::channel::<(PlannedJob, f64)>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (res_tx, res_rx) = mpsc::channel::<Submitted>();
    let mut workers = Vec::new();
    for _ in 0..SUBMIT_WORKERS {
        let (rx, tx) = (Arc::clone(&job_rx), res_tx.clone());
        let (run_dir, script, out_dir) = (opts.run_dir.clone(), script.clone(), out_dir.clone());
        workers.push(std::thread::spawn(move || loop {
            let next = rx.lock().map(|r| r.recv());
            let Ok(Ok((job, target))) = next else { break };
            let result = sbatch_as(&run_dir, &job.user, &job.sbatch_args(&script, &out_dir));
            let sent = Submitted { trace_id: job.trace_id, target, returned: unix_now(), result };
            if tx.send(sent).is_err() {
                break;
            }
        }));
    }
    drop(res_tx);

    let mut idmap_tsv = String::from("trace_id\tslurm_id\ttarget_unix\tsubmitted_unix\tlag_s\n");
    let mut id_map = BTreeMap::new();
    let mut refused = Vec::new();
    let mut lags = Vec::new();
    let mut received = 0usize;
    let mut next = 0usize;
    let mut next_poll = 0.0f64;
    let mut next_print = start_unix;
    let mut finished = false;
    let mut job_tx = Some(job_tx);
    loop {
        let now = unix_now();
        while next < plan.len() && t0 + plan[next].at_s <= now {
            if let Some(tx) = &job_tx {
                tx.send((plan[next].clone(), t0 + plan[next].at_s)).map_err(|_| "submission workers died".to_string())?;
            }
            next += 1;
        }
        if next == plan.len() {
            job_tx = None; // workers end once the channel is empty
        }
        while let Ok(s) = res_rx.try_recv() {
            received += 1;
            let lag = s.returned - s.target;
            lags.push(lag);
            match s.result {
                Ok(id) => {
                    id_map.insert(id, s.trace_id);
                    let _ = writeln!(idmap_tsv, "{}\t{id}\t{:.3}\t{:.3}\t{lag:.3}", s.trace_id, s.target, s.returned);
                }
                Err(e) => {
                    eprintln!("[replay] trace job {} refused: {e}", s.trace_id);
                    let _ = writeln!(idmap_tsv, "{}\t\t{:.3}\t{:.3}\t{lag:.3}", s.trace_id, s.target, s.returned);
                    refused.push((s.trace_id, e));
                }
            }
        }
        if now >= next_poll {
            next_poll = now + 1.0;
            // A failed squeue (slurmctld busy) is no evidence: skip this poll.
            let states = match queue_states() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("[replay] squeue failed: {e}");
                    continue;
                }
            };
            let (mut running, mut pending) = (0, 0);
            for id in id_map.keys() {
                match states.get(id).map(String::as_str) {
                    Some("RUNNING" | "COMPLETING" | "CONFIGURING" | "STAGE_OUT" | "SIGNALING" | "RESIZING" | "SUSPENDED" | "STOPPED") => running += 1,
                    Some(s) if !is_final_state(s) => pending += 1,
                    _ => {}
                }
            }
            let done = id_map.len() - running - pending;
            if received == plan.len() && running + pending == 0 {
                finished = true;
            }
            if now >= next_print || finished {
                next_print = now + 15.0;
                eprintln!(
                    "[replay] real {:>5.0}s trace {:>5.2}h: submitted {}/{}, done {done}, running {running}, pending {pending}, refused {}",
                    now - start_unix,
                    (now - t0) * k / HOUR,
                    received,
                    plan.len(),
                    refused.len()
                );
            }
        }
        if finished || now >= deadline {
            break;
        }
        let wake = if next < plan.len() { (t0 + plan[next].at_s).min(next_poll) } else { next_poll };
        std::thread::sleep(Duration::from_secs_f64((wake - unix_now()).clamp(0.001, 0.2)));
    }
    drop(job_tx);
    // Submissions still under way at the deadline are collected.
    for w in workers {
        let _ = w.join();
    }
    while let Ok(s) = res_rx.try_recv() {
        lags.push(s.returned - s.target);
        match s.result {
            Ok(id) => {
                id_map.insert(id, s.trace_id);
                let _ = writeln!(idmap_tsv, "{}\t{id}\t{:.3}\t{:.3}\t{:.3}", s.trace_id, s.target, s.returned, s.returned - s.target);
            }
            Err(e) => refused.push((s.trace_id, e)),
        }
    }
    write(&dir.join("idmap.tsv"), &idmap_tsv)?;
    let end_replay = unix_now();
    let replay_s = end_replay - start_unix;
    let cpu1 = ctld_cpu_s(&opts.run_dir);

    // Deadline: cancel what is left, let the queue drain, wait for accounting.
    let drain_started = Instant::now();
    let left: Vec<String> = queue_states()?.into_iter().filter(|(_, s)| !is_final_state(s)).map(|(i, _)| i.to_string()).collect();
    if !left.is_empty() {
        eprintln!("[replay] deadline: cancelling {} job(s)", left.len());
        let mut args = vec!["--quiet"];
        args.extend(left.iter().map(String::as_str));
        run(60, "scancel", &args)?;
    }
    let wait_until = Instant::now() + Duration::from_secs(120);
    while !queue_states()?.values().all(|s| is_final_state(s)) {
        if Instant::now() > wait_until {
            return Err("the queue did not drain within 120 s after the deadline".into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let since = utc_iso((start_unix as u64).saturating_sub(60));
    let dump = || -> Result<String, String> {
        let out = Command::new("timeout")
            .args(["60", "sacct", "-D", "-X", "-P", "-a", "--noconvert", "-S", &since, "-E", "now", "-o", SACCT_FIELDS])
            .env("TZ", "UTC")
            .env("SLURM_TIME_FORMAT", "%s")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("sacct: {e}"))?;
        if !out.status.success() {
            return Err(format!("sacct failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // slurmdbd may lag behind slurmctld: wait until every job's last run is final.
    let wait_until = Instant::now() + Duration::from_secs(60);
    let sacct = loop {
        let text = dump()?;
        let table = SacctTable::parse(&text)?;
        let (idc, stc) = (table.col("JobIDRaw").ok_or("sacct: no JobIDRaw")?, table.col("State").ok_or("sacct: no State")?);
        let mut last: BTreeMap<u32, &str> = BTreeMap::new();
        for r in &table.rows {
            if let Ok(id) = r[idc].parse::<u32>() {
                last.insert(id, &r[stc]);
            }
        }
        let missing = id_map.keys().filter(|id| !last.get(id).is_some_and(|s| is_final_state(s))).count();
        if missing == 0 {
            break text;
        }
        if Instant::now() > wait_until {
            eprintln!("[replay] WARNING: {missing} job(s) have no final state in sacct after 60 s; dumping anyway");
            break text;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    // Only the replay's jobs (a probe's or an earlier test's may fall in the time window).
    write(&dir.join("sacct-raw.txt"), &sacct)?;
    let sacct = only_jobs(&sacct, &id_map);
    let sacct_path = dir.join("sacct.txt");
    write(&sacct_path, &sacct)?;
    let drain_s = drain_started.elapsed().as_secs_f64();

    let out = ReplayOutput {
        sacct,
        sacct_path,
        id_map,
        t0_unix,
        speedup: k,
        submit_lag_s: LagSummary::of(&lags),
        refused,
        jobs: plan.len(),
        cancelled_at_deadline: left.len(),
        timings: Timings { bring_up_s, replay_s, drain_s, slurmctld_cpu_s: cpu1.zip(cpu0).map_or(f64::NAN, |(b, a)| b - a) },
        dir: dir.clone(),
    };
    write(&dir.join("summary.txt"), &summary(opts, &out))?;
    Ok(out)
}

/// A few lines on a replay, for people.
pub fn summary(opts: &ReplayOptions, out: &ReplayOutput) -> String {
    let runs = SacctTable::parse(&out.sacct).map(|t| {
        let idc = t.col("JobIDRaw");
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &t.rows {
            if let Some(c) = idc {
                *per.entry(r[c].as_str()).or_default() += 1;
            }
        }
        let mut hist: BTreeMap<usize, usize> = BTreeMap::new();
        for (id, n) in per {
            if id.parse::<u32>().is_ok_and(|i| out.id_map.contains_key(&i)) {
                *hist.entry(n).or_default() += 1;
            }
        }
        hist
    });
    let mut s = String::new();
    let _ = writeln!(s, "policy        {}", opts.policy.name());
    let _ = writeln!(s, "trace         {}", opts.trace_csv.display());
    let _ = writeln!(s, "speedup       {}", out.speedup);
    let _ = writeln!(s, "gpus          {}", opts.gpus);
    let _ = writeln!(s, "t0_unix       {}", out.t0_unix);
    let _ = writeln!(
        s,
        "jobs          {} ({} submitted, {} refused, {} cancelled at the deadline)",
        out.jobs,
        out.id_map.len(),
        out.refused.len(),
        out.cancelled_at_deadline
    );
    let _ = writeln!(s, "submit lag    {}", out.submit_lag_s);
    let t = out.timings;
    let _ = writeln!(
        s,
        "wall          bring-up {:.1}s, replay {:.1}s, drain {:.1}s; slurmctld CPU {:.1}s during the replay",
        t.bring_up_s, t.replay_s, t.drain_s, t.slurmctld_cpu_s
    );
    if let Ok(h) = runs {
        let _ = writeln!(s, "runs per job  {}", h.iter().map(|(n, c)| format!("{n}: {c} jobs")).collect::<Vec<_>>().join(", "));
    }
    let _ = writeln!(s, "sacct         {}", out.sacct_path.display());
    let _ = writeln!(s, "id map        {}", out.dir.join("idmap.tsv").display());
    s
}

// ---- scheduling latencies ------------------------------------------------------------------------

/// Scheduling latencies measured on a bed with the replay's settings.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Latencies {
    /// Idle cluster: sbatch returned → RUNNING (squeue, polled every 20 ms).
    pub submit_to_running_s: f64,
    /// Idle cluster, `--begin` a few seconds ahead: begin time → RUNNING.
    pub begin_to_running_s: f64,
    /// Full cluster, one pending job (top priority): a running job left
    /// RUNNING → the pending one RUNNING (main scheduler on the job's end).
    pub end_to_next_start_s: f64,
    /// Full cluster, a blocked 2-node job on top and a 1-GPU job behind it:
    /// a node freed → the 1-GPU job RUNNING (backfill).
    pub end_to_backfill_start_s: f64,
    /// sbatch's own time (runuser + sbatch), mean of the probes'.
    pub sbatch_s: f64,
}

fn state_of(id: u32) -> String {
    run(10, "squeue", &["-h", "-t", "all", "-j", &id.to_string(), "-o", "%T"]).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Polls every 20 ms until `pred(state of id)`; the time it became true.
fn wait_state(id: u32, secs: u64, pred: impl Fn(&str) -> bool) -> Result<f64, String> {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = state_of(id);
        if pred(&s) {
            return Ok(unix_now());
        }
        if Instant::now() > until {
            return Err(format!("job {id}: still {s:?} after {secs} s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Brings the bed up with `opts`' settings (fresh, as [`replay`] does),
/// measures [`Latencies`] with a few `sleep` jobs of the trace's first user,
/// cancels them. Leaves the bed up (the next replay starts afresh anyway).
pub fn probe_latencies(opts: &ReplayOptions) -> Result<Latencies, String> {
    let trace = prepare_and_bring_up(opts)?;
    let first = &trace.jobs[0];
    let (user, account) = (first.user.to_lowercase(), first.account.to_lowercase());
    let base = |gpus_per_node: u32, nodes: u32, secs: u64, limit_min: u64| -> Vec<String> {
        let mut a = vec![
            "--parsable".to_string(),
            "--job-name=probe".into(),
            format!("--account={account}"),
            format!("--nodes={nodes}"),
            format!("--gres=gpu:{gpus_per_node}"),
            format!("--time={limit_min}"),
            "--output=/dev/null".into(),
            format!("--wrap=sleep {secs}"),
        ];
        if opts.policy == Policy::Multifactor {
            a.push("--qos=normal".into());
        }
        a
    };
    let mut sb = Vec::new();
    let mut submit = |args: Vec<String>| -> Result<(u32, f64), String> {
        let t = unix_now();
        let id = sbatch_as(&opts.run_dir, &user, &args)?;
        let r = unix_now();
        sb.push(r - t);
        Ok((id, r))
    };
    let running = |s: &str| s == "RUNNING";
    let mut l = Latencies::default();

    // 1. Idle cluster.
    let (a, at) = submit(base(1, 1, 2, 1))?;
    l.submit_to_running_s = wait_state(a, 30, running)? - at;
    // 2. --begin 3 s ahead (whole seconds, given in UTC).
    let begin = unix_now().ceil() as u64 + 3;
    let mut args = base(1, 1, 2, 1);
    args.push(format!("--begin={}", utc_iso(begin)));
    let (b, _) = {
        let t = unix_now();
        let out = Command::new("timeout")
            .args(["60", "runuser", "-u", &user, "--", "env", "TZ=UTC", "sbatch"])
            .args(&args)
            .current_dir(opts.run_dir.join("jobs"))
            .output()
            .map_err(|e| e.to_string())?;
        let id: u32 =
            String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| format!("sbatch --begin: {}", String::from_utf8_lossy(&out.stderr)))?;
        (id, t)
    };
    l.begin_to_running_s = wait_state(b, 30, running)? - begin as f64;
    wait_state(a, 30, |s| s.is_empty() || is_final_state(s))?;
    wait_state(b, 30, |s| s.is_empty() || is_final_state(s))?;

    // 3. Full cluster: one short 8-GPU job, the other nodes long; then one pending 8-GPU job.
    let nodes = opts.nodes();
    let (short, _) = submit(base(8, 1, 4, 1))?;
    let mut long = Vec::new();
    for _ in 1..nodes {
        long.push(submit(base(8, 1, 300, 10))?.0);
    }
    wait_state(short, 30, running)?;
    for &j in &long {
        wait_state(j, 30, running)?;
    }
    let (p, _) = submit(base(8, 1, 3, 1))?;
    let ended = wait_state(short, 30, |s| s != "RUNNING")?;
    l.end_to_next_start_s = wait_state(p, 30, running)? - ended;
    // 4. While p runs (3 s): a 2-node job on top (older), a 1-GPU job behind it; p's end frees a
    //    node the 2-node job cannot use before the long jobs' limits (10 min) but the 1-GPU job
    //    (limit 1 min) can: backfill starts it.
    let (wide, _) = submit(base(8, 2, 1, 1))?;
    std::thread::sleep(Duration::from_millis(1100));
    let (small, _) = submit(base(1, 1, 1, 1))?;
    let ended = wait_state(p, 30, |s| s != "RUNNING")?;
    l.end_to_backfill_start_s = wait_state(small, 30, running)? - ended;
    let wide_state = state_of(wide);
    if wide_state != "PENDING" {
        eprintln!("[probe] note: the 2-node job is {wide_state}, not PENDING");
    }
    l.sbatch_s = sb.iter().sum::<f64>() / sb.len().max(1) as f64;

    let mut all: Vec<String> = long.iter().chain([&wide, &small]).map(u32::to_string).collect();
    all.insert(0, "--quiet".into());
    run(60, "scancel", &all.iter().map(String::as_str).collect::<Vec<_>>())?;
    let until = Instant::now() + Duration::from_secs(120);
    while !queue_states()?.values().all(|s| is_final_state(s)) {
        if Instant::now() > until {
            return Err("probe jobs did not leave the queue within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(rows: &[&str]) -> Trace {
        let mut t = String::from("job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority\n");
        for r in rows {
            t.push_str(r);
            t.push('\n');
        }
        parse_csv(&t).unwrap()
    }

    #[test]
    fn plan_compresses_times_and_sizes_jobs() {
        let t = trace(&[
            "1,3600,7200,8,pretrain,pretrain-u1,training,3600,true,0",
            "2,7200,100,1,evals,evals-u2,debug,100,false,3",
            "3,9000,36000,16,climate,climate-u1,training,0,false,10",
            "4,9000,50,12,climate,climate-u1,batch_inference,28800,false,0",
        ]);
        let p = plan(&t, 180.0, Policy::Multifactor);
        assert_eq!(p.len(), 4);
        // 1: 7200/180 = 40 s of work, limit ceil((40+30)/60) = 2 min, contract 20 s.
        assert_eq!((p[0].at_s, p[0].work_s, p[0].time_limit_min), (20.0, 40, 2));
        assert_eq!((p[0].nodes, p[0].gpus_per_node), (1, 8));
        assert_eq!(p[0].comment, "contract=20s,resumable");
        assert_eq!(p[0].qos, Some("normal"));
        assert_eq!(p[0].nice, None, "multifactor: no nice");
        // 2: 100/180 rounds to 1 s; contract 0.56 s rounds to 1 s (at least 1 when > 0).
        assert_eq!((p[1].work_s, p[1].time_limit_min, p[1].comment.as_str()), (1, 1, "contract=1s"));
        assert_eq!(p[1].qos, Some("high"));
        // 3: 16 GPUs on 2 whole nodes; contract 0: scavenger.
        assert_eq!((p[2].nodes, p[2].gpus_per_node), (2, 8));
        assert_eq!((p[2].work_s, p[2].time_limit_min, p[2].comment.as_str()), (200, 4, "contract=0"));
        assert_eq!(p[2].qos, Some("scavenger"));
        // 4: 12 GPUs round up to 2 whole nodes; the limit covers the 160 s contract.
        assert_eq!((p[3].nodes, p[3].gpus_per_node), (2, 8));
        assert_eq!((p[3].work_s, p[3].time_limit_min, p[3].comment.as_str()), (1, 4, "contract=160s"));

        let p = plan(&t, 180.0, Policy::Tally);
        assert!(p.iter().all(|j| j.qos.is_none()), "tally: no QOS");
        // pmax 10: nice = 10 - priority, none for the top priority.
        assert_eq!(p.iter().map(|j| j.nice).collect::<Vec<_>>(), vec![Some(10), Some(7), None, Some(10)]);
    }

    #[test]
    fn qos_follows_the_simulators_rule() {
        assert_eq!(qos_of(Class::Interactive, 0), "high");
        assert_eq!(qos_of(Class::Realtime, 100), "high");
        assert_eq!(qos_of(Class::Debug, 0), "high");
        assert_eq!(qos_of(Class::Training, 0), "scavenger");
        assert_eq!(qos_of(Class::Quantization, 60), "normal");
        assert_eq!(comment_of(0, true, 180.0), "contract=0,resumable");
        assert_eq!(comment_of(28_800, false, 180.0), "contract=160s");
        assert_eq!(comment_of(3_000, true, 100.0), "contract=30s,resumable");
    }

    #[test]
    fn sbatch_arguments() {
        let t = trace(&["7,0,3600,16,pretrain,pretrain-u1,training,1800,true,2"]);
        let p = &plan(&t, 180.0, Policy::Tally)[0];
        let a = p.sbatch_args(Path::new("/r/job.sh"), Path::new("/r/out"));
        assert_eq!(
            a,
            [
                "--parsable",
                "--job-name=t7",
                "--account=pretrain",
                "--nodes=2",
                "--gres=gpu:8",
                "--time=1",
                "--comment=contract=10s,resumable",
                "--requeue",
                "--output=/r/out/%j.out",
                "--open-mode=append",
                "/r/job.sh",
                "20",
                "1"
            ]
        );
        let p = &plan(&t, 180.0, Policy::Multifactor)[0];
        let a = p.sbatch_args(Path::new("/r/job.sh"), Path::new("/r/out"));
        assert!(a.contains(&"--qos=normal".to_string()));
    }

    #[test]
    fn script_keeps_progress_only_when_resumable() {
        let s = job_script(Path::new("/run/replay/tally/progress"));
        assert!(s.starts_with("#!/bin/bash\n"));
        assert!(s.contains("progress=/run/replay/tally/progress/$SLURM_JOB_ID"));
        assert!(s.contains("exec sleep \"$work\""), "non-resumable: from zero");
        assert!(s.contains("read -r done <\"$progress\""), "resumable: reads its progress");
        assert!(s.contains("mv -f \"$progress.tmp\" \"$progress\""), "written atomically");
        // Valid bash.
        let dir = std::env::temp_dir().join(format!("tally-replay-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("job.sh");
        std::fs::write(&f, &s).unwrap();
        let ok = Command::new("bash").arg("-n").arg(&f).status().unwrap().success();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(ok, "bash -n job.sh");
    }

    #[test]
    fn script_resumes_from_its_progress_file() {
        let dir = std::env::temp_dir().join(format!("tally-replay-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("job.sh");
        std::fs::write(&f, job_script(&dir)).unwrap();
        // 3 s of work, 2 done by an earlier run: 1 s left.
        std::fs::write(dir.join("42"), "2\n").unwrap();
        let t = Instant::now();
        let out = Command::new("bash").arg(&f).args(["3", "1"]).env("SLURM_JOB_ID", "42").output().unwrap();
        let took = t.elapsed().as_secs_f64();
        let progress = std::fs::read_to_string(dir.join("42")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(progress.trim(), "3");
        assert!((0.9..2.0).contains(&took), "slept what was left: {took} s");
    }

    #[test]
    fn slurm_settings() {
        assert_eq!(slurm_minutes(WEEK_S as f64 / 180.0), "0-00:56:00");
        assert_eq!(slurm_minutes(WEEK_S as f64), "7-00:00:00");
        assert_eq!(slurm_minutes(10.0), "0-00:01:00");
        let m = slurm_extra(Policy::Multifactor, 180.0);
        for l in [
            "PriorityDecayHalfLife=0-00:56:00",
            "PriorityMaxAge=0-00:56:00",
            "PriorityCalcPeriod=1",
            "PreemptType=preempt/qos",
            "PreemptMode=REQUEUE",
            "AuthInfo=cred_expire=5",
            "PriorityWeightQOS=2000",
        ] {
            assert!(m.lines().any(|x| x == l), "{l} in\n{m}");
        }
        assert!(!m.contains("PriorityFlags"));
        let t = slurm_extra(Policy::Tally, 180.0);
        for l in ["JobSubmitPlugins=tally", "PreemptType=preempt/tally", "PreemptMode=REQUEUE", "AuthInfo=cred_expire=5"] {
            assert!(t.lines().any(|x| x == l), "{l} in\n{t}");
        }
        assert!(!t.contains("Priority"), "Tally keeps up.sh's multifactor weights (unused)");
        // Every line is Key=value (up.sh replaces its default for that key).
        for l in m.lines().chain(t.lines()) {
            assert!(l.split_once('=').is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_alphanumeric())), "{l}");
        }
    }

    #[test]
    fn accounts_from_tree_shares_and_trace() {
        let toml = "[cluster]\ngpus = 48\n\n[accounts.llm]\nshare = 45 # programme\n[accounts.pretrain]\nparent = \"llm\"\nshare = 40\n[accounts.theory]\nshare = 12.5\n";
        let shares = config_shares(toml).unwrap();
        assert_eq!(shares, BTreeMap::from([("llm".into(), 45), ("pretrain".into(), 40), ("theory".into(), 13)]));
        assert!(config_shares("[accounts.video]\nparent = \"x\"\ngpu_hours = 200\n").unwrap_err().contains("gpu_hours"));
        let tree = "# accounts and users of x\naccount llm root\naccount pretrain llm\naccount theory root\nuser alice pretrain\n";
        let t = trace(&[
            "1,0,60,1,pretrain,pretrain-u1,training,0,false,0",
            "2,1,60,1,theory,pretrain-u1,training,0,false,0",
            "3,2,60,1,pretrain,pretrain-u1,debug,0,false,0",
        ]);
        let a = accounts_file(tree, &shares, &t).unwrap();
        let lines: Vec<&str> = a.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "qos normal priority=0",
                "qos scavenger priority=0",
                "qos high priority=1 preempt=scavenger",
                "account llm root fairshare=45",
                "account pretrain llm fairshare=40",
                "account theory root fairshare=13",
                "user alice pretrain qos=normal,high,scavenger defaultqos=normal",
                "user pretrain-u1 pretrain qos=normal,high,scavenger defaultqos=normal",
                "user pretrain-u1 theory qos=normal,high,scavenger defaultqos=normal",
            ]
        );
        let bad = trace(&["1,0,60,1,vision,vision-u1,training,0,false,0"]);
        assert!(accounts_file(tree, &shares, &bad).unwrap_err().contains("not in the config's tree"));
    }

    #[test]
    fn the_replay_config_is_time_scaled() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/replay-tally.toml")).unwrap();
        let shares = config_shares(&text).unwrap();
        assert_eq!(shares.len(), 18, "3 programmes, 15 teams");
        for l in ["gpus = 50", "debug_nodes = \"n7\"", "window = \"56m\"", "bucket = \"20s\"", "max = \"160s\"", "calc_period = \"1s\""] {
            assert!(text.lines().any(|x| x.trim() == l), "{l}");
        }
    }

    #[test]
    fn sacct_lines_split_by_header() {
        let text = "JobIDRaw|Account|State|AllocTRES|Comment|Elapsed\n\
                    17|pretrain|PREEMPTED|billing=8,cpu=1,gres/gpu=8,node=1|contract=20s,resumable|00:00:12\n\
                    17|pretrain|COMPLETED|billing=8,cpu=1,gres/gpu=8,node=1|contract=20s,resumable|00:00:28\n\
                    18|theory|CANCELLED by 0||a|b|00:00:00\n";
        let t = SacctTable::parse(text).unwrap();
        assert_eq!(t.header.len(), 6);
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.get(0, "State"), Some("PREEMPTED"));
        assert_eq!(t.get(1, "Elapsed"), Some("00:00:28"));
        assert_eq!(t.get(2, "Comment"), Some("a|b"), "a | inside a comment is kept");
        assert_eq!(t.get(2, "AllocTRES"), Some(""));
        assert_eq!(t.get(0, "Nope"), None);
        assert!(SacctTable::parse("A|B\n1|2|3\n").is_err());
        assert_eq!(SacctTable::parse("").unwrap(), SacctTable::default());
        let ids = BTreeMap::from([(17, 5)]);
        assert_eq!(only_jobs(text, &ids).lines().map(|l| &l[..2]).collect::<Vec<_>>(), ["Jo", "17", "17"]);
        assert!(is_final_state("CANCELLED by 0") && is_final_state("COMPLETED") && is_final_state("TIMEOUT"));
        assert!(!is_final_state("PREEMPTED") && !is_final_state("REQUEUED") && !is_final_state("RUNNING") && !is_final_state("PENDING"));
    }

    #[test]
    fn lag_summary() {
        let s = LagSummary::of(&[0.1, 0.3, 0.2, 1.0]);
        assert_eq!(s.n, 4);
        assert!((s.mean_s - 0.4).abs() < 1e-9);
        assert_eq!(s.max_s, 1.0);
        assert_eq!(LagSummary::of(&[]).n, 0);
    }
}
