//! Job order: one function from a job, its team's standing and what its
//! team runs now to a Slurm priority (u32, higher runs first).
//!
//! Bit layout (most significant first):
//!
//! ```text
//!  31      tier    1 = allocated, 0 = unallocated
//!  30      plan    1 = the planner starts it in its committed step (0 without a planner)
//!  29..28  need    3 = debug lane (`[priority] debug_lane`, on by default: a debug job),
//!                  2 = its team would still be below its rate when it starts,
//!                  1 = below its fair share now (an idle sibling's rate),
//!                  0 = neither (and every unallocated job)
//!  27..18  level   need 2 or 1: 1023 − ⌊1023 · share⌋, share = (running + ahead) ÷ (rate or fair) ∈ [0, 1)
//!                  (a lane job: the level its team's need gives it); need 0: 0
//!  17..8   team    1023 − min(7-day rank, 1023)      (rank 0 = most under-served over the window)
//!   7..1   nice    clamp(within_team, −64, 63) + 64   (within_team = −nice)
//!   0      quick   1 = a debug job (at most `[priority] debug_max_gpus` GPUs, default 2, and a
//!                  contract of at most `debug_max_contract`, default 15 min) or a quick one (a time
//!                  limit of at most `quick_time_limit`, default 30 min)
//!  result  max(1, …)   (0 means "held" to Slurm)
//! ```
//! `running` is the GPUs its team's allocated jobs run now, `ahead` the GPUs
//! of its team's allocated jobs that wait before it (in [`inside_order`];
//! both in budget units with GPU types, [`crate::gpu_types`]),
//! so one team's jobs interleave with the others' by the share each would
//! start at: the queue is a water-fill of what each team is owed *now*, and
//! a team that reached its rate stops taking freed GPUs ahead of a team that
//! has not ([`crate::entitlement`]). Past that, the 7-day ranking shares the
//! surplus, the under-served of the window first.
//!
//! Consequences, in order: every allocated job outranks every unallocated
//! one; inside a tier, the jobs the planner starts now (`[planner]`) come
//! first; then jobs whose team is owed GPUs now, the least served first;
//! then the rest by the 7-day ranking. Equal levels fall to the team field,
//! so nothing below the team bits reorders two teams (priority never sorts
//! across teams — the debug lane, when a site turns it on, is the one
//! deliberate exception); inside a team the user's nice decides, then quick
//! jobs, then Slurm's own tie-break (submit time, then job id) keeps FIFO.
//! Deliberate limits: more than 1023 ranked accounts share the last team
//! value; a share is resolved to 1/1023 of a team's rate; nice beyond ±64
//! saturates.

use crate::entitlement::{Entitlement, Need};
use crate::fairshare::{FairShare, Standing};
use crate::job::Job;
use crate::tree::NodeId;
use crate::MINUTE_S;
use std::cmp::{Ordering, Reverse};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One field of the priority: its lowest bit and its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub shift: u32,
    pub bits: u32,
}

impl Field {
    pub const fn max(self) -> u32 {
        (1 << self.bits) - 1
    }
    /// `value` in place (saturating at the field's maximum).
    pub const fn put(self, value: u32) -> u32 {
        let v = if value > self.max() { self.max() } else { value };
        v << self.shift
    }
    pub const fn get(self, priority: u32) -> u32 {
        (priority >> self.shift) & self.max()
    }
    /// The weight of one step of the field.
    pub const fn unit(self) -> u32 {
        1 << self.shift
    }
}

pub const TIER: Field = Field { shift: 31, bits: 1 };
pub const PLAN: Field = Field { shift: 30, bits: 1 };
pub const NEED: Field = Field { shift: 28, bits: 2 };
pub const LEVEL: Field = Field { shift: 18, bits: 10 };
pub const TEAM: Field = Field { shift: 8, bits: 10 };
pub const NICE: Field = Field { shift: 1, bits: 7 };
pub const QUICK: Field = Field { shift: 0, bits: 1 };
/// `within_team` is clamped to this range before it is biased into [`NICE`].
pub const INSIDE_MIN: i32 = -64;
pub const INSIDE_MAX: i32 = 63;

/// The `need` field's values.
pub const NEED_LANE: u32 = 3;
pub const NEED_OWED: u32 = 2;
pub const NEED_FAIR: u32 = 1;
pub const NEED_NONE: u32 = 0;

