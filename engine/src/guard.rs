//! The panic firewall. A panic that unwinds into slurmctld (C) is undefined
//! behaviour and, with `panic=abort`, kills the controller; every exported
//! function (through `tally_ffi::export!`) and every thread body (through
//! [`crate::worker`]) runs behind [`guard`] instead.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

static REPORT: OnceLock<fn(&str)> = OnceLock::new();

/// Where [`guard`] reports a caught panic: slurmctld's error log, set by
/// `tally_ffi` before the first export runs (stderr until then, as in
/// tests). The first setting stays.
pub fn set_reporter(report: fn(&str)) {
    let _ = REPORT.set(report);
}

fn report(msg: &str) {
    match REPORT.get() {
        Some(f) => f(msg),
        None => eprintln!("{msg}"),
    }
}

/// Test builds only (feature `inject-panic`): panic in the exports named
/// in `TALLY_INJECT_PANIC` (comma-separated, or `all`), to prove the
/// fallbacks on a real slurmctld.
#[cfg(feature = "inject-panic")]
fn inject(what: &str) {
    if std::env::var("TALLY_INJECT_PANIC").is_ok_and(|v| v.split(',').any(|w| w == what || w == "all")) {
        panic!("injected panic in {what} (TALLY_INJECT_PANIC)");
    }
}

/// Run `body`; if it panics, report and return `fallback()` instead.
///
/// What each export falls back to (fail-open or fail-closed, decided per
/// hook, ARCHITECTURE.md): job_submit and job_modify accept unchecked
/// (open: a bug must not stop a cluster's submissions); `preempt_p_*`
/// allow no preemption (closed: nobody loses work to a bug); `priority_p_set`
/// keeps the job's priority; `init` starts nothing and says so.
pub fn guard<T>(what: &str, fallback: impl FnOnce() -> T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(|| {
        #[cfg(feature = "inject-panic")]
        inject(what);
        body()
    })) {
        Ok(v) => v,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            report(&format!("tally: {what} failed ({msg}); returned a safe fallback"));
            fallback()
        }
    }
}

/// Lock a mutex, ignoring poisoning: a panic in one call (caught by [`guard`])
/// must not disable the plugin for every later call.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_fallback() {
        assert_eq!(guard("ok", || 0, || 7), 7);
        // No Slurm here: the message goes to stderr.
        assert_eq!(guard("boom", || 0, || -> i32 { panic!("on purpose") }), 0);
        let m = std::sync::Mutex::new(1);
        guard(
            "poison",
            || (),
            || {
                let _g = m.lock().unwrap();
                panic!("poisoning the mutex");
            },
        );
        assert_eq!(*lock(&m), 1, "a poisoned mutex is still usable");
    }
}
