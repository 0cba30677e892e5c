//! The event-jumping replay.
//!
//! Time jumps from event to event: a submission, a job's end, a requeued
//! job becoming eligible again, and a periodic re-plan (the priority
//! plugin's `calc_period`; FIFO re-plans at day edges, where its realtime
//! reservation changes). After the events of an instant the scheduler runs
//! as Slurm's does: jobs in priority order start where they fit
//! (whole-node-aware placement, [`crate::cluster`]); a job that does not fit
//! may preempt (per policy); the first job that can do neither gets an EASY
//! reservation at the earliest time enough running jobs end, and lower jobs
//! backfill if they do not delay it. Running jobs end at their start plus
//! remaining work; the simulator knows the durations, so the reservation
//! uses them (Slurm uses time limits: optimistic, documented). A requeued
//! job may start again `requeue_delay_s` later (Slurm: `cred_expire + 1`).
//!
//! Priorities behave as Slurm's: a job gets one when it is submitted (or
//! requeued), and the policy's periodic re-plan recomputes them all (the
//! priority plugin's `calc_period`); between re-plans the order only changes
//! by arrivals. Every rule comes from the allocator: `order_queue` and
//! `job_priority` (with the [`Entitlement`] of what each team runs now and
//! the GPUs of its jobs ahead in the queue), the preemption rule through
//! `VictimPool` (on the live entitlement, as the preempt plugin), `victim_rank`,
//! `ContractRules::resolve_seconds`, `charge_from_mark` into a `Ledger`,
//! `Config::fair_share`'s ranking, `plan::queue` for the planner, and
//! [`crate::metrics::score`] for every figure. Invariants are checked as the
//! replay goes and reported as [`SimError::Invariant`].
//!
//! GPU types (`[cluster.gpu_types]`, [`gpu_groups`]): every type the config
//! gives a count for is that many GPUs of the simulated cluster (in nodes
//! of that type), the rest of `Settings::gpus` is untyped. A trace job with
//! a type runs only on GPUs of its type (never, if the cluster has too few:
//! unrunnable); one without takes any free GPUs ([`crate::cluster`]). A
//! job waits weighing its own type's weight (1 untyped) and runs, and is
//! charged, at the weight of the GPUs it holds — as the plugin sees a
//! pending job's requested type and a running job's allocated one. The
//! rates, the capacity and owed and delivered are in the same budget units
//! (multifactor bills with the same weights, as a site would set
//! `TRESBillingWeights`). The planner policies plan GPUs as if untyped.
//!
//! The replay's parts: `keys` (how each policy keys the queue), `multifactor`
//! (the multifactor baseline's priority and usage), `plan` (re-plans, the
//! entitlement and the planners), `backfill` (the scheduling pass and its
//! EASY reservation) and `preempt` (preemption and requeue). This file holds
//! the types, the replay's state, starting and ending jobs, and the `run`
//! entry points.

mod backfill;
mod keys;
mod multifactor;
mod plan;
mod preempt;

use crate::cluster::{Cluster, GpuGroup, Placement};
use crate::metrics::{score, JobMeta, Run, RunEnd, Scored};
use crate::trace::{Class, Trace};
use keys::{QueueKey, TeamQueue, TeamWalk};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;
use tally_allocator::tree::NodeId;
use tally_allocator::{
    charge_from_mark, Contract, Entitlement, FairShare, Funded, Job, Ledger, Load, QueueOrder, Weight, WindowUsage, DAY_S, WEEK_S,
};
use tally_config::Config;
use tally_planner::predict::{mae, JobKey, Mae, Outcome, PredictRules, Predictor};
use thiserror::Error;

/// The scheduling policies a replay compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    /// Arrival order; realtime work held in a reservation of its daily peak.
    Fifo,
    /// Slurm's classic multifactor: fair share with a 7-day half-life decay
    /// plus age and QOS; debug/interactive/realtime preempt jobs that did not
    /// opt out (a trace contract > 0 = opted out); no contracts.
    Multifactor,
    /// Budgets, the sliding window, contracts, the owed-now order,
    /// restorative preemption, unallocated fill.
    Tally,
    /// Tally as deployed with `[planner]`: Tally's order, plus the plan bit
    /// for the jobs the rolling-horizon plan starts now.
    TallyPlanner,
    /// The budget-blind rolling-horizon planner (Dharma's): every re-plan
    /// plans the next 24 h for the oldest waiting jobs (the running ones
    /// pinned) and orders the queue by planned start; no preemption.
    Planner,
}

impl Policy {
    pub const ALL: [Policy; 5] = [Policy::Fifo, Policy::Multifactor, Policy::Tally, Policy::TallyPlanner, Policy::Planner];
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Multifactor => "multifactor",
            Policy::Tally => "tally",
            Policy::TallyPlanner => "tally+planner",
            Policy::Planner => "planner",
        }
    }
    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == s.trim())
    }
    /// Tally's order and preemption rule.
    pub fn tally(self) -> bool {
        matches!(self, Policy::Tally | Policy::TallyPlanner)
    }
}

