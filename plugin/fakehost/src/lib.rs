//! A fake slurmctld for the plugins' tests, the way Slurm's own
//! `testsuite/python/scripts/prio_multifactor.c` "sets up some fake system".
//!
//! A test executable that links this crate defines slurmctld's globals
//! (`job_list`, `last_job_update`, `lock_slurmctld`, `unlock_slurmctld`);
//! the plugin crates' build.rs exports them with `--export-dynamic`, so a
//! plugin's `dlsym(RTLD_DEFAULT, …)` finds them as it would in slurmctld.
//! [`Host::load`] loads the real `libslurmfull.so` (lists, xmalloc, logging,
//! `slurm_conf`) globally, as slurmctld has it. Job records are built in Rust
//! with [`job`].

#![allow(clippy::missing_safety_doc, missing_debug_implementations)]

use libloading::os::unix::{Library, Symbol, RTLD_GLOBAL, RTLD_NOW};
use slurm_sys::{job_details, job_record_t, slurm_conf_t, slurmctld_lock_t, time_t, List, NICE_OFFSET};
use std::ffi::{c_char, c_int, c_void, CString};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---- slurmctld's globals ---------------------------------------------------------

#[no_mangle]
pub static mut job_list: List = std::ptr::null_mut();
#[no_mangle]
pub static mut last_job_update: time_t = 0;

static LOCKED: Mutex<bool> = Mutex::new(false);
static FREED: Condvar = Condvar::new();
/// How often a plugin took the lock.
pub static LOCKS_TAKEN: AtomicU64 = AtomicU64::new(0);

#[no_mangle]
pub extern "C" fn lock_slurmctld(_l: slurmctld_lock_t) {
    let mut g = LOCKED.lock().unwrap();
    while *g {
        g = FREED.wait(g).unwrap();
    }
    *g = true;
    LOCKS_TAKEN.fetch_add(1, Ordering::SeqCst);
}

#[no_mangle]
pub extern "C" fn unlock_slurmctld(_l: slurmctld_lock_t) {
    *LOCKED.lock().unwrap() = false;
    FREED.notify_all();
}

/// Hold the fake job lock while the test reads or changes jobs (as
/// slurmctld holds it around its calls into plugins).
pub fn with_lock<T>(f: impl FnOnce() -> T) -> T {
    let l = slurmctld_lock_t { conf: 0, job: 2, node: 0, part: 0, fed: 0 };
    lock_slurmctld(l);
    let v = f();
    unlock_slurmctld(l);
    v
}

/// `last_job_update` as the plugin left it.
pub fn last_update() -> time_t {
    // SAFETY: a plain global, written by the plugin under the fake lock.
    with_lock(|| unsafe { std::ptr::addr_of!(last_job_update).read() })
}

// ---- libslurmfull ------------------------------------------------------------------

pub const LIBSLURMFULL: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so";

/// The real libslurmfull.so, loaded globally, and the functions tests use.
pub struct Host {
    lib: Library,
}

impl Host {
    /// Load libslurmfull.so (RTLD_GLOBAL), point `slurm_conf.state_save_location`
    /// at `state_dir`, and create an empty `job_list`.
    pub fn load(state_dir: &Path) -> Host {
        // SAFETY: loading Slurm's own library; its initialisers are what every client runs.
        let lib = unsafe { Library::open(Some(LIBSLURMFULL), RTLD_NOW | RTLD_GLOBAL) }
            .unwrap_or_else(|e| panic!("{LIBSLURMFULL} is needed for the fake host ({e}); install Slurm with `bash testbed/install.sh`"));
        let host = Host { lib };
        // SAFETY: `slurm_conf` is libslurmfull's global config struct.
        unsafe {
            let conf: Symbol<*mut slurm_conf_t> = host.lib.get(b"slurm_conf").unwrap();
            (**conf).state_save_location = leak(state_dir.to_str().unwrap());
            job_list = host.list_create();
        }
        host
    }

