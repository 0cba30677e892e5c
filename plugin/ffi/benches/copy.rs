//! `cargo bench -p tally-ffi --bench copy`: what the priority plugin's
//! tick does under slurmctld's job read lock, copying every job record
//! into a [`JobView`] (`read_job_named`, names shared per copy), on
//! `$TALLY_BENCH_JOBS` synthetic `job_record_t`s (default 100,000: 10%
//! running, 200 accounts, 1,000 users, four comment spellings) built in
//! memory, outside Slurm. Prints min and median of 15 copies (no
//! assertions: speed is measured here, not in tests). The real copy also
//! walks slurmctld's `job_list` (docs/reliability.md, "Load").

#[path = "../../engine/benches/common/mod.rs"]
mod common;

use slurm_sys::{job_details, job_record_t, INFINITE, NICE_OFFSET};
use std::ffi::{c_char, CString};
use std::mem::MaybeUninit;
use std::time::Instant;
use tally_engine::view::{JobView, Names};
use tally_ffi::view::read_job_named;

const T0: i64 = 1_796_083_200;

fn leak(s: &str) -> *mut c_char {
    CString::new(s).expect("no NUL").into_raw()
}

fn zeroed<T>() -> Box<T> {
    // SAFETY: plain C records; all-zero is what xmalloc gives slurmctld.
    unsafe { Box::new(MaybeUninit::<T>::zeroed().assume_init()) }
}

/// Records that live until the process ends, as slurmctld's do.
fn records(n: u32) -> Vec<*const job_record_t> {
    let mut rnd = common::draws();
    (0..n)
        .map(|i| {
            let team = rnd(200);
            let mut d: Box<job_details> = zeroed();
            d.submit_time = T0 - rnd(86_400) as i64;
            d.begin_time = T0 - 86_400;
            d.nice = NICE_OFFSET;
            d.min_nodes = 1;
            let mut j: Box<job_record_t> = zeroed();
            j.job_id = i + 1;
            j.account = leak(&format!("team{}x{}", team / 20, team % 20));
            j.user_name = leak(&format!("user{}", rnd(1000)));
            j.user_id = 1000;
            j.partition = leak("gpu");
            j.comment = leak(["contract=2h", "contract=30m,resumable", "contract=0", "contract=8h lr=3e-4"][rnd(4) as usize]);
            let gpus = 1u32 << rnd(4);
            j.tres_per_node = leak(&format!("gres:gpu:{gpus}"));
            if i % 10 == 0 {
                j.job_state = slurm_sys::JOB_RUNNING;
                j.start_time = T0 - rnd(3600) as i64;
                j.tres_alloc_str = leak(&format!("cpu=2,mem=100M,node=1,billing=2,gres/gpu={gpus}"));
            }
            j.details = Box::into_raw(d);
            j.priority = 1;
            j.time_limit = INFINITE;
            Box::into_raw(j).cast_const()
        })
        .collect()
}

fn main() {
    let n: u32 = std::env::var("TALLY_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let recs = records(n);
    let mut ms: Vec<f64> = (0..15)
        .map(|_| {
            let t = Instant::now();
            let mut names = Names::new();
            // SAFETY: live records built above, nothing else touches them.
            let views: Vec<JobView> = recs.iter().filter_map(|&p| unsafe { read_job_named(p, &mut names) }).collect();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(views.len(), recs.len());
            drop(std::hint::black_box(views)); // the plugin frees them after the tick, with no lock held
            ms
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    println!("copy of {n} jobs ({} running), 200 accounts: min {:.1} ms, median {:.1} ms", n / 10, ms[0], ms[ms.len() / 2]);
}