/// The durations the planner policies (`planner`, `tally+planner`) plan
/// with. Jobs always run for their true duration; only the plan's belief
/// changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlanDurations {
    /// The true remaining work (an oracle; the default, as before).
    #[default]
    True,
    /// The job's time limit (the true duration when the trace has none),
    /// minus the work done.
    Limit,
    /// The online predictor (`tally_planner::predict`), trained on the
    /// jobs that ended before the job's submission in this replay and
    /// capped at its time limit, minus the work done. A job that outlives
    /// its belief is believed to run to its limit.
    Predicted,
}

impl PlanDurations {
    pub const ALL: [PlanDurations; 3] = [PlanDurations::True, PlanDurations::Limit, PlanDurations::Predicted];
    pub fn name(self) -> &'static str {
        match self {
            PlanDurations::True => "true",
            PlanDurations::Limit => "limit",
            PlanDurations::Predicted => "predicted",
        }
    }
    pub fn parse(s: &str) -> Option<PlanDurations> {
        PlanDurations::ALL.into_iter().find(|d| d.name() == s.trim())
    }
}

/// The simulated cluster and scheduler settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub gpus: u32,
    pub gpus_per_node: u32,
    /// Re-plan period of multifactor (Slurm's PriorityCalcPeriod) and the
    /// budget-blind planner. Tally re-ranks every `calc_period` of the config.
    pub replan_s: u64,
    /// Jobs tested for backfill after the reservation (Slurm's bf_max_job_test).
    pub backfill_depth: usize,
    /// Multifactor's usage half-life.
    pub half_life_s: u64,
    /// Stop this long after the last submission even if work remains (a
    /// safety net against a policy that never drains; reported as
    /// `unfinished`).
    pub drain_limit_s: u64,
    /// A requeued job may start again this long after it was preempted
    /// (Slurm: `cred_expire + 1`, 121 s by default).
    pub requeue_delay_s: u64,
    /// Re-plan period of the planners (`[planner] interval`).
    pub plan_interval_s: u64,
    /// Nodes of the debug capacity (the last ones of the cluster): under
    /// Tally only debug jobs and unallocated work run there; the other
    /// policies use them as any node.
    pub debug_nodes: usize,
    /// The durations the planners plan with.
    pub plan_durations: PlanDurations,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            gpus: 64,
            gpus_per_node: 8,
            replan_s: 300,
            backfill_depth: 100,
            half_life_s: WEEK_S,
            drain_limit_s: 365 * DAY_S,
            requeue_delay_s: 121,
            plan_interval_s: 1800,
            plan_durations: PlanDurations::True,
            debug_nodes: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SimError {
    #[error("invariant broken at t={t}: {what}")]
    Invariant { t: u64, what: String },
    #[error("the cluster has no GPUs")]
    NoGpus,
    #[error("[cluster.gpu_types] counts {typed} typed GPUs, more than the {gpus} GPUs simulated: give more GPUs or smaller counts")]
    TypedGpus { typed: u64, gpus: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Waiting,
    /// Preempted, not yet eligible again (the requeue delay).
    Requeued,
    Running,
    Done,
    Unrunnable,
}

#[derive(Debug, Clone)]
struct SimJob {
    /// `job.weight` is `ask` while it waits, the weight of the GPUs it
    /// holds while it runs ([`Cluster::weight_of`]).
    job: Job,
    /// The GPU type it asks for (`None`: any).
    gpu_type: Option<Arc<str>>,
    /// Its type's weight: what it weighs while waiting.
    ask: Weight,
    class: Class,
    team: usize,
    /// Tree node when the job is allocated under the config's rules (Tally's
    /// per-team counters), else `None`.
    node: Option<NodeId>,
    duration_s: u64,
    /// Work left (resumable jobs keep their progress when preempted).
    remaining_s: u64,
    /// Trace contract > 0: counts towards owed/delivered in every policy.
    asks: bool,
    priority_col: i32,
    status: Status,
    run_start: u64,
    placement: Placement,
    epoch: u32,
    /// tally+planner: the last plan starts it now.
    planned: bool,
    /// The time limit of the trace, if any.
    time_limit_s: Option<u64>,
    /// Tally: its key is its settled priority (true out of the queue;
    /// [`keys`]).
    settled: bool,
    /// What the planners believe its whole duration is ([`PlanDurations`];
    /// set at submission).
    belief_s: u64,
    /// It may run on the debug capacity's nodes (Tally: unallocated work
    /// and debug jobs, `PriorityRules::may_use_debug_nodes`; every job
    /// under the other policies).
    debug_ok: bool,
}

/// The outcome of one scheduling decision, for tests: (time, job id, what).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happening {
    Start { t: u64, job: u64, nodes: Vec<usize> },
    End { t: u64, job: u64 },
    Preempt { t: u64, job: u64, by: u64 },
}

