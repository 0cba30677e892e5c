//! `tally explain JOBID`: why a job waits, who is ahead of it, what blocks
//! it, whether it may preempt, and when its team is back under its
//! allocation — from the live state, by the plugin's own rules.
//!
//! Inputs: tally.toml, the plugin's ledger (`live`), `squeue --json` (every
//! job, as the calling user sees them) and `sinfo --json` (the nodes and
//! their GPUs), read through [`crate::slurm_json`]. The jobs are classified
//! and ranked exactly as the priority plugin does
//! (`tally_engine::engine::{classify, rank}`), which jobs wait and the
//! order Slurm considers them in are the plugin's own
//! (`tally_engine::engine::queue`), preemption is the
//! allocator's rule on that entitlement (as preempt/tally builds its
//! `Moment`), the reason one job is ahead of another is
//! `priority::precedence` of their decoded priorities, and the outlook is
//! `outlook::back_under`. Nothing here re-states a rule.
//!
//! Here: the command, its arguments and the model (the facts
//! [`explain`] collects from the queue and the ranking, in a [`Report`]);
//! `words` says the reasons in words (why one job is ahead of another, a
//! job's place in its team's line, what protects a running job), `text`
//! renders a report for people ([`Report::text`], one function per
//! section of the output) and `json` as JSON ([`Report::json`]).

mod json;
mod text;
mod words;

pub(crate) use words::refusal_words;

use crate::live;
use crate::slurm_json::{self, NodeInfo, QueueJob};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ChildStdout, Command, Stdio};
use std::sync::Arc;
use tally_allocator::outlook::{back_under, BackUnder};
use tally_allocator::preempt::{eligible_victims, long_start, may_preempt, Decision, LongStart, Moment, Refusal};
use tally_allocator::priority::{decode, precedence, Decoded, Precedence, PLAN};
use tally_allocator::{Contract, Job, Snapshot, TeamNow, DAY_S, HOUR_S};
use tally_config::input::Bounded;
use tally_config::Config;
use tally_engine::engine::queue::{self, SlurmKey};
use tally_engine::engine::{classify, rank, Counted, Ranking, DEFAULT_PREEMPT_WINDOW_S};
use tally_engine::view::{Names, PartitionGpus, RunState};
use tally_sim::forecast::{forecast, Estimate, ForecastJob, Moment as ForecastMoment};
use words::{when, why_ahead};

/// Jobs ahead listed by name (all are counted).
const AHEAD_LISTED: usize = 5;
/// Running jobs listed as protected (all are counted).
const PROTECTED_LISTED: usize = 8;

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The job: an id (`17`) or an array task (`24_2`).
    pub job: String,
    /// The same facts as JSON.
    #[arg(long)]
    pub json: bool,
    /// Config file (default: $TALLY_CONFIG, else the config in force,
    /// StateSaveLocation/tally/tally.toml.active, else /etc/slurm/tally.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Ledger file, a regular file of at most 256 MiB (default:
    /// StateSaveLocation/tally/ledger.state from slurm.conf).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Read this saved `squeue --json` output instead of running squeue (a
    /// regular file of at most 256 MiB).
    #[arg(long, hide = true)]
    pub squeue_json: Option<PathBuf>,
    /// Read this saved `sinfo --json` output instead of running sinfo (a
    /// regular file of at most 256 MiB).
    #[arg(long, hide = true)]
    pub sinfo_json: Option<PathBuf>,
    /// Explain at this time (Unix seconds) instead of now (with saved output).
    #[arg(long, hide = true)]
    pub now: Option<u64>,
}

pub fn run_cmd(args: ExplainArgs) -> Result<(), String> {
    let mut others = Vec::new();
    if args.squeue_json.is_some() {
        others.push("--squeue-json");
    }
    if args.sinfo_json.is_some() {
        others.push("--sinfo-json");
    }
    if args.now.is_some() {
        others.push("--now");
    }
    let live::Live { config, state, private_for, .. } = live::open("explain", live::Chosen { config: args.config, state: args.state, others })?;
    let config = Arc::new(config);
    let snapshot = live::read_snapshot(&state, &config)?;
    let now = args.now.unwrap_or_else(live::now);
    let mut names = Names::new();
    let queue = read_queue(args.squeue_json, &mut names)?;
    let nodes = slurm_json::parse_sinfo(&nodes_output(args.sinfo_json)?)?;
    let report = explain(&config, &snapshot, &queue, &nodes, &args.job, now)?;
    if let Some(me) = private_for {
        let mine = live::accounts_of(&me, &config, &snapshot);
        if report.job.user != me && !mine.contains(&report.job.account) {
            return Err(format!(
                "job {}: not yours nor your accounts' ({}): [reports] private = true lets only admins explain other teams' jobs",
                args.job, report.job.account
            ));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json()).map_err(|e| e.to_string())?);
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

/// The largest saved `squeue --json` or `sinfo --json` output read
/// (`--squeue-json`, `--sinfo-json`): 256 MiB. squeue writes about 5 KB
/// per job, so this holds some 50,000 jobs, five times Slurm's default
/// MaxJobCount (10,000).
pub const MAX_SLURM_JSON_BYTES: u64 = 256 << 20;

/// `tool --json`'s output, or the saved file given instead.
fn slurm_output(tool: &str, saved: Option<PathBuf>) -> Result<String, String> {
    if let Some(path) = saved {
        return crate::args::read_file(&path, &format!("saved `{tool} --json` output"), MAX_SLURM_JSON_BYTES);
    }
    run_json(&[tool, "--json"])
}

/// The nodes one record each, as `sinfo --json` lists them up to Slurm
/// 22.05 (a `nodes` list). Later releases group nodes there (a `sinfo`
/// list); `scontrol show nodes --json` then lists them one by one, with
/// the same fields.
pub(crate) fn nodes_output(saved: Option<PathBuf>) -> Result<String, String> {
    let text = slurm_output("sinfo", saved)?;
    let grouped = serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v.get("nodes").is_none() && v.get("sinfo").is_some());
    if grouped {
        run_json(&["scontrol", "show", "nodes", "--json"])
    } else {
        Ok(text)
    }
}

