//! The engine: what the priority plugin does, without Slurm.
//!
//! It owns the ledger and its charging marks, the config, and the current
//! [`Ranking`]. Every [`Engine::tick`] (the recalculation thread, once per
//! `priority.calc_period`):
//!
//! 1. charges each job from its mark to now (running) or to its end
//!    (stopped since the last tick) — allocated jobs only, through
//!    `Job::charge`; marks make this idempotent;
//! 2. drops marks of jobs slurmctld has forgotten and buckets that left the
//!    window;
//! 3. re-ranks the accounts (the 7-day [`FairShare`]), measures what every
//!    team runs and waits for now ([`entitlement_of`]), and walks the queue
//!    (`allocator::order_queue`) for every pending job's priority.
//!
//! `priority_p_set` reads the last [`Ranking`] and [`PlanBoard`] only: no
//! IO, no waiting on the engine.

use crate::view::{JobView, RunState};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tally_allocator::{
    charge_from_mark, job_priority, order_queue, Allocation, Contract, Entitlement, FairShare, Job, Load, Priority, QueueOrder,
    Snapshot, TeamLoad,
};
use tally_config::Config;

/// How long after it started preempting a pending job counts as running
/// (Slurm kills its victims within `KillWait + MessageTimeout`, 40 s by
/// default, and does not preempt for it again meanwhile).
pub const DEFAULT_PREEMPT_WINDOW_S: u64 = 40;

/// The ranking at one moment, with the config it was made under: the 7-day
/// fair share, what every team runs now, and the queue walk.
#[derive(Debug)]
pub struct Ranking {
    pub config: Arc<Config>,
    pub fs: FairShare,
    pub ent: Entitlement,
    /// Each pending job's GPUs ahead of it in its team (the walk), and what
    /// a job submitted since waits behind.
    pub ahead: BTreeMap<u32, f64>,
    pub order: QueueOrder,
    pub computed_at: u64,
}

/// Where a job counts in what its team runs and waits for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Holds its GPUs (or is about to: it is preempting for them).
    Running,
    /// Pending, not held, its begin time reached: it waits for GPUs.
    Waiting,
    /// Neither (held, not yet eligible, done).
    No,
}

/// The one rule for which jobs count as running or waiting.
pub fn counted(v: &JobView, now: u64, preempt_window_s: u64) -> Counted {
    match v.state {
        RunState::Running => Counted::Running,
        RunState::Pending if v.preempt_start_s > 0 && v.preempt_start_s + preempt_window_s > now => Counted::Running,
        RunState::Pending if v.priority != 0 && v.begin_s <= now => Counted::Waiting,
        _ => Counted::No,
    }
}

/// The budgets as rates: the allocation at `[cluster] gpus` (or 1 GPU, with
/// zero allocations when fixed budgets do not fit it).
pub fn allocation(config: &Config) -> Allocation {
    config.allocation(config.ranking_gpus()).unwrap_or_else(|e| {
        log::error!("{e}; ranking with zero allocations");
        Allocation {
            capacity: config.capacity(config.ranking_gpus()),
            gpu_hours: vec![0.0; config.tree.len()],
            own_gpu_hours: vec![0.0; config.tree.len()],
        }
    })
}

/// What every team runs and waits for now, from slurmctld's jobs: the one
/// computation of the priority plugin's tick and the preempt plugin's live
/// check. Only allocated jobs count.
pub fn entitlement_of(config: &Config, alloc: &Allocation, jobs: &[JobView], now: u64, preempt_window_s: u64) -> Entitlement {
    let mut load = Load::new(&config.tree);
    for v in jobs {
        let c = counted(v, now, preempt_window_s);
        if c == Counted::No {
            continue;
        }
        let (job, _) = to_job(config, v);
        let Some(id) = config.tree.id(&job.account).filter(|_| job.is_allocated(&config.tree)) else { continue };
        match c {
            Counted::Running => load.run(id, job.gpus),
            Counted::Waiting => load.wait(id, job.gpus),
            Counted::No => {}
        }
    }
    Entitlement::compute(&config.tree, alloc, &load)
}

/// The planner thread's last committed step: the jobs its plan starts now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanBoard {
    pub starts_now: BTreeSet<u32>,
    /// When it was planned (Unix seconds).
    pub planned_at: u64,
}

impl PlanBoard {
    pub fn starts(board: Option<&PlanBoard>, job_id: u32) -> bool {
        board.is_some_and(|b| b.starts_now.contains(&job_id))
    }
}

/// What one tick did.
#[derive(Debug, Default, PartialEq)]
pub struct TickReport {
    /// (index into the views, new priority) for pending jobs whose priority changed.
    pub priorities: Vec<(usize, u32)>,
    /// GPU-seconds charged in this tick.
    pub charged_gpu_s: f64,
    pub jobs_seen: usize,
}