/// What one replay reports.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyResult {
    pub policy: &'static str,
    /// Every figure, from what ran ([`crate::metrics::score`]).
    pub score: Scored,
    /// Preemptions of an allocated job inside its declared minimum runtime.
    pub contract_violations: u64,
    pub events: u64,
    /// Jobs larger than the cluster: never run (not counted as owed).
    pub unrunnable: usize,
    /// With [`PlanDurations::Predicted`] or `Limit`: the planner's belief
    /// at submission against the true durations (and the time limits), over
    /// the jobs submitted.
    pub belief_mae: Option<Mae>,
}

impl PolicyResult {
    /// Jobs that could run but never completed (the drain limit cut them).
    pub fn unfinished(&self) -> usize {
        self.score.unfinished.saturating_sub(self.unrunnable)
    }
}

struct Sim<'a> {
    policy: Policy,
    s: Settings,
    config: &'a Config,
    cluster: Cluster,
    jobs: Vec<SimJob>,
    /// Waiting (eligible) jobs in priority order, and each one's key.
    queue: BTreeSet<QueueKey>,
    keys: Vec<i64>,
    /// Waiting jobs per team in inside-team order (within_team descending,
    /// submit, id), for the re-plan's walk.
    team_queues: Vec<TeamQueue>,
    /// Tally: what the last re-keying left of each team for the next.
    team_walks: Vec<TeamWalk>,
    running: BTreeSet<usize>,
    /// Team names (leaves of the tree, then accounts outside it) and their
    /// allocation rates in GPUs.
    team_names: Vec<String>,
    team_rates: Vec<f64>,
    /// Each team's tree node when it is funded (its allocated jobs' node).
    team_nodes: Vec<Option<NodeId>>,
    /// Every job weighs whole budget units, less than 2⁵³ in all: sums of
    /// them are exact in any order.
    whole_units: bool,
    ends: BinaryHeap<Reverse<(u64, usize, u32)>>,
    /// Requeued jobs becoming eligible: (time, job).
    requeues: BinaryHeap<Reverse<(u64, usize)>>,
    // tally
    ledger: Ledger,
    /// The ledger's usage at the last re-plan.
    usage_now: WindowUsage,
    marks: BTreeMap<u64, u64>,
    fs: FairShare,
    /// The budgets at the simulated cluster size.
    alloc: tally_allocator::Allocation,
    /// Each team's 7-day rank in `fs` (looked up once per re-plan).
    ranks: Vec<Option<u32>>,
    /// Allocated GPUs running and waiting (eligible) per tree node, in
    /// budget units (GPUs × weight).
    run_gpus: Vec<f64>,
    wait_gpus: Vec<f64>,
    /// GPUs of allocated debug jobs running and waiting per tree node (the
    /// debug allowance's count).
    debug_run: Vec<f64>,
    debug_wait: Vec<f64>,
    /// What each team runs and is owed now (recomputed every pass, kept
    /// current through the pass).
    ent: Entitlement,
    /// `run_gpus` or `wait_gpus` changed since `ent` was computed.
    ent_stale: bool,
    /// The last re-plan's queue order (what a new job waits behind).
    order: QueueOrder,
    // multifactor
    usage: Vec<f64>,
    usage_at: u64,
    mf_marks: Vec<u64>,
    shares: Vec<f64>,
    // fifo: GPUs reserved for realtime per day, and realtime GPUs running
    rt_reserve: Vec<u32>,
    rt_busy: u32,
    nonrt_blocked: u32,
    /// Planner: each job's planned start step (u32::MAX: not planned).
    plan_rank: Vec<u32>,
    runs: Vec<Run>,
    log: Option<Vec<Happening>>,
    violations: u64,
    origin: u64,
    /// [`PlanDurations::Predicted`]: the predictor and each job's keys.
    predictor: Option<(Predictor, Vec<JobKey>)>,
    /// Beliefs at submission against the true durations.
    outcomes: Vec<Outcome>,
}

type R<T> = Result<T, SimError>;

fn broken(t: u64, what: String) -> SimError {
    SimError::Invariant { t, what }
}

