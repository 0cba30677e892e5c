//! The built `priority_tally.so` in a fake slurmctld (see tally-fakehost)
//! classes a job by what it will hold (docs/design.md, rule 8): an
//! exclusive job, a heterogeneous job and an array's record of pending
//! tasks that look like debug jobs get no debug lane; a plain debug job
//! does. Its own process: the plugin's globals live once per process.

use slurm_sys::job_record_t;
use std::ffi::c_int;
use std::time::Duration;
use tally_fakehost::{job, open_plugin, temp_dir, wait_until, with_lock, FakeJob, Host};

/// The need field (bits 29..28) of a priority: 3 = the debug lane.
fn need(priority: u32) -> u32 {
    (priority >> 28) & 3
}
const LANE: u32 = 3;

#[test]
fn jobs_that_will_hold_more_than_they_show_get_no_debug_lane() {
    let dir = temp_dir("fake-host-priority-classes");
    let host = Host::load(&dir);
    let config = dir.join("tally.toml");
    // Two teams of 8 GPUs' rate each: a debug allowance of 4 GPUs (two
    // debug jobs of 2); nodes
    // of 8 GPUs (the fake host has no node table).
    std::fs::write(
        &config,
        "[cluster]\ngpus = 16\ngpus_per_node = 8\n[priority]\ncalc_period = \"1s\"\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n",
    )
    .unwrap();
    std::env::set_var("TALLY_CONFIG", &config);

    // Every one of them shows at most 2 GPUs and a 10-minute contract.
    let mut jobs = vec![
        job(1, "idle", "bob", "contract=10m", 2).exclusive(),     // holds a whole node: 8
        job(2, "idle", "bob", "contract=10m", 1).array_record(5), // 5 tasks: 5 GPUs
        job(3, "idle", "bob", "contract=10m", 2).het(3),          // leader of 2 + 8
        job(4, "idle", "bob", "contract=10m", 8).het(3),
        job(5, "idle", "bob", "contract=10m", 1), // a debug job: the lane
    ];
    for j in &mut jobs {
        host.add_job(j);
    }
    let lib = open_plugin("priority_tally");
    // SAFETY: the plugin's functions with their C signatures (slurm-sys, plugin docs).
    unsafe {
        let init = lib.get::<extern "C" fn() -> c_int>(b"init").unwrap();
        let fini = lib.get::<extern "C" fn() -> c_int>(b"fini").unwrap();
        let set = lib.get::<extern "C" fn(u32, *mut job_record_t) -> u32>(b"priority_p_set").unwrap();
        let p = |j: &FakeJob| j.priority();

        assert_eq!(init(), 0);
        wait_until("the thread to set priorities", Duration::from_secs(10), || jobs.iter().all(|j| p(j) != 1));
        let needs: Vec<u32> = jobs.iter().map(|j| need(p(j))).collect();
        assert_eq!(needs.iter().map(|&n| n == LANE).collect::<Vec<_>>(), [false, false, false, false, true], "needs {needs:?}");
        assert!(jobs.iter().all(|j| p(j) >= 1 << 31), "all allocated");
        // The array's record is still a debug job (each task is): quick.
        assert_eq!(p(&jobs[1]) & 1, 1, "the record's tasks are debug jobs");
        assert_eq!(p(&jobs[0]) & 1, 0, "the exclusive job is not");

        // priority_p_set on new submissions: an exclusive job and an
        // array's record are classed the same way at once.
        let mut exclusive = job(6, "idle", "bob", "contract=10m", 1).exclusive();
        assert_ne!(need(with_lock(|| set(0, exclusive.ptr()))), LANE);
        let mut record = job(7, "idle", "bob", "contract=10m", 1).array_record(5);
        assert_ne!(need(with_lock(|| set(0, record.ptr()))), LANE);
        assert_eq!(fini(), 0);
    }
}
