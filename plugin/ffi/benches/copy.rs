//! `cargo bench -p tally-ffi --bench copy`: what the priority plugin's
//! tick does under slurmctld's job read lock, copying every job record
//! into a [`JobView`] (names shared per copy), on `$TALLY_BENCH_JOBS`
//! synthetic `job_record_t`s (default 100,000: 10% running, 200 accounts,
//! 1,000 users, four comment spellings) built in memory, outside Slurm.
//!
//! Two layouts: records and their strings in allocation order, visited in
//! that order (the hardware's own prefetching at its best), and
//! *scattered*: every record, details and string among filler
//! allocations and visited in a shuffled order, as slurmctld's heap holds
//! them after days of submissions. Two ways to read: one record after the
//! other (`read_job_named`), and `read_jobs`, which asks the memory for
//! records ahead. Prints min and median of 15 copies each, the ways
//! interleaved in one run (no assertions: speed is measured here, not in
//! tests). The real copy also walks slurmctld's `job_list`
//! (docs/reliability.md, "Load").

#[path = "../../../engine/benches/common/mod.rs"]
mod common;

use slurm_sys::{job_details, job_record_t, INFINITE, NICE_OFFSET};
use std::ffi::{c_char, CString};
use std::mem::MaybeUninit;
use std::time::Instant;
use tally_engine::view::{JobView, Names};
use tally_ffi::view::{read_job_named, read_jobs};

const T0: i64 = 1_796_083_200;

/// Allocations that live until the process ends, as slurmctld's do; with
/// `scatter`, each follows a filler of 64 B to 4 KiB.
struct Heap {
    scatter: bool,
    rnd: Box<dyn FnMut(u64) -> u64>,
}

impl Heap {
    fn filler(&mut self) {
        if self.scatter {
            let n = 64 + (self.rnd)(4033) as usize;
            std::hint::black_box(Box::leak(vec![0u8; n].into_boxed_slice()));
        }
    }

    fn leak(&mut self, s: &str) -> *mut c_char {
        self.filler();
        CString::new(s).expect("no NUL").into_raw()
    }

    fn zeroed<T>(&mut self) -> Box<T> {
        self.filler();
        // SAFETY: plain C records; all-zero is what xmalloc gives slurmctld.
        unsafe { Box::new(MaybeUninit::<T>::zeroed().assume_init()) }
    }
}

fn records(n: u32, scatter: bool) -> Vec<*mut job_record_t> {
    let mut rnd = common::draws();
    let mut heap = Heap { scatter, rnd: Box::new(common::draws()) };
    let mut out: Vec<*mut job_record_t> = (0..n)
        .map(|i| {
            let team = rnd(200);
            let mut d: Box<job_details> = heap.zeroed();
            d.submit_time = T0 - rnd(86_400) as i64;
            d.begin_time = T0 - 86_400;
            d.nice = NICE_OFFSET;
            d.min_nodes = 1;
            let mut j: Box<job_record_t> = heap.zeroed();
            j.job_id = i + 1;
            j.account = heap.leak(&format!("team{}x{}", team / 20, team % 20));
            j.user_name = heap.leak(&format!("user{}", rnd(1000)));
            j.user_id = 1000;
            j.partition = heap.leak("gpu");
            j.comment = heap.leak(["contract=2h", "contract=30m,resumable", "contract=0", "contract=8h lr=3e-4"][rnd(4) as usize]);
            let gpus = 1u32 << rnd(4);
            j.tres_per_node = heap.leak(&format!("gres:gpu:{gpus}"));
            if i % 10 == 0 {
                j.job_state = slurm_sys::JOB_RUNNING;
                j.start_time = T0 - rnd(3600) as i64;
                j.tres_alloc_str = heap.leak(&format!("cpu=2,mem=100M,node=1,billing=2,gres/gpu={gpus}"));
            }
            j.details = Box::into_raw(d);
            j.priority = 1;
            j.time_limit = INFINITE;
            Box::into_raw(j)
        })
        .collect();
    if scatter {
        // A Fisher-Yates shuffle of the visiting order.
        for i in (1..out.len()).rev() {
            out.swap(i, rnd(i as u64 + 1) as usize);
        }
    }
    out
}

fn one_by_one(recs: &[*mut job_record_t]) -> Vec<JobView> {
    let mut names = Names::new();
    // SAFETY: live records built above, nothing else touches them.
    recs.iter().filter_map(|&p| unsafe { read_job_named(p, &mut names) }).collect()
}

fn read_ahead(recs: &[*mut job_record_t]) -> Vec<JobView> {
    let (mut names, mut out) = (Names::new(), Vec::new());
    // SAFETY: as above.
    unsafe { read_jobs(recs, &mut names, |_, v| out.push(v)) };
    out
}

/// One way to read the records.
type Way = fn(&[*mut job_record_t]) -> Vec<JobView>;

fn main() {
    let n: u32 = std::env::var("TALLY_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    for scatter in [false, true] {
        let recs = records(n, scatter);
        assert_eq!(one_by_one(&recs), read_ahead(&recs), "the same views either way");
        let ways: [(&str, Way); 2] = [("one by one", one_by_one), ("read ahead", read_ahead)];
        let mut ms = [Vec::new(), Vec::new()];
        for _ in 0..15 {
            for (k, (_, way)) in ways.iter().enumerate() {
                let t = Instant::now();
                let views = way(&recs);
                ms[k].push(t.elapsed().as_secs_f64() * 1e3);
                assert_eq!(views.len(), recs.len());
                drop(std::hint::black_box(views)); // the plugin frees them after the tick, with no lock held
            }
        }
        let layout = if scatter { "scattered" } else { "in allocation order" };
        for (k, (name, _)) in ways.iter().enumerate() {
            ms[k].sort_by(f64::total_cmp);
            let (min, med) = (ms[k][0], ms[k][ms[k].len() / 2]);
            println!("copy of {n} jobs ({} running), 200 accounts, {layout}, {name}: min {min:.1} ms, median {med:.1} ms", n / 10);
        }
    }
}
