//! preempt/tally's state between two copies of the job list: the answers
//! it gives Slurm and the runs Slurm preempted on them.
//!
//! slurmctld asks `preempt_p_preemptable(victim, preemptor)` from inside
//! its own walk of `job_list`, so the plugin's thread copies the jobs every
//! [`REFRESH`] and builds a [`Snapshot`] ([`Snapshot::from_copy`]); the
//! calls only read and move it. Its transitions, each a method here with
//! its unit test:
//!
//! - **answer** ([`Snapshot::may_preempt`]): a preemptor's victims are
//!   computed once per copy (`allocator::VictimPool`); asked again, the
//!   same answer.
//! - **claim**: computing them assumes the worst of the preemptors asked
//!   before (their allocated victims gone, their jobs running), so several
//!   preemptions in one scheduling pass never take a side below its rate.
//! - **offer**: each victim offered is remembered with its rule for
//!   [`OFFERED_KEEP_S`], across copies ([`Snapshot::carry_offers`]), so a
//!   preemption's note says why ([`Snapshot::why`]).
//! - **stale copy**: a copy older than [`STALE_S`] answers only the rule
//!   that needs no count (unallocated victims).
//! - **submitted since the copy**: a preemptor not in the copy is
//!   converted from its record on the call.
//! - **victim order** ([`Snapshot::victim_order`]): Slurm sorts the
//!   candidates of the preemptor asked last by it.
//! - **renew** ([`Snapshot::renew`]): every [`REFRESH`] the claims and
//!   answers start afresh; the classification and the entitlement are built
//!   again only when what they are built from changed ([`Basis`]) or the
//!   time reached a job's next change of standing ([`Snapshot::valid_until`]),
//!   else kept: the same snapshot as one built anew.
//!
//! [`NoteBook`] holds the runs Slurm preempted on an answer (memory on the
//! call path, written by the thread with [`save_notes`]).
//!
//! Time is an argument everywhere: nothing here reads a clock or Slurm.

use crate::engine::{classify, entitlement_of, to_job};
use crate::guard::lock;
use crate::planner::{held_on, preemption_nodes, Placed};
use crate::preempted::{self, Note, Notes, Why};
use crate::view::{JobView, NodeView, RunState};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tally_allocator::{lost_gpu_seconds, victim_rank, Allocation, Entitlement, Job, Moment, Nodes, PreemptReason, RunBook, VictimPool};
use tally_config::Config;

/// How often preempt/tally's thread copies the jobs.
pub const REFRESH: Duration = Duration::from_secs(1);
/// A copy older than this is not trusted for the restorative rule.
pub const STALE_S: u64 = 30;
/// How long a victim's offer is remembered for its note.
pub const OFFERED_KEEP_S: u64 = 60;
/// Victim orders below this are places among the victims offered to the
/// preemptor asked last.
pub const OFFERED_MAX: u32 = 1 << 20;

/// How long a copy of the jobs is reused at most while slurmctld says no
/// job changed: bounds what a change it does not announce could miss.
pub const MAX_COPY_AGE_S: u64 = 10;

/// One copy of slurmctld's jobs, kept by preempt/tally's thread between
/// copies: each job, the node indices it runs on, and the node table.
#[derive(Debug, Clone, Default)]
pub struct JobsCopy {
    views: Vec<JobView>,
    places: Vec<Vec<u32>>,
    nodes: Vec<NodeView>,
}

impl JobsCopy {
    pub fn new(jobs: Vec<Placed>, nodes: Vec<NodeView>) -> JobsCopy {
        let (views, places) = jobs.into_iter().map(|Placed { view, nodes }| (view, nodes)).unzip();
        JobsCopy { views, places, nodes }
    }
}

/// When preempt/tally's thread copies the job list again: slurmctld sets
/// its `last_job_update` to the second of every change to a job
/// (submission, start, end, requeue, update), so while it reads as it did
/// before the last copy, that copy is still the job list. Copied again
/// when it moved; when it was the very second of the copy (a change later
/// in that second would leave it as it was); and at least every
/// [`MAX_COPY_AGE_S`]. A copy holds slurmctld's job read lock for every
/// job; the check reads one integer.
#[derive(Debug, Clone, Copy, Default)]
pub struct CopyClock {
    /// `last_job_update` as read before the last copy, and the second the
    /// copy began (read before it).
    last: Option<(i64, u64)>,
}

