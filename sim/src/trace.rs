//! The canonical trace: one job a row.
//!
//! ```text
//! job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority
//! 17,3600,7200,8,pretrain,alice,training,14400,true,0
//! ```
//! `submit_s` and `duration_s` are seconds (submit relative to the trace's
//! start), `class` one of [`Class`], `contract_s` the declared minimum
//! runtime (0 = unallocated), `priority` the user's priority inside the team
//! (higher first). Unknown columns are ignored; a bad row is an error with
//! its line number, never dropped. Documented in docs/traces.md.
//!
//! An optional column `gpu_type` gives a job's GPU type (a GRES type as
//! Slurm spells it, `h100`; empty or `-`: untyped, any GPUs will do); it is
//! written only when a job has a type, so untyped traces read and write as
//! they always did.
//!
//! Two more optional columns, written on the same terms (only when a job
//! has one, `-` for the jobs without): `time_limit_s`, the time limit the
//! job was submitted with (whole seconds >= 1; what a real scheduler knows
//! instead of the duration), and `name`, the job's name (`sbatch
//! --job-name`; a name as `account`). The simulator runs jobs for their
//! `duration_s` whatever their limit; the planner may plan with the limit
//! or a prediction (`sim::PlanDurations`).
//!
//! Reading and writing go through the `csv` crate (RFC 4180 quoting);
//! `read_csv` is the one CSV reader of the crate (`import` reads
//! ElasticFlow files with it too).

use std::fmt;
use tally_allocator::text::clip;
use tally_allocator::{DAY_S, HOUR, HOUR_S, MINUTE_S};
use thiserror::Error;

/// What kind of work a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    Training,
    BatchInference,
    Quantization,
    Realtime,
    Debug,
    Interactive,
}

impl Class {
    pub const ALL: [Class; 6] = [Class::Training, Class::BatchInference, Class::Quantization, Class::Realtime, Class::Debug, Class::Interactive];

    pub fn name(self) -> &'static str {
        match self {
            Class::Training => "training",
            Class::BatchInference => "batch_inference",
            Class::Quantization => "quantization",
            Class::Realtime => "realtime",
            Class::Debug => "debug",
            Class::Interactive => "interactive",
        }
    }

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s.trim())
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One job of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceJob {
    pub job_id: u64,
    pub submit_s: u64,
    pub duration_s: u64,
    pub gpus: u32,
    pub account: String,
    pub user: String,
    pub class: Class,
    pub contract_s: u64,
    pub resumable: bool,
    pub priority: i32,
    /// The GPU type it asks for (`gpu_type` column); `None`: any GPUs.
    pub gpu_type: Option<String>,
    /// The time limit it was submitted with (`time_limit_s` column), seconds.
    pub time_limit_s: Option<u64>,
    /// Its job name (`name` column).
    pub name: Option<String>,
}

impl TraceJob {
    /// A job as a public trace gives it: account and user `-`, `training`,
    /// contract 0, not resumable, priority 0 (what `augment` fills in).
    pub fn bare(job_id: u64, submit_s: u64, duration_s: u64, gpus: u32) -> TraceJob {
        TraceJob {
            job_id,
            submit_s,
            duration_s,
            gpus,
            account: "-".into(),
            user: "-".into(),
            class: Class::Training,
            contract_s: 0,
            resumable: false,
            priority: 0,
            gpu_type: None,
            time_limit_s: None,
            name: None,
        }
    }
}

/// A trace: jobs in submit order (ties by job id).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    pub jobs: Vec<TraceJob>,
}

impl Trace {
    /// Put the jobs in the canonical order: by `(submit_s, job_id)`.
    pub fn sort(&mut self) {
        self.jobs.sort_by_key(|j| (j.submit_s, j.job_id));
    }

