//! `preempt_tally.so` in a fake slurmctld: the rule and the victim order on
//! job records built here and put in the fake `job_list`.

use slurm_sys::{
    job_queue_rec_t, job_record_t, PREEMPT_DATA_ENABLED, PREEMPT_DATA_GRACE_TIME, PREEMPT_DATA_MODE, PREEMPT_DATA_PRIO, PREEMPT_MODE_REQUEUE,
};
use std::ffi::{c_int, c_void};
use std::time::Duration;
use tally_fakehost::{assert_exports, assert_identity, job, now, open_plugin, temp_dir, wait_until, with_lock, zeroed, FakeJob, Host, LOCKS_TAKEN};

#[test]
fn the_rule_in_a_fake_slurmctld() {
    let dir = temp_dir("fake-host-preempt");
    let host = Host::load(&dir);
    let config = dir.join("tally.toml");
    // 20 GPUs, busy and idle 50%: a rate of 10 GPUs each.
    std::fs::write(&config, "[cluster]\ngpus = 20\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n").unwrap();
    std::env::set_var("TALLY_CONFIG", &config);

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

        // busy runs 14 allocated GPUs (above its rate of 10), idle runs 8 and
        // waits with a debug job: idle may take 4 GPUs back from busy (its
        // resumable job and its debug job past their contracts, the rule
        // counting both), and time-slice its own job past its contract.
        let mut p = job(1, "idle", "bob", "contract=15m", 2);
        let mut unalloc = job(10, "busy", "alice", "", 2).running_since(3600);
        let mut inside = job(11, "busy", "alice", "contract=8h", 6).running_since(3600);
        let mut past_resumable = job(12, "busy", "alice", "contract=1m,resumable", 2).running_since(3600);
        let mut past = job(13, "busy", "alice", "contract=1m", 4).running_since(3600);
        let mut past_debug = job(17, "busy", "alice", "contract=1m", 2).running_since(3600);
        let mut own_team_past = job(14, "idle", "bob", "contract=1m", 4).running_since(3600);
        let mut own_team_resumable = job(16, "idle", "bob", "contract=1m,resumable", 4).running_since(3600);
        let mut pending = job(15, "busy", "alice", "", 2);
        for j in [
            &mut p,
            &mut unalloc,
            &mut inside,
            &mut past_resumable,
            &mut past,
            &mut past_debug,
            &mut own_team_past,
            &mut own_team_resumable,
            &mut pending,
        ] {
            host.add_job(j);
        }
        // As slurmctld asks: from inside its own walk of job_list.
        let ask = |v: &mut FakeJob, p: &mut FakeJob| {
            let (vp, pp) = (v.ptr(), p.ptr());
            host.inside_job_list_walk(|| preemptable(vp, pp))
        };
        // The plugin's thread copies the jobs every second.
        // (A copy may race the jobs' creation: wait for one with the last.)
        wait_until("the preemption thread to see the jobs", Duration::from_secs(10), || {
            ask(&mut unalloc, &mut p) && ask(&mut own_team_resumable, &mut p)
        });
        let mut may = |v: &mut FakeJob| ask(v, &mut p);
        assert!(may(&mut unalloc), "unallocated work is preemptible");
        assert!(!may(&mut inside), "never inside a contract");
        assert!(may(&mut past_resumable), "past contract, busy stays at its rate");
        assert!(!may(&mut past), "not resumable: never thrown away past its contract");
        assert!(may(&mut past_debug), "a debug job past its contract: no shield, whether it checkpoints or not");
        assert!(!may(&mut own_team_past), "nor time-sliced by its own team's debug job");
        assert!(may(&mut own_team_resumable), "the debug job time-slices its own team's job past its contract");
        assert!(!may(&mut pending), "pending jobs are not victims");
        let mut itself = job(1, "idle", "bob", "contract=15m", 2);
        assert!(!with_lock(|| preemptable(itself.ptr(), itself.ptr())), "preemptee == preemptor");
        let mut free_rider = job(2, "idle", "bob", "contract=0", 2);
        assert!(!with_lock(|| preemptable(unalloc.ptr(), free_rider.ptr())), "unallocated jobs preempt nobody");
        assert!(!preemptable(std::ptr::null_mut(), p.ptr()));
        // A second preemptor asked before the next copy: the first one's
        // victim counts as gone, busy would fall below its rate.
        let mut p2 = job(3, "idle", "bob", "contract=15m", 2);
        host.add_job(&mut p2);
        assert!(!ask(&mut past_resumable, &mut p2), "claimed by the first preemptor already");
        assert!(ask(&mut unalloc, &mut p2), "unallocated work stays preemptible");

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
        assert_eq!(get_data(past_resumable.ptr(), PREEMPT_DATA_GRACE_TIME, (&mut grace as *mut u32).cast()), 0);
        assert_eq!(grace, 0);
        // Slurm asks the grace time as it preempts: the run is noted, and the
        // thread writes the note for the priority plugin.
        let notes = dir.join("tally").join("preempted.state");
        let want = format!("preempted 12 {} ", past_resumable.rec.start_time);
        wait_until("the note of job 12's preempted run", Duration::from_secs(10), || {
            std::fs::read_to_string(&notes).is_ok_and(|t| t.starts_with("tally-preempted 1\n") && t.contains(&want))
        });
        let rank = |j: &mut FakeJob| {
            let mut r: u32 = 0;
            assert_eq!(with_lock(|| get_data(j.ptr(), PREEMPT_DATA_PRIO, (&mut r as *mut u32).cast())), 0);
            r
        };
        let order = [rank(&mut unalloc), rank(&mut past_resumable), rank(&mut inside)];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "unallocated < resumable < inside: {order:?}");
        assert_eq!(rank(&mut past) >> 30, 3, "a long job that cannot checkpoint is no victim before the maximum");
        assert_eq!(get_data(unalloc.ptr(), 77, (&mut grace as *mut u32).cast()), -1, "unknown request");

        // No job changed (last_job_update as it was): the thread rebuilds
        // its snapshot from its last copy and takes no lock; a change is
        // copied within a second or two.
        let locks = || LOCKS_TAKEN.load(std::sync::atomic::Ordering::SeqCst);
        host.touch(now() - 100);
        std::thread::sleep(Duration::from_millis(2500));
        let before = locks();
        std::thread::sleep(Duration::from_millis(3000));
        assert_eq!(locks(), before, "no job changed: no copy");
        host.touch(now());
        wait_until("a copy after the change", Duration::from_secs(5), || locks() > before);
        assert_eq!(fini(), 0);
    }
}

#[test]
fn exports_exactly_the_plugin_symbols() {
    assert_exports(
        "preempt_tally",
        &[
            "fini",
            "init",
            "plugin_name",
            "plugin_type",
            "plugin_version",
            "preempt_p_get_data",
            "preempt_p_job_preempt_check",
            "preempt_p_preemptable",
        ],
    );
}