/// The queue as `squeue --json` shows it, read as the output arrives
/// ([`slurm_json::read_squeue`]), or from the saved output given instead;
/// either at most [`MAX_SLURM_JSON_BYTES`].
pub(crate) fn read_queue(saved: Option<PathBuf>, names: &mut Names) -> Result<Vec<QueueJob>, String> {
    if let Some(path) = saved {
        let what = "saved `squeue --json` output";
        let file = tally_config::input::open_bounded(&path, what, MAX_SLURM_JSON_BYTES).map_err(|e| format!("{}: {e}", path.display()))?;
        return slurm_json::read_squeue(file, names);
    }
    run_reading(&["squeue", "--json"], |out| slurm_json::read_squeue(Bounded::new(out, "squeue --json's output", MAX_SLURM_JSON_BYTES, true), names))
}

fn run_json(cmd: &[&str]) -> Result<String, String> {
    run_reading(cmd, |mut out| {
        let mut text = String::new();
        Bounded::new(&mut out, &format!("{}'s output", cmd.join(" ")), MAX_SLURM_JSON_BYTES, true)
            .read_to_string(&mut text)
            .map_err(|e| format!("{}: {e}", cmd.join(" ")))?;
        Ok(text)
    })
}

/// Run `cmd` and hand its standard output to `read` as it arrives (its
/// standard error is gathered beside it, for the refusal). A command that
/// fails is the error, whatever `read` made of what it printed.
fn run_reading<T>(cmd: &[&str], read: impl FnOnce(&mut ChildStdout) -> Result<T, String>) -> Result<T, String> {
    let (tool, line) = (cmd[0], cmd.join(" "));
    let mut child = Command::new(tool).args(&cmd[1..]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("{tool} not found on PATH: run tally explain where Slurm's client commands are installed (a login node)")
        } else {
            format!("{line}: cannot run: {e}")
        }
    })?;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    // A command that fills the error pipe while nobody reads it would
    // stop before it finished its output.
    let said = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = (&mut stderr).take(1 << 20).read_to_end(&mut text);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        String::from_utf8_lossy(&text).into_owned()
    });
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let got = read(&mut stdout);
    // Closed before the wait: a command whose output was not read to its
    // end gets EPIPE instead of blocking on a full pipe.
    drop(stdout);
    let status = child.wait().map_err(|e| format!("{line}: {e}"))?;
    let err = said.join().unwrap_or_default();
    // A command stopped by the closed pipe: what was read is the story.
    let cut_off = got.is_err() && status.signal() == Some(libc::SIGPIPE);
    if !status.success() && !cut_off {
        return Err(format!(
            "{line} failed ({status}): {} (is slurmctld up, and is this Slurm 22.05 or later with the serializer/json plugin?)",
            err.trim()
        ));
    }
    got
}

// ---- the facts ---------------------------------------------------------------------------------

/// Everything `explain` says of one job.
#[derive(Debug)]
pub struct Report {
    pub now: u64,
    pub job: JobFacts,
    pub team: Option<TeamFacts>,
    /// From the account up to the root.
    pub levels: Vec<Level>,
    pub ahead: Option<Ahead>,
    pub blocks: Vec<Block>,
    pub preemption: Option<Preemption>,
    /// A running job: what it would yield to.
    pub yields: Option<Yields>,
    pub outlook: Option<Outlook>,
    /// The start estimate, or why there is none.
    pub forecast: Option<Result<ForecastFacts, String>>,
}

#[derive(Debug)]
pub struct ForecastFacts {
    pub estimate: Estimate,
    pub horizon_s: u64,
    pub default_duration_s: u64,
    /// Jobs replayed, and those without a time limit (given the default).
    pub jobs: usize,
    pub defaulted: usize,
}

