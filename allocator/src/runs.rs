//! What the host saw of each job's runs: the one record behind charging a
//! real cluster's jobs and behind a contract's protection over requeues.
//!
//! A host (slurmctld) shows a job at moments — every recalculation, and at
//! its end when it reports one. Between two moments a job may have been
//! suspended, requeued (Slurm then zeroes the run's start and end), started
//! again, or may have started and ended. The [`RunBook`] keeps one
//! [`RunRecord`] per job and turns each [`Seen`] into charges:
//!
//! - only runs: a pending job is never charged, whatever start or end
//!   estimate it carries;
//! - run seconds, not wall seconds: suspended time is not charged;
//! - the run's account, user, GPUs, their weight (GPU type) and contract
//!   are frozen when the run is first seen (a comment edited while it runs
//!   changes nothing);
//! - charges are in budget units, rounded over the run as a whole
//!   ([`crate::gpu_types`]): its pieces add up to the run;
//! - a run that ended while nobody looked is charged to its end: to the
//!   requeue time the host gives ([`Seen::Requeued`]), or to the next
//!   run's start at the latest;
//! - idempotent: seeing the same moment twice charges nothing more.
//!
//! Protection is counted over a job's runs (`earlier_s`) since the
//! scheduler last preempted it ([`protection_after`]): a requeue by its
//! user, an admin, a host drain or a node failure never buys a fresh
//! contract, and every run the scheduler starts after preempting the job
//! is protected for its whole contract (docs/design.md, rule 4). The
//! preempt plugin tells the book which runs it preempted
//! ([`RunBook::preempted`]), possibly after the book saw the run end.

use crate::contract::Contract;
use crate::gpu_types::Weight;
use crate::job::{Job, KnownAccounts};
use crate::ledger::Ledger;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// One job's current (or last) run, as charged so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// When the run started (unix s); 0 once the run is closed (the job is
    /// back in the queue).
    pub start_s: u64,
    /// Run seconds of this run already charged (suspended time excluded).
    pub charged_s: u64,
    /// When it was last seen (unix s), and whether it was running then
    /// (not suspended).
    pub seen_s: u64,
    pub active: bool,
    /// Frozen when the run was first seen.
    pub account: Arc<str>,
    pub user: Arc<str>,
    pub gpus: u32,
    /// The budget weight of its GPUs ([`Job::weight`]).
    pub weight: Weight,
    pub contract: Contract,
    /// Protection the job's earlier runs used: their run seconds since
    /// the scheduler last preempted the job ([`protection_after`]).
    pub earlier_s: u64,
    /// When the run this record closed last had started (0: none).
    pub prev_start_s: u64,
    /// When a run the scheduler preempted had started (0: none known).
    pub preempted_run_s: u64,
}

/// Why a run went back to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// The scheduler's own preemption rule took its GPUs
    /// ([`crate::preempt`]): its next run gets its whole contract again.
    Preempted,
    /// Its user or an admin (`scontrol requeue`), a host drain, a node
    /// failure: its next run keeps what is left of its contract.
    Other,
}

/// The protection a job's earlier runs have used once a run that used
/// `ran_s` ends by `why`, when the runs before it had used `earlier_s`:
///
/// ```text
/// Preempted → 0                  every run the scheduler starts is protected for its contract
/// Other     → earlier_s + ran_s  a requeue never buys a fresh contract
/// ```
/// The one definition for the plugins ([`RunBook`]) and the simulator.
pub fn protection_after(earlier_s: u64, ran_s: u64, why: Requeue) -> u64 {
    match why {
        Requeue::Preempted => 0,
        Requeue::Other => earlier_s.saturating_add(ran_s),
    }
}

