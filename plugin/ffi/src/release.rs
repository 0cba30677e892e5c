//! What differs between the Slurm releases Tally supports (22.05.8,
//! 24.11.5, 25.11.7 and 26.05.3), in one place. slurm-sys picks the
//! bindings; everything here is `cfg(slurm = …)` (set by this crate's
//! build.rs from slurm-sys's), and no other file of the plugins names a
//! release.
//!
//! | | 22.05 | 24.11 | 25.11 | 26.05 |
//! |---|---|---|---|---|
//! | `job_modify` | `(desc, job, uid)` | `(desc, job, uid, char **err_msg)` | as 24.11 | as 24.11 |
//! | `priority_p_get_priority_factors_list` | `(request, uid)`: the plugin filters by job, user and partition | `(uid)`: sprio filters on its side | as 24.11 | as 24.11 |
//! | `priority_factors_object_t` | the factors inline; `partition` not freed by Slurm (one interned copy per name) | the factors in an xmalloc'd `priority_factors_t` (`prio_factors`), freed with the object, `partition` too (an `xstrdup` copy) | as 24.11 | as 24.11, the job's id in a `slurm_step_id_t step_id` |
//! | priority plugin symbols | six | eight: also `priority_p_recover` and `priority_p_thread_start` | seven (`priority_p_calc_fs_factor` no longer asked; exported, unused) | as 25.11 |
//! | preempt plugin's answers | `preempt_p_get_data(job, kind, void *data)`: ENABLED, MODE, PRIO, GRACE_TIME | as 22.05 | `preempt_p_get_grace_time`, `preempt_p_get_mode`, `preempt_p_get_prio`, each `(job)` | as 25.11 |
//! | slurmctld's requeue (host drain) | `job_requeue(uid, job_id, msg, preempt, flags)` | as 22.05 | `job_requeue_internal(uid, job_ptr, preempt, flags)` | as 25.11 |
//! | `slurmctld_lock_t` | five locks | five | five | six (`select_node`; Tally leaves it unlocked) |
//! | `List`, `struct job_details`, `bit_test` | as named | `list_t *`, `job_details_t`, `slurm_bit_test` (slurm-sys aliases them) | as 24.11 | as 24.11 |
//! | `plugin_version` | `0x160508`, exactly | `0x180b05`, exactly | `0x190b07`, exactly | `0x1a0503`, exactly |
//! | a backup taking over (`run_backup`) | loads the priority plugin under the config write lock, its jobs then recovered | loads it (`init`) before it recovers its jobs, no lock held; `priority_p_thread_start` once they are: Tally's threads start there ([`THREADS_AT_THREAD_START`]) | as 24.11 | as 24.11 |
//! | `scontrol reconfigure` | reloads in place (no `fini`) | restarts slurmctld (`fini`, then a new process) | as 24.11 | as 24.11 |
//! | whole nodes (`job_details.whole_node`, [`whole_node`]) | a value: `1` = `WHOLE_NODE_REQUIRED` (`--exclusive`, or set by a partition's `OverSubscribe=EXCLUSIVE` when the job is scheduled), `2` user, `3` mcs | flags: the bit `WHOLE_NODE_REQUIRED` (`0x01`; user `0x02`, mcs `0x04`, topo `0x08`) | as 24.11 | as 24.11 |
//!
//! The job record's fields Tally reads keep their names and meaning; their
//! offsets differ and are asserted in slurm-sys.

use crate::abi::Factors;
#[cfg(slurm = "22.05")]
use crate::abi::FactorsFilter;
use slurm_sys::priority_factors_object_t;

/// The release the plugins are built for (`"22.05"`, `"24.11"`, `"25.11"`
/// or `"26.05"`).
pub const RELEASE: &str = slurm_sys::RELEASE;

/// sprio's columns into the fields both releases name alike (the
/// object's own in 22.05, its `priority_factors_t`'s in 24.11).
macro_rules! write_columns {
    ($to:expr, $c:expr) => {{
        let (to, c) = ($to, $c);
        to.priority_site = slurm_sys::NICE_OFFSET + c.site;
        to.priority_js = c.jobsize;
        to.priority_part = c.partition;
        to.priority_fs = c.fairshare;
        to.priority_qos = c.qos;
        to.nice = (i64::from(slurm_sys::NICE_OFFSET) + c.nice) as u32;
        to.priority_age = c.age;
    }};
}

