//! The built `priority_tally.so` in a fake slurmctld (see tally-fakehost):
//! `init` / `priority_p_*` / `fini` on job records built here. One test
//! function drives the plugin: its globals live once per process.

use slurm_sys::{job_record_t, priority_factors_object_t, List, NICE_OFFSET};
use std::ffi::{c_int, c_void};
use std::time::Duration;
use tally_fakehost::{
    assert_exports, assert_identity, job, last_update, now, open_plugin, temp_dir, wait_until, with_lock, FakeJob, Host, LOCKS_TAKEN,
};

#[test]
fn plugin_in_a_fake_slurmctld() {
    let dir = temp_dir("fake-host-priority");
    let host = Host::load(&dir);
    let config = dir.join("tally.toml");
    std::fs::write(&config, "[cluster]\ngpus = 16\n[priority]\ncalc_period = \"1s\"\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n")
        .unwrap();
    std::env::set_var("TALLY_CONFIG", &config);

    // The jobs: busy has run 8 GPUs for an hour; both teams wait.
    let mut jobs = vec![
        job(1, "busy", "alice", "contract=2h", 8).running_since(3600),
        job(2, "busy", "alice", "contract=1h", 2),
        job(3, "idle", "bob", "contract=1h", 2),
        job(4, "idle", "bob", "", 2),                 // unallocated
        job(5, "nowhere", "carol", "contract=1h", 2), // account not in the tree
        {
            let mut h = job(6, "idle", "bob", "contract=1h", 1);
            h.rec.priority = 0; // held
            h
        },
    ];
    for j in &mut jobs {
        host.add_job(j);
    }
    // Only the plugin may set it from here on.
    host.touch(0);

    let lib = open_plugin("priority_tally");
    assert_identity(&lib, "priority/tally");
    // SAFETY: the plugin's functions with their C signatures (slurm-sys, plugin docs).
    unsafe {
        for f in [&b"priority_p_reconfig"[..], b"priority_p_set_assoc_usage", b"priority_p_calc_fs_factor"] {
            lib.get::<*const c_void>(f).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(f)));
        }
        let init = lib.get::<extern "C" fn() -> c_int>(b"init").unwrap();
        let fini = lib.get::<extern "C" fn() -> c_int>(b"fini").unwrap();
        let set = lib.get::<extern "C" fn(u32, *mut job_record_t) -> u32>(b"priority_p_set").unwrap();
        let factors = lib.get::<extern "C" fn(*mut c_void, u32) -> List>(b"priority_p_get_priority_factors_list").unwrap();
        let job_end = lib.get::<extern "C" fn(*mut job_record_t)>(b"priority_p_job_end").unwrap();
        let reconfig = lib.get::<extern "C" fn(bool)>(b"priority_p_reconfig").unwrap();
        let p = |j: &FakeJob| j.priority();

        // ---- init starts the thread; its first tick charges and re-ranks
        assert_eq!(init(), 0);
        wait_until("the thread to set priorities", Duration::from_secs(10), || p(&jobs[2]) != 1);
        assert!(LOCKS_TAKEN.load(std::sync::atomic::Ordering::SeqCst) > 0);
        assert!(last_update() > 0, "the scheduler was told");
        wait_until("idle to outrank busy", Duration::from_secs(10), || p(&jobs[2]) > p(&jobs[1]));
        assert!(p(&jobs[1]) >= 1 << 31, "allocated tier");
        assert!(p(&jobs[3]) < 1 << 31, "contract 0 is unallocated");
        assert!(p(&jobs[4]) < 1 << 31, "unknown account runs unallocated");
        assert!(p(&jobs[3]) > p(&jobs[4]), "within the unallocated tier, the tree's team ranks first");
        assert_eq!(p(&jobs[5]), 0, "held jobs stay held");

        // ---- priority_p_set on a new submission, an admin-set job, NULL
        let mut newcomer = job(7, "idle", "bob", "contract=30m", 4);
        assert!(with_lock(|| set(0, newcomer.ptr())) > p(&jobs[1]), "a new idle job goes ahead of busy's");
        let mut admin = job(8, "busy", "alice", "", 1);
        admin.rec.direct_set_prio = 1;
        admin.rec.priority = 4242;
        assert_eq!(with_lock(|| set(0, admin.ptr())), 4242);
        assert_eq!(set(0, std::ptr::null_mut()), 1);
        let mut bad = job(9, "idle", "bob", "contract=9h", 1);
        assert!(with_lock(|| set(0, bad.ptr())) < 1 << 31, "a refused contract runs unallocated");

        // ---- sprio's factors add up to the priority
        // Partition strings from Slurm's allocator, freed before the list
        // is read (slurmctld packs it after the job lock is released).
        let part_strings: Vec<_> = jobs
            .iter_mut()
            .map(|j| {
                let s = host.xstrdup("gpu");
                with_lock(|| j.rec.partition = s);
                s
            })
            .collect();
        let out = factors(std::ptr::null_mut(), 0);
        assert!(!out.is_null());
        with_lock(|| {
            for (j, s) in jobs.iter_mut().zip(&part_strings) {
                j.rec.partition = tally_fakehost::leak("debug");
                host.xfree(*s);
            }
        });
        for o in host.list_items(out) {
            let o = &*o.cast::<priority_factors_object_t>();
            assert!(!part_strings.contains(&o.partition), "job {}: sprio's object points at the job's partition string", o.job_id);
            // sprio's PARTITION column: the job's, read after the job's own string is gone.
            assert!(!o.partition.is_null(), "job {}: no partition for sprio", o.job_id);
            assert_eq!(std::ffi::CStr::from_ptr(o.partition).to_str(), Ok("gpu"), "job {}", o.job_id);
        }
        assert_eq!(host.list_count(out), 4, "pending, not held: jobs 2, 3, 4, 5");
        for o in host.list_items(out) {
            let o = &*o.cast::<priority_factors_object_t>();
            let sum = o.priority_age
                + o.priority_assoc
                + o.priority_fs
                + o.priority_js
                + o.priority_part
                + o.priority_qos
                + (i64::from(o.priority_site) - i64::from(NICE_OFFSET)) as f64
                - (i64::from(o.nice) - i64::from(NICE_OFFSET)) as f64;
            let j = jobs.iter().find(|j| j.rec.job_id == o.job_id).unwrap();
            assert_eq!(sum.max(1.0), f64::from(p(j)), "job {}", o.job_id);
        }
        host.list_destroy(out);

        // ---- job end charges the last seconds; a broken reconfigure keeps the old config
        with_lock(|| {
            jobs[0].rec.job_state = slurm_sys::JOB_COMPLETE;
            jobs[0].rec.end_time = now();
        });
        with_lock(|| job_end(jobs[0].ptr()));
        // A good reconfigure (recalculating hourly from now on) is taken
        // and becomes the active copy.
        let hourly = "[cluster]\ngpus = 16\n[priority]\ncalc_period = \"1h\"\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n";
        std::fs::write(&config, hourly).unwrap();
        reconfig(false);
        let active = dir.join("tally/tally.toml.active");
        wait_until("the good config to be taken", Duration::from_secs(10), || std::fs::read_to_string(&active).is_ok_and(|a| a.contains("\"1h\"")));
        // Hourly: nothing recalculates by itself now (a job's priority
        // reset to 1 stays 1) ...
        std::thread::sleep(Duration::from_millis(1500));
        with_lock(|| jobs[2].rec.priority = 1);
        std::thread::sleep(Duration::from_millis(2500));
        assert_eq!(p(&jobs[2]), 1, "no recalculation without a reconfigure");
        // ... so only the broken reconfigure's round sets it again, and only
        // if that round still has the last good config in force.
        std::fs::write(&config, "[accounts.busy]\nshare = 500\n").unwrap();
        reconfig(false);
        wait_until("the round after a broken reconfigure to recalculate", Duration::from_secs(10), || p(&jobs[2]) != 1);
        assert!(p(&jobs[2]) > p(&jobs[1]), "last good config still in force");
        assert!(std::fs::read_to_string(&active).unwrap().contains("\"1h\""), "a broken config is never the active copy");

        // ---- fini joins the thread and saves the ledger
        assert_eq!(fini(), 0);
        let state = std::fs::read_to_string(dir.join("tally/ledger.state")).expect("ledger saved");
        assert!(state.starts_with("tally-state 3\n"), "{state}");
        // The config it ran on is the active copy job_submit and preempt follow.
        let active = std::fs::read_to_string(dir.join("tally/tally.toml.active")).expect("active copy");
        assert!(active.contains("[accounts.idle]"), "{active}");
        let busy_gpu_s: f64 = state
            .lines()
            .filter(|l| l.starts_with("use ") && l.split(' ').nth(2) == Some("busy"))
            .map(|l| l.split(' ').nth(4).unwrap().parse::<f64>().unwrap())
            .sum();
        assert!((8.0 * 3600.0..8.0 * 3700.0).contains(&busy_gpu_s), "busy charged {busy_gpu_s} GPU-s");

        // ---- a restart with a broken tally.toml runs on the last good copy
        // and loads the ledger: busy still ranks below idle at once
        std::fs::write(&config, "[accounts.busy]\nshare = 500\n").unwrap();
        assert_eq!(init(), 0);
        let mut a = job(10, "busy", "alice", "contract=1h", 1);
        let mut b = job(11, "idle", "bob", "contract=1h", 1);
        assert!(with_lock(|| set(0, b.ptr())) > with_lock(|| set(0, a.ptr())));
        assert_eq!(fini(), 0);

        // ---- [planner] on: its thread plans the queue and sets the plan bit
        // of the pending jobs it starts now (all fit on an empty cluster),
        // under the write lock; held jobs stay held; sprio shows the bit.
        std::fs::write(
            &config,
            "[cluster]\ngpus = 16\n[priority]\ncalc_period = \"1h\"\n[planner]\nenabled = true\ninterval = \"1s\"\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n",
        )
        .unwrap();
        let locks = LOCKS_TAKEN.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(init(), 0);
        const PLAN: u32 = 1 << 30;
        wait_until("the planner to mark the queue", Duration::from_secs(15), || jobs[1..5].iter().all(|j| p(j) & PLAN != 0));
        assert!(LOCKS_TAKEN.load(std::sync::atomic::Ordering::SeqCst) > locks);
        assert_eq!(p(&jobs[5]), 0, "held jobs stay held");
        assert!(p(&jobs[3]) < 1 << 31, "the plan bit never lifts unallocated work into the allocated tier");
        assert_eq!(with_lock(|| set(0, jobs[2].ptr())) & PLAN, PLAN, "priority_p_set reads the last plan");
        let out = factors(std::ptr::null_mut(), 0);
        for o in host.list_items(out) {
            let o = &*o.cast::<priority_factors_object_t>();
            assert_eq!(o.priority_part, f64::from(PLAN), "job {}: PARTITION is the plan bit", o.job_id);
        }
        host.list_destroy(out);
        assert_eq!(fini(), 0);

        // ---- a corrupt ledger is set aside, not fatal
        std::fs::write(dir.join("tally/ledger.state"), "garbage").unwrap();
        assert_eq!(init(), 0);
        assert_eq!(fini(), 0);
        let aside = std::fs::read_dir(dir.join("tally"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("ledger.state.corrupt-"));
        assert_eq!(aside.count(), 1);

        // ---- a ledger that cannot be read now (here: a directory) is left
        // alone and never saved over; once readable, charging goes on
        let ledger = dir.join("tally/ledger.state");
        let _ = std::fs::remove_file(&ledger);
        std::fs::create_dir(&ledger).unwrap();
        std::fs::write(ledger.join("keep"), "what the admin must not lose").unwrap();
        // Recalculating hourly, no planner: a job's priority reset to 1 is
        // set again only by the recalculations init and reconfigure run.
        std::fs::write(&config, hourly).unwrap();
        with_lock(|| jobs[2].rec.priority = 1);
        assert_eq!(init(), 0);
        wait_until("init's recalculation", Duration::from_secs(10), || p(&jobs[2]) != 1);
        // A recalculation with the ledger unreadable: saving held.
        with_lock(|| jobs[2].rec.priority = 1);
        reconfig(false);
        wait_until("a recalculation with the ledger unreadable", Duration::from_secs(10), || p(&jobs[2]) != 1);
        assert!(ledger.join("keep").exists(), "held: not saved over");
        std::fs::remove_dir_all(&ledger).unwrap();
        reconfig(false); // the next tick reads again (nothing there now) and saves
        wait_until("the ledger to be saved again", Duration::from_secs(10), || ledger.is_file());
        assert_eq!(fini(), 0);
        assert!(std::fs::read_to_string(&ledger).unwrap().starts_with("tally-state 3\n"));
    }
}

#[test]
fn exports_exactly_the_plugin_symbols() {
    assert_exports(
        "priority_tally",
        &[
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
        ],
    );
}