/// Settings of the order (from `[priority]` in tally.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityRules {
    /// A job whose time limit is at most this is *quick*: it goes first
    /// among its team's jobs of the same nice (default 30 min).
    pub quick_time_limit_s: u64,
    /// The debug class, as Ai2 defines it: a job of at most this many GPUs
    /// (default 2; 0 turns the class off)…
    pub debug_max_gpus: u32,
    /// …and an allocated contract of at most this (default 15 min), with
    /// or without a time limit. A debug job is quick.
    pub debug_max_contract_s: u64,
    /// The debug lane (on by default): allocated debug jobs
    /// ([`PriorityRules::is_debug`]) go before every other allocated job,
    /// whatever their team's standing. Off: priority never sorts across
    /// teams.
    pub debug_lane: bool,
    /// The debug allowance, in basis points of a team's rate (default 500,
    /// 5%): how many GPUs of debug jobs a team may hold at once with the
    /// debug class's favours ([`PriorityRules::debug_allowance`]).
    pub debug_allowance_bp: u32,
}

/// The default of `[priority] quick_time_limit`.
pub const DEFAULT_QUICK_TIME_LIMIT_S: u64 = 30 * MINUTE_S;
/// The defaults of `[priority] debug_max_gpus` and `debug_max_contract`
/// (Ai2's debug workloads: a few GPUs, a minimum runtime of 15 minutes or less).
pub const DEFAULT_DEBUG_MAX_GPUS: u32 = 2;
pub const DEFAULT_DEBUG_MAX_CONTRACT_S: u64 = 15 * MINUTE_S;
/// The default of `[priority] debug_allowance`: 5% of a team's rate (in
/// basis points).
pub const DEFAULT_DEBUG_ALLOWANCE_BP: u32 = 500;
/// The debug allowance is never less than this many debug jobs of
/// `debug_max_gpus` ([`PriorityRules::debug_allowance`]). Measured on the
/// real-Slurm replay: with one, a team's second debug job queued as
/// ordinary work behind its first and waited up to 90 real seconds; the
/// gaming family is the same with one, two or four (docs/design.md).
pub const DEBUG_ALLOWANCE_JOBS: u32 = 2;

impl Default for PriorityRules {
    fn default() -> Self {
        PriorityRules {
            quick_time_limit_s: DEFAULT_QUICK_TIME_LIMIT_S,
            debug_max_gpus: DEFAULT_DEBUG_MAX_GPUS,
            debug_max_contract_s: DEFAULT_DEBUG_MAX_CONTRACT_S,
            debug_lane: true,
            debug_allowance_bp: DEFAULT_DEBUG_ALLOWANCE_BP,
        }
    }
}

impl PriorityRules {
    /// A debug job: an allocated contract of at most
    /// `debug_max_contract_s` and at most `debug_max_gpus` GPUs, judged by
    /// what one task of it will hold ([`Job::class_gpus`]): an exclusive
    /// job by its whole nodes, a heterogeneous one by all its components;
    /// an array's record by one task (its lane and allowance count all of
    /// them, [`Job::tasks`]).
    pub fn is_debug(&self, job: &Job) -> bool {
        job.contract.is_allocated() && job.contract.min_runtime_s <= self.debug_max_contract_s && job.class_gpus() <= self.debug_max_gpus
    }

    /// The debug allowance of a team whose rate is `rate` (budget units):
    ///
    /// ```text
    /// allowance = max(2 × debug_max_gpus, debug_allowance × rate)      GPUs
    /// ```
    /// A team's debug jobs take the debug lane, and time-slice another
    /// team's work, only while the GPUs of its debug jobs running and of
    /// those ahead of them in the lane stay within it; beyond it its debug
    /// jobs queue as ordinary work. At least two debug jobs of the largest
    /// size ([`DEBUG_ALLOWANCE_JOBS`]), so that every funded team can debug
    /// while another of its debug jobs runs.
    pub fn debug_allowance(&self, rate: f64) -> f64 {
        let share = f64::from(self.debug_allowance_bp) / 10_000.0 * rate.max(0.0);
        share.max(f64::from(DEBUG_ALLOWANCE_JOBS * self.debug_max_gpus))
    }

    /// May a job run on the debug capacity's nodes (`[priority]
    /// debug_nodes`)? Unallocated work (preemptible at once: it fills them
    /// while no debug job waits) and debug jobs; nothing else.
    ///
    /// ```text
    /// may_use_debug_nodes ⇔ ¬allocated ∨ debug
    /// ```
    pub fn may_use_debug_nodes(&self, job: &Job, allocated: bool) -> bool {
        !allocated || self.is_debug(job)
    }

