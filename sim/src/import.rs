//! Importers from public trace formats into the canonical [`Trace`].
//!
//! - [`elasticflow`]: the ElasticFlow ITP traces (Microsoft, 2021),
//!   `job_id,submission_time,duration,num_gpu`. Ids become `1..=n` in submit
//!   order (ties in file order); every job is `training`, account and user
//!   `-`, contract 0, not resumable, priority 0. A bad row is an error (none
//!   of the seven published files has one).
//! - [`swf`]: the Standard Workload Format of the Parallel Workloads Archive
//!   (18 whitespace-separated fields a job, `;` comment lines). Jobs with
//!   no run time or no processors are skipped and reported in
//!   [`ImportReport::skipped`], never dropped silently.
//!
//! Both take the file's text and do no IO. Mappings: docs/traces.md.

use crate::trace::{read_csv, CsvError, Trace, TraceJob};
use std::collections::HashMap;
use std::fmt;
use tally_allocator::text::clip;
use thiserror::Error;

/// Why an import failed. Every row problem names its 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ImportError {
    #[error("the file is empty (expected the header `job_id,submission_time,duration,num_gpu`)")]
    Empty,
    #[error("header: lacks column `{0}` (an ElasticFlow trace has job_id,submission_time,duration,num_gpu, in any order)")]
    MissingColumn(&'static str),
    #[error("line {line}: column `{column}`: {problem}")]
    Column { line: usize, column: &'static str, problem: String },
    #[error(transparent)]
    Csv(#[from] CsvError),
    #[error("line {line}: {found} whitespace-separated fields; an SWF job line has 18 (`;` starts a comment line)")]
    SwfFieldCount { line: usize, found: usize },
    #[error("line {line}: field {field} ({name}): {problem}")]
    SwfField { line: usize, field: usize, name: &'static str, problem: String },
    #[error("line {line}: job number {job_id} is already used on line {first} (job numbers must be unique)")]
    DuplicateJob { line: usize, job_id: u64, first: usize },
    #[error("procs_per_gpu must be at least 1 (processors that make one GPU), found 0")]
    ProcsPerGpu,
}

/// Why an SWF job was left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// Field 2 is negative (-1: unknown).
    NoSubmitTime,
    /// Field 4 is <= 0 (-1: unknown; 0: under half a second, or cancelled).
    NoRunTime,
    /// The processor count (field 5, or field 8 when field 5 is -1) is <= 0.
    NoProcessors,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::NoSubmitTime => "submit time unknown (field 2 < 0)",
            SkipReason::NoRunTime => "run time <= 0 or unknown (field 4)",
            SkipReason::NoProcessors => "no processors (field 5, or 8 when 5 is -1, <= 0)",
        })
    }
}

/// An imported trace and the rows left out, with their lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImportReport {
    pub trace: Trace,
    /// `(line, reason)` of every job line not imported, in file order.
    pub skipped: Vec<(usize, SkipReason)>,
}

impl ImportReport {
    /// One line for humans: `skipped 3 rows: 2 run time <= 0 … (lines 4, 9),
    /// 1 no processors … (line 7)`, at most `max_lines` line numbers per
    /// reason; empty when nothing was skipped.
    pub fn skip_summary(&self, max_lines: usize) -> String {
        if self.skipped.is_empty() {
            return String::new();
        }
        let mut by_reason: std::collections::BTreeMap<SkipReason, Vec<usize>> = Default::default();
        for &(line, reason) in &self.skipped {
            by_reason.entry(reason).or_default().push(line);
        }
        let parts: Vec<String> = by_reason
            .iter()
            .map(|(reason, lines)| {
                let mut shown: Vec<String> = lines.iter().take(max_lines).map(usize::to_string).collect();
                if lines.len() > max_lines {
                    shown.push("…".to_string());
                }
                let word = if lines.len() == 1 { "line" } else { "lines" };
                format!("{} {} ({} {})", lines.len(), reason, word, shown.join(", "))
            })
            .collect();
        let rows = if self.skipped.len() == 1 { "row" } else { "rows" };
        format!("skipped {} {}: {}", self.skipped.len(), rows, parts.join("; "))
    }
}

