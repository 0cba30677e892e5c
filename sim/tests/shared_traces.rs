//! The ElasticFlow importer against the shared traces' own table
//! (`shared/traces/README.md`; the files are read in place, never copied
//! into the repository). Not part of `make test`, which needs nothing
//! outside the repository: `make results` runs it before it uses the
//! traces (`cargo test -p tally-sim --features shared-traces --test shared_traces`).

use tally_sim::import::elasticflow;

fn shared(file: &str) -> String {
    let path = format!("{}/../../shared/traces/elasticflow-itp/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (shared/ must sit beside the clone)"))
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