impl RunRecord {
    /// Seconds of protection the job's runs have used by `now`, when the
    /// current run started at `start_s`.
    pub fn protection_used_s(&self, start_s: u64, now: u64) -> u64 {
        let this_run = now.saturating_sub(start_s);
        if self.start_s == start_s && start_s > 0 {
            self.earlier_s.saturating_add(this_run)
        } else if self.start_s > 0 && self.preempted_run_s == self.start_s {
            // A run this record has not seen yet, after one the scheduler
            // preempted: a whole contract again.
            this_run
        } else {
            // A run this record has not seen yet: the earlier ones are all
            // it knows.
            self.earlier_s.saturating_add(self.charged_s).saturating_add(this_run)
        }
    }

    /// The job as frozen at its run's start (what is charged).
    fn frozen(&self, id: u64) -> Job {
        let mut j = Job::named(id, self.account.clone(), self.user.clone()).gpus(self.gpus).weight(self.weight);
        j.contract = self.contract;
        j
    }
}

/// What the host shows of a job at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Pending and not back from a run (or held): nothing to charge.
    Waiting,
    /// Holding its GPUs: the run started at `start_s` and had run `run_s`
    /// seconds (suspended time excluded) at `at`; `active` = running, not
    /// suspended. `requeued_s`: when the job last went back to the queue
    /// (0 = never), the end of a run before this one that nobody saw end.
    Run { start_s: u64, run_s: u64, at: u64, active: bool, requeued_s: u64 },
    /// Ended (completed, cancelled, failed, preempted without requeue, …)
    /// at `end_s`, having run `run_s` seconds.
    Ended { start_s: u64, end_s: u64, run_s: u64, requeued_s: u64 },
    /// Back in the queue since `at`: the run the record holds ended then.
    Requeued { at: u64 },
}

/// Every job's run record, by job id: hashed (every job of a tick is
/// looked up), in id order wherever it is listed ([`RunBook::iter`]).
/// Job ids come from the host, not from users.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunBook {
    records: FxHashMap<u64, RunRecord>,
    /// Charging marks of a version-1 state file (job → charged up to, unix
    /// s): the first run seen of such a job starts charged to its mark.
    legacy: FxHashMap<u64, u64>,
}

impl RunBook {
    pub fn new() -> RunBook {
        RunBook::default()
    }

    pub fn get(&self, job_id: u64) -> Option<&RunRecord> {
        self.records.get(&job_id)
    }

    pub fn insert(&mut self, job_id: u64, r: RunRecord) {
        self.records.insert(job_id, r);
    }

    /// The scheduler preempted the run of `job_id` that started at
    /// `run_start_s` (the preempt plugin says so, at once or later): that
    /// run's end leaves the job its whole contract for its next run
    /// ([`protection_after`]). Whether the book has seen the run end yet or
    /// not, and however often it is told. Returns whether anything changed.
    pub fn preempted(&mut self, job_id: u64, run_start_s: u64) -> bool {
        let Some(r) = self.records.get_mut(&job_id) else { return false };
        if run_start_s == 0 || r.preempted_run_s == run_start_s {
            return false;
        }
        if r.start_s == run_start_s {
            // Still open: its close resets the protection.
            r.preempted_run_s = run_start_s;
            true
        } else if r.prev_start_s == run_start_s {
            // Closed already (the next run may be open): reset now.
            r.preempted_run_s = run_start_s;
            r.earlier_s = 0;
            true
        } else {
            false
        }
    }

    /// A saved record's requeue facts ([`crate::state`]); `false` without a
    /// record of the job.
    pub fn set_requeue(&mut self, job_id: u64, prev_start_s: u64, preempted_run_s: u64) -> bool {
        let Some(r) = self.records.get_mut(&job_id) else { return false };
        r.prev_start_s = prev_start_s;
        r.preempted_run_s = preempted_run_s;
        true
    }