    fn sym<T>(&self, name: &[u8]) -> Symbol<T> {
        // SAFETY: names and types follow slurm/slurm.h and src/common/list.h.
        unsafe { self.lib.get(name) }.unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(name)))
    }

    pub fn list_create(&self) -> List {
        let f: Symbol<unsafe extern "C" fn(*const c_void) -> List> = self.sym(b"list_create");
        // SAFETY: a list without a destructor.
        unsafe { f(std::ptr::null()) }
    }

    /// Append a job to `job_list`.
    pub fn add_job(&self, job: &mut FakeJob) {
        let f: Symbol<unsafe extern "C" fn(List, *mut c_void) -> *mut c_void> = self.sym(b"list_append");
        // SAFETY: job_list was created in `load`; the record outlives the list's use.
        // As slurmctld's submission does: `last_job_update = now`.
        with_lock(|| unsafe {
            f(job_list, job.ptr().cast());
            std::ptr::addr_of_mut!(last_job_update).write(now());
        });
    }

    /// Say that job data changed at `t` (`last_job_update = t`), as
    /// slurmctld does on every change a test makes to a record by hand.
    pub fn touch(&self, t: time_t) {
        // SAFETY: a plain global, under the fake lock.
        with_lock(|| unsafe { std::ptr::addr_of_mut!(last_job_update).write(t) });
    }

    /// Run `f` from inside a walk of `job_list` (`list_for_each`, as
    /// slurmctld's `slurm_find_preemptable_jobs` calls the preempt plugin):
    /// the list's lock is held, so a plugin that walks `job_list` again
    /// dies here as it would in slurmctld. `job_list` must not be empty.
    pub fn inside_job_list_walk<F: FnOnce() -> T, T>(&self, f: F) -> T {
        struct Call<F, T> {
            f: Option<F>,
            out: Option<T>,
        }
        extern "C" fn trampoline<F: FnOnce() -> T, T>(_item: *mut c_void, arg: *mut c_void) -> c_int {
            // SAFETY: `arg` is the `Call` below, alive for the walk.
            let call = unsafe { &mut *arg.cast::<Call<F, T>>() };
            if let Some(f) = call.f.take() {
                call.out = Some(f());
            }
            -1 // stop after the first item
        }
        let walk: Symbol<unsafe extern "C" fn(List, extern "C" fn(*mut c_void, *mut c_void) -> c_int, *mut c_void) -> c_int> =
            self.sym(b"list_for_each");
        let mut call: Call<F, T> = Call { f: Some(f), out: None };
        // SAFETY: job_list was created in `load`; the callback gets `call`.
        with_lock(|| unsafe { walk(job_list, trampoline::<F, T>, (&mut call as *mut Call<F, T>).cast()) });
        call.out.expect("job_list is empty: add a job first")
    }

    pub fn list_count(&self, l: List) -> usize {
        let f: Symbol<unsafe extern "C" fn(List) -> c_int> = self.sym(b"list_count");
        // SAFETY: a valid list.
        unsafe { f(l) as usize }
    }

    /// The items of a list (not consumed).
    pub fn list_items(&self, l: List) -> Vec<*mut c_void> {
        let create: Symbol<unsafe extern "C" fn(List) -> *mut c_void> = self.sym(b"list_iterator_create");
        let next: Symbol<unsafe extern "C" fn(*mut c_void) -> *mut c_void> = self.sym(b"list_next");
        let destroy: Symbol<unsafe extern "C" fn(*mut c_void)> = self.sym(b"list_iterator_destroy");
        let mut out = Vec::new();
        // SAFETY: a valid list, iterated and released here.
        unsafe {
            let it = create(l);
            loop {
                let p = next(it);
                if p.is_null() {
                    break;
                }
                out.push(p);
            }
            destroy(it);
        }
        out
    }

    pub fn list_destroy(&self, l: List) {
        let f: Symbol<unsafe extern "C" fn(List)> = self.sym(b"list_destroy");
        // SAFETY: a list the plugin handed over, destroyed once (frees its items).
        unsafe { f(l) }
    }

    /// A string from Slurm's allocator (`xstrdup`), as slurmctld's own fields are.
    pub fn xstrdup(&self, s: &str) -> *mut c_char {
        let f: Symbol<unsafe extern "C" fn(*const c_char) -> *mut c_char> = self.sym(b"xstrdup");
        let c = CString::new(s).unwrap();
        // SAFETY: a NUL-terminated string, copied.
        unsafe { f(c.as_ptr()) }
    }

    /// `xfree` a string the plugin allocated with Slurm's allocator.
    pub fn xfree(&self, p: *mut c_char) {
        let f: Symbol<unsafe extern "C" fn(*mut *mut c_void)> = self.sym(b"slurm_xfree");
        let mut p = p.cast::<c_void>();
        // SAFETY: `p` came from slurm_xcalloc/xstrdup.
        unsafe { f(&mut p) }
    }
}

// ---- job records -------------------------------------------------------------------

pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// A C string that lives for the rest of the test.
pub fn leak(s: &str) -> *mut c_char {
    CString::new(s).unwrap().into_raw()
}

pub fn zeroed<T>() -> Box<T> {
    // SAFETY: the C records are plain data; all-zero is what xmalloc gives Slurm.
    unsafe { Box::new(MaybeUninit::<T>::zeroed().assume_init()) }
}

/// A job record owned by the test.
pub struct FakeJob {
    pub rec: Box<job_record_t>,
}

