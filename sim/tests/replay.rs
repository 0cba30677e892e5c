//! Whole replays of a trace (tests/data/elasticflow-sample.csv: 1,200 jobs
//! of 1-8 GPUs in ElasticFlow's format, heavy-tailed durations, about 9 GPUs
//! busy), augmented: every policy runs to the end with its
//! invariants intact (the simulator returns an error if a node is
//! over-committed, a job starts before its submission, a started job never
//! ends, or tally preempts inside a contract; tally never requeues an
//! allocated job that cannot checkpoint, other than a debug job), and the
//! same seed gives the same result.

use tally_config::Config;
use tally_sim::augment::{augment, AugmentOptions};
use tally_sim::import::elasticflow;
use tally_sim::sim::{run, run_logged, Happening, Policy, Settings};
use tally_sim::suite::never_requeued;

fn trace() -> tally_sim::trace::Trace {
    let raw = elasticflow(include_str!("data/elasticflow-sample.csv")).unwrap();
    augment(&raw, &config(), &AugmentOptions { seed: 3, debug_per_day: 5.0, ..AugmentOptions::default() })
}

fn config() -> Config {
    Config::load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/tally.toml"))).unwrap()
}

#[test]
fn every_policy_replays_a_trace_with_invariants_intact() {
    let trace = trace();
    let config = config();
    // The sample keeps about 9 GPUs busy: 8 GPUs make it contended.
    let s = Settings { gpus: 8, gpus_per_node: 8, ..Settings::default() };
    for p in Policy::ALL {
        let r = run(&trace, &config, p, s, &mut |_| {}).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        assert_eq!(r.unfinished(), 0, "{p:?}");
        assert_eq!(r.score.completed + r.unrunnable, trace.jobs.len(), "{p:?}");
        assert!(r.score.occupancy > 0.5 && r.score.occupancy <= 1.0 + 1e-9, "{p:?}: {}", r.score.occupancy);
        assert!(r.score.goodput <= r.score.occupancy + 1e-9, "{p:?}");
        if matches!(p, Policy::Tally | Policy::TallyPlanner) {
            assert_eq!(r.contract_violations, 0);
            let shielded = never_requeued(&trace, &config, s.gpus);
            assert!(shielded.len() > 100, "{} jobs that cannot checkpoint", shielded.len());
            let (logged, log) = run_logged(&trace, &config, p, s).unwrap();
            assert_eq!(logged, r, "{p:?}: the log's replay is the same");
            let wrong: Vec<u64> = log
                .iter()
                .filter_map(|h| if let Happening::Preempt { job, .. } = h { Some(*job) } else { None })
                .filter(|j| shielded.contains(j))
                .collect();
            assert!(wrong.is_empty(), "{p:?}: jobs that cannot checkpoint requeued: {wrong:?}");
            assert!(r.score.preemptions > 0, "{p:?}: the replay must preempt for this to mean anything");
        }
        if p == Policy::Fifo {
            assert_eq!(r.score.preemptions, 0);
        }
        // Same input, same figures.
        assert_eq!(run(&trace, &config, p, s, &mut |_| {}).unwrap(), r, "{p:?} is deterministic");
    }
}
