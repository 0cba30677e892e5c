//! The importers and the augmentation on the real ElasticFlow traces in
//! `shared/traces/` (read in place, never copied into the repository).

use tally_sim::augment::{augment, AugmentOptions};
use tally_sim::import::elasticflow;
use tally_sim::trace::{parse_csv, to_csv, Class};

fn shared(file: &str) -> String {
    let path = format!("{}/../../shared/traces/elasticflow-itp/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (shared/ must sit beside the clone)"))
}

fn config() -> tally_config::Config {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/tally.toml");
    tally_config::Config::load(std::path::Path::new(path)).unwrap()
}

/// The table of shared/traces/README.md: file, jobs, span (days), largest
/// job (GPUs), GPU-hours, mean GPUs busy. The README's job counts are one
/// short: no file ends with a newline, so `wc -l` minus the header misses
/// the last job. The counts here are the jobs the files hold (README + 1);
/// nothing is skipped.
const README: [(&str, usize, f64, u32, f64, f64); 7] = [
    ("cluster01.csv", 1_594 + 1, 33.8, 64, 22_740.0, 28.0),
    ("cluster02.csv", 5_777 + 1, 59.7, 64, 123_748.0, 86.0),
    ("cluster03.csv", 3_010 + 1, 49.3, 64, 165_443.0, 140.0),
    ("cluster04.csv", 15_801 + 1, 59.5, 64, 705_683.0, 495.0),
    ("cluster05.csv", 3_628 + 1, 59.3, 8, 14_303.0, 10.0),
    ("cluster06.csv", 2_395 + 1, 59.6, 64, 123_879.0, 87.0),
    ("cluster07.csv", 12_698 + 1, 59.4, 16, 366_800.0, 257.0),
];

#[test]
fn elasticflow_files_match_the_readme() {
    for (file, jobs, span_days, largest, gpu_hours, busy) in README {
        let trace = elasticflow(&shared(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(trace.jobs.len(), jobs, "{file}: no row is skipped or lost");
        assert_eq!((trace.span_s() as f64 / 86_400.0 * 10.0).round() / 10.0, span_days, "{file}");
        assert_eq!(trace.jobs.iter().map(|j| j.gpus).max(), Some(largest), "{file}");
        assert_eq!(trace.gpu_hours().round(), gpu_hours, "{file}");
        assert_eq!(trace.mean_busy_gpus().round(), busy, "{file}");
        let ids: Vec<u64> = trace.jobs.iter().map(|j| j.job_id).collect();
        assert_eq!(ids, (1..=jobs as u64).collect::<Vec<_>>(), "{file}: ids 1..n in submit order");
        assert!(trace.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
        // No job under 600 s was kept in the published traces.
        assert!(trace.jobs.iter().all(|j| j.duration_s >= 600), "{file}");
        // The README's count is the file's lines (no final newline) minus the header.
        assert_eq!(shared(file).matches('\n').count() - 1, jobs - 1, "{file}");
    }
}

#[test]
fn cluster01_imports_and_round_trips() {
    let trace = elasticflow(&shared("cluster01.csv")).unwrap();
    assert_eq!(trace.jobs.len(), 1_595);
    let last = trace.jobs.last().unwrap(); // the line without a final newline
    assert_eq!((last.job_id, last.submit_s, last.duration_s, last.gpus), (1_595, 4_848_400, 1_032, 1));
    let first = &trace.jobs[0];
    assert_eq!((first.job_id, first.submit_s, first.duration_s, first.gpus), (1, 1_932_025, 2_429, 64));
    assert_eq!((first.account.as_str(), first.user.as_str(), first.class), ("-", "-", Class::Training));
    assert_eq!(parse_csv(&to_csv(&trace)).unwrap(), trace);
}

#[test]
fn cluster01_augmented_is_seeded_and_within_the_rules() {
    let (trace, config) = (elasticflow(&shared("cluster01.csv")).unwrap(), config());
    let opts = AugmentOptions::default();
    let a = augment(&trace, &config, &opts);
    let text = to_csv(&a);
    assert_eq!(text, to_csv(&augment(&trace, &config, &opts)));
    assert_ne!(text, to_csv(&augment(&trace, &config, &AugmentOptions { seed: 7, ..Default::default() })));
    assert_eq!(parse_csv(&text).unwrap(), a);

    let leaves: Vec<&str> = config.tree.leaves().map(|id| config.tree.node(id).name.as_str()).collect();
    let mut unallocated = 0;
    for j in &a.jobs {
        assert!(leaves.contains(&j.account.as_str()), "{j:?}");
        assert!(j.contract_s <= 8 * 3600, "{j:?}");
        if j.class == Class::Debug {
            let (day, s) = (j.submit_s / 86_400, j.submit_s % 86_400);
            assert!(day % 7 < 5 && (9 * 3600..18 * 3600).contains(&s), "{j:?}");
            assert!((1..=2).contains(&j.gpus) && j.contract_s <= 900 && j.job_id > 1595, "{j:?}");
        } else if j.contract_s == 0 {
            unallocated += 1;
        }
    }
    let frac = f64::from(unallocated) / 1595.0;
    assert!((frac - 0.15).abs() < 0.03, "unallocated fraction {frac}");
    // 40 a working day over 33.8 days (about 24 working days).
    let debug = a.jobs.len() - 1595;
    assert!((800..1150).contains(&debug), "{debug} debug jobs");
}
