//! Safe glue between Slurm and Tally's allocator, shared by the plugin
//! cdylibs (`priority_tally.so`, …).
//!
//! - [`guard`]: the one panic firewall every exported function goes through.
//! - [`slurm_log`]: the `log` facade into slurmctld's log (constant `"%s"`
//!   format, NULs escaped).
//! - [`host`]: the slurmctld-only symbols (`job_list`, `lock_slurmctld`, …),
//!   looked up at run time so client tools can load the plugin too.
//! - [`view`]: a `job_record_t` read into an owned [`view::JobView`] — the
//!   only place that dereferences job pointers.
//! - [`engine`]: safe, host-free logic: charging the ledger from job views,
//!   re-ranking, computing priorities. Unit-tested without Slurm.
//! - [`planner`]: the planner thread's work, host-free: jobs → the plan's
//!   committed step ([`engine::PlanBoard`]).
//! - [`statefile`]: atomic save and careful load of the ledger.
//! - [`worker`]: the background thread shape (tick, reload, stop) of every
//!   plugin; [`follower`]: config and ledger followed from disk by the
//!   job_submit and preempt plugins.
//! - [`submit`]: what job_submit/tally checks and rewrites, host-free.
//!
//! Safety invariants (in the manner of pgrx's SAFETY.md): a Slurm pointer is
//! only dereferenced in [`view`] and the plugin's exported functions, only
//! while slurmctld holds the lock its caller documents, and never kept past
//! the call. Strings are copied out; nothing borrowed from Slurm outlives the
//! call that lent it.

pub mod engine;
pub mod follower;
pub mod guard;
pub mod host;
pub mod planner;
pub mod slurm_log;
pub mod statefile;
pub mod submit;
pub mod view;
pub mod worker;

pub use slurm_sys;

/// Unix seconds now, the clock of every plugin (0 if the clock is before 1970).
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A NUL-terminated byte array of a string, for the identity symbols.
pub const fn c_array<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut a = [0u8; N];
    let mut i = 0;
    while i < b.len() && i + 1 < N {
        a[i] = b[i];
        i += 1;
    }
    a
}

/// The identity symbols Slurm's plugin loader reads (`src/common/plugin.c`):
/// `plugin_name` and `plugin_type` as NUL-terminated char arrays (not
/// pointers), `plugin_version` = `SLURM_VERSION_NUMBER` of the bindings.
#[macro_export]
macro_rules! plugin_identity {
    ($name:literal, $type:literal) => {
        #[no_mangle]
        pub static plugin_name: [u8; $name.len() + 1] = $crate::c_array($name);
        #[no_mangle]
        pub static plugin_type: [u8; $type.len() + 1] = $crate::c_array($type);
        #[no_mangle]
        pub static plugin_version: u32 = $crate::slurm_sys::SLURM_VERSION_NUMBER;
    };
}
