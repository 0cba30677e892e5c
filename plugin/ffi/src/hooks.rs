//! The exports whose C prototype differs between the Slurm releases
//! ([`release`](crate::release) has the table): job_submit's
//! `job_modify`, sprio's factors list and its objects, the priority
//! plugin's release hooks and the preempt plugin's answers, each defined
//! per release with `cfg(slurm = …)` through [`export!`](crate::export).

#[cfg(slurm = "22.05")]
use crate::abi::FactorsFilter;
use crate::abi::{xcalloc, Factors};
use slurm_sys::{priority_factors_object_t, List};
use std::ffi::c_void;

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
    let p = xcalloc::<slurm_sys::priority_factors_t>();
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
                req: $crate::hooks::FactorsRequestArg<'_>,
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

/// sprio's answer: a Slurm `List` of `priority_factors_object_t`, each
/// allocated with Slurm's allocator (slurmctld frees them with
/// `slurm_destroy_priority_factors_object`); NULL when there are none.
pub fn factors_list(items: impl IntoIterator<Item = Factors>) -> List {
    // SAFETY: list_create with Slurm's destructor for these objects.
    let out = unsafe { slurm_sys::list_create(Some(slurm_sys::slurm_destroy_priority_factors_object)) };
    for f in items {
        let obj = xcalloc::<priority_factors_object_t>();
        if obj.is_null() {
            continue;
        }
        // SAFETY: freshly allocated, zeroed, exclusively ours until appended.
        unsafe {
            if fill_factors(&mut *obj, &f) {
                slurm_sys::list_append(out, obj.cast());
            } else {
                let mut p = obj.cast::<c_void>();
                slurm_sys::slurm_xfree(&mut p);
            }
        }
    }
    // SAFETY: our own list.
    if unsafe { slurm_sys::list_count(out) } == 0 {
        unsafe { slurm_sys::list_destroy(out) };
        return std::ptr::null_mut();
    }
    out
}

/// The priority plugin's symbols that only some releases ask for: none in
/// 22.05; from 24.11 `priority_p_recover` (priority/basic's boost after a
/// state recovery: Tally sets its own priorities, so no boost, as
/// multifactor with slurmdbd) and `priority_p_thread_start`, which calls
/// `$thread_start()` (see [`THREADS_AT_THREAD_START`](crate::release::THREADS_AT_THREAD_START)).
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
                data: $crate::hooks::PreemptDataArg<'_>,
            ) -> ::std::ffi::c_int;
            fallback || $crate::abi::ERROR;
            {
                if $crate::hooks::PreemptDataArg::preempts_now(data_type) {
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
