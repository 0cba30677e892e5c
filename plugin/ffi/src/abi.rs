//! The pointers slurmctld lends an exported function, as typed handles.
//!
//! Each handle is `#[repr(transparent)]` over the C pointer, so it *is* the
//! parameter of the C prototype (same ABI), and carries the call's lifetime
//! so it cannot be kept past the call. Its accessors are safe because of
//! how a handle comes to exist: only slurmctld creates them, by calling an
//! export with the pointer its interface documents (NULL or valid for the
//! call, under the lock the hook's caller holds: `priority_p_set` and the
//! preempt hooks with the job lock, job_submit's with the request owned by
//! the RPC). Nothing here walks `job_list`; see [`crate::host`] for that.

use slurm_sys::{job_desc_msg_t, job_queue_rec_t, job_record_t, JOB_PENDING, JOB_RUNNING, JOB_STATE_BASE, NO_VAL};
use std::ffi::{c_char, c_int, c_void};
use std::marker::PhantomData;
use tally_allocator::priority::SprioColumns;
use tally_engine::submit::SubmitView;
use tally_engine::view::JobView;

use crate::slurm_log::c_text;
use crate::view::{read_job, read_job_desc};

/// `SLURM_SUCCESS`, `SLURM_ERROR`.
pub const SUCCESS: c_int = 0;
pub const ERROR: c_int = -1;

/// A `job_record_t *` lent for the call (NULL or a live job under the
/// caller's job lock).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobArg<'a>(*mut job_record_t, PhantomData<&'a job_record_t>);

impl<'a> JobArg<'a> {
    fn get(self) -> Option<&'a job_record_t> {
        // SAFETY: NULL or a live job for the call ('a), under the caller's job lock.
        unsafe { self.0.as_ref() }
    }

    /// The whole job, copied.
    pub fn view(self) -> Option<JobView> {
        // SAFETY: as in `get`.
        unsafe { read_job(self.0) }
    }

    pub fn id(self) -> Option<u32> {
        self.get().map(|j| j.job_id)
    }

    /// Its priority now (`None`: NULL).
    pub fn priority(self) -> Option<u32> {
        self.get().map(|j| j.priority)
    }

    pub fn is_running(self) -> bool {
        self.get().is_some_and(|j| j.job_state & JOB_STATE_BASE == JOB_RUNNING)
    }

    /// Set a pending job's begin time (`details->begin_time`, Unix
    /// seconds): how priority/tally holds a long job that cannot checkpoint
    /// from its submission (`priority_p_set`, called with the job *write*
    /// lock held). Slurm then leaves it pending (Reason=BeginTime) until
    /// the begin time or the next recalculation's release. Returns whether
    /// it was written (a pending job with details).
    pub fn hold_until(self, begin_s: u64) -> bool {
        // SAFETY: NULL or a live job for the call, under the job write lock
        // `priority_p_set`'s caller holds; `details` is NULL or owned by
        // the job (same lock).
        let Some(j) = (unsafe { self.0.as_mut() }) else { return false };
        if j.job_state & JOB_STATE_BASE != JOB_PENDING {
            return false;
        }
        // SAFETY: as above.
        let Some(d) = (unsafe { j.details.as_mut() }) else { return false };
        d.begin_time = begin_s as _;
        true
    }

    /// The nodes the job excludes (`details->exc_nodes`; `None`: none).
    pub fn excluded_nodes(self) -> Option<String> {
        // SAFETY: as in `get`; `details` is NULL or owned by the job.
        let d = unsafe { self.get()?.details.as_ref()? };
        // SAFETY: NULL or a NUL-terminated string of the job's details.
        unsafe { crate::view::c_string(d.exc_nodes) }
    }
}

/// A `job_desc_msg_t *`: the request of a submission or update, lent for
/// the call.
#[repr(transparent)]
#[derive(Debug, Clone, Copy)]
pub struct DescArg<'a>(*mut job_desc_msg_t, PhantomData<&'a mut job_desc_msg_t>);

