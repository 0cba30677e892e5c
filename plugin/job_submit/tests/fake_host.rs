//! `job_submit_tally.so` in a fake slurmctld: submissions and updates built
//! here, refusals and rewritten comments read back.

use slurm_sys::{
    job_desc_msg_t, job_record_t, ESLURM_ACCESS_DENIED, ESLURM_INVALID_ACCOUNT, ESLURM_INVALID_GRES, ESLURM_INVALID_TIME_LIMIT,
    ESLURM_INVALID_TIME_VALUE, NO_VAL,
};
use std::ffi::{c_char, c_int, CStr};
use tally_fakehost::{assert_exports, assert_identity, job, open_plugin, temp_dir, with_lock, zeroed, Host};

fn text(p: *const c_char) -> String {
    // SAFETY: NULL or a C string from Slurm's allocator.
    if p.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

#[test]
fn submissions_and_updates_in_a_fake_slurmctld() {
    let dir = temp_dir("fake-host-submit");
    let host = Host::load(&dir);
    let config = dir.join("tally.toml");
    std::fs::write(&config, "[cluster]\ngpus = 16\n[contracts]\npower_of_two_gpus = true\n[accounts.nlp]\nshare = 50\n").unwrap();
    std::env::set_var("TALLY_CONFIG", &config);
    let lib = open_plugin("job_submit_tally");
    assert_identity(&lib, "job_submit/tally");
    // SAFETY: the plugin's functions with their C signatures (job_submit.c).
    unsafe {
        let init = lib.get::<extern "C" fn() -> c_int>(b"init").unwrap();
        let fini = lib.get::<extern "C" fn() -> c_int>(b"fini").unwrap();
        let submit = lib.get::<extern "C" fn(*mut job_desc_msg_t, u32, *mut *mut c_char) -> c_int>(b"job_submit").unwrap();
        let modify = lib.get::<extern "C" fn(*mut job_desc_msg_t, *mut job_record_t, u32) -> c_int>(b"job_modify").unwrap();
        assert_eq!(init(), 0);

        let desc = |comment: &str, account: &str, limit_min: u32| {
            let mut d: Box<job_desc_msg_t> = zeroed();
            d.comment = if comment.is_empty() { std::ptr::null_mut() } else { host.xstrdup(comment) };
            d.account = if account.is_empty() { std::ptr::null_mut() } else { host.xstrdup(account) };
            d.time_limit = limit_min;
            d.min_nodes = NO_VAL;
            d
        };
        let run = |d: &mut job_desc_msg_t| {
            let mut err: *mut c_char = std::ptr::null_mut();
            let rc = with_lock(|| submit(d, 1000, &mut err));
            let msg = text(err);
            if !err.is_null() {
                host.xfree(err);
            }
            (rc, msg)
        };

        // Refused, with the message sbatch prints.
        let cases: &[(&str, &str, u32, u32, &str)] = &[
            ("contract=9h", "", NO_VAL, ESLURM_INVALID_TIME_VALUE, "tally: contract=9h exceeds the 8h maximum (allowed: 0 to 8h, e.g. contract=2h)"),
            ("contract=2x", "", NO_VAL, ESLURM_INVALID_TIME_VALUE, "tally: contract=2x: unknown unit `x` in `2x` (use d, h, m or s)"),
            ("contract=-1h", "", NO_VAL, ESLURM_INVALID_TIME_VALUE, "tally: contract=-1h: negative duration `-1h` (durations are >= 0)"),
            (
                "contract=1h",
                "",
                30,
                ESLURM_INVALID_TIME_LIMIT,
                "tally: contract=1h is longer than the job's time limit of 30m (a job cannot be promised more than it may run)",
            ),
            ("contract=1h", "ghost", NO_VAL, ESLURM_INVALID_ACCOUNT, "tally: account `ghost` has no budget in"),
        ];
        for (comment, account, limit, code, msg) in cases {
            let mut d = desc(comment, account, *limit);
            let (rc, got) = run(&mut d);
            assert_eq!(rc, *code as c_int, "{comment}");
            assert!(got.starts_with(msg), "{comment}: {got}");
        }
        // Accepted; the comment normalised, the user's text kept.
        let mut d = desc("lr=1, Contract=90m", "nlp", 120);
        assert_eq!(run(&mut d), (0, String::new()));
        assert_eq!(text(d.comment), "contract=1h30m lr=1");
        let mut d = desc("just a note", "", NO_VAL);
        assert_eq!(run(&mut d), (0, String::new()));
        assert_eq!(text(d.comment), "just a note");
        let mut d = desc("", "", NO_VAL);
        assert_eq!(run(&mut d).0, 0);
        assert!(d.comment.is_null());
        // Accepted with a warning sbatch prints: a day's job that cannot
        // checkpoint starts only on its team's fair share or on GPUs no
        // other team asks for, and is never requeued once started.
        let mut d = desc("contract=8h", "nlp", 24 * 60);
        let (rc, warning) = run(&mut d);
        assert_eq!(rc, 0);
        assert!(warning.starts_with("tally: warning: this job is not resumable and has a time limit of 1d"), "{warning}");
        assert!(
            warning
                .contains("it starts only while your team runs below its share or no other team is owed GPUs, and once started nothing requeues it"),
            "{warning}"
        );

        // Updates: a new comment is judged, a new limit is checked against the contract.
        let mut j = job(42, "nlp", "alice", "contract=1h", 2);
        let mut d = desc("contract=9h", "", NO_VAL);
        assert_eq!(with_lock(|| modify(&mut *d, j.ptr(), 1000)), ESLURM_INVALID_TIME_VALUE as c_int);
        let mut d = desc("", "", 30);
        assert_eq!(with_lock(|| modify(&mut *d, j.ptr(), 1000)), ESLURM_INVALID_TIME_LIMIT as c_int);
        let mut d = desc("", "", 90);
        assert_eq!(with_lock(|| modify(&mut *d, j.ptr(), 1000)), 0);
        let mut d = desc("contract=120m,resumable", "", NO_VAL);
        assert_eq!(with_lock(|| modify(&mut *d, j.ptr(), 1000)), 0);
        assert_eq!(text(d.comment), "contract=2h,resumable");
        // `Comment=` (empty, not absent) on a pending job is judged too.
        let mut d = desc("", "", NO_VAL);
        d.comment = host.xstrdup("");
        assert_eq!(with_lock(|| modify(&mut *d, j.ptr(), 1000)), 0, "missing = unallocated: an empty comment is contract 0");
        // GPUs: a per-task request whose total is not a power of two.
        let mut d = desc("contract=1h", "nlp", NO_VAL);
        d.tres_per_task = host.xstrdup("gres:gpu:1");
        d.num_tasks = 3;
        assert_eq!(run(&mut d).0, ESLURM_INVALID_GRES as c_int);
        let mut d = desc("", "", NO_VAL);
        d.tres_per_node = host.xstrdup("gres:gpu:3");
        assert_eq!(with_lock(|| modify(&mut *d, j.ptr(), 1000)), ESLURM_INVALID_GRES as c_int, "an update's GPUs are checked");
        // A running job's contract is fixed: no contract=0 to stop being
        // charged, no longer contract to buy protection, no clearing it.
        let mut r = job(43, "nlp", "alice", "contract=2h", 2).running_since(60);
        for c in ["contract=0", "contract=8h", ""] {
            let mut d = desc("", "", NO_VAL);
            d.comment = host.xstrdup(c);
            assert_eq!(with_lock(|| modify(&mut *d, r.ptr(), 1000)), ESLURM_ACCESS_DENIED as c_int, "{c:?}");
        }
        let mut d = desc("contract=2h note", "", NO_VAL);
        assert_eq!(with_lock(|| modify(&mut *d, r.ptr(), 1000)), 0, "the user's own text may change");
        assert_eq!(fini(), 0);

        // The config in force is priority/tally's active copy (the last
        // good one), not tally.toml: an edit nobody reconfigured changes
        // nothing, and a broken file at a restart leaves the last good one.
        let active = dir.join("tally").join("tally.toml.active");
        std::fs::create_dir_all(active.parent().unwrap()).unwrap();
        std::fs::write(&active, "[cluster]\ngpus = 16\n[contracts]\nmax = \"4h\"\n[accounts.nlp]\nshare = 50\n").unwrap();
        std::fs::write(&config, "[cluster]\ngpus = 16\n[contracts]\nmax = \"8h\"\n[accounts.nlp]\nshare = 50\n").unwrap();
        assert_eq!(init(), 0);
        let mut d = desc("contract=6h", "", NO_VAL);
        assert_eq!(run(&mut d).0, ESLURM_INVALID_TIME_VALUE as c_int, "the active copy's 4h maximum, not the edited file's 8h");
        assert_eq!(fini(), 0);
        std::fs::write(&config, "[accounts.nlp]\nshare = 500\n").unwrap();
        assert_eq!(init(), 0);
        for c in ["contract=9h", "contract=1x"] {
            let mut d = desc(c, "", NO_VAL);
            assert_eq!(run(&mut d).0, ESLURM_INVALID_TIME_VALUE as c_int, "{c}: checked by the last good config");
        }
        assert_eq!(fini(), 0);

        // No usable config at all: submissions go through unchecked (fail-open).
        std::fs::remove_file(&active).unwrap();
        assert_eq!(init(), 0);
        let mut d = desc("contract=9h", "", NO_VAL);
        assert_eq!(run(&mut d).0, 0);
        assert_eq!(fini(), 0);
    }
}

#[test]
fn exports_exactly_the_plugin_symbols() {
    assert_exports("job_submit_tally", &["fini", "init", "job_modify", "job_submit", "plugin_name", "plugin_type", "plugin_version"]);
}