/// Write one sprio line's factors into a zeroed object Slurm will free.
/// `false`: no memory (the object is to be dropped).
///
/// # Safety
/// `o` was just allocated zeroed with `slurm_xcalloc` and is exclusively ours.
#[cfg(slurm = "22.05")]
pub(crate) unsafe fn fill_factors(o: &mut priority_factors_object_t, f: &Factors) -> bool {
    o.job_id = f.job_id;
    o.user_id = f.user_id;
    // Not the job's own string: slurmctld packs this list after the job
    // lock is released, and that string (or the job) can be freed meanwhile
    // (`scontrol update job … Partition=`, a purge). The destructor does not
    // free it either, so a copy per line would leak on every sprio: one
    // copy per partition name, kept for the process's life.
    o.partition = f.partition.as_deref().map_or(std::ptr::null_mut(), interned);
    write_columns!(o, f.columns);
    true
}

/// The most partition names `interned` keeps (a cluster has a handful;
/// past this, PARTITION is left empty rather than memory grown).
#[cfg(slurm = "22.05")]
pub const MAX_INTERNED: usize = 4096;

/// One C copy of `name` for the life of the process (NULL past
/// [`MAX_INTERNED`] names): what 22.05 neither frees nor copies.
#[cfg(slurm = "22.05")]
fn interned(name: &str) -> *mut std::ffi::c_char {
    use std::collections::HashMap;
    use std::sync::Mutex;
    // The addresses of leaked, never freed `CString`s.
    static NAMES: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    let names = names.get_or_insert_with(HashMap::new);
    if let Some(&p) = names.get(name) {
        return p as *mut std::ffi::c_char;
    }
    if names.len() >= MAX_INTERNED {
        return std::ptr::null_mut();
    }
    let p = Box::leak(crate::slurm_log::c_text(name).into_boxed_c_str()).as_ptr() as *mut std::ffi::c_char;
    names.insert(name.to_string(), p as usize);
    p
}

/// As above; 24.11 and later keep the factors in their own
/// `priority_factors_t`, which `slurm_destroy_priority_factors_object`
/// frees with the object (`tres_cnt` 0: no TRES arrays), and the partition
/// with it (`xfree`d): an `xstrdup` copy.
///
/// # Safety
/// As above.
#[cfg(not(slurm = "22.05"))]
pub(crate) unsafe fn fill_factors(o: &mut priority_factors_object_t, f: &Factors) -> bool {
    let p = crate::abi::xcalloc::<slurm_sys::priority_factors_t>();
    // SAFETY: NULL or freshly allocated and zeroed, ours until handed over.
    let Some(pf) = (unsafe { p.as_mut() }) else { return false };
    set_job_id(o, f.job_id);
    o.user_id = f.user_id;
    if let Some(part) = f.partition.as_deref() {
        let c = crate::slurm_log::c_text(part);
        // SAFETY: a C string for the call; Slurm frees the copy with the object.
        o.partition = unsafe { slurm_sys::xstrdup(c.as_ptr()) };
    }
    write_columns!(pf, f.columns);
    o.prio_factors = p;
    true
}

/// The job's id in sprio's object: its own field until 25.11.
#[cfg(any(slurm = "24.11", slurm = "25.11"))]
fn set_job_id(o: &mut priority_factors_object_t, job_id: u32) {
    o.job_id = job_id;
}

/// 26.05 names a job by a `slurm_step_id_t` (sprio prints its `job_id`):
/// the job itself, no step (`NO_VAL`), no het component (`NO_VAL`), no
/// sluid (0: sprio then shows the plain id).
#[cfg(slurm = "26.05")]
fn set_job_id(o: &mut priority_factors_object_t, job_id: u32) {
    o.step_id = slurm_sys::slurm_step_id_t { sluid: 0, job_id, step_het_comp: slurm_sys::NO_VAL, step_id: slurm_sys::NO_VAL };
}