    /// Every record, in job id order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &RunRecord)> {
        let mut v: Vec<(u64, &RunRecord)> = self.records.iter().map(|(&k, v)| (k, v)).collect();
        v.sort_unstable_by_key(|&(k, _)| k);
        v.into_iter()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.legacy.is_empty()
    }

    /// No version-1 marks left.
    pub fn legacy_is_empty(&self) -> bool {
        self.legacy.is_empty()
    }

    /// Forget jobs the host no longer has.
    pub fn retain(&mut self, mut live: impl FnMut(u64) -> bool) {
        self.records.retain(|&id, _| live(id));
        self.legacy.retain(|&id, _| live(id));
    }

    pub fn set_legacy_mark(&mut self, job_id: u64, charged_until: u64) {
        self.legacy.insert(job_id, charged_until);
    }

    /// The version-1 marks, in job id order.
    pub fn legacy_marks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut v: Vec<(u64, u64)> = self.legacy.iter().map(|(&k, &v)| (k, v)).collect();
        v.sort_unstable();
        v.into_iter()
    }

    /// Take one moment of `job` (its current account, user, GPUs and
    /// contract: frozen if this is a new run) and charge what ran since the
    /// last one. Returns budget-unit-seconds charged (GPU-seconds when
    /// untyped; 0 for unallocated work).
    pub fn observe(&mut self, job: &Job, seen: Seen, accounts: &impl KnownAccounts, ledger: &mut Ledger) -> f64 {
        let id = job.id;
        match seen {
            Seen::Waiting => 0.0,
            Seen::Requeued { at } => match self.records.get_mut(&id) {
                Some(r) if r.start_s > 0 => close(id, r, at, accounts, ledger),
                _ => 0.0,
            },
            Seen::Run { start_s, run_s, at, active, requeued_s } => self.run_to(job, start_s, requeued_s, run_s, at, active, accounts, ledger),
            Seen::Ended { start_s, end_s, run_s, requeued_s } => self.run_to(job, start_s, requeued_s, run_s, end_s, false, accounts, ledger),
        }
    }

    /// The run that started at `start_s` had run `run_s` seconds at `at`
    /// (`active`: still running then).
    #[allow(clippy::too_many_arguments)]
    fn run_to(
        &mut self,
        job: &Job,
        start_s: u64,
        requeued_s: u64,
        run_s: u64,
        at: u64,
        active: bool,
        accounts: &impl KnownAccounts,
        ledger: &mut Ledger,
    ) -> f64 {
        let mut charged = self.open(job, start_s, requeued_s, accounts, ledger);
        let r = self.records.get_mut(&job.id).expect("opened");
        charged += charge_run(job.id, r, run_s, at, accounts, ledger);
        r.seen_s = r.seen_s.max(at);
        r.active = active;
        charged
    }

    /// Make sure the record holds the run that started at `start_s`:
    /// closing an earlier run nobody saw end, then freezing the new one.
    fn open(&mut self, job: &Job, start_s: u64, requeued_s: u64, accounts: &impl KnownAccounts, ledger: &mut Ledger) -> f64 {
        let mut charged = 0.0;
        let (earlier_s, prev_start_s, preempted_run_s) = match self.records.get_mut(&job.id) {
            Some(r) if r.start_s == start_s => return 0.0,
            Some(r) => {
                if r.start_s > 0 {
                    // Ended at the requeue the host reports, and at the
                    // latest when the new run started.
                    let end = if requeued_s > r.seen_s { requeued_s.min(start_s) } else { r.seen_s };
                    charged += close(job.id, r, end, accounts, ledger);
                }
                (r.earlier_s, r.prev_start_s, r.preempted_run_s)
            }
            None => (0, 0, 0),
        };
        // A version-1 mark: the run was charged up to it.
        let charged_s = self.legacy.remove(&job.id).map_or(0, |mark| mark.saturating_sub(start_s));
        let r = RunRecord {
            start_s,
            charged_s,
            seen_s: start_s,
            active: true,
            account: job.account.clone(),
            user: job.user.clone(),
            gpus: job.gpus,
            weight: job.weight,
            contract: job.contract,
            earlier_s,
            prev_start_s,
            preempted_run_s,
        };
        self.records.insert(job.id, r);
        charged
    }
}