impl<'a> Sim<'a> {
    fn new(trace: &Trace, config: &'a Config, policy: Policy, s: Settings, log: bool) -> R<Sim<'a>> {
        if s.gpus == 0 {
            return Err(SimError::NoGpus);
        }
        let cluster = Cluster::typed(&gpu_groups(config, s.gpus)?, s.gpus_per_node).with_debug_nodes(if policy.tally() { s.debug_nodes } else { 0 });
        let alloc = config.allocation(cluster.total()).unwrap_or_else(|_| {
            // GPU-hour budgets that do not fit this size: scale by shares only.
            config.allocation(config.ranking_gpus()).expect("validated config")
        });
        let alloc = tally_allocator::Allocation { capacity: config.capacity(cluster.total()), ..alloc };
        let mut team_index: BTreeMap<String, usize> = BTreeMap::new();
        let mut shares = Vec::new();
        let mut team_names = Vec::new();
        let mut team_rates = Vec::new();
        for id in config.tree.leaves() {
            team_index.insert(config.tree.node(id).name.clone(), shares.len());
            shares.push(alloc.fraction(id));
            team_names.push(config.tree.node(id).name.clone());
            team_rates.push(alloc.rate_gpus(id));
        }
        let origin = trace.jobs.first().map_or(0, |j| j.submit_s);
        let mut jobs = Vec::with_capacity(trace.jobs.len());
        // One shared name per account and per user (the queue walk tells
        // teams apart by address first, as the plugin's copies share theirs;
        // so does the ledger its keys).
        let mut names: BTreeMap<&str, Arc<str>> = BTreeMap::new();
        fn shared<'t>(names: &mut BTreeMap<&'t str, Arc<str>>, name: &'t str) -> Arc<str> {
            names.entry(name).or_insert_with(|| Arc::from(name)).clone()
        }
        for tj in &trace.jobs {
            let team = match team_index.get(&tj.account) {
                Some(&i) => i,
                None => {
                    let i = shares.len();
                    team_index.insert(tj.account.clone(), i);
                    shares.push(0.0);
                    team_names.push(tj.account.clone());
                    team_rates.push(0.0);
                    i
                }
            };
            // The contract as the cluster's rules leave it: job_submit refuses
            // an over-long one, the plugin runs such a job unallocated.
            let contract = config.contracts.resolve_seconds(tj.contract_s, tj.resumable).unwrap_or(Contract::UNALLOCATED);
            let gpu_type: Option<Arc<str>> = tj.gpu_type.as_deref().map(Arc::from);
            let ask = config.weight_of(gpu_type.as_deref());
            let job = Job {
                id: tj.job_id,
                account: shared(&mut names, &tj.account),
                user: shared(&mut names, &tj.user),
                contract,
                gpus: tj.gpus,
                weight: ask,
                submit_s: tj.submit_s,
                start_s: None,
                within_team: tj.priority,
                restarts: 0,
                // The trace's time limit, as the plugin sees it (none: none).
                time_limit_s: tj.time_limit_s,
                earlier_run_s: 0,
                // A trace row is one job that holds what it asks for.
                tasks: 1,
                holds_gpus: None,
            };
            let node = if job.is_allocated(&Funded::new(&config.tree, &alloc)) { config.tree.id(&job.account) } else { None };
            let debug_ok = !policy.tally() || config.priority.may_use_debug_nodes(&job, node.is_some());
            jobs.push(SimJob {
                job,
                gpu_type,
                ask,
                class: tj.class,
                team,
                node,
                duration_s: tj.duration_s.max(1),
                remaining_s: tj.duration_s.max(1),
                asks: tj.contract_s > 0,
                priority_col: tj.priority,
                status: Status::Waiting,
                run_start: 0,
                placement: Vec::new(),
                epoch: 0,
                planned: false,
                time_limit_s: tj.time_limit_s,
                belief_s: tj.duration_s.max(1),
                settled: true,
                debug_ok,
            });
        }
        let teams = shares.len();
        let funded = Funded::new(&config.tree, &alloc);
        let team_nodes = team_names.iter().map(|t| config.tree.id(t).filter(|&id| funded.funded_at(id))).collect();
        let units = jobs.iter().map(|j| j.job.units());
        let whole_units = units.clone().all(|u| u.fract() == 0.0) && units.sum::<f64>() < 2f64.powi(53);
        let ledger = config.new_ledger();
        // Ranked at the simulated size (fixed GPU-hour budgets depend on it).
        let fs = FairShare::compute(&config.tree, &alloc, &ledger.usage(origin));
        let rt_reserve = if policy == Policy::Fifo { realtime_daily_peaks(trace, origin) } else { Vec::new() };
        let ranks = team_names.iter().map(|t| fs.standing(t).map(|s| s.rank)).collect();
        let n = config.tree.len();
        let ent = Entitlement::compute(&config.tree, &alloc, &Load::new(&config.tree));
        Ok(Sim {
            policy,
            s,
            config,
            cluster,
            keys: vec![0; jobs.len()],
            team_queues: vec![BTreeSet::new(); teams],
            team_walks: vec![TeamWalk::default(); teams],
            jobs,
            queue: BTreeSet::new(),
            running: BTreeSet::new(),
            team_names,
            team_rates,
            team_nodes,
            whole_units,
            ends: BinaryHeap::new(),
            requeues: BinaryHeap::new(),
            ledger,
            usage_now: WindowUsage::default(),
            marks: BTreeMap::new(),
            ranks,
            fs,
            alloc,
            run_gpus: vec![0.0; n],
            wait_gpus: vec![0.0; n],
            debug_run: vec![0.0; n],
            debug_wait: vec![0.0; n],
            ent,
            ent_stale: true,
            order: QueueOrder { priorities: Vec::new(), ahead: Vec::new(), waiting_gpus: BTreeMap::new() },
            usage: vec![0.0; teams],
            usage_at: origin,
            mf_marks: vec![0; trace.jobs.len()],
            shares,
            rt_reserve,
            rt_busy: 0,
            nonrt_blocked: 0,
            plan_rank: vec![u32::MAX; trace.jobs.len()],
            runs: Vec::new(),
            log: log.then(Vec::new),
            violations: 0,
            origin,
            predictor: (s.plan_durations == PlanDurations::Predicted).then(|| {
                let keys = trace
                    .jobs
                    .iter()
                    .map(|tj| JobKey {
                        user: tj.user.clone(),
                        account: tj.account.clone(),
                        name: tj.name.clone(),
                        class: Some(tj.class.name().to_string()),
                        method: None,
                        model_bucket: None,
                    })
                    .collect();
                (Predictor::new(PredictRules::default()), keys)
            }),
            outcomes: Vec::new(),
        })
    }