#[derive(Debug)]
pub struct JobFacts {
    pub name: String,
    pub id: u32,
    pub user: String,
    pub account: String,
    pub gpus: u32,
    pub nodes: u32,
    pub partition: Option<String>,
    pub state: String,
    pub reason: String,
    pub comment: Option<String>,
    /// The contract the cluster's rules give its comment, or why they refuse it.
    pub contract: Result<Contract, String>,
    pub allocated: bool,
    pub unallocated_because: Option<String>,
    pub priority: u32,
    pub decoded: Decoded,
    /// What Tally computes for it now, when it differs from Slurm's value
    /// (the plan bit aside): the plugin re-ranks every calc_period, and an
    /// admin's priority stays.
    pub computed: Option<u32>,
    pub time_limit_s: Option<u64>,
    pub submit_s: u64,
    pub begin_s: u64,
    pub start_s: u64,
    pub node_list: String,
    /// Running: seconds of its contract left.
    pub contract_left_s: u64,
}

#[derive(Debug)]
pub struct TeamFacts {
    pub account: String,
    pub now: TeamNow,
    /// A pending allocated job: its place in its team's line
    /// (`None`: running, or unallocated).
    pub place: Option<TeamPlace>,
}

/// A waiting job's place among its team's waiting allocated jobs, in the
/// team's order ([`tally_allocator::inside_order`]: nice, then quick jobs,
/// then submit time, then job id). The queue walk
/// (`allocator::order_queue`) gives the team's jobs the GPUs the team is
/// short in that order: a job is owed GPUs now only while the GPUs its
/// team runs plus those of its team's jobs ahead of it stay below the
/// team's rate (`Entitlement::need`), i.e. while the jobs ahead of it ask
/// for fewer GPUs than the team is short.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamPlace {
    /// The team's waiting allocated jobs before it in the team's order.
    pub jobs_ahead: usize,
    /// Their GPUs (budget units with GPU types): the walk's `ahead`.
    pub gpus_ahead: f64,
    /// Its place in the team's line, 1 = first (`jobs_ahead + 1`).
    pub place: usize,
    /// The team's waiting allocated jobs, it included when it waits.
    pub team_jobs: usize,
    /// It waits now (the walk placed it). If not (held, a dependency, a
    /// later begin time), it queues behind every waiting job of its team.
    pub waits: bool,
    /// What the walk gives it now: `NEED_LANE`, `NEED_OWED`, `NEED_FAIR`
    /// or `NEED_NONE`.
    pub need: u32,
}

/// One level of the tree: the account's own part, then each ancestor's subtree.
#[derive(Debug)]
pub struct Level {
    pub account: String,
    /// The account's own part (the job's account) or a subtree (its ancestors).
    pub own: bool,
    pub rank: u32,
    pub used_gpu_hours: f64,
    pub allocated_gpu_hours: f64,
}

#[derive(Debug)]
pub struct Ahead {
    /// Pending jobs Slurm considers before it in its partition.
    pub count: usize,
    pub gpus: u64,
    pub first: Vec<AheadJob>,
}

#[derive(Debug)]
pub struct AheadJob {
    pub name: String,
    pub user: String,
    pub account: String,
    pub gpus: u32,
    pub priority: u32,
    pub because: Option<Precedence>,
    /// Another team's job: the GPUs of its team's allocated jobs ahead of
    /// it in that team's line, as the walk stands now.
    pub team_gpus_ahead: Option<f64>,
    pub words: String,
}

/// What stands between the job and GPUs now.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A long job that cannot checkpoint, held by Tally
    /// ([`tally_allocator::long_start`]): its team runs `running` GPUs, its
    /// `fair` share of what is asked now or more, while `short_team` is
    /// `short` GPUs below what it is owed.
    LongJob {
        running: f64,
        fair: f64,
        short_team: String,
        short: f64,
    },
    Held(String),
    Dependency(String),
    BeginTime(u64),
    Partition(String),
    Reservation(String),
    /// Fewer GPUs free in its partition than it asks for.
    NoFreeGpus {
        free: u32,
        asked: u32,
    },
    /// Enough free in total, but no node has enough for a one-node job.
    Fragmented {
        free: u32,
        largest: u32,
        asked: u32,
    },
    /// A multi-node job: fewer nodes with its per-node GPUs free than it asks for.
    TooFewNodes {
        nodes: u32,
        per_node: u32,
        have: u32,
    },
    /// It asks for more than the partition's usable nodes have at all.
    NeverFits {
        asked: u32,
        partition_gpus: u32,
    },
    /// GPUs are free where it fits: it waits for Slurm's next pass, or
    /// for the jobs ahead of it (`Priority`).
    Fits {
        free: u32,
    },
    /// Slurm's reason, as it is.
    Slurm(String),
}

#[derive(Debug)]
pub struct Preemption {
    /// Why it may preempt nobody, when it may not ask at all.
    pub refused: Option<String>,
    /// Eligible victims in victim order (cumulatively eligible).
    pub candidates: Vec<Victim>,
    /// Their GPUs and the free ones together, for the ask.
    pub candidate_gpus: u32,
    pub free_gpus: u32,
    /// Running jobs it may not take, with what protects each.
    pub protected: Vec<Victim>,
    pub protected_count: usize,
    /// When the candidates and the free GPUs are not enough now: the first
    /// contract end after which they are (in count; Slurm still needs them
    /// on nodes that fit it), nothing else changing.
    pub next: Option<NextChance>,
}

