//! `preempt/tally`: Slurm preempts by Tally's contract-aware rule.
//!
//! slurm.conf: `PreemptType=preempt/tally`, `PreemptMode=REQUEUE`.
//! `preempt_p_preemptable` is `allocator::may_preempt`: only allocated
//! preemptors; victims are unallocated jobs, or allocated jobs past their
//! contract whose team now ranks below the preemptor's; never inside a
//! contract; never a job itself or a pending job. Slurm sorts candidates by
//! `PREEMPT_DATA_PRIO` ascending: we return `allocator::victim_rank`
//! (unallocated, then past-contract resumable, then the rest; most
//! over-allocated team first; youngest first). Every victim is requeued and
//! keeps its comment, so it comes back with its contract; the priority plugin
//! charges it only for what it ran.
//!
//! The ranking comes from the ledger priority/tally saves, followed from disk
//! by a thread; the call paths only read memory.

#![allow(clippy::not_unsafe_ptr_arg_deref)]

use slurm_sys::{
    job_queue_rec_t, job_record_t, slurm_preempt_data_type_t, PREEMPT_DATA_ENABLED, PREEMPT_DATA_GRACE_TIME,
    PREEMPT_DATA_MODE, PREEMPT_DATA_PRIO, PREEMPT_MODE_REQUEUE,
};
use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};
use tally_allocator::{may_preempt, victim_rank};
use tally_slurm::engine::to_job;
use tally_slurm::follower::{self, Follower};
use tally_slurm::guard::{guard, lock};
use tally_slurm::slurm_log::SlurmLogger;
use tally_slurm::statefile;
use tally_slurm::view::{c_string, read_job};

tally_slurm::plugin_identity!("Tally contract-aware preemption", "preempt/tally");

const SUCCESS: c_int = 0;
const ERROR: c_int = -1;
static LOGGER: SlurmLogger = SlurmLogger { prefix: "preempt/tally" };
static FOLLOWER: Mutex<Option<Follower>> = Mutex::new(None);

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
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
        let Some(r) = lock(&FOLLOWER).as_ref().map(|f| f.ranking()) else { return false };
        // SAFETY: live jobs under the caller's job lock.
        let (Some(v), Some(p)) = (unsafe { read_job(preemptee) }, unsafe { read_job(preemptor) }) else { return false };
        let (victim, _) = to_job(&r.config, &v);
        let (preemptor, _) = to_job(&r.config, &p);
        let d = may_preempt(&preemptor, &victim, &r.fs, now());
        log::debug!("job {} may preempt job {}? {:?}", p.job_id, v.job_id, d);
        d.allowed()
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
                let rank = lock(&FOLLOWER).as_ref().map(|f| f.ranking()).and_then(|r| {
                    // SAFETY: a live job under the caller's job lock.
                    let v = unsafe { read_job(job_ptr) }?;
                    Some(victim_rank(&to_job(&r.config, &v).0, &r.fs, now()))
                });
                // SAFETY: as above.
                unsafe { *data.cast::<u32>() = rank.unwrap_or(u32::MAX) };
            }
            _ => return ERROR,
        }
        SUCCESS
    })
}