    /// Take a [`StartState`] at `t0` (the first instant): the ledger and
    /// its ranking, the real submit times, and the running jobs started.
    fn resume(&mut self, st: &StartState, t0: u64) -> R<()> {
        if st.ledger.bucket_s() != self.config.bucket_s || st.ledger.window_s() != self.config.window_s {
            return Err(broken(t0, "the start ledger's buckets or window differ from the config's".to_string()));
        }
        self.ledger = st.ledger.clone();
        self.fs = FairShare::compute(&self.config.tree, &self.alloc, &self.ledger.usage(t0));
        self.ranks = self.team_names.iter().map(|t| self.fs.standing(t).map(|s| s.rank)).collect();
        for &(i, submit_s) in &st.submitted {
            if let Some(j) = self.jobs.get_mut(i) {
                j.job.submit_s = submit_s.min(t0);
            }
        }
        for r in &st.running {
            let Some(j) = self.jobs.get_mut(r.job) else { continue };
            j.remaining_s = r.remaining_s.max(1);
            j.job.earlier_run_s = r.ran_s;
            self.enqueue(r.job, t0);
            let Some(p) = self.cluster.place_for(self.jobs[r.job].job.gpus, self.jobs[r.job].gpu_type.as_deref(), true) else {
                return Err(broken(t0, format!("running job {} does not fit the cluster", self.jobs[r.job].job.id)));
            };
            self.start(r.job, p, t0)?;
        }
        Ok(())
    }

    fn note(&mut self, h: Happening) {
        if let Some(l) = &mut self.log {
            l.push(h);
        }
    }

    // ---- starting, ending ----------------------------------------------------

    fn start(&mut self, i: usize, p: Placement, now: u64) -> R<()> {
        if now < self.jobs[i].job.submit_s {
            return Err(broken(now, format!("job {} starts before its submission", self.jobs[i].job.id)));
        }
        for &(n, g) in &p {
            if self.cluster.free[n] < g {
                return Err(broken(now, format!("node {n} over-committed by job {}", self.jobs[i].job.id)));
            }
        }
        self.dequeue(i);
        self.cluster.take(&p);
        self.running.insert(i);
        let blocked = Cluster::blocked(&p);
        // It waited at its type's weight; it runs at the weight of its GPUs.
        let waited = self.jobs[i].job.units();
        self.jobs[i].job.weight = self.cluster.weight_of(&p, &self.config.cluster.gpu_types);
        if let Some(n) = self.jobs[i].node {
            let g = self.jobs[i].job.units();
            self.wait_gpus[n] = settle(self.wait_gpus[n] - waited);
            self.run_gpus[n] += g;
            self.ent.add_running(n, g);
            if self.config.priority.is_debug(&self.jobs[i].job) {
                let d = f64::from(self.jobs[i].job.gpus);
                self.debug_wait[n] -= d;
                self.debug_run[n] += d;
                self.ent.add_debug_running(n, d);
            }
            self.ent_stale = true;
        }
        let j = &mut self.jobs[i];
        j.status = Status::Running;
        j.run_start = now;
        j.job.start_s = Some(now);
        j.epoch += 1;
        j.placement = p;
        let (end, epoch, rt) = (now + j.remaining_s, j.epoch, j.class == Class::Realtime);
        let nodes = j.placement.iter().map(|&(n, _)| n).collect();
        let id = j.job.id;
        if self.policy == Policy::Fifo {
            if rt {
                self.rt_busy += blocked;
            } else {
                self.nonrt_blocked += blocked;
            }
        }
        self.ends.push(Reverse((end, i, epoch)));
        self.note(Happening::Start { t: now, job: id, nodes });
        Ok(())
    }