impl CopyClock {
    /// Is a copy due at `now`, `last_job_update` reading `job_update`?
    pub fn due(&self, job_update: i64, now: u64) -> bool {
        match self.last {
            None => true,
            Some((seen, at)) => job_update != seen || seen >= i64::try_from(at).unwrap_or(i64::MAX) || now >= at.saturating_add(MAX_COPY_AGE_S),
        }
    }

    /// A copy began at `at`, `last_job_update` reading `job_update` just
    /// before it.
    pub fn copied(&mut self, job_update: i64, at: u64) {
        self.last = Some((job_update, at));
    }
}

/// What a [`Snapshot`] is built from besides the time: the config and
/// allocation in force, the ledger's run records and the notes not yet
/// taken in, `PreemptParameters`' window, and which copy of the jobs
/// (the thread numbers its copies). Held, not just compared by address, so
/// that a freed and reused allocation cannot pass for the same one.
#[derive(Debug, Clone)]
pub struct Basis {
    pub config: Arc<Config>,
    pub alloc: Arc<Allocation>,
    pub runs: Arc<RunBook>,
    pub notes: Vec<Note>,
    pub preempt_window_s: u64,
    pub copy: u64,
}

impl Basis {
    fn same(&self, other: &Basis) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
            && Arc::ptr_eq(&self.alloc, &other.alloc)
            && Arc::ptr_eq(&self.runs, &other.runs)
            && self.notes == other.notes
            && self.preempt_window_s == other.preempt_window_s
            && self.copy == other.copy
    }
}

/// The first second after `t` at which a job of `views` may be counted
/// otherwise ([`crate::engine::counted`], the only part of a snapshot
/// that reads the time): a begin time reached, a preemption's window
/// over. `u64::MAX` when none can.
pub fn standing_changes_after(views: &[JobView], t: u64, preempt_window_s: u64) -> u64 {
    views
        .iter()
        .flat_map(|v| [v.begin_s, if v.preempt_start_s > 0 { v.preempt_start_s.saturating_add(preempt_window_s) } else { 0 }])
        .filter(|&at| at > t)
        .min()
        .unwrap_or(u64::MAX)
}

/// What every team ran at the last copy, and the answers given since.
#[derive(Debug)]
pub struct Snapshot {
    config: Arc<Config>,
    taken_at: u64,
    /// The entitlement at the copy, then moved by the claims of every
    /// preemptor asked since (their victims gone, their jobs running).
    ent: Entitlement,
    /// The entitlement at the copy, unclaimed (what [`Snapshot::renew`]
    /// starts from).
    base_ent: Entitlement,
    /// What it was built from ([`Snapshot::with_basis`]; `None`: never
    /// reused).
    basis: Option<Basis>,
    /// Until when the time does not change what it was built from
    /// ([`standing_changes_after`]).
    valid_until: u64,
    /// Running jobs at the copy, and where each holds its GPUs (node
    /// index, GPUs).
    running: Vec<Job>,
    held: Vec<Vec<(u32, u32)>>,
    /// The nodes at the copy: their GPUs and those free.
    nodes: Nodes,
    /// Pending jobs at the copy, converted once (their contracts read from
    /// the copy): a preemptor Slurm asks about is looked up here, and
    /// converted on the call only when it was submitted since.
    pending: HashMap<u32, Job>,
    /// The allocated victims claimed since the copy (gone, for the rule).
    claimed: BTreeSet<u64>,
    /// Each preemptor asked since the copy and the victims offered to it,
    /// in the order they should go.
    answers: BTreeMap<u32, Vec<u32>>,
    /// The preemptor asked last and its GPUs: Slurm sorts that
    /// preemptor's candidates by `PREEMPT_DATA_PRIO` right after asking
    /// about them.
    last_preemptor: Option<(u32, u32)>,
    /// Each victim offered lately, the rule that offered it and when.
    offered: HashMap<u32, (PreemptReason, u64)>,
}