/// [`Preemption::next`].
#[derive(Debug)]
pub struct NextChance {
    pub at: u64,
    /// The jobs it may take then, in victim order.
    pub victims: Vec<u64>,
}

/// A running job: what it would yield to once its contract is over.
#[derive(Debug)]
pub struct Yields {
    /// When it may first be preempted by an allocated job (its contract's
    /// end; now if it is past it).
    pub from: u64,
    /// Waiting jobs that may preempt it then (as the queue stands now),
    /// first [`PROTECTED_LISTED`], with the rule that lets each.
    pub to: Vec<Victim>,
    pub count: usize,
    /// Why nothing waiting may take it, when that is the answer for every
    /// waiting job alike (a job that cannot checkpoint, unallocated…).
    pub note: Option<String>,
    /// GPU-hours a requeue at `from` would throw away (0: resumable, it
    /// loses nothing; [`tally_allocator::lost_gpu_seconds`]).
    pub loses_gpu_h: f64,
}

#[derive(Debug)]
pub struct Victim {
    pub id: u64,
    pub user: String,
    pub account: String,
    pub gpus: u32,
    pub why: String,
}

#[derive(Debug)]
pub struct Outlook {
    pub account: String,
    pub used_gpu_hours: f64,
    pub allocated_gpu_hours: f64,
    pub back: BackUnder,
}

// ---- working them out --------------------------------------------------------------------------

/// The job named `which` among `queue`.
fn find<'a>(queue: &'a [QueueJob], which: &str) -> Result<&'a QueueJob, String> {
    let bad = || format!("{:?} is not a job id: give a number (`17`) or an array task (`24_2`)", tally_allocator::text::clip(which));
    let found = match which.split_once('_') {
        None => {
            let id: u32 = which.trim().parse().map_err(|_| bad())?;
            queue.iter().find(|j| j.view.job_id == id)
        }
        Some((a, t)) => {
            let (a, t): (u32, u32) = (a.parse().map_err(|_| bad())?, t.parse().map_err(|_| bad())?);
            // A task split off, else the array's record of pending tasks
            // when it holds the task.
            let split = queue.iter().find(|j| j.array_job_id == a && j.array_task_id == Some(t));
            let pending = || queue.iter().find(|j| j.array_job_id == a && j.array_task_id.is_none());
            match (split, pending()) {
                (Some(j), _) => Some(j),
                (None, Some(rest)) if task_in(&rest.array_tasks, t) == Some(false) => {
                    return Err(format!(
                        "job {which}: array {a} has no task {t} in Slurm's queue (its pending tasks are {a}_[{}]; ended tasks are in `sacct -j {which}`)",
                        tally_allocator::text::clip(&rest.array_tasks)
                    ));
                }
                (None, rest) => rest,
            }
        }
    };
    found.ok_or_else(|| {
        format!("job {which} is not in Slurm's queue (squeue lists pending and running jobs, and ended ones for a few minutes): check the id with `squeue -j {which}` or `sacct -j {which}`")
    })
}

/// Is task `t` in Slurm's array task string (`0-3`, `1,3,5-7`, `0-15:4`,
/// with a `%N` throttle, [`crate::slurm_json::task_ranges`])? `None`: a
/// spelling this does not read.
fn task_in(spec: &str, t: u32) -> Option<bool> {
    let ranges = crate::slurm_json::task_ranges(spec)?;
    (!ranges.is_empty()).then(|| ranges.iter().any(|&(lo, hi, step)| (lo..=hi).contains(&t) && (t - lo) % step == 0))
}

/// Where Slurm's scheduler considers this pending job
/// ([`queue::slurm_order`]: priority, then submit time, then job id; an
/// array task by its array's id, then its task id).
fn slurm_key(j: &QueueJob) -> SlurmKey {
    let task = j.array_task_id.filter(|_| j.array_job_id != 0).map(|t| (j.array_job_id, t));
    queue::slurm_order(&j.view, task)
}

/// Does Slurm consider this pending job when it schedules now (not held,
/// no dependency outstanding, its begin time reached)? The plugin's own
/// rule, [`queue::waiting`].
fn considered(j: &QueueJob, now: u64) -> bool {
    queue::waiting(&j.view, now)
}

fn same_partition(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.split(',').any(|p| b.split(',').any(|q| p == q)),
        _ => true,
    }
}