const EF_COLUMNS: [&str; 4] = ["job_id", "submission_time", "duration", "num_gpu"];
const EF_ALLOWED: [&str; 4] = ["a non-empty id", "whole seconds >= 0", "whole seconds >= 1", "an integer >= 1"];

/// Import an ElasticFlow trace (`job_id,submission_time,duration,num_gpu`;
/// columns by name, others ignored, blank lines skipped).
///
/// Job ids become `1..=n` in submit order (ties keep file order); the
/// original ids must be unique. Every job: account and user `-`, class
/// `training`, contract 0, not resumable, priority 0. A duration or GPU
/// count of 0 is an error with its line (the published files have none).
pub fn elasticflow(text: &str) -> Result<Trace, ImportError> {
    let file = read_csv(text)?.ok_or(ImportError::Empty)?;
    let mut index = [0usize; 4];
    for (col, name) in EF_COLUMNS.iter().enumerate() {
        index[col] = file.names.iter().position(|n| n == name).ok_or(ImportError::MissingColumn(name))?;
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut rows: Vec<(u64, u64, u32)> = Vec::new();
    for row in file {
        let (line, fields) = row?;
        let bad = |col: usize| {
            let raw = &fields[index[col]];
            let problem = if raw.is_empty() {
                format!("empty; expected {}", EF_ALLOWED[col])
            } else {
                format!("expected {}, found `{}`", EF_ALLOWED[col], clip(raw))
            };
            ImportError::Column { line, column: EF_COLUMNS[col], problem }
        };
        let id = &fields[index[0]];
        if id.is_empty() {
            return Err(bad(0));
        }
        if let Some(first) = seen.insert(id.to_string(), line) {
            return Err(ImportError::Column {
                line,
                column: EF_COLUMNS[0],
                problem: format!("job id `{}` is already used on line {first} (job ids must be unique)", clip(id)),
            });
        }
        let submit_s = fields[index[1]].parse::<u64>().map_err(|_| bad(1))?;
        let duration_s = fields[index[2]].parse::<u64>().ok().filter(|&d| d >= 1).ok_or_else(|| bad(2))?;
        let gpus = fields[index[3]].parse::<u32>().ok().filter(|&g| g >= 1).ok_or_else(|| bad(3))?;
        rows.push((submit_s, duration_s, gpus));
    }
    // Stable: ties in submit time keep file order.
    rows.sort_by_key(|r| r.0);
    let jobs = rows.into_iter().zip(1u64..).map(|((submit_s, duration_s, gpus), id)| TraceJob::bare(id, submit_s, duration_s, gpus)).collect();
    Ok(Trace { jobs })
}

/// How SWF processors become GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwfOptions {
    /// Processors per GPU: a job of `p` processors asks for
    /// `ceil(p / procs_per_gpu)` GPUs. Default 1 (one processor, one GPU).
    pub procs_per_gpu: u32,
}

impl Default for SwfOptions {
    fn default() -> Self {
        SwfOptions { procs_per_gpu: 1 }
    }
}

/// The SWF fields used (1-based numbers as in the standard) and their names.
const SWF_JOB: (usize, &str) = (1, "job number");
const SWF_SUBMIT: (usize, &str) = (2, "submit time");
const SWF_RUN: (usize, &str) = (4, "run time");
const SWF_ALLOC_PROCS: (usize, &str) = (5, "allocated processors");
const SWF_REQ_PROCS: (usize, &str) = (8, "requested processors");
const SWF_USER: (usize, &str) = (12, "user id");
const SWF_GROUP: (usize, &str) = (13, "group id");
const SWF_FIELDS: usize = 18;

