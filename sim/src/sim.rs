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

use crate::cluster::{Cluster, GpuGroup, Placement};
use crate::metrics::{score, JobMeta, Run, RunEnd, Scored};
use crate::trace::{Class, Trace};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;
use tally_allocator::priority::InsideKey;
use tally_allocator::tree::NodeId;
use tally_allocator::{
    charge_from_mark, inside_key, order_queue, protection_after, Contract, Entitlement, FairShare, Funded, Job, Ledger, Load, Moment, QueueOrder,
    QueueWalk, Requeue, Standing, VictimPool, Weight, DAY_S, HOUR_S, WEEK_S,
};
use tally_config::Config;
use tally_planner::predict::{mae, JobKey, Mae, Outcome, PredictRules, Predictor};
use tally_planner::queue::{plan_queue, QueueRules, RunningJob, WaitingJob};
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
    fn tally(self) -> bool {
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
    /// What the planners believe its whole duration is ([`PlanDurations`];
    /// set at submission).
    belief_s: u64,
}

/// See [`Sim::preempt_group`].
type PreemptGroup = (usize, bool, (i32, bool), bool);

/// The queue in Slurm's order: (priority descending, submit, job id, index).
type QueueKey = (Reverse<i64>, u64, u64, usize);
/// A team's waiting jobs: ([`inside_key`], index).
type TeamQueue = BTreeSet<(InsideKey, usize)>;

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
    running: BTreeSet<usize>,
    /// Team names (leaves of the tree, then accounts outside it) and their
    /// allocation rates in GPUs.
    team_names: Vec<String>,
    team_rates: Vec<f64>,
    ends: BinaryHeap<Reverse<(u64, usize, u32)>>,
    /// Requeued jobs becoming eligible: (time, job).
    requeues: BinaryHeap<Reverse<(u64, usize)>>,
    // tally
    ledger: Ledger,
    marks: BTreeMap<u64, u64>,
    fs: FairShare,
    /// The budgets at the simulated cluster size.
    alloc: tally_allocator::Allocation,
    /// Each team's standing in `fs` (looked up once per re-plan).
    standings: Vec<Option<Standing>>,
    /// Allocated GPUs running and waiting (eligible) per tree node, in
    /// budget units (GPUs × weight).
    run_gpus: Vec<f64>,
    wait_gpus: Vec<f64>,
    /// What each team runs and is owed now (recomputed every pass, kept
    /// current through the pass).
    ent: Entitlement,
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
        let cluster = Cluster::typed(&gpu_groups(config, s.gpus)?, s.gpus_per_node);
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
        // One shared name per account (the queue walk tells teams apart by
        // address first, as the plugin's copies share theirs).
        let mut names: BTreeMap<&str, Arc<str>> = BTreeMap::new();
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
                account: names.entry(tj.account.as_str()).or_insert_with(|| Arc::from(tj.account.as_str())).clone(),
                user: tj.user.as_str().into(),
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
            };
            let node = if job.is_allocated(&Funded::new(&config.tree, &alloc)) { config.tree.id(&job.account) } else { None };
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
            });
        }
        let teams = shares.len();
        let ledger = config.new_ledger();
        // Ranked at the simulated size (fixed GPU-hour budgets depend on it).
        let fs = FairShare::compute(&config.tree, &alloc, &ledger.usage(origin));
        let rt_reserve = if policy == Policy::Fifo { realtime_daily_peaks(trace, origin) } else { Vec::new() };
        let standings = team_names.iter().map(|t| fs.standing(t).cloned()).collect();
        let n = config.tree.len();
        let ent = Entitlement::compute(&config.tree, &alloc, &Load::new(&config.tree));
        Ok(Sim {
            policy,
            s,
            config,
            cluster,
            keys: vec![0; jobs.len()],
            team_queues: vec![BTreeSet::new(); teams],
            jobs,
            queue: BTreeSet::new(),
            running: BTreeSet::new(),
            team_names,
            team_rates,
            ends: BinaryHeap::new(),
            requeues: BinaryHeap::new(),
            ledger,
            marks: BTreeMap::new(),
            standings,
            fs,
            alloc,
            run_gpus: vec![0.0; n],
            wait_gpus: vec![0.0; n],
            ent,
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
        self.standings = self.team_names.iter().map(|t| self.fs.standing(t).cloned()).collect();
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
            let Some(p) = self.cluster.place_for(self.jobs[r.job].job.gpus, self.jobs[r.job].gpu_type.as_deref()) else {
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

    // ---- priorities --------------------------------------------------------

    /// The key of a job entering the queue (Slurm's `priority_p_set` at
    /// submit or requeue).
    fn key_at_entry(&self, i: usize, now: u64) -> i64 {
        let j = &self.jobs[i];
        match self.policy {
            // Arrival order: earlier first (ties: job id, by the sort).
            Policy::Fifo => -(j.job.submit_s as i64),
            Policy::Planner => -i64::from(self.plan_rank[i]),
            Policy::Tally | Policy::TallyPlanner => {
                let p = self.order.priority_of_new(&j.job, &self.fs, &self.ent, &self.config.priority);
                let p = if self.policy == Policy::TallyPlanner { p.planned(j.planned) } else { p };
                i64::from(p.value)
            }
            Policy::Multifactor => self.multifactor_key(i, now),
        }
    }

    /// priority = 10000·F + 1000·age + 2000·qos,  F = 2^(−U/S)
    fn multifactor_key(&self, i: usize, now: u64) -> i64 {
        let j = &self.jobs[i];
        let total: f64 = self.usage.iter().sum();
        let u = if total > 0.0 { self.usage[j.team] / total } else { 0.0 };
        let share = self.shares[j.team];
        let f = if share > 0.0 { 2f64.powf(-u / share) } else { 0.0 };
        let age = (now.saturating_sub(j.job.submit_s) as f64 / WEEK_S as f64).min(1.0);
        let qos = if high_qos(j.class) { 1.0 } else { 0.0 };
        (10_000.0 * f + 1000.0 * age + 2000.0 * qos).round() as i64
    }

    /// Recompute every waiting job's key (the policy's periodic re-plan).
    fn rekey(&mut self, now: u64) {
        let mut keys: Vec<(usize, i64)> = Vec::with_capacity(self.queue.len());
        match self.policy {
            Policy::Fifo => return,
            Policy::Planner => keys.extend(self.queue.iter().map(|&(_, _, _, i)| (i, -i64::from(self.plan_rank[i])))),
            Policy::Multifactor => keys.extend(self.queue.iter().map(|&(_, _, _, i)| (i, self.multifactor_key(i, now)))),
            Policy::Tally | Policy::TallyPlanner => {
                self.refresh_entitlement();
                let mut walk = QueueWalk::new(&self.fs, &self.ent, &self.config.priority);
                for q in &self.team_queues {
                    for &(_, i) in q {
                        let p = walk.next(&self.jobs[i].job);
                        let p = if self.policy == Policy::TallyPlanner { p.planned(self.jobs[i].planned) } else { p };
                        keys.push((i, i64::from(p.value)));
                    }
                }
                self.order = walk.finish();
            }
        }
        for (i, k) in keys {
            if self.keys[i] != k {
                self.queue.remove(&self.queue_key(i));
                self.keys[i] = k;
                self.queue.insert(self.queue_key(i));
            }
        }
    }

    fn inside_key(&self, i: usize) -> (InsideKey, usize) {
        (inside_key(&self.jobs[i].job, &self.config.priority), i)
    }

    fn queue_key(&self, i: usize) -> QueueKey {
        self.queue_key_at(i, self.keys[i])
    }

    /// Where job `i` queues at priority `key`: Slurm's order, the priority
    /// then submit time then job id.
    fn queue_key_at(&self, i: usize, key: i64) -> QueueKey {
        (Reverse(key), self.jobs[i].job.submit_s, self.jobs[i].job.id, i)
    }

    /// Into the queue (submitted, or eligible again after a requeue).
    fn enqueue(&mut self, i: usize, now: u64) {
        self.jobs[i].status = Status::Waiting;
        if let Some(n) = self.jobs[i].node {
            self.wait_gpus[n] += self.jobs[i].job.units();
        }
        self.keys[i] = self.key_at_entry(i, now);
        self.queue.insert(self.queue_key(i));
        let k = self.inside_key(i);
        self.team_queues[self.jobs[i].team].insert(k);
    }

    /// Re-plan: charge, re-rank (tally); decay and charge (multifactor);
    /// then every waiting job's priority anew.
    fn replan(&mut self, now: u64) {
        match self.policy {
            Policy::Fifo => {}
            Policy::Planner => self.plan_queue(now),
            Policy::Tally | Policy::TallyPlanner => {
                for &i in &self.running {
                    let j = &self.jobs[i];
                    charge_from_mark(&mut self.marks, &j.job, &Funded::new(&self.config.tree, &self.alloc), &mut self.ledger, j.run_start, now);
                }
                self.ledger.prune(now);
                self.fs = FairShare::compute(&self.config.tree, &self.alloc, &self.ledger.usage(now));
                self.standings = self.team_names.iter().map(|t| self.fs.standing(t).cloned()).collect();
            }
            Policy::Multifactor => {
                self.decay_to(now);
                let running: Vec<usize> = self.running.iter().copied().collect();
                for i in running {
                    self.mf_charge(i, now);
                }
            }
        }
        self.rekey(now);
    }

    /// The entitlement from the per-node counters (every scheduling pass).
    fn refresh_entitlement(&mut self) {
        let mut load = Load::new(&self.config.tree);
        for n in 0..self.run_gpus.len() {
            load.run_units(n, self.run_gpus[n]);
            load.wait_units(n, self.wait_gpus[n]);
        }
        self.ent = Entitlement::compute(&self.config.tree, &self.alloc, &load);
    }

    fn decay_to(&mut self, now: u64) {
        if now > self.usage_at {
            let f = 0.5f64.powf((now - self.usage_at) as f64 / self.s.half_life_s as f64);
            for u in &mut self.usage {
                *u *= f;
            }
            self.usage_at = now;
        }
    }

    fn mf_charge(&mut self, i: usize, now: u64) {
        let j = &self.jobs[i];
        let from = self.mf_marks[i].max(j.run_start);
        if now > from {
            self.usage[j.team] += j.job.units() * (now - from) as f64;
            self.mf_marks[i] = now;
        }
    }

    // ---- starting, ending, preempting ----------------------------------------------

    fn fifo_reserve(&self, now: u64) -> u32 {
        let day = ((now - self.origin) / DAY_S) as usize;
        self.rt_reserve.get(day).copied().unwrap_or(0)
    }

    /// A job is submitted: what the planners will believe its duration is.
    fn believe(&mut self, i: usize) {
        let j = &self.jobs[i];
        let limit = j.time_limit_s.unwrap_or(j.duration_s);
        let belief = match (self.s.plan_durations, &self.predictor) {
            (PlanDurations::True, _) => return,
            (PlanDurations::Limit, _) => limit,
            (PlanDurations::Predicted, Some((p, keys))) => p.predict(&keys[i], j.time_limit_s).duration_s,
            (PlanDurations::Predicted, None) => limit,
        };
        self.outcomes.push(Outcome { predicted_s: belief, actual_s: j.duration_s, time_limit_s: j.time_limit_s });
        self.jobs[i].belief_s = belief.max(1);
    }

    /// The work the planners believe job `i` has left at `now`: the truth
    /// ([`PlanDurations::True`]), else its belief minus the work done (this
    /// run and, if resumable, the runs before), or when it has outlived its
    /// belief, its time limit minus the work done.
    fn believed_left(&self, i: usize, now: u64) -> u64 {
        let j = &self.jobs[i];
        let ran = if j.status == Status::Running { now.saturating_sub(j.run_start) } else { 0 };
        if self.s.plan_durations == PlanDurations::True {
            return j.remaining_s.saturating_sub(ran);
        }
        let done = j.duration_s.saturating_sub(j.remaining_s) + ran;
        if j.belief_s > done {
            j.belief_s - done
        } else {
            j.time_limit_s.unwrap_or(j.duration_s).saturating_sub(done).max(1)
        }
    }

    fn running_for_plan(&self, now: u64) -> Vec<RunningJob> {
        self.running
            .iter()
            .map(|&i| {
                let j = &self.jobs[i];
                let nodes = j.placement.iter().map(|&(n, g)| (n as u32, g)).collect();
                RunningJob { nodes, remaining_s: Some(self.believed_left(i, now)) }
            })
            .collect()
    }

    fn waiting(&self) -> Vec<usize> {
        self.queue.iter().map(|&(_, _, _, i)| i).collect()
    }

    /// Planner: plan the next 24 h for the oldest waiting jobs, running
    /// jobs pinned where they run, and re-rank the queue by planned start.
    fn plan_queue(&mut self, now: u64) {
        let running = self.running_for_plan(now);
        let mut waiting = self.waiting();
        waiting.sort_by_key(|&i| (self.jobs[i].job.submit_s, self.jobs[i].job.id));
        // The oldest PLAN_JOBS jobs, valued by the trace's priority (Dharma's
        // priority × time decay); the durations are the true remaining work,
        // or the limit or a prediction (`Settings::plan_durations`).
        let queue: Vec<WaitingJob> = waiting
            .iter()
            .take(PLAN_JOBS)
            .map(|&i| {
                let j = &self.jobs[i];
                WaitingJob {
                    id: i as u64,
                    gpus: j.job.gpus,
                    duration_s: Some(self.believed_left(i, now)),
                    value: Some(f64::from(j.priority_col.max(0)) + 1.0),
                }
            })
            .collect();
        let rules = QueueRules { step_s: PLAN_STEP_S, steps: PLAN_STEPS, decay: 0.97, max_jobs: PLAN_JOBS, default_duration_s: PLAN_STEP_S };
        let plan = plan_queue(self.cluster.total(), self.cluster.gpus_per_node, &rules, &running, &queue);
        for &i in &waiting {
            self.plan_rank[i] = u32::MAX;
        }
        for (&i, &step) in &plan.start_step {
            self.plan_rank[i as usize] = step as u32;
        }
    }

    /// tally+planner, as the plugin's planner thread: the waiting jobs in
    /// Tally's order without the plan bit, planned by `plan::queue` with its
    /// default values; the jobs the plan starts now get the plan bit.
    fn plan_tally(&mut self, now: u64) {
        self.refresh_entitlement();
        let running = self.running_for_plan(now);
        let waiting = self.waiting();
        let jobs: Vec<&Job> = waiting.iter().map(|&i| &self.jobs[i].job).collect();
        let order = order_queue(&jobs, &self.fs, &self.ent, &self.config.priority);
        let mut by_value: Vec<QueueKey> = waiting.iter().zip(&order.priorities).map(|(&i, p)| self.queue_key_at(i, i64::from(p.value))).collect();
        by_value.sort_unstable();
        let planner = self.config.planner.map(|p| p.rules).unwrap_or_default();
        let queue: Vec<WaitingJob> = by_value
            .iter()
            .map(|&(_, _, _, i)| WaitingJob { id: i as u64, gpus: self.jobs[i].job.gpus, duration_s: Some(self.believed_left(i, now)), value: None })
            .collect();
        let plan = plan_queue(self.cluster.total(), self.cluster.gpus_per_node, &planner, &running, &queue);
        let starts: BTreeSet<usize> = plan.starts_now().map(|i| i as usize).collect();
        for &i in &waiting {
            self.jobs[i].planned = starts.contains(&i);
        }
        self.rekey(now);
    }

    /// Where job `i` fits now (FIFO keeps its realtime reservation free).
    fn fit(&self, i: usize, now: u64) -> Option<Placement> {
        let j = &self.jobs[i];
        let p = self.cluster.place_for(j.job.gpus, j.gpu_type.as_deref())?;
        if self.policy == Policy::Fifo && j.class != Class::Realtime {
            let cap = self.cluster.total().saturating_sub(self.fifo_reserve(now).max(self.rt_busy));
            if self.nonrt_blocked + Cluster::blocked(&p) > cap {
                return None;
            }
        }
        Some(p)
    }

    fn start(&mut self, i: usize, p: Placement, now: u64) -> R<()> {
        if now < self.jobs[i].job.submit_s {
            return Err(broken(now, format!("job {} starts before its submission", self.jobs[i].job.id)));
        }
        for &(n, g) in &p {
            if self.cluster.free[n] < g {
                return Err(broken(now, format!("node {n} over-committed by job {}", self.jobs[i].job.id)));
            }
        }
        self.queue.remove(&self.queue_key(i));
        let k = self.inside_key(i);
        self.team_queues[self.jobs[i].team].remove(&k);
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
        }
        match self.policy {
            Policy::Tally | Policy::TallyPlanner => {
                let j = &self.jobs[i];
                charge_from_mark(&mut self.marks, &j.job, &Funded::new(&self.config.tree, &self.alloc), &mut self.ledger, j.run_start, now);
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

    fn preempt(&mut self, v: usize, by: usize, now: u64) -> R<()> {
        let ran = now - self.jobs[v].run_start;
        // Inside a declared minimum runtime (over all its runs)?
        if self.jobs[v].job.contract_left_s(now) > 0 && self.jobs[v].node.is_some() {
            self.violations += 1;
            if self.policy.tally() {
                return Err(broken(now, format!("job {} preempted inside its contract", self.jobs[v].job.id)));
            }
        }
        self.stop(v, now, RunEnd::Preempted);
        let j = &mut self.jobs[v];
        if j.job.contract.resumable {
            j.remaining_s = j.remaining_s.saturating_sub(ran).max(1);
        } else {
            j.remaining_s = j.duration_s;
        }
        j.job.restarts += 1;
        // Every preemption here is the policy's own: the next run is
        // protected for its whole contract.
        j.job.earlier_run_s = protection_after(j.job.earlier_run_s, ran, Requeue::Preempted);
        let (id, by_id) = (self.jobs[v].job.id, self.jobs[by].job.id);
        self.note(Happening::Preempt { t: now, job: id, by: by_id });
        if self.s.requeue_delay_s == 0 {
            self.enqueue(v, now);
        } else {
            self.jobs[v].status = Status::Requeued;
            self.requeues.push(Reverse((now + self.s.requeue_delay_s, v)));
        }
        Ok(())
    }

    /// Running jobs that `i` may preempt, in the order they should go.
    /// Tally asks the pass's [`VictimPool`] (built once per pass), which
    /// makes them eligible cumulatively.
    fn victims(&self, i: usize, now: u64, pool: &mut Option<VictimPool<usize>>) -> Vec<usize> {
        let p = &self.jobs[i];
        match self.policy {
            Policy::Fifo | Policy::Planner => Vec::new(),
            Policy::Tally | Policy::TallyPlanner => {
                let m = Moment { ent: &self.ent, rules: &self.config.priority, contracts: &self.config.contracts, now };
                let pool = pool.get_or_insert_with(|| VictimPool::new(self.running.iter().map(|&v| (v, &self.jobs[v].job)), &m));
                pool.for_preemptor(&p.job, &m)
            }
            Policy::Multifactor => {
                if !high_qos(p.class) {
                    return Vec::new();
                }
                let mut v: Vec<(i64, Reverse<u64>, usize)> = self
                    .running
                    .iter()
                    .copied()
                    .filter(|&v| !high_qos(self.jobs[v].class) && !self.jobs[v].asks)
                    .map(|v| (self.multifactor_key(v, now), Reverse(self.jobs[v].run_start), v))
                    .collect();
                v.sort();
                v.into_iter().map(|(_, _, v)| v).collect()
            }
        }
    }

    /// Free room for job `i` by preempting, in victim order, only the
    /// victims on the nodes it then takes. Returns the placement.
    fn try_preempt(&mut self, i: usize, now: u64, pool: &mut Option<VictimPool<usize>>) -> R<Option<Placement>> {
        if self.policy == Policy::Fifo {
            return Ok(None);
        }
        let cands = self.victims(i, now, pool);
        if cands.is_empty() {
            return Ok(None);
        }
        let mut free = self.cluster.free.clone();
        let mut chosen = Vec::new();
        for v in cands {
            for &(n, g) in &self.jobs[v].placement {
                free[n] += g;
            }
            chosen.push(v);
            if let Some(p) = self.cluster.fit_for(&free, self.jobs[i].job.gpus, self.jobs[i].gpu_type.as_deref()) {
                let nodes: Vec<usize> = p.iter().map(|&(n, _)| n).collect();
                let needed: Vec<usize> = chosen.into_iter().filter(|&v| self.jobs[v].placement.iter().any(|(n, _)| nodes.contains(n))).collect();
                for v in needed {
                    self.preempt(v, i, now)?;
                }
                let again = self.cluster.place_for(self.jobs[i].job.gpus, self.jobs[i].gpu_type.as_deref());
                return Ok(again.filter(|q| q.iter().all(|(n, _)| nodes.contains(n))).or(Some(p)));
            }
        }
        Ok(None)
    }

    /// What decides whether job `i` may preempt, besides its size: its team
    /// and, under Tally, its tier, its place in its team's order and the
    /// debug class (the other policies: its team and tier).
    fn preempt_group(&self, i: usize) -> PreemptGroup {
        let j = &self.jobs[i];
        match self.policy {
            Policy::Tally | Policy::TallyPlanner => {
                let rules = &self.config.priority;
                (j.team, j.node.is_some(), rules.slice_key(&j.job), rules.is_debug(&j.job))
            }
            _ => (j.team, j.node.is_some(), (0, false), false),
        }
    }

    /// EASY: when and where the blocked job `i` could start if nothing else
    /// started; returns (time, free GPUs per node then, its placement then).
    fn reservation(&self, i: usize) -> Option<(u64, Vec<u32>, Placement)> {
        let mut free = self.cluster.free.clone();
        let mut running: Vec<(u64, usize)> = self.running.iter().map(|&v| (self.jobs[v].run_start + self.jobs[v].remaining_s, v)).collect();
        running.sort();
        for (end, v) in running {
            for &(n, g) in &self.jobs[v].placement {
                free[n] += g;
            }
            if let Some(p) = self.cluster.fit_for(&free, self.jobs[i].job.gpus, self.jobs[i].gpu_type.as_deref()) {
                return Some((end, free, p));
            }
        }
        None
    }

    /// `preempt`: this instant had a submission or a re-plan (Slurm tries
    /// preemption when it schedules at submit and in its periodic pass, not
    /// at every job end).
    fn schedule(&mut self, now: u64, preempt: bool) -> R<()> {
        // The first job that can neither start nor preempt gets an EASY
        // reservation (computed when a backfill candidate needs it).
        let mut first_blocked: Option<usize> = None;
        let mut reservation: Option<(u64, Vec<u32>, Placement)> = None;
        let mut tested = 0;
        let mut tries = 0;
        let can_preempt = preempt && self.policy != Policy::Fifo;
        if self.cluster.free_total() == 0 && !can_preempt {
            return Ok(());
        }
        if self.policy.tally() {
            self.refresh_entitlement();
        }
        // Per preemption group ([`Sim::preempt_group`]), the fewest GPUs a
        // job failed to preempt for in this pass: a job of the same group
        // asking for as many or more fails too.
        let mut failed: BTreeMap<PreemptGroup, u32> = BTreeMap::new();
        let mut pool: Option<VictimPool<usize>> = None;
        let mut cursor: Option<QueueKey> = None;
        loop {
            let next = match cursor {
                None => self.queue.iter().next(),
                Some(c) => self.queue.range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded)).next(),
            };
            let Some(&key) = next else { break };
            cursor = Some(key);
            let i = key.3;
            let group = self.preempt_group(i);
            if let Some(p) = self.fit(i, now) {
                let ok = match first_blocked {
                    None => true,
                    Some(b) => {
                        if reservation.is_none() {
                            // No reservation possible (FIFO's realtime hold):
                            // backfill as if reserved at the end of time.
                            reservation = Some(self.reservation(b).unwrap_or((u64::MAX, self.cluster.free.clone(), Vec::new())));
                        }
                        let (t_res, free_then, res) = reservation.as_ref().expect("just set");
                        now + self.jobs[i].remaining_s <= *t_res
                            || p.iter().all(|&(n, g)| {
                                let need = res.iter().filter(|&&(m, _)| m == n).map(|&(_, r)| r).sum::<u32>();
                                free_then[n] >= g + need
                            })
                    }
                };
                if ok {
                    self.start(i, p, now)?;
                    continue;
                }
            } else if can_preempt && tries < MAX_PREEMPT_TRIES && failed.get(&group).is_none_or(|&f| self.jobs[i].job.gpus < f) {
                tries += 1;
                if let Some(p) = self.try_preempt(i, now, &mut pool)? {
                    self.start(i, p, now)?;
                    // Victims left the cluster: start over from the top.
                    cursor = None;
                    first_blocked = None;
                    reservation = None;
                    tested = 0;
                    failed.clear();
                    pool = None;
                    continue;
                }
                failed.insert(group, self.jobs[i].job.gpus);
            }
            if first_blocked.is_none() {
                first_blocked = Some(i);
            } else {
                tested += 1;
            }
            let more_preemption = can_preempt && tries < MAX_PREEMPT_TRIES;
            if tested >= self.s.backfill_depth || (self.cluster.free_total() == 0 && !more_preemption) {
                break;
            }
        }
        Ok(())
    }
}

/// The planner policy's horizon: 24 steps of 1 h, for at most this many of
/// the oldest waiting jobs.
const PLAN_STEPS: usize = 24;
const PLAN_STEP_S: u64 = HOUR_S;
const PLAN_JOBS: usize = 100;

/// Jobs that do not fit and may try to preempt in one scheduling pass (at a
/// submission or a re-plan), in priority order.
pub const MAX_PREEMPT_TRIES: usize = 32;

/// The priority plugin's thread runs at most this often when job ends poke
/// it (`tally_engine::worker::MIN_POKE_GAP`).
const MIN_RERANK_GAP_S: u64 = 1;

fn high_qos(c: Class) -> bool {
    matches!(c, Class::Debug | Class::Interactive | Class::Realtime)
}

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