    /// Stop a running job (end or preemption): release, charge, record the run.
    fn stop(&mut self, i: usize, now: u64, end: RunEnd) {
        let p = std::mem::take(&mut self.jobs[i].placement);
        self.cluster.release(&p);
        self.running.remove(&i);
        if self.policy == Policy::Fifo {
            let blocked = Cluster::blocked(&p);
            if self.jobs[i].class == Class::Realtime {
                self.rt_busy -= blocked;
            } else {
                self.nonrt_blocked -= blocked;
            }
        }
        if let Some(n) = self.jobs[i].node {
            let g = self.jobs[i].job.units();
            self.run_gpus[n] = settle(self.run_gpus[n] - g);
            self.ent.add_running(n, -g);
            if self.config.priority.is_debug(&self.jobs[i].job) {
                let d = f64::from(self.jobs[i].job.gpus);
                self.debug_run[n] -= d;
                self.ent.add_debug_running(n, -d);
            }
            self.ent_stale = true;
        }
        match self.policy {
            Policy::Tally | Policy::TallyPlanner => {
                let j = &self.jobs[i];
                charge_from_mark(&mut self.marks, &j.job, &Funded::new(&self.config.tree, &self.alloc), &mut self.ledger, j.run_start, now);
                // Charged to its end: a next run is charged from its start.
                self.marks.remove(&j.job.id);
            }
            Policy::Multifactor => {
                self.decay_to(now);
                self.mf_charge(i, now);
            }
            Policy::Fifo | Policy::Planner => {}
        }
        let held = self.jobs[i].job.weight;
        self.runs.push(Run { job: i, start_s: self.jobs[i].run_start, end_s: now, end, weight: Some(held) });
        self.jobs[i].job.start_s = None;
        self.jobs[i].job.weight = self.jobs[i].ask;
    }

    fn finish(&mut self, i: usize, now: u64) {
        self.stop(i, now, RunEnd::Completed);
        if let Some((p, keys)) = &mut self.predictor {
            p.observe(&keys[i], self.jobs[i].duration_s);
        }
        let j = &mut self.jobs[i];
        j.status = Status::Done;
        j.remaining_s = 0;
        let id = j.job.id;
        self.note(Happening::End { t: now, job: id });
    }
}

/// Jobs that do not fit and may try to preempt in one scheduling pass (at a
/// submission or a re-plan), in priority order.
pub const MAX_PREEMPT_TRIES: usize = 32;

/// The priority plugin's thread runs at most this often when job ends poke
/// it (`tally_engine::worker::MIN_POKE_GAP`).
const MIN_RERANK_GAP_S: u64 = 1;

/// Peak concurrent GPUs of realtime jobs, per day from `origin` (FIFO holds
/// that many GPUs for realtime work all day).
fn realtime_daily_peaks(trace: &Trace, origin: u64) -> Vec<u32> {
    let mut points: Vec<(u64, i64)> = Vec::new();
    for j in trace.jobs.iter().filter(|j| j.class == Class::Realtime) {
        points.push((j.submit_s, i64::from(j.gpus)));
        points.push((j.submit_s + j.duration_s.max(1), -i64::from(j.gpus)));
    }
    points.sort_by_key(|&(t, d)| (t, d));
    let mut peaks: Vec<u32> = Vec::new();
    let mut level: i64 = 0;
    for (t, d) in points {
        level += d;
        let day = ((t.saturating_sub(origin)) / DAY_S) as usize;
        if peaks.len() <= day {
            peaks.resize(day + 1, 0);
        }
        peaks[day] = peaks[day].max(level.max(0) as u32);
    }
    peaks
}

/// The simulated cluster's GPUs by type for `gpus` GPUs: every type of
/// `[cluster.gpu_types]` with a count, that many (in the table's order),
/// then the rest untyped. Without counts: `gpus` untyped GPUs, as always.
pub fn gpu_groups(config: &Config, gpus: u32) -> Result<Vec<GpuGroup>, SimError> {
    let typed = u64::from(config.cluster.gpu_types.counted_gpus());
    if typed > u64::from(gpus) {
        return Err(SimError::TypedGpus { typed, gpus });
    }
    let mut groups: Vec<GpuGroup> = config.cluster.gpu_types.iter().filter_map(|(t, ty)| ty.gpus.map(|n| (Some(t.clone()), n))).collect();
    let rest = gpus - typed as u32;
    if rest > 0 || groups.is_empty() {
        groups.push((None, rest));
    }
    Ok(groups)
}

/// A running sum of weighted GPUs back at zero: exactly zero (sums of
/// fractional weights leave residues like 1e-15).
fn settle(x: f64) -> f64 {
    if x.abs() < 1e-9 {
        0.0
    } else {
        x
    }
}

