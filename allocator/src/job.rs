//! The allocator's view of a job: owned values only, built by the plugin from
//! a `job_record_t`, by the simulator from a trace row, by tests from a
//! builder. No pointer, no Slurm type.

use crate::contract::Contract;
use crate::fairshare::FairShare;
use crate::gpu_types::Weight;
use crate::ledger::{Ledger, UsageKey};
use crate::tree::{Allocation, OrgTree, ROOT};

use std::collections::BTreeMap;
use std::sync::Arc;

/// Anything that knows which accounts may hold allocated work: those in
/// the tree with a positive own budget, never `root` (the one definition
/// of a *funded* account, whichever view of the tree asks).
pub trait KnownAccounts {
    fn knows(&self, account: &str) -> bool;
}

/// The tree and its allocation: which accounts are funded.
#[derive(Debug, Clone, Copy)]
pub struct Funded<'a> {
    pub tree: &'a OrgTree,
    pub alloc: &'a Allocation,
}

impl<'a> Funded<'a> {
    pub fn new(tree: &'a OrgTree, alloc: &'a Allocation) -> Self {
        Funded { tree, alloc }
    }
}

impl Funded<'_> {
    /// [`KnownAccounts::knows`] by node.
    pub fn funded_at(&self, id: crate::tree::NodeId) -> bool {
        id != self.tree.root() && self.alloc.own_gpu_hours.get(id).is_some_and(|&g| g > 0.0)
    }
}

impl KnownAccounts for Funded<'_> {
    fn knows(&self, account: &str) -> bool {
        self.tree.id(account).is_some_and(|id| self.funded_at(id))
    }
}
impl KnownAccounts for crate::entitlement::Entitlement {
    fn knows(&self, account: &str) -> bool {
        self.id(account).is_some_and(|id| self.funded_at(id))
    }
}
impl KnownAccounts for FairShare {
    fn knows(&self, account: &str) -> bool {
        account != ROOT && self.standing(account).is_some_and(|s| s.allocated_gpu_hours > 0.0)
    }
}

/// Everything the rules look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: u64,
    /// Slurm account = node of the org tree. Names are shared (`Arc<str>`):
    /// a queue of 100k jobs holds a few hundred distinct ones.
    pub account: Arc<str>,
    pub user: Arc<str>,
    /// The contract after the cluster's rules were applied
    /// ([`crate::ContractRules::resolve`]).
    pub contract: Contract,
    pub gpus: u32,
    /// The budget weight of its GPUs: its GPU type's
    /// ([`crate::GpuWeights::of`]), 1 when untyped. Everything the rules
    /// count of a job — its charge, what it runs and waits for — is
    /// [`Job::units`], `gpus × weight`.
    pub weight: Weight,
    /// Unix seconds.
    pub submit_s: u64,
    /// Unix seconds; `None` while pending.
    pub start_s: Option<u64>,
    /// Order inside the team, higher first. The plugin passes `-nice`; a
    /// trace passes its `priority` column.
    pub within_team: i32,
    /// Times it was requeued (Slurm's `restart_cnt`): among resumable
    /// victims, one requeued more often is taken later
    /// ([`crate::victim_rank`]'s loss field).
    pub restarts: u32,
    /// Seconds it may run (Slurm's time limit); `None` = no limit.
    pub time_limit_s: Option<u64>,
    /// Protection its earlier runs used (seconds run before requeues): the
    /// contract protects a job's first `contract` seconds of running over
    /// its runs since the scheduler last preempted it, so a requeue by its
    /// user, an admin or a node failure never buys a fresh contract, and a
    /// run the scheduler starts after preempting the job gets all of it
    /// ([`crate::runs`]).
    pub earlier_run_s: u64,
    /// Tasks it stands for: a job array's record of its pending tasks
    /// (one Slurm record, `array_recs->task_cnt` tasks of `gpus` GPUs and
    /// one contract each, any of which Slurm may start from it) stands for
    /// all of them; any other job is 1. A running job is always 1 (Slurm
    /// splits a task off the record when it starts it). What it waits for
    /// is `tasks ×` its [`Job::units`], and its debug GPUs `tasks × gpus`
    /// ([`crate::PriorityRules::is_debug`] judges one task).
    pub tasks: u32,
    /// GPUs it will hold as a whole when more than `gpus` shows (`None`:
    /// `gpus`): a heterogeneous job's, over all its components (each
    /// component counts its own `gpus` everywhere else); an exclusive
    /// pending job's, its whole nodes' (Slurm gives such a job every GPU
    /// of the nodes it gets; once it runs, `gpus` is what it got). Only its
    /// class is judged by it ([`Job::class_gpus`]).
    pub holds_gpus: Option<u32>,
}

