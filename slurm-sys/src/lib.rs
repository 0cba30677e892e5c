//! Raw bindings to the slurmctld-internal types and functions that Tally's
//! Slurm plugins (priority, preempt, job_submit) use, for four Slurm
//! releases, x86-64:
//!
//! | release | Debian | bindings | `cfg` |
//! |---|---|---|---|
//! | **22.05.8** | 12, `22.05.8-4+deb12u3` | `src/bindings/v22_05.rs` | `slurm = "22.05"` |
//! | **24.11.5** | 13, `24.11.5-4+deb13u1` (generated from its `.orig.tar.gz`, Debian's patches not applied) | `src/bindings/v24_11.rs` | `slurm = "24.11"` |
//! | **25.11.7** | — (SchedMD's release tarball, tag `slurm-25-11-7-1`) | `src/bindings/v25_11.rs` | `slurm = "25.11"` |
//! | **26.05.3** | — (SchedMD's release tarball, tag `slurm-26-05-3-1`) | `src/bindings/v26_05.rs` | `slurm = "26.05"` |
//!
//! `build.rs` picks the one file whose `SLURM_VERSION_NUMBER` equals the
//! installed `slurm/slurm_version.h` (22.05 when no header is found), sets
//! the `cfg` above for this crate and hands the release to dependent build
//! scripts (`links = "slurm"`, `DEP_SLURM_RELEASE`). [`RELEASE`] names it.
//! The renamed types of 24.11 and later are exported under their 22.05
//! names as well (`List`, `ListIterator`, `job_details`, `bit_test`); every other
//! difference between the releases is the plugins' business
//! (`plugin/ffi/src/release.rs`).
//!
//! **Bindings only, no logic.** Everything here is `bindgen` output (the
//! release's file in `src/bindings/`, checked in) plus compile-time layout
//! asserts per release and the names of the slurmctld-only symbols. Safe
//! wrappers, the panic guard and the logging glue belong to the plugin crate
//! above this one.
//!
//! # What is here
//!
//! * Records with their full C layout: [`job_record_t`] (`struct job_record`),
//!   [`job_details`], [`job_queue_rec_t`] (from `src/slurmctld/job_scheduler.h`),
//!   [`job_desc_msg_t`], [`job_array_struct_t`] (an array's record of
//!   pending tasks, `job_record_t.array_recs`), [`priority_factors_object_t`],
//!   [`priority_factors_request_msg_t`], [`slurmdb_assoc_rec_t`],
//!   [`slurm_conf_t`] (`state_save_location`, `priority_calc_period`, ...).
//!   Types reached only through pointers (`part_record_t`, `slurmctld_resv_t`,
//!   `slurmdb_assoc_usage_t`, `slurmdb_qos_rec_t`, ...) are opaque: to read one,
//!   take it off the `FORWARD` list in `gen/src/main.rs` and regenerate.
//! * C enums as plain integer constants (safe to receive from C):
//!   [`lock_level_t`] ([`NO_LOCK`], [`READ_LOCK`], [`WRITE_LOCK`]) for
//!   [`slurmctld_lock_t`]; [`slurm_preempt_data_type_t`]
//!   ([`PREEMPT_DATA_ENABLED`] = 0, [`PREEMPT_DATA_MODE`] = 1,
//!   [`PREEMPT_DATA_PRIO`] = 2, [`PREEMPT_DATA_GRACE_TIME`] = 3) for
//!   `preempt_p_get_data`; [`job_states`] ([`JOB_PENDING`], [`JOB_RUNNING`],
//!   [`JOB_SUSPENDED`], ...; compare with `job_state & JOB_STATE_BASE`); a few
//!   [`slurm_err_t`] codes (`ESLURM_*`).
//! * `#define`s: [`SLURM_VERSION_NUMBER`], [`SLURM_SUCCESS`], [`SLURM_ERROR`],
//!   [`NO_VAL`], [`NO_VAL16`], [`NO_VAL64`], [`INFINITE`], [`INFINITE16`],
//!   [`INFINITE64`], [`NICE_OFFSET`], [`JOB_STATE_BASE`], [`JOB_STATE_FLAGS`],
//!   `PREEMPT_MODE_{OFF,SUSPEND,REQUEUE,CANCEL,GANG}` (as `u16`, the type
//!   `preempt_p_get_data(PREEMPT_DATA_MODE)` writes), [`WHOLE_NODE_REQUIRED`]
//!   (`job_details.whole_node`: a value until 24.11, a flag from 24.11,
//!   see `plugin/ffi/src/release.rs`).
//! * Functions and globals, below.
//!
//! Nothing is linked (no `-lslurm`): a plugin's references resolve when
//! slurmctld (or a client tool) `dlopen`s it.
//!
//! | symbol | defined in | usable from |
//! |---|---|---|
//! | `list_create`, `list_append`, `list_count`, `list_iterator_create`, `list_next`, `list_iterator_destroy`, `list_destroy`, `list_flush` | libslurmfull.so (also as `slurm_list_*`) | everywhere |
//! | `slurm_xcalloc`, `slurm_xfree`, `xfree_ptr`, `xstrdup` | libslurmfull.so | everywhere |
//! | `slurm_info`, `slurm_error`, `slurm_verbose`, `slurm_debug` | libslurmfull.so | everywhere |
//! | `slurm_destroy_priority_factors_object`, `slurm_conf` | libslurmfull.so | everywhere |
//! | **`lock_slurmctld`, `unlock_slurmctld`, `job_list`, `last_job_update`** | **the slurmctld binary only** | **only via `dlsym`, see below** |
//!
//! # slurmctld-only symbols: never reference them directly
//!
//! [`lock_slurmctld`], [`unlock_slurmctld`], [`job_list`] and
//! [`last_job_update`] are declared here (generated from the headers) but exist
//! only in the slurmctld executable, not in libslurmfull.so. rustc links
//! cdylibs with `-z now`, and client tools load the same plugin (sshare
//! dlopens the priority plugin): a plugin that names one of these symbols
//! directly fails to load there. A plugin must look them up at run time with
//! `dlsym(RTLD_DEFAULT, name)`, using the names and pointer types in
//! [`slurmctld_only`], and start threads that use them only inside slurmctld
//! (when the lookups succeed). Do not call the `extern` declarations of these
//! four; they are kept for their signatures.
//!
//! # Memory and logging rules (from the 22.05.8 source; 24.11's sprio objects differ, see `plugin/ffi/src/release.rs`)
//!
//! * Memory that Slurm frees must come from Slurm's allocator. `xmalloc(n)` is
//!   a C macro for `slurm_xcalloc(1, n, true /* clear */, false /* try */,
//!   __FILE__, __LINE__, __func__)`; `xfree(p)` is `slurm_xfree(&p)` (it takes
//!   a pointer to the pointer and NULLs it). The `List` returned by
//!   `priority_p_get_priority_factors_list` should be created with
//!   `list_create(Some(slurm_destroy_priority_factors_object))`, which
//!   `xfree`s each object and its `priority_tres`, `tres_names` and
//!   `tres_weights` arrays: allocate all of them with `slurm_xcalloc` (or
//!   leave them NULL). A job_submit `err_msg` must be an `xstrdup` copy.
//! * Log through Slurm with a constant format and the text as an argument:
//!   `slurm_info(c"%s".as_ptr(), msg)`; user text is never a format. In C,
//!   `slurm_error` is an alias of `int error(...)` (returns `SLURM_ERROR`); the
//!   binding follows `slurm/spank.h`, which declares it `void` (same ABI).
//!
//! # Layout asserts
//!
//! The sizes and offsets below (one `layout` module per release) were
//! measured with gcc `offsetof` on the same headers (and match the project's
//! notes); those marked "bin" were also read off the disassembly of Debian's
//! own plugins (22.05.8: `priority_basic.so`, `priority_multifactor.so`,
//! `job_submit_require_timelimit.so`; 24.11.5: `priority_basic.so`). They
//! are checked at compile time against the generated structs of the release
//! built, so a regeneration that changes one of them fails to build. No struct used here has a preprocessor conditional inside
//! it, so the empty stub `config.h` used for generation does not change any
//! layout.
//!
//! # Regenerating
//!
//! `scripts/gen-bindings.sh [24.11]` (root, Debian 12; 24.11 from the
//! Debian 13 chroot `testbed/trixie.sh` makes): installs `libclang-dev`,
//! `dpkg-dev` and `libslurm-dev` if missing, fetches the Debian source of
//! slurm-wlm into `/var/tmp/slurm-src` (adding a `deb-src` entry if needed),
//! runs the generator crate `slurm-sys/gen` (bindgen; kept out of the
//! workspace so normal builds never compile bindgen or need libclang),
//! rewrites the release's `src/bindings/v<major>_<minor>.rs` (same input,
//! same output) and runs `cargo test -p slurm-sys`. The allowlist is in
//! `gen/src/main.rs`. `build.rs` fails the build when
//! `/usr/include/slurm/slurm_version.h` (or
//! `$SLURM_INCLUDE_DIR/slurm/slurm_version.h`) is none of the versions in
//! `src/bindings/`, saying how to add one.