impl DescArg<'_> {
    /// The request's comment, time limit, account and GPUs, copied.
    pub fn view(self) -> Option<SubmitView> {
        // SAFETY: NULL or the request for this call.
        unsafe { read_job_desc(self.0) }
    }

    /// Whether the request sets a time limit (an update may not).
    pub fn sets_time_limit(self) -> bool {
        // SAFETY: NULL or the request for this call.
        unsafe { self.0.as_ref() }.is_some_and(|d| d.time_limit != NO_VAL)
    }

    /// Add `names` (comma-separated node names) to the nodes the request
    /// excludes: to its own `exc_nodes` if it sets them, else to `current`
    /// (the job's, for an update; `None` at a submission). Names already
    /// listed are not repeated.
    pub fn exclude_nodes(self, names: &str, current: Option<&str>) {
        // SAFETY: NULL or the request for this call, exclusively ours
        // during it; `exc_nodes` is NULL or xmalloc'd, freed with xfree.
        let Some(d) = (unsafe { self.0.as_mut() }) else { return };
        // SAFETY: NULL or a NUL-terminated string of the request.
        let own = unsafe { crate::view::c_string(d.exc_nodes) };
        let merged = merge_node_lists(own.as_deref().or(current), names);
        let c = c_text(&merged);
        // SAFETY: as above.
        unsafe {
            slurm_sys::slurm_xfree((&mut d.exc_nodes as *mut *mut c_char).cast::<*mut c_void>());
            d.exc_nodes = slurm_sys::xstrdup(c.as_ptr());
        }
    }

    /// Replace the request's comment (Slurm's xmalloc'd string) with an
    /// xstrdup of `text`.
    pub fn set_comment(self, text: &str) {
        // SAFETY: NULL or the request for this call, exclusively ours
        // during it; `comment` is NULL or xmalloc'd, freed with xfree.
        if let Some(d) = unsafe { self.0.as_mut() } {
            let c = c_text(text);
            // SAFETY: as above.
            unsafe {
                slurm_sys::slurm_xfree((&mut d.comment as *mut *mut c_char).cast::<*mut c_void>());
                d.comment = slurm_sys::xstrdup(c.as_ptr());
            }
        }
    }
}

/// `list` (a Slurm hostlist, or nothing) with the comma-separated `names`
/// it does not already list by name appended.
pub fn merge_node_lists(list: Option<&str>, names: &str) -> String {
    let have: Vec<&str> = list.map_or(Vec::new(), |l| l.split(',').map(str::trim).filter(|n| !n.is_empty()).collect());
    let mut out: Vec<String> = list.filter(|l| !l.trim().is_empty()).map(|l| l.trim().to_string()).into_iter().collect();
    out.extend(names.split(',').map(str::trim).filter(|n| !n.is_empty() && !have.contains(n)).map(str::to_string));
    out.join(",")
}

/// `char **err_msg`: where job_submit puts a message for sbatch (freed by
/// Slurm with xfree).
#[repr(transparent)]
#[derive(Debug, Clone, Copy)]
pub struct ErrMsgArg<'a>(*mut *mut c_char, PhantomData<&'a mut *mut c_char>);

impl ErrMsgArg<'_> {
    /// No slot (22.05's `job_modify` has none): a message set goes nowhere.
    pub fn none() -> Self {
        ErrMsgArg(std::ptr::null_mut(), PhantomData)
    }

    /// Hand `text` to sbatch (nothing when Slurm gave no slot).
    pub fn set(self, text: &str) {
        if self.0.is_null() {
            return;
        }
        let c = c_text(text);
        // SAFETY: a non-NULL slot for this call; Slurm frees it with xfree.
        unsafe { *self.0 = slurm_sys::xstrdup(c.as_ptr()) };
    }
}

