//! The built `priority_tally.so` in a fake slurmctld, the way Slurm's own
//! `testsuite/python/scripts/prio_multifactor.c` "sets up some fake system":
//! this executable defines slurmctld's globals (`job_list`,
//! `last_job_update`, `lock_slurmctld`, `unlock_slurmctld`; exported with
//! `--export-dynamic` by build.rs), loads the real `libslurmfull.so` for
//! lists, memory and logging, then drives `init` / `priority_p_*` / `fini`
//! on job records built here.
//!
//! One test function: the plugin's globals live once per process.

use libloading::os::unix::{Library, Symbol, RTLD_GLOBAL, RTLD_NOW};
use slurm_sys::{job_details, job_record_t, priority_factors_object_t, slurm_conf_t, slurmctld_lock_t, time_t, List, NICE_OFFSET};
use std::ffi::{c_char, c_int, c_void, CString};
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---- the fake slurmctld ------------------------------------------------------

#[no_mangle]
pub static mut job_list: List = std::ptr::null_mut();
#[no_mangle]
pub static mut last_job_update: time_t = 0;

static LOCKED: Mutex<bool> = Mutex::new(false);
static FREED: Condvar = Condvar::new();
static LOCKS_TAKEN: AtomicU64 = AtomicU64::new(0);
static LAST_LEVELS: AtomicI64 = AtomicI64::new(-1);

#[no_mangle]
pub extern "C" fn lock_slurmctld(l: slurmctld_lock_t) {
    let mut g = LOCKED.lock().unwrap();
    while *g {
        g = FREED.wait(g).unwrap();
    }
    *g = true;
    LOCKS_TAKEN.fetch_add(1, Ordering::SeqCst);
    LAST_LEVELS.store(i64::from(l.job) * 100 + i64::from(l.part), Ordering::SeqCst);
}

#[no_mangle]
pub extern "C" fn unlock_slurmctld(_l: slurmctld_lock_t) {
    *LOCKED.lock().unwrap() = false;
    FREED.notify_all();
}

/// Hold the fake job lock while the test reads or changes jobs.
fn with_lock<T>(f: impl FnOnce() -> T) -> T {
    let l = slurmctld_lock_t { conf: 0, job: 2, node: 0, part: 0, fed: 0 };
    lock_slurmctld(l);
    let v = f();
    unlock_slurmctld(l);
    v
}

// ---- helpers -------------------------------------------------------------------

const LIBSLURMFULL: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so";

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn plugin_path() -> PathBuf {
    // Built by this `cargo test` beside the test executable:
    // target/debug/deps/{fake_host-<hash>, libpriority_tally.so}.
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("libpriority_tally.so")
}

fn leak(s: &str) -> *mut c_char {
    CString::new(s).unwrap().into_raw()
}

struct FakeJob {
    rec: Box<job_record_t>,
}

fn zeroed<T>() -> Box<T> {
    // SAFETY: the C records are plain data; all-zero is what xmalloc gives Slurm.
    unsafe { Box::new(MaybeUninit::<T>::zeroed().assume_init()) }
}

fn job(id: u32, account: &str, user: &str, comment: &str, gpus: u32) -> FakeJob {
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
    FakeJob { rec }
}

