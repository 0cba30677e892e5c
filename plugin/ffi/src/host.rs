//! The slurmctld-only symbols, found at run time.
//!
//! `job_list`, `last_job_update`, `lock_slurmctld` and `unlock_slurmctld`
//! (and `job_requeue`, and the copy of the node table slurmctld uses) live
//! in the slurmctld executable. Client tools (sshare, sprio's own
//! process) dlopen the priority plugin too, and rustc links with `-z now`: a
//! direct reference would make the plugin fail to load there. So they are
//! looked up with `dlsym(RTLD_DEFAULT, …)`; if any is missing we are not in
//! slurmctld, and no thread is started.

use crate::view::{job_nodes, job_pointers, read_jobs, read_nodes};
use slurm_sys::{
    lock_level_t, node_record_t, slurmctld_lock_t, slurmctld_only, time_t, List, JOB_PENDING, JOB_RUNNING, JOB_STATE_BASE, NO_LOCK, READ_LOCK,
    WRITE_LOCK,
};
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Arc;
use std::time::Instant;
use tally_engine::planner::Placed;
use tally_engine::recalc::{Controller, Copied, Written};
use tally_engine::view::{JobView, Names, PartitionGpus, RunState};

type LockFn = unsafe extern "C" fn(slurmctld_lock_t);

/// Handles on slurmctld's globals. Only exists inside slurmctld (or a fake
/// host that defines the same symbols).
#[derive(Debug, Clone, Copy)]
pub struct Host {
    lock: LockFn,
    unlock: LockFn,
    job_list: *mut List,
    last_job_update: *mut time_t,
    /// The node table and `job_requeue`: found in slurmctld (a fake host
    /// may leave them out; then no node is read and nothing is requeued).
    nodes: Option<(*mut *mut *mut node_record_t, *mut libc::c_int)>,
    requeue: Option<slurmctld_only::JobRequeueFn>,
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
    /// Job write, node write, federation read (as `scontrol requeue`'s RPC).
    Requeue,
}

impl Access {
    fn levels(self) -> slurmctld_lock_t {
        let (job, node, part, fed): (lock_level_t, lock_level_t, lock_level_t, lock_level_t) = match self {
            Access::ReadJobs => (READ_LOCK, READ_LOCK, READ_LOCK, NO_LOCK),
            Access::WriteJobs => (WRITE_LOCK, NO_LOCK, READ_LOCK, NO_LOCK),
            Access::Requeue => (WRITE_LOCK, WRITE_LOCK, NO_LOCK, READ_LOCK),
        };
        // SAFETY: plain integers (lock_level_t); all-zero is NO_LOCK for
        // every lock, including those of releases with more of them.
        let mut levels: slurmctld_lock_t = unsafe { std::mem::zeroed() };
        (levels.conf, levels.job, levels.node, levels.part, levels.fed) = (NO_LOCK, job, node, part, fed);
        levels
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
        let (lock, unlock) =
            unsafe { (std::mem::transmute::<*mut libc::c_void, LockFn>(lock), std::mem::transmute::<*mut libc::c_void, LockFn>(unlock)) };
        let (table, count) = (sym(slurmctld_only::NODE_RECORD_TABLE_PTR), sym(slurmctld_only::NODE_RECORD_COUNT));
        let nodes = (!table.is_null() && !count.is_null()).then(|| (table.cast(), count.cast()));
        let requeue = sym(slurmctld_only::JOB_REQUEUE);
        // SAFETY: slurmctld's requeue function of this release, of the type
        // slurm-sys gives it (`slurmctld_only::JobRequeueFn`, slurmctld.h).
        let requeue = (!requeue.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, slurmctld_only::JobRequeueFn>(requeue) });
        Some(Host { lock, unlock, job_list: job_list.cast(), last_job_update: last.cast(), nodes, requeue })
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

