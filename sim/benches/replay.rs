//! `cargo bench -p tally-sim --bench replay`: replay speed per policy, in
//! events per second (no assertions: speed is measured here, not in tests).
//!
//! Trace: `$TALLY_BENCH_TRACE` (canonical CSV), else the shared ElasticFlow
//! cluster04 trace (imported and augmented with examples/tally.toml, seed 1),
//! at `$TALLY_BENCH_GPUS` GPUs (default 256, where its demand is about 2x
//! supply).

use std::time::Instant;
use tally_allocator::DAY_S;
use tally_config::Config;
use tally_sim::augment::{augment, AugmentOptions};
use tally_sim::import::elasticflow;
use tally_sim::sim::{run, Policy, Settings};
use tally_sim::trace::parse_csv;

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let config = Config::load(std::path::Path::new(&format!("{root}/examples/tally.toml"))).expect("examples/tally.toml");
    let t0 = Instant::now();
    let trace = match std::env::var("TALLY_BENCH_TRACE") {
        Ok(p) => parse_csv(&std::fs::read_to_string(&p).expect("trace")).expect("canonical trace"),
        Err(_) => {
            let p = format!("{root}/../shared/traces/elasticflow-itp/cluster04.csv");
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}; set TALLY_BENCH_TRACE to a canonical trace"));
            let raw = elasticflow(&text).expect("ElasticFlow trace");
            augment(&raw, &config, &AugmentOptions { seed: 1, ..AugmentOptions::default() })
        }
    };
    let prep = t0.elapsed().as_secs_f64();
    let gpus: u32 = std::env::var("TALLY_BENCH_GPUS").ok().and_then(|g| g.parse().ok()).unwrap_or(256);
    println!(
        "trace: {} jobs, {:.1} days, {:.0} GPU-hours (import + augment {:.2} s); cluster {} GPUs",
        trace.jobs.len(),
        trace.span_s() as f64 / DAY_S as f64,
        trace.gpu_hours(),
        prep,
        gpus
    );
    println!("{:<12} {:>10} {:>10} {:>14} {:>10}", "policy", "events", "seconds", "events/s", "occupancy");
    for p in Policy::ALL {
        let replan_s = std::env::var("TALLY_BENCH_REPLAN").ok().and_then(|r| r.parse().ok()).unwrap_or(300);
        let s = Settings { gpus, gpus_per_node: 8, replan_s, ..Settings::default() };
        let t = Instant::now();
        let r = run(&trace, &config, p, s, &mut |_| {}).expect("replay");
        let secs = t.elapsed().as_secs_f64();
        println!("{:<12} {:>10} {:>10.3} {:>14.0} {:>9.1}%", p.name(), r.events, secs, r.events as f64 / secs, 100.0 * r.score.occupancy);
    }
}