    /// A quick job: a debug job ([`PriorityRules::is_debug`]), or a time
    /// limit of at most `quick_time_limit_s`.
    pub fn is_quick(&self, job: &Job) -> bool {
        self.is_debug(job) || job.time_limit_s.is_some_and(|t| t <= self.quick_time_limit_s)
    }

    /// A job's place in its team's order ([`SliceKey`]): the inside order
    /// without its tie-breaks ([`inside_key`]).
    pub fn slice_key(&self, job: &Job) -> SliceKey {
        SliceKey { nice: -job.within_team.clamp(INSIDE_MIN, INSIDE_MAX), not_quick: !self.is_quick(job) }
    }

    /// Time-slicing inside a team: may waiting job `p` (its
    /// [`PriorityRules::slice_key`]) take the GPUs of its team's running
    /// job `v` past its contract? Only a quick (debug) job, from a job
    /// that is not quick and does not come before it by nice:
    ///
    /// ```text
    /// p quick ∧ v not quick ∧ nice(p) ≤ nice(v)
    /// ```
    /// A higher priority alone orders the queue but never preempts
    /// (docs/design.md: measured, it costs more than it gives).
    pub fn slices(p: SliceKey, v: SliceKey) -> bool {
        !p.not_quick && v.not_quick && p.nice <= v.nice
    }
}

/// A job's place in its team's order, first = lowest: by `nice` (its
/// within-team priority negated, clamped as the priority clamps it), then
/// quick jobs before the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SliceKey {
    /// −within_team, clamped: lower comes first.
    pub nice: i32,
    /// Not a quick job ([`PriorityRules::is_quick`]): comes after the
    /// quick ones of the same `nice`.
    pub not_quick: bool,
}

/// A priority and the fields it was built from (what sprio shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Priority {
    pub value: u32,
    pub allocated: bool,
    /// The planner starts it in its committed step.
    pub planned: bool,
    /// `NEED_LANE`, `NEED_OWED`, `NEED_FAIR` or `NEED_NONE`.
    pub need: u32,
    pub level: u32,
    /// The account's 7-day rank, `None` if the account is not in the tree.
    pub rank: Option<u32>,
    pub team: u32,
    /// The nice field (`within_team` clamped and biased).
    pub nice: u32,
    pub quick: bool,
}

/// What a job's team runs now: the [`Entitlement`] and the GPUs of its
/// team's allocated jobs waiting before it.
#[derive(Debug, Clone, Copy)]
pub struct TeamLoad<'a> {
    pub ent: &'a Entitlement,
    pub ahead_gpus: f64,
    /// GPUs in its team's debug allowance before it: its team's debug jobs
    /// running and those walked before it that took the lane. A debug job
    /// takes the lane only if its own GPUs still fit the allowance.
    pub lane_gpus: f64,
}

