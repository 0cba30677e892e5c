//! The slurmctld-only symbols, found at run time.
//!
//! `job_list`, `last_job_update`, `lock_slurmctld` and `unlock_slurmctld`
//! live in the slurmctld executable. Client tools (sshare, sprio's own
//! process) dlopen the priority plugin too, and rustc links with `-z now`: a
//! direct reference would make the plugin fail to load there. So they are
//! looked up with `dlsym(RTLD_DEFAULT, …)`; if any is missing we are not in
//! slurmctld, and no thread is started.

use slurm_sys::{lock_level_t, slurmctld_lock_t, slurmctld_only, time_t, List, NO_LOCK, READ_LOCK, WRITE_LOCK};
use std::ffi::CStr;

type LockFn = unsafe extern "C" fn(slurmctld_lock_t);

/// Handles on slurmctld's globals. Only exists inside slurmctld (or a fake
/// host that defines the same symbols).
#[derive(Debug, Clone, Copy)]
pub struct Host {
    lock: LockFn,
    unlock: LockFn,
    job_list: *mut List,
    last_job_update: *mut time_t,
}

// SAFETY: the pointers are addresses of process-wide globals of slurmctld;
// they are only dereferenced while holding slurmctld's job lock (see `with_jobs`).
unsafe impl Send for Host {}
unsafe impl Sync for Host {}

fn sym(name: &CStr) -> *mut libc::c_void {
    // SAFETY: dlsym only reads; the name is NUL-terminated.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// Which of slurmctld's locks to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Job read, node read, partition read (as multifactor's sprio call).
    ReadJobs,
    /// Job write, partition read (as multifactor's decay thread).
    WriteJobs,
}

impl Access {
    fn levels(self) -> slurmctld_lock_t {
        let (job, node, part): (lock_level_t, lock_level_t, lock_level_t) = match self {
            Access::ReadJobs => (READ_LOCK, READ_LOCK, READ_LOCK),
            Access::WriteJobs => (WRITE_LOCK, NO_LOCK, READ_LOCK),
        };
        slurmctld_lock_t { conf: NO_LOCK, job, node, part, fed: NO_LOCK }
    }
}

impl Host {
    /// `Some` inside slurmctld, `None` in client tools.
    pub fn lookup() -> Option<Host> {
        let lock = sym(slurmctld_only::LOCK_SLURMCTLD);
        let unlock = sym(slurmctld_only::UNLOCK_SLURMCTLD);
        let job_list = sym(slurmctld_only::JOB_LIST);
        let last = sym(slurmctld_only::LAST_JOB_UPDATE);
        if lock.is_null() || unlock.is_null() || job_list.is_null() || last.is_null() {
            return None;
        }
        // SAFETY: these are slurmctld's `void lock_slurmctld(slurmctld_lock_t)`
        // and `void unlock_slurmctld(slurmctld_lock_t)` (slurmctld/locks.h).
        let (lock, unlock) = unsafe {
            (std::mem::transmute::<*mut libc::c_void, LockFn>(lock), std::mem::transmute::<*mut libc::c_void, LockFn>(unlock))
        };
        Some(Host { lock, unlock, job_list: job_list.cast(), last_job_update: last.cast() })
    }

    /// Run `f` with slurmctld's lock held and the current `job_list`
    /// (possibly NULL early in start-up). The lock is released even if `f`
    /// panics (the panic then continues to the caller's guard).
    pub fn with_jobs<T>(&self, access: Access, f: impl FnOnce(List) -> T) -> T {
        struct Unlock<'a>(&'a Host, slurmctld_lock_t);
        impl Drop for Unlock<'_> {
            fn drop(&mut self) {
                // SAFETY: paired with the lock_slurmctld below, same levels.
                unsafe { (self.0.unlock)(self.1) }
            }
        }
        let levels = access.levels();
        // SAFETY: slurmctld's lock function; levels are a valid lock set.
        unsafe { (self.lock)(levels) };
        let _unlock = Unlock(self, levels);
        // SAFETY: job_list is a global List*; read under the job lock.
        let list = unsafe { *self.job_list };
        f(list)
    }

    /// The current `job_list` and `last_job_update`, read without taking the
    /// lock.
    ///
    /// # Safety
    /// The caller holds slurmctld's job lock (read or write): a plugin
    /// function slurmctld calls from its scheduler (`preempt_p_preemptable`).
    pub unsafe fn jobs_held(&self) -> (List, i64) {
        // SAFETY: globals of slurmctld, stable while the caller holds the job lock.
        unsafe { (*self.job_list, *self.last_job_update) }
    }

    /// Tell the scheduler that job data changed (`last_job_update = now`).
    /// Call with the job write lock held.
    pub fn touch(&self, now: i64) {
        // SAFETY: global time_t of slurmctld, written under the job write lock.
        unsafe { *self.last_job_update = now as time_t };
    }
}

/// How long after it started preempting a pending job counts as running:
/// slurm.conf's `KillWait + MessageTimeout` (Slurm kills the victims within
/// it), or [`crate::engine::DEFAULT_PREEMPT_WINDOW_S`] when both are 0.
/// The one reading for the priority and preempt plugins.
pub fn preempt_window_s() -> u64 {
    // SAFETY: libslurmfull's global config, loaded before plugins are
    // initialised; two integers read, nothing kept.
    let (k, m) = unsafe { (slurm_sys::slurm_conf.kill_wait, slurm_sys::slurm_conf.msg_timeout) };
    match u64::from(k) + u64::from(m) {
        0 => crate::engine::DEFAULT_PREEMPT_WINDOW_S,
        w => w,
    }
}