/// A `job_queue_rec_t *` of the scheduler's queue, lent for the call.
#[repr(transparent)]
#[derive(Debug, Clone, Copy)]
pub struct QueueRecArg<'a>(*mut job_queue_rec_t, PhantomData<&'a job_queue_rec_t>);

impl<'a> QueueRecArg<'a> {
    /// The record's job (`None`: a NULL record).
    pub fn job(self) -> Option<JobArg<'a>> {
        // SAFETY: NULL or a queue record for this call, its job live under the job lock.
        unsafe { self.0.as_ref() }.map(|q| JobArg(q.job_ptr, PhantomData))
    }
}

/// What sprio asked for: `None` in a field = no filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FactorsFilter {
    pub job_ids: Option<Vec<u32>>,
    pub uids: Option<Vec<u32>>,
    pub partitions: Option<Vec<String>>,
}

/// One line of sprio: a pending job and its priority's columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Factors {
    pub job_id: u32,
    pub user_id: u32,
    /// The job's partition (its list, for a job asking for several), for
    /// sprio's PARTITION column.
    pub partition: Option<std::sync::Arc<str>>,
    pub columns: SprioColumns,
}

/// One zeroed `T` from Slurm's allocator (`xmalloc`), for Slurm to free
/// with `xfree`; NULL when out of memory.
pub(crate) fn xcalloc<T>() -> *mut T {
    // SAFETY: xmalloc's own call (xmalloc.h), zeroed, not `try`.
    unsafe {
        slurm_sys::slurm_xcalloc(
            1,
            std::mem::size_of::<T>(),
            true,
            false,
            c"priority_tally".as_ptr(),
            line!() as c_int,
            c"priority_p_get_priority_factors_list".as_ptr(),
        )
    }
    .cast::<T>()
}

/// Values of slurm.conf, from libslurmfull's global `slurm_conf` (loaded
/// before plugins are initialised; read, nothing kept).
pub mod conf {
    /// `PRIVATE_DATA_JOBS` (slurm.h): hide other users' jobs.
    const PRIVATE_DATA_JOBS: u16 = 0x0001;

    /// `StateSaveLocation`.
    pub fn state_save_location() -> Option<String> {
        // SAFETY: the global config; the string is copied.
        unsafe { crate::view::c_string(slurm_sys::slurm_conf.state_save_location) }
    }

    /// `PrivateData=jobs`.
    pub fn private_jobs() -> bool {
        // SAFETY: the global config, one integer read.
        let private = unsafe { slurm_sys::slurm_conf.private_data };
        private & PRIVATE_DATA_JOBS != 0
    }

    /// How long after it started preempting a pending job counts as running:
    /// `KillWait + MessageTimeout` (Slurm kills the victims within it), or
    /// [`tally_engine::engine::DEFAULT_PREEMPT_WINDOW_S`] when both are 0.
    /// The one reading for the priority and preempt plugins.
    pub fn preempt_window_s() -> u64 {
        // SAFETY: the global config, two integers read.
        let (k, m) = unsafe { (slurm_sys::slurm_conf.kill_wait, slurm_sys::slurm_conf.msg_timeout) };
        match u64::from(k) + u64::from(m) {
            0 => tally_engine::engine::DEFAULT_PREEMPT_WINDOW_S,
            w => w,
        }
    }

    /// slurmctld's effective uid (the ledger's owner should be it).
    pub fn euid() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }
}

#[cfg(test)]
mod merge_tests {
    use super::merge_node_lists;

    #[test]
    fn excluded_nodes_are_added_once() {
        assert_eq!(merge_node_lists(None, "gpu07,gpu08"), "gpu07,gpu08");
        assert_eq!(merge_node_lists(Some(""), "gpu07"), "gpu07");
        assert_eq!(merge_node_lists(Some("n[1-3]"), "gpu07,gpu08"), "n[1-3],gpu07,gpu08");
        assert_eq!(merge_node_lists(Some("gpu07,n2"), "gpu07,gpu08"), "gpu07,n2,gpu08", "gpu07 is listed already");
    }
}