    /// slurmctld's `last_job_update`: the second of the last change to any
    /// job. Read with no lock (one aligned integer, read atomically; a
    /// value a moment old only delays a copy, `arbiter::CopyClock`).
    pub fn job_update(&self) -> i64 {
        // SAFETY: the address of slurmctld's global `time_t`, aligned and
        // alive for the process; read atomically (slurmctld writes it under
        // its job write lock).
        let cell = unsafe { std::sync::atomic::AtomicI64::from_ptr(self.last_job_update.cast::<i64>()) };
        cell.load(std::sync::atomic::Ordering::Relaxed)
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
        self.copy(false, false, |view, _| view)
    }

    /// [`Host::copy_jobs`], with the node table and, for each running job
    /// on a draining node, those nodes (the recalculation thread's copy).
    pub fn copy_jobs_and_nodes(&self) -> Copied<JobView> {
        self.copy(true, false, |view, _| view)
    }

    /// [`Host::copy_jobs`], with the nodes each running job holds (the
    /// planner thread's copy).
    pub fn copy_placed(&self) -> Copied<Placed> {
        self.copy(true, true, |view, nodes| Placed { view, nodes })
    }

    /// The copy: `each` gets every job and, for a running job when
    /// `placed` (or its nodes were read anyway), the node indices it holds,
    /// read once from its bitmap. With the nodes, an exclusive pending job
    /// learns what it will hold per node ([`JobView::set_node_gpus`]).
    fn copy<T>(&self, with_nodes: bool, placed: bool, mut each: impl FnMut(JobView, Vec<u32>) -> T) -> Copied<T> {
        let asked = Instant::now();
        self.with_jobs(Access::ReadJobs, |list| {
            let locked = Instant::now();
            let mut names = Names::new();
            let nodes = match self.nodes.filter(|_| with_nodes) {
                // SAFETY: slurmctld's node table and count, read under the
                // node and partition read locks ReadJobs holds.
                Some((table, count)) => unsafe { read_nodes(*table, *count, &mut names) },
                None => Vec::new(),
            };
            // A node's one GPU type, by index (`None`: untyped or mixed).
            let mut node_type: Vec<Option<Arc<str>>> = vec![None; nodes.last().map_or(0, |n| n.index as usize + 1)];
            for n in &nodes {
                if let [(Some(t), _)] = n.gpus.as_slice() {
                    node_type[n.index as usize] = Some(t.clone());
                }
            }
            let typed = node_type.iter().any(Option::is_some);
            // What an exclusive pending job will hold per node: the most
            // GPUs of a node of its partitions.
            let whole = PartitionGpus::new(nodes.iter().map(|n| (n.partitions.as_slice(), n.gpu_total())));
            let draining: Vec<Option<Arc<str>>> = if nodes.iter().any(|n| n.state.drain) {
                let mut by_index = vec![None; nodes.last().map_or(0, |n| n.index as usize + 1)];
                for n in nodes.iter().filter(|n| n.state.drain) {
                    by_index[n.index as usize] = Some(n.name.clone());
                }
                by_index
            } else {
                Vec::new()
            };
            let mut jobs = Vec::new();
            let mut on_draining = Vec::new();
            // SAFETY: job_list under the job read lock; pointers not kept.
            let pointers = unsafe { job_pointers(list) };
            let each_job = |p: *mut slurm_sys::job_record_t, mut view: JobView| {
                if !whole.is_empty() {
                    view.set_node_gpus(&whole);
                }
                let running = view.state == RunState::Running;
                let untyped = typed && view.gpu_type.is_none() && view.gpus > 0;
                let held = if running && (placed || untyped || !draining.is_empty()) {
                    // SAFETY: a live job under the lock.
                    unsafe { job_nodes(p) }
                } else {
                    Vec::new()
                };
                // A running job of no known type has its nodes' type,
                // when they all have the same one.
                if running && untyped {
                    let mut types = held.iter().map(|&i| node_type.get(i as usize).and_then(Option::as_ref));
                    if let Some(Some(first)) = types.next() {
                        if types.all(|t| t == Some(first)) {
                            view.gpu_type = Some(first.clone());
                        }
                    }
                }
                if !draining.is_empty() && running {
                    let on: Vec<Arc<str>> = held.iter().filter_map(|&i| draining.get(i as usize).cloned().flatten()).collect();
                    if !on.is_empty() {
                        on_draining.push((view.job_id, on));
                    }
                }
                jobs.push(each(view, held));
            };
            // SAFETY: live jobs under the lock.
            unsafe { read_jobs(&pointers, &mut names, each_job) };
            Copied { jobs, nodes, on_draining, waited: locked.duration_since(asked), held: locked.elapsed() }
        })
    }

