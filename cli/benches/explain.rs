//! `cargo bench -p tally-cli --bench explain`: `tally explain JOBID` on the
//! load test's queue (testbed/load.sh: 64 running 8-GPU jobs that fill 512
//! GPUs, `$TALLY_BENCH_JOBS` pending jobs, default 10,000, over 200
//! accounts), read from a saved `squeue --json` of some 5 KB per job as
//! Slurm writes it. Prints the whole process's wall time (median of 5) and
//! its peak memory (the largest of the 5, as wait4 gives it), for a pending job (the start estimate replays the
//! queue forward) and a running one (no replay); `TALLY_BENCH_BIN` runs
//! another build of `tally` instead, for a before and after. No assertions: speed is
//! measured here, not in tests.

#![deny(unsafe_code)]

// The engine's benches' fixed random sequence and accounts.
#[path = "../../engine/benches/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const NOW: u64 = 1_796_308_676;

/// Fields squeue writes that `tally explain` does not read: names, paths,
/// flags and numbers in both of Slurm's spellings, about 4 KB a job.
fn unread_fields(i: u32) -> String {
    let mut out = String::new();
    for k in 0..24 {
        out.push_str(&format!(r#""unread_text_{k}":"/home/user{}/project/run-{i}/some/longer/path/segment-{k}.out","#, i % 97));
        out.push_str(&format!(r#""unread_number_{k}":{{"set":true,"infinite":false,"number":{}}},"#, u64::from(i) * 31 + k));
        out.push_str(&format!(r#""unread_flags_{k}":["FLAG_A","FLAG_B"],"#));
    }
    out
}

fn queue(pending: u32) -> String {
    let mut draw = common::draws();
    let mut jobs = Vec::new();
    let job = |id: u32, account: &str, user: &str, state: &str, gpus: u64, comment: &str, start: u64| {
        format!(
            r#"{{{}"account":"{account}","array_job_id":0,"array_task_id":null,"array_task_string":"","comment":"{comment}","dependency":"","eligible_time":{e},"end_time":0,"het_job_id":0,"job_id":{id},"job_state":"{state}","nice":null,"node_count":1,"nodes":"","partition":"gpu","pre_sus_time":0,"preempt_time":0,"priority":1000,"resv_name":"","restart_cnt":0,"start_time":{start},"state_reason":"{reason}","submit_time":{e},"suspend_time":0,"tasks":1,"time_limit":{limit},"tres_alloc_str":"{alloc}","tres_per_job":"","tres_per_node":"gres:gpu:{gpus}","tres_per_socket":"","tres_per_task":"","user_id":1000,"user_name":"{user}"}}"#,
            unread_fields(id),
            e = NOW - 600,
            reason = if state == "RUNNING" { "None" } else { "Priority" },
            limit = 240,
            alloc = if state == "RUNNING" { format!("cpu=1,gres/gpu={gpus}") } else { String::new() },
        )
    };
    for i in 0..64u32 {
        jobs.push(job(i + 1, &format!("team{}x{}", i % 10, i % 20), &format!("user{}", i % 10), "RUNNING", 8, "contract=4h", NOW - 300));
    }
    for i in 0..pending {
        let p = draw(10);
        let comment = if draw(10) == 0 { "" } else { ["contract=30m", "contract=1h", "contract=2h", "contract=4h"][draw(4) as usize] };
        jobs.push(job(100 + i, &format!("team{p}x{}", draw(20)), &format!("user{p}"), "PENDING", 1 << draw(4), comment, 0));
    }
    format!(r#"{{"meta":{{}},"errors":[],"jobs":[{}]}}"#, jobs.join(","))
}

fn nodes() -> String {
    let node = |i: u32| {
        format!(
            r#"{{"name":"n{i}","state":"allocated","state_flags":[],"partitions":["gpu"],"gres":"gpu:fake:8","gres_used":"gpu:fake:8(IDX:0-7)","tres":"cpu=64,mem=500G,billing=8,gres/gpu=8","tres_used":"cpu=1,gres/gpu=8","reason":""}}"#
        )
    };
    format!(r#"{{"meta":{{}},"errors":[],"nodes":[{}]}}"#, (1..=64).map(node).collect::<Vec<_>>().join(","))
}

/// Peak resident memory of the children waited for so far, in MB.
#[allow(unsafe_code)]
/// Wait for `child` and return its peak resident memory (MB), as `wait4`
/// reports it.
///
/// A child starts inside this process's memory until it execs, and the
/// kernel counts the high-water mark of that memory as the child's too
/// (exec_mmap keeps the larger of the two): [`forget_own_peak`] first, so
/// that the figure is the child's own whenever it is larger than what this
/// process holds at the time ([`own_resident_mb`]).
fn wait_peak_mb(child: &std::process::Child) -> (libc::c_int, f64) {
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 writes only into
    // the two values it is given, for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4 on tally explain");
    (status, usage.ru_maxrss as f64 / 1024.0)
}

/// Reset this process's own high-water mark of resident memory to what it
/// holds now (Linux: `/proc/self/clear_refs`, 5).
fn forget_own_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// What this process holds now (MB; `VmRSS`).
fn own_resident_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
    kb.unwrap_or(0.0) / 1024.0
}

fn main() {
    let pending: u32 = std::env::var("TALLY_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = std::env::temp_dir().join(format!("tally-bench-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let file = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("bench file");
        p
    };
    let squeue = file("squeue.json", queue(pending));
    let sinfo = file("sinfo.json", nodes());
    let config = file("tally.toml", common::config_text(512));
    let mb = std::fs::metadata(&squeue).map(|m| m.len() as f64 / 1e6).unwrap_or(0.0);
    println!("queue: 64 running, {pending} pending, 200 accounts; squeue --json {mb:.0} MB");
    // Another build to compare with: `TALLY_BENCH_BIN=/path/to/tally`.
    let tally = std::env::var("TALLY_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tally").to_string());
    // The queue's text is on disk and freed: what this process holds from
    // here on is small, and its own peak is forgotten (`wait_peak_mb`).
    forget_own_peak();
    let floor = own_resident_mb();
    let errors = dir.join("stderr.txt");
    let run = |job: &str| -> (f64, f64) {
        let arg = |p: &Path| p.display().to_string();
        let t = Instant::now();
        // Reaped by `wait_peak_mb` (wait4), not by `Child::wait`.
        #[allow(clippy::zombie_processes)]
        let child = Command::new(&tally)
            .args(["explain", job, "-c", &arg(&config), "--state", &arg(&dir.join("no-ledger")), "--squeue-json", &arg(&squeue)])
            .args(["--sinfo-json", &arg(&sinfo), "--now", &NOW.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&errors).expect("stderr file"))
            .spawn()
            .expect("tally explain");
        let (status, peak) = wait_peak_mb(&child);
        let secs = t.elapsed().as_secs_f64();
        let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        assert!(ok, "tally explain {job}: {}", std::fs::read_to_string(&errors).unwrap_or_default());
        (secs, peak)
    };
    for (job, what) in [("1", "a running job (no replay)"), ("5000", "a pending job (with the start estimate)")] {
        let runs: Vec<(f64, f64)> = (0..5).map(|_| run(job)).collect();
        let mut s: Vec<f64> = runs.iter().map(|r| r.0).collect();
        s.sort_by(f64::total_cmp);
        let peak = runs.iter().map(|r| r.1).fold(0.0, f64::max);
        println!("tally explain {job:<5} {what:<40} median {:.2} s, min {:.2} s, peak memory {peak:.0} MB", s[2], s[0]);
    }
    println!("(a peak is the process's own when above {floor:.0} MB, what this bench held as it started it)");
    let _ = std::fs::remove_dir_all(&dir);
}