#![no_std]

/// The release's generated file as the module `bindings` (the file is
/// included, not a `mod` file, so rustfmt leaves the generated code alone).
macro_rules! bindings_of {
    ($file:literal) => {
        mod bindings {
            #![allow(
                non_camel_case_types,
                non_snake_case,
                non_upper_case_globals,
                dead_code,
                missing_debug_implementations,
                unused_imports,
                clippy::all,
                clippy::pedantic,
                clippy::nursery
            )]
            include!($file);
        }
    };
}

#[cfg(slurm = "22.05")]
bindings_of!("bindings/v22_05.rs");
#[cfg(slurm = "24.11")]
bindings_of!("bindings/v24_11.rs");
#[cfg(slurm = "25.11")]
bindings_of!("bindings/v25_11.rs");
#[cfg(slurm = "26.05")]
bindings_of!("bindings/v26_05.rs");

pub use bindings::*;

/// The Slurm release the bindings are for (`"22.05"`, `"24.11"`, `"25.11"`
/// or `"26.05"`), picked by build.rs from the installed `slurm_version.h`.
#[cfg(slurm = "22.05")]
pub const RELEASE: &str = "22.05";
#[cfg(slurm = "24.11")]
pub const RELEASE: &str = "24.11";
#[cfg(slurm = "25.11")]
pub const RELEASE: &str = "25.11";
#[cfg(slurm = "26.05")]
pub const RELEASE: &str = "26.05";

