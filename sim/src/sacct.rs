//! What really ran on a Slurm cluster, from `sacct`, scored like a replay.
//!
//! Input: `sacct -D -X -P -o JobIDRaw,Start,End,State` with
//! `SLURM_TIME_FORMAT=%s` (times as Unix seconds), one line per run of a job
//! (`-D` keeps the runs a requeue ended). A line becomes a [`Run`] when the
//! job held its GPUs (a start time): ended `COMPLETED`, `TIMEOUT` or
//! `FAILED` — the job is done; `PREEMPTED` or `REQUEUED` — preempted (lost
//! unless the job is resumable); `CANCELLED` or still `RUNNING` — cut at the
//! end of the replay. Lines of jobs that never started are skipped.
//!
//! A time-compressed replay maps Slurm's clock back to the trace's:
//! `trace_t = trace_origin + (t − t0) × speedup`.

use crate::metrics::{Run, RunEnd};
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SacctError {
    #[error("sacct output line {line}: {what}")]
    Line { line: usize, what: String },
    #[error("sacct output has no header with {0}")]
    Header(String),
}

/// How a replay's clock maps onto the trace's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clock {
    /// Slurm's time (Unix seconds) of the trace's first submission.
    pub t0: u64,
    /// Trace time of the first submission.
    pub trace_origin: u64,
    /// Trace seconds per real second.
    pub speedup: f64,
}

impl Clock {
    pub fn to_trace(&self, t: u64) -> u64 {
        let dt = t as f64 - self.t0 as f64;
        (self.trace_origin as f64 + dt * self.speedup).round().max(0.0) as u64
    }
}

/// The runs in `text` (sacct `-P` output with a header), as runs of the
/// trace jobs `ids` maps Slurm job ids to (index into the trace's jobs).
/// Jobs not in `ids` are ignored. `end` is when the replay stopped (Slurm's
/// clock), for runs still going.
pub fn runs(text: &str, ids: &BTreeMap<u32, usize>, clock: Clock, end: u64) -> Result<Vec<Run>, SacctError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else { return Ok(Vec::new()) };
    let cols: Vec<&str> = header.split('|').map(str::trim).collect();
    let col = |name: &str| cols.iter().position(|c| c.eq_ignore_ascii_case(name)).ok_or_else(|| SacctError::Header(name.to_string()));
    let (c_id, c_start, c_end, c_state) = (col("JobIDRaw")?, col("Start")?, col("End")?, col("State")?);
    let mut out = Vec::new();
    for (n, line) in lines {
        let f: Vec<&str> = line.split('|').collect();
        let bad = |what: String| SacctError::Line { line: n + 1, what };
        let get = |c: usize| f.get(c).map(|s| s.trim()).ok_or_else(|| bad(format!("{} fields, expected {}", f.len(), cols.len())));
        let id: u32 = match get(c_id)?.parse() {
            Ok(id) => id,
            // Array tasks and steps (`123_4`, `123.batch`) are not ours.
            Err(_) => continue,
        };
        let Some(&job) = ids.get(&id) else { continue };
        let time = |s: &str| -> Result<Option<u64>, SacctError> {
            match s {
                "" | "Unknown" | "None" => Ok(None),
                _ => s.parse::<u64>().map(Some).map_err(|_| bad(format!("time `{s}` is not Unix seconds (run sacct with SLURM_TIME_FORMAT=%s)"))),
            }
        };
        let Some(start) = time(get(c_start)?)?.filter(|&s| s > 0) else { continue };
        let state = get(c_state)?.split_whitespace().next().unwrap_or("");
        let (end_t, kind) = match state {
            "COMPLETED" | "TIMEOUT" | "FAILED" | "OUT_OF_MEMORY" | "NODE_FAIL" => (time(get(c_end)?)?.unwrap_or(end), RunEnd::Completed),
            "PREEMPTED" | "REQUEUED" => (time(get(c_end)?)?.unwrap_or(end), RunEnd::Preempted),
            "CANCELLED" | "RUNNING" | "SUSPENDED" => (time(get(c_end)?)?.unwrap_or(end), RunEnd::Cut),
            "PENDING" => continue,
            other => return Err(bad(format!("unknown state `{other}`"))),
        };
        let (a, b) = (clock.to_trace(start), clock.to_trace(end_t.max(start)));
        out.push(Run { job, start_s: a, end_s: b, end: kind });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_a_requeued_job_and_the_clock() {
        let text = "JobIDRaw|Start|End|State\n\
                    10|1000|1010|REQUEUED\n\
                    10|1020|1050|COMPLETED\n\
                    11|1005|1100|PREEMPTED\n\
                    11|Unknown|Unknown|PENDING\n\
                    12|1001|Unknown|RUNNING\n\
                    13|1002|1003|COMPLETED\n\
                    10.batch|1000|1010|CANCELLED\n";
        let ids: BTreeMap<u32, usize> = [(10, 0), (11, 1), (12, 2)].into_iter().collect();
        let clock = Clock { t0: 1000, trace_origin: 5000, speedup: 180.0 };
        let r = runs(text, &ids, clock, 1200).unwrap();
        assert_eq!(
            r,
            vec![
                Run { job: 0, start_s: 5000, end_s: 5000 + 1800, end: RunEnd::Preempted },
                Run { job: 0, start_s: 5000 + 3600, end_s: 5000 + 9000, end: RunEnd::Completed },
                Run { job: 1, start_s: 5000 + 900, end_s: 5000 + 18_000, end: RunEnd::Preempted },
                Run { job: 2, start_s: 5180, end_s: 5000 + 36_000, end: RunEnd::Cut },
            ]
        );
        let err = runs("JobIDRaw|Start|End|State\n10|2026-12-02T10:00:00|x|COMPLETED\n", &ids, clock, 0).unwrap_err();
        assert!(err.to_string().contains("SLURM_TIME_FORMAT=%s"), "{err}");
        assert_eq!(runs("JobIDRaw|Start\n", &ids, clock, 0).unwrap_err(), SacctError::Header("End".into()));
    }
}