    /// Seconds from the first submission to the last (0 for fewer than two
    /// jobs). This is the "span" of the shared traces' README.
    pub fn span_s(&self) -> u64 {
        let first = self.jobs.iter().map(|j| j.submit_s).min();
        let last = self.jobs.iter().map(|j| j.submit_s).max();
        match (first, last) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        }
    }

    /// GPU-hours the trace asks for: Σ gpus × duration_s / 3600.
    pub fn gpu_hours(&self) -> f64 {
        self.jobs.iter().map(|j| f64::from(j.gpus) * j.duration_s as f64).sum::<f64>() / HOUR
    }

    /// Mean GPUs busy if every job ran at once on arrival: GPU-hours over the
    /// span (0 for a span of 0). Demand per unit time; a replay on a cluster
    /// of `mean_busy_gpus() / 2.5` GPUs asks for 2.5x its supply.
    pub fn mean_busy_gpus(&self) -> f64 {
        match self.span_s() {
            0 => 0.0,
            span => self.gpu_hours() * HOUR / span as f64,
        }
    }

    /// The largest job id (0 for an empty trace).
    pub fn max_job_id(&self) -> u64 {
        self.jobs.iter().map(|j| j.job_id).max().unwrap_or(0)
    }

    /// Jobs per class, in [`Class::ALL`] order (classes with no job included).
    pub fn class_counts(&self) -> Vec<(Class, usize)> {
        Class::ALL.iter().map(|&c| (c, self.jobs.iter().filter(|j| j.class == c).count())).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TraceError {
    #[error("header: lacks column `{0}` (need job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority, in any order)")]
    MissingColumn(&'static str),
    #[error("the trace is empty (no header; expected job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority)")]
    Empty,
    #[error("line {line}: column `{column}`: {problem}")]
    Row { line: usize, column: &'static str, problem: String },
    #[error("line {line}: header: column `{column}` appears twice (each column at most once)")]
    DuplicateColumn { line: usize, column: &'static str },
    #[error(transparent)]
    Csv(#[from] CsvError),
}

/// Why the rows of a comma-separated file cannot be read, whatever its
/// columns mean (`read_csv`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CsvError {
    #[error("line {line}: {found} comma-separated fields, the header has {expected} (one value per header column)")]
    FieldCount { line: usize, expected: usize, found: usize },
    #[error("line {line}: not readable as CSV: {what}")]
    Unreadable { line: usize, what: String },
}

pub const COLUMNS: [&str; 10] = ["job_id", "submit_s", "duration_s", "gpus", "account", "user", "class", "contract_s", "resumable", "priority"];

/// The optional column: a job's GPU type.
pub const GPU_TYPE: &str = "gpu_type";
/// The optional column: a job's time limit, seconds.
pub const TIME_LIMIT_S: &str = "time_limit_s";
/// The optional column: a job's name.
pub const NAME: &str = "name";

// Indices into COLUMNS.
const JOB_ID: usize = 0;
const SUBMIT_S: usize = 1;
const DURATION_S: usize = 2;
const GPUS: usize = 3;
const ACCOUNT: usize = 4;
const USER: usize = 5;
const CLASS: usize = 6;
const CONTRACT_S: usize = 7;
const RESUMABLE: usize = 8;
const PRIORITY: usize = 9;

/// What a column allows, for messages.
const ALLOWED: [&str; 10] = [
    "a whole number >= 0",
    "whole seconds >= 0",
    "whole seconds >= 1",
    "an integer >= 1",
    "a name without spaces, commas or quotes (`-` for none)",
    "a name without spaces, commas or quotes (`-` for none)",
    "one of training|batch_inference|quantization|realtime|debug|interactive",
    "whole seconds >= 0 (0 = unallocated)",
    "true or false",
    "an integer (higher runs first inside the team)",
];

fn bad(line: usize, col: usize, raw: &str) -> TraceError {
    let problem =
        if raw.is_empty() { format!("empty; expected {}", ALLOWED[col]) } else { format!("expected {}, found `{}`", ALLOWED[col], clip(raw)) };
    TraceError::Row { line, column: COLUMNS[col], problem }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || matches!(c, ',' | '"' | '\''))
}

/// A comma-separated file as [`read_csv`] reads it: the header's column
/// names, then the rows (an iterator of `(line, fields)`).
pub(crate) struct CsvFile<'a> {
    /// 1-based line of the header.
    pub header_line: usize,
    /// The header's column names, trimmed.
    pub names: Vec<String>,
    records: csv::StringRecordsIntoIter<&'a [u8]>,
    lines: Lines<'a>,
}

/// Line numbers of byte offsets, counted forwards once.
struct Lines<'a> {
    text: &'a [u8],
    at: usize,
    line: usize,
}

impl Lines<'_> {
    /// The 1-based line of the record `csv` reports at `byte`. `csv` reports
    /// the offset where it started reading, before the empty lines it skips
    /// (its own line count leaves those out), so the newlines there are
    /// stepped over first. Offsets must come in increasing order.
    fn of(&mut self, byte: usize) -> usize {
        let mut start = byte.max(self.at).min(self.text.len());
        while self.text.get(start) == Some(&b'\n') {
            start += 1;
        }
        self.line += self.text[self.at..start].iter().filter(|&&b| b == b'\n').count();
        self.at = start;
        self.line
    }
}