/// The scoring's view of a trace under a config: each job's team (leaves of
/// the tree in order, then accounts outside it) and the teams' allocation
/// rates at `gpus` GPUs. Jobs larger than the cluster never ask.
pub fn job_meta(trace: &Trace, config: &Config, gpus: u32) -> (Vec<JobMeta>, Vec<(String, f64)>) {
    let alloc = config.allocation(gpus).unwrap_or_else(|_| config.allocation(config.ranking_gpus()).expect("validated config"));
    let alloc = tally_allocator::Allocation { capacity: config.capacity(gpus), ..alloc };
    let mut teams: Vec<(String, f64)> = config.tree.leaves().map(|id| (config.tree.node(id).name.clone(), alloc.rate_gpus(id))).collect();
    // GPUs a job of each type could use (every GPU for an untyped one).
    let groups = gpu_groups(config, gpus).unwrap_or_default();
    let usable = |t: Option<&str>| match t {
        None => gpus,
        Some(t) => groups.iter().filter(|(g, _)| g.as_deref() == Some(t)).map(|&(_, n)| n).sum(),
    };
    let mut index: BTreeMap<String, usize> = teams.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)).collect();
    let jobs = trace
        .jobs
        .iter()
        .map(|tj| {
            let team = *index.entry(tj.account.clone()).or_insert_with(|| {
                teams.push((tj.account.clone(), 0.0));
                teams.len() - 1
            });
            JobMeta {
                team,
                gpus: tj.gpus,
                submit_s: tj.submit_s,
                duration_s: tj.duration_s.max(1),
                asks: tj.contract_s > 0 && tj.gpus <= usable(tj.gpu_type.as_deref()),
                resumable: tj.resumable,
                class: tj.class,
                priority: tj.priority,
                weight: config.weight_of(tj.gpu_type.as_deref()),
            }
        })
        .collect();
    (jobs, teams)
}

/// Replay a trace under one policy. `progress` is called now and then with
/// the simulated time (for a progress bar).
pub fn run(trace: &Trace, config: &Config, policy: Policy, s: Settings, progress: &mut dyn FnMut(u64)) -> R<PolicyResult> {
    run_inner(trace, config, policy, s, progress, false, None).map(|(r, _)| r)
}

/// As [`run`], also returning every start, end and preemption (for tests).
pub fn run_logged(trace: &Trace, config: &Config, policy: Policy, s: Settings) -> R<(PolicyResult, Vec<Happening>)> {
    run_inner(trace, config, policy, s, &mut |_| {}, true, None).map(|(r, l)| (r, l.unwrap_or_default()))
}

/// A replay that starts from a moment of a live cluster instead of an empty
/// one (`crate::forecast`): every job of the trace is submitted at its first
/// instant `t0`; this says which of them already run and what the ledger
/// holds. The one hook of the replay for it: without a start state
/// (`run`, `run_logged`) nothing changes.
#[derive(Debug, Clone)]
pub struct StartState {
    /// The ledger at `t0`: the window's usage so far.
    pub ledger: Ledger,
    /// Jobs (by index into the trace) running at `t0`: placed at `t0`
    /// before anything else is scheduled, with `ran_s` already run (their
    /// contract counts it) and `remaining_s` left.
    pub running: Vec<Resumed>,
    /// Each job's real submit time, by index into the trace (Slurm's
    /// tie-break and the inside-team order read it); at most `t0`.
    pub submitted: Vec<(usize, u64)>,
    /// Stop once this job (by index into the trace) has started: the
    /// replay's first start of it is its last happening (a forecast needs
    /// nothing after it). `None`: run until the queue drains.
    pub until_started: Option<usize>,
}

/// A job already running at a replay's start ([`StartState`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumed {
    pub job: usize,
    pub ran_s: u64,
    pub remaining_s: u64,
}

/// As [`run_logged`], from a start state: the ledger as given, the
/// running jobs placed first, and a re-ranking at the first instant (as
/// the priority plugin has one for a live queue).
pub fn run_from(trace: &Trace, config: &Config, policy: Policy, s: Settings, start: &StartState) -> R<(PolicyResult, Vec<Happening>)> {
    run_inner(trace, config, policy, s, &mut |_| {}, true, Some(start)).map(|(r, l)| (r, l.unwrap_or_default()))
}

