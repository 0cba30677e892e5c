//! `preempt/tally`: Slurm preempts by Tally's contract-aware rule.
//!
//! slurm.conf: `PreemptType=preempt/tally`, `PreemptMode=REQUEUE`.
//! `preempt_p_preemptable(victim, preemptor)` answers whether the victim is
//! among `allocator::eligible_victims` of the preemptor: only allocated
//! preemptors; unallocated victims always; allocated victims only past
//! their contract, where the rule restores what another team is owed (the
//! preemptor's side below its rate, the victim's side staying at or above
//! it and above the preemptor's final share) or time-slices for a debug
//! job (its own team's work, or a side that stays at or above its rate
//! and keeps a higher share) — counted over every victim eligible before
//! it, so whichever of them Slurm takes, no side falls below its rate.
//! Slurm sorts one preemptor's candidates by `PREEMPT_DATA_PRIO`
//! ascending: we return `allocator::victim_rank` for the preemptor asked
//! last (unallocated, then resumable, then the rest; the closest in size,
//! then the least work lost). Every victim is requeued and keeps its
//! comment; Slurm asks for its grace time as it preempts it, and the run
//! is noted (`tally_engine::preempted`) so that its next run gets its whole
//! contract.
//!
//! The rule reads what every team runs *now*, and slurmctld calls these
//! functions from inside its own walk of `job_list` (`list_for_each` holds
//! the list's lock: walking it again here is fatal). So a thread of this
//! plugin, started in `init` only inside slurmctld and joined in `fini`,
//! copies the jobs every second under the job read lock (`job_list` found
//! with `dlsym`, never linked) and publishes a `Snapshot`: the
//! entitlement and the running jobs. Between two snapshots each preemptor's
//! answer is kept, and assumes the worst of the preemptors asked before it
//! (every victim they were offered gone, their jobs running), so several
//! preemptions in one scheduling pass still never take a side below its
//! rate. The config comes from tally.toml, followed from disk; no IO and no
//! walk on the call paths.

// No unsafe code, and so no `#[no_mangle]` by hand: every export is
// defined through `tally_ffi::export!`, behind the panic guard.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::c_int;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tally_allocator::{lost_gpu_seconds, victim_rank, Entitlement, Job, Moment, Nodes, PreemptReason, RunBook, VictimPool};
use tally_config::Config;
use tally_engine::engine::{classify, entitlement_of, to_job};
use tally_engine::follower::{self, Follower};
use tally_engine::guard::lock;
use tally_engine::now;
use tally_engine::planner::{preemption_nodes, Placed};
use tally_engine::preempted::{self, Note, Notes, Why};
use tally_engine::statefile;
use tally_engine::view::RunState;
use tally_engine::worker::{Wake, Worker};
use tally_ffi::abi::{conf, JobArg, QueueRecArg, SUCCESS};
use tally_ffi::host::Host;
use tally_ffi::slurm_log::{self, SlurmLogger};

tally_ffi::plugin_identity!("Tally contract-aware preemption", "preempt/tally");

static LOGGER: SlurmLogger = SlurmLogger { prefix: "preempt/tally" };
static FOLLOWER: Mutex<Option<Follower>> = Mutex::new(None);
static LIVE: Mutex<Option<Snapshot>> = Mutex::new(None);
static THREAD: Mutex<Option<Worker>> = Mutex::new(None);
/// The runs Slurm preempted on our answer, and whether the file is behind.
static NOTES: Mutex<Option<NoteBook>> = Mutex::new(None);

/// [`NOTES`]: in memory on Slurm's call path, written by the thread.
struct NoteBook {
    notes: Notes,
    path: Option<std::path::PathBuf>,
    dirty: bool,
}
/// How often the thread copies the jobs.
const REFRESH: Duration = Duration::from_secs(1);
/// A copy older than this is not trusted for the restorative rule.
const STALE_S: u64 = 30;