impl<'a> TeamLoad<'a> {
    /// Behind `ahead_gpus` of its team's GPUs, and only its team's running
    /// debug jobs in the allowance before it (what a lone job of the team
    /// would see).
    pub fn behind(ent: &'a Entitlement, account: &str, ahead_gpus: f64) -> TeamLoad<'a> {
        let lane_gpus = ent.team(account).map_or(0.0, |t| t.debug_running);
        TeamLoad { ent, ahead_gpus, lane_gpus }
    }
}

/// The one job-order function shared by the plugin, the simulator and
/// reports. `standing`: the job's account in the 7-day ranking (`None`: not
/// in the tree).
pub fn job_priority(job: &Job, standing: Option<&Standing>, load: TeamLoad<'_>, rules: &PriorityRules) -> Priority {
    job_priority_at(traits(job, rules), standing, load.ent.id(&job.account), load, rules)
}

/// A job's priority behind any number of its team's GPUs: what
/// [`job_priority`] gives it once its team is served at or past both its
/// rate and its fair share (need 0, or the debug lane, at level 0). Every
/// job of a team walked after the team is settled gets it
/// ([`QueueWalk::settled`]).
pub fn settled_priority(job: &Job, standing: Option<&Standing>, ent: &Entitlement, rules: &PriorityRules) -> Priority {
    job_priority(job, standing, TeamLoad { ent, ahead_gpus: f64::INFINITY, lane_gpus: f64::INFINITY }, rules)
}

/// What of a job its priority reads besides its team (a queue walk copies
/// these out once, in memory order, then walks them in queue order).
///
/// A job array's record of pending tasks ([`Job::tasks`]) is all of its
/// tasks at once: `tasks ×` its units ahead of its team's later jobs, and
/// the lane only if all its tasks fit the allowance (`tasks × gpus`),
/// because Slurm starts tasks off the record between two recalculations
/// with the priority the record has: giving it the lane for part of them
/// gives it to all.
#[derive(Debug, Clone, Copy, Default)]
struct Traits {
    contract_allocated: bool,
    quick: bool,
    /// A debug job (the debug lane): one task of it is
    /// ([`PriorityRules::is_debug`]).
    debug: bool,
    /// Budget units (`tasks × gpus × weight`): what it adds to its team's
    /// `ahead`.
    units: f64,
    /// GPUs (`tasks × gpus`): what it adds to its team's debug allowance.
    gpus: f64,
    within_team: i32,
}

fn traits(job: &Job, rules: &PriorityRules) -> Traits {
    let tasks = f64::from(job.tasks.max(1));
    Traits {
        contract_allocated: job.contract.is_allocated(),
        quick: rules.is_quick(job),
        debug: rules.is_debug(job),
        units: job.units() * tasks,
        gpus: f64::from(job.gpus) * tasks,
        within_team: job.within_team,
    }
}

/// [`job_priority`] with the job's tree node already looked up.
fn job_priority_at(job: Traits, standing: Option<&Standing>, node: Option<NodeId>, load: TeamLoad<'_>, rules: &PriorityRules) -> Priority {
    // `Job::is_allocated` with the node already looked up.
    let allocated = job.contract_allocated && node.is_some_and(|id| load.ent.funded_at(id));
    let rank = standing.map(|s| s.rank);
    let team = TEAM.max() - rank.unwrap_or(TEAM.max()).min(TEAM.max());
    let quick = job.quick;
    let (need, level) = if allocated {
        match node.map(|id| load.ent.need(id, load.ahead_gpus)) {
            Some(Need::Owed { share }) => (NEED_OWED, level_of(share)),
            Some(Need::Fair { share }) => (NEED_FAIR, level_of(share)),
            _ => (NEED_NONE, 0),
        }
    } else {
        (NEED_NONE, 0)
    };
    let lane = allocated && job.debug && rules.debug_lane && in_allowance(load, node, job.gpus, rules);
    let need = if lane { NEED_LANE } else { need };
    let nice = (job.within_team.clamp(INSIDE_MIN, INSIDE_MAX) - INSIDE_MIN) as u32;
    let value = TIER.put(u32::from(allocated)) | NEED.put(need) | LEVEL.put(level) | TEAM.put(team) | NICE.put(nice) | QUICK.put(u32::from(quick));
    Priority { value: value.max(1), allocated, planned: false, need, level, rank, team, nice, quick }
}

/// Whether a debug job of `gpus` GPUs of the team of `node` fits its debug
/// allowance behind `load.lane_gpus` ([`PriorityRules::debug_allowance`]).
fn in_allowance(load: TeamLoad<'_>, node: Option<NodeId>, gpus: f64, rules: &PriorityRules) -> bool {
    node.is_some_and(|id| load.lane_gpus + gpus <= rules.debug_allowance(load.ent.team_at(id).rate) + 1e-9)
}

/// Slurm's `array_task_id` of a job that is not a task split off an array
/// (`NO_VAL`: a plain job, an array's record of its pending tasks).
pub const NO_TASK: u32 = 0xffff_fffe;

/// Where a pending job stands in Slurm's queue, first = smallest
/// ([`slurm_key`]).
pub type SlurmKey<P> = (Reverse<P>, u64, u64, u32);

/// Slurm's order of pending jobs (`sort_job_queue2` in slurmctld's
/// job_scheduler.c, for jobs of one partition without reservations), the
/// one statement of it: priority descending, then submit time, then job id
/// (an array task's array job id), then array task id. `task`:
/// `Some((array_job_id, task_id))` for a task split off an array, `None`
/// for any other job. The plugin, `tally explain` and the simulator sort
/// by it.
pub fn slurm_key<P: Ord>(priority: P, submit_s: u64, job_id: u64, task: Option<(u64, u32)>) -> SlurmKey<P> {
    let (id, task) = task.unwrap_or((job_id, NO_TASK));
    (Reverse(priority), submit_s, id, task)
}

/// Inside-team order, first job first: the user's `within_team` (−nice,
/// clamped as the priority clamps it) descending, then quick jobs, then
/// submit time, then job id — the order in which a team's jobs queue behind
/// each other (the priority's nice and quick bits, then Slurm's own
/// tie-break). As a sort key: [`inside_key`].
pub fn inside_order(a: &Job, b: &Job, rules: &PriorityRules) -> Ordering {
    inside_key(a, rules).cmp(&inside_key(b, rules))
}

/// −within_team (clamped), not quick, submit time, job id.
pub type InsideKey = (i32, bool, u64, u64);

/// [`inside_order`] as a key (ascending = first): [`PriorityRules::slice_key`],
/// then submit time and job id.
pub fn inside_key(job: &Job, rules: &PriorityRules) -> InsideKey {
    let SliceKey { nice, not_quick } = rules.slice_key(job);
    (nice, not_quick, job.submit_s, job.id)
}

/// Every waiting job's priority at one moment, and what a job that arrives
/// later waits behind.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueOrder {
    /// In the order of the jobs given.
    pub priorities: Vec<Priority>,
    /// GPUs of each job's team waiting before it (the jobs' order).
    pub ahead: Vec<f64>,
    /// Per account: GPUs of its allocated waiting jobs. A job submitted
    /// before the next re-ranking queues behind all of them
    /// ([`QueueOrder::priority_of_new`]).
    pub waiting_gpus: BTreeMap<String, f64>,
}

