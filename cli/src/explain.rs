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

use crate::live;
use crate::slurm_json::{self, NodeInfo, QueueJob};
use crate::table::{Column, Table};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use tally_allocator::outlook::{back_under, BackUnder};
use tally_allocator::preempt::{eligible_victims, may_preempt, Decision, Moment, Refusal};
use tally_allocator::priority::{decode, precedence, Decoded, Precedence, NEED_FAIR, NEED_LANE, NEED_NONE, NEED_OWED, PLAN};
use tally_allocator::{format_duration, Contract, Job, ReclaimRefusal, Snapshot, TeamNow};
use tally_config::Config;
use tally_engine::engine::queue::{self, SlurmKey};
use tally_engine::engine::{classify, rank, Counted, Ranking, DEFAULT_PREEMPT_WINDOW_S};
use tally_engine::view::{Names, RunState};
use tally_sim::forecast::{forecast, Estimate, ForecastJob, Moment as ForecastMoment};

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
    /// Config file (default: $TALLY_CONFIG or /etc/slurm/tally.toml).
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
    let queue = slurm_json::parse_squeue(&slurm_output("squeue", args.squeue_json)?, &mut names)?;
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
        return crate::read_file(&path, &format!("saved `{tool} --json` output"), MAX_SLURM_JSON_BYTES);
    }
    run_json(&[tool, "--json"])
}

/// The nodes one record each, as `sinfo --json` lists them up to Slurm
/// 22.05 (a `nodes` list). Later releases group nodes there (a `sinfo`
/// list); `scontrol show nodes --json` then lists them one by one, with
/// the same fields.
fn nodes_output(saved: Option<PathBuf>) -> Result<String, String> {
    let text = slurm_output("sinfo", saved)?;
    let grouped = serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v.get("nodes").is_none() && v.get("sinfo").is_some());
    if grouped {
        run_json(&["scontrol", "show", "nodes", "--json"])
    } else {
        Ok(text)
    }
}

fn run_json(cmd: &[&str]) -> Result<String, String> {
    let (tool, line) = (cmd[0], cmd.join(" "));
    let out = Command::new(tool).args(&cmd[1..]).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("{tool} not found on PATH: run tally explain where Slurm's client commands are installed (a login node)")
        } else {
            format!("{line}: cannot run: {e}")
        }
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{line} failed ({}): {} (is slurmctld up, and is this Slurm 22.05 or later with the serializer/json plugin?)",
            out.status,
            err.trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("{line}: output is not UTF-8"))
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
    /// waiting job alike (a long job that cannot checkpoint, unallocated…).
    pub note: Option<String>,
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
    let bad = || format!("{which:?} is not a job id: give a number (`17`) or an array task (`24_2`)");
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
/// with a `%N` throttle)? `None`: a spelling this does not read.
fn task_in(spec: &str, t: u32) -> Option<bool> {
    let spec = spec.split('%').next()?.trim();
    if spec.is_empty() {
        return None;
    }
    let mut found = false;
    for part in spec.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.trim().parse::<u32>().ok().filter(|&s| s > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (lo.trim().parse::<u32>().ok()?, hi.trim().parse::<u32>().ok()?),
            None => {
                let n = range.trim().parse::<u32>().ok()?;
                (n, n)
            }
        };
        found |= (lo..=hi).contains(&t) && (t - lo) % step == 0;
    }
    Some(found)
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
    let views: Vec<_> = queue.iter().map(|q| q.view.clone()).collect();
    let jobs = classify(config, &views, &snapshot.runs, now, DEFAULT_PREEMPT_WINDOW_S);
    let (ranking, walked) = rank(config, snapshot, &jobs, now);
    let index = queue.iter().position(|q| std::ptr::eq(q, target)).expect("found in the queue");
    let (_, job) = &jobs[index];
    let job_facts = job_facts(config, &ranking, target, job, walked[index].map(|p| p.value), now);
    let account = job.account.to_string();
    let place = (target.view.state == RunState::Pending).then(|| team_place(&ranking, &jobs, index)).flatten();
    let team = ranking.ent.team(&account).map(|now| TeamFacts { account: account.clone(), now, place });
    let levels = levels(config, &ranking, &account);
    let pending = target.view.state == RunState::Pending;
    let ahead = pending.then(|| jobs_ahead(&ranking, queue, target, team.as_ref().and_then(|t| t.place.as_ref()), now));
    let blocks = if pending { blocks(target, nodes, now) } else { Vec::new() };
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
const FORECAST_HORIZON_S: u64 = 7 * 86_400;
/// The duration of a job without a time limit, when the config's planner
/// gives none.
const DEFAULT_DURATION_S: u64 = 3600;

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
    let gpus_ahead = match ranking.ahead.get(id).filter(|_| waits) {
        Some(walked) => walked,
        None => ranking.order.waiting_gpus.get(&*job.account).copied().unwrap_or(0.0),
    };
    let need = tally_engine::engine::priority_of_job(ranking, job, None).need;
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
            let words = words(because, ranking, &account, mine_account, q, target, mine);
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

fn need_words(need: u32) -> &'static str {
    match need {
        NEED_LANE => "in the debug lane",
        NEED_OWED => "owed GPUs now",
        NEED_FAIR => "below its fair share now",
        _ => "neither owed GPUs nor below its fair share",
    }
}

/// The team's order, in words ([`tally_allocator::inside_order`]).
const TEAM_ORDER: &str = "the team's order (nice, then quick jobs, then submit time, then job id)";

