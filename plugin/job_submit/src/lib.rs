//! `job_submit/tally`: contracts checked at the door.
//!
//! slurm.conf: `JobSubmitPlugins=tally`. On submit (`job_submit`) and update
//! (`job_modify`) the request's comment, time limit, account and GPU count go
//! through `tally_slurm::submit::check`: a bad contract is refused with a
//! message sbatch prints (`sbatch: error: tally: contract=9h exceeds the 8h
//! maximum …`) and nothing is created; an accepted comment is rewritten in
//! its one spelling, and a warning (a job that cannot checkpoint, longer
//! than any contract, when `max_requeues` > 0) reaches sbatch with the
//! success (`job_submit_user_msg`). The config is followed from disk by a
//! thread (`Follower`), never read on the submit path.
//!
//! Error codes: a bad or missing contract → `ESLURM_INVALID_TIME_VALUE`,
//! longer than the time limit, or not resumable and longer than the
//! contract maximum with `long_jobs = "reject"` → `ESLURM_INVALID_TIME_LIMIT`, allocated in an
//! account without budget → `ESLURM_INVALID_ACCOUNT`, GPUs not a power of
//! two → `ESLURM_INVALID_GRES`. `job_modify` has no message channel in 22.05:
//! the message goes to slurmctld's log and scontrol prints the code's text.

// The exported functions take slurmctld's pointers by the C ABI.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use slurm_sys::{job_desc_msg_t, job_record_t, NO_VAL};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use tally_slurm::follower::{self, Follower};
use tally_slurm::guard::{guard, lock};
use tally_slurm::slurm_log::{c_text, SlurmLogger};
use tally_slurm::submit::{check, check_update, Refusal, SubmitView, UpdateView};
use tally_slurm::view::{read_job, read_job_desc, RunState};

tally_slurm::plugin_identity!("Tally contract checks", "job_submit/tally");

const SUCCESS: c_int = 0;
static LOGGER: SlurmLogger = SlurmLogger { prefix: "job_submit/tally" };
static FOLLOWER: Mutex<Option<Follower>> = Mutex::new(None);

fn code(r: Refusal) -> c_int {
    (match r {
        Refusal::Contract => slurm_sys::ESLURM_INVALID_TIME_VALUE,
        Refusal::TimeLimit => slurm_sys::ESLURM_INVALID_TIME_LIMIT,
        Refusal::Account => slurm_sys::ESLURM_INVALID_ACCOUNT,
        Refusal::Gpus => slurm_sys::ESLURM_INVALID_GRES,
        Refusal::Started => slurm_sys::ESLURM_ACCESS_DENIED,
    }) as c_int
}

#[no_mangle]
pub extern "C" fn init() -> c_int {
    guard("init", || SUCCESS, || {
        follower::install(&FOLLOWER, &LOGGER, None);
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

/// Replace `*slot` (an xmalloc'd C string or NULL) with an xstrdup of `text`.
///
/// # Safety
/// `slot` points to a field Slurm owns and frees with `xfree`.
unsafe fn replace_string(slot: *mut *mut c_char, text: &str) {
    let c = c_text(text);
    // SAFETY: caller's contract; the old string came from Slurm's allocator.
    unsafe {
        slurm_sys::slurm_xfree(slot.cast::<*mut c_void>());
        *slot = slurm_sys::xstrdup(c.as_ptr());
    }
}

/// A submission. On refusal `*err_msg` gets an xstrdup'd message for sbatch.
#[no_mangle]
pub extern "C" fn job_submit(job_desc: *mut job_desc_msg_t, submit_uid: u32, err_msg: *mut *mut c_char) -> c_int {
    // A bug of ours, or no usable config, must not stop users from
    // submitting: accept and log (fail-open; the guard logs a panic).
    let open = || {
        log::error!("job of uid {submit_uid} accepted UNCHECKED (internal error above): its contract was not verified");
        SUCCESS
    };
    guard("job_submit", open, || {
        let Some(f) = lock(&FOLLOWER).as_ref().and_then(|f| f.config()) else {
            log::error!("no usable config: job of uid {submit_uid} accepted unchecked");
            return SUCCESS;
        };
        // SAFETY: the request is valid for this call.
        let Some(view) = (unsafe { read_job_desc(job_desc) }) else { return SUCCESS };
        match check(&f, &view) {
            Ok(accepted) => {
                if let Some(comment) = &accepted.comment {
                    // SAFETY: job_desc->comment is Slurm's xmalloc'd string.
                    unsafe { replace_string(&mut (*job_desc).comment, comment) };
                }
                if let Some(w) = accepted.warning.filter(|_| !err_msg.is_null()) {
                    // Slurm hands a message set on success to sbatch, which
                    // prints it (`job_submit_user_msg`).
                    let c = c_text(&w);
                    // SAFETY: Slurm frees *err_msg with xfree.
                    unsafe { *err_msg = slurm_sys::xstrdup(c.as_ptr()) };
                }
                SUCCESS
            }
            Err(r) => {
                log::info!("refused a job of uid {submit_uid}: {}", r.message);
                if !err_msg.is_null() {
                    let c = c_text(&r.message);
                    // SAFETY: Slurm frees *err_msg with xfree.
                    unsafe { *err_msg = slurm_sys::xstrdup(c.as_ptr()) };
                }
                code(r.refusal)
            }
        }
    })
}

/// An update (`scontrol update job …`): see `submit::check_update` (a
/// started job's contract is fixed; a pending job's new comment, time
/// limit or GPUs are judged like a submission).
#[no_mangle]
pub extern "C" fn job_modify(job_desc: *mut job_desc_msg_t, job_ptr: *mut job_record_t, submit_uid: u32) -> c_int {
    let open = || {
        log::error!("update by uid {submit_uid} accepted UNCHECKED (internal error above)");
        SUCCESS
    };
    guard("job_modify", open, || {
        let Some(config) = lock(&FOLLOWER).as_ref().and_then(|f| f.config()) else {
            log::error!("no usable config: update by uid {submit_uid} accepted unchecked");
            return SUCCESS;
        };
        // SAFETY: request and job are valid for this call (job lock held).
        let (Some(req), Some(job)) = (unsafe { read_job_desc(job_desc) }, unsafe { read_job(job_ptr) }) else {
            return SUCCESS;
        };
        // SAFETY: as above.
        let new_limit = unsafe { (*job_desc).time_limit } != NO_VAL;
        let u = UpdateView {
            req,
            new_limit,
            job: SubmitView { comment: job.comment, account: job.account.as_deref().map(str::to_string), time_limit_s: job.time_limit_s, ..SubmitView::default() },
            pending: job.state == RunState::Pending && job.start_s == 0,
        };
        match check_update(&config, &u) {
            Ok(accepted) => {
                if let (Some(comment), Some(_)) = (&accepted.comment, &u.req.comment) {
                    // SAFETY: job_desc->comment is Slurm's xmalloc'd string.
                    unsafe { replace_string(&mut (*job_desc).comment, comment) };
                }
                if let Some(w) = accepted.warning {
                    log::info!("job update by uid {submit_uid}: {w}");
                }
                SUCCESS
            }
            Err(r) => {
                log::info!("refused an update of job {} by uid {submit_uid}: {}", job.job_id, r.message);
                code(r.refusal)
            }
        }
    })
}