/// The one walk that gives a queue its priorities (the priority plugin's
/// recalculation, the simulator's re-plan): per team, in
/// [`inside_order`], each job behind the GPUs of its team's allocated
/// waiting jobs before it. `waiting` are the eligible waiting jobs.
pub fn order_queue(waiting: &[&Job], fs: &FairShare, ent: &Entitlement, rules: &PriorityRules) -> QueueOrder {
    // Grouped by team (in order of first appearance: teams are walked
    // independently), then the inside order; keys computed once.
    // Grouped by team with a counting sort (teams in order of first
    // appearance), each team then sorted by its inside key; what the walk
    // reads of a job is copied beside its key, so the walk reads in order.
    // A moment's jobs share their account names: each shared name is
    // looked up by value once.
    let mut team_of: rustc_hash::FxHashMap<&str, u32> = rustc_hash::FxHashMap::default();
    let mut by_name = crate::names::ByName::new();
    let team: Vec<u32> = waiting
        .iter()
        .map(|j| {
            by_name.get(&j.account, |name| {
                let next = u32::try_from(team_of.len()).unwrap_or(u32::MAX);
                *team_of.entry(name).or_insert(next)
            })
        })
        .collect();
    let mut start = vec![0usize; team_of.len() + 1];
    for &t in &team {
        start[t as usize + 1] += 1;
    }
    for t in 1..start.len() {
        start[t] += start[t - 1];
    }
    let mut next = start.clone();
    let mut items: Vec<(InsideKey, usize, Traits)> = vec![(InsideKey::default(), 0, Traits::default()); waiting.len()];
    for (i, (j, &t)) in waiting.iter().zip(&team).enumerate() {
        items[next[t as usize]] = (inside_key(j, rules), i, traits(j, rules));
        next[t as usize] += 1;
    }
    let mut walk = QueueWalk::new(fs, ent, rules);
    let mut priorities = vec![Priority::default(); waiting.len()];
    let mut ahead = vec![0.0; waiting.len()];
    for w in start.windows(2) {
        let group = &mut items[w[0]..w[1]];
        group.sort_unstable_by_key(|&(k, _, _)| k);
        walk.enter(&waiting[group[0].1].account);
        for &(_, i, t) in group.iter() {
            (priorities[i], ahead[i]) = walk.step(t);
        }
    }
    QueueOrder { priorities, ahead, ..walk.finish() }
}

/// [`order_queue`] one job at a time, for callers that keep each team's
/// jobs in [`inside_order`] themselves (the simulator): call
/// [`QueueWalk::next`] for every waiting job, each team's in that order
/// (teams may interleave).
#[derive(Debug)]
pub struct QueueWalk<'a> {
    fs: &'a FairShare,
    ent: &'a Entitlement,
    rules: &'a PriorityRules,
    waiting_gpus: BTreeMap<String, f64>,
    /// The account walked last, its lookups and its GPUs so far (jobs come
    /// grouped by team: one lookup per team, not per job).
    current: Option<Current<'a>>,
}