/// Import a Standard Workload Format log (Parallel Workloads Archive,
/// version 2.2).
///
/// Lines starting with `;` (header comments) and blank lines are skipped;
/// every other line must have 18 whitespace-separated fields, `-1` meaning
/// unknown. Used: 1 job number → `job_id` (unique); 2 submit time →
/// `submit_s` (rounded); 4 run time → `duration_s` (rounded up, so any
/// positive run time lasts at least 1 s); 5 allocated processors, or 8
/// requested processors when 5 is -1 → `gpus = ceil(procs / procs_per_gpu)`;
/// 12 user id → user `u<id>`; 13 group id → account `g<id>` (`-` when -1).
/// Jobs with submit time < 0, run time <= 0 or processors <= 0 are skipped
/// and reported. Time fields may be fractional, as the standard allows.
pub fn swf(text: &str, opts: &SwfOptions) -> Result<ImportReport, ImportError> {
    if opts.procs_per_gpu == 0 {
        return Err(ImportError::ProcsPerGpu);
    }
    let ppg = i64::from(opts.procs_per_gpu);
    let mut jobs = Vec::new();
    let mut skipped = Vec::new();
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (i, row) in text.lines().enumerate() {
        let line = i + 1;
        let row = row.trim();
        if row.is_empty() || row.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = row.split_whitespace().collect();
        if fields.len() != SWF_FIELDS {
            return Err(ImportError::SwfFieldCount { line, found: fields.len() });
        }
        let err = |(field, name): (usize, &'static str), allowed: &str| ImportError::SwfField {
            line,
            field,
            name,
            problem: format!("expected {allowed}, found `{}`", clip(fields[field - 1])),
        };
        let int = |f: (usize, &'static str)| -> Result<i64, ImportError> {
            fields[f.0 - 1].parse::<i64>().map_err(|_| err(f, "an integer (-1 = unknown)"))
        };
        let time = |f: (usize, &'static str)| -> Result<f64, ImportError> {
            fields[f.0 - 1].parse::<f64>().ok().filter(|t| t.is_finite() && *t < 1e15).ok_or_else(|| err(f, "seconds (-1 = unknown)"))
        };

        let job_id = u64::try_from(int(SWF_JOB)?).map_err(|_| err(SWF_JOB, "a job number >= 0"))?;
        if let Some(first) = seen.insert(job_id, line) {
            return Err(ImportError::DuplicateJob { line, job_id, first });
        }
        let submit = time(SWF_SUBMIT)?;
        let run = time(SWF_RUN)?;
        let procs = match int(SWF_ALLOC_PROCS)? {
            -1 => int(SWF_REQ_PROCS)?,
            p => p,
        };
        let user = int(SWF_USER)?;
        let group = int(SWF_GROUP)?;
        let reason = if submit < 0.0 {
            Some(SkipReason::NoSubmitTime)
        } else if run <= 0.0 {
            Some(SkipReason::NoRunTime)
        } else if procs <= 0 {
            Some(SkipReason::NoProcessors)
        } else {
            None
        };
        if let Some(reason) = reason {
            skipped.push((line, reason));
            continue;
        }
        // ceil(procs / ppg) without overflow (procs may be i64::MAX).
        let gpus = u32::try_from(procs / ppg + i64::from(procs % ppg != 0))
            .map_err(|_| err(SWF_ALLOC_PROCS, "a processor count that fits in 32 bits once divided by procs_per_gpu"))?;
        let name = |prefix: &str, id: i64| if id < 0 { "-".to_string() } else { format!("{prefix}{id}") };
        jobs.push(TraceJob {
            account: name("g", group),
            user: name("u", user),
            ..TraceJob::bare(job_id, submit.round() as u64, run.ceil() as u64, gpus)
        });
    }
    let mut trace = Trace { jobs };
    trace.sort();
    Ok(ImportReport { trace, skipped })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ef_job(job_id: u64, submit_s: u64, duration_s: u64, gpus: u32) -> TraceJob {
        TraceJob::bare(job_id, submit_s, duration_s, gpus)
    }

    #[test]
    fn elasticflow_renumbers_in_submit_order() {
        let text = "job_id,submission_time,duration,num_gpu\n\
                    c,500,700,8\n\
                    a,100,600,1\n\
                    \n\
                    b,500,601,64\n";
        let trace = elasticflow(text).unwrap();
        assert_eq!(trace.jobs, vec![ef_job(1, 100, 600, 1), ef_job(2, 500, 700, 8), ef_job(3, 500, 601, 64)]);
    }

    #[test]
    fn elasticflow_columns_by_name() {
        let text = "num_gpu,extra,duration,submission_time,job_id\r\n2,x,60,5,id-1\r\n";
        assert_eq!(elasticflow(text).unwrap().jobs, vec![ef_job(1, 5, 60, 2)]);
    }

    #[test]
    fn elasticflow_errors() {
        let h = "job_id,submission_time,duration,num_gpu\n";
        let cases: &[(String, &str)] = &[
            (String::new(), "the file is empty (expected the header `job_id,submission_time,duration,num_gpu`)"),
            (
                "job_id,submission_time,num_gpu\n".into(),
                "header: lacks column `duration` (an ElasticFlow trace has job_id,submission_time,duration,num_gpu, in any order)",
            ),
            (format!("{h}a,0,60,1\na,5,60,1\n"), "line 3: column `job_id`: job id `a` is already used on line 2 (job ids must be unique)"),
            (format!("{h},0,60,1\n"), "line 2: column `job_id`: empty; expected a non-empty id"),
            (format!("{h}a,-3,60,1\n"), "line 2: column `submission_time`: expected whole seconds >= 0, found `-3`"),
            (format!("{h}a,0,0,1\n"), "line 2: column `duration`: expected whole seconds >= 1, found `0`"),
            (format!("{h}a,0,60,0\n"), "line 2: column `num_gpu`: expected an integer >= 1, found `0`"),
            (format!("{h}a,0,60,1.5\n"), "line 2: column `num_gpu`: expected an integer >= 1, found `1.5`"),
            (format!("{h}a,0,60\n"), "line 2: 3 comma-separated fields, the header has 4 (one value per header column)"),
        ];
        for (text, want) in cases {
            assert_eq!(elasticflow(text).unwrap_err().to_string(), *want, "{text:?}");
        }
    }

    /// 18 fields: number submit wait run alloc cpu mem req_procs req_time
    /// req_mem status user group exe queue partition prev think.
    const SWF: &str = "\
; Version: 2.2
; Computer: test
;   MaxProcs: 128

1   0     5   3600  16 -1 -1  16 7200 -1 1  3  7 -1 1 -1 -1 -1
2   10    0   0     4  -1 -1  4  60   -1 5  3  7 -1 1 -1 -1 -1
3   20.4  0   59.2  -1 -1 -1  3  60   -1 1  4 -1 -1 1 -1 -1 -1
4   30    0   100   -1 -1 -1  -1 60   -1 1 -1  7 -1 1 -1 -1 -1
5   5     0   -1    8  -1 -1  8  60   -1 0  3  7 -1 1 -1 -1 -1
 6  40    0   10    0  -1 -1  8  60   -1 1  3  7 -1 1 -1 -1 -1
7   -1    0   10    1  -1 -1  8  60   -1 1  3  7 -1 1 -1 -1 -1
";

    #[test]
    fn swf_maps_fields_and_reports_skips() {
        let report = swf(SWF, &SwfOptions::default()).unwrap();
        let job = |id, submit, dur, gpus, acct: &str, user: &str| TraceJob {
            account: acct.into(),
            user: user.into(),
            ..TraceJob::bare(id, submit, dur, gpus)
        };
        assert_eq!(report.trace.jobs, vec![job(1, 0, 3600, 16, "g7", "u3"), job(3, 20, 60, 3, "-", "u4")]);
        assert_eq!(
            report.skipped,
            vec![
                (6, SkipReason::NoRunTime),
                (8, SkipReason::NoProcessors),
                (9, SkipReason::NoRunTime),
                (10, SkipReason::NoProcessors),
                (11, SkipReason::NoSubmitTime),
            ]
        );
        assert_eq!(
            report.skip_summary(1),
            "skipped 5 rows: 1 submit time unknown (field 2 < 0) (line 11); \
             2 run time <= 0 or unknown (field 4) (lines 6, …); \
             2 no processors (field 5, or 8 when 5 is -1, <= 0) (lines 8, …)"
        );
        assert_eq!(ImportReport::default().skip_summary(5), "");
    }

    #[test]
    fn swf_a_huge_processor_count_is_an_error_not_an_overflow() {
        // Found by fuzzing: ceil(procs / procs_per_gpu) overflowed at i64::MAX.
        let row = "1 0 0 10 9223372036854775807 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1\n";
        let e = swf(row, &SwfOptions { procs_per_gpu: 1 }).unwrap_err().to_string();
        assert!(e.contains("fits in 32 bits"), "{e}");
    }

    #[test]
    fn swf_procs_per_gpu_rounds_up() {
        let report = swf(SWF, &SwfOptions { procs_per_gpu: 5 }).unwrap();
        let gpus: Vec<u32> = report.trace.jobs.iter().map(|j| j.gpus).collect();
        assert_eq!(gpus, vec![4, 1]); // 16 / 5 → 4, 3 / 5 → 1
    }

    #[test]
    fn swf_errors() {
        let row = "1 0 0 10 1 -1 -1 1 60 -1 1 3 7 -1 1 -1 -1 -1";
        let cases: &[(String, &str)] = &[
            ("; c\n1 0 0 10 1\n".into(), "line 2: 5 whitespace-separated fields; an SWF job line has 18 (`;` starts a comment line)"),
            (format!("{row}\n{row}\n"), "line 2: job number 1 is already used on line 1 (job numbers must be unique)"),
        ];
        // (what of `row` is replaced, by what, the message)
        let bad_fields: &[(&str, &str, &str)] = &[
            ("1 0 0 10", "x 0 0 10", "field 1 (job number): expected an integer (-1 = unknown), found `x`"),
            ("1 0 0 10", "-1 0 0 10", "field 1 (job number): expected a job number >= 0, found `-1`"),
            ("1 0 0 10", "1 t 0 10", "field 2 (submit time): expected seconds (-1 = unknown), found `t`"),
            ("1 0 0 10", "1 0 0 NaN", "field 4 (run time): expected seconds (-1 = unknown), found `NaN`"),
            ("10 1 -1", "10 1.5 -1", "field 5 (allocated processors): expected an integer (-1 = unknown), found `1.5`"),
            (" 3 7 ", " bob 7 ", "field 12 (user id): expected an integer (-1 = unknown), found `bob`"),
        ];
        let bad_fields = bad_fields.iter().map(|(from, to, want)| (row.replacen(from, to, 1), format!("line 1: {want}")));
        for (text, want) in cases.iter().map(|(t, w)| (t.clone(), w.to_string())).chain(bad_fields) {
            assert_eq!(swf(&text, &SwfOptions::default()).unwrap_err().to_string(), want, "{text:?}");
        }
        assert_eq!(
            swf(row, &SwfOptions { procs_per_gpu: 0 }).unwrap_err().to_string(),
            "procs_per_gpu must be at least 1 (processors that make one GPU), found 0"
        );
    }

    #[test]
    fn swf_comments_only_is_empty() {
        let report = swf("; only\n;comments\n\n", &SwfOptions::default()).unwrap();
        assert_eq!(report, ImportReport::default());
    }
}