/// Define job_submit's `job_modify` with the release's prototype. The body
/// sees `$err` as an [`ErrMsgArg`](crate::abi::ErrMsgArg) in both: 22.05
/// has no slot, so a message set there goes nowhere.
#[cfg(slurm = "22.05")]
#[macro_export]
macro_rules! export_job_modify {
    ($(#[$meta:meta])* fn job_modify($d:ident, $j:ident, $u:ident, $e:ident); fallback $fb:expr; $body:block) => {
        $crate::export! {
            $(#[$meta])*
            fn job_modify($d: $crate::abi::DescArg<'_>, $j: $crate::abi::JobArg<'_>, $u: u32) -> ::std::ffi::c_int;
            fallback $fb;
            { let $e = $crate::abi::ErrMsgArg::none(); $body }
        }
    };
}

#[cfg(not(slurm = "22.05"))]
#[macro_export]
macro_rules! export_job_modify {
    ($(#[$meta:meta])* fn job_modify($d:ident, $j:ident, $u:ident, $e:ident); fallback $fb:expr; $body:block) => {
        $crate::export! {
            $(#[$meta])*
            fn job_modify(
                $d: $crate::abi::DescArg<'_>,
                $j: $crate::abi::JobArg<'_>,
                $u: u32,
                $e: $crate::abi::ErrMsgArg<'_>,
            ) -> ::std::ffi::c_int;
            fallback $fb;
            $body
        }
    };
}

/// sprio's request (`priority_factors_request_msg_t *`, 22.05 only), lent
/// for the call, as the handles of [`abi`](crate::abi) are.
#[cfg(slurm = "22.05")]
#[repr(transparent)]
#[derive(Debug, Clone, Copy)]
pub struct FactorsRequestArg<'a>(
    *mut slurm_sys::priority_factors_request_msg_t,
    std::marker::PhantomData<&'a slurm_sys::priority_factors_request_msg_t>,
);

#[cfg(slurm = "22.05")]
impl FactorsRequestArg<'_> {
    pub fn filter(self) -> FactorsFilter {
        // SAFETY: NULL or a valid request for this call.
        let Some(q) = (unsafe { self.0.as_ref() }) else { return FactorsFilter::default() };
        // SAFETY: `partitions` is NULL or a C string owned by the request.
        let partitions = unsafe { crate::view::c_string(q.partitions) }.map(|s| s.split(',').map(str::to_string).collect());
        // SAFETY: the request's lists of uint32_t *, NULL or valid.
        unsafe { FactorsFilter { job_ids: u32_list(q.job_id_list), uids: u32_list(q.uid_list), partitions } }
    }
}

/// The `uint32_t *` items of a request filter list; `None` = no filter.
///
/// # Safety
/// `list` is NULL or a `List` of `uint32_t *` valid for the call.
#[cfg(slurm = "22.05")]
unsafe fn u32_list(list: slurm_sys::List) -> Option<Vec<u32>> {
    if list.is_null() {
        return None;
    }
    let mut out = Vec::new();
    // SAFETY: caller's contract; the iterator is released here.
    unsafe {
        let it = slurm_sys::list_iterator_create(list);
        loop {
            let p = slurm_sys::list_next(it).cast::<u32>();
            if p.is_null() {
                break;
            }
            out.push(*p);
        }
        slurm_sys::list_iterator_destroy(it);
    }
    Some(out)
}

/// Define `priority_p_get_priority_factors_list` with the release's
/// prototype. The body sees `$filter` (a
/// [`crate::abi::FactorsFilter`]: what sprio asked for in
/// 22.05, no filter in 24.11, where sprio filters itself) and `$uid`.
#[cfg(slurm = "22.05")]
#[macro_export]
macro_rules! export_factors_list {
    ($(#[$meta:meta])* fn priority_p_get_priority_factors_list($f:ident, $u:ident); fallback $fb:expr; $body:block) => {
        $crate::export! {
            $(#[$meta])*
            fn priority_p_get_priority_factors_list(
                req: $crate::release::FactorsRequestArg<'_>,
                $u: $crate::libc::uid_t,
            ) -> $crate::slurm_sys::List;
            fallback $fb;
            { let $f = req.filter(); $body }
        }
    };
}

#[cfg(not(slurm = "22.05"))]
#[macro_export]
macro_rules! export_factors_list {
    ($(#[$meta:meta])* fn priority_p_get_priority_factors_list($f:ident, $u:ident); fallback $fb:expr; $body:block) => {
        $crate::export! {
            $(#[$meta])*
            fn priority_p_get_priority_factors_list($u: $crate::libc::uid_t) -> $crate::slurm_sys::List;
            fallback $fb;
            { let $f = $crate::abi::FactorsFilter::default(); $body }
        }
    };
}

/// Whether slurmctld calls `priority_p_thread_start` once it has recovered
/// its state (24.11 on): the priority plugin's threads start there. Before
/// (22.05) they start in `init`, which slurmctld calls with its jobs loaded
/// or under its config write lock (`read_slurm_conf`'s first
/// `priority_g_set` loads the plugin). From 24.11 a backup slurmctld taking
/// over calls `init` before it recovers the jobs, with no lock held
/// (`run_backup`): a thread started there can walk the empty `job_list`.
#[cfg(slurm = "22.05")]
pub const THREADS_AT_THREAD_START: bool = false;
#[cfg(not(slurm = "22.05"))]
pub const THREADS_AT_THREAD_START: bool = true;

/// The priority plugin's symbols that only some releases ask for: none in
/// 22.05; from 24.11 `priority_p_recover` (priority/basic's boost after a
/// state recovery: Tally sets its own priorities, so no boost, as
/// multifactor with slurmdbd) and `priority_p_thread_start`, which calls
/// `$thread_start()` (see [`THREADS_AT_THREAD_START`]).
#[cfg(slurm = "22.05")]
#[macro_export]
macro_rules! export_priority_release_hooks {
    (thread_start: $thread_start:path) => {
        const _: fn() = $thread_start;
    };
}

#[cfg(not(slurm = "22.05"))]
#[macro_export]
macro_rules! export_priority_release_hooks {
    (thread_start: $thread_start:path) => {
        $crate::export! {
            /// After a state recovery: no priority boost (Tally's own order).
            fn priority_p_recover(prio_boost: u32) -> u32;
            fallback || 0;
            {
                let _ = prio_boost;
                0
            }

            /// slurmctld is in control, its jobs recovered: start the threads.
            fn priority_p_thread_start();
            fallback || ();
            {
                $thread_start()
            }
        }
    };
}

/// preempt/tally's answers to what Slurm asks of a preempt plugin about a
/// job: it preempts by requeue, with no grace time, victims in
/// `$prio(job)` order (lowest first); Slurm asks the grace time exactly
/// when it preempts a job (`_job_check_grace_internal`, under
/// `slurm_job_preempt`), the one moment a preempt plugin learns that its
/// answer was acted on: `$grace(job)` is called then. Until 24.11 one
/// `preempt_p_get_data(job, kind, data)` answers them all (ENABLED → true,
/// an error for a kind it does not know or no slot); from 25.11 one
/// function each.
#[cfg(any(slurm = "22.05", slurm = "24.11"))]
#[macro_export]
macro_rules! export_preempt_answers {
    (grace: $grace:path, prio: $prio:path) => {
        $crate::export! {
            /// ENABLED → true, MODE → requeue, PRIO → the victim rank
            /// (lowest preempted first), GRACE_TIME → 0 s (and the run is
            /// noted: Slurm asks it as it preempts the job); an error on a panic.
            fn preempt_p_get_data(
                job: $crate::abi::JobArg<'_>,
                data_type: $crate::slurm_sys::slurm_preempt_data_type_t,
                data: $crate::release::PreemptDataArg<'_>,
            ) -> ::std::ffi::c_int;
            fallback || $crate::abi::ERROR;
            {
                if $crate::release::PreemptDataArg::preempts_now(data_type) {
                    $grace(job);
                }
                data.answer(data_type, || $prio(job))
            }
        }
    };
}

#[cfg(not(any(slurm = "22.05", slurm = "24.11")))]
#[macro_export]
macro_rules! export_preempt_answers {
    (grace: $grace:path, prio: $prio:path) => {
        $crate::export! {
            /// 0 s (and the run is noted: Slurm asks it as it preempts the job).
            fn preempt_p_get_grace_time(job: $crate::abi::JobArg<'_>) -> u32;
            fallback || 0;
            {
                $grace(job);
                0
            }

            /// Requeue.
            fn preempt_p_get_mode(job: $crate::abi::JobArg<'_>) -> u16;
            fallback || $crate::slurm_sys::PREEMPT_MODE_REQUEUE;
            {
                let _ = job;
                $crate::slurm_sys::PREEMPT_MODE_REQUEUE
            }

            /// The victim rank (lowest preempted first); last on a panic.
            fn preempt_p_get_prio(job: $crate::abi::JobArg<'_>) -> u32;
            fallback || u32::MAX;
            {
                $prio(job)
            }
        }
    };
}

/// `void *data` of `preempt_p_get_data` (until 24.11): its type depends on
/// the request.
#[cfg(any(slurm = "22.05", slurm = "24.11"))]
#[repr(transparent)]
#[derive(Debug, Clone, Copy)]
pub struct PreemptDataArg<'a>(*mut std::ffi::c_void, std::marker::PhantomData<&'a mut std::ffi::c_void>);

#[cfg(any(slurm = "22.05", slurm = "24.11"))]
impl PreemptDataArg<'_> {
    /// Is this the request Slurm makes exactly as it preempts the job?
    pub fn preempts_now(kind: slurm_sys::slurm_preempt_data_type_t) -> bool {
        kind == slurm_sys::PREEMPT_DATA_GRACE_TIME
    }

    /// Answer `kind`: ENABLED → `bool` true, MODE → `u16` requeue,
    /// GRACE_TIME → `u32` 0, PRIO → `u32` `prio()`. Any other kind, or no
    /// slot: an error.
    pub fn answer(self, kind: slurm_sys::slurm_preempt_data_type_t, prio: impl FnOnce() -> u32) -> std::ffi::c_int {
        use slurm_sys::{PREEMPT_DATA_ENABLED, PREEMPT_DATA_GRACE_TIME, PREEMPT_DATA_MODE, PREEMPT_DATA_PRIO, PREEMPT_MODE_REQUEUE};
        if self.0.is_null() {
            return crate::abi::ERROR;
        }
        match kind {
            // SAFETY (all writes): `data` points to the type Slurm documents for the request.
            PREEMPT_DATA_ENABLED => unsafe { *self.0.cast::<bool>() = true },
            PREEMPT_DATA_MODE => unsafe { *self.0.cast::<u16>() = PREEMPT_MODE_REQUEUE },
            PREEMPT_DATA_GRACE_TIME => unsafe { *self.0.cast::<u32>() = 0 },
            PREEMPT_DATA_PRIO => {
                let p = prio();
                // SAFETY: as above.
                unsafe { *self.0.cast::<u32>() = p };
            }
            _ => return crate::abi::ERROR,
        }
        crate::abi::SUCCESS
    }
}

/// Requeue one running job with slurmctld's requeue function (`f`, looked
/// up by [`slurm_sys::slurmctld_only::JOB_REQUEUE`]) as `scontrol requeue`
/// does: as SlurmUser `uid`, no message to answer, not a preemption. Until
/// 24.11 by job id, from 25.11 by record.
///
/// # Safety
/// Inside slurmctld, with the job and node write locks and the federation
/// read lock held; `job` is a live job record of `job_list`.
pub(crate) unsafe fn requeue(
    f: slurm_sys::slurmctld_only::JobRequeueFn,
    uid: slurm_sys::uid_t,
    job: *mut slurm_sys::job_record_t,
) -> std::ffi::c_int {
    #[cfg(any(slurm = "22.05", slurm = "24.11"))]
    // SAFETY: caller's contract; the id read from the live record.
    return unsafe { f(uid, (*job).job_id, std::ptr::null_mut(), false, 0) };
    #[cfg(not(any(slurm = "22.05", slurm = "24.11")))]
    // SAFETY: caller's contract.
    return unsafe { f(uid, job, false, 0) };
}

/// Does `details->whole_node` give the job whole nodes (and so every GPU
/// of each: Slurm's `gres_ctld_job_alloc_whole_node` (22.05),
/// `gres_stepmgr_job_alloc_whole_node` (24.11 and later))? Until 24.11 a
/// value, `WHOLE_NODE_MCS` being 3 (so not a bit test); from 24.11 flags,
/// tested by the bit as cons_tres tests it.
pub fn whole_node(word: u8) -> bool {
    #[cfg(slurm = "22.05")]
    return u32::from(word) == slurm_sys::WHOLE_NODE_REQUIRED;
    #[cfg(not(slurm = "22.05"))]
    return u32::from(word) & slurm_sys::WHOLE_NODE_REQUIRED != 0;
}