impl Snapshot {
    /// The snapshot of one copy of the jobs at `t`: the jobs classified
    /// against `runs`, the entitlement, the running jobs and their places.
    /// A copy is reused while slurmctld changes no job ([`CopyClock`]), and
    /// so is the snapshot built from it while neither what it was built from
    /// nor the jobs' standing changes ([`Snapshot::reusable`]); its claims
    /// start afresh every [`REFRESH`] all the same ([`Snapshot::renew`]).
    pub fn from_copy(config: Arc<Config>, alloc: &Allocation, runs: &RunBook, copy: &JobsCopy, preempt_window_s: u64, t: u64) -> Snapshot {
        let classified = classify(&config, &copy.views, runs, t, preempt_window_s);
        let ent = entitlement_of(&config, alloc, &classified);
        let valid_until = standing_changes_after(&copy.views, t, preempt_window_s);
        let (mut running, mut held, mut pending) = (Vec::new(), Vec::new(), HashMap::new());
        for (((_, job), v), at) in classified.into_iter().zip(&copy.views).zip(&copy.places) {
            match v.state {
                RunState::Running => {
                    held.push(held_on(v.gpus, at));
                    running.push(job);
                }
                RunState::Pending => {
                    pending.insert(v.job_id, job);
                }
                _ => {}
            }
        }
        let free = preemption_nodes(&copy.nodes, held.iter().map(Vec::as_slice), &config.debug_nodes);
        Snapshot {
            config,
            taken_at: t,
            base_ent: ent.clone(),
            ent,
            basis: None,
            valid_until,
            running,
            held,
            nodes: free,
            pending,
            claimed: BTreeSet::new(),
            answers: BTreeMap::new(),
            last_preemptor: None,
            offered: HashMap::new(),
        }
    }

    /// The snapshot, remembering what it was built from (so the thread can
    /// [`Snapshot::renew`] it while that stays the same).
    pub fn with_basis(mut self, basis: Basis) -> Snapshot {
        self.basis = Some(basis);
        self
    }

    /// Would [`Snapshot::from_copy`] on `basis` at `t` build this snapshot
    /// again (before its claims and answers)? Yes while `basis` is the one
    /// it was built from and `t` is before [`Snapshot::valid_until`].
    pub fn reusable(&self, basis: &Basis, t: u64) -> bool {
        self.basis.as_ref().is_some_and(|b| b.same(basis)) && t >= self.taken_at && t < self.valid_until
    }

    /// The first second at which the time changes what it was built from.
    pub fn valid_until(&self) -> u64 {
        self.valid_until
    }

    /// Start afresh at `t` as a snapshot built anew would (with
    /// [`Snapshot::reusable`] true): no claims, no answers, no preemptor
    /// asked, the offers of the last [`OFFERED_KEEP_S`] kept.
    pub fn renew(&mut self, t: u64) {
        self.ent = self.base_ent.clone();
        self.claimed.clear();
        self.answers.clear();
        self.last_preemptor = None;
        self.offered.retain(|_, (_, at)| at.saturating_add(OFFERED_KEEP_S) > t);
        self.taken_at = t;
    }

    /// Take over the offers of the snapshot before this one that are
    /// younger than [`OFFERED_KEEP_S`] at `t` (a copy may come between
    /// Slurm's question and its preemption).
    pub fn carry_offers(&mut self, before: Option<Snapshot>, t: u64) {
        let mut offered = before.map(|s| s.offered).unwrap_or_default();
        offered.retain(|_, (_, at)| at.saturating_add(OFFERED_KEEP_S) > t);
        offered.extend(self.offered.drain());
        self.offered = offered;
    }

    /// May the pending job `preemptor` preempt the running job `victim`,
    /// asked at `t`? `preemptor_view` reads the preemptor's record (called
    /// only for a preemptor not asked about before, or not in the copy).
    pub fn may_preempt(&mut self, victim: u32, preemptor: u32, preemptor_view: &dyn Fn() -> Option<JobView>, t: u64) -> bool {
        let stale = t > self.taken_at + STALE_S;
        if self.last_preemptor.map(|(id, _)| id) != Some(preemptor) {
            self.last_preemptor = preemptor_view().map(|p| (preemptor, p.gpus));
        }
        if !stale {
            // Asked before since the copy: the same answer, no conversion.
            if let Some(victims) = self.answers.get(&preemptor) {
                return victims.contains(&victim);
            }
        }
        let job = match self.pending.get(&preemptor) {
            Some(job) => job.clone(),
            None => match preemptor_view() {
                Some(p) => to_job(&self.config, &p).0,
                None => return false,
            },
        };
        if stale {
            // The thread has not copied the jobs for a while: only the rule
            // that needs no count (unallocated victims) still answers.
            let victim_unallocated = self.running.iter().find(|j| j.id == u64::from(victim)).is_none_or(|j| !j.is_allocated(&self.ent));
            let yes = job.is_allocated(&self.ent) && victim_unallocated;
            if yes {
                self.offered.insert(victim, (PreemptReason::Unallocated, t));
            }
            return yes;
        }
        self.victims(&job, t).contains(&victim)
    }

