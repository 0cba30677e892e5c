//! The event-jumping replay.
//!
//! Time jumps from event to event: a submission, a job's end, and a
//! periodic re-plan (the priority plugin's `calc_period`; FIFO re-plans at
//! day edges, where its realtime reservation changes). After the events of
//! an instant the scheduler runs as Slurm's does: jobs in priority order
//! start where they fit (whole-node-aware placement, [`crate::cluster`]); a
//! job that does not fit may preempt (per policy); the first job that can do
//! neither gets an EASY reservation at the earliest time enough running jobs
//! end, and lower jobs backfill if they do not delay it. Running jobs end at
//! their start plus remaining work; the simulator knows the durations, so
//! the reservation uses them (Slurm uses time limits: optimistic, documented).
//!
//! Every rule comes from the allocator: `job_priority`, `may_preempt`,
//! `victim_rank`, `charge_from_mark` into a `Ledger`, `Config::fair_share`,
//! `Delivery`. Invariants are checked as the replay goes and reported as
//! [`SimError::Invariant`].

use crate::cluster::{Cluster, Placement};
use crate::metrics::{deliveries, PolicyResult, Recorder, Waits};
use crate::trace::{Class, Trace};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use tally_allocator::{charge_from_mark, job_priority_with, priority, Contract, FairShare, Job, Ledger, Standing, VictimPool};
use tally_config::Config;
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
    /// Budgets, the sliding window, contracts, unallocated fill, the rule.
    Tally,
    /// The rolling-horizon planner (`allocator::plan::fast`): every re-plan
    /// plans the next 24 h for the oldest waiting jobs (the running ones
    /// pinned) and orders the queue by planned start; no preemption.
    Planner,
}

impl Policy {
    pub const ALL: [Policy; 4] = [Policy::Fifo, Policy::Multifactor, Policy::Tally, Policy::Planner];
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Multifactor => "multifactor",
            Policy::Tally => "tally",
            Policy::Planner => "planner",
        }
    }
    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == s.trim())
    }
}

/// The simulated cluster and scheduler settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub gpus: u32,
    pub gpus_per_node: u32,
    /// Re-plan period for multifactor and tally (the plugin's calc_period).
    pub replan_s: u64,
    /// Jobs tested for backfill after the reservation (Slurm's bf_max_job_test).
    pub backfill_depth: usize,
    /// Multifactor's usage half-life.
    pub half_life_s: u64,
    /// Stop this long after the last submission even if work remains (a
    /// safety net against a policy that never drains; reported as
    /// `unfinished`).
    pub drain_limit_s: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { gpus: 64, gpus_per_node: 8, replan_s: 300, backfill_depth: 100, half_life_s: 7 * 86_400, drain_limit_s: 365 * 86_400 }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SimError {
    #[error("invariant broken at t={t}: {what}")]
    Invariant { t: u64, what: String },
    #[error("the cluster has no GPUs")]
    NoGpus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Waiting,
    Running,
    Done,
    Unrunnable,
}

#[derive(Debug, Clone)]
struct SimJob {
    job: Job,
    class: Class,
    team: usize,
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
    first_start: Option<u64>,
}

/// Jobs whose relative order never changes while they wait: within a group
/// the policy's priority is non-increasing in the group's order, so the
/// queue is a merge of the groups by their heads' current priority (exactly
/// the order of sorting every job by priority, without re-sorting).
/// FIFO: one group by submission; multifactor: (team, QOS) by submission
/// (older is higher); tally: (team, contract > 0), by the inside-team field
/// (descending), then submission — tier and team bits are shared by a group,
/// the inside field sits above the age field, and age grows with waiting.
type GroupKey = (usize, u8);
/// A group's head in the merge heap: (key, earlier submit, lower id, job, group).
type Head = (i64, Reverse<u64>, Reverse<u64>, usize, GroupKey);
/// (inside-team order, submit, id, index): ascending = highest priority first.
type Item = (i32, u64, u64, usize);
type Group = BTreeSet<Item>;

/// The outcome of one scheduling decision, for tests: (time, job id, what).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happening {
    Start { t: u64, job: u64, nodes: Vec<usize> },
    End { t: u64, job: u64 },
    Preempt { t: u64, job: u64, by: u64 },
}

