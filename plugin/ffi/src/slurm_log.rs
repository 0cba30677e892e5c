//! Logging into slurmctld's log through Slurm's exported log functions, with
//! a constant `"%s"` format: user text is never a format string.
//!
//! [`SlurmLogger`] implements the `log` facade, so the engine logs with
//! `log::info!` and stays host-agnostic. Error → `slurm_error`, Warn and Info
//! → `slurm_info`, Debug and Trace → `slurm_info` too but only when Tally's
//! own `[log] debug = true` raised the level (slurmctld's debug level is left
//! alone).

//!
//! The two functions are looked up with `dlsym` on first use rather than
//! linked: inside slurmctld (or a client tool, or the fake host of the tests)
//! they are found in the process; in this crate's own unit tests, where no
//! Slurm is loaded, messages go to stderr.

use std::ffi::{c_char, CStr, CString};
use std::sync::OnceLock;

type LogFn = unsafe extern "C" fn(*const c_char, ...);

fn lookup(name: &CStr) -> Option<LogFn> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if p.is_null() {
        None
    } else {
        // SAFETY: `slurm_error` and `slurm_info` are `void f(const char *fmt, ...)`
        // in libslurmfull (log.h); a non-NULL symbol of that name is that function.
        Some(unsafe { std::mem::transmute::<*mut libc::c_void, LogFn>(p) })
    }
}

fn functions() -> &'static (Option<LogFn>, Option<LogFn>) {
    static FNS: OnceLock<(Option<LogFn>, Option<LogFn>)> = OnceLock::new();
    FNS.get_or_init(|| (lookup(c"slurm_error"), lookup(c"slurm_info")))
}

/// Make a C string of any text: interior NULs become `\0`.
pub fn c_text(msg: &str) -> CString {
    CString::new(msg.replace('\0', "\\0")).unwrap_or_default()
}

fn emit(f: Option<LogFn>, msg: &str) {
    match f {
        Some(f) => {
            let c = c_text(msg);
            // SAFETY: constant format with exactly one `%s` argument, a valid C string.
            unsafe { f(c"%s".as_ptr(), c.as_ptr()) }
        }
        None => eprintln!("{msg}"),
    }
}

/// `slurm_error("%s", msg)`.
pub fn error(msg: &str) {
    emit(functions().0, msg)
}

/// `slurm_info("%s", msg)`.
pub fn info(msg: &str) {
    emit(functions().1, msg)
}

/// The `log` facade over Slurm's log.
#[derive(Debug)]
pub struct SlurmLogger {
    /// e.g. `priority/tally`
    pub prefix: &'static str,
}

impl log::Log for SlurmLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }
    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = format!("{}: {}", self.prefix, record.args());
        match record.level() {
            log::Level::Error => error(&text),
            log::Level::Warn => info(&format!("{}: warning: {}", self.prefix, record.args())),
            _ => info(&text),
        }
    }
    fn flush(&self) {}
}

/// Install `logger` once, at info until a config says `[log] debug`.
pub fn init(logger: &'static SlurmLogger) {
    let _ = log::set_logger(logger);
    tally_engine::set_debug(false);
}

#[cfg(test)]
mod tests {
    #[test]
    fn nul_bytes_are_escaped_not_truncating() {
        assert_eq!(super::c_text("a\0b%s").to_str().unwrap(), "a\\0b%s");
    }
}