fn run_inner(
    trace: &Trace,
    config: &Config,
    policy: Policy,
    s: Settings,
    progress: &mut dyn FnMut(u64),
    log: bool,
    start: Option<&StartState>,
) -> R<(PolicyResult, Option<Vec<Happening>>)> {
    let mut sim = Sim::new(trace, config, policy, s, log)?;
    let origin = sim.origin;
    if let Some(st) = start {
        sim.resume(st, origin)?;
    }
    let window_end = trace.jobs.last().map_or(origin, |j| j.submit_s);
    // FIFO re-plans its realtime hold daily; Tally at the plugin's
    // calc_period (the config's); multifactor and the planner every replan_s.
    let tick = match policy {
        Policy::Fifo => DAY_S,
        Policy::Tally | Policy::TallyPlanner => config.calc_period_s.max(1),
        Policy::Multifactor | Policy::Planner => s.replan_s.max(1),
    };
    let plan_every = s.plan_interval_s.max(1);
    // From a start state the queue is ranked at once (the live plugin
    // already ranked it).
    let mut next_tick = if start.is_some() { origin } else { origin - origin % tick + tick };
    let mut next_plan = origin - origin % plan_every + plan_every;
    let mut next_submit = 0;
    let mut events: u64 = 0;
    let mut last_t = origin;
    let total = sim.cluster.total();
    let mut unrunnable = 0;
    let mut last_rank = origin;
    loop {
        let t_sub = trace.jobs.get(next_submit).map_or(u64::MAX, |j| j.submit_s);
        let t_end = sim.ends.peek().map_or(u64::MAX, |Reverse((t, _, _))| *t);
        let t_req = sim.requeues.peek().map_or(u64::MAX, |Reverse((t, _))| *t);
        let idle = sim.queue.is_empty();
        let t_tick = if idle { u64::MAX } else { next_tick };
        let t_plan = if idle || policy != Policy::TallyPlanner { u64::MAX } else { next_plan };
        let t = t_sub.min(t_end).min(t_req).min(t_tick).min(t_plan);
        if t == u64::MAX || t > window_end.saturating_add(s.drain_limit_s) {
            break;
        }
        last_t = t;
        let mut ended = false;
        while let Some(&Reverse((te, i, epoch))) = sim.ends.peek() {
            if te != t {
                break;
            }
            sim.ends.pop();
            if sim.jobs[i].status == Status::Running && sim.jobs[i].epoch == epoch {
                sim.finish(i, t);
                ended = true;
            }
            events += 1;
        }
        // A job ended: the priority plugin re-ranks at once (priority_p_job_end
        // pokes its thread), before the scheduler hands out the GPUs.
        if ended && policy.tally() && t >= last_rank + MIN_RERANK_GAP_S {
            sim.replan(t);
            last_rank = t;
        }
        let mut preempt = false;
        while let Some(&Reverse((tr, i))) = sim.requeues.peek() {
            if tr != t {
                break;
            }
            sim.requeues.pop();
            sim.enqueue(i, t);
            preempt = true;
            events += 1;
        }
        while next_submit < trace.jobs.len() && trace.jobs[next_submit].submit_s == t {
            preempt = true;
            let i = next_submit;
            next_submit += 1;
            events += 1;
            // Already running from a start state.
            if sim.jobs[i].status == Status::Running {
                continue;
            }
            sim.believe(i);
            if sim.jobs[i].job.gpus > sim.cluster.gpus_for(sim.jobs[i].gpu_type.as_deref()) {
                sim.jobs[i].status = Status::Unrunnable;
                unrunnable += 1;
                continue;
            }
            sim.enqueue(i, t);
        }
        if t >= next_tick {
            preempt = true;
            sim.replan(t);
            last_rank = t;
            next_tick = t - t % tick + tick;
            events += 1;
        }
        if policy == Policy::TallyPlanner && t >= next_plan {
            sim.plan_tally(t);
            next_plan = t - t % plan_every + plan_every;
            events += 1;
        }
        sim.schedule(t, preempt)?;
        // (A job's epoch counts its starts.)
        if start.and_then(|st| st.until_started).is_some_and(|i| sim.jobs.get(i).is_some_and(|j| j.epoch > 0)) {
            break;
        }
        if events % 4096 == 0 {
            progress(t);
        }
    }
    progress(last_t);
    let still = sim.jobs.iter().filter(|j| matches!(j.status, Status::Running | Status::Waiting | Status::Requeued)).count();
    // Every started job ended or was preempted, unless the drain limit cut the run.
    if still > 0 && sim.ends.is_empty() && sim.queue.is_empty() && sim.requeues.is_empty() {
        return Err(broken(last_t, "jobs left running with no end event".to_string()));
    }
    let running: Vec<usize> = sim.running.iter().copied().collect();
    for i in running {
        let j = &sim.jobs[i];
        sim.runs.push(Run { job: i, start_s: j.run_start, end_s: last_t, end: RunEnd::Cut, weight: Some(j.job.weight) });
    }
    let (meta, teams) = job_meta(trace, config, total);
    debug_assert_eq!(teams.iter().map(|t| &t.0).collect::<Vec<_>>(), sim.team_names.iter().collect::<Vec<_>>());
    debug_assert!(teams.iter().zip(&sim.team_rates).all(|(t, r)| (t.1 - r).abs() < 1e-9));
    let scored = score(&meta, &sim.runs, &teams, total, last_t);
    let belief_mae = (s.plan_durations != PlanDurations::True).then(|| mae(&sim.outcomes));
    let result = PolicyResult { policy: policy.name(), score: scored, contract_violations: sim.violations, events, unrunnable, belief_mae };
    Ok((result, sim.log))
}