/// GPUs in words: whole ones without decimals (`3`), else one (`2.6`).
fn gpus(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`, …
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The GPUs of its team's allocated jobs the walk put ahead of `q` (all of
/// the team's waiting ones when the walk did not place it).
fn walk_ahead(ranking: &Ranking, q: &QueueJob, account: &str) -> f64 {
    ranking.ahead.get(q.view.job_id).unwrap_or_else(|| ranking.order.waiting_gpus.get(account).copied().unwrap_or(0.0))
}

/// What the team's need is measured against: its rate (owed GPUs now) or
/// its water-filled fair share (below its fair share now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Rate,
    Fair,
}

impl Limit {
    fn of(need: u32) -> Limit {
        if need == NEED_FAIR {
            Limit::Fair
        } else {
            Limit::Rate
        }
    }

    fn gpus(self, t: &TeamNow) -> f64 {
        match self {
            Limit::Rate => t.rate,
            Limit::Fair => t.fair,
        }
    }

    /// GPUs the team runs below it.
    fn short(self, t: &TeamNow) -> f64 {
        (self.gpus(t) - t.running).max(0.0)
    }

    /// `rate 2.6` or `fair share 4.0, rate 2.6`.
    fn text(self, t: &TeamNow) -> String {
        match self {
            Limit::Rate => format!("rate {:.1}", t.rate),
            Limit::Fair => format!("fair share {:.1}, rate {:.1}", t.fair, t.rate),
        }
    }

    /// What the team is short of, in words.
    fn short_of(self) -> &'static str {
        match self {
            Limit::Rate => "short",
            Limit::Fair => "below its fair share by",
        }
    }
}

/// Why the job ahead (`other`, of `account`) is as needy as its priority
/// says: its team is short of `limit`, and its team's jobs ahead of it ask
/// for fewer GPUs than that. `None` when the queue as it stands now says
/// otherwise (Slurm's priorities are the last re-ranking's).
fn other_claim(ranking: &Ranking, account: &str, other: &QueueJob, limit: Limit) -> Option<String> {
    let t = ranking.ent.team(account)?;
    let ahead = walk_ahead(ranking, other, account);
    let short = limit.short(&t);
    (ahead < short).then(|| {
        let line = if ahead <= 0.0 {
            "it is first in its team's line for them".to_string()
        } else {
            format!("its team's jobs ahead of it in {TEAM_ORDER} ask for only {} of them", gpus(ahead))
        };
        format!("its team is {} {} GPUs (runs {}, {}) and {line}", limit.short_of(), gpus(short), gpus(t.running), limit.text(&t))
    })
}

/// Why the job explained is not as needy at `limit`: its team is not short
/// of it, or the team's jobs ahead of it in the team's order claim what it
/// is short first. `None` when the queue as it stands now says otherwise.
fn own_shortfall(t: &TeamNow, place: Option<&TeamPlace>, limit: Limit) -> Option<String> {
    let short = limit.short(t);
    if short <= 0.0 {
        let not = match limit {
            Limit::Rate => "not short",
            Limit::Fair => "not below its fair share",
        };
        return Some(format!("your team is {not} (runs {}, {})", gpus(t.running), limit.text(t)));
    }
    let p = place?;
    (p.gpus_ahead >= short).then(|| {
        let what = if p.waits { "ahead of this one" } else { "that this one, once it waits, queues behind" };
        format!(
            "your team is {} {} GPUs too (runs {}, {}), but its {} {what} in {TEAM_ORDER} ask for {} GPUs and claim them first: this job is {} in its team",
            limit.short_of(),
            gpus(short),
            gpus(t.running),
            limit.text(t),
            plural(p.jobs_ahead, "waiting job", "waiting jobs"),
            gpus(p.gpus_ahead),
            ordinal(p.place)
        )
    })
}

/// Where a job's team would stand when it starts, as the level measures it
/// (`4 running + 2 ahead of it = 6 of its rate 8.0`).
fn standing(t: &TeamNow, ahead: f64, limit: Limit, whose: &str) -> String {
    let at = match limit {
        Limit::Rate => format!("its rate {:.1}", t.rate),
        Limit::Fair => format!("its fair share {:.1}", t.fair),
    };
    format!("{} running + {} ahead of {whose} = {} of {at}", gpus(t.running), gpus(ahead), gpus(t.running + ahead))
}

/// Why `other` is ahead of the job, in words. `mine`: the job's place in
/// its team's line.
fn words(
    because: Option<Precedence>,
    ranking: &Ranking,
    other_account: &str,
    mine: &str,
    other: &QueueJob,
    target: &QueueJob,
    place: Option<&TeamPlace>,
) -> String {
    let same = other_account == mine;
    let earlier = if other.view.submit_s < target.view.submit_s {
        format!("submitted {} earlier", format_duration(target.view.submit_s - other.view.submit_s))
    } else {
        "lower job id".to_string()
    };
    let stale = |first: u32, second: u32| {
        format!(
            "at the last re-ranking its team was {} and yours was {} (Slurm holds the priorities Tally gave then; Tally re-ranks every calc_period and the queue has changed since)",
            need_words(first).trim_end_matches(" now"),
            if second == NEED_NONE { "not".to_string() } else { format!("only {}", need_words(second).trim_end_matches(" now")) }
        )
    };
    match because {
        None => "a higher priority set outside Tally's layout".to_string(),
        Some(Precedence::Tier) => "allocated tier vs unallocated (yours)".to_string(),
        Some(Precedence::Planned) => "planned to start now (the planner's committed step)".to_string(),
        Some(Precedence::Need { .. } | Precedence::Level { .. }) if same => {
            format!("same team, earlier in {TEAM_ORDER}: it claims the team's GPUs before yours")
        }
        Some(Precedence::Need { first: NEED_LANE, .. }) => {
            "a debug job in the debug lane (allocated debug jobs go before every other allocated job)".to_string()
        }
        Some(Precedence::Need { first, second }) => {
            let Some(mine_team) = ranking.ent.team(mine) else {
                return format!("its team is {} and yours is not in the tree", need_words(first));
            };
            let theirs = other_claim(ranking, other_account, other, Limit::of(first));
            // Yours falls short of what makes it as needy: the rate when it
            // is below its fair share only, else the level it lacks.
            let yours = own_shortfall(&mine_team, place, Limit::of(first));
            let head = if second == NEED_NONE {
                format!("its team is {} and yours is not", need_words(first))
            } else {
                format!("its team is {} and yours only {}", need_words(first), need_words(second))
            };
            match (theirs, yours) {
                (Some(theirs), Some(yours)) => format!("{head}: {theirs}; {yours}"),
                _ => stale(first, second),
            }
        }
        Some(Precedence::Level { first, second }) => {
            let need = decode(other.view.priority).need;
            let limit = Limit::of(need);
            match (ranking.ent.team(other_account), ranking.ent.team(mine), place) {
                (Some(t), Some(m), Some(p)) => format!(
                    "both teams are {}, its team further below when it starts (level {first} vs {second}: its team's GPUs then {}; yours {})",
                    need_words(need),
                    standing(&t, walk_ahead(ranking, other, other_account), limit, "it"),
                    standing(&m, p.gpus_ahead, limit, "yours"),
                ),
                _ => format!("both teams are {}, its team further below when it starts (level {first} vs {second})", need_words(need)),
            }
        }
        Some(Precedence::Team { .. }) => {
            let rank = |a: &str| ranking.fs.standing(a).map_or("-".to_string(), |s| s.rank.to_string());
            format!("higher team rank over 7 days ({} rank {} vs {mine} rank {})", other_account, rank(other_account), rank(mine))
        }
        Some(Precedence::Nice { first, second }) => {
            format!("same team standing, nicer (nice {} vs {})", -first, -second)
        }
        Some(Precedence::Quick) => "quick (a short time limit goes first among equals)".to_string(),
        Some(Precedence::Equal) if same => format!("same team, equal priority, {earlier}"),
        Some(Precedence::Equal) => format!("equal priority, {earlier}"),
    }
}

/// The job explained in its team's line, in words: its place, what the
/// team's jobs ahead of it ask for, and what that leaves it now.
fn place_words(t: &TeamNow, p: &TeamPlace) -> String {
    let head = match (p.waits, p.team_jobs, p.jobs_ahead) {
        (true, 1, _) => format!("the team's only waiting job, first in {TEAM_ORDER}"),
        (true, n, _) => format!("{} of the team's {n} waiting jobs in {TEAM_ORDER}", ordinal(p.place)),
        (false, _, 0) => "not waiting now (held, a dependency or a later begin time): once it waits, it is first in the team's line".to_string(),
        (false, _, k) => format!(
            "not waiting now (held, a dependency or a later begin time): once it waits, it queues behind the team's {} ({} GPUs)",
            plural(k, "waiting job", "waiting jobs"),
            gpus(p.gpus_ahead)
        ),
    };
    let claim = if p.jobs_ahead == 1 { "claims" } else { "claim" };
    let ahead = match p.jobs_ahead {
        0 => "no job of the team is ahead of it".to_string(),
        1 => format!("the 1 job ahead of it asks for {} GPUs", gpus(p.gpus_ahead)),
        k => format!("the {k} jobs ahead of it ask for {} GPUs", gpus(p.gpus_ahead)),
    };
    let (short, fair) = (Limit::Rate.short(t), Limit::Fair.short(t));
    let verdict = match p.need {
        NEED_LANE => "a debug job: the debug lane puts it before every other allocated job".to_string(),
        NEED_OWED => format!("{ahead}, less than the {} GPUs the team is short: it is owed GPUs now", gpus(short)),
        NEED_FAIR if short > 0.0 => format!(
            "{ahead} and {claim} the {} GPUs the team is short first, but less than the {} it is below its fair share: it is below its fair share now",
            gpus(short),
            gpus(fair)
        ),
        NEED_FAIR => format!(
            "the team is not short (runs {}, rate {:.1}); {ahead}, less than the {} it is below its fair share: it is below its fair share now",
            gpus(t.running),
            t.rate,
            gpus(fair)
        ),
        _ if short > 0.0 => format!("{ahead} and {claim} the {} GPUs the team is short first: it is not owed GPUs now", gpus(short)),
        _ => format!("the team is not short (runs {}, rate {:.1}): no job of it is owed GPUs now", gpus(t.running), t.rate),
    };
    format!("{head}; {verdict}")
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

pub(crate) fn refusal_words(r: &Refusal, config: &Config, now: u64) -> String {
    match r {
        Refusal::SameJob => "the same job".to_string(),
        Refusal::PreemptorUnallocated => "your job is unallocated: unallocated jobs never preempt".to_string(),
        Refusal::VictimNotRunning => "not running".to_string(),
        Refusal::InsideContract(left) => format!("contract until {} ({} left)", utc(now + left), format_duration(*left)),
        Refusal::RequeuesSpent(n) => {
            let max = config.contracts.max_requeues.map_or("no limit".to_string(), |m| m.to_string());
            format!("requeued {n} times already (max_requeues {max}) and not resumable: protected to its end")
        }
        Refusal::NotResumable { ran_s, max_s } => format!(
            "cannot checkpoint and has run {} of the {} contract maximum: a team owed GPUs does not throw its work away before then",
            format_duration(*ran_s),
            format_duration(*max_s)
        ),
        Refusal::LongJob => "cannot checkpoint and may run longer than the contract maximum: it is never time-sliced".to_string(),
        Refusal::TeamOrder => "same team, and it comes before your job in the team's order (priority, then debug and quick jobs)".to_string(),
        Refusal::Reclaim(ReclaimRefusal::SameTeam) => "same team".to_string(),
        Refusal::Reclaim(ReclaimRefusal::Unknown) => "an account outside the tree".to_string(),
        Refusal::Reclaim(ReclaimRefusal::PreemptorNotShort { running, rate }) => {
            format!("your side of the tree already runs {running:.0} GPUs, at or above its rate {rate:.1}")
        }
        Refusal::Reclaim(ReclaimRefusal::VictimBelowRate { account, after, rate }) => {
            format!("its team would fall below its rate ({account} would run {after:.0} of {rate:.1} GPUs)")
        }
        Refusal::Reclaim(ReclaimRefusal::ShareNotLower { preemptor_after, victim_after }) => {
            format!("your side would end with a higher share than its side keeps ({preemptor_after:.2} vs {victim_after:.2} of the rate)")
        }
        Refusal::Reclaim(ReclaimRefusal::Outranked { account, victim_after, preemptor_after }) => {
            format!("without it, {account} would keep a smaller share of its rate than your side with your job ({victim_after:.2} vs {preemptor_after:.2})")
        }
    }
}

fn preemption(config: &Config, ranking: &Ranking, job: &Job, running: &[&Job], free: u32, now: u64) -> Preemption {
    let m = Moment { ent: &ranking.ent, rules: &config.priority, contracts: &config.contracts, now };
    let victim = |v: &Job, why: String| Victim { id: v.id, user: v.user.to_string(), account: v.account.to_string(), gpus: v.gpus, why };
    if !job.is_allocated(&ranking.ent) {
        return Preemption {
            refused: Some(refusal_words(&Refusal::PreemptorUnallocated, config, now)),
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
                Decision::No(r) => refusal_words(&r, config, now),
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
                Decision::No(r) => refusal_words(&r, config, now),
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
            Decision::No(r @ (Refusal::LongJob | Refusal::NotResumable { .. } | Refusal::RequeuesSpent(_))) => {
                refusals.insert(refusal_words(&r, config, from));
            }
            Decision::No(_) => {}
        }
    }
    let count = to.len();
    to.truncate(PROTECTED_LISTED);
    let note = (count == 0 && refusals.len() == 1).then(|| refusals.into_iter().next()).flatten();
    Yields { from, to, count, note }
}

// ---- words and formats -------------------------------------------------------------------------

/// `2026-12-03 14:40 UTC (in 1h20m)`.
fn when(t: u64, now: u64) -> String {
    let rel = if t >= now { format!("in {}", format_duration(t - now)) } else { format!("{} ago", format_duration(now - t)) };
    format!("{} ({rel})", utc(t))
}

/// `YYYY-MM-DD HH:MM UTC`.
fn utc(t: u64) -> String {
    let iso = tally_sim::trace::utc_iso(t);
    format!("{} {} UTC", &iso[..10], &iso[11..16])
}

fn need_name(need: u32) -> &'static str {
    match need {
        NEED_LANE => "debug lane",
        NEED_OWED => "owed now",
        NEED_FAIR => "below fair share",
        _ => "none",
    }
}

fn contract_text(c: &Result<Contract, String>) -> String {
    match c {
        Ok(c) if c.is_allocated() => c.canonical(),
        Ok(_) => "contract=0 (unallocated)".to_string(),
        Err(e) => format!("refused: {e}"),
    }
}

fn block_text(b: &Block, now: u64) -> String {
    match b {
        Block::Held(r) => format!("held ({r}): `scontrol release` by its owner (or an admin for JobHeldAdmin)"),
        Block::Dependency(d) => format!("waits for a dependency: {d}"),
        Block::BeginTime(t) => format!("not eligible before its begin time {}", when(*t, now)),
        Block::Partition(r) => format!("its partition does not take jobs now ({r})"),
        Block::Reservation(r) => format!("a reservation: {r}"),
        Block::NoFreeGpus { free, asked } => format!("no free GPUs: {free} free in its partition, it asks for {asked}"),
        Block::Fragmented { free, largest, asked } => {
            format!("fragmentation: {free} GPUs free in total but at most {largest} on one node, and it needs {asked} on one node")
        }
        Block::TooFewNodes { nodes, per_node, have } => {
            format!("needs {nodes} nodes with {per_node} free GPUs each; {have} have them now")
        }
        Block::NeverFits { asked, partition_gpus } => {
            format!("it asks for {asked} GPUs and its partition's usable nodes have {partition_gpus}: it cannot start until nodes come back")
        }
        Block::Fits { free } => {
            format!("{free} GPUs are free where it fits: it starts at Slurm's next scheduling pass unless a job ahead takes them")
        }
        Block::Slurm(r) => format!("Slurm's reason: {r}"),
    }
}

impl Report {
    pub fn text(&self) -> String {
        let j = &self.job;
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "Job {}  {}  user {}  account {}  {} GPUs{}  partition {}",
            j.name,
            j.state,
            j.user,
            if j.account.is_empty() { "-" } else { &j.account },
            j.gpus,
            if j.nodes > 1 { format!(" on {} nodes", j.nodes) } else { String::new() },
            j.partition.as_deref().unwrap_or("-")
        ));
        if j.state == "PENDING" {
            line(format!("  Slurm's reason: {}; submitted {}", j.reason, when(j.submit_s, self.now)));
        } else if j.start_s > 0 {
            line(format!("  running since {} on {}", when(j.start_s, self.now), j.node_list));
        }
        line(format!(
            "  contract: {}   time limit: {}",
            contract_text(&j.contract),
            j.time_limit_s.map_or("none (UNLIMITED)".to_string(), format_duration)
        ));
        if j.contract_left_s > 0 {
            line(format!("  protected by its contract until {}", when(self.now + j.contract_left_s, self.now)));
        }
        match &j.unallocated_because {
            None => line("  tier: allocated (charged to its account, ordered before all unallocated work)".to_string()),
            Some(why) => line(format!("  tier: unallocated: {why}")),
        }
        let d = &j.decoded;
        if j.priority == 0 {
            line("  priority: 0 (held)".to_string());
        } else {
            line(format!(
                "  priority {}: tier {}, plan {}, need {} ({}), level {}, team {} (7-day rank {}), nice {}, quick {}",
                j.priority,
                u8::from(d.allocated),
                u8::from(d.planned),
                d.need,
                need_name(d.need),
                d.level,
                d.team,
                1023 - d.team,
                -d.within_team,
                if d.quick { "yes" } else { "no" }
            ));
        }
        if let Some(c) = j.computed {
            line(format!("  (Tally computes {c} for it now; Slurm shows the last re-ranking's value, or an admin set it)"));
        }

        line(String::new());
        match &self.team {
            Some(t) => {
                let n = &t.now;
                line(format!("Team {} now", t.account));
                line(format!(
                    "  rate {:.1} GPUs, running {:.0}, waiting {:.0}, owed {:.1}, short {:.1}, fair share {:.1}",
                    n.rate,
                    n.running,
                    n.demand - n.running,
                    n.owed,
                    n.short(),
                    n.fair
                ));
                if let Some(p) = &t.place {
                    line(format!("  this job: {}", place_words(n, p)));
                }
            }
            None => line(format!("Team {}: not in the tree (its jobs run unallocated)", if j.account.is_empty() { "-" } else { &j.account })),
        }
        if !self.levels.is_empty() {
            let mut t = Table::new([Column::left(16), Column::right(10), Column::right(10), Column::right(10), Column::right(5)]).indent("  ");
            t.row(["7-day window", "UsedGPUh", "AllocGPUh", "Used/Alloc", "Rank"]);
            for l in &self.levels {
                let ratio = if l.allocated_gpu_hours > 0.0 { format!("{:.3}", l.used_gpu_hours / l.allocated_gpu_hours) } else { "-".to_string() };
                let name = if l.own { l.account.clone() } else { format!("{} (tree)", l.account) };
                // The root's own part holds no work: its rank says nothing.
                let rank = if l.account == tally_allocator::ROOT { "-".to_string() } else { l.rank.to_string() };
                t.row([name, format!("{:.1}", l.used_gpu_hours), format!("{:.1}", l.allocated_gpu_hours), ratio, rank]);
            }
            out.push_str(&t.to_string());
        }
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        if let Some(o) = &self.outlook {
            match o.back {
                BackUnder::Already => line(format!(
                    "  {} is within its allocation over the window ({:.1} of {:.1} GPU-hours)",
                    o.account, o.used_gpu_hours, o.allocated_gpu_hours
                )),
                BackUnder::At(t) => line(format!(
                    "  {} is over its allocation ({:.1} of {:.1} GPU-hours); if it runs nothing more, it is back under at {}",
                    o.account,
                    o.used_gpu_hours,
                    o.allocated_gpu_hours,
                    when(t, self.now)
                )),
            }
        }

        if let Some(a) = &self.ahead {
            line(String::new());
            line(format!(
                "Ahead of it: {} pending job{} ({} GPUs) that Slurm considers first in its partition (priority, then submit time, then job id)",
                a.count,
                if a.count == 1 { "" } else { "s" },
                a.gpus
            ));
            if !a.first.is_empty() {
                let mut t = Table::new([Column::left(10), Column::left(8), Column::left(12), Column::right(4), Column::right(11), Column::left(0)])
                    .indent("  ");
                t.row(["JOBID", "USER", "ACCOUNT", "GPUS", "PRIORITY", "AHEAD BECAUSE"]);
                for x in &a.first {
                    t.row([x.name.clone(), x.user.clone(), x.account.clone(), x.gpus.to_string(), x.priority.to_string(), x.words.clone()]);
                }
                out.push_str(&t.to_string());
            }
        }
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        if !self.blocks.is_empty() {
            line(String::new());
            line("What blocks it now".to_string());
            for b in &self.blocks {
                line(format!("  - {}", block_text(b, self.now)));
            }
        }
        if let Some(p) = &self.preemption {
            line(String::new());
            match &p.refused {
                Some(why) => line(format!("Preemption: it may not preempt: {why}")),
                None if p.candidates.is_empty() => line("Preemption: no running job may be preempted for it now".to_string()),
                None => line(format!(
                    "Preemption: it may preempt {} running job{} ({} GPUs; with the {} free: {} of the {} it asks for){}",
                    p.candidates.len(),
                    if p.candidates.len() == 1 { "" } else { "s" },
                    p.candidate_gpus,
                    p.free_gpus,
                    p.candidate_gpus + p.free_gpus,
                    j.gpus,
                    if p.candidate_gpus + p.free_gpus >= j.gpus { "; Slurm takes those on the nodes it picks" } else { ": not enough to start it" }
                )),
            }
            let mut rows = Table::new([Column::left(10), Column::left(8), Column::left(12), Column::right(4), Column::left(0)]).indent("  ");
            if !p.candidates.is_empty() {
                victim_rows(&mut rows, ["candidate", "WHY IT MAY GO"], &p.candidates, p.candidates.len(), "");
            }
            if !p.protected.is_empty() {
                victim_rows(&mut rows, ["protected", "WHAT PROTECTS IT"], &p.protected, p.protected_count, " running jobs");
            }
            out.push_str(&rows.to_string());
        }
        if let Some(p) = &self.preemption {
            if let Some(n) = &p.next {
                let ids: Vec<String> = n.victims.iter().map(u64::to_string).collect();
                out.push_str(&format!(
                    "  next chance: {}, when it may take {} (enough GPUs in count; nothing else changing)\n",
                    when(n.at, self.now),
                    ids.join(", ")
                ));
            }
        }
        if let Some(y) = &self.yields {
            out.push('\n');
            let from =
                if y.from > self.now { format!("once its contract ends, {}", when(y.from, self.now)) } else { "now (past its contract)".to_string() };
            if y.count == 0 {
                out.push_str(&format!("Yields: {from}, to nothing waiting now{}\n", y.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default()));
            } else {
                out.push_str(&format!("Yields: {from}, to {} waiting job{} as the queue stands\n", y.count, if y.count == 1 { "" } else { "s" }));
                let mut rows = Table::new([Column::left(10), Column::left(8), Column::left(12), Column::right(4), Column::left(0)]).indent("  ");
                victim_rows(&mut rows, ["JOBID", "WHY IT MAY TAKE THESE GPUS"], &y.to, y.count, "");
                out.push_str(&rows.to_string());
            }
        }
        if let Some(f) = &self.forecast {
            out.push('\n');
            match f {
                Err(why) => out.push_str(&format!("Start estimate: {why}\n")),
                Ok(f) => {
                    let head = match f.estimate {
                        Estimate::StartsAt(t) => format!("Start estimate: {}", when(t, self.now)),
                        Estimate::NotWithin { .. } => format!("Start estimate: not within {}", format_duration(f.horizon_s)),
                        Estimate::NeverFits => "Start estimate: never (it asks for more GPUs than its partition's usable nodes have)".to_string(),
                    };
                    out.push_str(&format!("{head}\n"));
                    out.push_str(&format!(
                        "  a replay of the {} jobs of its partition under Tally's rules, assuming every job runs to its time limit and nothing new is submitted{}\n",
                        f.jobs,
                        if f.defaulted > 0 {
                            format!(
                                "; {} job{} without a time limit counted as running {} (or to the end of their contract, if later)",
                                f.defaulted,
                                if f.defaulted == 1 { "" } else { "s" },
                                format_duration(f.default_duration_s)
                            )
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
        out
    }

    pub fn json(&self) -> Value {
        let j = &self.job;
        let d = &j.decoded;
        let (contract, contract_error) = match &j.contract {
            Ok(c) => (json!({"min_runtime_s": c.min_runtime_s, "resumable": c.resumable}), Value::Null),
            Err(e) => (Value::Null, json!(e)),
        };
        json!({
            "now": self.now,
            "job": {
                "id": j.id, "name": j.name, "user": j.user, "account": j.account, "gpus": j.gpus, "nodes": j.nodes,
                "partition": j.partition, "state": j.state, "reason": j.reason, "comment": j.comment,
                "contract": contract, "contract_error": contract_error,
                "allocated": j.allocated, "unallocated_because": j.unallocated_because,
                "priority": j.priority,
                "decoded": {"allocated": d.allocated, "planned": d.planned, "need": d.need, "need_name": need_name(d.need),
                            "level": d.level, "team": d.team, "team_rank": 1023 - d.team, "nice": -d.within_team, "quick": d.quick},
                "tally_priority_now": j.computed,
                "time_limit_s": j.time_limit_s, "submit_s": j.submit_s, "begin_s": j.begin_s, "start_s": j.start_s,
                "nodes_running_on": j.node_list, "contract_left_s": j.contract_left_s,
            },
            "team": self.team.as_ref().map(|t| json!({
                "account": t.account, "rate_gpus": t.now.rate, "running_gpus": t.now.running,
                "waiting_gpus": t.now.demand - t.now.running, "owed_gpus": t.now.owed, "short_gpus": t.now.short(), "fair_gpus": t.now.fair,
                "job_in_team": t.place.as_ref().map(|p| json!({
                    "place_in_team": p.place, "jobs_ahead_in_team": p.jobs_ahead, "gpus_ahead_in_team": p.gpus_ahead,
                    "team_waiting_jobs": p.team_jobs, "waits_now": p.waits,
                    "need": p.need, "need_name": need_name(p.need), "owed_now": p.need == NEED_OWED,
                    "order": "nice, then quick jobs, then submit time, then job id",
                    "words": place_words(&t.now, p),
                })),
            })),
            "levels": self.levels.iter().map(|l| json!({
                "account": l.account, "own_part": l.own, "rank": l.rank, "used_gpu_hours": l.used_gpu_hours, "allocated_gpu_hours": l.allocated_gpu_hours,
            })).collect::<Vec<_>>(),
            "outlook": self.outlook.as_ref().map(|o| json!({
                "account": o.account, "used_gpu_hours": o.used_gpu_hours, "allocated_gpu_hours": o.allocated_gpu_hours,
                "already_under": o.back == BackUnder::Already,
                "back_under_at": match o.back { BackUnder::At(t) => Some(t), BackUnder::Already => None },
                "assumes": "nothing more is charged to the account from now",
            })),
            "ahead": self.ahead.as_ref().map(|a| json!({
                "count": a.count, "gpus": a.gpus,
                "first": a.first.iter().map(|x| json!({
                    "job": x.name, "user": x.user, "account": x.account, "gpus": x.gpus, "priority": x.priority,
                    "because": x.because.map(precedence_name), "its_team_gpus_ahead": x.team_gpus_ahead, "words": x.words,
                })).collect::<Vec<_>>(),
            })),
            "blocks": self.blocks.iter().map(|b| block_json(b, self.now)).collect::<Vec<_>>(),
            "forecast": self.forecast.as_ref().map(|f| match f {
                Err(why) => json!({"estimate": Value::Null, "why_none": why}),
                Ok(f) => json!({
                    "starts_at": match f.estimate { Estimate::StartsAt(t) => Some(t), _ => None },
                    "within_horizon": matches!(f.estimate, Estimate::StartsAt(_)),
                    "never_fits": f.estimate == Estimate::NeverFits,
                    "horizon_s": f.horizon_s, "jobs_replayed": f.jobs,
                    "jobs_without_time_limit": f.defaulted, "default_duration_s": f.default_duration_s,
                    "assumes": "every job runs to its time limit (jobs without one: default_duration_s, or to the end of their contract if later) and nothing new is submitted",
                }),
            }),
            "preemption": self.preemption.as_ref().map(|p| json!({
                "refused": p.refused,
                "may_preempt": p.refused.is_none() && !p.candidates.is_empty(),
                "candidate_gpus": p.candidate_gpus, "free_gpus": p.free_gpus,
                "candidates": p.candidates.iter().map(victim_json).collect::<Vec<_>>(),
                "protected": p.protected.iter().map(victim_json).collect::<Vec<_>>(),
                "protected_count": p.protected_count,
                "next_chance": p.next.as_ref().map(|n| json!({"at": n.at, "victims": n.victims})),
            })),
            "yields": self.yields.as_ref().map(|y| json!({
                "from": y.from, "count": y.count, "to": y.to.iter().map(victim_json).collect::<Vec<_>>(), "note": y.note,
            })),
        })
    }
}

/// A head row (`[first column, last column]`), a row per job, and how many
/// more there were (`count` in all, `more` names them).
fn victim_rows(rows: &mut Table, head: [&str; 2], listed: &[Victim], count: usize, more: &str) {
    rows.row([head[0], "USER", "ACCOUNT", "GPUS", head[1]]);
    for v in listed {
        rows.row([v.id.to_string(), v.user.clone(), v.account.clone(), v.gpus.to_string(), v.why.clone()]);
    }
    if count > listed.len() {
        rows.text(format!("  … and {} more{more}", count - listed.len()));
    }
}

fn victim_json(v: &Victim) -> Value {
    json!({"job": v.id, "user": v.user, "account": v.account, "gpus": v.gpus, "why": v.why})
}

fn precedence_name(p: Precedence) -> &'static str {
    match p {
        Precedence::Tier => "tier",
        Precedence::Planned => "planned",
        Precedence::Need { .. } => "need",
        Precedence::Level { .. } => "level",
        Precedence::Team { .. } => "team_rank",
        Precedence::Nice { .. } => "nice",
        Precedence::Quick => "quick",
        Precedence::Equal => "equal",
    }
}

fn block_json(b: &Block, now: u64) -> Value {
    let kind = match b {
        Block::Held(_) => "held",
        Block::Dependency(_) => "dependency",
        Block::BeginTime(_) => "begin_time",
        Block::Partition(_) => "partition",
        Block::Reservation(_) => "reservation",
        Block::NoFreeGpus { .. } => "no_free_gpus",
        Block::Fragmented { .. } => "fragmentation",
        Block::TooFewNodes { .. } => "too_few_nodes",
        Block::NeverFits { .. } => "never_fits",
        Block::Fits { .. } => "fits",
        Block::Slurm(_) => "slurm_reason",
    };
    json!({"kind": kind, "text": block_text(b, now)})
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_engine::view::JobView;

    /// The test bed's queue at 1796308676 (captured with sinfo at the same
    /// moment): alice's pretrain jobs hold all 32 GPUs inside their 2 h
    /// contracts; carol's 8-GPU climate job 17 waits for resources.
    const SQUEUE: &str = include_str!("../tests/data/squeue-22.05.json");
    const SINFO: &str = include_str!("../tests/data/sinfo-22.05.json");
    const NOW: u64 = 1_796_308_676;

    fn setup() -> (Arc<Config>, Snapshot, Vec<QueueJob>, Vec<NodeInfo>) {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/tally.toml")).unwrap();
        let text = text.replace("gpus = 256", "gpus = 32");
        let config = Config::parse(&text, "tally.toml").unwrap();
        let snapshot = Snapshot::new(config.new_ledger());
        let queue = slurm_json::parse_squeue(SQUEUE, &mut Names::new()).unwrap();
        (Arc::new(config), snapshot, queue, slurm_json::parse_sinfo(SINFO).unwrap())
    }

    fn report(which: &str) -> Report {
        let (config, snapshot, queue, nodes) = setup();
        explain(&config, &snapshot, &queue, &nodes, which, NOW).unwrap()
    }

    #[test]
    fn an_unallocated_job_waits_behind_every_allocated_one() {
        let r = report("19");
        assert!(!r.job.allocated);
        assert!(r.job.unallocated_because.as_deref().unwrap().starts_with("contract 0"));
        let a = r.ahead.unwrap();
        // 17, 20, 25 and the array 24 are considered; 22 (dependency),
        // 23 (begin time) and 21 (held) are not.
        assert_eq!(a.count, 4);
        assert_eq!(a.first.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["17", "20", "25", "24_[1-3]"]);
        assert!(a.first.iter().all(|x| x.because == Some(Precedence::Tier)));
        assert_eq!(r.blocks, vec![Block::NoFreeGpus { free: 0, asked: 4 }]);
        assert!(r.preemption.unwrap().refused.unwrap().contains("unallocated jobs never preempt"));
    }

    #[test]
    fn every_running_job_is_inside_its_contract() {
        let r = report("17");
        assert!(r.job.allocated);
        assert_eq!(r.ahead.as_ref().unwrap().count, 0);
        let p = r.preemption.unwrap();
        assert!(p.candidates.is_empty() && p.refused.is_none());
        assert_eq!(p.protected.iter().map(|v| v.id).collect::<Vec<_>>(), [13, 14, 15, 16, 18]);
        assert!(p.protected.iter().all(|v| v.why.starts_with("contract until ")), "{:?}", p.protected);
        let team = r.team.unwrap();
        assert_eq!((team.account.as_str(), team.now.running, team.now.demand), ("climate", 0.0, 8.0));
        assert_eq!(r.levels.iter().map(|l| l.account.as_str()).collect::<Vec<_>>(), ["climate", "science", "root"]);
    }

    #[test]
    fn when_it_may_preempt_next_and_what_a_running_job_yields_to() {
        // As captured: alice's jobs cannot checkpoint and have no time limit
        // (long jobs): nobody takes them before they ran 8 h.
        let r = report("13");
        let y = r.yields.as_ref().unwrap();
        assert_eq!((y.from, y.count), (NOW + 116 * 60 + 35, 0));
        assert!(y.note.as_deref().unwrap().starts_with("cannot checkpoint and has run 2h of the 8h contract maximum"), "{y:?}");
        assert!(r.text().contains("Yields: once its contract ends, 2026-12-03 16:34 UTC (in 1h56m35s), to nothing waiting now"), "{}", r.text());
        assert!(report("17").preemption.unwrap().next.is_none(), "long jobs: no chance within 8 h of contracts");
        // Had they been resumable: carol's job 17 (climate, owed GPUs) may
        // take them when their contracts end, and each says so.
        let (config, snapshot, mut queue, nodes) = setup();
        for q in queue.iter_mut().filter(|q| q.view.user.as_ref() == "alice") {
            q.view.comment =
                q.view.comment.as_deref().map(|c| c.replace("contract=2h", "contract=2h,resumable").replace("contract=1h", "contract=1h,resumable"));
        }
        let r = explain(&config, &snapshot, &queue, &nodes, "17", NOW).unwrap();
        let n = r.preemption.as_ref().unwrap().next.as_ref().expect("a next chance");
        assert_eq!(n.at, NOW + 116 * 60 + 35, "job 18's 4 GPUs at 15:34 are not enough; the others' at 16:34 are");
        // Climate is owed 2.4 GPUs: two of pretrain's 8-GPU jobs may go
        // (cumulatively: pretrain keeps a higher share), highest id first.
        assert_eq!(n.victims, [15, 14]);
        let r = explain(&config, &snapshot, &queue, &nodes, "13", NOW).unwrap();
        let y = r.yields.unwrap();
        let carol = y.to.iter().find(|v| v.id == 17).expect("job 17 among them");
        assert_eq!(carol.why, "its team is owed GPUs (restoration)");
        // Job 22 waits on a dependency (slurmctld has set no begin time):
        // it waits for nothing yet and takes nothing.
        assert_eq!(y.to.iter().map(|v| v.id).collect::<Vec<_>>(), [17, 20], "{y:?}");
    }

    #[test]
    fn why_the_others_are_ahead() {
        // The array's pretrain tasks: its team runs 8 GPUs above its rate,
        // posttrain's jobs are owed GPUs now.
        let r = report("24_2");
        let a = r.ahead.unwrap();
        let by = |n: &str| a.first.iter().find(|x| x.name == n).unwrap();
        assert_eq!(by("20").because, Some(Precedence::Need { first: NEED_OWED, second: NEED_NONE }));
        assert_eq!(
            by("20").words,
            "its team is owed GPUs now and yours is not: its team is short 2.9 GPUs (runs 0, rate 2.9) and it is first in its team's line for them; your team is not short (runs 32, rate 5.8)"
        );
        // Two posttrain jobs: the first of the team is ahead of the second.
        let r = report("25");
        let twenty = r.ahead.unwrap().first.into_iter().find(|x| x.name == "20").unwrap();
        assert!(twenty.words.starts_with("same team"), "{}", twenty.words);
    }

    #[test]
    fn what_blocks_held_dependent_and_later_jobs() {
        assert!(matches!(report("21").blocks[0], Block::Held(ref r) if r == "JobHeldUser"));
        assert!(matches!(report("22").blocks[0], Block::Dependency(ref d) if d == "afterok:17(unfulfilled)"));
        assert!(matches!(report("23").blocks[0], Block::BeginTime(t) if t > NOW));
    }

    #[test]
    fn fragmentation_and_whole_nodes() {
        let (config, snapshot, queue, mut nodes) = setup();
        // 4 GPUs free on each of two nodes: 8 in total, none with 8.
        nodes[0].gpus_used = 4;
        nodes[1].gpus_used = 4;
        let r = explain(&config, &snapshot, &queue, &nodes, "17", NOW).unwrap();
        assert_eq!(r.blocks, vec![Block::Fragmented { free: 8, largest: 4, asked: 8 }]);
        // Two whole nodes for job 25 (2 × 8): one is not enough.
        nodes[2].gpus_used = 0;
        let r = explain(&config, &snapshot, &queue, &nodes, "25", NOW).unwrap();
        assert_eq!(r.blocks, vec![Block::TooFewNodes { nodes: 2, per_node: 8, have: 1 }]);
        // A drained node gives nothing.
        nodes[2].flags.push("DRAIN".into());
        let r = explain(&config, &snapshot, &queue, &nodes, "17", NOW).unwrap();
        assert_eq!(r.blocks, vec![Block::Fragmented { free: 8, largest: 4, asked: 8 }]);
    }

    #[test]
    fn the_start_estimate_replays_the_queue() {
        // Every running job has no time limit: each runs the default hour
        // from now or to the end of its contract, if later. The 8-GPU
        // pretrain jobs (13-15, a node each) started at 1_796_308_471 with
        // contract=2h: when the first node frees, 17 (climate, owed GPUs)
        // goes first.
        let f = report("17").forecast.unwrap().unwrap();
        assert_eq!(f.estimate, Estimate::StartsAt(1_796_308_471 + 2 * 3600));
        assert_eq!((f.default_duration_s, f.defaulted), (3600, 6));
        // Held and not-yet-eligible jobs get no estimate, and say why.
        assert!(report("21").forecast.unwrap().unwrap_err().starts_with("held"));
        assert!(report("23").forecast.unwrap().unwrap_err().starts_with("not eligible before"));
    }

    #[test]
    fn unknown_jobs_are_said() {
        let (config, snapshot, queue, nodes) = setup();
        let err = explain(&config, &snapshot, &queue, &nodes, "99", NOW).unwrap_err();
        assert!(err.starts_with("job 99 is not in Slurm's queue"), "{err}");
        let err = explain(&config, &snapshot, &queue, &nodes, "abc", NOW).unwrap_err();
        assert!(err.contains("is not a job id"), "{err}");
        // The array 24 holds tasks 1-3 pending (24_2 is explained above): 24_7 is none of them.
        let err = explain(&config, &snapshot, &queue, &nodes, "24_7", NOW).unwrap_err();
        assert_eq!(err, "job 24_7: array 24 has no task 7 in Slurm's queue (its pending tasks are 24_[1-3]; ended tasks are in `sacct -j 24_7`)");
    }

    #[test]
    fn array_task_strings() {
        for (spec, yes, no) in [("1-3", &[1, 2, 3][..], &[0, 4][..]), ("1,3,5-7", &[1, 3, 5, 7], &[2, 4, 8]), ("0-15:4%2", &[0, 4, 12], &[1, 15, 16])]
        {
            assert!(yes.iter().all(|&t| task_in(spec, t) == Some(true)), "{spec}");
            assert!(no.iter().all(|&t| task_in(spec, t) == Some(false)), "{spec}");
        }
        assert_eq!(task_in("", 1), None);
        assert_eq!(task_in("1-x", 1), None);
    }

    /// Two teams of rate 4 on 8 GPUs, nothing running. Team a waits with
    /// three 2-GPU jobs (1, 2, 3, in its order), team b with two (4, 5,
    /// submitted last). The walk gives a's first two jobs the 4 GPUs a is
    /// short: job 3, a's third, is not owed GPUs now although its team is,
    /// and b's jobs (owed: b is short 4 and its first two jobs ask for 2
    /// and 4) go before it. Slurm's priorities are the walk's.
    fn small_queue() -> (Arc<Config>, Snapshot, Vec<QueueJob>, Vec<NodeInfo>) {
        let text = "[cluster]\ngpus = 8\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n[users]\nalice = \"a\"\nbob = \"b\"\n";
        let config = Arc::new(Config::parse(text, "tally.toml").unwrap());
        let snapshot = Snapshot::new(config.new_ledger());
        let job = |id: u32, user: &str, gpus: u32| QueueJob {
            view: JobView {
                account: Some(if user == "alice" { "a" } else { "b" }.into()),
                comment: Some("contract=1h".to_string()),
                partition: Some("gpu".into()),
                gpus,
                submit_s: NOW - 600 + u64::from(id),
                begin_s: NOW - 600 + u64::from(id),
                ..JobView::pending(id, user.into())
            },
            reason: "Priority".to_string(),
            state: "PENDING".to_string(),
            dependency: String::new(),
            reservation: String::new(),
            nodes_asked: 1,
            node_list: String::new(),
            array_tasks: String::new(),
            array_job_id: 0,
            array_task_id: None,
        };
        let mut queue = vec![job(1, "alice", 2), job(2, "alice", 2), job(3, "alice", 2), job(4, "bob", 2), job(5, "bob", 4)];
        let views: Vec<_> = queue.iter().map(|q| q.view.clone()).collect();
        let jobs = classify(&config, &views, &snapshot.runs, NOW, DEFAULT_PREEMPT_WINDOW_S);
        let (_, walked) = rank(&config, &snapshot, &jobs, NOW);
        for (q, p) in queue.iter_mut().zip(walked) {
            q.view.priority = p.expect("every job waits").value;
        }
        let node = NodeInfo {
            name: "n1".to_string(),
            state: "allocated".to_string(),
            flags: Vec::new(),
            partitions: vec!["gpu".to_string()],
            gpus: 8,
            gpus_used: 8,
            reason: String::new(),
        };
        (config, snapshot, queue, vec![node])
    }

    #[test]
    fn a_team_owed_gpus_whose_earlier_jobs_claim_them() {
        let (config, snapshot, queue, nodes) = small_queue();
        let r = explain(&config, &snapshot, &queue, &nodes, "3", NOW).unwrap();
        let team = r.team.as_ref().unwrap();
        assert_eq!((team.now.rate, team.now.running, team.now.short()), (4.0, 0.0, 4.0));
        let place = team.place.as_ref().unwrap();
        assert_eq!(*place, TeamPlace { jobs_ahead: 2, gpus_ahead: 4.0, place: 3, team_jobs: 3, waits: true, need: NEED_NONE });
        assert_eq!(r.job.decoded.need, NEED_NONE);
        let text = r.text();
        assert!(
            text.contains(
                "  this job: 3rd of the team's 3 waiting jobs in the team's order (nice, then quick jobs, then submit time, then job id); \
                 the 2 jobs ahead of it ask for 4 GPUs and claim the 4 GPUs the team is short first: it is not owed GPUs now\n"
            ),
            "{text}"
        );
        // Who is ahead and why: every owed job, a's and b's interleaved by
        // the share each would start at.
        let a = r.ahead.as_ref().unwrap();
        assert_eq!(a.first.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["1", "4", "2", "5"]);
        let by = |n: &str| a.first.iter().find(|x| x.name == n).unwrap();
        let yours = "your team is short 4 GPUs too (runs 0, rate 4.0), but its 2 waiting jobs ahead of this one in the team's order \
                     (nice, then quick jobs, then submit time, then job id) ask for 4 GPUs and claim them first: this job is 3rd in its team";
        assert_eq!(by("4").because, Some(Precedence::Need { first: NEED_OWED, second: NEED_NONE }));
        assert_eq!(
            by("4").words,
            format!("its team is owed GPUs now and yours is not: its team is short 4 GPUs (runs 0, rate 4.0) and it is first in its team's line for them; {yours}")
        );
        assert_eq!(
            by("5").words,
            format!(
                "its team is owed GPUs now and yours is not: its team is short 4 GPUs (runs 0, rate 4.0) and its team's jobs ahead of it \
                 in the team's order (nice, then quick jobs, then submit time, then job id) ask for only 2 of them; {yours}"
            )
        );
        assert_eq!(by("5").team_gpus_ahead, Some(2.0));
        for x in [by("1"), by("2")] {
            assert!(x.words.starts_with("same team, earlier in the team's order"), "{}", x.words);
        }
        // Never "yours is not (runs 0, rate 4.0)" next to "short 4 GPUs: runs 0, rate 4.0".
        assert!(!text.contains("yours is not (runs"), "{text}");
        // The JSON says the same.
        let j = r.json();
        let p = &j["team"]["job_in_team"];
        assert_eq!((p["place_in_team"].as_u64(), p["jobs_ahead_in_team"].as_u64(), p["gpus_ahead_in_team"].as_f64()), (Some(3), Some(2), Some(4.0)));
        assert_eq!((p["owed_now"].as_bool(), p["team_waiting_jobs"].as_u64(), p["waits_now"].as_bool()), (Some(false), Some(3), Some(true)));
        assert_eq!(j["ahead"]["first"][1]["words"], by("4").words.as_str());
        assert_eq!(j["ahead"]["first"][3]["its_team_gpus_ahead"].as_f64(), Some(2.0));
    }

    #[test]
    fn the_first_jobs_of_a_short_team_are_owed() {
        let (config, snapshot, queue, nodes) = small_queue();
        let r = explain(&config, &snapshot, &queue, &nodes, "2", NOW).unwrap();
        let place = r.team.as_ref().unwrap().place.clone().unwrap();
        assert_eq!(place, TeamPlace { jobs_ahead: 1, gpus_ahead: 2.0, place: 2, team_jobs: 3, waits: true, need: NEED_OWED });
        assert!(
            r.text().contains(
                "  this job: 2nd of the team's 3 waiting jobs in the team's order (nice, then quick jobs, then submit time, then job id); \
                 the 1 job ahead of it asks for 2 GPUs, less than the 4 GPUs the team is short: it is owed GPUs now\n"
            ),
            "{}",
            r.text()
        );
        // A nicer job of a's comes first in a's order: job 3 at nice -10
        // takes a's shortfall before 1 and 2.
        let (config, snapshot, mut queue, nodes) = small_queue();
        queue[2].view.nice = -10;
        let r = explain(&config, &snapshot, &queue, &nodes, "3", NOW).unwrap();
        let place = r.team.unwrap().place.unwrap();
        assert_eq!((place.place, place.jobs_ahead, place.need), (1, 0, NEED_OWED));
        let r = explain(&config, &snapshot, &queue, &nodes, "2", NOW).unwrap();
        let place = r.team.unwrap().place.unwrap();
        assert_eq!((place.place, place.gpus_ahead, place.need), (3, 4.0, NEED_NONE));
    }

    #[test]
    fn priorities_of_the_last_re_ranking_are_said_as_such() {
        // Since the re-ranking, a 4-GPU job of b's started: b is no longer
        // short, though its waiting jobs' priorities still say it is owed.
        let (config, snapshot, mut queue, nodes) = small_queue();
        let mut started = queue[4].clone();
        started.view = JobView { job_id: 6, state: RunState::Running, start_s: NOW - 60, ..started.view };
        started.state = "RUNNING".to_string();
        queue.push(started);
        let r = explain(&config, &snapshot, &queue, &nodes, "3", NOW).unwrap();
        let four = r.ahead.unwrap().first.into_iter().find(|x| x.name == "4").unwrap();
        assert_eq!(
            four.words,
            "at the last re-ranking its team was owed GPUs and yours was not (Slurm holds the priorities Tally gave then; \
             Tally re-ranks every calc_period and the queue has changed since)"
        );
    }

    #[test]
    fn ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111, 171].into_iter().map(ordinal).collect();
        assert_eq!(got, ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th", "171st"]);
        assert_eq!((gpus(3.0), gpus(2.6), gpus(2.96)), ("3".to_string(), "2.6".to_string(), "3".to_string()));
    }

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_796_308_676), "2026-12-03 14:37 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
    }
}