pub fn explain(config: &Arc<Config>, snapshot: &Snapshot, queue: &[QueueJob], nodes: &[NodeInfo], which: &str, now: u64) -> Result<Report, String> {
    let target = find(queue, which)?;
    // Classed as the plugin classes them, an exclusive pending job by the
    // GPUs of its partitions' nodes as sinfo shows them.
    let whole = PartitionGpus::new(nodes.iter().map(|n| (n.partitions.as_slice(), n.gpus)));
    let views: Vec<_> = queue
        .iter()
        .map(|q| {
            let mut v = q.view.clone();
            v.set_node_gpus(&whole);
            v
        })
        .collect();
    let jobs = classify(config, &views, &snapshot.runs, now, DEFAULT_PREEMPT_WINDOW_S);
    let ranking = rank(config, snapshot, &jobs, now);
    let index = queue.iter().position(|q| std::ptr::eq(q, target)).expect("found in the queue");
    let (_, job) = &jobs[index];
    let job_facts = job_facts(config, &ranking, target, job, ranking.walked.get(target.view.job_id).map(|p| p.priority.value), now);
    let account = job.account.to_string();
    let place = (target.view.state == RunState::Pending).then(|| team_place(&ranking, &jobs, index)).flatten();
    let team = ranking.ent.team(&account).map(|now| TeamFacts { account: account.clone(), now, place });
    let levels = levels(config, &ranking, &account);
    let pending = target.view.state == RunState::Pending;
    let ahead = pending.then(|| jobs_ahead(&ranking, queue, target, team.as_ref().and_then(|t| t.place.as_ref()), now));
    let mut blocks = if pending { blocks(target, nodes, now) } else { Vec::new() };
    if let (true, LongStart::Held { running, fair, short_team, short }) =
        (pending, long_start(job, &ranking.ent, 0.0, &config.priority, &config.contracts))
    {
        blocks.insert(0, Block::LongJob { running, fair, short_team: ranking.ent.name_at(short_team).to_string(), short });
    }
    let preemption = pending.then(|| {
        let running: Vec<&Job> = jobs.iter().zip(queue).filter(|(_, q)| q.view.state == RunState::Running).map(|((_, j), _)| j).collect();
        let free = nodes.iter().filter(|n| n.in_partition(target.view.partition.as_deref())).map(NodeInfo::free).sum();
        preemption(config, &ranking, job, &running, free, now)
    });
    let yields = (target.view.state == RunState::Running).then(|| {
        let waiting: Vec<&Job> = jobs.iter().filter(|(c, _)| *c == tally_engine::engine::Counted::Waiting).map(|(_, j)| j).collect();
        yields(config, &ranking, job, &waiting, now)
    });
    let outlook = ranking.fs.standing(&account).filter(|_| config.tree.contains(&account)).map(|s| Outlook {
        account: account.clone(),
        used_gpu_hours: s.used_gpu_hours,
        allocated_gpu_hours: s.allocated_gpu_hours,
        back: back_under(&snapshot.ledger, &account, s.allocated_gpu_hours, now),
    });
    let forecast = pending.then(|| forecast_start(config, snapshot, queue, &jobs, nodes, target, now));
    Ok(Report { now, job: job_facts, team, levels, ahead, blocks, preemption, yields, outlook, forecast })
}

/// How far the start estimate looks.
const FORECAST_HORIZON_S: u64 = 7 * DAY_S;
/// The duration of a job without a time limit, when the config's planner
/// gives none.
const DEFAULT_DURATION_S: u64 = HOUR_S;

/// The replay forward from now ([`tally_sim::forecast`]) over the jobs of
/// the target's partition that hold or wait for GPUs.
fn forecast_start(
    config: &Config,
    snapshot: &Snapshot,
    queue: &[QueueJob],
    jobs: &[(tally_engine::engine::Counted, Job)],
    nodes: &[NodeInfo],
    target: &QueueJob,
    now: u64,
) -> Result<ForecastFacts, String> {
    if !considered(target, now) {
        return Err(if target.view.priority == 0 {
            "held: no estimate until it is released".to_string()
        } else if target.view.begin_s > now {
            format!("not eligible before {}: no estimate", when(target.view.begin_s, now))
        } else {
            format!("{}: no estimate until Slurm considers it", target.reason)
        });
    }
    let partition = target.view.partition.as_deref();
    let mine: Vec<&NodeInfo> = nodes.iter().filter(|n| n.in_partition(partition) && n.usable()).collect();
    let gpus: u32 = mine.iter().map(|n| n.gpus).sum();
    let gpus_per_node = mine.iter().map(|n| n.gpus).max().unwrap_or(0);
    if gpus == 0 {
        return Err("its partition has no usable node with GPUs: no estimate".to_string());
    }
    let default_duration_s = config.planner.map_or(DEFAULT_DURATION_S, |p| p.rules.default_duration_s);
    let fjobs: Vec<ForecastJob> = queue
        .iter()
        .zip(jobs)
        .filter(|(q, _)| q.view.gpus > 0 && same_partition(q.view.partition.as_deref(), partition))
        // Running, or waiting and not held or behind a dependency (a later
        // begin time enters the queue then: `queue::queued`).
        .filter(|(q, _)| q.view.state == RunState::Running || queue::queued(&q.view))
        .map(|(q, (_, job))| ForecastJob {
            id: u64::from(q.view.job_id),
            account: job.account.to_string(),
            user: job.user.to_string(),
            gpus: q.view.gpus,
            submit_s: q.view.submit_s,
            eligible_s: q.view.begin_s,
            contract: job.contract,
            within_team: job.within_team,
            time_limit_s: q.view.time_limit_s,
            started_s: (q.view.state == RunState::Running && q.view.start_s > 0).then_some(q.view.start_s),
            gpu_type: q.view.gpu_type.as_deref().map(str::to_string),
        })
        .collect();
    let m =
        ForecastMoment { now, jobs: fjobs, ledger: snapshot.ledger.clone(), gpus, gpus_per_node, horizon_s: FORECAST_HORIZON_S, default_duration_s };
    let f = forecast(config, &m, u64::from(target.view.job_id)).map_err(|e| format!("the replay stopped: {e}"))?;
    Ok(ForecastFacts { estimate: f.estimate, horizon_s: FORECAST_HORIZON_S, default_duration_s, jobs: f.jobs, defaulted: f.defaulted.len() })
}