#[derive(Debug)]
pub struct Engine {
    config: Arc<Config>,
    snapshot: Snapshot,
    ranking: Arc<Ranking>,
    /// Accounts already reported as missing from the tree.
    warned: BTreeSet<String>,
    /// See [`DEFAULT_PREEMPT_WINDOW_S`] (the plugin sets slurm.conf's).
    preempt_window_s: u64,
    /// The jobs of the last tick (the ranking of a reload uses them).
    last_jobs: Vec<JobView>,
}

/// The allocator's view of a Slurm job under a config. A contract the rules
/// refuse makes the job unallocated (job_submit/tally refuses such jobs at
/// the door; this is the fallback for jobs that got in before it).
pub fn to_job(config: &Config, v: &JobView) -> (Job, Option<tally_allocator::ContractError>) {
    let account = config.account_for(v.account.as_deref(), &v.user).unwrap_or("").to_string();
    let (contract, err) = match config.contracts.resolve(v.comment.as_deref()) {
        Ok(c) => (c, None),
        Err(e) => (Contract::UNALLOCATED, Some(e)),
    };
    let job = Job {
        id: u64::from(v.job_id),
        account,
        user: v.user.clone(),
        contract,
        gpus: v.gpus,
        submit_s: v.submit_s,
        start_s: (v.state == RunState::Running && v.start_s > 0).then_some(v.start_s),
        within_team: (-v.nice).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        restarts: u32::from(v.restarts),
        time_limit_s: v.time_limit_s,
    };
    (job, err)
}

/// The priority of a job under a ranking and the planner's last committed
/// step (the one call `priority_p_set` makes): behind the GPUs its team
/// had waiting before it at the last walk (all of them for a job submitted
/// since).
pub fn priority_of(r: &Ranking, v: &JobView, plan: Option<&PlanBoard>) -> Priority {
    let (job, _) = to_job(&r.config, v);
    let ahead = r.ahead.get(&v.job_id).copied().unwrap_or_else(|| r.order.waiting_gpus.get(&job.account).copied().unwrap_or(0.0));
    job_priority(&job, r.fs.standing(&job.account), TeamLoad { ent: &r.ent, ahead_gpus: ahead }, &r.config.priority)
        .planned(PlanBoard::starts(plan, v.job_id))
}

/// New priorities of the pending jobs among `jobs` (index, value) whose
/// priority differs from what slurmctld has. Held jobs (priority 0) stay
/// held; an admin's priority stays.
pub fn changed_priorities(r: &Ranking, jobs: &[JobView], plan: Option<&PlanBoard>) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    for (i, v) in jobs.iter().enumerate() {
        if v.state != RunState::Pending || v.priority == 0 || v.direct_set_prio {
            continue;
        }
        let p = priority_of(r, v, plan).value;
        if p != v.priority {
            out.push((i, p));
        }
    }
    out
}

/// The ranking of `jobs` (slurmctld's, or none at start-up) under a config
/// and a ledger.
pub fn rank(config: &Arc<Config>, snapshot: &Snapshot, jobs: &[JobView], now: u64, preempt_window_s: u64) -> Ranking {
    let alloc = allocation(config);
    let fs = FairShare::compute(&config.tree, &alloc, &snapshot.ledger.usage(now));
    let ent = entitlement_of(config, &alloc, jobs, now, preempt_window_s);
    let waiting: Vec<(u32, Job)> = jobs
        .iter()
        .filter(|v| counted(v, now, preempt_window_s) == Counted::Waiting)
        .map(|v| (v.job_id, to_job(config, v).0))
        .collect();
    let refs: Vec<&Job> = waiting.iter().map(|(_, j)| j).collect();
    let mut order = order_queue(&refs, &fs, &ent, &config.priority);
    let ahead = waiting.iter().zip(order.ahead.iter()).map(|((id, _), &a)| (*id, a)).collect();
    order.priorities.clear();
    order.ahead.clear();
    Ranking { config: config.clone(), fs, ent, ahead, order, computed_at: now }
}