    /// Requeue each of `ids` that is still running, as `scontrol requeue`
    /// does (slurmctld's `job_requeue` as SlurmUser, under the job and node
    /// write locks): one lock hold for all of them. Returns each job's
    /// Slurm return code (0 = requeued); empty without `job_requeue`.
    pub fn requeue(&self, ids: &[u32]) -> Vec<(u32, i32)> {
        let Some(requeue) = self.requeue.filter(|_| !ids.is_empty()) else { return Vec::new() };
        // SAFETY: the global config, one integer read.
        let uid = unsafe { slurm_sys::slurm_conf.slurm_user_id };
        self.with_jobs(Access::Requeue, |list| {
            let wanted: std::collections::HashSet<u32> = ids.iter().copied().collect();
            // SAFETY: job_list under the job write lock.
            let running: Vec<(u32, *mut slurm_sys::job_record_t)> = unsafe { job_pointers(list) }
                .into_iter()
                // SAFETY: live jobs under the lock.
                .filter(|&p| unsafe { p.as_ref() }.is_some_and(|j| j.job_state & JOB_STATE_BASE == JOB_RUNNING && wanted.contains(&j.job_id)))
                // SAFETY: as above.
                .map(|p| (unsafe { (*p).job_id }, p))
                .collect();
            running
                .into_iter()
                // SAFETY: slurmctld's requeue with the locks its RPC takes,
                // on a live running job.
                .map(|(id, job)| (id, unsafe { crate::release::requeue(requeue, uid, job) }))
                .collect()
        })
    }

    /// Set the priorities in `changes` (job id → priority) under the job
    /// WRITE lock, only where the job is still pending, not held and not
    /// set by an admin, and the begin times in `begins` (job id → Unix
    /// seconds: Tally's hold of a long job that cannot checkpoint, or its
    /// release) where the job is still pending; then tell the scheduler: one
    /// walk of the job list, nothing else under the lock. Returns the lock's
    /// wait and hold, and how many were written.
    pub fn write_priorities(&self, changes: &HashMap<u32, u32>, begins: &HashMap<u32, u64>, now: u64) -> Written {
        if changes.is_empty() && begins.is_empty() {
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
                if let Some(&begin) = begins.get(&j.job_id) {
                    // SAFETY: `details` is NULL or owned by the job (same lock).
                    if let Some(d) = unsafe { j.details.as_mut() } {
                        if j.job_state & JOB_STATE_BASE == JOB_PENDING {
                            d.begin_time = begin as _;
                            count += 1;
                        }
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

/// What priority/tally's threads ask of slurmctld, through the methods
/// above.
impl Controller for Host {
    fn copy_jobs_and_nodes(&self) -> Copied<JobView> {
        Host::copy_jobs_and_nodes(self)
    }

    fn copy_placed(&self) -> Copied<Placed> {
        Host::copy_placed(self)
    }

    fn write_priorities(&self, changes: &HashMap<u32, u32>, begins: &HashMap<u32, u64>, now: u64) -> Written {
        Host::write_priorities(self, changes, begins, now)
    }

    fn requeue(&self, ids: &[u32]) -> Vec<(u32, i32)> {
        Host::requeue(self, ids)
    }
}
