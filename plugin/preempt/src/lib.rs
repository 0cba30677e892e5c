//! `preempt/tally`: Slurm preempts by Tally's contract-aware, restorative rule.
//!
//! slurm.conf: `PreemptType=preempt/tally`, `PreemptMode=REQUEUE`.
//! `preempt_p_preemptable(victim, preemptor)` answers whether the victim is
//! among `allocator::eligible_victims` of the preemptor: only allocated
//! preemptors; unallocated victims always; allocated victims past their
//! contract (and, when not resumable, with requeues left) only where the
//! rule restores entitlement — the preemptor's side of the tree below its
//! rate, the victim's side staying at or above its rate and above the
//! preemptor's final share, counted over every victim eligible before it
//! (so whichever of them Slurm takes, no side falls below its rate).
//! Slurm sorts candidates by `PREEMPT_DATA_PRIO` ascending: we return
//! `allocator::victim_rank` (unallocated, then resumable, then the rest;
//! least work lost first). Every victim is requeued and keeps its comment.
//!
//! The rule reads what every team runs *now*, and slurmctld calls these
//! functions from inside its own walk of `job_list` (`list_for_each` holds
//! the list's lock: walking it again here is fatal). So a thread of this
//! plugin, started in `init` only inside slurmctld and joined in `fini`,
//! copies the jobs every second under the job read lock (`job_list` found
//! with `dlsym`, never linked) and publishes a [`Snapshot`]: the
//! entitlement and the running jobs. Between two snapshots each preemptor's
//! answer is kept, and assumes the worst of the preemptors asked before it
//! (every victim they were offered gone, their jobs running), so several
//! preemptions in one scheduling pass still never take a side below its
//! rate. The config comes from tally.toml, followed from disk; no IO and no
//! walk on the call paths.

#![allow(clippy::not_unsafe_ptr_arg_deref)]

use slurm_sys::{
    job_queue_rec_t, job_record_t, slurm_preempt_data_type_t, JOB_RUNNING, JOB_STATE_BASE, PREEMPT_DATA_ENABLED,
    PREEMPT_DATA_GRACE_TIME, PREEMPT_DATA_MODE, PREEMPT_DATA_PRIO, PREEMPT_MODE_REQUEUE,
};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tally_allocator::{victim_rank, Entitlement, Job, Moment, VictimPool};
use tally_config::Config;
use tally_slurm::engine::{allocation, classify, entitlement_of, to_job};
use tally_slurm::host::preempt_window_s;
use tally_slurm::follower::{self, Follower};
use tally_slurm::guard::{guard, lock};
use tally_slurm::now;
use tally_slurm::host::{Access, Host};
use tally_slurm::slurm_log::SlurmLogger;
use tally_slurm::statefile;
use tally_slurm::view::{c_string, job_pointers, read_job, read_job_named, Names, RunState};
use tally_slurm::worker::{Wake, Worker};

tally_slurm::plugin_identity!("Tally contract-aware preemption", "preempt/tally");

const SUCCESS: c_int = 0;
const ERROR: c_int = -1;
static LOGGER: SlurmLogger = SlurmLogger { prefix: "preempt/tally" };
static FOLLOWER: Mutex<Option<Follower>> = Mutex::new(None);
static LIVE: Mutex<Option<Snapshot>> = Mutex::new(None);
static THREAD: Mutex<Option<Worker>> = Mutex::new(None);
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
    /// Running jobs at the copy.
    running: Vec<Job>,
    /// The allocated victims claimed since the copy (gone, for the rule).
    claimed: BTreeSet<u64>,
    /// Each preemptor asked since the copy and the victims offered to it.
    answers: BTreeMap<u32, BTreeSet<u32>>,
}

