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
//!    (`allocator::order_queue`) for every pending job's priority;
//! 4. records what every account was entitled to and asked for since the
//!    last tick ([`tally_allocator::OwedBook`]: owed and delivered, measured live) and the
//!    load of the moment, for `tally share`.
//!
//! `priority_p_set` reads the last [`Ranking`] and [`PlanBoard`] only: no
//! IO, no waiting on the engine.

pub mod queue;

use crate::view::{JobView, RunState};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tally_allocator::names::ByName;
use tally_allocator::{
    drain_plan, job_priority, order_queue, Allocation, Contract, DrainPlan, Entitlement, FairShare, Funded, Held, Inventory, Job, Load, OnDraining,
    Priority, QueueOrder, RunBook, RunRecord, Seen, Snapshot, TeamLoad, DAY_S, HOUR, HOUR_S, MINUTE_S,
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
    /// Each waiting job's place in the walk: its priority and the GPUs
    /// ahead of it in its team (stored once, read by sprio, the planner
    /// round and `tally explain`); `order` holds what a job submitted
    /// since waits behind.
    pub walked: Walked,
    pub order: QueueOrder,
    pub computed_at: u64,
}

/// What the queue walk gave each waiting job, by job id: a list in id
/// order (the walk sees the jobs in slurmctld's order, which is nearly id
/// order, so it is built with little sorting and read by binary search).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Walked(Vec<(u32, Place)>);

/// One walked job: its priority and the GPUs of its team's allocated jobs
/// walked before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Place {
    pub priority: Priority,
    pub ahead_gpus: f64,
}

impl Walked {
    fn new(mut places: Vec<(u32, Place)>) -> Walked {
        if !places.is_sorted_by_key(|&(id, _)| id) {
            places.sort_by_key(|&(id, _)| id);
        }
        Walked(places)
    }

    /// Job `id`'s place at the walk (`None`: not walked).
    pub fn get(&self, id: u32) -> Option<Place> {
        self.0.binary_search_by_key(&id, |&(i, _)| i).ok().map(|k| self.0[k].1)
    }

    /// GPUs ahead of job `id` at the walk (`None`: not walked).
    pub fn ahead(&self, id: u32) -> Option<f64> {
        self.get(id).map(|p| p.ahead_gpus)
    }

    /// [`Walked::get`] for ids asked in nearly ascending order (a walk over
    /// slurmctld's list): each lookup tries the place after the last one
    /// found before it searches.
    fn cursor(&self) -> WalkedCursor<'_> {
        WalkedCursor { walked: &self.0, next: 0 }
    }
}

struct WalkedCursor<'a> {
    walked: &'a [(u32, Place)],
    next: usize,
}

impl WalkedCursor<'_> {
    fn get(&mut self, id: u32) -> Option<Place> {
        let k = match self.walked.get(self.next) {
            Some(&(i, _)) if i == id => self.next,
            _ => self.walked.binary_search_by_key(&id, |&(i, _)| i).ok()?,
        };
        self.next = k + 1;
        Some(self.walked[k].1)
    }
}

/// Where a job counts in what its team runs and waits for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Holds its GPUs (or is about to: it is preempting for them).
    Running,
    /// Pending, not held, its begin time set and reached
    /// ([`queue::waiting`]): it waits for GPUs.
    Waiting,
    /// Neither (held, a dependency outstanding, not yet eligible, done).
    No,
}

/// The one rule for which jobs count as running or waiting (waiting:
/// [`queue::waiting`], the rule sprio and `tally explain` use too).
pub fn counted(v: &JobView, now: u64, preempt_window_s: u64) -> Counted {
    match v.state {
        RunState::Running => Counted::Running,
        RunState::Pending if v.preempt_start_s > 0 && v.preempt_start_s + preempt_window_s > now => Counted::Running,
        _ if queue::waiting(v, now) => Counted::Waiting,
        _ => Counted::No,
    }
}

/// The budgets as rates: the allocation at `[cluster] gpus` (or 1 GPU, with
/// zero allocations when fixed budgets do not fit it).
pub fn allocation(config: &Config) -> Allocation {
    allocation_at(config, &Inventory::new())
}

/// [`allocation`] on the capacity of `[cluster] gpus` with the GPUs per
/// type Slurm's nodes have (`inventory`, [`Engine::set_gpu_inventory`]):
/// with `[cluster.gpu_types]`, the types' GPUs at their weights
/// (`Config::capacity_with`: the file's count of a type first, then the
/// nodes'); without, the inventory is not read.
pub fn allocation_at(config: &Config, inventory: &Inventory) -> Allocation {
    config.allocation_with(config.ranking_gpus(), inventory).unwrap_or_else(|e| {
        log::error!("{e}; ranking with zero allocations");
        Allocation {
            capacity: config.capacity_with(config.ranking_gpus(), inventory),
            gpu_hours: vec![0.0; config.tree.len()],
            own_gpu_hours: vec![0.0; config.tree.len()],
        }
    })
}

/// Every job of one moment, converted once: the allocator's [`Job`]
/// (frozen facts of its run from the [`RunBook`], a het job's one
/// contract) and where it counts now. The one conversion of a tick, shared
/// by the priority plugin's ranking and the preempt plugin's copy.
///
/// A job is classed by what it will hold ([`Job::class_gpus`],
/// [`Job::tasks`]): an exclusive pending job by its whole nodes
/// ([`JobView::whole_gpus`]), every component of a heterogeneous job by
/// the GPUs of all the job's components in the copy (each still counts
/// its own GPUs), an array's pending record as all its pending tasks.
pub fn classify(config: &Config, views: &[JobView], runs: &RunBook, now: u64, preempt_window_s: u64) -> Vec<(Counted, Job)> {
    let mut classifier = Classifier::new(config, views, now, preempt_window_s);
    views.iter().map(|v| classifier.job(v, runs.get(u64::from(v.job_id)))).collect()
}