#[derive(Debug)]
struct Current<'a> {
    account: Arc<str>,
    standing: Option<&'a Standing>,
    node: Option<NodeId>,
    ahead: f64,
    /// GPUs in its debug allowance: its debug jobs running, and those
    /// walked so far that took the lane.
    lane: f64,
    /// GPUs of its waiting debug jobs not walked yet.
    debug_left: f64,
}

impl<'a> QueueWalk<'a> {
    pub fn new(fs: &'a FairShare, ent: &'a Entitlement, rules: &'a PriorityRules) -> QueueWalk<'a> {
        QueueWalk { fs, ent, rules, waiting_gpus: BTreeMap::new(), current: None }
    }

    fn flush(&mut self) {
        if let Some(c) = self.current.take() {
            if c.ahead > 0.0 {
                self.waiting_gpus.insert(c.account.to_string(), c.ahead);
            }
        }
    }

    /// The next job of its team: its priority, behind the allocated GPUs of
    /// the team's jobs walked before it.
    pub fn next(&mut self, job: &Job) -> Priority {
        self.next_with_ahead(job).0
    }

    /// [`QueueWalk::next`], and the GPUs ahead of the job.
    pub fn next_with_ahead(&mut self, job: &Job) -> (Priority, f64) {
        self.enter(&job.account);
        self.step(traits(job, self.rules))
    }

    /// Make `account` the team walked (a no-op if it is already).
    pub fn enter(&mut self, account: &Arc<str>) {
        if self.current.as_ref().is_none_or(|c| !Arc::ptr_eq(&c.account, account) && c.account != *account) {
            self.flush();
            let ahead = self.waiting_gpus.remove(&**account).unwrap_or(0.0);
            let node = self.ent.id(account);
            let (lane, debug_left) = node.map_or((0.0, 0.0), |id| {
                let t = self.ent.team_at(id);
                (t.debug_running, t.debug_waiting)
            });
            self.current = Some(Current { account: account.clone(), standing: self.fs.standing(account), node, ahead, lane, debug_left });
        }
    }

    /// Whether the team entered last is settled: its running GPUs and the
    /// allocated GPUs of its jobs walked so far reach both its rate and its
    /// fair share (or it holds no allocated work), and no debug job of it
    /// is left to walk that could take the lane, so every later job of it
    /// gets its [`settled_priority`], whatever else of its team waits before
    /// it. A caller that kept those priorities from an earlier walk (the
    /// same 7-day rank) may stop walking the team here.
    pub fn settled(&self) -> bool {
        self.current.as_ref().is_none_or(|c| match c.node {
            Some(id) if self.ent.funded_at(id) => {
                let lane_closed =
                    !self.rules.debug_lane || c.debug_left <= 1e-9 || c.lane + 1.0 > self.rules.debug_allowance(self.ent.team_at(id).rate) + 1e-9;
                self.ent.need(id, c.ahead) == Need::Surplus && lane_closed
            }
            _ => true,
        })
    }

    /// The next job of the team entered last.
    fn step(&mut self, job: Traits) -> (Priority, f64) {
        let c = self.current.as_mut().expect("a team is entered before its jobs");
        let ahead = c.ahead;
        let p = job_priority_at(job, c.standing, c.node, TeamLoad { ent: self.ent, ahead_gpus: ahead, lane_gpus: c.lane }, self.rules);
        if p.allocated {
            c.ahead += job.units;
            if job.debug {
                c.debug_left -= job.gpus;
            }
        }
        if p.need == NEED_LANE {
            c.lane += job.gpus;
        }
        (p, ahead)
    }

    /// What a job that arrives later waits behind.
    pub fn finish(mut self) -> QueueOrder {
        self.flush();
        QueueOrder { priorities: Vec::new(), ahead: Vec::new(), waiting_gpus: self.waiting_gpus }
    }
}

impl QueueOrder {
    /// The priority of a job that arrived (or was requeued) since the queue
    /// was ordered: behind every allocated job its team had waiting then
    /// (`priority_p_set`; the next re-ranking puts it in its place).
    /// A debug job takes the lane only if it fits the allowance behind its
    /// team's debug jobs running and every one of them waiting.
    pub fn priority_of_new(&self, job: &Job, fs: &FairShare, ent: &Entitlement, rules: &PriorityRules) -> Priority {
        let ahead = self.waiting_gpus.get(&*job.account).copied().unwrap_or(0.0);
        let lane_gpus = ent.team(&job.account).map_or(0.0, |t| t.debug_running + t.debug_waiting);
        job_priority(job, fs.standing(&job.account), TeamLoad { ent, ahead_gpus: ahead, lane_gpus }, rules)
    }
}

/// `1023 − ⌊1023 · share⌋` for a share in [0, 1): 1023 for a team running
/// nothing, 1 just below its rate.
fn level_of(share: f64) -> u32 {
    let s = share.clamp(0.0, 1.0);
    LEVEL.max() - ((f64::from(LEVEL.max()) * s).floor() as u32).min(LEVEL.max())
}

impl Priority {
    /// The same job when the planner starts it now (or not): the plan bit.
    pub fn planned(self, starts_now: bool) -> Priority {
        let value = (self.value & !PLAN.put(1)) | PLAN.put(u32::from(starts_now));
        Priority { value: value.max(1), planned: starts_now, ..self }
    }