/// Job `index`'s place in its team's line ([`TeamPlace`]): the jobs the
/// walk counts ahead of it, by the allocator's inside order. `None` for an
/// unallocated job (it claims nothing of its team's rate).
fn team_place(ranking: &Ranking, jobs: &[(Counted, Job)], index: usize) -> Option<TeamPlace> {
    let (counted, job) = &jobs[index];
    if !job.is_allocated(&ranking.ent) {
        return None;
    }
    let rules = &ranking.config.priority;
    let waits = *counted == Counted::Waiting;
    let key = tally_allocator::inside_key(job, rules);
    let team: Vec<&Job> =
        jobs.iter().filter(|(c, j)| *c == Counted::Waiting && j.account == job.account && j.is_allocated(&ranking.ent)).map(|(_, j)| j).collect();
    // Not waiting: it queues behind all of them (`engine::priority_of_job`).
    let ahead: Vec<&&Job> = team.iter().filter(|j| !waits || (j.id != job.id && tally_allocator::inside_key(j, rules) < key)).collect();
    let id = u32::try_from(job.id).unwrap_or(u32::MAX);
    let walked = ranking.walked.get(id).filter(|_| waits);
    let gpus_ahead = match walked {
        Some(place) => place.ahead_gpus,
        None => ranking.order.waiting_gpus.get(&*job.account).copied().unwrap_or(0.0),
    };
    let need = match walked {
        Some(place) => place.priority.need,
        None => tally_engine::engine::priority_of_job(ranking, job, None).need,
    };
    Some(TeamPlace { jobs_ahead: ahead.len(), gpus_ahead, place: ahead.len() + 1, team_jobs: team.len() + usize::from(!waits), waits, need })
}

fn job_facts(config: &Config, ranking: &Ranking, q: &QueueJob, job: &Job, walked: Option<u32>, now: u64) -> JobFacts {
    let v = &q.view;
    let contract = config.contracts.resolve(v.comment.as_deref()).map_err(|e| e.to_string());
    let allocated = job.is_allocated(&ranking.ent);
    let unallocated_because = (!allocated).then(|| {
        if let Err(e) = &contract {
            format!("its contract is refused ({e}); it runs unallocated")
        } else if !job.contract.is_allocated() {
            "contract 0: no contract asked (unallocated work: never charged, preemptible at any time)".to_string()
        } else if job.account.is_empty() {
            format!("no account: user {} has no Slurm account and is not in [users]", v.user)
        } else if !config.tree.contains(&job.account) {
            format!("account {} is not in the tree of {}", job.account, config.source)
        } else {
            format!("account {} is not funded (no budget of its own)", job.account)
        }
    });
    // Slurm's value against the walk's, the plan bit aside (it is the planner thread's).
    let plain = |p: u32| p & !PLAN.put(1);
    let computed = walked.filter(|&w| v.priority != 0 && plain(w) != plain(v.priority));
    JobFacts {
        name: q.name(),
        id: v.job_id,
        user: v.user.to_string(),
        account: job.account.to_string(),
        gpus: v.gpus,
        nodes: q.nodes_asked,
        partition: v.partition.as_deref().map(str::to_string),
        state: q.state.clone(),
        reason: q.reason.clone(),
        comment: v.comment.clone(),
        contract,
        allocated,
        unallocated_because,
        priority: v.priority,
        decoded: decode(v.priority),
        computed,
        time_limit_s: v.time_limit_s,
        submit_s: v.submit_s,
        begin_s: v.begin_s,
        start_s: v.start_s,
        node_list: q.node_list.clone(),
        contract_left_s: job.contract_left_s(now),
    }
}

fn levels(config: &Config, ranking: &Ranking, account: &str) -> Vec<Level> {
    let Some(id) = config.tree.id(account) else { return Vec::new() };
    let path = config.tree.path(id);
    let mut out = Vec::new();
    for (k, name) in path.iter().enumerate().rev() {
        let Some(s) = ranking.fs.standing(name) else { continue };
        let own = k + 1 == path.len();
        out.push(Level {
            account: name.to_string(),
            own,
            rank: s.rank,
            used_gpu_hours: if own { s.used_gpu_hours } else { s.subtree_used_gpu_hours },
            allocated_gpu_hours: if own { s.allocated_gpu_hours } else { s.subtree_allocated_gpu_hours },
        });
    }
    out
}