// The names of 24.11 and later for what 22.05 calls otherwise, under the
// 22.05 spelling: same meaning, same use (what differs in meaning is
// plugin/ffi's `release` module's business).
/// `list_t *` (22.05: `List`, a pointer typedef).
#[cfg(not(slurm = "22.05"))]
#[allow(non_camel_case_types)]
pub type List = *mut list_t;
/// `list_itr_t *` (22.05: `ListIterator`).
#[cfg(not(slurm = "22.05"))]
pub type ListIterator = *mut list_itr_t;
/// `job_details_t` (22.05: `struct job_details`).
#[cfg(not(slurm = "22.05"))]
#[allow(non_camel_case_types)]
pub type job_details = job_details_t;
/// From 24.11 libslurmfull exports `bit_test` only as `slurm_bit_test`.
#[cfg(not(slurm = "22.05"))]
pub use bindings::slurm_bit_test as bit_test;

/// `SLURM_VERSION_NUMBER` read by `build.rs` from the installed
/// `slurm/slurm_version.h` (e.g. `"0x160508"`), or `None` when the header was
/// not found at build time. When present it equals [`SLURM_VERSION_NUMBER`]
/// (the build fails otherwise).
pub const SLURM_VERSION_NUMBER_HEADER: Option<&str> = option_env!("SLURM_VERSION_NUMBER_HEADER");

/// Names and types for looking up the slurmctld-only symbols at run time.
///
/// These symbols are in the slurmctld executable only (not in
/// libslurmfull.so), so a plugin must not reference them directly (see the
/// [crate docs](crate#slurmctld-only-symbols-never-reference-them-directly)).
/// Look each one up with `dlsym(RTLD_DEFAULT, NAME.as_ptr())`; a NULL result
/// means the plugin is loaded by a client tool, not slurmctld.
pub mod slurmctld_only {
    use core::ffi::CStr;

    use crate::{slurmctld_lock_t, time_t, List};

    /// `extern List job_list;` — cast the `dlsym` result to `*mut List`.
    pub const JOB_LIST: &CStr = c"job_list";
    /// `extern time_t last_job_update;` — cast the `dlsym` result to
    /// `*mut time_t`; set it to `time(NULL)` after changing job records.
    pub const LAST_JOB_UPDATE: &CStr = c"last_job_update";
    /// `void lock_slurmctld(slurmctld_lock_t)` — see [`LockSlurmctldFn`].
    pub const LOCK_SLURMCTLD: &CStr = c"lock_slurmctld";
    /// `void unlock_slurmctld(slurmctld_lock_t)` — see [`LockSlurmctldFn`].
    pub const UNLOCK_SLURMCTLD: &CStr = c"unlock_slurmctld";