    /// sprio's columns for this priority. They add up to `value` the way
    /// sprio adds them (`PRIORITY = SITE + AGE + FAIRSHARE + JOBSIZE +
    /// PARTITION + QOS − (NICE − NICE_OFFSET)`), from the layout above:
    /// SITE + JOBSIZE = the tier (2³¹, split because SITE is at most 2³¹ − 1),
    /// PARTITION = the plan bit, FAIRSHARE = need, level and team,
    /// QOS = the nice field's bias plus the quick bit, NICE = −within_team
    /// (in nice units); AGE is 0 (age is Slurm's tie-break) but for the 1
    /// that keeps a priority from meaning "held".
    pub fn sprio(&self) -> SprioColumns {
        let tier = TIER.get(self.value);
        let fairshare = (self.value & (NEED.put(NEED.max()) | LEVEL.put(LEVEL.max()) | TEAM.put(TEAM.max()))) as f64;
        let mut c = SprioColumns {
            site: tier * (TIER.unit() - 1),
            jobsize: f64::from(tier),
            partition: f64::from(PLAN.get(self.value) * PLAN.unit()),
            fairshare,
            qos: f64::from((-INSIDE_MIN) as u32 * NICE.unit() + QUICK.get(self.value)),
            nice: (i64::from(self.nice) + i64::from(INSIDE_MIN)) * -i64::from(NICE.unit()),
            age: 0.0,
        };
        c.age = f64::from(self.value) - c.total();
        c
    }
}

/// The columns sprio shows for a Tally priority ([`Priority::sprio`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SprioColumns {
    pub site: u32,
    pub jobsize: f64,
    pub partition: f64,
    pub fairshare: f64,
    pub qos: f64,
    /// Slurm's nice (positive lowers the priority).
    pub nice: i64,
    pub age: f64,
}

impl SprioColumns {
    /// The sum sprio prints as PRIORITY.
    pub fn total(&self) -> f64 {
        f64::from(self.site) + self.jobsize + self.partition + self.fairshare + self.qos - self.nice as f64 + self.age
    }
}

/// A priority value's fields (for sprio-like displays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub allocated: bool,
    pub planned: bool,
    pub need: u32,
    pub level: u32,
    pub team: u32,
    /// `within_team` as clamped.
    pub within_team: i32,
    pub quick: bool,
}

/// Decode a priority value into its fields.
pub fn decode(value: u32) -> Decoded {
    Decoded {
        allocated: TIER.get(value) == 1,
        planned: PLAN.get(value) == 1,
        need: NEED.get(value),
        level: LEVEL.get(value),
        team: TEAM.get(value),
        within_team: NICE.get(value) as i32 + INSIDE_MIN,
        quick: QUICK.get(value) == 1,
    }
}