/// [`classify`] a job at a time (the priority plugin's tick charges each
/// job as it is converted: one pass over the jobs).
struct Classifier<'a> {
    config: &'a Config,
    views: &'a [JobView],
    /// Het leaders' comments, gathered at the first het component.
    leaders: Option<BTreeMap<u32, Option<&'a str>>>,
    /// Het jobs' GPUs over all their components (the leader's id →
    /// GPUs), gathered at the first component.
    het_gpus: Option<FxHashMap<u32, u32>>,
    /// Comments repeat (sweeps, arrays): each distinct one is resolved once
    /// per moment. They are the users' own text: std's keyed hash, so
    /// nobody can submit colliding ones to slow the tick.
    contracts: HashMap<Option<&'a str>, Result<Contract, tally_allocator::ContractError>>,
    /// The last comment resolved and its contract: an array's or a
    /// sweep's jobs sit side by side in slurmctld's list.
    last: Option<(Option<&'a str>, Result<Contract, tally_allocator::ContractError>)>,
    /// Names come shared from the copy ([`crate::view::Names`]); an account
    /// taken from `[users]` is allocated once per moment.
    interned: FxHashMap<&'a str, Arc<str>>,
    now: u64,
    preempt_window_s: u64,
}

impl<'a> Classifier<'a> {
    fn new(config: &'a Config, views: &'a [JobView], now: u64, preempt_window_s: u64) -> Classifier<'a> {
        Classifier {
            config,
            views,
            leaders: None,
            het_gpus: None,
            contracts: HashMap::new(),
            last: None,
            interned: FxHashMap::default(),
            now,
            preempt_window_s,
        }
    }

    /// Job `v` (one of `views`) with its run record.
    fn job(&mut self, v: &'a JobView, run: Option<&RunRecord>) -> (Counted, Job) {
        let comment = if v.het_component() {
            let views = self.views;
            let leaders = self.leaders.get_or_insert_with(|| het_comments(views));
            leaders.get(&v.het_job_id).copied().unwrap_or(v.comment.as_deref())
        } else {
            v.comment.as_deref()
        };
        let config = self.config;
        let contract = match &self.last {
            Some((c, contract)) if *c == comment => contract.clone(),
            _ => {
                let contract = self.contracts.entry(comment).or_insert_with(|| config.contracts.resolve(comment)).clone();
                self.last = Some((comment, contract.clone()));
                contract
            }
        };
        let account = match &v.account {
            Some(a) if !a.is_empty() => a.clone(),
            _ => {
                let a = config.account_for(None, &v.user).unwrap_or("");
                self.interned.entry(a).or_insert_with(|| Arc::from(a)).clone()
            }
        };
        let mut job = job_from(config, v, account, v.user.clone(), contract, run).0;
        if v.het_job_id != 0 {
            let views = self.views;
            let per_node = config.cluster.gpus_per_node;
            let het = self.het_gpus.get_or_insert_with(|| het_gpus(views, per_node));
            if let Some(&all) = het.get(&v.het_job_id) {
                job.holds_gpus = Some(all.max(job.holds_gpus.unwrap_or(0)));
            }
        }
        (counted(v, self.now, self.preempt_window_s), job)
    }
}

/// A heterogeneous job has one contract, its leader's: Slurm preempts a
/// het job only if every component may be preempted, so a small protected
/// component must not shield a big unallocated one.
fn het_comments(views: &[JobView]) -> BTreeMap<u32, Option<&str>> {
    views.iter().filter(|v| v.het_job_id != 0 && v.het_job_id == v.job_id).map(|v| (v.job_id, v.comment.as_deref())).collect()
}

/// A heterogeneous job is classed by what all its components will hold:
/// per het job (its leader's id), the sum over its components not done of
/// each one's [`JobView::class_gpus`] (Slurm starts and ends the
/// components together, and classes the whole job by its leader: a 2-GPU
/// leader must not take the debug lane for an 8-GPU second component).
fn het_gpus(views: &[JobView], gpus_per_node: u32) -> FxHashMap<u32, u32> {
    let mut out: FxHashMap<u32, u32> = FxHashMap::default();
    for v in views.iter().filter(|v| v.het_job_id != 0 && v.state != RunState::Done) {
        let sum = out.entry(v.het_job_id).or_insert(0);
        *sum = sum.saturating_add(v.class_gpus(gpus_per_node));
    }
    out
}