impl Snapshot {
    /// The victims of `p`: computed once per snapshot; assumes the worst of
    /// the preemptors before it, and is assumed the worst of by the ones
    /// after.
    fn victims(&mut self, p: &Job) -> BTreeSet<u32> {
        let id = u32::try_from(p.id).unwrap_or(u32::MAX);
        if let Some(v) = self.answers.get(&id) {
            return v.clone();
        }
        let t = now();
        let m = Moment { ent: &self.ent, max_requeues: self.config.contracts.max_requeues, now: t };
        let claimed = &self.claimed;
        let pool = VictimPool::new(self.running.iter().filter(|j| !claimed.contains(&j.id)).map(|j| (j.id, j)), &m);
        let victims: BTreeSet<u64> = pool.for_preemptor(p, &m).into_iter().collect();
        // Claim: the allocated victims leave, the preemptor runs.
        let tree = &self.config.tree;
        let gone: Vec<(u64, std::sync::Arc<str>, u32)> =
            self.running.iter().filter(|j| victims.contains(&j.id) && j.is_allocated(&self.ent)).map(|j| (j.id, j.account.clone(), j.gpus)).collect();
        for (id, account, gpus) in gone {
            self.claimed.insert(id);
            if let Some(n) = tree.id(&account) {
                self.ent.add_running(n, -f64::from(gpus));
            }
        }
        if p.is_allocated(&self.ent) && !victims.is_empty() {
            if let Some(n) = tree.id(&p.account) {
                self.ent.add_running(n, f64::from(p.gpus));
            }
        }
        let out: BTreeSet<u32> = victims.into_iter().filter_map(|v| u32::try_from(v).ok()).collect();
        log::debug!("job {} may preempt {:?}", p.id, out);
        self.answers.insert(id, out.clone());
        out
    }
}

/// One round of the thread: copy the jobs under the read lock, compute with
/// no lock held, publish. Without a config, no snapshot: nothing is
/// preempted (fail-closed).
fn refresh(host: &Host) {
    let Some((config, runs)) = lock(&FOLLOWER).as_ref().and_then(|f| f.config().map(|c| (c, f.runs()))) else {
        *lock(&LIVE) = None;
        return;
    };
    let views: Vec<_> = host.with_jobs(Access::ReadJobs, |list| {
        // SAFETY: job_list under the job read lock (with_jobs); pointers not kept.
        let mut names = Names::new();
        unsafe { job_pointers(list) }.into_iter().filter_map(|j| unsafe { read_job_named(j, &mut names) }).collect()
    });
    let t = now();
    let jobs = classify(&config, &views, &runs, t, preempt_window_s());
    let ent = entitlement_of(&config, &allocation(&config), &jobs);
    let running = jobs.into_iter().zip(&views).filter(|(_, v)| v.state == RunState::Running).map(|((_, j), _)| j).collect();
    *lock(&LIVE) = Some(Snapshot { config, taken_at: t, ent, running, claimed: BTreeSet::new(), answers: BTreeMap::new() });
}