/// Charge a run up to `run_s` run seconds, placed just before `at`.
fn charge_run(id: u64, r: &mut RunRecord, run_s: u64, at: u64, accounts: &impl KnownAccounts, ledger: &mut Ledger) -> f64 {
    let delta = run_s.saturating_sub(r.charged_s);
    if delta == 0 {
        return 0.0;
    }
    let ran_s = r.charged_s;
    r.charged_s = run_s;
    let to = at.max(r.start_s);
    let from = to.saturating_sub(delta).max(r.start_s.min(to));
    charge_span(id, r, from, from.saturating_add(delta), ran_s, accounts, ledger)
}

/// The run ended at `end` (a requeue): charge its unseen tail if it was
/// running when last seen, fold it into the earlier runs' protection
/// ([`protection_after`]), close it.
fn close(id: u64, r: &mut RunRecord, end: u64, accounts: &impl KnownAccounts, ledger: &mut Ledger) -> f64 {
    let tail = if r.active { end.saturating_sub(r.seen_s) } else { 0 };
    let charged = charge_span(id, r, r.seen_s, r.seen_s.saturating_add(tail), r.charged_s, accounts, ledger);
    let why = if r.preempted_run_s == r.start_s { Requeue::Preempted } else { Requeue::Other };
    r.earlier_s = protection_after(r.earlier_s, r.charged_s.saturating_add(tail), why);
    r.prev_start_s = r.start_s;
    r.charged_s = 0;
    r.start_s = 0;
    r.seen_s = r.seen_s.max(end);
    r.active = false;
    charged
}