/// What every team runs and waits for now: the one computation of the
/// priority plugin's tick and the preempt plugin's live check. Only
/// allocated jobs count, each as its budget units (`Job::units`: GPUs ×
/// the weight of their type).
pub fn entitlement_of(config: &Config, alloc: &Allocation, jobs: &[(Counted, Job)]) -> Entitlement {
    let funded = Funded::new(&config.tree, alloc);
    let mut load = Load::new(&config.tree);
    // Each account name, shared by the copy ([`crate::view::Names`]),
    // looked up once.
    let mut node_of = ByName::new();
    for (c, job) in jobs {
        if *c == Counted::No || !job.contract.is_allocated() {
            continue;
        }
        let node = node_of.get(&job.account, |name| config.tree.id(name).filter(|&id| funded.funded_at(id)));
        let Some(id) = node else { continue };
        load.count(id, job, *c == Counted::Running, &config.priority);
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
    /// GPU-seconds charged in this tick (budget-unit-seconds with GPU types).
    pub charged_gpu_s: f64,
    pub jobs_seen: usize,
    /// The previous tick's job views, for the caller to drop outside
    /// slurmctld's lock.
    pub retired: Vec<JobView>,
    /// (index into the views, begin time) for pending long jobs that
    /// cannot checkpoint: held ([`tally_allocator::long_start`]) until a
    /// begin time [`HOLD_PERIODS`] recalculations ahead, or released to the
    /// begin time they had (`Engine::long_holds`).
    pub begins: Vec<(usize, u64)>,
}

/// A held long job's begin time is this many recalculation periods ahead
/// (at least [`MIN_HOLD_S`]): each tick that still holds it moves it on, so
/// a job Tally stops looking after (the plugin removed, slurmctld down for
/// long) is released by Slurm itself within a few periods.
pub const HOLD_PERIODS: u64 = 3;
pub const MIN_HOLD_S: u64 = 60;

/// The begin time a hold written at `now` sets ([`HOLD_PERIODS`]).
pub fn hold_until(config: &Config, now: u64) -> u64 {
    now + (HOLD_PERIODS * config.calc_period_s).max(MIN_HOLD_S)
}

/// A long job `priority_p_set` held from its submission (or an update)
/// until the next tick decides ([`long_at_submit`]): handed to
/// [`Engine::adopt_holds`] before that tick's walk, so the tick counts the
/// job as waiting from the begin time it had, and holds or releases it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubmitHold {
    pub job_id: u32,
    /// The begin time it had (given back on release).
    pub begin_s: u64,
    /// The begin time written ([`hold_until`]).
    pub written_s: u64,
}

/// What [`long_at_submit`] decided for a long job that cannot checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum AtSubmit {
    /// Held: write this begin time.
    Held(SubmitHold),
    /// Let go: its budget units count ahead of its team's next long jobs
    /// until the next tick.
    LetGo { account: Arc<str>, units: f64 },
}

/// The tick's rule for a long job that cannot checkpoint
/// ([`tally_allocator::long_start`]), applied when `priority_p_set` sees a
/// job waiting now (at its submission, or an update that made it eligible:
/// a held job's begin time set back by its owner is held again) on the last
/// tick's ranking: held from that moment rather than left to
/// Slurm's scheduler (backfill starts such a job within seconds, before the
/// next tick could hold it, and it cannot be taken back without loss).
/// `job`: `v` converted ([`job_seen_alone`]). `ahead`: the budget units
/// of its team's long jobs let go and still waiting (by the last tick and
/// by this rule since); `asked`: those of its team's long jobs this rule
/// saw since the last tick. The ranking's fair shares do not count them nor
/// the job itself: its team's is taken with them asked too
/// ([`tally_allocator::long_start_asking`]). `None`: not a long job that
/// waits now. A job the last tick let go is not asked (the caller counts it
/// in `ahead`: [`Engine::let_go`]).
///
/// What the ranking does not know (other teams' work submitted since) the
/// next tick does: it releases a job held here, or holds one let go that
/// has not started, as its own rule says.
pub fn long_at_submit(r: &Ranking, v: &JobView, job: &Job, ahead: f64, asked: f64, now: u64) -> Option<AtSubmit> {
    if !queue::waiting(v, now) || !r.config.contracts.is_long(job.contract, job.time_limit_s) {
        return None;
    }
    Some(match tally_allocator::long_start_asking(job, &r.ent, ahead, asked + job.units(), &r.config.priority, &r.config.contracts) {
        tally_allocator::LongStart::Held { .. } => {
            AtSubmit::Held(SubmitHold { job_id: v.job_id, begin_s: v.begin_s, written_s: hold_until(&r.config, now) })
        }
        tally_allocator::LongStart::Free => AtSubmit::LetGo { units: job.units(), account: job.account.clone() },
    })
}

/// A pending job Tally holds back by its begin time: the begin time it had
/// before (given back on release) and the one written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hold {
    begin_s: u64,
    written_s: u64,
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
    /// Since when, and in what state, each account has been (the last
    /// tick's): recorded into the [`tally_allocator::OwedBook`] at the next tick.
    held: Option<Stretch>,
    /// Long jobs that cannot checkpoint held back by their begin time, by
    /// job id (in memory: a restarted slurmctld releases them within
    /// [`HOLD_PERIODS`], and the next tick holds again what must wait).
    holds: FxHashMap<u32, Hold>,
    /// The budget units of each team's long jobs the last tick let go
    /// (still waiting): [`long_at_submit`]'s `ahead` until the next tick.
    let_go: FxHashMap<Arc<str>, f64>,
    /// The long jobs the last tick let go (job ids).
    let_go_ids: FxHashSet<u32>,
    /// A walk has seen slurmctld's jobs since this engine loaded its
    /// ledger: until then an empty walk forgets no run (see `tick`).
    seen_jobs: bool,
}

/// Since when each account has held its state (rate, demand, unallocated).
#[derive(Debug)]
struct Stretch {
    since: u64,
    accounts: Vec<(Arc<str>, Held)>,
}

/// The allocator's view of a Slurm job under a config, from its own
/// comment and no run record (a pending job at submit). A contract the
/// rules refuse makes the job unallocated (job_submit/tally refuses such
/// jobs at the door; this is the fallback for jobs that got in before it).
/// Classed by what it will hold as far as the one view tells
/// (`job_from`); a heterogeneous job's other components are not in it
/// ([`classify`] sums them).
pub fn to_job(config: &Config, v: &JobView) -> (Job, Option<tally_allocator::ContractError>) {
    job_of(config, v, v.comment.as_deref(), None)
}