    /// Until 24.11 `int job_requeue(uid_t, uint32_t job_id, slurm_msg_t
    /// *msg, bool preempt, uint32_t flags)`, from 25.11 `int
    /// job_requeue_internal(uid_t, job_record_t *job_ptr, bool preempt,
    /// uint32_t flags)` — see [`JobRequeueFn`]. Call it with the job and
    /// node write locks and the federation read lock (as
    /// `_slurm_rpc_requeue` does), `msg` NULL.
    #[cfg(any(slurm = "22.05", slurm = "24.11"))]
    pub const JOB_REQUEUE: &CStr = c"job_requeue";
    #[cfg(not(any(slurm = "22.05", slurm = "24.11")))]
    pub const JOB_REQUEUE: &CStr = c"job_requeue_internal";
    /// `extern node_record_t **node_record_table_ptr;` (NULL entries are
    /// holes) — cast the `dlsym` result to `*mut *mut *mut node_record_t`.
    /// Also in libslurmfull.so; looked up like the rest so that the copy
    /// slurmctld uses is the one read.
    pub const NODE_RECORD_TABLE_PTR: &CStr = c"node_record_table_ptr";
    /// `extern int node_record_count;` — cast to `*mut c_int`.
    pub const NODE_RECORD_COUNT: &CStr = c"node_record_count";

    /// Type of [`JOB_REQUEUE`].
    #[cfg(any(slurm = "22.05", slurm = "24.11"))]
    pub type JobRequeueFn =
        unsafe extern "C" fn(uid: crate::uid_t, job_id: u32, msg: *mut crate::slurm_msg_t, preempt: bool, flags: u32) -> core::ffi::c_int;
    #[cfg(not(any(slurm = "22.05", slurm = "24.11")))]
    pub type JobRequeueFn = unsafe extern "C" fn(uid: crate::uid_t, job_ptr: *mut crate::job_record_t, preempt: bool, flags: u32) -> core::ffi::c_int;

    /// Type of `lock_slurmctld` and `unlock_slurmctld`. The
    /// [`slurmctld_lock_t`] (20 bytes; 24 from 26.05, which adds
    /// `select_node`) is passed by value.
    pub type LockSlurmctldFn = unsafe extern "C" fn(lock_levels: slurmctld_lock_t);
    /// Type of the object `job_list` names.
    pub type JobList = List;
    /// Type of the object `last_job_update` names.
    pub type LastJobUpdate = time_t;
}

// ---------------------------------------------------------------------------
// Compile-time layout asserts (Slurm 22.05.8, x86-64; values from gcc offsetof;
// "bin" = also seen in the disassembly of Debian's 22.05.8 plugins).
// ---------------------------------------------------------------------------

macro_rules! assert_size {
    ($t:ty, $size:expr) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $size, concat!("size_of::<", stringify!($t), ">() != ", stringify!($size)));
    };
}

macro_rules! assert_offset {
    ($t:ty, $field:ident, $offset:expr) => {
        const _: () = assert!(
            core::mem::offset_of!($t, $field) == $offset,
            concat!("offset_of!(", stringify!($t), ", ", stringify!($field), ") != ", stringify!($offset))
        );
    };
}

#[cfg(slurm = "22.05")]
mod layout {
    use super::*;
    assert_size!(job_record_t, 1048);
    assert_offset!(job_record_t, account, 8);
    assert_offset!(job_record_t, assoc_ptr, 72);
    assert_offset!(job_record_t, comment, 144);
    assert_offset!(job_record_t, details, 208); // bin
    assert_offset!(job_record_t, direct_set_prio, 216); // bin
    assert_offset!(job_record_t, gres_list_req, 264);
    assert_offset!(job_record_t, job_id, 360);
    assert_offset!(job_record_t, job_state, 408); // bin
    assert_offset!(job_record_t, partition, 584);
    assert_offset!(job_record_t, priority, 656); // bin
    assert_offset!(job_record_t, prio_factors, 672);
    assert_offset!(job_record_t, start_time, 816);
    assert_offset!(job_record_t, time_limit, 872);
    assert_offset!(job_record_t, tres_per_node, 920);
    assert_offset!(job_record_t, tres_req_cnt, 944);
    assert_offset!(job_record_t, user_id, 992); // bin
    assert_offset!(job_record_t, array_task_id, 52);
    assert_offset!(job_record_t, array_recs, 56);
    assert_offset!(job_record_t, het_job_id, 328);