    /// The victims of `p`: computed once per snapshot; assumes the worst of
    /// the preemptors before it, and is assumed the worst of by the ones
    /// after.
    fn victims(&mut self, p: &Job, t: u64) -> Vec<u32> {
        let id = u32::try_from(p.id).unwrap_or(u32::MAX);
        if let Some(v) = self.answers.get(&id) {
            return v.clone();
        }
        let m = Moment { ent: &self.ent, rules: &self.config.priority, contracts: &self.config.contracts, now: t };
        let claimed = &self.claimed;
        let pool = VictimPool::placed(
            self.running.iter().zip(&self.held).filter(|(j, _)| !claimed.contains(&j.id)).map(|(j, at)| (j.id, j, &at[..])),
            self.nodes.clone(),
            &m,
        );
        let why = pool.for_preemptor_why(p, &m);
        for &(v, reason) in &why {
            if let Ok(v) = u32::try_from(v) {
                self.offered.insert(v, (reason, t));
            }
        }
        let order: Vec<u64> = why.into_iter().map(|(v, _)| v).collect();
        let victims: BTreeSet<u64> = order.iter().copied().collect();
        // Claim: the allocated victims leave, the preemptor runs (in budget
        // units: GPUs × their type's weight, as the entitlement counts).
        let tree = &self.config.tree;
        let gone: Vec<(u64, Arc<str>, f64)> = self
            .running
            .iter()
            .filter(|j| victims.contains(&j.id) && j.is_allocated(&self.ent))
            .map(|j| (j.id, j.account.clone(), j.units()))
            .collect();
        for (id, account, units) in gone {
            self.claimed.insert(id);
            if let Some(n) = tree.id(&account) {
                self.ent.add_running(n, -units);
            }
        }
        if p.is_allocated(&self.ent) && !victims.is_empty() {
            if let Some(n) = tree.id(&p.account) {
                self.ent.add_running(n, p.units());
                if self.config.priority.is_debug(p) {
                    self.ent.add_debug_running(n, f64::from(p.gpus));
                }
            }
        }
        let out: Vec<u32> = order.into_iter().filter_map(|v| u32::try_from(v).ok()).collect();
        log::debug!("job {} may preempt {:?}", p.id, out);
        self.answers.insert(id, out.clone());
        out
    }

    /// The victim order of the running job `victim` (lowest preempted
    /// first): its place among the victims offered to the preemptor asked
    /// last (whole nodes first, `VictimPool::for_preemptor_why`); for a job
    /// not offered to it, after those ([`OFFERED_MAX`] on), by its victim
    /// rank from the copy (its run's frozen contract); last when it is not
    /// in the copy.
    pub fn victim_order(&self, victim: u32, t: u64) -> u32 {
        let offered = self.last_preemptor.and_then(|(p, _)| self.answers.get(&p));
        if let Some(k) = offered.and_then(|o| o.iter().position(|&v| v == victim)) {
            return u32::try_from(k).unwrap_or(u32::MAX);
        }
        let Some(v) = self.running.iter().find(|j| j.id == u64::from(victim)) else { return u32::MAX };
        let m = Moment { ent: &self.ent, rules: &self.config.priority, contracts: &self.config.contracts, now: t };
        victim_rank(v, self.last_preemptor.map(|(_, gpus)| gpus), &m).max(OFFERED_MAX)
    }

    /// Why Slurm is preempting `victim` at `t`, and what it costs: the rule
    /// that offered it (none: another preemption path), the GPU-seconds
    /// thrown away, the contract it had left.
    pub fn why(&self, victim: &JobView, t: u64) -> Why {
        let job = self.running.iter().find(|j| j.id == u64::from(victim.job_id)).cloned().unwrap_or_else(|| to_job(&self.config, victim).0);
        Why {
            reason: self.offered.get(&victim.job_id).map(|&(r, _)| r),
            lost_gpu_s: lost_gpu_seconds(&job, t).round() as u64,
            contract_left_s: job.contract_left_s(t),
        }
    }
}

