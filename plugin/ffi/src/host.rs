//! The slurmctld-only symbols, found at run time.
//!
//! `job_list`, `last_job_update`, `lock_slurmctld` and `unlock_slurmctld`
//! live in the slurmctld executable. Client tools (sshare, sprio's own
//! process) dlopen the priority plugin too, and rustc links with `-z now`: a
//! direct reference would make the plugin fail to load there. So they are
//! looked up with `dlsym(RTLD_DEFAULT, …)`; if any is missing we are not in
//! slurmctld, and no thread is started.

use crate::view::{job_nodes, job_pointers, read_job_named};
use slurm_sys::{
    job_record_t, lock_level_t, slurmctld_lock_t, slurmctld_only, time_t, List, JOB_PENDING, JOB_STATE_BASE, NO_LOCK, READ_LOCK, WRITE_LOCK,
};
use std::collections::HashMap;
use std::ffi::CStr;
use std::time::{Duration, Instant};
use tally_engine::planner::Placed;
use tally_engine::view::{JobView, Names, RunState};

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
    fn with_jobs<T>(&self, access: Access, f: impl FnOnce(List) -> T) -> T {
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

    /// Tell the scheduler that job data changed (`last_job_update = now`).
    /// Only from [`Host::write_priorities`], under the job write lock.
    fn touch(&self, now: i64) {
        // SAFETY: global time_t of slurmctld, written under the job write lock.
        unsafe { *self.last_job_update = now as time_t };
    }

    /// Copy every job under the job *read* lock, names shared through one
    /// [`Names`]: the jobs, and how long the lock was waited for and held.
    pub fn copy_jobs(&self) -> Copied<JobView> {
        self.copy(|_, view| view)
    }

    /// [`Host::copy_jobs`], with the nodes each running job holds (the
    /// planner thread's copy).
    pub fn copy_placed(&self) -> Copied<Placed> {
        self.copy(|p, view| {
            // SAFETY: a live job under the read lock `copy` holds.
            let nodes = if view.state == RunState::Running { unsafe { job_nodes(p) } } else { Vec::new() };
            Placed { view, nodes }
        })
    }

    fn copy<T>(&self, mut each: impl FnMut(*mut job_record_t, JobView) -> T) -> Copied<T> {
        let asked = Instant::now();
        self.with_jobs(Access::ReadJobs, |list| {
            let locked = Instant::now();
            let mut names = Names::new();
            let mut jobs = Vec::new();
            // SAFETY: job_list under the job read lock; pointers not kept.
            for p in unsafe { job_pointers(list) } {
                // SAFETY: a live job under the lock.
                if let Some(view) = unsafe { read_job_named(p, &mut names) } {
                    jobs.push(each(p, view));
                }
            }
            Copied { jobs, waited: locked.duration_since(asked), held: locked.elapsed() }
        })
    }

    /// Set the priorities in `changes` (job id → priority) under the job
    /// WRITE lock, only where the job is still pending, not held and not
    /// set by an admin, and tell the scheduler: one walk of the job list,
    /// nothing else under the lock. Returns the lock's wait and hold, and
    /// how many were written.
    pub fn write_priorities(&self, changes: &HashMap<u32, u32>, now: u64) -> Written {
        if changes.is_empty() {
            return Written::default();
        }
        let asked = Instant::now();
        self.with_jobs(Access::WriteJobs, |list| {
            let locked = Instant::now();
            let mut count = 0;
            // SAFETY: job_list under the job write lock.
            for p in unsafe { job_pointers(list) } {
                // SAFETY: a live job under the write lock.
                let j = unsafe { &mut *p };
                if let Some(&prio) = changes.get(&j.job_id) {
                    if j.job_state & JOB_STATE_BASE == JOB_PENDING && j.priority != 0 && j.direct_set_prio == 0 {
                        j.priority = prio;
                        count += 1;
                    }
                }
            }
            if count > 0 {
                self.touch(now as i64);
            }
            Written { waited: locked.duration_since(asked), held: locked.elapsed(), count }
        })
    }
}

/// A copy of the job list ([`Host::copy_jobs`]).
#[derive(Debug)]
pub struct Copied<T> {
    pub jobs: Vec<T>,
    /// The job read lock: waited for, then held.
    pub waited: Duration,
    pub held: Duration,
}

/// A write-back of priorities ([`Host::write_priorities`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Written {
    /// The job write lock: waited for, then held.
    pub waited: Duration,
    pub held: Duration,
    /// Priorities written.
    pub count: usize,
}