    assert_size!(job_details, 504);
    assert_offset!(job_details, begin_time, 40); // bin
    assert_offset!(job_details, nice, 280); // bin
    assert_offset!(job_details, submit_time, 440); // bin
    assert_offset!(job_details, min_nodes, 276);
    assert_offset!(job_details, whole_node, 456);
    assert_size!(job_array_struct_t, 56);
    assert_offset!(job_array_struct_t, task_cnt, 0);

    assert_size!(job_queue_rec_t, 48);
    assert_offset!(job_queue_rec_t, job_ptr, 8);
    assert_offset!(job_queue_rec_t, priority, 24);

    assert_size!(job_desc_msg_t, 880);
    assert_offset!(job_desc_msg_t, comment, 120);
    assert_offset!(job_desc_msg_t, time_limit, 620); // bin
    assert_offset!(job_desc_msg_t, user_id, 680);

    assert_size!(priority_factors_object_t, 136);
    assert_offset!(priority_factors_object_t, job_id, 8);
    assert_offset!(priority_factors_object_t, direct_prio, 80);
    assert_size!(priority_factors_request_msg_t, 24);

    assert_size!(slurmdb_assoc_rec_t, 312);
    assert_offset!(slurmdb_assoc_rec_t, acct, 8);
    assert_offset!(slurmdb_assoc_rec_t, usage, 288);
    assert_offset!(slurmdb_assoc_rec_t, user, 296);

    assert_size!(slurm_conf_t, 1544);
    assert_offset!(slurm_conf_t, cluster_name, 232);
    assert_offset!(slurm_conf_t, priority_decay_hl, 840);
    assert_offset!(slurm_conf_t, priority_calc_period, 844);
    assert_offset!(slurm_conf_t, private_data, 912); // bin
    assert_offset!(slurm_conf_t, state_save_location, 1368);

    assert_size!(node_record_t, 472);
    assert_offset!(node_record_t, config_ptr, 64);
    assert_offset!(node_record_t, gres, 168);
    assert_offset!(node_record_t, index, 184);
    assert_offset!(node_record_t, name, 232);
    assert_offset!(node_record_t, node_state, 280);
    assert_offset!(node_record_t, part_cnt, 302);
    assert_offset!(node_record_t, part_pptr, 304);
    assert_offset!(node_record_t, reason, 352);
    assert_size!(config_record_t, 128);
    assert_offset!(config_record_t, gres, 40);
    assert_size!(part_record_t, 328);
    assert_offset!(part_record_t, name, 200);
    assert_offset!(part_record_t, priority_tier, 254);
    assert_offset!(part_record_t, state_up, 274);
    assert_size!(slurmctld_lock_t, 20);
    assert_size!(lock_level_t, 4);
    assert_size!(slurm_preempt_data_type_t, 4);
}

// Slurm 24.11.5: gcc offsetof on the upstream headers (the .orig.tar.gz;
// the Debian revision's patches could not be fetched); "bin" = also read
// off the disassembly of Debian 13's priority_basic.so (priority_p_set).
#[cfg(slurm = "24.11")]
mod layout {
    use super::*;
    assert_size!(job_record_t, 1160);
    assert_offset!(job_record_t, account, 8);
    assert_offset!(job_record_t, assoc_ptr, 72);
    assert_offset!(job_record_t, comment, 144);
    assert_offset!(job_record_t, details, 216); // bin
    assert_offset!(job_record_t, direct_set_prio, 224); // bin
    assert_offset!(job_record_t, gres_list_req, 296);
    assert_offset!(job_record_t, job_id, 392);
    assert_offset!(job_record_t, job_state, 448);
    assert_offset!(job_record_t, partition, 656);
    assert_offset!(job_record_t, priority, 728); // bin
    assert_offset!(job_record_t, prio_factors, 736);
    assert_offset!(job_record_t, start_time, 920);
    assert_offset!(job_record_t, time_limit, 984);
    assert_offset!(job_record_t, tres_per_node, 1032);
    assert_offset!(job_record_t, tres_req_cnt, 1056);
    assert_offset!(job_record_t, user_id, 1104);
    assert_offset!(job_record_t, array_task_id, 52);
    assert_offset!(job_record_t, array_recs, 56);
    assert_offset!(job_record_t, het_job_id, 360);