fn jobs_ahead(ranking: &Ranking, queue: &[QueueJob], target: &QueueJob, mine: Option<&TeamPlace>, now: u64) -> Ahead {
    let key = slurm_key(target);
    let mut before: Vec<&QueueJob> = queue
        .iter()
        .filter(|q| q.view.job_id != target.view.job_id && considered(q, now))
        .filter(|q| same_partition(q.view.partition.as_deref(), target.view.partition.as_deref()))
        .filter(|q| slurm_key(q) < key)
        .collect();
    before.sort_by_key(|q| slurm_key(q));
    let gpus = before.iter().map(|q| u64::from(q.view.gpus)).sum();
    let mine_account = ranking.config.account_for(target.view.account.as_deref(), &target.view.user).unwrap_or("");
    let first = before
        .iter()
        .take(AHEAD_LISTED)
        .map(|q| {
            let account = ranking.config.account_for(q.view.account.as_deref(), &q.view.user).unwrap_or("").to_string();
            let because = precedence(&decode(q.view.priority), &decode(target.view.priority));
            let team_gpus_ahead = (account != mine_account && ranking.ent.team(&account).is_some()).then(|| walk_ahead(ranking, q, &account));
            let words = why_ahead(because, ranking, &account, mine_account, q, target, mine);
            AheadJob {
                name: q.name(),
                user: q.view.user.to_string(),
                account,
                gpus: q.view.gpus,
                priority: q.view.priority,
                because,
                team_gpus_ahead,
                words,
            }
        })
        .collect();
    Ahead { count: before.len(), gpus, first }
}

/// The GPUs of its team's allocated jobs the walk put ahead of `q` (all of
/// the team's waiting ones when the walk did not place it).
fn walk_ahead(ranking: &Ranking, q: &QueueJob, account: &str) -> f64 {
    ranking.walked.ahead(q.view.job_id).unwrap_or_else(|| ranking.order.waiting_gpus.get(account).copied().unwrap_or(0.0))
}

fn blocks(q: &QueueJob, nodes: &[NodeInfo], now: u64) -> Vec<Block> {
    let v = &q.view;
    let reason = q.reason.as_str();
    let mut out = Vec::new();
    if v.priority == 0 || reason.starts_with("JobHeld") {
        out.push(Block::Held(if reason.is_empty() { "held (priority 0)".to_string() } else { reason.to_string() }));
    }
    if !q.dependency.is_empty() || reason.starts_with("Dependency") {
        out.push(Block::Dependency(if q.dependency.is_empty() { reason.to_string() } else { q.dependency.clone() }));
    }
    if v.begin_s > now || reason == "BeginTime" {
        out.push(Block::BeginTime(v.begin_s));
    }
    if reason.starts_with("Partition") {
        out.push(Block::Partition(reason.to_string()));
    }
    if !q.reservation.is_empty() || reason.contains("Reserv") {
        out.push(Block::Reservation(if q.reservation.is_empty() { reason.to_string() } else { q.reservation.clone() }));
    }
    let mine: Vec<&NodeInfo> = nodes.iter().filter(|n| n.in_partition(v.partition.as_deref())).collect();
    let usable: Vec<&&NodeInfo> = mine.iter().filter(|n| n.usable()).collect();
    let partition_gpus: u32 = usable.iter().map(|n| n.gpus).sum();
    let free: u32 = mine.iter().map(|n| n.free()).sum();
    let asked = v.gpus;
    if asked > 0 {
        let nodes_asked = q.nodes_asked.max(1);
        if asked > partition_gpus {
            out.push(Block::NeverFits { asked, partition_gpus });
        } else if free < asked {
            out.push(Block::NoFreeGpus { free, asked });
        } else if nodes_asked == 1 {
            let largest = mine.iter().map(|n| n.free()).max().unwrap_or(0);
            if largest < asked {
                out.push(Block::Fragmented { free, largest, asked });
            } else {
                out.push(Block::Fits { free });
            }
        } else {
            let per_node = asked.div_ceil(nodes_asked);
            let have = mine.iter().filter(|n| n.free() >= per_node).count() as u32;
            if have < nodes_asked {
                out.push(Block::TooFewNodes { nodes: nodes_asked, per_node, have });
            } else {
                out.push(Block::Fits { free });
            }
        }
    }
    let known = ["Priority", "Resources", "None", ""];
    let said = out.iter().any(|b| {
        !matches!(b, Block::NoFreeGpus { .. } | Block::Fragmented { .. } | Block::TooFewNodes { .. } | Block::Fits { .. } | Block::NeverFits { .. })
    });
    if !said && !known.contains(&reason) {
        out.push(Block::Slurm(reason.to_string()));
    }
    out
}