impl FakeJob {
    fn running_since(mut self, secs_ago: i64) -> FakeJob {
        self.rec.job_state = 1;
        self.rec.start_time = now() - secs_ago;
        self
    }
    fn ptr(&mut self) -> *mut job_record_t {
        &mut *self.rec
    }
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---- the test --------------------------------------------------------------------

#[test]
fn plugin_in_a_fake_slurmctld() {
    // SAFETY (whole test): the symbols are looked up by their C names and used
    // with their C signatures from slurm-sys; job records outlive the plugin's use.
    unsafe {
        let slurm = Library::open(Some(LIBSLURMFULL), RTLD_NOW | RTLD_GLOBAL).unwrap_or_else(|e| {
            panic!("{LIBSLURMFULL} is needed for the fake host ({e}); install Slurm with `bash testbed/install.sh`")
        });
        let list_create: Symbol<unsafe extern "C" fn(*const c_void) -> List> = slurm.get(b"list_create").unwrap();
        let list_append: Symbol<unsafe extern "C" fn(List, *mut c_void) -> *mut c_void> = slurm.get(b"list_append").unwrap();
        let list_count: Symbol<unsafe extern "C" fn(List) -> c_int> = slurm.get(b"list_count").unwrap();
        let list_destroy: Symbol<unsafe extern "C" fn(List)> = slurm.get(b"list_destroy").unwrap();
        let list_iterator_create: Symbol<unsafe extern "C" fn(List) -> *mut c_void> = slurm.get(b"list_iterator_create").unwrap();
        let list_next: Symbol<unsafe extern "C" fn(*mut c_void) -> *mut c_void> = slurm.get(b"list_next").unwrap();
        let list_iterator_destroy: Symbol<unsafe extern "C" fn(*mut c_void)> = slurm.get(b"list_iterator_destroy").unwrap();
        let conf: Symbol<*mut slurm_conf_t> = slurm.get(b"slurm_conf").unwrap();

        // StateSaveLocation and tally.toml of the fake cluster.
        let dir = std::env::temp_dir().join(format!("tally-fake-host-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        (**conf).state_save_location = leak(dir.to_str().unwrap());
        let config = dir.join("tally.toml");
        std::fs::write(
            &config,
            "[cluster]\ngpus = 16\n[priority]\ncalc_period = \"1s\"\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n",
        )
        .unwrap();
        std::env::set_var("TALLY_CONFIG", &config);

        // The jobs: busy has run 8 GPUs for an hour; both teams wait.
        let mut jobs = vec![
            job(1, "busy", "alice", "contract=2h", 8).running_since(3600),
            job(2, "busy", "alice", "contract=1h", 2),
            job(3, "idle", "bob", "contract=1h", 2),
            job(4, "idle", "bob", "", 2),                 // unallocated
            job(5, "nowhere", "carol", "contract=1h", 2), // account not in the tree
        ];
        let held = {
            let mut h = job(6, "idle", "bob", "contract=1h", 1);
            h.rec.priority = 0;
            h
        };
        jobs.push(held);
        job_list = list_create(std::ptr::null());
        for j in &mut jobs {
            list_append(job_list, j.ptr().cast());
        }

        // ---- load and identity
        let lib = Library::open(Some(plugin_path()), RTLD_NOW).unwrap_or_else(|e| panic!("{}: {e}", plugin_path().display()));
        let ty: Symbol<*const [u8; 15]> = lib.get(b"plugin_type").unwrap();
        assert_eq!(&**ty, b"priority/tally\0");
        let name: Symbol<*const u8> = lib.get(b"plugin_name").unwrap();
        assert!(std::ffi::CStr::from_ptr((*name).cast()).to_str().unwrap().starts_with("Tally"));
        let version: Symbol<*const u32> = lib.get(b"plugin_version").unwrap();
        assert_eq!(**version & 0xffffff, 0x160508);
        for f in [
            &b"init"[..],
            b"fini",
            b"priority_p_set",
            b"priority_p_reconfig",
            b"priority_p_set_assoc_usage",
            b"priority_p_calc_fs_factor",
            b"priority_p_get_priority_factors_list",
            b"priority_p_job_end",
        ] {
            lib.get::<*const c_void>(f).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(f)));
        }
        let init: Symbol<extern "C" fn() -> c_int> = lib.get(b"init").unwrap();
        let fini: Symbol<extern "C" fn() -> c_int> = lib.get(b"fini").unwrap();
        let set: Symbol<extern "C" fn(u32, *mut job_record_t) -> u32> = lib.get(b"priority_p_set").unwrap();
        let factors: Symbol<extern "C" fn(*mut c_void, u32) -> List> = lib.get(b"priority_p_get_priority_factors_list").unwrap();
        let job_end: Symbol<extern "C" fn(*mut job_record_t)> = lib.get(b"priority_p_job_end").unwrap();
        let reconfig: Symbol<extern "C" fn(bool)> = lib.get(b"priority_p_reconfig").unwrap();

        // ---- init starts the thread; its first tick charges and re-ranks
        assert_eq!(init(), 0);
        let p = |j: &FakeJob| with_lock(|| j.rec.priority);
        wait_until("the thread to set priorities", Duration::from_secs(10), || p(&jobs[2]) != 1);
        assert!(LOCKS_TAKEN.load(Ordering::SeqCst) > 0);
        assert!(last_job_update > 0, "the scheduler was told");
        // The idle team's allocated job first, then busy's, then unallocated.
        wait_until("idle to outrank busy", Duration::from_secs(10), || p(&jobs[2]) > p(&jobs[1]));
        assert!(p(&jobs[1]) >= 1 << 31, "allocated tier");
        assert!(p(&jobs[3]) < 1 << 31, "contract 0 is unallocated");
        assert!(p(&jobs[4]) < 1 << 31, "unknown account runs unallocated");
        assert!(p(&jobs[3]) > p(&jobs[4]), "within the unallocated tier, the tree's team ranks first");
        assert_eq!(p(&jobs[5]), 0, "held jobs stay held");

        // ---- priority_p_set on a new submission, an admin-set job, NULL
        let mut newcomer = job(7, "idle", "bob", "contract=30m", 4);
        let v = with_lock(|| set(0, newcomer.ptr()));
        assert!(v > p(&jobs[1]), "a new idle job goes ahead of busy's");
        let mut admin = job(8, "busy", "alice", "", 1);
        admin.rec.direct_set_prio = 1;
        admin.rec.priority = 4242;
        assert_eq!(with_lock(|| set(0, admin.ptr())), 4242);
        assert_eq!(set(0, std::ptr::null_mut()), 1);
        let mut bad = job(9, "idle", "bob", "contract=9h", 1);
        assert!(with_lock(|| set(0, bad.ptr())) < 1 << 31, "a refused contract runs unallocated");

        // ---- sprio's factors add up to the priority
        let list = with_lock(std::ptr::null_mut::<c_void>); // no request filter
        let out = factors(list, 0);
        assert!(!out.is_null());
        assert_eq!(list_count(out), 4, "pending, not held: jobs 2, 3, 4, 5");
        let it = list_iterator_create(out);
        loop {
            let o = list_next(it).cast::<priority_factors_object_t>();
            if o.is_null() {
                break;
            }
            let o = &*o;
            let sum = o.priority_age + o.priority_assoc + o.priority_fs + o.priority_js + o.priority_part + o.priority_qos
                + (i64::from(o.priority_site) - i64::from(NICE_OFFSET)) as f64
                - (i64::from(o.nice) - i64::from(NICE_OFFSET)) as f64;
            let j = jobs.iter().find(|j| j.rec.job_id == o.job_id).unwrap();
            assert_eq!(sum.max(1.0), f64::from(p(j)), "job {}", o.job_id);
        }
        list_iterator_destroy(it);
        list_destroy(out);

        // ---- job end charges the last seconds; reconfigure with a broken file keeps the old config
        with_lock(|| {
            jobs[0].rec.job_state = 3;
            jobs[0].rec.end_time = now();
        });
        with_lock(|| job_end(jobs[0].ptr()));
        std::fs::write(&config, "[accounts.busy]\nshare = 500\n").unwrap();
        reconfig(false);
        std::thread::sleep(Duration::from_millis(1500));
        let before = p(&jobs[2]);
        assert!(before > p(&jobs[1]), "last good config still in force");

        // ---- fini joins the thread and saves the ledger
        assert_eq!(fini(), 0);
        let state = std::fs::read_to_string(dir.join("tally/ledger.state")).expect("ledger saved");
        assert!(state.starts_with("tally-state 1\n"), "{state}");
        let busy_gpu_s: f64 = state
            .lines()
            .filter(|l| l.starts_with("use ") && l.split(' ').nth(2) == Some("busy"))
            .map(|l| l.split(' ').nth(4).unwrap().parse::<f64>().unwrap())
            .sum();
        assert!((8.0 * 3600.0..8.0 * 3700.0).contains(&busy_gpu_s), "busy charged {busy_gpu_s} GPU-s");

        // ---- a restart loads the ledger: busy still ranks below idle at once
        std::fs::write(&config, "[cluster]\ngpus = 16\n[priority]\ncalc_period = \"1h\"\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n").unwrap();
        assert_eq!(init(), 0);
        let mut a = job(10, "busy", "alice", "contract=1h", 1);
        let mut b = job(11, "idle", "bob", "contract=1h", 1);
        assert!(with_lock(|| set(0, b.ptr())) > with_lock(|| set(0, a.ptr())));
        assert_eq!(fini(), 0);

        // ---- a corrupt ledger is set aside, not fatal
        std::fs::write(dir.join("tally/ledger.state"), "garbage").unwrap();
        assert_eq!(init(), 0);
        assert_eq!(fini(), 0);
        let aside = std::fs::read_dir(dir.join("tally")).unwrap().filter(|e| {
            e.as_ref().unwrap().file_name().to_string_lossy().starts_with("ledger.state.corrupt-")
        });
        assert_eq!(aside.count(), 1);
        drop(lib);
    }
}

#[test]
fn exports_exactly_the_plugin_symbols() {
    let out = std::process::Command::new("nm").args(["-D", "--defined-only"]).arg(plugin_path()).output().expect("nm (binutils)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().nth(2).map(str::to_string)).collect();
    names.sort();
    let mut want = vec![
        "fini",
        "init",
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "priority_p_calc_fs_factor",
        "priority_p_get_priority_factors_list",
        "priority_p_job_end",
        "priority_p_reconfig",
        "priority_p_set",
        "priority_p_set_assoc_usage",
    ];
    want.sort();
    assert_eq!(names, want);
    // And no hard reference to slurmctld-only symbols (client tools load us too).
    let out = std::process::Command::new("nm").args(["-D", "--undefined-only"]).arg(plugin_path()).output().unwrap();
    let undefined = String::from_utf8_lossy(&out.stdout);
    for s in ["job_list", "lock_slurmctld", "unlock_slurmctld", "last_job_update"] {
        assert!(!undefined.lines().any(|l| l.split_whitespace().last() == Some(s)), "{s} referenced directly");
    }
}