    assert_size!(job_details, 528);
    assert_offset!(job_details, begin_time, 48);
    assert_offset!(job_details, nice, 288); // bin
    assert_offset!(job_details, submit_time, 464);
    assert_offset!(job_details, min_nodes, 284);
    assert_offset!(job_details, whole_node, 480);
    assert_size!(job_array_struct_t, 56);
    assert_offset!(job_array_struct_t, task_cnt, 0);

    assert_size!(job_queue_rec_t, 56);
    assert_offset!(job_queue_rec_t, job_ptr, 8);
    assert_offset!(job_queue_rec_t, priority, 24);

    assert_size!(job_desc_msg_t, 912);
    assert_offset!(job_desc_msg_t, comment, 120);
    assert_offset!(job_desc_msg_t, time_limit, 660);
    assert_offset!(job_desc_msg_t, user_id, 720);

    assert_size!(priority_factors_object_t, 64);
    assert_offset!(priority_factors_object_t, direct_prio, 16);
    assert_offset!(priority_factors_object_t, job_id, 24);
    assert_offset!(priority_factors_object_t, prio_factors, 40);
    assert_size!(priority_factors_t, 96);

    assert_size!(slurmdb_assoc_rec_t, 336);
    assert_offset!(slurmdb_assoc_rec_t, acct, 8);
    assert_offset!(slurmdb_assoc_rec_t, usage, 312);
    assert_offset!(slurmdb_assoc_rec_t, user, 320);

    assert_size!(slurm_conf_t, 1544);
    assert_offset!(slurm_conf_t, cluster_name, 248);
    assert_offset!(slurm_conf_t, priority_decay_hl, 840);
    assert_offset!(slurm_conf_t, priority_calc_period, 844);
    assert_offset!(slurm_conf_t, private_data, 912);
    assert_offset!(slurm_conf_t, state_save_location, 1344);

    assert_size!(node_record_t, 536);
    assert_offset!(node_record_t, config_ptr, 72);
    assert_offset!(node_record_t, gres, 192);
    assert_offset!(node_record_t, index, 208);
    assert_offset!(node_record_t, name, 272);
    assert_offset!(node_record_t, node_state, 320);
    assert_offset!(node_record_t, part_cnt, 342);
    assert_offset!(node_record_t, part_pptr, 344);
    assert_offset!(node_record_t, reason, 384);
    assert_size!(config_record_t, 128);
    assert_offset!(config_record_t, gres, 40);
    assert_size!(part_record_t, 360);
    assert_offset!(part_record_t, name, 232);
    assert_offset!(part_record_t, priority_tier, 286);
    assert_offset!(part_record_t, state_up, 306);

    assert_size!(slurmctld_lock_t, 20);
    assert_size!(lock_level_t, 4);
    assert_size!(slurm_preempt_data_type_t, 4);
}