impl Engine {
    /// Start from a loaded snapshot (or an empty ledger).
    pub fn new(config: Config, snapshot: Option<Snapshot>, now: u64) -> Engine {
        if config.cluster.gpus.is_none() {
            log::warn!(
                "{}: [cluster] gpus is not set: GPU-hour figures assume 1 GPU, and without the cluster's size no team is ever below its rate (no owed-now order, no restorative preemption)",
                config.source
            );
        }
        let config = Arc::new(config);
        let mut snapshot = snapshot.unwrap_or_else(|| Snapshot::new(config.new_ledger()));
        if snapshot.ledger.bucket_s() != config.bucket_s || snapshot.ledger.window_s() != config.window_s {
            snapshot = rebucket(&snapshot, &config);
        }
        let ranking = Arc::new(rank(&config, &snapshot, &[], now, DEFAULT_PREEMPT_WINDOW_S));
        Engine { config, snapshot, ranking, warned: BTreeSet::new(), preempt_window_s: DEFAULT_PREEMPT_WINDOW_S, last_jobs: Vec::new() }
    }

    /// Slurm's `KillWait + MessageTimeout` (see [`DEFAULT_PREEMPT_WINDOW_S`]).
    pub fn set_preempt_window(&mut self, s: u64) {
        self.preempt_window_s = s;
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    pub fn ranking(&self) -> Arc<Ranking> {
        self.ranking.clone()
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The saved form, stamped with `now`.
    pub fn state_text(&mut self, now: u64) -> String {
        self.snapshot.saved_at = now;
        self.snapshot.to_text()
    }

    /// Replace the config (a reload that validated). The ledger keeps its
    /// usage; a new window or bucket re-buckets it.
    pub fn set_config(&mut self, config: Config, now: u64) {
        let config = Arc::new(config);
        if self.snapshot.ledger.bucket_s() != config.bucket_s || self.snapshot.ledger.window_s() != config.window_s {
            self.snapshot = rebucket(&self.snapshot, &config);
        }
        self.config = config;
        self.warned.clear();
        self.ranking = Arc::new(rank(&self.config, &self.snapshot, &self.last_jobs, now, self.preempt_window_s));
    }

    /// Charge one job up to `now` (running) or its end (stopped), from its
    /// mark. Returns GPU-seconds charged.
    pub fn charge(&mut self, v: &JobView, now: u64) -> f64 {
        let to = match v.state {
            RunState::Running if v.start_s > 0 => now,
            // Stopped since (requeued, preempted, finished): charge to its end.
            RunState::Pending | RunState::Done if v.start_s > 0 && v.end_s > v.start_s => v.end_s.min(now),
            _ => return 0.0,
        };
        let (job, _) = to_job(&self.config, v);
        charge_from_mark(&mut self.snapshot.charged_until, &job, &self.config.tree, &mut self.snapshot.ledger, v.start_s, to)
    }

    /// One recalculation over every job slurmctld knows, under the
    /// planner's last committed step (`None`: no planner).
    pub fn tick(&mut self, now: u64, jobs: &[JobView], plan: Option<&PlanBoard>) -> TickReport {
        let mut report = TickReport { jobs_seen: jobs.len(), ..TickReport::default() };
        for v in jobs {
            report.charged_gpu_s += self.charge(v, now);
        }
        // Forget marks of jobs slurmctld no longer has.
        let live: BTreeSet<u64> = jobs.iter().map(|v| u64::from(v.job_id)).collect();
        self.snapshot.charged_until.retain(|id, _| live.contains(id));
        self.snapshot.ledger.prune(now);
        self.ranking = Arc::new(rank(&self.config, &self.snapshot, jobs, now, self.preempt_window_s));
        self.last_jobs = jobs.to_vec();

        for v in jobs {
            self.warn_once(v);
        }
        report.priorities = changed_priorities(&self.ranking, jobs, plan);
        report
    }

    fn warn_once(&mut self, v: &JobView) {
        let account = self.config.account_for(v.account.as_deref(), &v.user).unwrap_or("").to_string();
        if !self.config.tree.contains(&account) && self.warned.insert(account.clone()) {
            if account.is_empty() {
                log::warn!("job {}: user {} has no account and is not in [users]; such jobs run unallocated", v.job_id, v.user);
            } else {
                log::warn!("account `{account}` (job {}) is not in the tree of {}; its jobs run unallocated", v.job_id, self.config.source);
            }
        }
    }

    /// Per-account GPU-hours in the window (for logs and reports).
    pub fn usage_by_account(&self, now: u64) -> BTreeMap<String, f64> {
        self.snapshot.ledger.usage(now).by_account.into_iter().map(|(a, s)| (a, s / 3600.0)).collect()
    }
}

fn rebucket(old: &Snapshot, config: &Config) -> Snapshot {
    let mut ledger = config.new_ledger();
    for (b, key, gs) in old.ledger.entries() {
        ledger.add(b * old.ledger.bucket_s() / config.bucket_s, key, gs);
    }
    Snapshot { saved_at: old.saved_at, ledger, charged_until: old.charged_until.clone() }
}

#[cfg(test)]
mod tests;
