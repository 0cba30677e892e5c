//! `preempt_tally.so` as a backup slurmctld loads it: in standby from the
//! start (Slurm initialises preempt plugins before it knows whether it is
//! in control), on a StateSaveLocation another slurmctld writes to. The
//! notes file is shared: the backup never writes its stale book over the
//! notes of the controller before it (docs/reliability.md, "Controller
//! fail-over").

use slurm_sys::{job_record_t, PREEMPT_DATA_GRACE_TIME};
use std::ffi::{c_int, c_void};
use std::time::Duration;
use tally_engine::preempted::KEEP_S;
use tally_fakehost::{job, now, open_plugin, temp_dir, wait_until, Host};

#[test]
fn a_backup_keeps_the_notes_the_primary_wrote_after_it_started() {
    let dir = temp_dir("fake-host-preempt-failover");
    let _host = Host::load(&dir);
    let config = dir.join("tally.toml");
    std::fs::write(&config, "[cluster]\ngpus = 16\n[accounts.busy]\nshare = 50\n[accounts.idle]\nshare = 50\n").unwrap();
    std::env::set_var("TALLY_CONFIG", &config);
    let notes = dir.join("tally").join("preempted.state");
    std::fs::create_dir_all(notes.parent().unwrap()).unwrap();
    let t = u64::try_from(now()).unwrap();
    // The notes as the backup finds them when it starts: one of them a day
    // old in two seconds.
    let old = format!("preempted 5 100 {}\n", t + 2 - KEEP_S);
    std::fs::write(&notes, format!("tally-preempted 1\n{old}")).unwrap();

    let lib = open_plugin("preempt_tally");
    // SAFETY: the plugin's functions with their C signatures (slurmctld/preempt.c).
    unsafe {
        let init = lib.get::<extern "C" fn() -> c_int>(b"init").unwrap();
        let fini = lib.get::<extern "C" fn() -> c_int>(b"fini").unwrap();
        let get_data = lib.get::<extern "C" fn(*mut job_record_t, u32, *mut c_void) -> c_int>(b"preempt_p_get_data").unwrap();
        assert_eq!(init(), 0);
        // The primary, in control, notes a preemption.
        let primary = format!("tally-preempted 1\n{old}preempted 6 200 {t}\n");
        std::fs::write(&notes, &primary).unwrap();
        // The old note ages out of the standby backup's book: it preempts
        // nothing, so it writes nothing (it once wrote its book, without
        // job 6's note, every time one aged out).
        std::thread::sleep(Duration::from_secs(4));
        assert_eq!(std::fs::read_to_string(&notes).unwrap(), primary, "a standby backup wrote the notes file");
        // The primary dies; the backup takes over and preempts job 12: its
        // note joins the primary's (it once replaced them).
        let mut victim = job(12, "busy", "alice", "contract=0", 4).running_since(600);
        let mut grace: u32 = 99;
        assert_eq!(get_data(victim.ptr(), PREEMPT_DATA_GRACE_TIME, (&mut grace as *mut u32).cast()), 0);
        let want = format!("preempted 12 {} ", victim.rec.start_time);
        wait_until("the backup's note beside the primary's", Duration::from_secs(10), || {
            std::fs::read_to_string(&notes).is_ok_and(|n| n.contains(&want))
        });
        let text = std::fs::read_to_string(&notes).unwrap();
        assert!(text.contains("\npreempted 6 200 "), "the primary's note was written over:\n{text}");
        assert!(!text.contains("\npreempted 5 100 "), "a note a day old is dropped as the file is written:\n{text}");
        assert_eq!(fini(), 0);
    }
}