/// A pending job submitted a minute ago, on one node, priority 1.
pub fn job(id: u32, account: &str, user: &str, comment: &str, gpus: u32) -> FakeJob {
    let mut d: Box<job_details> = zeroed();
    let t = now();
    d.submit_time = t - 60;
    d.begin_time = t - 60;
    d.nice = NICE_OFFSET;
    d.min_nodes = 1;
    let mut rec: Box<job_record_t> = zeroed();
    rec.job_id = id;
    rec.account = leak(account);
    rec.user_name = leak(user);
    rec.user_id = 1000 + id;
    rec.partition = leak("gpu");
    if !comment.is_empty() {
        rec.comment = leak(comment);
    }
    rec.tres_per_node = leak(&format!("gres:gpu:{gpus}"));
    rec.details = Box::into_raw(d);
    rec.priority = 1;
    rec.time_limit = slurm_sys::INFINITE;
    FakeJob { rec }
}

impl FakeJob {
    /// Running since `secs_ago` seconds.
    pub fn running_since(mut self, secs_ago: i64) -> FakeJob {
        self.rec.job_state = slurm_sys::JOB_RUNNING;
        self.rec.start_time = now() - secs_ago;
        self
    }
    /// `--exclusive`: whole nodes (`details->whole_node` =
    /// `WHOLE_NODE_REQUIRED`, a value every release reads as such).
    pub fn exclusive(self) -> FakeJob {
        // SAFETY: `job` gave it its own details record.
        unsafe { (*self.rec.details).whole_node = slurm_sys::WHOLE_NODE_REQUIRED as u8 };
        self
    }
    /// A job array's record of `tasks` pending tasks, as slurmctld keeps
    /// one: `array_job_id` its own id, no task id (`NO_VAL`), and
    /// `array_recs->task_cnt` the tasks it still holds.
    pub fn array_record(mut self, tasks: u32) -> FakeJob {
        let mut recs: Box<slurm_sys::job_array_struct_t> = zeroed();
        recs.task_cnt = tasks;
        self.rec.array_job_id = self.rec.job_id;
        self.rec.array_task_id = slurm_sys::NO_VAL;
        self.rec.array_recs = Box::into_raw(recs);
        self
    }
    /// A component of the heterogeneous job whose leader is `leader` (the
    /// leader itself when `leader` is its own id).
    pub fn het(mut self, leader: u32) -> FakeJob {
        self.rec.het_job_id = leader;
        self
    }
    pub fn ptr(&mut self) -> *mut job_record_t {
        &mut *self.rec
    }
    /// The job's priority, read under the lock.
    pub fn priority(&self) -> u32 {
        with_lock(|| self.rec.priority)
    }
}

// ---- helpers -----------------------------------------------------------------------

/// A plugin built by this `cargo test`, beside the test executable:
/// `target/<profile>/deps/lib<name>.so`.
pub fn plugin_path(lib_name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join(format!("lib{lib_name}.so"))
}

/// Open a plugin as slurmctld does (RTLD_NOW: every reference must resolve).
pub fn open_plugin(lib_name: &str) -> Library {
    let p = plugin_path(lib_name);
    // SAFETY: our own plugin; its init does nothing before `init()` is called.
    unsafe { Library::open(Some(&p), RTLD_NOW) }.unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A fresh scratch directory.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tally-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn nm(path: &Path, flag: &str) -> Vec<String> {
    let out = std::process::Command::new("nm").args(["-D", flag]).arg(path).output().expect("nm (binutils)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().last().map(str::to_string)).collect();
    names.sort();
    names
}

/// Check `nm -D`: exactly `want` defined, no slurmctld-only symbol referenced.
pub fn assert_exports(lib_name: &str, want: &[&str]) {
    let path = plugin_path(lib_name);
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(nm(&path, "--defined-only"), want, "exported symbols of {}", path.display());
    let undefined = nm(&path, "--undefined-only");
    for s in ["job_list", "lock_slurmctld", "unlock_slurmctld", "last_job_update"] {
        assert!(!undefined.iter().any(|u| u == s), "{s} referenced directly: client tools could not load the plugin");
    }
}

/// Check the identity symbols of a loaded plugin.
pub fn assert_identity(lib: &Library, plugin_type: &str) {
    // SAFETY: the identity symbols are NUL-terminated arrays and a u32.
    unsafe {
        let ty: Symbol<*const c_char> = lib.get(b"plugin_type").unwrap();
        assert_eq!(std::ffi::CStr::from_ptr(*ty).to_str().unwrap(), plugin_type);
        let name: Symbol<*const c_char> = lib.get(b"plugin_name").unwrap();
        assert!(std::ffi::CStr::from_ptr(*name).to_str().unwrap().starts_with("Tally"));
        let version: Symbol<*const u32> = lib.get(b"plugin_version").unwrap();
        assert_eq!(**version & 0xffffff, 0x160508);
    }
}