// Slurm 25.11.7: gcc offsetof on SchedMD's release headers (the tarball).
#[cfg(slurm = "25.11")]
mod layout {
    use super::*;
    assert_size!(job_record_t, 1208);
    assert_offset!(job_record_t, account, 32);
    assert_offset!(job_record_t, assoc_ptr, 104);
    assert_offset!(job_record_t, comment, 176);
    assert_offset!(job_record_t, details, 248);
    assert_offset!(job_record_t, direct_set_prio, 256);
    assert_offset!(job_record_t, gres_list_req, 320);
    assert_offset!(job_record_t, job_id, 424);
    assert_offset!(job_record_t, job_state, 488);
    assert_offset!(job_record_t, partition, 704);
    assert_offset!(job_record_t, priority, 776);
    assert_offset!(job_record_t, prio_factors, 784);
    assert_offset!(job_record_t, start_time, 960);
    assert_offset!(job_record_t, time_limit, 1024);
    assert_offset!(job_record_t, tres_per_node, 1080);
    assert_offset!(job_record_t, tres_req_cnt, 1104);
    assert_offset!(job_record_t, user_id, 1152);
    assert_offset!(job_record_t, array_task_id, 84);
    assert_offset!(job_record_t, array_recs, 88);
    assert_offset!(job_record_t, het_job_id, 384);
    assert_size!(job_details, 544);
    assert_offset!(job_details, begin_time, 48);
    assert_offset!(job_details, nice, 288);
    assert_offset!(job_details, submit_time, 480);
    assert_offset!(job_details, min_nodes, 284);
    assert_offset!(job_details, whole_node, 496);
    assert_size!(job_array_struct_t, 56);
    assert_offset!(job_array_struct_t, task_cnt, 0);
    assert_size!(job_queue_rec_t, 56);
    assert_offset!(job_queue_rec_t, job_ptr, 8);
    assert_offset!(job_queue_rec_t, priority, 24);
    assert_size!(job_desc_msg_t, 944);
    assert_offset!(job_desc_msg_t, comment, 128);
    assert_offset!(job_desc_msg_t, time_limit, 692);
    assert_offset!(job_desc_msg_t, user_id, 752);
    assert_size!(priority_factors_object_t, 64);
    assert_offset!(priority_factors_object_t, direct_prio, 16);
    assert_offset!(priority_factors_object_t, job_id, 24);
    assert_offset!(priority_factors_object_t, prio_factors, 40);
    assert_size!(priority_factors_t, 96);
    assert_size!(slurmdb_assoc_rec_t, 320);
    assert_offset!(slurmdb_assoc_rec_t, acct, 8);
    assert_offset!(slurmdb_assoc_rec_t, usage, 296);
    assert_offset!(slurmdb_assoc_rec_t, user, 304);
    assert_size!(slurm_conf_t, 1584);
    assert_offset!(slurm_conf_t, cluster_name, 264);
    assert_offset!(slurm_conf_t, priority_decay_hl, 864);
    assert_offset!(slurm_conf_t, priority_calc_period, 868);
    assert_offset!(slurm_conf_t, private_data, 936);
    assert_offset!(slurm_conf_t, state_save_location, 1376);
    assert_size!(node_record_t, 592);
    assert_offset!(node_record_t, config_ptr, 104);
    assert_offset!(node_record_t, gres, 224);
    assert_offset!(node_record_t, index, 240);
    assert_offset!(node_record_t, name, 304);
    assert_offset!(node_record_t, node_state, 352);
    assert_offset!(node_record_t, part_cnt, 384);
    assert_offset!(node_record_t, part_pptr, 392);
    assert_offset!(node_record_t, reason, 432);
    assert_size!(config_record_t, 144);
    assert_offset!(config_record_t, gres, 40);
    assert_size!(part_record_t, 376);
    assert_offset!(part_record_t, name, 232);
    assert_offset!(part_record_t, priority_tier, 286);
    assert_offset!(part_record_t, state_up, 306);
    assert_size!(slurmctld_lock_t, 20);
    assert_size!(lock_level_t, 4);
}