#[no_mangle]
pub extern "C" fn init() -> c_int {
    guard("init", || SUCCESS, || {
        // SAFETY: libslurmfull's global config, loaded before plugins.
        let dir = unsafe { c_string(slurm_sys::slurm_conf.state_save_location) };
        follower::install(&FOLLOWER, &LOGGER, dir.map(|d| statefile::path_in(std::path::Path::new(&d))));
        if let Some(host) = Host::lookup() {
            let w = Worker::spawn("tally-preempt", move |wake| {
                if wake != Wake::Stop {
                    refresh(&host);
                }
                REFRESH
            })
            .map_err(|e| log::error!("cannot start the preemption thread: {e}"))
            .ok();
            *lock(&THREAD) = w;
        }
        SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn fini() -> c_int {
    guard("fini", || SUCCESS, || {
        let w = lock(&THREAD).take();
        if let Some(w) = w {
            w.stop();
        }
        follower::uninstall(&FOLLOWER);
        *lock(&LIVE) = None;
        SUCCESS
    })
}

/// May `preemptor` (pending) preempt `preemptee` (running)? Called by the
/// scheduler with the job lock held, also with preemptee == preemptor and
/// for pending preemptees.
#[no_mangle]
pub extern "C" fn preempt_p_preemptable(preemptee: *mut job_record_t, preemptor: *mut job_record_t) -> bool {
    guard("preempt_p_preemptable", || false, || {
        if preemptee.is_null() || preemptor.is_null() || preemptee == preemptor {
            return false;
        }
        // SAFETY: live jobs under the caller's job lock.
        let (v_id, v_running, p_id) = unsafe { ((*preemptee).job_id, (*preemptee).job_state & JOB_STATE_BASE == JOB_RUNNING, (*preemptor).job_id) };
        if !v_running {
            return false;
        }
        let mut live = lock(&LIVE);
        let Some(snap) = live.as_mut() else { return false };
        let stale = now() > snap.taken_at + STALE_S;
        if !stale {
            // Asked before since the copy: the same answer, no conversion.
            if let Some(victims) = snap.answers.get(&p_id) {
                return victims.contains(&v_id);
            }
        }
        // SAFETY: as above.
        let Some(p) = (unsafe { read_job(preemptor) }) else { return false };
        let (job, _) = to_job(&snap.config, &p);
        if stale {
            // The thread has not copied the jobs for a while: only the rule
            // that needs no count (unallocated victims) still answers.
            let victim_unallocated = snap.running.iter().find(|j| j.id == u64::from(v_id)).is_none_or(|j| !j.is_allocated(&snap.ent));
            return job.is_allocated(&snap.ent) && victim_unallocated;
        }
        snap.victims(&job).contains(&v_id)
    })
}

/// Queue order hint: true if the first job may preempt the second.
#[no_mangle]
pub extern "C" fn preempt_p_job_preempt_check(preemptor: *mut job_queue_rec_t, preemptee: *mut job_queue_rec_t) -> bool {
    guard("preempt_p_job_preempt_check", || false, || {
        // SAFETY: queue records valid for this call.
        match unsafe { (preemptor.as_ref(), preemptee.as_ref()) } {
            (Some(a), Some(b)) => preempt_p_preemptable(b.job_ptr, a.job_ptr),
            _ => false,
        }
    })
}

/// ENABLED → bool, MODE → u16 (requeue), PRIO → u32 victim rank (lowest
/// preempted first), GRACE_TIME → u32 seconds (0).
#[no_mangle]
pub extern "C" fn preempt_p_get_data(job_ptr: *mut job_record_t, data_type: slurm_preempt_data_type_t, data: *mut c_void) -> c_int {
    guard("preempt_p_get_data", || ERROR, || {
        if data.is_null() {
            return ERROR;
        }
        match data_type {
            // SAFETY (all writes): `data` points to the type Slurm documents for the request.
            PREEMPT_DATA_ENABLED => unsafe { *data.cast::<bool>() = true },
            PREEMPT_DATA_MODE => unsafe { *data.cast::<u16>() = PREEMPT_MODE_REQUEUE },
            PREEMPT_DATA_GRACE_TIME => unsafe { *data.cast::<u32>() = 0 },
            PREEMPT_DATA_PRIO => {
                let live = lock(&LIVE);
                let rank = live.as_ref().and_then(|snap| {
                    // SAFETY: a live job under the caller's job lock.
                    let id = u64::from(unsafe { job_ptr.as_ref() }?.job_id);
                    // The victim as copied (its run's frozen contract); the
                    // class and loss need only the tree.
                    let v = snap.running.iter().find(|j| j.id == id)?;
                    let m = Moment { ent: &snap.ent, max_requeues: snap.config.contracts.max_requeues, now: now() };
                    Some(victim_rank(v, &m))
                });
                // SAFETY: as above.
                unsafe { *data.cast::<u32>() = rank.unwrap_or(u32::MAX) };
            }
            _ => return ERROR,
        }
        SUCCESS
    })
}