/// Read a comma-separated file with the `csv` crate: RFC 4180 quoting, lines
/// ended by `\n` or `\r\n`, fields trimmed, blank lines skipped (they still
/// count for line numbers), a UTF-8 byte-order mark dropped. The first
/// non-blank line is the header; `None` when there is none. Every row the
/// iterator gives has as many fields as the header, with its 1-based line.
pub(crate) fn read_csv(text: &str) -> Result<Option<CsvFile<'_>>, CsvError> {
    let reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        // `\r` before `\n` is trimmed with the field; a lone `\r` ends nothing.
        .terminator(csv::Terminator::Any(b'\n'))
        .from_reader(text.as_bytes());
    let mut file =
        CsvFile { header_line: 0, names: Vec::new(), records: reader.into_records(), lines: Lines { text: text.as_bytes(), at: 0, line: 1 } };
    let Some((line, header)) = file.next_record()? else { return Ok(None) };
    file.header_line = line;
    file.names = header.iter().map(|n| n.trim_start_matches('\u{feff}').trim().to_string()).collect();
    Ok(Some(file))
}

impl CsvFile<'_> {
    /// The next non-blank record and its line.
    fn next_record(&mut self) -> Result<Option<(usize, csv::StringRecord)>, CsvError> {
        for record in self.records.by_ref() {
            let record = record.map_err(|e| CsvError::Unreadable {
                line: e.position().map_or(self.lines.line, |p| self.lines.of(p.byte() as usize)),
                what: e.to_string(),
            })?;
            if record.len() == 1 && record[0].is_empty() {
                continue;
            }
            let line = self.lines.of(record.position().map_or(0, |p| p.byte() as usize));
            return Ok(Some((line, record)));
        }
        Ok(None)
    }
}

impl Iterator for CsvFile<'_> {
    type Item = Result<(usize, csv::StringRecord), CsvError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(match self.next_record() {
            Ok(Some((line, r))) if r.len() != self.names.len() => Err(CsvError::FieldCount { line, expected: self.names.len(), found: r.len() }),
            Ok(Some(row)) => Ok(row),
            Ok(None) => return None,
            Err(e) => Err(e),
        })
    }
}