/// Publish `snap` as the snapshot in force, with the offers of the one
/// before it still remembered at `t`.
pub fn publish(live: &Mutex<Option<Snapshot>>, mut snap: Snapshot, t: u64) {
    let mut live = lock(live);
    snap.carry_offers(live.take(), t);
    *live = Some(snap);
}

/// The runs Slurm preempted on preempt/tally's answers: in memory on
/// Slurm's call path, written by the thread ([`save_notes`]).
#[derive(Debug)]
pub struct NoteBook {
    notes: Notes,
    path: Option<PathBuf>,
    /// Notes taken since the last write.
    dirty: bool,
}

impl NoteBook {
    /// The book as loaded from `path` (`None`: no StateSaveLocation, the
    /// notes stay in memory).
    pub fn new(notes: Notes, path: Option<PathBuf>) -> NoteBook {
        NoteBook { notes, path, dirty: false }
    }

    /// Slurm is preempting `victim`'s run at `t` (`why`: from the snapshot
    /// in force, if any).
    pub fn note(&mut self, victim: &JobView, why: Option<Why>, t: u64) {
        self.notes.note(Note { job_id: victim.job_id, run_start_s: victim.start_s, at_s: t, why });
        self.dirty = true;
    }

    pub fn notes(&self) -> &Notes {
        &self.notes
    }

    /// The notes to write, if new ones came since the last write (the book
    /// is then clean until [`NoteBook::written`] says the write failed).
    fn take_unsaved(&mut self) -> Option<(PathBuf, Notes)> {
        if !std::mem::take(&mut self.dirty) {
            return None;
        }
        Some((self.path.clone()?, self.notes.clone()))
    }

    /// After a write at `t` of `merged` (this book's notes with the file's):
    /// the other writer's notes and the pruning come into the book (notes
    /// taken meanwhile stay); a failed write leaves the book dirty. Returns
    /// how many notes came from the file.
    fn written(&mut self, merged: &Notes, ok: bool, t: u64) -> usize {
        let came = self.notes.merge(merged);
        self.notes.prune(t);
        if !ok {
            self.dirty = true;
        }
        came
    }
}

/// The run records `runs`, with the runs in `notes` as preempted where the
/// records do not say so yet: a job just preempted is protected for its
/// whole contract on its next run from the first copy after it starts,
/// before the priority plugin reads the notes.
pub fn with_notes(runs: Arc<RunBook>, notes: &[Note]) -> Arc<RunBook> {
    let behind = |r: &RunBook, n: &Note| r.get(u64::from(n.job_id)).is_some_and(|rec| rec.preempted_run_s != n.run_start_s);
    if !notes.iter().any(|n| behind(&runs, n)) {
        return runs;
    }
    let mut own = (*runs).clone();
    for n in notes {
        own.preempted(u64::from(n.job_id), n.run_start_s);
    }
    Arc::new(own)
}

/// Write the book's notes when new ones came (atomically, no lock held
/// while writing), with those the file holds that the book lacks: on a
/// fail-over the two slurmctld share the file, and this book may be the
/// one the backup loaded when it started (`preempted::save_merged`). Old
/// notes are dropped as the file is written, never by a write of their
/// own: a standby backup, which preempts nothing, never writes.
pub fn save_notes(book: &Mutex<Option<NoteBook>>, t: u64) {
    let Some((path, mut notes)) = lock(book).as_mut().and_then(NoteBook::take_unsaved) else { return };
    let (written, problem) = preempted::save_merged(&path, &mut notes, t);
    if let Some(problem) = problem {
        log::warn!("{problem}: written over with this controller's notes");
    }
    let mut guard = lock(book);
    let Some(b) = guard.as_mut() else { return };
    let came = b.written(&notes, written.is_ok(), t);
    if came > 0 {
        log::info!("{came} preemption notes of another slurmctld in {} kept", path.display());
    }
    if let Err(e) = written {
        log::error!("cannot save the preemption notes to {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests;