/// Charge `[from, to)`, `ran_s` run seconds into the run.
fn charge_span(id: u64, r: &RunRecord, from: u64, to: u64, ran_s: u64, accounts: &impl KnownAccounts, ledger: &mut Ledger) -> f64 {
    if to > from {
        r.frozen(id).charge_run(accounts, ledger, from, to, ran_s) as f64
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Funded;
    use crate::tree::{AccountSpec, Allocation, Budget, Capacity, OrgTree};
    use crate::{HOUR, HOUR_S, WEEK_S};

    /// Owns the tree and its allocation; `Funded` borrows them.
    struct World(OrgTree, Allocation);
    impl World {
        fn funded(&self) -> Funded<'_> {
            Funded::new(&self.0, &self.1)
        }
    }

    fn tree() -> World {
        let t = OrgTree::new(&[AccountSpec::new("a", None, Some(Budget::Share(100.0)))]).unwrap();
        let a = Allocation::new(&t, Capacity::new(8, WEEK_S)).unwrap();
        World(t, a)
    }

    fn total(l: &Ledger) -> f64 {
        l.entries().map(|(_, _, g)| g).sum()
    }

    fn job() -> Job {
        Job::new(7, "a", "u").gpus(2).contract(3600, false)
    }

    const T: u64 = 1_000_000;

    #[test]
    fn suspended_time_is_not_charged() {
        // 60 s run, 59 min suspended, 60 s run: 120 run seconds × 2 GPUs.
        let (w, mut l, mut b) = (tree(), Ledger::new(HOUR_S, WEEK_S).unwrap(), RunBook::new());
        let run = |run_s, at, active| Seen::Run { start_s: T, run_s, at, active, requeued_s: 0 };
        b.observe(&job(), run(30, T + 30, true), &w.funded(), &mut l);
        b.observe(&job(), run(60, T + 1800, false), &w.funded(), &mut l);
        b.observe(&job(), run(60, T + 3600, false), &w.funded(), &mut l);
        b.observe(&job(), run(120, T + 3660 + 60, true), &w.funded(), &mut l);
        b.observe(&job(), Seen::Ended { start_s: T, end_s: T + 3660 + 60, run_s: 120, requeued_s: 0 }, &w.funded(), &mut l);
        assert_eq!(total(&l), 240.0);
    }

    #[test]
    fn a_requeue_charges_the_tail_once_and_protection_carries_over() {
        let (w, mut l, mut b) = (tree(), Ledger::new(HOUR_S, WEEK_S).unwrap(), RunBook::new());
        b.observe(&job(), Seen::Run { start_s: T, run_s: 60, at: T + 60, active: true, requeued_s: 0 }, &w.funded(), &mut l);
        // Requeued at T+119 (Slurm zeroed start and end); seen twice.
        b.observe(&job(), Seen::Requeued { at: T + 119 }, &w.funded(), &mut l);
        b.observe(&job(), Seen::Requeued { at: T + 119 }, &w.funded(), &mut l);
        assert_eq!(total(&l), 238.0);
        // Pending jobs are never charged; the next run starts unprotected for 119 s less.
        b.observe(&job(), Seen::Waiting, &w.funded(), &mut l);
        b.observe(&job(), Seen::Run { start_s: T + 500, run_s: 100, at: T + 600, active: true, requeued_s: T + 119 }, &w.funded(), &mut l);
        assert_eq!(total(&l), 238.0 + 200.0);
        let r = b.get(7).unwrap();
        assert_eq!(r.earlier_s, 119);
        assert_eq!(r.protection_used_s(T + 500, T + 600), 219);
    }

    #[test]
    fn a_run_the_scheduler_preempted_leaves_a_whole_contract_and_a_user_requeue_does_not() {
        let w = tree();
        let run = |start_s, run_s, at, requeued_s| Seen::Run { start_s, run_s, at, active: true, requeued_s };
        // Told before the book saw the end.
        let (mut l, mut b) = (Ledger::new(HOUR_S, WEEK_S).unwrap(), RunBook::new());
        b.observe(&job(), run(T, 4000, T + 4000, 0), &w.funded(), &mut l);
        assert!(b.preempted(7, T));
        assert!(!b.preempted(7, T), "told twice: nothing more");
        b.observe(&job(), Seen::Requeued { at: T + 4100 }, &w.funded(), &mut l);
        assert_eq!(b.get(7).unwrap().earlier_s, 0);
        b.observe(&job(), run(T + 5000, 10, T + 5010, T + 4100), &w.funded(), &mut l);
        assert_eq!(b.get(7).unwrap().protection_used_s(T + 5000, T + 5010), 10);
        // Told after the next run had started: reset then.
        let (mut l, mut b) = (Ledger::new(HOUR_S, WEEK_S).unwrap(), RunBook::new());
        b.observe(&job(), run(T, 4000, T + 4000, 0), &w.funded(), &mut l);
        b.observe(&job(), run(T + 5000, 10, T + 5010, T + 4100), &w.funded(), &mut l);
        assert_eq!(b.get(7).unwrap().earlier_s, 4100);
        assert!(b.preempted(7, T));
        assert_eq!(b.get(7).unwrap().protection_used_s(T + 5000, T + 5010), 10);
        // A book that holds the preempted run still open (a copy older than
        // the requeue, as preempt/tally may follow it) counts the next run
        // from its start too.
        let (mut l2, mut b2) = (Ledger::new(HOUR_S, WEEK_S).unwrap(), RunBook::new());
        b2.observe(&job(), run(T, 4000, T + 4000, 0), &w.funded(), &mut l2);
        assert_eq!(b2.get(7).unwrap().protection_used_s(T + 5000, T + 5010), 4000 + 10);
        assert!(b2.preempted(7, T));
        assert_eq!(b2.get(7).unwrap().protection_used_s(T + 5000, T + 5010), 10);
        // A run nobody preempted (its user requeued it): protection carries over.
        assert!(!b.preempted(7, T + 1), "no such run");
        b.observe(&job(), Seen::Requeued { at: T + 5100 }, &w.funded(), &mut l);
        assert_eq!(b.get(7).unwrap().earlier_s, 100);
        assert_eq!(protection_after(100, 50, Requeue::Other), 150);
        assert_eq!(protection_after(100, 50, Requeue::Preempted), 0);
    }

    #[test]
    fn a_run_nobody_saw_end_ends_at_its_requeue() {
        let (w, mut l, mut b) = (tree(), Ledger::new(HOUR_S, WEEK_S).unwrap(), RunBook::new());
        b.observe(&job(), Seen::Run { start_s: T, run_s: 60, at: T + 60, active: true, requeued_s: 0 }, &w.funded(), &mut l);
        // Requeued at T+100 and restarted at T+300 between two looks.
        b.observe(&job(), Seen::Run { start_s: T + 300, run_s: 10, at: T + 310, active: true, requeued_s: T + 100 }, &w.funded(), &mut l);
        assert_eq!(total(&l), 2.0 * (100.0 + 10.0));
        assert_eq!(b.get(7).unwrap().earlier_s, 100);
    }

    #[test]
    fn the_run_is_frozen_at_its_start() {
        let (w, mut l, mut b) = (tree(), Ledger::new(HOUR_S, WEEK_S).unwrap(), RunBook::new());
        b.observe(&job(), Seen::Run { start_s: T, run_s: 10, at: T + 10, active: true, requeued_s: 0 }, &w.funded(), &mut l);
        // The comment now says contract=0 and the request 8 GPUs: still charged as started.
        let edited = Job::new(7, "a", "u").gpus(8);
        b.observe(&edited, Seen::Run { start_s: T, run_s: 20, at: T + 20, active: true, requeued_s: 0 }, &w.funded(), &mut l);
        assert_eq!(total(&l), 40.0);
        assert_eq!(b.get(7).unwrap().contract, Contract::new(3600, false));
    }

    #[test]
    fn a_weighted_run_is_charged_its_units_whatever_the_looks() {
        // 2 GPUs of weight 1.37 for an hour, looked at every 7 s, a
        // requeue's tail, and once: the same whole charge, rounded once.
        let w = Weight::new(1.37).unwrap();
        let whole = (2.0f64 * 1.37 * HOUR).round();
        let (world, mut once, mut often) = (tree(), Ledger::new(HOUR_S, WEEK_S).unwrap(), Ledger::new(HOUR_S, WEEK_S).unwrap());
        let j = job().weight(w);
        let mut b = RunBook::new();
        b.observe(&j, Seen::Ended { start_s: T, end_s: T + 3600, run_s: 3600, requeued_s: 0 }, &world.funded(), &mut once);
        assert_eq!(total(&once), whole);
        let mut b2 = RunBook::new();
        for at in (T..T + 3500).step_by(7) {
            b2.observe(&j, Seen::Run { start_s: T, run_s: at - T, at, active: true, requeued_s: 0 }, &world.funded(), &mut often);
        }
        b2.observe(&j, Seen::Requeued { at: T + 3600 }, &world.funded(), &mut often);
        assert_eq!(total(&often), whole);
        // Frozen with the run: a view without the type later changes nothing.
        assert_eq!(b2.get(7).unwrap().weight, w);
        assert_eq!(b.get(7).unwrap().weight, w);
    }

    #[test]
    fn a_short_job_between_two_looks_is_charged_from_its_end() {
        let (w, mut l, mut b) = (tree(), Ledger::new(HOUR_S, WEEK_S).unwrap(), RunBook::new());
        let end = Seen::Ended { start_s: T, end_s: T + 50, run_s: 50, requeued_s: 0 };
        b.observe(&job(), end, &w.funded(), &mut l);
        b.observe(&job(), end, &w.funded(), &mut l);
        assert_eq!(total(&l), 100.0);
    }
}