/// Parse the canonical CSV format.
///
/// The first non-blank line is the header; columns are found by name (any
/// order, each at most once), unknown columns are ignored, blank lines are
/// skipped and fields are trimmed. Every bad value is an error naming its
/// line (1-based, counting blank lines) and column; a job id seen twice is
/// an error. The jobs come back sorted by `(submit_s, job_id)`.
pub fn parse_csv(text: &str) -> Result<Trace, TraceError> {
    let file = read_csv(text)?.ok_or(TraceError::Empty)?;
    let mut index = [0usize; 10];
    for (col, name) in COLUMNS.iter().enumerate() {
        let mut found = file.names.iter().enumerate().filter(|(_, n)| n == name).map(|(i, _)| i);
        index[col] = found.next().ok_or(TraceError::MissingColumn(name))?;
        if found.next().is_some() {
            return Err(TraceError::DuplicateColumn { line: file.header_line, column: name });
        }
    }

    let optional = |column: &'static str| -> Result<Option<usize>, TraceError> {
        let mut found = file.names.iter().enumerate().filter(|(_, n)| *n == column).map(|(i, _)| i);
        let index = found.next();
        if found.next().is_some() {
            return Err(TraceError::DuplicateColumn { line: file.header_line, column });
        }
        Ok(index)
    };
    let type_index = optional(GPU_TYPE)?;
    let limit_index = optional(TIME_LIMIT_S)?;
    let name_index = optional(NAME)?;

    let mut jobs = Vec::new();
    let mut seen: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for row in file {
        let (line, fields) = row?;
        let get = |col: usize| &fields[index[col]];
        let num = |col: usize, min: u64| -> Result<u64, TraceError> {
            let raw = get(col);
            raw.parse::<u64>().ok().filter(|&v| v >= min).ok_or_else(|| bad(line, col, raw))
        };
        let name = |col: usize| -> Result<String, TraceError> {
            let raw = get(col);
            if valid_name(raw) {
                Ok(raw.to_string())
            } else {
                Err(bad(line, col, raw))
            }
        };
        let job_id = num(JOB_ID, 0)?;
        let submit_s = num(SUBMIT_S, 0)?;
        let duration_s = num(DURATION_S, 1)?;
        let gpus = get(GPUS).parse::<u32>().ok().filter(|&g| g >= 1).ok_or_else(|| bad(line, GPUS, get(GPUS)))?;
        let account = name(ACCOUNT)?;
        let user = name(USER)?;
        let class = Class::parse(get(CLASS)).ok_or_else(|| bad(line, CLASS, get(CLASS)))?;
        let contract_s = num(CONTRACT_S, 0)?;
        let resumable = match get(RESUMABLE) {
            "true" => true,
            "false" => false,
            raw => return Err(bad(line, RESUMABLE, raw)),
        };
        let priority = get(PRIORITY).parse::<i32>().map_err(|_| bad(line, PRIORITY, get(PRIORITY)))?;
        let gpu_type = match type_index.map(|k| &fields[k]) {
            None | Some("") | Some("-") => None,
            Some(t) => match tally_allocator::check_gpu_type_name(t) {
                Ok(()) => Some(t.to_string()),
                Err(e) => return Err(TraceError::Row { line, column: GPU_TYPE, problem: format!("{e}; empty or `-` for any GPUs") }),
            },
        };
        let time_limit_s = match limit_index.map(|k| &fields[k]) {
            None | Some("") | Some("-") => None,
            Some(raw) => match raw.parse::<u64>() {
                Ok(v) if v >= 1 => Some(v),
                _ => {
                    let problem = format!("expected whole seconds >= 1 (empty or `-` for no limit), found `{}`", clip(raw));
                    return Err(TraceError::Row { line, column: TIME_LIMIT_S, problem });
                }
            },
        };
        let job_name = match name_index.map(|k| &fields[k]) {
            None | Some("") | Some("-") => None,
            Some(raw) if valid_name(raw) => Some(raw.to_string()),
            Some(raw) => {
                let problem = format!("expected a name without spaces, commas or quotes (empty or `-` for none), found `{}`", clip(raw));
                return Err(TraceError::Row { line, column: NAME, problem });
            }
        };
        if let Some(first) = seen.insert(job_id, line) {
            return Err(TraceError::Row {
                line,
                column: COLUMNS[JOB_ID],
                problem: format!("job id {job_id} is already used on line {first} (job ids must be unique)"),
            });
        }
        jobs.push(TraceJob {
            account,
            user,
            class,
            contract_s,
            resumable,
            priority,
            gpu_type,
            time_limit_s,
            name: job_name,
            ..TraceJob::bare(job_id, submit_s, duration_s, gpus)
        });
    }
    let mut trace = Trace { jobs };
    trace.sort();
    Ok(trace)
}