/// [`to_job`] with the comment that governs it (a het job's leader's) and
/// its run record: a job holding GPUs is what it was when its run started
/// (account, user, GPUs, contract), and has used the protection of its
/// earlier runs.
pub fn job_of(config: &Config, v: &JobView, comment: Option<&str>, run: Option<&RunRecord>) -> (Job, Option<tally_allocator::ContractError>) {
    let account = config.account_for(v.account.as_deref(), &v.user).unwrap_or("");
    job_from(config, v, account.into(), v.user.clone(), config.contracts.resolve(comment), run)
}

/// [`job_of`] with the account (`account_for`), user and comment already
/// resolved. The job's GPUs weigh what `[cluster.gpu_types]` says of its
/// type (`Config::weight_of`); a job holding GPUs keeps the weight its run
/// started with. What it will hold: an array's pending record stands for
/// its pending tasks ([`JobView::tasks`]), an exclusive pending job holds
/// its whole nodes ([`JobView::whole_gpus`], `[cluster] gpus_per_node`
/// when the copy did not read the nodes).
fn job_from(
    config: &Config,
    v: &JobView,
    account: Arc<str>,
    user: Arc<str>,
    resolved: Result<Contract, tally_allocator::ContractError>,
    run: Option<&RunRecord>,
) -> (Job, Option<tally_allocator::ContractError>) {
    let (contract, err) = match resolved {
        Ok(c) => (c, None),
        Err(e) => (Contract::UNALLOCATED, Some(e)),
    };
    let holding = v.holding();
    let mut job = Job {
        id: u64::from(v.job_id),
        account,
        user,
        contract,
        gpus: v.gpus,
        weight: config.weight_of(v.gpu_type.as_deref()),
        submit_s: v.submit_s,
        start_s: (v.state == RunState::Running && v.start_s > 0).then_some(v.start_s),
        within_team: (-v.nice).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        restarts: u32::from(v.restarts),
        time_limit_s: v.time_limit_s,
        earlier_run_s: 0,
        tasks: v.tasks(),
        holds_gpus: v.whole_gpus(config.cluster.gpus_per_node),
    };
    if let Some(r) = run {
        if holding && r.start_s == v.start_s {
            job.account.clone_from(&r.account);
            job.user.clone_from(&r.user);
            job.gpus = r.gpus;
            job.weight = r.weight;
            job.contract = r.contract;
            job.earlier_run_s = r.earlier_s;
            return (job, None);
        }
        job.earlier_run_s = r.protection_used_s(v.start_s, v.start_s);
    }
    (job, err)
}

/// What slurmctld shows of a job's run at `now` (see [`Seen`]).
pub fn seen(v: &JobView, now: u64) -> Seen {
    // Slurm resets the submit time when it requeues a job.
    let requeued_s = if v.restarts > 0 { v.submit_s } else { 0 };
    match v.state {
        RunState::Running | RunState::Suspended if v.start_s > 0 => {
            Seen::Run { start_s: v.start_s, run_s: v.run_s(now), at: now, active: v.state == RunState::Running, requeued_s }
        }
        RunState::Done if v.start_s > 0 => Seen::Ended { start_s: v.start_s, end_s: v.end_s.max(v.start_s), run_s: v.run_s(now), requeued_s },
        // Requeued: Slurm zeroed start and end. A pending job's start and
        // end are the backfill's estimates: never charged.
        RunState::Pending if v.start_s == 0 && v.restarts > 0 => Seen::Requeued { at: v.submit_s.min(now) },
        _ => Seen::Waiting,
    }
}

/// The priority of a job under a ranking and the planner's last committed
/// step, computed from the job as it is now (the one call
/// `priority_p_set` makes, at submit and at every update): behind the GPUs
/// its team had waiting before it at the last walk (all of them for a job
/// submitted since).
pub fn priority_of(r: &Ranking, v: &JobView, plan: Option<&PlanBoard>) -> Priority {
    priority_of_job(r, &job_seen_alone(&r.config, v), plan)
}

/// A job converted from its one record, as `priority_p_set` sees it (the
/// recalculation classes it with the others: [`classify`]).
pub fn job_seen_alone(config: &Config, v: &JobView) -> Job {
    let mut job = to_job(config, v).0;
    if v.het_job_id != 0 {
        // A component of a heterogeneous job: its other components are not
        // in this one view, so it is no debug job until the recalculation
        // classes it by all of them ([`classify`]); never the lane before.
        job.holds_gpus = Some(u32::MAX);
    }
    job
}

/// [`priority_of`] for a job already converted.
pub fn priority_of_job(r: &Ranking, job: &Job, plan: Option<&PlanBoard>) -> Priority {
    let id = u32::try_from(job.id).unwrap_or(u32::MAX);
    let ahead = r.walked.ahead(id).unwrap_or_else(|| r.order.waiting_gpus.get(&*job.account).copied().unwrap_or(0.0));
    job_priority(job, r.fs.standing(&job.account), TeamLoad::behind(&r.ent, &job.account, ahead), &r.config.priority)
        .planned(PlanBoard::starts(plan, id))
}

/// The priority the last walk gave a job (what the tick wrote into
/// slurmctld), read rather than recomputed: sprio, the planner round and
/// `tally explain` read it. A job the walk did not see (submitted since,
/// or not waiting then) gets [`priority_of`].
pub fn walked_priority(r: &Ranking, v: &JobView, plan: Option<&PlanBoard>) -> Priority {
    match r.walked.get(v.job_id) {
        Some(place) => place.priority.planned(PlanBoard::starts(plan, v.job_id)),
        None => priority_of(r, v, plan),
    }
}