/// Why one pending job comes before another in the order of their
/// priorities: the most significant field of the layout in which the two
/// differ ([`precedence`]). The CLI words it (`tally explain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precedence {
    /// Allocated tier against an unallocated job.
    Tier,
    /// The planner starts it in its committed step; the other it does not.
    Planned,
    /// A higher `need` ([`NEED_LANE`] > [`NEED_OWED`] > [`NEED_FAIR`] >
    /// [`NEED_NONE`]): its team is owed more urgently now.
    Need { first: u32, second: u32 },
    /// The same need, a higher level: its team is further below its rate
    /// (or fair share) now.
    Level { first: u32, second: u32 },
    /// The same need and level, a better 7-day team rank (the `team` field,
    /// 1023 − rank).
    Team { first: u32, second: u32 },
    /// The same team fields: a higher `within_team` (a lower nice).
    Nice { first: i32, second: i32 },
    /// Everything above equal: a quick job (time limit at most
    /// `quick_time_limit`) against one that is not.
    Quick,
    /// Equal priorities: Slurm's own tie-break decides (earlier submit
    /// time, then lower job id).
    Equal,
}

/// Why the job whose priority decodes to `first` comes before the one of
/// `second`, or `None` when it does not by priority (`second` is higher).
/// The fields compare in the layout's order, so this agrees with comparing
/// the two values.
pub fn precedence(first: &Decoded, second: &Decoded) -> Option<Precedence> {
    use Ordering::*;
    let steps: [(Ordering, Precedence); 7] = [
        (first.allocated.cmp(&second.allocated), Precedence::Tier),
        (first.planned.cmp(&second.planned), Precedence::Planned),
        (first.need.cmp(&second.need), Precedence::Need { first: first.need, second: second.need }),
        (first.level.cmp(&second.level), Precedence::Level { first: first.level, second: second.level }),
        (first.team.cmp(&second.team), Precedence::Team { first: first.team, second: second.team }),
        (first.within_team.cmp(&second.within_team), Precedence::Nice { first: first.within_team, second: second.within_team }),
        (first.quick.cmp(&second.quick), Precedence::Quick),
    ];
    for (order, why) in steps {
        match order {
            Greater => return Some(why),
            Less => return None,
            Equal => {}
        }
    }
    Some(Precedence::Equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_tile_the_word() {
        let fields = [QUICK, NICE, TEAM, LEVEL, NEED, PLAN, TIER];
        let mut next = 0;
        for f in fields {
            assert_eq!(f.shift, next, "{f:?}");
            next = f.shift + f.bits;
        }
        assert_eq!(next, 32);
    }

    #[test]
    fn levels() {
        assert_eq!(level_of(0.0), 1023);
        assert_eq!(level_of(0.5), 512);
        assert_eq!(level_of(0.9999), 1);
        assert_eq!(level_of(7.0), 0);
    }

    #[test]
    fn precedence_is_the_first_field_that_differs() {
        let put = |tier: u32, plan: u32, need: u32, level: u32, team: u32, nice: u32, quick: u32| {
            TIER.put(tier) | PLAN.put(plan) | NEED.put(need) | LEVEL.put(level) | TEAM.put(team) | NICE.put(nice) | QUICK.put(quick)
        };
        let base = put(1, 0, NEED_OWED, 500, 700, 64, 0);
        let cases: &[(u32, Option<Precedence>)] = &[
            (put(0, 1, NEED_LANE, 1023, 1023, 127, 1), None),
            (put(1, 1, NEED_NONE, 0, 0, 0, 0), Some(Precedence::Planned)),
            (put(1, 0, NEED_LANE, 0, 0, 0, 0), Some(Precedence::Need { first: NEED_LANE, second: NEED_OWED })),
            (put(1, 0, NEED_OWED, 501, 0, 0, 0), Some(Precedence::Level { first: 501, second: 500 })),
            (put(1, 0, NEED_OWED, 500, 701, 0, 0), Some(Precedence::Team { first: 701, second: 700 })),
            (put(1, 0, NEED_OWED, 500, 700, 65, 0), Some(Precedence::Nice { first: 1, second: 0 })),
            (put(1, 0, NEED_OWED, 500, 700, 64, 1), Some(Precedence::Quick)),
            (base, Some(Precedence::Equal)),
            (put(1, 0, NEED_OWED, 500, 699, 127, 1), None),
        ];
        for &(first, want) in cases {
            assert_eq!(precedence(&decode(first), &decode(base)), want, "{first:#x}");
            // It agrees with the order of the values.
            assert_eq!(want.is_some(), first >= base, "{first:#x}");
        }
        // Unallocated behind allocated, whatever else.
        assert_eq!(precedence(&decode(base), &decode(put(0, 1, NEED_LANE, 1023, 1023, 127, 1))), Some(Precedence::Tier));
    }
}