/// What every team ran at the last copy, and the answers given since.
struct Snapshot {
    config: Arc<Config>,
    taken_at: u64,
    /// The entitlement at the copy, then moved by the claims of every
    /// preemptor asked since (their victims gone, their jobs running).
    ent: Entitlement,
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
    /// Each victim offered lately, the rule that offered it and when:
    /// carried from copy to copy for [`OFFERED_KEEP_S`], so that the note of
    /// a preemption says why even when a copy came between Slurm's question
    /// and its preemption.
    offered: HashMap<u32, (PreemptReason, u64)>,
}

/// How long a victim's offer is remembered for its note.
const OFFERED_KEEP_S: u64 = 60;

impl Snapshot {
    /// The victims of `p`: computed once per snapshot; assumes the worst of
    /// the preemptors before it, and is assumed the worst of by the ones
    /// after.
    fn victims(&mut self, p: &Job) -> Vec<u32> {
        let id = u32::try_from(p.id).unwrap_or(u32::MAX);
        if let Some(v) = self.answers.get(&id) {
            return v.clone();
        }
        let t = now();
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
        // Claim: the allocated victims leave, the preemptor runs.
        let tree = &self.config.tree;
        // (In budget units: GPUs × their type's weight, as the entitlement counts.)
        let gone: Vec<(u64, std::sync::Arc<str>, f64)> = self
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
}

/// One round of the thread: copy the jobs under the read lock, compute with
/// no lock held, publish. Without a config, no snapshot: nothing is
/// preempted (fail-closed).
fn refresh(host: &Host) {
    let Some(((config, alloc), runs)) = lock(&FOLLOWER).as_ref().and_then(|f| f.allocated().map(|c| (c, f.runs()))) else {
        *lock(&LIVE) = None;
        return;
    };
    let copied = host.copy_placed();
    let nodes = preemption_nodes(&copied.nodes, &copied.jobs, &config.debug_nodes);
    let (views, placed): (Vec<_>, Vec<_>) = copied.jobs.into_iter().map(|Placed { view, nodes }| (view, nodes)).unzip();
    let t = now();
    let runs = with_notes(runs);
    let jobs = classify(&config, &views, &runs, t, conf::preempt_window_s());
    let ent = entitlement_of(&config, &alloc, &jobs);
    let (mut running, mut held, mut pending) = (Vec::new(), Vec::new(), HashMap::new());
    for (((_, job), v), at) in jobs.into_iter().zip(views).zip(placed) {
        match v.state {
            RunState::Running => {
                held.push(Placed { view: v, nodes: at }.held());
                running.push(job);
            }
            RunState::Pending => {
                pending.insert(v.job_id, job);
            }
            _ => {}
        }
    }
    let answers = BTreeMap::new();
    let mut live = lock(&LIVE);
    let mut offered = live.take().map(|s| s.offered).unwrap_or_default();
    offered.retain(|_, (_, at)| at.saturating_add(OFFERED_KEEP_S) > t);
    *live =
        Some(Snapshot { config, taken_at: t, ent, running, held, nodes, pending, claimed: BTreeSet::new(), answers, last_preemptor: None, offered });
}

/// The run records followed from the ledger, with the runs noted here as
/// preempted that the priority plugin has not taken in yet: a job this
/// plugin just preempted is protected for its whole contract on its next
/// run from the first copy after it starts.
fn with_notes(runs: std::sync::Arc<RunBook>) -> std::sync::Arc<RunBook> {
    let notes: Vec<Note> = lock(&NOTES).as_ref().map(|b| b.notes.iter().copied().collect()).unwrap_or_default();
    let pending = |r: &RunBook, n: &Note| r.get(u64::from(n.job_id)).is_some_and(|rec| rec.preempted_run_s != n.run_start_s);
    if !notes.iter().any(|n| pending(&runs, n)) {
        return runs;
    }
    let mut own = (*runs).clone();
    for n in &notes {
        own.preempted(u64::from(n.job_id), n.run_start_s);
    }
    std::sync::Arc::new(own)
}

/// Write the notes when new ones came (atomically, no lock of Slurm's held),
/// with those the file holds that this book lacks: on a fail-over the two
/// slurmctld share the file, and this book may be the one the backup loaded
/// when it started (`preempted::save_merged`). Old notes are dropped as the
/// file is written, never by a write of their own: a standby backup, which
/// preempts nothing, never writes.
fn save_notes(t: u64) {
    let (path, mut notes) = {
        let mut book = lock(&NOTES);
        let Some(b) = book.as_mut() else { return };
        if !b.dirty {
            return;
        }
        b.dirty = false;
        let Some(path) = b.path.clone() else { return };
        (path, b.notes.clone())
    };
    let (written, problem) = preempted::save_merged(&path, &mut notes, t);
    if let Some(problem) = problem {
        log::warn!("{problem}: written over with this controller's notes");
    }
    let mut book = lock(&NOTES);
    let Some(b) = book.as_mut() else { return };
    // The other writer's notes, and the file's pruning, into the book
    // (notes taken meanwhile stay).
    let came = b.notes.merge(&notes);
    b.notes.prune(t);
    if came > 0 {
        log::info!("{came} preemption notes of another slurmctld in {} kept", path.display());
    }
    if let Err(e) = written {
        log::error!("cannot save the preemption notes to {}: {e}", path.display());
        b.dirty = true;
    }
}

/// Slurm is preempting `job` on our answer: note its run, why and what it
/// cost (memory only).
fn note_preempted(job: JobArg<'_>) {
    let Some(v) = job.view() else { return };
    let t = now();
    let why = lock(&LIVE).as_ref().map(|snap| {
        let victim = snap.running.iter().find(|j| j.id == u64::from(v.job_id)).cloned().unwrap_or_else(|| to_job(&snap.config, &v).0);
        Why {
            reason: snap.offered.get(&v.job_id).map(|&(r, _)| r),
            lost_gpu_s: lost_gpu_seconds(&victim, t).round() as u64,
            contract_left_s: victim.contract_left_s(t),
        }
    });
    if let Some(w) = why.filter(|w| w.contract_left_s > 0) {
        log::warn!("job {}: preempted with {} s of its contract left: a broken contract", v.job_id, w.contract_left_s);
    } else if why.is_some_and(|w| w.reason.is_none()) {
        log::info!("job {}: preempted though preempt/tally did not offer it (another preemption path?)", v.job_id);
    }
    if let Some(b) = lock(&NOTES).as_mut() {
        b.notes.note(Note { job_id: v.job_id, run_start_s: v.start_s, at_s: t, why });
        b.dirty = true;
    }
    log::debug!("job {} preempted (its run of {}): its next run gets its whole contract", v.job_id, v.start_s);
}

/// May `preemptor` (pending) preempt `preemptee` (running)?
fn may_preempt(preemptee: JobArg<'_>, preemptor: JobArg<'_>) -> bool {
    let (Some(v_id), Some(p_id)) = (preemptee.id(), preemptor.id()) else { return false };
    if preemptee == preemptor || !preemptee.is_running() {
        return false;
    }
    let mut live = lock(&LIVE);
    let Some(snap) = live.as_mut() else { return false };
    let stale = now() > snap.taken_at + STALE_S;
    if snap.last_preemptor.map(|(id, _)| id) != Some(p_id) {
        snap.last_preemptor = preemptor.view().map(|p| (p_id, p.gpus));
    }
    if !stale {
        // Asked before since the copy: the same answer, no conversion.
        if let Some(victims) = snap.answers.get(&p_id) {
            return victims.contains(&v_id);
        }
    }
    let job = match snap.pending.get(&p_id) {
        Some(job) => job.clone(),
        None => match preemptor.view() {
            Some(p) => to_job(&snap.config, &p).0,
            None => return false,
        },
    };
    if stale {
        // The thread has not copied the jobs for a while: only the rule
        // that needs no count (unallocated victims) still answers.
        let victim_unallocated = snap.running.iter().find(|j| j.id == u64::from(v_id)).is_none_or(|j| !j.is_allocated(&snap.ent));
        let yes = job.is_allocated(&snap.ent) && victim_unallocated;
        if yes {
            snap.offered.insert(v_id, (PreemptReason::Unallocated, now()));
        }
        return yes;
    }
    snap.victims(&job).contains(&v_id)
}

tally_ffi::export! {
    /// Follow the config and the ledger's run records; inside slurmctld,
    /// start the thread that copies the jobs every second.
    fn init() -> c_int;
    fallback || SUCCESS;
    {
        slurm_log::init(&LOGGER);
        let state = conf::state_save_location().map(|d| statefile::path_in(std::path::Path::new(&d)));
        let notes_path = conf::state_save_location().map(|d| preempted::path_in(std::path::Path::new(&d)));
        let notes = match notes_path.as_deref().map(preempted::load) {
            Some(Ok(n)) => n,
            Some(Err(problem)) => {
                log::warn!("{problem}: starting with no notes");
                Notes::new()
            }
            None => Notes::new(),
        };
        *lock(&NOTES) = Some(NoteBook { notes, path: notes_path, dirty: false });
        let host = Host::lookup();
        follower::install(&FOLLOWER, state, true, host.is_some());
        if let Some(host) = host {
            *lock(&THREAD) = Worker::start("tally-preempt", "the preemption thread", move |wake| {
                if wake != Wake::Stop {
                    refresh(&host);
                }
                // Written whatever the copy found (even with no config).
                save_notes(now());
                REFRESH
            });
        }
        SUCCESS
    }

    fn fini() -> c_int;
    fallback || SUCCESS;
    {
        let w = lock(&THREAD).take();
        if let Some(w) = w {
            w.stop();
        }
        follower::uninstall(&FOLLOWER);
        *lock(&LIVE) = None;
        save_notes(now());
        *lock(&NOTES) = None;
        SUCCESS
    }

    /// May `preemptor` (pending) preempt `preemptee` (running)? Called by the
    /// scheduler with the job lock held, also with preemptee == preemptor and
    /// for pending preemptees. On a panic: no (fail-closed).
    fn preempt_p_preemptable(preemptee: JobArg<'_>, preemptor: JobArg<'_>) -> bool;
    fallback || false;
    {
        may_preempt(preemptee, preemptor)
    }

    /// Queue order hint: true if the first job may preempt the second.
    fn preempt_p_job_preempt_check(preemptor: QueueRecArg<'_>, preemptee: QueueRecArg<'_>) -> bool;
    fallback || false;
    {
        match (preemptor.job(), preemptee.job()) {
            (Some(a), Some(b)) => may_preempt(b, a),
            _ => false,
        }
    }

}

tally_ffi::export_preempt_answers!(grace: note_preempted, prio: victim_order);

/// The victim order of a running job Slurm may preempt (lowest preempted
/// first): its place among the victims offered to the preemptor asked
/// last (whole nodes first, `VictimPool::for_preemptor_why`); for a job
/// not offered to it, after those, by its victim rank from the copy (its
/// run's frozen contract); last when it is not in the copy.
fn victim_order(job: JobArg<'_>) -> u32 {
    let live = lock(&LIVE);
    let rank = live.as_ref().and_then(|snap| {
        let id = job.id()?;
        let offered = snap.last_preemptor.and_then(|(p, _)| snap.answers.get(&p));
        if let Some(k) = offered.and_then(|o| o.iter().position(|&v| v == id)) {
            return Some(u32::try_from(k).unwrap_or(u32::MAX));
        }
        let v = snap.running.iter().find(|j| j.id == u64::from(id))?;
        let m = Moment { ent: &snap.ent, rules: &snap.config.priority, contracts: &snap.config.contracts, now: now() };
        Some(victim_rank(v, snap.last_preemptor.map(|(_, gpus)| gpus), &m).max(OFFERED_MAX))
    });
    rank.unwrap_or(u32::MAX)
}

/// Victim orders below this are places among the victims offered to the
/// preemptor asked last.
const OFFERED_MAX: u32 = 1 << 20;