/// New priorities of the pending jobs among `views` (index, value) whose
/// priority differs from what slurmctld has; `jobs` are the same jobs
/// classified ([`classify`]). A job the walk of `r` placed gets the walk's
/// priority, any other pending job [`priority_of_job`]. Held jobs
/// (priority 0) stay held; an admin's priority stays.
pub fn changed_priorities(r: &Ranking, views: &[JobView], jobs: &[(Counted, Job)], plan: Option<&PlanBoard>) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    let mut walked = r.walked.cursor();
    for (i, (v, (_, job))) in views.iter().zip(jobs).enumerate() {
        if v.state != RunState::Pending || v.priority == 0 || v.direct_set_prio {
            continue;
        }
        let p = match walked.get(v.job_id) {
            Some(place) => place.priority.planned(PlanBoard::starts(plan, v.job_id)).value,
            None => priority_of_job(r, job, plan).value,
        };
        if p != v.priority {
            out.push((i, p));
        }
    }
    out
}

/// The ranking of `jobs` (one moment's, classified; none at start-up)
/// under a config and a ledger, with the walk's place of each waiting job.
pub fn rank(config: &Arc<Config>, snapshot: &Snapshot, jobs: &[(Counted, Job)], now: u64) -> Ranking {
    let alloc = allocation_at(config, &snapshot.inventory);
    let fs = FairShare::compute(&config.tree, &alloc, &snapshot.ledger.usage(now));
    let ent = entitlement_of(config, &alloc, jobs);
    let refs: Vec<&Job> = jobs.iter().filter(|(c, _)| *c == Counted::Waiting).map(|(_, j)| j).collect();
    let mut order = order_queue(&refs, &fs, &ent, &config.priority);
    let places = refs.iter().zip(order.priorities.drain(..).zip(order.ahead.drain(..)));
    let walked =
        Walked::new(places.map(|(j, (priority, ahead_gpus))| (u32::try_from(j.id).unwrap_or(u32::MAX), Place { priority, ahead_gpus })).collect());
    Ranking { config: config.clone(), fs, ent, walked, order, computed_at: now }
}

impl Engine {
    /// Start from a loaded snapshot (or an empty ledger).
    pub fn new(config: Config, snapshot: Option<Snapshot>, now: u64) -> Engine {
        let config = Arc::new(config);
        let mut snapshot = snapshot.unwrap_or_else(|| Snapshot::new(config.new_ledger()));
        if snapshot.ledger.bucket_s() != config.bucket_s || snapshot.ledger.window_s() != config.window_s {
            snapshot = rebucket(&snapshot, &config);
        }
        if config.cluster.gpu_types.is_empty() {
            // Counts saved under a config with GPU types: not this one's.
            snapshot.inventory.clear();
        }
        let ranking = Arc::new(rank(&config, &snapshot, &[], now));
        Engine {
            config,
            snapshot,
            ranking,
            warned: BTreeSet::new(),
            preempt_window_s: DEFAULT_PREEMPT_WINDOW_S,
            last_jobs: Vec::new(),
            held: None,
            holds: FxHashMap::default(),
            let_go: FxHashMap::default(),
            let_go_ids: FxHashSet::default(),
            seen_jobs: false,
        }
    }