/// Write the canonical CSV (with the `csv` crate): the header in
/// [`COLUMNS`] order, then one row per job in the trace's order, `\n` after
/// every line. [`parse_csv`] reads it back to the same trace (when the trace
/// is sorted and its names valid: valid names never need quotes).
pub fn to_csv(trace: &Trace) -> String {
    let mut w = csv::Writer::from_writer(Vec::with_capacity(64 * (trace.jobs.len() + 1)));
    // The type column only when a job has a type: untyped traces as always.
    let typed = trace.jobs.iter().any(|j| j.gpu_type.is_some());
    let limited = trace.jobs.iter().any(|j| j.time_limit_s.is_some());
    let named = trace.jobs.iter().any(|j| j.name.is_some());
    let header = COLUMNS.iter().copied().chain(typed.then_some(GPU_TYPE)).chain(limited.then_some(TIME_LIMIT_S)).chain(named.then_some(NAME));
    let written = w.write_record(header).and_then(|()| {
        trace.jobs.iter().try_for_each(|j| {
            let fields = [
                j.job_id.to_string(),
                j.submit_s.to_string(),
                j.duration_s.to_string(),
                j.gpus.to_string(),
                j.account.clone(),
                j.user.clone(),
                j.class.name().to_string(),
                j.contract_s.to_string(),
                j.resumable.to_string(),
                j.priority.to_string(),
            ];
            let t = typed.then(|| j.gpu_type.clone().unwrap_or_else(|| "-".to_string()));
            let l = limited.then(|| j.time_limit_s.map_or_else(|| "-".to_string(), |l| l.to_string()));
            let n = named.then(|| j.name.clone().unwrap_or_else(|| "-".to_string()));
            w.write_record(fields.into_iter().chain(t).chain(l).chain(n))
        })
    });
    // Into memory, from UTF-8 fields: neither can fail.
    written.expect("writing CSV into memory");
    let bytes = w.into_inner().expect("flushing CSV into memory");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SS` in UTC (sacct and sbatch times with TZ=UTC, the reports' dates).
pub fn utc_iso(unix: u64) -> String {
    let (days, secs) = (unix / DAY_S, unix % DAY_S);
    // Civil from days (H. Hinnant's algorithm), days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", secs / HOUR_S, secs % HOUR_S / MINUTE_S, secs % MINUTE_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority";

    fn job(job_id: u64, submit_s: u64, class: Class) -> TraceJob {
        TraceJob {
            job_id,
            submit_s,
            duration_s: 7200,
            gpus: 8,
            account: "pretrain".into(),
            user: "alice".into(),
            class,
            contract_s: 3600,
            resumable: true,
            priority: 0,
            gpu_type: None,
            time_limit_s: None,
            name: None,
        }
    }

    #[test]
    fn parses_valid_rows_sorted_by_submit_then_id() {
        let text = format!(
            "{HEADER}\n\
             17,3600,7200,8,pretrain,alice,training,3600,true,0\n\
             \n\
             5,3600,7200,8,pretrain,alice,debug,3600,true,0\n\
             2,0,7200,8,pretrain,alice,realtime,3600,true,0\n"
        );
        let trace = parse_csv(&text).unwrap();
        assert_eq!(trace.jobs, vec![job(2, 0, Class::Realtime), job(5, 3600, Class::Debug), job(17, 3600, Class::Training)]);
    }

    #[test]
    fn columns_in_any_order_unknown_ignored_crlf_and_spaces() {
        let text = "note, priority,resumable,contract_s,class,user,account,gpus,duration_s,submit_s,job_id\r\n\
                    hello, -3 ,false,0,interactive,bob,-,1,60,10,1\r\n";
        let trace = parse_csv(text).unwrap();
        assert_eq!(
            trace.jobs,
            vec![TraceJob {
                job_id: 1,
                submit_s: 10,
                duration_s: 60,
                gpus: 1,
                account: "-".into(),
                user: "bob".into(),
                class: Class::Interactive,
                contract_s: 0,
                resumable: false,
                priority: -3,
                gpu_type: None,
                time_limit_s: None,
                name: None,
            }]
        );
    }

    #[test]
    fn contract_may_exceed_duration() {
        let text = format!("{HEADER}\n1,0,60,1,a,b,debug,900,false,0\n");
        assert_eq!(parse_csv(&text).unwrap().jobs[0].contract_s, 900);
    }

    #[test]
    fn bad_rows_name_line_column_and_what_is_allowed() {
        let good = ["1", "0", "60", "1", "acct", "user", "training", "0", "false", "0"];
        // (column index, bad value, expected message); the bad row is line 3
        // (line 2 is a valid job 9).
        let cases: &[(usize, &str, &str)] = &[
            (0, "x", "line 3: column `job_id`: expected a whole number >= 0, found `x`"),
            (0, "-1", "line 3: column `job_id`: expected a whole number >= 0, found `-1`"),
            (0, "9", "line 3: column `job_id`: job id 9 is already used on line 2 (job ids must be unique)"),
            (1, "-5", "line 3: column `submit_s`: expected whole seconds >= 0, found `-5`"),
            (1, "1.5", "line 3: column `submit_s`: expected whole seconds >= 0, found `1.5`"),
            (2, "0", "line 3: column `duration_s`: expected whole seconds >= 1, found `0`"),
            (2, "", "line 3: column `duration_s`: empty; expected whole seconds >= 1"),
            (3, "0", "line 3: column `gpus`: expected an integer >= 1, found `0`"),
            (3, "2.0", "line 3: column `gpus`: expected an integer >= 1, found `2.0`"),
            (3, "99999999999", "line 3: column `gpus`: expected an integer >= 1, found `99999999999`"),
            (4, "", "line 3: column `account`: empty; expected a name without spaces, commas or quotes (`-` for none)"),
            (5, "a b", "line 3: column `user`: expected a name without spaces, commas or quotes (`-` for none), found `a b`"),
            (6, "gaming", "line 3: column `class`: expected one of training|batch_inference|quantization|realtime|debug|interactive, found `gaming`"),
            (
                6,
                "Training",
                "line 3: column `class`: expected one of training|batch_inference|quantization|realtime|debug|interactive, found `Training`",
            ),
            (7, "-1", "line 3: column `contract_s`: expected whole seconds >= 0 (0 = unallocated), found `-1`"),
            (7, "1h", "line 3: column `contract_s`: expected whole seconds >= 0 (0 = unallocated), found `1h`"),
            (8, "yes", "line 3: column `resumable`: expected true or false, found `yes`"),
            (8, "1", "line 3: column `resumable`: expected true or false, found `1`"),
            (9, "high", "line 3: column `priority`: expected an integer (higher runs first inside the team), found `high`"),
        ];
        for (col, value, want) in cases {
            let mut row = good;
            row[*col] = value;
            let text = format!("{HEADER}\n9,0,60,1,a,u,debug,0,false,0\n{}\n", row.join(","));
            let err = parse_csv(&text).expect_err(&format!("column {col} value {value:?} should fail"));
            assert_eq!(err.to_string(), *want, "column {col} value {value:?}");
        }
    }

    #[test]
    fn structural_errors() {
        let cases: &[(String, &str)] = &[
            (
                String::new(),
                "the trace is empty (no header; expected job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority)",
            ),
            (
                "\n  \n".into(),
                "the trace is empty (no header; expected job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority)",
            ),
            (
                "job_id,submit_s,duration_s,account,user,class,contract_s,resumable,priority\n".into(),
                "header: lacks column `gpus` (need job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority, in any order)",
            ),
            (format!("\n{HEADER},gpus\n"), "line 2: header: column `gpus` appears twice (each column at most once)"),
            (format!("{HEADER}\n1,0,60,1,a,u,debug,0,false\n"), "line 2: 9 comma-separated fields, the header has 10 (one value per header column)"),
            (
                format!("{HEADER}\n\n\n1,0,60,1,a,u,debug,0,false,0,extra\n"),
                "line 4: 11 comma-separated fields, the header has 10 (one value per header column)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_csv(text).unwrap_err().to_string(), *want, "{text:?}");
        }
    }

    #[test]
    fn line_numbers_count_blank_lines_crlf_and_quoted_newlines() {
        let row = "1,0,60,1,a,u,debug,0,false,0";
        // CRLF, blank lines (empty and spaces), a byte-order mark: the bad
        // row is still named by its line in the file.
        let text = format!("\u{feff}\r\n{HEADER}\r\n\r\n  \r\n{row}\r\n\r\n2,0,60,1,a,u,debug,0,maybe,0\r\n");
        assert_eq!(parse_csv(&text).unwrap_err().to_string(), "line 7: column `resumable`: expected true or false, found `maybe`");
        // A quoted field may hold a newline (RFC 4180): it is one field, and
        // the lines after it keep their numbers.
        let text = format!("{HEADER}\n{row}\n\n\"2\",0,60,1,\"a\nb\",u,debug,0,false,0\n3,0,60,1,a,u,debug,0,false,x\n");
        assert_eq!(
            parse_csv(&text).unwrap_err().to_string(),
            "line 4: column `account`: expected a name without spaces, commas or quotes (`-` for none), found `a\nb`"
        );
        let text = text.replace("\"a\nb\"", "a");
        assert_eq!(
            parse_csv(&text).unwrap_err().to_string(),
            "line 5: column `priority`: expected an integer (higher runs first inside the team), found `x`"
        );
    }

    #[test]
    fn header_only_is_an_empty_trace() {
        assert_eq!(parse_csv(&format!("{HEADER}\n")).unwrap(), Trace::default());
    }

    #[test]
    fn round_trip() {
        let mut jobs = Vec::new();
        for (i, class) in Class::ALL.into_iter().enumerate() {
            let i = i as u64;
            jobs.push(TraceJob {
                job_id: 100 - i,
                submit_s: i * 10,
                duration_s: 60 + i,
                gpus: 1 + i as u32,
                account: format!("team{i}"),
                user: format!("team{i}-u1"),
                class,
                contract_s: i * 60,
                resumable: i % 2 == 0,
                priority: i as i32 - 2,
                gpu_type: None,
                time_limit_s: None,
                name: None,
            });
        }
        let trace = Trace { jobs };
        let text = to_csv(&trace);
        assert!(text.starts_with(&format!("{HEADER}\n")));
        assert_eq!(text.lines().nth(1), Some("100,0,60,1,team0,team0-u1,training,0,true,-2"));
        assert_eq!(parse_csv(&text).unwrap(), trace);
        assert_eq!(to_csv(&parse_csv(&text).unwrap()), text);
    }

    #[test]
    fn the_gpu_type_column_is_optional_and_checked() {
        let text =
            format!("{HEADER},gpu_type\n1,0,60,8,a,u,training,0,false,0,b200\n2,0,60,8,a,u,training,0,false,0,-\n3,0,60,8,a,u,training,0,false,0,\n");
        let t = parse_csv(&text).unwrap();
        assert_eq!(t.jobs.iter().map(|j| j.gpu_type.as_deref()).collect::<Vec<_>>(), vec![Some("b200"), None, None]);
        // Written back with `-` for the untyped; read again the same.
        let out = to_csv(&t);
        assert!(out.starts_with(&format!("{HEADER},gpu_type\n1,0,60,8,a,u,training,0,false,0,b200\n2,0,60,8,a,u,training,0,false,0,-\n")), "{out}");
        assert_eq!(parse_csv(&out).unwrap(), t);
        // Without a typed job: no column.
        let plain = Trace { jobs: t.jobs.iter().map(|j| TraceJob { gpu_type: None, ..j.clone() }).collect() };
        assert!(to_csv(&plain).starts_with(&format!("{HEADER}\n")));
        let bad = format!("{HEADER},gpu_type\n1,0,60,8,a,u,training,0,false,0,gpu:b200\n");
        assert_eq!(
            parse_csv(&bad).unwrap_err().to_string(),
            "line 2: column `gpu_type`: GPU type `gpu:b200` is not a GRES type as Slurm spells it (1 to 64 letters, digits, `_`, `-` or `.`, starting with a letter or digit, as in gres.conf's Type=: e.g. h100, a100_80g); empty or `-` for any GPUs"
        );
        assert_eq!(
            parse_csv(&format!("{HEADER},gpu_type,gpu_type\n")).unwrap_err().to_string(),
            "line 1: header: column `gpu_type` appears twice (each column at most once)"
        );
    }

    #[test]
    fn time_limit_and_name_columns_are_optional_and_checked() {
        let text = format!("{HEADER},name,time_limit_s\n1,0,60,8,a,u,training,0,false,0,sft-7b,7200\n2,0,60,8,a,u,training,0,false,0,-,\n");
        let t = parse_csv(&text).unwrap();
        let got: Vec<(Option<u64>, Option<&str>)> = t.jobs.iter().map(|j| (j.time_limit_s, j.name.as_deref())).collect();
        assert_eq!(got, vec![(Some(7200), Some("sft-7b")), (None, None)]);
        // Written after the others, in a fixed order, `-` for the jobs without.
        let out = to_csv(&t);
        assert!(
            out.starts_with(&format!(
                "{HEADER},time_limit_s,name\n1,0,60,8,a,u,training,0,false,0,7200,sft-7b\n2,0,60,8,a,u,training,0,false,0,-,-\n"
            )),
            "{out}"
        );
        assert_eq!(parse_csv(&out).unwrap(), t);
        // Only the limit: no name column; neither: the ten columns as always.
        let limit_only = Trace { jobs: t.jobs.iter().map(|j| TraceJob { name: None, ..j.clone() }).collect() };
        assert!(to_csv(&limit_only).starts_with(&format!("{HEADER},time_limit_s\n")));
        let plain = Trace { jobs: t.jobs.iter().map(|j| TraceJob { name: None, time_limit_s: None, ..j.clone() }).collect() };
        assert!(to_csv(&plain).starts_with(&format!("{HEADER}\n1,")));
        let cases = [
            ("time_limit_s", "0", "line 2: column `time_limit_s`: expected whole seconds >= 1 (empty or `-` for no limit), found `0`"),
            ("time_limit_s", "2h", "line 2: column `time_limit_s`: expected whole seconds >= 1 (empty or `-` for no limit), found `2h`"),
            ("name", "\"a b\"", "line 2: column `name`: expected a name without spaces, commas or quotes (empty or `-` for none), found `a b`"),
        ];
        for (column, value, want) in cases {
            let bad = format!("{HEADER},{column}\n1,0,60,8,a,u,training,0,false,0,{value}\n");
            assert_eq!(parse_csv(&bad).unwrap_err().to_string(), want);
        }
        assert_eq!(
            parse_csv(&format!("{HEADER},name,name\n")).unwrap_err().to_string(),
            "line 1: header: column `name` appears twice (each column at most once)"
        );
    }

    #[test]
    fn span_and_gpu_hours() {
        let mut t = Trace { jobs: vec![job(1, 100, Class::Training), job(2, 3700, Class::Debug)] };
        assert_eq!(t.span_s(), 3600);
        assert_eq!(t.gpu_hours(), 32.0); // 2 jobs x 8 GPUs x 2 h
        assert_eq!(t.mean_busy_gpus(), 32.0);
        assert_eq!(t.max_job_id(), 2);
        t.jobs.truncate(1);
        assert_eq!(t.span_s(), 0);
        assert_eq!(t.mean_busy_gpus(), 0.0);
        assert_eq!(Trace::default().span_s(), 0);
        assert_eq!(Trace::default().gpu_hours(), 0.0);
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_iso(0), "1970-01-01T00:00:00");
        assert_eq!(utc_iso(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(utc_iso(1_796_246_414), "2026-12-02T21:20:14");
    }
}
