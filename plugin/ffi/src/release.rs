//! What differs between the Slurm releases Tally supports (22.05.8 and
//! 24.11.5), in one place. slurm-sys picks the bindings; everything here is
//! `cfg(slurm = …)` (set by this crate's build.rs from slurm-sys's), and no
//! other file of the plugins names a release.
//!
//! | | 22.05 | 24.11 |
//! |---|---|---|
//! | `job_modify` | `(desc, job, uid)` | `(desc, job, uid, char **err_msg)` |
//! | `priority_p_get_priority_factors_list` | `(request, uid)`: the plugin filters by job, user and partition | `(uid)`: sprio filters on its side |
//! | `priority_factors_object_t` | the factors inline; `partition` not freed by Slurm (one interned copy per name) | the factors in an xmalloc'd `priority_factors_t` (`prio_factors`), freed with the object, `partition` too (an `xstrdup` copy) |
//! | priority plugin symbols | six | eight: also `priority_p_recover` and `priority_p_thread_start` |
//! | `List`, `struct job_details`, `bit_test` | as named | `list_t *`, `job_details_t`, `slurm_bit_test` (slurm-sys aliases them) |
//! | `plugin_version` | `0x160508`, exactly | `0x180b05`, exactly |
//! | `scontrol reconfigure` | reloads in place (no `fini`) | restarts slurmctld (`fini`, then a new process) |
//!
//! The job record's fields Tally reads keep their names and meaning; their
//! offsets differ and are asserted in slurm-sys.

use crate::abi::Factors;
#[cfg(slurm = "22.05")]
use crate::abi::FactorsFilter;
use slurm_sys::priority_factors_object_t;

/// The release the plugins are built for (`"22.05"` or `"24.11"`).
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

/// The most partition names [`interned`] keeps (a cluster has a handful;
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

/// As above; 24.11 keeps the factors in their own `priority_factors_t`,
/// which `slurm_destroy_priority_factors_object` frees with the object
/// (`tres_cnt` 0: no TRES arrays), and the partition with it (`xfree`d):
/// an `xstrdup` copy.
///
/// # Safety
/// As above.
#[cfg(slurm = "24.11")]
pub(crate) unsafe fn fill_factors(o: &mut priority_factors_object_t, f: &Factors) -> bool {
    let p = crate::abi::xcalloc::<slurm_sys::priority_factors_t>();
    // SAFETY: NULL or freshly allocated and zeroed, ours until handed over.
    let Some(pf) = (unsafe { p.as_mut() }) else { return false };
    o.job_id = f.job_id;
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

#[cfg(slurm = "24.11")]
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
/// [`FactorsFilter`](crate::abi::FactorsFilter): what sprio asked for in
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

#[cfg(slurm = "24.11")]
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

/// The priority plugin's symbols that only some releases ask for: none in
/// 22.05; in 24.11 `priority_p_recover` (priority/basic's boost after a
/// state recovery: Tally sets its own priorities, so no boost, as
/// multifactor with slurmdbd) and `priority_p_thread_start` (Tally's
/// threads start in `init`, inside slurmctld only, as in 22.05: nothing
/// more to do).
#[cfg(slurm = "22.05")]
#[macro_export]
macro_rules! export_priority_release_hooks {
    () => {};
}

#[cfg(slurm = "24.11")]
#[macro_export]
macro_rules! export_priority_release_hooks {
    () => {
        $crate::export! {
            /// After a state recovery: no priority boost (Tally's own order).
            fn priority_p_recover(prio_boost: u32) -> u32;
            fallback || 0;
            {
                let _ = prio_boost;
                0
            }

            /// Once slurmctld is in control: the threads already run.
            fn priority_p_thread_start();
            fallback || ();
            {}
        }
    };
}
