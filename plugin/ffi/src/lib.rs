//! The Slurm-facing glue of Tally's plugin cdylibs (`priority_tally.so`, …):
//! the only crate of the plugins that holds `unsafe` code.
//!
//! - [`export!`]: the one way to define an exported function. It puts the
//!   body behind `tally_engine::guard` and, before the first one runs,
//!   routes panics into slurmctld's log ([`prepare`]). The plugin crates are
//!   `#![forbid(unsafe_code)]`, which also forbids `#[no_mangle]` written
//!   by hand: an export without the guard does not compile.
//! - [`plugin_identity!`]: the identity symbols Slurm's loader reads.
//! - [`abi`]: the pointers slurmctld lends an export, as typed handles
//!   with safe accessors (`JobArg::view`, `DescArg::set_comment`, sprio's
//!   list, preempt data), plus slurm.conf values ([`abi::conf`]).
//! - [`host`]: the slurmctld-only symbols (`job_list`, `lock_slurmctld`, …),
//!   looked up at run time so client tools can load the plugin too, and the
//!   copies and write-backs done under slurmctld's job lock.
//! - [`view`]: a `job_record_t` read into an owned `JobView` (the type and
//!   everything after it live in `tally_engine`).
//! - [`slurm_log`]: the `log` facade into slurmctld's log (constant `"%s"`
//!   format, NULs escaped).
//!
//! Safety invariants (in the manner of pgrx's SAFETY.md): a Slurm pointer is
//! only dereferenced in this crate, only while slurmctld holds the lock its
//! caller documents, and never kept past the call (the handles of [`abi`]
//! carry the call's lifetime). Strings are copied out; nothing borrowed from
//! Slurm outlives the call that lent it.

pub mod abi;
pub mod hooks;
pub mod host;
pub mod release;
pub mod slurm_log;
pub mod view;

pub use libc;
pub use slurm_sys;
pub use tally_engine;

/// Once per process, before any export's body: a panic's message (and
/// where it happened) and the guard's report go to slurmctld's log, not
/// to stderr.
pub fn prepare() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tally_engine::guard::set_reporter(slurm_log::error);
        std::panic::set_hook(Box::new(|info| {
            slurm_log::error(&format!("tally: internal error: {info}"));
        }));
    });
}

/// Define exported functions, each behind the panic guard:
///
/// ```text
/// tally_ffi::export! {
///     /// What it does.
///     fn priority_p_set(last_prio: u32, job: JobArg<'_>) -> u32;
///     fallback || job.priority().map_or(1, |p| p.max(1));
///     { … }
/// }
/// ```
///
/// `fallback` is what the export returns when its body panics (the
/// guard logs `tally: <name> failed (…)`); per hook, ARCHITECTURE.md.
#[macro_export]
macro_rules! export {
    ($(
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?;
        fallback $fallback:expr;
        $body:block
    )*) => {$(
        $(#[$meta])*
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            $crate::prepare();
            $crate::tally_engine::guard::guard(stringify!($name), $fallback, move || $body)
        }
    )*};
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
