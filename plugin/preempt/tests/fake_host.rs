//! `preempt_tally.so` in a fake slurmctld: the rule and the victim order on
//! job records built here, with a ledger saved as priority/tally saves it.

use slurm_sys::{job_queue_rec_t, job_record_t, PREEMPT_DATA_ENABLED, PREEMPT_DATA_GRACE_TIME, PREEMPT_DATA_MODE, PREEMPT_DATA_PRIO, PREEMPT_MODE_REQUEUE};
use std::ffi::{c_int, c_void};
use tally_fakehost::{assert_exports, assert_identity, job, now, open_plugin, temp_dir, with_lock, zeroed, FakeJob, Host};

#[test]
fn the_rule_in_a_fake_slurmctld() {
    let dir = temp_dir("fake-host-preempt");
    let _host = Host::load(&dir);
    let config = dir.join("tally.toml");
    std::fs::write(&config, "[cluster]\ngpus = 16\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n").unwrap();
    std::env::set_var("TALLY_CONFIG", &config);
    // busy used 100 GPU-hours in the last hour: it ranks below idle.
    std::fs::create_dir_all(dir.join("tally")).unwrap();
    let bucket = now() as u64 / 3600;
    std::fs::write(dir.join("tally/ledger.state"), format!("tally-state 1\nsaved_at {}\ngeometry 3600 604800\nuse {bucket} busy alice 360000\n", now())).unwrap();

    let lib = open_plugin("preempt_tally");
    assert_identity(&lib, "preempt/tally");
    // SAFETY: the plugin's functions with their C signatures (slurmctld/preempt.c).
    unsafe {
        let init = lib.get::<extern "C" fn() -> c_int>(b"init").unwrap();
        let fini = lib.get::<extern "C" fn() -> c_int>(b"fini").unwrap();
        let preemptable = lib.get::<extern "C" fn(*mut job_record_t, *mut job_record_t) -> bool>(b"preempt_p_preemptable").unwrap();
        let check = lib.get::<extern "C" fn(*mut job_queue_rec_t, *mut job_queue_rec_t) -> bool>(b"preempt_p_job_preempt_check").unwrap();
        let get_data = lib.get::<extern "C" fn(*mut job_record_t, u32, *mut c_void) -> c_int>(b"preempt_p_get_data").unwrap();
        assert_eq!(init(), 0);

        let mut p = job(1, "idle", "bob", "contract=15m", 2); // a debug job of the under-used team
        let mut may = |v: &mut FakeJob| with_lock(|| preemptable(v.ptr(), p.ptr()));
        let mut unalloc = job(10, "busy", "alice", "", 2).running_since(3600);
        let mut inside = job(11, "busy", "alice", "contract=8h", 2).running_since(3600);
        let mut past_resumable = job(12, "busy", "alice", "contract=1m,resumable", 2).running_since(3600);
        let mut past = job(13, "busy", "alice", "contract=1m", 2).running_since(3600);
        let mut own_team_past = job(14, "idle", "bob", "contract=1m", 2).running_since(3600);
        let mut pending = job(15, "busy", "alice", "", 2);
        assert!(may(&mut unalloc), "unallocated work is preemptible");
        assert!(!may(&mut inside), "never inside a contract");
        assert!(may(&mut past_resumable), "past contract, team below");
        assert!(may(&mut past));
        assert!(!may(&mut own_team_past), "past contract but not below the preemptor's team");
        assert!(!may(&mut pending), "pending jobs are not victims");
        let mut itself = job(1, "idle", "bob", "contract=15m", 2);
        assert!(!with_lock(|| preemptable(itself.ptr(), itself.ptr())), "preemptee == preemptor");
        let mut free_rider = job(2, "idle", "bob", "contract=0", 2);
        assert!(!with_lock(|| preemptable(unalloc.ptr(), free_rider.ptr())), "unallocated jobs preempt nobody");
        assert!(!preemptable(std::ptr::null_mut(), p.ptr()));

        // The queue-order hint follows the rule (a pending preemptee: no).
        let mut qa: Box<job_queue_rec_t> = zeroed();
        let mut qb: Box<job_queue_rec_t> = zeroed();
        qa.job_ptr = p.ptr();
        qb.job_ptr = pending.ptr();
        assert!(!with_lock(|| check(&mut *qa, &mut *qb)));
        qb.job_ptr = unalloc.ptr();
        assert!(with_lock(|| check(&mut *qa, &mut *qb)));

        // get_data: enabled, requeue, no grace, victim order.
        let mut enabled = false;
        assert_eq!(get_data(std::ptr::null_mut(), PREEMPT_DATA_ENABLED, (&mut enabled as *mut bool).cast()), 0);
        assert!(enabled);
        let mut mode: u16 = 0;
        assert_eq!(get_data(unalloc.ptr(), PREEMPT_DATA_MODE, (&mut mode as *mut u16).cast()), 0);
        assert_eq!(mode, PREEMPT_MODE_REQUEUE);
        let mut grace: u32 = 99;
        assert_eq!(get_data(unalloc.ptr(), PREEMPT_DATA_GRACE_TIME, (&mut grace as *mut u32).cast()), 0);
        assert_eq!(grace, 0);
        let rank = |j: &mut FakeJob| {
            let mut r: u32 = 0;
            assert_eq!(with_lock(|| get_data(j.ptr(), PREEMPT_DATA_PRIO, (&mut r as *mut u32).cast())), 0);
            r
        };
        let order = [rank(&mut unalloc), rank(&mut past_resumable), rank(&mut past), rank(&mut inside)];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "unallocated < resumable < past contract < inside: {order:?}");
        assert_eq!(get_data(unalloc.ptr(), 77, (&mut grace as *mut u32).cast()), -1, "unknown request");
        assert_eq!(fini(), 0);
    }
}

#[test]
fn exports_exactly_the_plugin_symbols() {
    assert_exports(
        "preempt_tally",
        &["fini", "init", "plugin_name", "plugin_type", "plugin_version", "preempt_p_get_data", "preempt_p_job_preempt_check", "preempt_p_preemptable"],
    );
}