struct Sim<'a> {
    policy: Policy,
    s: Settings,
    config: &'a Config,
    cluster: Cluster,
    jobs: Vec<SimJob>,
    groups: BTreeMap<GroupKey, Group>,
    running: BTreeSet<usize>,
    /// Team names (leaves of the tree, then accounts outside it) and their
    /// allocation rates in GPUs.
    team_names: Vec<String>,
    team_rates: Vec<f64>,
    ends: BinaryHeap<Reverse<(u64, usize, u32)>>,
    // tally
    ledger: Ledger,
    marks: BTreeMap<u64, u64>,
    fs: FairShare,
    /// The budgets at the simulated cluster size.
    alloc: tally_allocator::Allocation,
    /// Each team's standing in `fs` (looked up once per re-plan).
    standings: Vec<Option<Standing>>,
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
    rec: Recorder,
    log: Option<Vec<Happening>>,
    preemptions: u64,
    wasted_gpu_s: f64,
    violations: u64,
    origin: u64,
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
        let cluster = Cluster::new(s.gpus, s.gpus_per_node);
        let alloc = config.allocation(s.gpus).unwrap_or_else(|_| {
            // GPU-hour budgets that do not fit this size: scale by shares only.
            config.allocation(config.ranking_gpus()).expect("validated config")
        });
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
            // The contract as the cluster's rules would leave it (job_submit
            // refuses over-long ones; the plugin treats them as unallocated).
            let c = &config.contracts;
            let min_runtime_s = if tj.contract_s > c.max_s || tj.contract_s < c.unallocated_below_s { 0 } else { tj.contract_s };
            let job = Job {
                id: tj.job_id,
                account: tj.account.clone(),
                user: tj.user.clone(),
                contract: Contract::new(min_runtime_s, tj.resumable),
                gpus: tj.gpus,
                submit_s: tj.submit_s,
                start_s: None,
                within_team: tj.priority,
            };
            jobs.push(SimJob {
                job,
                class: tj.class,
                team,
                duration_s: tj.duration_s.max(1),
                remaining_s: tj.duration_s.max(1),
                asks: tj.contract_s > 0,
                priority_col: tj.priority,
                status: Status::Waiting,
                run_start: 0,
                placement: Vec::new(),
                epoch: 0,
                first_start: None,
            });
        }
        let teams = shares.len();
        let ledger = config.new_ledger();
        // Ranked at the simulated size (fixed GPU-hour budgets depend on it).
        let fs = FairShare::compute(&config.tree, &alloc, &ledger.usage(origin));
        let rt_reserve = if policy == Policy::Fifo { realtime_daily_peaks(trace, origin) } else { Vec::new() };
        let standings = team_names.iter().map(|t| fs.standing(t).cloned()).collect();
        Ok(Sim {
            policy,
            s,
            config,
            cluster,
            jobs,
            groups: BTreeMap::new(),
            running: BTreeSet::new(),
            team_names,
            team_rates,
            ends: BinaryHeap::new(),
            ledger,
            marks: BTreeMap::new(),
            standings,
            fs,
            alloc,
            usage: vec![0.0; teams],
            usage_at: origin,
            mf_marks: vec![0; trace.jobs.len()],
            shares,
            rt_reserve,
            rt_busy: 0,
            nonrt_blocked: 0,
            rec: Recorder::new(origin, teams),
            plan_rank: vec![u32::MAX; trace.jobs.len()],
            log: log.then(Vec::new),
            preemptions: 0,
            wasted_gpu_s: 0.0,
            violations: 0,
            origin,
        })
    }

    fn note(&mut self, h: Happening) {
        if let Some(l) = &mut self.log {
            l.push(h);
        }
    }

    // ---- priorities --------------------------------------------------------

    fn key(&self, i: usize, now: u64) -> i64 {
        let j = &self.jobs[i];
        match self.policy {
            // Arrival order: earlier first (ties: job id, by the sort).
            Policy::Fifo => -(j.job.submit_s as i64),
            Policy::Planner => -i64::from(self.plan_rank[i]),
            Policy::Tally => i64::from(job_priority_with(&j.job, self.standings[j.team].as_ref(), &self.config.priority, now).value),
            Policy::Multifactor => {
                // priority = 10000·F + 1000·age + 2000·qos,  F = 2^(−U/S)
                let total: f64 = self.usage.iter().sum();
                let u = if total > 0.0 { self.usage[j.team] / total } else { 0.0 };
                let share = self.shares[j.team];
                let f = if share > 0.0 { 2f64.powf(-u / share) } else { 0.0 };
                let age = (now.saturating_sub(j.job.submit_s) as f64 / (7.0 * 86_400.0)).min(1.0);
                let qos = if high_qos(j.class) { 1.0 } else { 0.0 };
                (10_000.0 * f + 1000.0 * age + 2000.0 * qos).round() as i64
            }
        }
    }

    fn group_of(&self, i: usize) -> GroupKey {
        let j = &self.jobs[i];
        match self.policy {
            Policy::Fifo | Policy::Planner => (0, 0),
            Policy::Multifactor => (j.team, u8::from(high_qos(j.class))),
            Policy::Tally => (j.team, u8::from(j.job.contract.is_allocated())),
        }
    }

    fn item(&self, i: usize) -> Item {
        let j = &self.jobs[i];
        let inside = match self.policy {
            // The inside-team field as job_priority clamps it.
            Policy::Tally => -j.job.within_team.clamp(priority::INSIDE_MIN, priority::INSIDE_MAX),
            Policy::Planner => self.plan_rank[i].min(i32::MAX as u32) as i32,
            _ => 0,
        };
        (inside, j.job.submit_s, j.job.id, i)
    }

    fn enqueue(&mut self, i: usize) {
        let (g, item) = (self.group_of(i), self.item(i));
        self.groups.entry(g).or_default().insert(item);
    }

    fn dequeue(&mut self, i: usize) {
        let (g, item) = (self.group_of(i), self.item(i));
        if let Some(set) = self.groups.get_mut(&g) {
            set.remove(&item);
            if set.is_empty() {
                self.groups.remove(&g);
            }
        }
    }

    /// Heap entry for the job after `after` in group `g` (or its head).
    fn head(&self, g: GroupKey, after: Option<Item>, now: u64) -> Option<Head> {
        let set = self.groups.get(&g)?;
        let next = match after {
            None => set.iter().next(),
            Some(a) => set.range((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)).next(),
        };
        next.map(|&(_, submit, id, i)| (self.key(i, now), Reverse(submit), Reverse(id), i, g))
    }

    fn heads(&self, now: u64) -> BinaryHeap<Head> {
        self.groups.keys().filter_map(|&g| self.head(g, None, now)).collect()
    }

    /// Re-plan: charge, re-rank, recompute every pending priority.
    fn replan(&mut self, now: u64) {
        match self.policy {
            Policy::Fifo => {}
            Policy::Planner => self.plan_queue(now),
            Policy::Tally => {
                for &i in &self.running {
                    let j = &self.jobs[i];
                    charge_from_mark(&mut self.marks, &j.job, &self.config.tree, &mut self.ledger, j.run_start, now);
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
            self.usage[j.team] += f64::from(j.job.gpus) * (now - from) as f64;
            self.mf_marks[i] = now;
        }
    }

    // ---- starting, ending, preempting ----------------------------------------------

    fn fifo_reserve(&self, now: u64) -> u32 {
        let day = ((now - self.origin) / 86_400) as usize;
        self.rt_reserve.get(day).copied().unwrap_or(0)
    }

    /// Planner: plan the next 24 h for the oldest waiting jobs, running
    /// jobs pinned where they run, and re-rank the queue by planned start.
    fn plan_queue(&mut self, now: u64) {
        use tally_allocator::plan::queue::{plan_queue, QueueRules, RunningJob, WaitingJob};
        let running: Vec<RunningJob> = self
            .running
            .iter()
            .map(|&i| {
                let j = &self.jobs[i];
                let nodes = j.placement.iter().map(|&(n, g)| (n as u32, g)).collect();
                RunningJob { nodes, remaining_s: Some((j.run_start + j.remaining_s).saturating_sub(now)) }
            })
            .collect();
        let mut waiting: Vec<usize> = self.groups.values().flat_map(|g| g.iter().map(|&(_, _, _, i)| i)).collect();
        waiting.sort_by_key(|&i| (self.jobs[i].job.submit_s, self.jobs[i].job.id));
        // The oldest PLAN_JOBS jobs, valued by the trace's priority (Dharma's
        // priority × time decay); the durations are the true remaining work.
        let queue: Vec<WaitingJob> = waiting
            .iter()
            .take(PLAN_JOBS)
            .map(|&i| {
                let j = &self.jobs[i];
                WaitingJob { id: i as u64, gpus: j.job.gpus, duration_s: Some(j.remaining_s), value: Some(f64::from(j.priority_col.max(0)) + 1.0) }
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
        // Re-key the queue (one group) by the new ranks.
        self.groups.clear();
        for &i in &waiting {
            self.enqueue(i);
        }
    }

    /// Where job `i` fits now (FIFO keeps its realtime reservation free).
    fn fit(&self, i: usize, now: u64) -> Option<Placement> {
        let j = &self.jobs[i];
        let p = self.cluster.place(j.job.gpus)?;
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
        self.cluster.take(&p);
        self.running.insert(i);
        let blocked = Cluster::blocked(&p);
        let j = &mut self.jobs[i];
        j.status = Status::Running;
        j.run_start = now;
        j.job.start_s = Some(now);
        j.first_start.get_or_insert(now);
        j.epoch += 1;
        j.placement = p;
        let (gpus, team, asks, prio, end, epoch, rt) =
            (j.job.gpus, j.team, j.asks, j.priority_col, now + j.remaining_s, j.epoch, j.class == Class::Realtime);
        let nodes = j.placement.iter().map(|&(n, _)| n).collect();
        let id = j.job.id;
        if self.policy == Policy::Fifo {
            if rt {
                self.rt_busy += blocked;
            } else {
                self.nonrt_blocked += blocked;
            }
        }
        self.rec.busy.level += f64::from(gpus);
        self.rec.value.level += f64::from(prio) * f64::from(gpus);
        if asks {
            self.rec.ran[team].level += f64::from(gpus);
        }
        self.ends.push(Reverse((end, i, epoch)));
        self.note(Happening::Start { t: now, job: id, nodes });
        Ok(())
    }

    /// Stop a running job (end or preemption): release, charge, levels.
    fn stop(&mut self, i: usize, now: u64) {
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
        match self.policy {
            Policy::Tally => {
                let j = &self.jobs[i];
                charge_from_mark(&mut self.marks, &j.job, &self.config.tree, &mut self.ledger, j.run_start, now);
            }
            Policy::Multifactor => {
                self.decay_to(now);
                self.mf_charge(i, now);
            }
            Policy::Fifo | Policy::Planner => {}
        }
        let j = &mut self.jobs[i];
        j.job.start_s = None;
        self.rec.busy.level -= f64::from(j.job.gpus);
        self.rec.value.level -= f64::from(j.priority_col) * f64::from(j.job.gpus);
        if j.asks {
            self.rec.ran[j.team].level -= f64::from(j.job.gpus);
        }
    }

    fn finish(&mut self, i: usize, now: u64) {
        self.stop(i, now);
        let j = &mut self.jobs[i];
        j.status = Status::Done;
        j.remaining_s = 0;
        if j.asks {
            self.rec.asked[j.team].level -= f64::from(j.job.gpus);
        }
        let id = j.job.id;
        self.note(Happening::End { t: now, job: id });
    }

    fn preempt(&mut self, v: usize, by: usize, now: u64) -> R<()> {
        let ran = now - self.jobs[v].run_start;
        // Inside a declared minimum runtime?
        let c = self.jobs[v].job.contract;
        if c.is_allocated() && ran < c.min_runtime_s && self.jobs[v].job.is_allocated(&self.config.tree) {
            self.violations += 1;
            if self.policy == Policy::Tally {
                return Err(broken(now, format!("job {} preempted inside its contract", self.jobs[v].job.id)));
            }
        }
        self.stop(v, now);
        let j = &mut self.jobs[v];
        if j.job.contract.resumable {
            j.remaining_s = j.remaining_s.saturating_sub(ran).max(1);
        } else {
            self.wasted_gpu_s += f64::from(j.job.gpus) * ran as f64;
            j.remaining_s = j.duration_s;
        }
        j.status = Status::Waiting;
        self.preemptions += 1;
        let (id, by_id) = (self.jobs[v].job.id, self.jobs[by].job.id);
        self.note(Happening::Preempt { t: now, job: id, by: by_id });
        self.enqueue(v);
        Ok(())
    }

    /// Running jobs that `i` may preempt, in the order they should go.
    /// Tally asks the pass's [`VictimPool`] (built once per pass).
    fn victims(&self, i: usize, now: u64, pool: &mut Option<VictimPool<usize>>) -> Vec<usize> {
        let p = &self.jobs[i];
        match self.policy {
            Policy::Fifo | Policy::Planner => Vec::new(),
            Policy::Tally => {
                let pool = pool.get_or_insert_with(|| VictimPool::new(self.running.iter().map(|&v| (v, &self.jobs[v].job)), &self.fs, now));
                pool.for_preemptor(&p.job, &self.fs)
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
                    .map(|v| (self.key(v, now), Reverse(self.jobs[v].run_start), v))
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
            if let Some(p) = Cluster::fit(&free, self.jobs[i].job.gpus, self.cluster.gpus_per_node) {
                let nodes: Vec<usize> = p.iter().map(|&(n, _)| n).collect();
                let needed: Vec<usize> =
                    chosen.into_iter().filter(|&v| self.jobs[v].placement.iter().any(|(n, _)| nodes.contains(n))).collect();
                for v in needed {
                    self.preempt(v, i, now)?;
                }
                return Ok(self.cluster.place(self.jobs[i].job.gpus).filter(|q| q.iter().all(|(n, _)| nodes.contains(n))).or(Some(p)));
            }
        }
        Ok(None)
    }

    /// EASY: when and where the blocked job `i` could start if nothing else
    /// started; returns (time, free GPUs per node then, its placement then).
    fn reservation(&self, i: usize) -> Option<(u64, Vec<u32>, Placement)> {
        let mut free = self.cluster.free.clone();
        let mut running: Vec<(u64, usize)> =
            self.running.iter().map(|&v| (self.jobs[v].run_start + self.jobs[v].remaining_s, v)).collect();
        running.sort();
        for (end, v) in running {
            for &(n, g) in &self.jobs[v].placement {
                free[n] += g;
            }
            if let Some(p) = Cluster::fit(&free, self.jobs[i].job.gpus, self.cluster.gpus_per_node) {
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
        // Per group, the fewest GPUs a job failed to preempt for in this pass:
        // eligibility depends only on the preemptor's group, so a job of the
        // same group asking for as many or more would fail too.
        let mut failed: BTreeMap<GroupKey, u32> = BTreeMap::new();
        let mut pool: Option<VictimPool<usize>> = None;
        let mut heap = self.heads(now);
        while let Some((_, _, _, i, g)) = heap.pop() {
            let item = self.item(i);
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
                    self.dequeue(i);
                    self.start(i, p, now)?;
                    heap.extend(self.head(g, Some(item), now));
                    continue;
                }
            } else if can_preempt && tries < MAX_PREEMPT_TRIES && failed.get(&g).is_none_or(|&f| self.jobs[i].job.gpus < f) {
                tries += 1;
                if let Some(p) = self.try_preempt(i, now, &mut pool)? {
                    self.dequeue(i);
                    self.start(i, p, now)?;
                    // Victims went back into the queue: merge afresh.
                    heap = self.heads(now);
                    reservation = None;
                    failed.clear();
                    pool = None;
                    continue;
                }
                failed.insert(g, self.jobs[i].job.gpus);
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
            heap.extend(self.head(g, Some(item), now));
        }
        Ok(())
    }
}

/// The planner policy's horizon: 24 steps of 1 h, for at most this many of
/// the oldest waiting jobs.
const PLAN_STEPS: usize = 24;
const PLAN_STEP_S: u64 = 3600;
const PLAN_JOBS: usize = 100;

/// Jobs that do not fit and may try to preempt in one scheduling pass (at a
/// submission or a re-plan), in priority order.
pub const MAX_PREEMPT_TRIES: usize = 32;

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
        let day = ((t.saturating_sub(origin)) / 86_400) as usize;
        if peaks.len() <= day {
            peaks.resize(day + 1, 0);
        }
        peaks[day] = peaks[day].max(level.max(0) as u32);
    }
    peaks
}

/// Replay a trace under one policy. `progress` is called now and then with
/// the simulated time (for a progress bar).
pub fn run(trace: &Trace, config: &Config, policy: Policy, s: Settings, progress: &mut dyn FnMut(u64)) -> R<PolicyResult> {
    run_inner(trace, config, policy, s, progress, false).map(|(r, _)| r)
}

/// As [`run`], also returning every start, end and preemption (for tests).
pub fn run_logged(trace: &Trace, config: &Config, policy: Policy, s: Settings) -> R<(PolicyResult, Vec<Happening>)> {
    run_inner(trace, config, policy, s, &mut |_| {}, true).map(|(r, l)| (r, l.unwrap_or_default()))
}

fn run_inner(
    trace: &Trace,
    config: &Config,
    policy: Policy,
    s: Settings,
    progress: &mut dyn FnMut(u64),
    log: bool,
) -> R<(PolicyResult, Option<Vec<Happening>>)> {
    let mut sim = Sim::new(trace, config, policy, s, log)?;
    let origin = sim.origin;
    let window_end = trace.jobs.last().map_or(origin, |j| j.submit_s);
    let tick = if policy == Policy::Fifo { 86_400 } else { s.replan_s.max(1) };
    let mut next_tick = origin - origin % tick + tick;
    let mut next_submit = 0;
    let mut events: u64 = 0;
    let mut last_t = origin;
    let total = sim.cluster.total();
    loop {
        let t_sub = trace.jobs.get(next_submit).map_or(u64::MAX, |j| j.submit_s);
        let t_end = sim.ends.peek().map_or(u64::MAX, |Reverse((t, _, _))| *t);
        let t_tick = if sim.groups.is_empty() { u64::MAX } else { next_tick };
        let t = t_sub.min(t_end).min(t_tick);
        if t == u64::MAX || t > window_end.saturating_add(s.drain_limit_s) {
            break;
        }
        sim.rec.advance(t);
        last_t = t;
        while let Some(&Reverse((te, i, epoch))) = sim.ends.peek() {
            if te != t {
                break;
            }
            sim.ends.pop();
            if sim.jobs[i].status == Status::Running && sim.jobs[i].epoch == epoch {
                sim.finish(i, t);
            }
            events += 1;
        }
        let mut preempt = false;
        while next_submit < trace.jobs.len() && trace.jobs[next_submit].submit_s == t {
            preempt = true;
            let i = next_submit;
            next_submit += 1;
            events += 1;
            if sim.jobs[i].job.gpus > total {
                sim.jobs[i].status = Status::Unrunnable;
                continue;
            }
            if sim.jobs[i].asks {
                let team = sim.jobs[i].team;
                sim.rec.asked[team].level += f64::from(sim.jobs[i].job.gpus);
            }
            sim.enqueue(i);
        }
        if t >= next_tick {
            preempt = true;
            sim.replan(t);
            next_tick = t - t % tick + tick;
            events += 1;
        }
        sim.schedule(t, preempt)?;
        if events % 4096 == 0 {
            progress(t);
        }
    }
    progress(last_t);
    let unfinished = sim.jobs.iter().filter(|j| matches!(j.status, Status::Running | Status::Waiting)).count();
    // Every started job ended or was preempted, unless the drain limit cut the run.
    if unfinished > 0 && sim.ends.is_empty() && sim.groups.is_empty() {
        return Err(broken(last_t, "jobs left running with no end event".to_string()));
    }
    let hours = ((last_t - origin) / 3600 + 1) as usize;
    let hourly_busy = sim.rec.busy.hours(hours);
    // Occupancy over the arrival window, in whole hours (the hour holding the
    // last submission included).
    let window_hours = (((window_end - origin) / 3600) as usize + 1).min(hours);
    let busy_window: f64 = hourly_busy.iter().take(window_hours).sum();
    let occupancy = busy_window / (f64::from(total) * window_hours as f64);
    let value: f64 = sim.rec.value.hours(window_hours).iter().sum();
    let names: Vec<(String, f64)> = sim.team_names.iter().cloned().zip(sim.team_rates.iter().copied()).collect();
    let (teams, fairness) = deliveries(&sim.rec, &names, hours);
    let mut waits: BTreeMap<Class, Waits> = BTreeMap::new();
    for j in &sim.jobs {
        if let Some(fs) = j.first_start {
            waits.entry(j.class).or_default().sorted_s.push(fs - j.job.submit_s);
        }
    }
    for w in waits.values_mut() {
        w.sorted_s.sort_unstable();
    }
    let result = PolicyResult {
        policy: policy.name(),
        gpus: total,
        window_s: window_end - origin,
        makespan_s: last_t - origin,
        occupancy,
        hourly_busy,
        teams,
        fairness,
        waits,
        preemptions: sim.preemptions,
        wasted_gpu_hours: sim.wasted_gpu_s / 3600.0,
        contract_violations: sim.violations,
        value,
        events,
        completed: sim.jobs.iter().filter(|j| j.status == Status::Done).count(),
        unrunnable: sim.jobs.iter().filter(|j| j.status == Status::Unrunnable).count(),
        unfinished,
    };
    Ok((result, sim.log))
}