fn preemption(config: &Config, ranking: &Ranking, job: &Job, running: &[&Job], free: u32, now: u64) -> Preemption {
    let m = Moment { ent: &ranking.ent, rules: &config.priority, contracts: &config.contracts, now };
    let victim = |v: &Job, why: String| Victim { id: v.id, user: v.user.to_string(), account: v.account.to_string(), gpus: v.gpus, why };
    if !job.is_allocated(&ranking.ent) {
        return Preemption {
            refused: Some(refusal_words(&Refusal::PreemptorUnallocated, now)),
            candidates: Vec::new(),
            candidate_gpus: 0,
            free_gpus: free,
            protected: Vec::new(),
            protected_count: 0,
            next: None,
        };
    }
    let eligible = eligible_victims(job, running.iter().copied(), &m);
    let candidates: Vec<Victim> = eligible
        .iter()
        .map(|v| {
            let why = match may_preempt(job, v, &m) {
                Decision::Yes(tally_allocator::VictimClass::Unallocated) => "unallocated".to_string(),
                Decision::Yes(tally_allocator::VictimClass::PastContractResumable) => "past its contract, resumable".to_string(),
                Decision::Yes(tally_allocator::VictimClass::PastContract) => "past its contract (loses its work)".to_string(),
                Decision::No(r) => refusal_words(&r, now),
            };
            victim(v, why)
        })
        .collect();
    let candidate_gpus = eligible.iter().map(|v| v.gpus).sum();
    let mut protected: Vec<Victim> = running
        .iter()
        .filter(|v| !eligible.iter().any(|e| e.id == v.id))
        .map(|v| {
            let why = match may_preempt(job, v, &m) {
                Decision::No(r) => refusal_words(&r, now),
                // Eligible alone, not with the candidates before it taken.
                Decision::Yes(_) => "its side would stand better than yours once the candidates before it are gone".to_string(),
            };
            victim(v, why)
        })
        .collect();
    let protected_count = protected.len();
    protected.truncate(PROTECTED_LISTED);
    let next = (candidate_gpus + free < job.gpus).then(|| next_chance(config, ranking, job, running, free, now)).flatten();
    Preemption { refused: None, candidates, candidate_gpus, free_gpus: free, protected, protected_count, next }
}

/// The first contract end (of up to [`NEXT_CHANCES`]) after which the
/// victims `job` may take, with the `free` GPUs, add up to what it asks,
/// the rule asked at that moment.
fn next_chance(config: &Config, ranking: &Ranking, job: &Job, running: &[&Job], free: u32, now: u64) -> Option<NextChance> {
    let m = Moment { ent: &ranking.ent, rules: &config.priority, contracts: &config.contracts, now };
    let mut ends: Vec<u64> = running.iter().map(|v| v.contract_left_s(now)).filter(|&l| l > 0).map(|l| now + l).collect();
    ends.sort_unstable();
    ends.dedup();
    ends.into_iter().take(NEXT_CHANCES).find_map(|at| {
        let later = Moment { now: at, ..m };
        let victims = eligible_victims(job, running.iter().copied(), &later);
        let gpus: u32 = victims.iter().map(|v| v.gpus).sum();
        (gpus + free >= job.gpus).then(|| NextChance { at, victims: victims.iter().map(|v| v.id).collect() })
    })
}

/// How many contract ends [`next_chance`] tries.
const NEXT_CHANCES: usize = 256;

/// What running `job` would yield to: the waiting allocated jobs that may
/// preempt it once its contract is over, by the rule at that moment.
fn yields(config: &Config, ranking: &Ranking, job: &Job, waiting: &[&Job], now: u64) -> Yields {
    let from = now + job.contract_left_s(now);
    let m = Moment { ent: &ranking.ent, rules: &config.priority, contracts: &config.contracts, now: from };
    let mut to = Vec::new();
    let mut refusals = std::collections::BTreeSet::new();
    for p in waiting.iter().filter(|p| p.is_allocated(&ranking.ent)) {
        match may_preempt(p, job, &m) {
            Decision::Yes(class) => {
                let why = if class == tally_allocator::VictimClass::Unallocated {
                    "it is unallocated: any allocated job takes it".to_string()
                } else if p.account == job.account {
                    "a debug or quick job of its own team".to_string()
                } else if config.priority.is_debug(p) {
                    "a debug job of a team that keeps no higher a share of its rate (time-slicing), or one owed GPUs".to_string()
                } else {
                    "its team is owed GPUs (restoration)".to_string()
                };
                to.push(Victim { id: p.id, user: p.user.to_string(), account: p.account.to_string(), gpus: p.gpus, why });
            }
            Decision::No(r @ (Refusal::LongJob { .. } | Refusal::NotResumable { .. })) => {
                refusals.insert(refusal_words(&r, from));
            }
            Decision::No(_) => {}
        }
    }
    let count = to.len();
    to.truncate(PROTECTED_LISTED);
    let note = (count == 0 && refusals.len() == 1).then(|| refusals.into_iter().next()).flatten();
    Yields { from, to, count, note, loses_gpu_h: tally_allocator::lost_gpu_seconds(job, from) / 3600.0 }
}

#[cfg(test)]
mod tests;
