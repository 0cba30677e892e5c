//! `cargo bench -p tally-engine --bench tick`: one recalculation of the
//! priority plugin (`Engine::tick`: charge every run, re-rank, walk the
//! queue, new priorities) on a synthetic slurmctld of `$TALLY_BENCH_JOBS`
//! jobs (default 100,000: 10% running) over 200 accounts, outside Slurm.
//! Prints min and median of 15 ticks (no assertions: speed is measured
//! here, not in tests). The real plugin adds copying the jobs out of
//! `job_list` under the lock (docs/reliability.md, "Load").

mod common;

use std::time::Instant;
use tally_allocator::HOUR_S;
use tally_config::Config;
use tally_engine::engine::Engine;
use tally_engine::view::{JobView, Names, RunState};

const T0: u64 = 1_796_083_200;

fn config() -> Config {
    Config::parse(&common::config_text(4096), "bench.toml").expect("bench config")
}

fn jobs(n: u32) -> Vec<JobView> {
    let mut rnd = common::draws();
    // Names shared as the plugin's copy shares them (`read_job_named`).
    let mut names = Names::new();
    (0..n)
        .map(|i| {
            let running = i % 10 == 0;
            let team = rnd(200);
            // Drawn in the order the figures in docs/reliability.md used.
            let user = names.intern(&format!("user{}", rnd(1000)));
            JobView {
                state: if running { RunState::Running } else { RunState::Pending },
                account: Some(names.intern(&format!("team{}x{}", team / 20, team % 20))),
                user_id: 1000,
                comment: Some(["contract=2h", "contract=30m,resumable", "contract=0", "contract=8h lr=3e-4"][rnd(4) as usize].to_string()),
                partition: Some(names.intern("gpu")),
                gpus: 1 << rnd(4),
                submit_s: T0 - rnd(86_400),
                begin_s: T0 - 86_400,
                start_s: if running { T0 - rnd(3600) } else { 0 },
                time_limit_s: Some(8 * HOUR_S),
                ..JobView::pending(i + 1, user)
            }
        })
        .collect()
}

fn main() {
    let n: u32 = std::env::var("TALLY_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let views = jobs(n);
    let mut engine = Engine::new(config(), None, T0);
    engine.tick(T0, views.as_slice(), None); // the first tick opens every run
    let mut ms: Vec<f64> = (1..=15u64)
        .map(|k| {
            // The plugin hands its copy over; the copy is not timed.
            let copy = views.clone();
            let t = Instant::now();
            let r = std::hint::black_box(engine.tick(T0 + 60 * k, copy, None));
            let ms = t.elapsed().as_secs_f64() * 1e3;
            drop(r); // the plugin frees the retired views after releasing the lock
            ms
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    println!("tick over {n} jobs ({} running), 200 accounts: min {:.1} ms, median {:.1} ms", n / 10, ms[0], ms[ms.len() / 2]);
}