// Slurm 26.05.3: gcc offsetof on SchedMD's release headers (the tarball).
// 26.05 put a job's `slurm_step_id_t` at the head of the record (`job_id`
// stays), gave sprio's object that `step_id` instead of `job_id`, and added
// a sixth lock (`select_node`).
#[cfg(slurm = "26.05")]
mod layout {
    use super::*;
    assert_size!(job_record_t, 1288);
    assert_offset!(job_record_t, account, 32);
    assert_offset!(job_record_t, assoc_ptr, 104);
    assert_offset!(job_record_t, comment, 176);
    assert_offset!(job_record_t, details, 256);
    assert_offset!(job_record_t, direct_set_prio, 264);
    assert_offset!(job_record_t, gres_list_req, 344);
    assert_offset!(job_record_t, job_id, 448);
    assert_offset!(job_record_t, job_state, 512);
    assert_offset!(job_record_t, partition, 752);
    assert_offset!(job_record_t, priority, 832);
    assert_offset!(job_record_t, prio_factors, 840);
    assert_offset!(job_record_t, start_time, 1032);
    assert_offset!(job_record_t, time_limit, 1104);
    assert_offset!(job_record_t, tres_per_node, 1160);
    assert_offset!(job_record_t, tres_req_cnt, 1184);
    assert_offset!(job_record_t, user_id, 1232);
    assert_offset!(job_record_t, array_task_id, 84);
    assert_offset!(job_record_t, array_recs, 88);
    assert_offset!(job_record_t, het_job_id, 408);
    assert_size!(job_details, 560);
    assert_offset!(job_details, begin_time, 48);
    assert_offset!(job_details, nice, 292);
    assert_offset!(job_details, submit_time, 496);
    assert_offset!(job_details, min_nodes, 288);
    assert_offset!(job_details, whole_node, 512);
    assert_size!(job_array_struct_t, 56);
    assert_offset!(job_array_struct_t, task_cnt, 0);
    assert_size!(job_queue_rec_t, 56);
    assert_offset!(job_queue_rec_t, job_ptr, 8);
    assert_offset!(job_queue_rec_t, priority, 24);
    assert_size!(job_desc_msg_t, 952);
    assert_offset!(job_desc_msg_t, comment, 128);
    assert_offset!(job_desc_msg_t, time_limit, 700);
    assert_offset!(job_desc_msg_t, user_id, 760);
    assert_size!(priority_factors_object_t, 80);
    assert_offset!(priority_factors_object_t, direct_prio, 16);
    assert_offset!(priority_factors_object_t, step_id, 24);
    assert_offset!(priority_factors_object_t, prio_factors, 56);
    assert_size!(priority_factors_t, 96);
    assert_size!(slurmdb_assoc_rec_t, 328);
    assert_offset!(slurmdb_assoc_rec_t, acct, 8);
    assert_offset!(slurmdb_assoc_rec_t, usage, 296);
    assert_offset!(slurmdb_assoc_rec_t, user, 312);
    assert_size!(slurm_conf_t, 1640);
    assert_offset!(slurm_conf_t, cluster_name, 264);
    assert_offset!(slurm_conf_t, priority_decay_hl, 904);
    assert_offset!(slurm_conf_t, priority_calc_period, 908);
    assert_offset!(slurm_conf_t, private_data, 976);
    assert_offset!(slurm_conf_t, state_save_location, 1432);
    assert_size!(node_record_t, 576);
    assert_offset!(node_record_t, config_ptr, 80);
    assert_offset!(node_record_t, gres, 200);
    assert_offset!(node_record_t, index, 216);
    assert_offset!(node_record_t, name, 280);
    assert_offset!(node_record_t, node_state, 328);
    assert_offset!(node_record_t, part_cnt, 360);
    assert_offset!(node_record_t, part_pptr, 368);
    assert_offset!(node_record_t, reason, 416);
    assert_size!(config_record_t, 152);
    assert_offset!(config_record_t, gres, 40);
    assert_size!(part_record_t, 368);
    assert_offset!(part_record_t, name, 224);
    assert_offset!(part_record_t, priority_tier, 278);
    assert_offset!(part_record_t, state_up, 298);
    assert_size!(slurmctld_lock_t, 24);
    assert_size!(lock_level_t, 4);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_values_match_slurm_h() {
        assert_eq!(NO_VAL, 0xffff_fffe);
        assert_eq!(NO_VAL16, 0xfffe);
        assert_eq!(NO_VAL64, 0xffff_ffff_ffff_fffe);
        assert_eq!(INFINITE, 0xffff_ffff);
        assert_eq!(INFINITE16, 0xffff);
        assert_eq!(INFINITE64, u64::MAX);
        assert_eq!(NICE_OFFSET, 0x8000_0000);
    }

    #[test]
    fn version_is_the_releases() {
        let want = match RELEASE {
            "22.05" => 0x16_05_08,
            "24.11" => 0x18_0b_05,
            "25.11" => 0x19_0b_07,
            "26.05" => 0x1a_05_03,
            other => panic!("unknown release {other}"),
        };
        assert_eq!(SLURM_VERSION_NUMBER, want);
        if let Some(header) = SLURM_VERSION_NUMBER_HEADER {
            assert_eq!(u32::from_str_radix(header.trim_start_matches("0x"), 16), Ok(want));
        }
    }

    #[test]
    fn job_state_and_return_codes() {
        assert_eq!(JOB_STATE_BASE, 0xff);
        assert_eq!((JOB_PENDING, JOB_RUNNING, JOB_SUSPENDED), (0, 1, 2));
        assert_eq!(SLURM_SUCCESS, 0);
        assert_eq!(SLURM_ERROR, -1);
        assert_eq!(ESLURM_INVALID_TIME_LIMIT, 2051);
        assert_eq!(ESLURM_ACCOUNTING_POLICY, 2050);
    }

    #[test]
    fn preempt_and_lock_enums() {
        assert_eq!((PREEMPT_MODE_OFF, PREEMPT_MODE_SUSPEND, PREEMPT_MODE_REQUEUE, PREEMPT_MODE_CANCEL), (0x0, 0x1, 0x2, 0x8));
        assert_eq!(PREEMPT_MODE_GANG, 0x8000);
        #[cfg(any(slurm = "22.05", slurm = "24.11"))]
        assert_eq!((PREEMPT_DATA_ENABLED, PREEMPT_DATA_MODE, PREEMPT_DATA_PRIO, PREEMPT_DATA_GRACE_TIME), (0, 1, 2, 3));
        assert_eq!((NO_LOCK, READ_LOCK, WRITE_LOCK), (0, 1, 2));
    }
}