impl Job {
    /// A pending job with no contract, 1 GPU, submitted at 0: start of a builder chain.
    pub fn new(id: u64, account: &str, user: &str) -> Job {
        Job::named(id, account.into(), user.into())
    }
    /// [`Job::new`] with names already shared.
    pub fn named(id: u64, account: Arc<str>, user: Arc<str>) -> Job {
        Job {
            id,
            account,
            user,
            contract: Contract::UNALLOCATED,
            gpus: 1,
            weight: Weight::ONE,
            submit_s: 0,
            start_s: None,
            within_team: 0,
            restarts: 0,
            time_limit_s: None,
            earlier_run_s: 0,
            tasks: 1,
            holds_gpus: None,
        }
    }
    pub fn contract(mut self, min_runtime_s: u64, resumable: bool) -> Job {
        self.contract = Contract::new(min_runtime_s, resumable);
        self
    }
    pub fn gpus(mut self, gpus: u32) -> Job {
        self.gpus = gpus;
        self
    }
    pub fn weight(mut self, w: Weight) -> Job {
        self.weight = w;
        self
    }
    pub fn submitted(mut self, at: u64) -> Job {
        self.submit_s = at;
        self
    }
    pub fn started(mut self, at: u64) -> Job {
        self.start_s = Some(at);
        self
    }
    pub fn within_team(mut self, p: i32) -> Job {
        self.within_team = p;
        self
    }
    pub fn restarts(mut self, n: u32) -> Job {
        self.restarts = n;
        self
    }
    pub fn time_limit(mut self, s: u64) -> Job {
        self.time_limit_s = Some(s);
        self
    }
    pub fn earlier_run(mut self, s: u64) -> Job {
        self.earlier_run_s = s;
        self
    }
    /// An array's record of `n` pending tasks (at least 1), each of this
    /// job's GPUs and contract ([`Job::tasks`]).
    pub fn tasks(mut self, n: u32) -> Job {
        self.tasks = n.max(1);
        self
    }
    /// It will hold `gpus` GPUs as a whole ([`Job::holds_gpus`]: a
    /// heterogeneous job's total, an exclusive job's whole nodes).
    pub fn holds(mut self, gpus: u32) -> Job {
        self.holds_gpus = Some(gpus);
        self
    }

    /// The GPUs its class is judged by: what one of its tasks will hold,
    /// `max(gpus, holds_gpus)` ([`crate::PriorityRules::is_debug`]).
    pub fn class_gpus(&self) -> u32 {
        self.holds_gpus.map_or(self.gpus, |g| g.max(self.gpus))
    }

    /// Allocated ⇔ a contract > 0 **and** a funded account (in the tree,
    /// a positive own budget, not `root`). Only
    /// allocated jobs are charged, fair-shared and protected. One definition
    /// for plugin, simulator and reports.
    pub fn is_allocated(&self, accounts: &impl KnownAccounts) -> bool {
        self.contract.is_allocated() && accounts.knows(&self.account)
    }

    /// [`Job::is_allocated`] under an entitlement, with the account's node
    /// (`None`: outside the tree) already looked up.
    pub fn is_allocated_at(&self, node: Option<crate::tree::NodeId>, ent: &crate::entitlement::Entitlement) -> bool {
        self.contract.is_allocated() && node.is_some_and(|id| ent.funded_at(id))
    }

    /// Budget units of the job: `gpus × weight` (its GPUs when untyped).
    pub fn units(&self) -> f64 {
        self.weight.units(self.gpus)
    }

    /// Charge the job's GPUs over `[from, to)` to the ledger if, and only if,
    /// it is allocated. Returns whether anything was charged. The plugin's
    /// recalculation thread and the simulator both charge through here.
    pub fn charge(&self, accounts: &impl KnownAccounts, ledger: &mut Ledger, from: u64, to: u64) -> bool {
        if !self.is_allocated(accounts) || to <= from {
            return false;
        }
        self.put(ledger, from, to, 0);
        true
    }

    /// [`Job::charge`] of a stretch of a run that had run `ran_s` seconds
    /// at `from`: the charge is [`Weight::unit_seconds`] from `ran_s` to
    /// `ran_s + (to − from)`, so the stretches of a run add up to the whole
    /// run whatever the weight. Returns the budget-unit-seconds charged (0
    /// for unallocated work).
    pub fn charge_run(&self, accounts: &impl KnownAccounts, ledger: &mut Ledger, from: u64, to: u64, ran_s: u64) -> u64 {
        if !self.is_allocated(accounts) || to <= from {
            return 0;
        }
        self.put(ledger, from, to, ran_s)
    }

    /// Put the charge of `[from, to)`, `ran_s` into the run, in the ledger.
    fn put(&self, ledger: &mut Ledger, from: u64, to: u64, ran_s: u64) -> u64 {
        let key = UsageKey { account: self.account.clone(), user: self.user.clone() };
        if self.weight.is_one() {
            ledger.charge(&key, self.gpus, from, to);
            return u64::from(self.gpus).saturating_mul(to - from);
        }
        let units = self.weight.unit_seconds(self.gpus, ran_s, ran_s.saturating_add(to - from));
        ledger.charge_units(&key, units, from, to);
        units
    }

    /// Seconds of protected runtime left at `now` (0 when pending, past the
    /// contract or unallocated): the contract less what this run and the
    /// earlier ones have run.
    pub fn contract_left_s(&self, now: u64) -> u64 {
        match self.start_s {
            Some(start) => {
                let ran = self.earlier_run_s.saturating_add(now.saturating_sub(start));
                self.contract.min_runtime_s.saturating_sub(ran)
            }
            None => 0,
        }
    }
}

/// Charge a job that ran since `started` up to `until`, from its mark on,
/// and move the mark: the one charging step of the plugin's recalculation
/// thread and of the simulator. Idempotent (charging twice to the same
/// `until` adds nothing); a job that stopped and ran again is charged from
/// its new start. Returns budget-unit-seconds charged (GPU-seconds when
/// untyped; 0 for unallocated jobs, whose mark still moves).
pub fn charge_from_mark(
    marks: &mut BTreeMap<u64, u64>,
    job: &Job,
    accounts: &impl KnownAccounts,
    ledger: &mut Ledger,
    started: u64,
    until: u64,
) -> f64 {
    let from = marks.get(&job.id).copied().unwrap_or(0).max(started);
    if until <= from {
        return 0.0;
    }
    marks.insert(job.id, until);
    job.charge_run(accounts, ledger, from, until, from - started) as f64
}