    /// Slurm's `KillWait + MessageTimeout` (see [`DEFAULT_PREEMPT_WINDOW_S`]).
    pub fn set_preempt_window(&mut self, s: u64) {
        self.preempt_window_s = s;
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// The drain rule ([`tally_allocator::drain`]) for running jobs on
    /// draining nodes (job id → those nodes), read from the last tick's
    /// jobs and run book: which to requeue now and which the drain waits
    /// for. Jobs the last tick did not see are left to the next one.
    pub fn drain_plan(&self, now: u64, on: &[(u32, Vec<Arc<str>>)]) -> DrainPlan {
        if on.is_empty() {
            return DrainPlan::default();
        }
        let nodes: FxHashMap<u32, &[Arc<str>]> = on.iter().map(|(id, n)| (*id, n.as_slice())).collect();
        let views: Vec<JobView> = self.last_jobs.iter().filter(|v| v.state == RunState::Running && nodes.contains_key(&v.job_id)).cloned().collect();
        let jobs = classify(&self.config, &views, &self.snapshot.runs, now, self.preempt_window_s);
        let on: Vec<OnDraining> = jobs.iter().zip(&views).map(|((_, job), v)| OnDraining { job, nodes: nodes[&v.job_id] }).collect();
        drain_plan(&on, &self.ranking.ent, now)
    }

    pub fn ranking(&self) -> Arc<Ranking> {
        self.ranking.clone()
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The saved form, stamped with `now`.
    /// Keep how long the last recalculation took, for the reports (saved
    /// with the ledger).
    pub fn set_tick_time(&mut self, took: std::time::Duration) {
        self.snapshot.tick_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
    }

    pub fn state_text(&mut self, now: u64) -> String {
        self.snapshot.saved_at = now;
        self.snapshot.to_text()
    }

    /// Take what a ledger loaded late (after a read error at start-up)
    /// holds, on top of what was charged since.
    pub fn merge(&mut self, loaded: Snapshot) {
        let loaded = if loaded.ledger.bucket_s() != self.config.bucket_s || loaded.ledger.window_s() != self.config.window_s {
            rebucket(&loaded, &self.config)
        } else {
            loaded
        };
        for (b, key, gs) in loaded.ledger.entries() {
            self.snapshot.ledger.add(b, key, gs);
        }
        for (id, r) in loaded.runs.iter() {
            if self.snapshot.runs.get(id).is_none() {
                self.snapshot.runs.insert(id, r.clone());
            }
        }
        for (id, mark) in loaded.runs.legacy_marks() {
            if self.snapshot.runs.get(id).is_none() {
                self.snapshot.runs.set_legacy_mark(id, mark);
            }
        }
        for (b, account, asked) in loaded.owed.entries() {
            self.snapshot.owed.add(b, account, *asked);
        }
        // The nodes' GPUs per type, unless the plugin counted them since.
        if self.snapshot.inventory.is_empty() && !self.config.cluster.gpu_types.is_empty() {
            self.snapshot.inventory = loaded.inventory;
        }
    }

    /// Replace the config (a reload that validated). The ledger keeps its
    /// usage; a new window or bucket re-buckets it.
    pub fn set_config(&mut self, config: Config, now: u64) {
        let config = Arc::new(config);
        if self.snapshot.ledger.bucket_s() != config.bucket_s || self.snapshot.ledger.window_s() != config.window_s {
            self.snapshot = rebucket(&self.snapshot, &config);
        }
        self.config = config;
        if self.config.cluster.gpu_types.is_empty() {
            self.snapshot.inventory.clear();
        }
        self.warned.clear();
        let jobs = classify(&self.config, &self.last_jobs, &self.snapshot.runs, now, self.preempt_window_s);
        self.ranking = Arc::new(rank(&self.config, &self.snapshot, &jobs, now));
        // What was held so far was under the old rates; from now on, the new.
        self.record_owed(now, &jobs);
    }

    /// The GPUs per type on Slurm's nodes (`None`: untyped GPUs), as the
    /// plugin counts them (at start-up, and whenever they may have
    /// changed): with `[cluster.gpu_types]`, the capacity becomes
    /// `[cluster] gpus` with every type the file gives no count for counted
    /// as the nodes say, at its weight (`Config::capacity_with`; a count in
    /// the file wins over the nodes', the rest of `[cluster] gpus` weighs
    /// 1), and the ranking is redone at once. The counts are saved with
    /// the ledger (`gpus` records), so the reports and the other plugins
    /// rank on the same capacity. Without `[cluster.gpu_types]` they are
    /// ignored: the capacity stays `[cluster] gpus`, as always. Returns
    /// whether the capacity changed.
    pub fn set_gpu_inventory(&mut self, counts: BTreeMap<Option<Arc<str>>, u32>, now: u64) -> bool {
        let mut inventory = Inventory::new();
        if !self.config.cluster.gpu_types.is_empty() {
            for (t, n) in counts {
                let t = t.filter(|t| !t.is_empty() && &**t != "-");
                let sum = inventory.entry(t).or_insert(0);
                *sum = sum.saturating_add(n);
            }
            inventory.retain(|_, n| *n > 0);
        }
        if inventory == self.snapshot.inventory {
            return false;
        }
        let gpus = self.config.ranking_gpus();
        let before = self.config.capacity_with(gpus, &self.snapshot.inventory).units;
        let after = self.config.capacity_with(gpus, &inventory).units;
        let typed: u64 = self.config.cluster.gpu_types.typed_gpus(&inventory).values().map(|&n| u64::from(n)).sum();
        if typed > u64::from(gpus) {
            log::warn!(
                "the GPU types of [cluster.gpu_types] have {typed} GPUs (the file's counts and Slurm's nodes), more than [cluster] gpus = {gpus} in {}: only the typed GPUs count",
                self.config.source
            );
        }
        log::info!("GPUs per type on the nodes: {}; capacity {after:.1} budget units (was {before:.1})", inventory_text(&inventory));
        self.snapshot.inventory = inventory;
        let jobs = classify(&self.config, &self.last_jobs, &self.snapshot.runs, now, self.preempt_window_s);
        self.ranking = Arc::new(rank(&self.config, &self.snapshot, &jobs, now));
        // What was held since the last tick was under the old rates (before
        // the first tick there is nothing to record).
        if self.held.is_some() {
            self.record_owed(now, &jobs);
        }
        before != after
    }

    /// The runs preempt/tally preempted ([`crate::preempted`]): their jobs'
    /// next runs get their whole contracts. Returns how many notes were new
    /// to the run book (a note is taken once, however often it is read).
    pub fn note_preempted(&mut self, notes: &crate::preempted::Notes) -> usize {
        notes.iter().filter(|n| self.snapshot.runs.preempted(u64::from(n.job_id), n.run_start_s)).count()
    }

    /// Charge `v` as `job` (its facts now: frozen if this is a new run)
    /// for what it ran since it was last seen ([`tally_allocator::runs`]).
    fn observe(&mut self, v: &JobView, job: &Job, now: u64, alloc: &Allocation) -> f64 {
        let seen = seen(v, now);
        if seen == Seen::Waiting {
            return 0.0;
        }
        self.snapshot.runs.observe(job, seen, &Funded::new(&self.config.tree, alloc), &mut self.snapshot.ledger)
    }

    /// One recalculation over every job slurmctld knows, under the
    /// planner's last committed step (`None`: no planner). Each job is
    /// converted once ([`classify`]): that conversion is charged, ranked
    /// and given its priority.
    pub fn tick(&mut self, now: u64, views: impl Into<Vec<JobView>>, plan: Option<&PlanBoard>) -> TickReport {
        let mut views: Vec<JobView> = views.into();
        self.see_holds(&mut views);
        let mut report = TickReport { jobs_seen: views.len(), ..TickReport::default() };
        let alloc = allocation_at(&self.config, &self.snapshot.inventory);
        let recorded = self.snapshot.runs.len();
        let config = self.config.clone();
        let mut classifier = Classifier::new(&config, &views, now, self.preempt_window_s);
        let mut jobs = Vec::with_capacity(views.len());
        let mut with_run = 0;
        for v in &views {
            let run = self.snapshot.runs.get(u64::from(v.job_id));
            with_run += usize::from(run.is_some());
            let (counted, job) = classifier.job(v, run);
            report.charged_gpu_s += self.observe(v, &job, now, &alloc);
            jobs.push((counted, job));
        }
        drop(classifier);
        // Forget the runs of jobs slurmctld no longer has: there are some
        // when fewer of its jobs had a record than the book held (job ids
        // are unique in slurmctld; runs opened since belong to its jobs).
        // Not on an empty walk before any walk saw jobs: that is the list
        // of a slurmctld that has not recovered its jobs yet (from 24.11 a
        // backup taking over loads this plugin first), and forgetting would
        // charge every run again from its start once they are back.
        let recovering = views.is_empty() && !self.seen_jobs;
        self.seen_jobs |= !views.is_empty();
        if !recovering && (with_run < recorded || !self.snapshot.runs.legacy_is_empty()) {
            let mut live: FxHashSet<u64> = FxHashSet::with_capacity_and_hasher(views.len(), Default::default());
            live.extend(views.iter().map(|v| u64::from(v.job_id)));
            self.snapshot.runs.retain(|id| live.contains(&id));
        }
        self.snapshot.ledger.prune(now);
        self.ranking = Arc::new(rank(&self.config, &self.snapshot, &jobs, now));
        self.record_owed(now, &jobs);
        self.warn_unknown(&views, &jobs);
        report.priorities = changed_priorities(&self.ranking, &views, &jobs, plan);
        report.begins = self.long_holds(&views, &jobs, now);
        // The last moment's views are dropped by the caller, after it
        // released slurmctld's lock.
        report.retired = std::mem::replace(&mut self.last_jobs, views);
        report
    }

    /// Holds written by `priority_p_set` since the last tick
    /// ([`long_at_submit`]): this engine's to count, move on or release,
    /// as if its own tick had written them.
    pub fn adopt_holds(&mut self, holds: impl IntoIterator<Item = SubmitHold>) {
        // The latest write wins: a hold of this engine's whose begin time
        // the job's owner set back was held again by priority_p_set.
        for h in holds {
            self.holds.insert(h.job_id, Hold { begin_s: h.begin_s, written_s: h.written_s });
        }
    }

    /// The budget units of each team's long jobs the last tick let go,
    /// still waiting: what [`long_at_submit`] counts ahead until the next
    /// tick.
    pub fn let_go(&self) -> &FxHashMap<Arc<str>, f64> {
        &self.let_go
    }

    /// The long jobs the last tick let go (job ids).
    pub fn let_go_ids(&self) -> &FxHashSet<u32> {
        &self.let_go_ids
    }

    /// The jobs Tally holds, as the engine counts them: waiting from the
    /// begin time they had (they are in their team's demand and the walk,
    /// and get their priority). A job no longer pending, or whose begin time
    /// someone else changed since (`scontrol update StartTime=`), is no
    /// longer Tally's to hold.
    fn see_holds(&mut self, views: &mut [JobView]) {
        if self.holds.is_empty() {
            return;
        }
        let mut seen: FxHashMap<u32, Hold> = FxHashMap::default();
        for v in views.iter_mut() {
            if let Some(&h) = self.holds.get(&v.job_id) {
                if v.state == RunState::Pending && v.begin_s == h.written_s {
                    v.begin_s = h.begin_s;
                    seen.insert(v.job_id, h);
                }
            }
        }
        self.holds = seen;
    }

    /// The long jobs that cannot checkpoint among the waiting ones, in
    /// Slurm's order, each held or let go by [`tally_allocator::long_start`]
    /// on this tick's entitlement, a job let go counted ahead of its team's
    /// next ones (not as running for the others: a job let go may not find
    /// GPUs, and its team's turn does not end another team's claim).
    /// Returns the begin times to write: a hold's (moved on each tick), or a
    /// release's (the begin time the job had).
    fn long_holds(&mut self, views: &[JobView], jobs: &[(Counted, Job)], now: u64) -> Vec<(usize, u64)> {
        let config = &self.config;
        let r = &self.ranking;
        let mut long: Vec<(queue::SlurmKey, usize)> = jobs
            .iter()
            .enumerate()
            .filter(|(_, (c, j))| *c == Counted::Waiting && config.contracts.is_long(j.contract, j.time_limit_s))
            .map(|(i, _)| (queue::slurm_order_at(&views[i], walked_priority(r, &views[i], None).value, None), i))
            .collect();
        long.sort_unstable();
        let mut old = std::mem::take(&mut self.holds);
        let mut out = Vec::new();
        let mut ahead: FxHashMap<Arc<str>, f64> = FxHashMap::default();
        self.let_go_ids.clear();
        let until = hold_until(config, now);
        for (_, i) in long {
            let (v, job) = (&views[i], &jobs[i].1);
            let had = old.remove(&v.job_id);
            let before = ahead.get(&job.account).copied().unwrap_or(0.0);
            match tally_allocator::long_start(job, &r.ent, before, &config.priority, &config.contracts) {
                tally_allocator::LongStart::Held { .. } => {
                    let begin_s = had.map_or(v.begin_s, |h| h.begin_s);
                    self.holds.insert(v.job_id, Hold { begin_s, written_s: until });
                    out.push((i, until));
                }
                tally_allocator::LongStart::Free => {
                    self.let_go_ids.insert(v.job_id);
                    *ahead.entry(job.account.clone()).or_insert(0.0) += job.units();
                    if let Some(h) = had {
                        out.push((i, h.begin_s));
                    }
                }
            }
        }
        // Held before and no longer a long job waiting (the config
        // changed, its comment was updated): given back its begin time.
        if !old.is_empty() {
            out.extend(views.iter().enumerate().filter_map(|(i, v)| old.get(&v.job_id).map(|h| (i, h.begin_s))));
        }
        self.let_go = ahead;
        out
    }

    /// Record what every account held since the last tick (its rate, its
    /// allocated demand, its unallocated GPUs running) into the owed book,
    /// and start the next stretch from this tick's ranking. A stretch
    /// longer than three calc periods (the thread stopped, the clock
    /// jumped) is not recorded: nobody saw it. Only accounts of the tree
    /// are recorded.
    fn record_owed(&mut self, now: u64, jobs: &[(Counted, Job)]) {
        if let Some(Stretch { since, accounts }) = self.held.take() {
            let longest = self.config.calc_period_s.max(1).saturating_mul(3).max(60);
            if now > since && now - since <= longest {
                for (account, h) in &accounts {
                    self.snapshot.owed.record(account, *h, since, now);
                }
            }
        }
        self.snapshot.owed.prune(now);
        let tree = &self.config.tree;
        // Accounts gone from the config leave with their records (a file of
        // 25,000 accounts in force for a moment would otherwise be saved,
        // every period, for a window).
        self.snapshot.owed.retain_accounts(|a| tree.contains(a));
        let ent = &self.ranking.ent;
        let mut unallocated = vec![0.0; tree.len()];
        let mut node_of = ByName::new();
        for (c, job) in jobs {
            if *c != Counted::Running {
                continue;
            }
            let Some(id) = node_of.get(&job.account, |name| tree.id(name)) else { continue };
            if !job.contract.is_allocated() || !ent.funded_at(id) {
                unallocated[id] += job.units();
            }
        }
        let mut held = Vec::new();
        self.snapshot.load.clear();
        for (id, u) in unallocated.into_iter().enumerate() {
            let t = ent.team_at(id);
            if t.rate > 0.0 || t.demand > 0.0 || u > 0.0 {
                let name = &tree.node(id).name;
                held.push((Arc::from(name.as_str()), Held { rate_gpus: t.rate, demand_gpus: t.demand, unallocated_gpus: u }));
            }
            if t.demand > 0.0 {
                self.snapshot.load.insert(tree.node(id).name.clone(), (t.running, t.demand - t.running));
            }
        }
        self.held = Some(Stretch { since: now, accounts: held });
    }

    /// Say once which accounts run unallocated because the tree does not
    /// know them (each distinct account looked up once a tick: names are
    /// shared, so the name's address tells them apart).
    fn warn_unknown(&mut self, views: &[JobView], jobs: &[(Counted, Job)]) {
        let mut seen = ByName::new();
        for (v, (_, job)) in views.iter().zip(jobs) {
            if seen.first(&job.account) && !self.warned.contains(&*job.account) {
                self.warn_once(v, job);
            }
        }
    }

    fn warn_once(&mut self, v: &JobView, job: &Job) {
        if !self.config.tree.contains(&job.account) && self.warned.insert(job.account.to_string()) {
            if job.account.is_empty() {
                log::warn!("job {}: user {} has no account and is not in [users]; such jobs run unallocated", v.job_id, v.user);
            } else {
                log::warn!("account `{}` (job {}) is not in the tree of {}; its jobs run unallocated", job.account, v.job_id, self.config.source);
            }
        }
    }

    /// Per-account GPU-hours in the window (for logs and reports).
    pub fn usage_by_account(&self, now: u64) -> BTreeMap<String, f64> {
        self.snapshot.ledger.usage(now).by_account.into_iter().map(|(a, s)| (a, s / HOUR)).collect()
    }
}

/// `h100 64, b200 32, untyped 8` (for the log).
fn inventory_text(inventory: &Inventory) -> String {
    if inventory.is_empty() {
        return "none".to_string();
    }
    inventory.iter().map(|(t, n)| format!("{} {n}", t.as_deref().unwrap_or("untyped"))).collect::<Vec<_>>().join(", ")
}

fn rebucket(old: &Snapshot, config: &Config) -> Snapshot {
    let mut ledger = config.new_ledger();
    for (b, key, gs) in old.ledger.entries() {
        ledger.add(b * old.ledger.bucket_s() / config.bucket_s, key, gs);
    }
    let owed = old.owed.rebucket(config.bucket_s, config.window_s);
    Snapshot {
        saved_at: old.saved_at,
        ledger,
        runs: old.runs.clone(),
        owed,
        load: old.load.clone(),
        inventory: old.inventory.clone(),
        tick_us: old.tick_us,
    }
}

/// What a drain does and waits for, in words for slurmctld's log: one line
/// per job requeued, one per job waited for (its contract's end, UTC).
pub fn drain_lines(plan: &DrainPlan, now: u64) -> Vec<String> {
    use tally_allocator::VictimClass;
    let hms = |t: u64| format!("{:02}:{:02}:{:02} UTC", t % DAY_S / HOUR_S, t % HOUR_S / MINUTE_S, t % MINUTE_S);
    let mut out = Vec::new();
    for (id, class) in &plan.requeue {
        let why = match class {
            VictimClass::Unallocated => "unallocated (no contract)",
            VictimClass::PastContractResumable => "past its contract, resumable",
            VictimClass::PastContract => "past its contract",
        };
        out.push(format!("host drain: requeueing job {id}: {why}"));
    }
    for w in &plan.waiting {
        let nodes: Vec<&str> = w.nodes.iter().map(|n| &**n).collect();
        out.push(format!(
            "host drain: {} waits on job {}, inside its contract for {} more (until {}); requeued then",
            nodes.join(","),
            w.job_id,
            tally_allocator::format_duration(w.until_s.saturating_sub(now)),
            hms(w.until_s)
        ));
    }
    out
}
#[cfg(test)]
mod tests;
