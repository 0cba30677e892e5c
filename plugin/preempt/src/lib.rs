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
//! The rule reads what every team runs *now*: slurmctld calls these
//! functions from its scheduler with the job lock held, so the plugin walks
//! `job_list` itself (found with `dlsym`, never linked) and keeps the result
//! for the preemptor it was asked about until a job changes (Slurm asks once
//! per running job for each preemptor). The config comes from tally.toml,
//! followed from disk by a thread; no IO on the call paths.

#![allow(clippy::not_unsafe_ptr_arg_deref)]

use slurm_sys::{
    job_queue_rec_t, job_record_t, slurm_preempt_data_type_t, PREEMPT_DATA_ENABLED, PREEMPT_DATA_GRACE_TIME,
    PREEMPT_DATA_MODE, PREEMPT_DATA_PRIO, PREEMPT_MODE_REQUEUE,
};
use std::collections::BTreeSet;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tally_allocator::{victim_rank, Entitlement, Job, Moment, VictimPool};
use tally_config::Config;
use tally_slurm::engine::{allocation, entitlement_of, to_job, DEFAULT_PREEMPT_WINDOW_S};
use tally_slurm::follower::{self, Follower};
use tally_slurm::guard::{guard, lock};
use tally_slurm::host::Host;
use tally_slurm::slurm_log::SlurmLogger;
use tally_slurm::statefile;
use tally_slurm::view::{c_string, job_pointers, read_job, RunState};

tally_slurm::plugin_identity!("Tally contract-aware preemption", "preempt/tally");

const SUCCESS: c_int = 0;
const ERROR: c_int = -1;
static LOGGER: SlurmLogger = SlurmLogger { prefix: "preempt/tally" };
static FOLLOWER: Mutex<Option<Follower>> = Mutex::new(None);
static LIVE: Mutex<Option<Live>> = Mutex::new(None);

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// What the rule saw for one preemptor: the entitlement of the moment and
/// the victims it may take.
struct Live {
    /// (preemptor, last_job_update, now): the walk is redone when any changes.
    stamp: (u32, i64, u64),
    config: Arc<Config>,
    ent: Entitlement,
    victims: BTreeSet<u32>,
}

fn preempt_window_s() -> u64 {
    // SAFETY: libslurmfull's global config, read-only.
    let (k, m) = unsafe { (slurm_sys::slurm_conf.kill_wait, slurm_sys::slurm_conf.msg_timeout) };
    let w = u64::from(k) + u64::from(m);
    if w == 0 {
        DEFAULT_PREEMPT_WINDOW_S
    } else {
        w
    }
}

/// The victims `preemptor` may take now, walking `job_list` when something
/// changed since the last call. `None` outside slurmctld.
///
/// # Safety
/// Called from slurmctld's scheduler with the job lock held; `preemptor` is
/// a live job.
unsafe fn live_for(preemptor: *mut job_record_t, config: Arc<Config>) -> Option<(BTreeSet<u32>, Arc<Config>)> {
    let host = Host::lookup()?;
    // SAFETY: caller's contract (job lock held).
    let (list, updated) = unsafe { host.jobs_held() };
    // SAFETY: as above.
    let p = unsafe { read_job(preemptor) }?;
    let t = now();
    let stamp = (p.job_id, updated, t);
    let mut slot = lock(&LIVE);
    if let Some(l) = slot.as_ref().filter(|l| l.stamp == stamp && Arc::ptr_eq(&l.config, &config)) {
        return Some((l.victims.clone(), l.config.clone()));
    }
    // SAFETY: job_list under the caller's lock; pointers not kept.
    let views: Vec<_> = unsafe { job_pointers(list) }.into_iter().filter_map(|j| unsafe { read_job(j) }).collect();
    let alloc = allocation(&config);
    let ent = entitlement_of(&config, &alloc, &views, t, preempt_window_s());
    let running: Vec<Job> = views.iter().filter(|v| v.state == RunState::Running).map(|v| to_job(&config, v).0).collect();
    let m = Moment { ent: &ent, max_requeues: config.contracts.max_requeues, now: t };
    let pool = VictimPool::new(running.iter().map(|j| (j.id, j)), &m);
    let (preemptor_job, _) = to_job(&config, &p);
    let victims: BTreeSet<u32> = pool.for_preemptor(&preemptor_job, &m).into_iter().filter_map(|id| u32::try_from(id).ok()).collect();
    log::debug!("job {} may preempt {:?}", p.job_id, victims);
    *slot = Some(Live { stamp, config: config.clone(), ent, victims: victims.clone() });
    Some((victims, config))
}

fn config() -> Option<Arc<Config>> {
    lock(&FOLLOWER).as_ref().map(|f| f.config())
}

#[no_mangle]
pub extern "C" fn init() -> c_int {
    guard("init", || SUCCESS, || {
        // SAFETY: libslurmfull's global config, loaded before plugins.
        let dir = unsafe { c_string(slurm_sys::slurm_conf.state_save_location) };
        follower::install(&FOLLOWER, &LOGGER, dir.map(|d| statefile::path_in(std::path::Path::new(&d))));
        SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn fini() -> c_int {
    guard("fini", || SUCCESS, || {
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
        let Some(config) = config() else { return false };
        // SAFETY: live job under the caller's job lock.
        let Some(v) = (unsafe { read_job(preemptee) }) else { return false };
        if v.state != RunState::Running {
            return false;
        }
        // SAFETY: called by slurmctld's scheduler with the job lock held.
        let Some((victims, _)) = (unsafe { live_for(preemptor, config) }) else { return false };
        victims.contains(&v.job_id)
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
                let rank = config().and_then(|c| {
                    // SAFETY: a live job under the caller's job lock.
                    let v = unsafe { read_job(job_ptr) }?;
                    // The victim's class and loss need only the tree: the
                    // last walk's entitlement, or one with nobody running.
                    let live = lock(&LIVE);
                    let fresh;
                    let ent = match live.as_ref().filter(|l| Arc::ptr_eq(&l.config, &c)) {
                        Some(l) => &l.ent,
                        None => {
                            fresh = Entitlement::compute(&c.tree, &allocation(&c), &tally_allocator::Load::new(&c.tree));
                            &fresh
                        }
                    };
                    let m = Moment { ent, max_requeues: c.contracts.max_requeues, now: now() };
                    Some(victim_rank(&to_job(&c, &v).0, &m))
                });
                // SAFETY: as above.
                unsafe { *data.cast::<u32>() = rank.unwrap_or(u32::MAX) };
            }
            _ => return ERROR,
        }
        SUCCESS
    })
}
