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
//! keeps a `Snapshot` (the entitlement and the running jobs) built from its
//! copy of the jobs, made under the job read lock (`job_list` found with
//! `dlsym`, never linked) when slurmctld's `last_job_update` says a job
//! changed since the last one, and at least every 10 s; the snapshot is
//! built again when the copy, the config, the run records or the notes
//! changed or a job's standing changes with the time, and its claims start
//! afresh every second. Between two renewals each preemptor's
//! answer is kept, and assumes the worst of the preemptors asked before it
//! (every victim they were offered gone, their jobs running), so several
//! preemptions in one scheduling pass still never take a side below its
//! rate. The config comes from tally.toml, followed from disk; no IO and no
//! walk on the call paths. The snapshot, its answers and the notes are
//! `tally_engine::arbiter`'s types, tested there one transition at a time:
//! this crate is the exports and the thread's wiring.

// No unsafe code, and so no `#[no_mangle]` by hand: every export is
// defined through `tally_ffi::export!`, behind the panic guard.
#![forbid(unsafe_code)]

use std::ffi::c_int;
use std::sync::Mutex;
use tally_engine::arbiter::{self, Basis, CopyClock, JobsCopy, NoteBook, Snapshot, REFRESH};
use tally_engine::follower::{self, Follower};
use tally_engine::guard::lock;
use tally_engine::now;
use tally_engine::preempted::{self, Note, Notes};
use tally_engine::statefile;
use tally_engine::worker::{Wake, Worker};
use tally_ffi::abi::{conf, JobArg, QueueRecArg, SUCCESS};
use tally_ffi::host::Host;
use tally_ffi::slurm_log::{self, SlurmLogger};

tally_ffi::plugin_identity!("Tally contract-aware preemption", "preempt/tally");

static LOGGER: SlurmLogger = SlurmLogger { prefix: "preempt/tally" };
static FOLLOWER: Mutex<Option<Follower>> = Mutex::new(None);
/// The last copy and the answers given since (`tally_engine::arbiter`).
static LIVE: Mutex<Option<Snapshot>> = Mutex::new(None);
static THREAD: Mutex<Option<Worker>> = Mutex::new(None);
/// The runs Slurm preempted on our answer, written by the thread.
static NOTES: Mutex<Option<NoteBook>> = Mutex::new(None);

/// The thread's copy of the jobs, when to copy again, and how many copies
/// it made (which copy a snapshot was built from).
#[derive(Default)]
struct Kept {
    copy: JobsCopy,
    clock: CopyClock,
    copies: u64,
}

/// One round of the thread: copy the jobs under the read lock when
/// slurmctld changed one since the last copy (`arbiter::CopyClock`); build
/// the snapshot from the copy with no lock held when what it is built from
/// changed, else renew the one in force (`Snapshot::reusable`, the same
/// snapshot either way); publish. Without a config, no snapshot: nothing
/// is preempted (fail-closed).
fn refresh(host: &Host, kept: &mut Kept) {
    let Some(((config, alloc), runs)) = lock(&FOLLOWER).as_ref().and_then(|f| f.allocated().map(|c| (c, f.runs()))) else {
        *lock(&LIVE) = None;
        return;
    };
    let t = now();
    let job_update = host.job_update();
    if kept.clock.due(job_update, t) {
        let copied = host.copy_placed();
        kept.copy = JobsCopy::new(copied.jobs, copied.nodes);
        kept.clock.copied(job_update, t);
        kept.copies += 1;
    }
    // The runs noted here as preempted that the priority plugin has not
    // taken in yet (the notes copied out, merged with no lock held).
    let notes: Vec<Note> = lock(&NOTES).as_ref().map(|b| b.notes().iter().copied().collect()).unwrap_or_default();
    let window = conf::preempt_window_s();
    let basis = Basis { config: config.clone(), alloc: alloc.clone(), runs: runs.clone(), notes, preempt_window_s: window, copy: kept.copies };
    if let Some(snap) = lock(&LIVE).as_mut().filter(|s| s.reusable(&basis, t)) {
        snap.renew(t);
        return;
    }
    let runs = arbiter::with_notes(runs, &basis.notes);
    let snap = Snapshot::from_copy(config, &alloc, &runs, &kept.copy, window, t).with_basis(basis);
    arbiter::publish(&LIVE, snap, t);
}

/// Slurm is preempting `job` on our answer: note its run, why and what it
/// cost (memory only).
fn note_preempted(job: JobArg<'_>) {
    let Some(v) = job.view() else { return };
    let t = now();
    let why = lock(&LIVE).as_ref().map(|snap| snap.why(&v, t));
    if let Some(w) = why.filter(|w| w.contract_left_s > 0) {
        log::warn!("job {}: preempted with {} s of its contract left: a broken contract", v.job_id, w.contract_left_s);
    } else if why.is_some_and(|w| w.reason.is_none()) {
        log::info!("job {}: preempted though preempt/tally did not offer it (another preemption path?)", v.job_id);
    }
    if let Some(b) = lock(&NOTES).as_mut() {
        b.note(&v, why, t);
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
    snap.may_preempt(v_id, p_id, &|| preemptor.view(), now())
}

tally_ffi::export! {
    /// Follow the config and the ledger's run records; inside slurmctld,
    /// start the thread that builds the snapshot every second.
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
        *lock(&NOTES) = Some(NoteBook::new(notes, notes_path));
        let host = Host::lookup();
        follower::install(&FOLLOWER, state, true, host.is_some());
        if let Some(host) = host {
            let mut kept = Kept::default();
            *lock(&THREAD) = Worker::start("tally-preempt", "the preemption thread", move |wake| {
                if wake != Wake::Stop {
                    refresh(&host, &mut kept);
                }
                // Written whatever the copy found (even with no config).
                arbiter::save_notes(&NOTES, now());
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
        arbiter::save_notes(&NOTES, now());
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
/// first, `Snapshot::victim_order`); last without a copy.
fn victim_order(job: JobArg<'_>) -> u32 {
    let live = lock(&LIVE);
    live.as_ref().zip(job.id()).map_or(u32::MAX, |(snap, id)| snap.victim_order(id, now()))
}
