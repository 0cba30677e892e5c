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
use crate::trace::{Class, Trace, TraceJob};
use std::collections::BTreeMap;
use tally_allocator::text::clip;
use tally_allocator::tres::{gpu_count, gpu_type};
use tally_allocator::{comment_tokens, parse_comment, ContractRules, GpuWeights, DAY_S, HOUR, HOUR_S, MINUTE_S};
use tally_planner::predict::{CommentMeta, MetaError};
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
        let time = |s: &str| unix_time(s).map_err(bad);
        let Some(start) = time(get(c_start)?)?.filter(|&s| s > 0) else { continue };
        let state = get(c_state)?.split_whitespace().next().unwrap_or("");
        let (end_t, kind) = match state {
            "COMPLETED" | "TIMEOUT" | "FAILED" | "OUT_OF_MEMORY" | "NODE_FAIL" => (time(get(c_end)?)?.unwrap_or(end), RunEnd::Completed),
            "PREEMPTED" | "REQUEUED" => (time(get(c_end)?)?.unwrap_or(end), RunEnd::Preempted),
            "CANCELLED" | "RUNNING" | "SUSPENDED" => (time(get(c_end)?)?.unwrap_or(end), RunEnd::Cut),
            "PENDING" => continue,
            other => return Err(bad(format!("unknown state `{}`", clip(other)))),
        };
        let (a, b) = (clock.to_trace(start), clock.to_trace(end_t.max(start)));
        out.push(Run { job, start_s: a, end_s: b, end: kind, weight: None });
    }
    Ok(out)
}

/// A comment problem with the comment's values cut to what a message
/// quotes ([`clip`]): a 20 MB `model_params=` is not printed back whole.
fn clip_meta(e: &MetaError) -> MetaError {
    match e {
        MetaError::ModelParams { value } => MetaError::ModelParams { value: clip(value) },
        MetaError::Duplicate { key, first, second } => MetaError::Duplicate { key, first: clip(first), second: clip(second) },
        e => e.clone(),
    }
}

/// A time of sacct's output: Unix seconds, or `None` for `Unknown`,
/// `None` or empty.
fn unix_time(s: &str) -> Result<Option<u64>, String> {
    match s {
        "" | "Unknown" | "None" => Ok(None),
        _ => s.parse::<u64>().map(Some).map_err(|_| format!("time `{}` is not Unix seconds (run sacct with SLURM_TIME_FORMAT=%s)", clip(s))),
    }
}

/// The columns [`history`] reads; `Comment` last, so that a `|` in a
/// comment cannot shift the others.
pub const HISTORY_COLUMNS: &str = "JobIDRaw,Submit,Start,End,State,Account,User,AllocTRES,Comment";
/// The same with the optional columns [`history`] also reads (time limit and job name).
pub const HISTORY_COLUMNS_FULL: &str = "JobIDRaw,Submit,Start,End,State,Account,User,AllocTRES,Timelimit,JobName,Comment";

/// A time limit as sacct prints it: `[days-]hours:minutes:seconds`,
/// `minutes:seconds`, `minutes`, `days-hours[:minutes]`, in seconds;
/// `None` for no limit (`UNLIMITED`, `Partition_Limit`, `INVALID`, empty).
pub fn parse_time_limit(s: &str) -> Result<Option<u64>, String> {
    let s = s.trim();
    if s.is_empty() || ["UNLIMITED", "Partition_Limit", "INVALID", "NONE"].iter().any(|w| s.eq_ignore_ascii_case(w)) {
        return Ok(None);
    }
    let bad = || {
        format!(
            "time limit `{}` is not one of sacct's forms ([days-]hours:minutes:seconds, minutes:seconds, minutes, UNLIMITED, Partition_Limit)",
            clip(s)
        )
    };
    let num = |x: &str| -> Result<u64, String> {
        if !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()) {
            x.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, s),
    };
    let parts: Vec<u64> = rest.split(':').map(num).collect::<Result<_, _>>()?;
    let secs = match (days, parts.as_slice()) {
        (None, [m]) => m * MINUTE_S,
        (None, [m, sec]) => m * MINUTE_S + sec,
        (None, [h, m, sec]) => h * HOUR_S + m * MINUTE_S + sec,
        (Some(d), [h]) => d * DAY_S + h * HOUR_S,
        (Some(d), [h, m]) => d * DAY_S + h * HOUR_S + m * MINUTE_S,
        (Some(d), [h, m, sec]) => d * DAY_S + h * HOUR_S + m * MINUTE_S + sec,
        _ => return Err(bad()),
    };
    Ok(Some(secs))
}

/// A job name as a trace name: characters a trace name cannot hold
/// (whitespace, `,`, quotes) become `_`; empty is none.
fn trace_name(raw: &str) -> Option<String> {
    let name: String = raw.trim().chars().map(|c| if c.is_whitespace() || matches!(c, ',' | '"' | '\'') { '_' } else { c }).collect();
    (!name.is_empty() && name != "-").then_some(name)
}

/// Why a job of the history is not in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HistorySkip {
    /// No run with a start time (cancelled while pending, still pending).
    NeverStarted,
    /// Its allocated TRES hold no GPU.
    NoGpus,
    /// Its last run has no end yet: its length is unknown.
    StillRunning,
}

impl std::fmt::Display for HistorySkip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HistorySkip::NeverStarted => "never started",
            HistorySkip::NoGpus => "no GPU in AllocTRES",
            HistorySkip::StillRunning => "still running",
        })
    }
}

/// A cluster's history as a canonical trace ([`history`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct History {
    /// Submit times relative to the first submission.
    pub trace: Trace,
    /// Unix seconds of the first submission (the trace's t = 0).
    pub origin_s: u64,
    /// Jobs left out: the line of their first row, and why.
    pub skipped: Vec<(usize, HistorySkip)>,
    /// Jobs whose comment the contract rules refuse (imported as contract 0,
    /// unallocated, as job_submit/tally would not have let them in with it).
    pub refused_contracts: usize,
    /// Requeues in the history (runs after a job's first).
    pub requeues: usize,
    /// Imported jobs whose comment has a `class=`, `model_params=` or
    /// `method=` token that could not be read (an unknown class is imported
    /// as `training`): the first problem of each, by line.
    pub comment_problems: Vec<(usize, String)>,
    /// Every run of the imported jobs, in Unix seconds (what a ledger is
    /// seeded from).
    pub runs: Vec<HistoryRun>,
}

/// One run of an imported job, as it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRun {
    pub job_id: u64,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// Its GPU type, when `[cluster.gpu_types]` names it (charged at its weight).
    pub gpu_type: Option<String>,
    /// The job's contract (0: unallocated, never charged).
    pub contract_s: u64,
    pub start_s: u64,
    pub end_s: u64,
}

#[derive(Debug)]
struct Seen {
    line: usize,
    submit: Option<u64>,
    runs: Vec<(u64, Option<u64>)>,
    account: String,
    user: String,
    gpus: Option<u32>,
    gpu_type: Option<String>,
    time_limit_s: Option<u64>,
    name: Option<String>,
    comment: String,
}

/// A Slurm cluster's accounting as a canonical trace, for a replay under
/// Tally (docs/traces.md, "Your own cluster"). Input: the output of
///
/// ```text
/// SLURM_TIME_FORMAT=%s sacct -a -X -D -P -S <start> -E <end> \
///     -o JobIDRaw,Submit,Start,End,State,Account,User,AllocTRES[,Timelimit,JobName],Comment
/// ```
///
/// (`Timelimit` and `JobName` optional: with them the trace has each job's
/// time limit, [`parse_time_limit`], and name, for the predictors.)
/// one line per run of a job (`-D`: a requeued job's earlier runs too).
/// A job becomes one trace job: its first submission, its GPUs from
/// `AllocTRES` ([`gpu_count`]) and, when `types` (`[cluster.gpu_types]`)
/// names it, their type ([`gpu_type`]; a type the table does not name is
/// left out: it weighs 1 either way), its contract from its comment under
/// `rules` (the site's rules, as job_submit/tally applies them; refused →
/// contract 0), its class from a `class=` token (else `training`; read by
/// `tally_planner::predict::CommentMeta`, the one definition), and its
/// work: the sum of its runs if resumable, else its last run (earlier runs
/// of a job that cannot checkpoint were thrown away). Jobs that never
/// started, hold no GPU or are still running are left out and counted.
pub fn history(text: &str, rules: &ContractRules, types: &GpuWeights) -> Result<History, SacctError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else { return Ok(History::default()) };
    let cols: Vec<&str> = header.split('|').map(str::trim).collect();
    let col = |name: &str| cols.iter().position(|c| c.eq_ignore_ascii_case(name)).ok_or_else(|| SacctError::Header(name.to_string()));
    let [c_id, c_submit, c_start, c_end, c_account, c_user, c_tres, c_comment] =
        ["JobIDRaw", "Submit", "Start", "End", "Account", "User", "AllocTRES", "Comment"].map(col);
    let (c_id, c_submit, c_start, c_end, c_account, c_user, c_tres, c_comment) =
        (c_id?, c_submit?, c_start?, c_end?, c_account?, c_user?, c_tres?, c_comment?);
    if c_comment + 1 != cols.len() {
        return Err(SacctError::Header(format!(
            "Comment as the last column (a `|` in a comment would shift the ones after it): -o {HISTORY_COLUMNS}"
        )));
    }
    let (c_limit, c_name) = (col("Timelimit").ok(), col("JobName").ok());
    let mut jobs: BTreeMap<u64, Seen> = BTreeMap::new();
    for (n, line) in lines {
        let bad = |what: String| SacctError::Line { line: n + 1, what };
        let mut f: Vec<&str> = line.splitn(cols.len(), '|').collect();
        if f.len() < cols.len() {
            return Err(bad(format!("{} fields, expected {} ({})", f.len(), cols.len(), clip(header.trim()))));
        }
        for x in &mut f[..c_comment] {
            *x = x.trim();
        }
        // Steps (`123.batch`) when -X was left out: not jobs.
        let Ok(id) = f[c_id].parse::<u64>() else { continue };
        let submit = unix_time(f[c_submit]).map_err(bad)?;
        let start = unix_time(f[c_start]).map_err(bad)?.filter(|&t| t > 0);
        let end = unix_time(f[c_end]).map_err(bad)?;
        let time_limit_s = match c_limit {
            Some(c) => parse_time_limit(f[c]).map_err(bad)?,
            None => None,
        };
        let name = c_name.and_then(|c| trace_name(f[c]));
        let seen = jobs.entry(id).or_insert_with(|| Seen {
            line: n + 1,
            submit,
            runs: Vec::new(),
            account: f[c_account].to_string(),
            user: f[c_user].to_string(),
            gpus: None,
            gpu_type: None,
            time_limit_s: None,
            name: None,
            comment: String::new(),
        });
        // The last line's limit and name (a requeue may change the limit).
        seen.time_limit_s = time_limit_s.or(seen.time_limit_s);
        seen.name = name.or(seen.name.take());
        seen.submit = match (seen.submit, submit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(start) = start {
            seen.runs.push((start, end));
            seen.gpus = gpu_count(f[c_tres]).or(seen.gpus);
            if let Some(t) = gpu_type(f[c_tres]).filter(|t| types.iter().any(|(name, _)| &**name == *t)) {
                seen.gpu_type = Some(t.to_string());
            }
        }
        seen.comment = f[c_comment].to_string();
    }
    let mut out = History::default();
    for (id, seen) in jobs {
        let Some(&(last_start, last_end)) = seen.runs.iter().max_by_key(|r| r.0) else {
            out.skipped.push((seen.line, HistorySkip::NeverStarted));
            continue;
        };
        let Some(last_end) = last_end else {
            out.skipped.push((seen.line, HistorySkip::StillRunning));
            continue;
        };
        let Some(gpus) = seen.gpus.filter(|&g| g > 0) else {
            out.skipped.push((seen.line, HistorySkip::NoGpus));
            continue;
        };
        let parsed = parse_comment(&seen.comment);
        let contract = match parsed.as_ref().map_err(Clone::clone).and_then(|p| rules.resolve_parsed(p)) {
            Ok(c) => c,
            Err(_) => {
                out.refused_contracts += 1;
                tally_allocator::Contract::UNALLOCATED
            }
        };
        let (meta, problems) = CommentMeta::from_tokens(comment_tokens(&seen.comment));
        let class = meta.class.as_deref().and_then(Class::parse);
        let problem = problems.first().map(|e| clip_meta(e).to_string()).or_else(|| {
            meta.class.as_ref().filter(|_| class.is_none()).map(|c| {
                format!(
                    "class=`{}` is not a class (one of training|batch_inference|quantization|realtime|debug|interactive); imported as training",
                    clip(c)
                )
            })
        });
        if let Some(p) = problem {
            out.comment_problems.push((seen.line, p));
        }
        let class = class.unwrap_or(Class::Training);
        let run_s = |(a, b): (u64, Option<u64>)| b.unwrap_or(a).saturating_sub(a);
        let duration_s = if contract.resumable { seen.runs.iter().map(|&r| run_s(r)).sum() } else { run_s((last_start, Some(last_end))) };
        out.requeues += seen.runs.len() - 1;
        for &(start, end) in &seen.runs {
            out.runs.push(HistoryRun {
                job_id: id,
                account: seen.account.clone(),
                user: seen.user.clone(),
                gpus,
                gpu_type: seen.gpu_type.clone(),
                contract_s: contract.min_runtime_s,
                start_s: start,
                end_s: end.unwrap_or(start).max(start),
            });
        }
        out.trace.jobs.push(TraceJob {
            job_id: id,
            submit_s: seen.submit.unwrap_or(seen.runs[0].0).min(seen.runs[0].0),
            duration_s: duration_s.max(1),
            gpus,
            account: if seen.account.is_empty() { "-".into() } else { seen.account },
            user: if seen.user.is_empty() { "-".into() } else { seen.user },
            class,
            contract_s: contract.min_runtime_s,
            resumable: contract.resumable,
            priority: 0,
            gpu_type: seen.gpu_type,
            time_limit_s: seen.time_limit_s.filter(|&l| l > 0),
            name: seen.name,
        });
    }
    out.origin_s = out.trace.jobs.iter().map(|j| j.submit_s).min().unwrap_or(0);
    for j in &mut out.trace.jobs {
        j.submit_s -= out.origin_s;
    }
    out.trace.sort();
    out.skipped.sort();
    Ok(out)
}

/// What [`seed_ledger`] charged.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Seeded {
    /// Runs of allocated jobs (a contract > 0 in a funded account) charged.
    pub runs: usize,
    /// GPU-hours inside the window at `now` (budget units with GPU types).
    pub gpu_hours: f64,
    /// Runs of unallocated work, never charged (as the plugin charges).
    pub unallocated: usize,
}

/// A ledger as the priority plugin would have built it from `runs`: every
/// run of an allocated job charged by its run seconds (at its GPU type's
/// weight), in the config's buckets, then cut to the window at `now` (a
/// new install starts from the cluster's recent past, not from zero).
pub fn seed_ledger(runs: &[HistoryRun], config: &tally_config::Config, now: u64) -> Result<(tally_allocator::Ledger, Seeded), String> {
    use tally_allocator::{Funded, Job, KnownAccounts, Ledger};
    let alloc = config.allocation(config.ranking_gpus()).map_err(|e| e.to_string())?;
    let funded = Funded::new(&config.tree, &alloc);
    let mut ledger = Ledger::new(config.bucket_s, config.window_s).map_err(|e| e.to_string())?;
    let mut seeded = Seeded::default();
    for r in runs {
        if r.contract_s == 0 || !funded.knows(&r.account) {
            seeded.unallocated += 1;
            continue;
        }
        let job = Job::new(r.job_id, &r.account, &r.user).gpus(r.gpus).weight(config.weight_of(r.gpu_type.as_deref())).contract(r.contract_s, false);
        job.charge_run(&funded, &mut ledger, r.start_s, r.end_s.min(now), 0);
        seeded.runs += 1;
    }
    ledger.prune(now);
    seeded.gpu_hours = ledger.usage(now).by_account.values().sum::<f64>() / HOUR;
    Ok((ledger, seeded))
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
                Run { job: 0, start_s: 5000, end_s: 5000 + 1800, end: RunEnd::Preempted, weight: None },
                Run { job: 0, start_s: 5000 + 3600, end_s: 5000 + 9000, end: RunEnd::Completed, weight: None },
                Run { job: 1, start_s: 5000 + 900, end_s: 5000 + 18_000, end: RunEnd::Preempted, weight: None },
                Run { job: 2, start_s: 5180, end_s: 5000 + 36_000, end: RunEnd::Cut, weight: None },
            ]
        );
        let err = runs("JobIDRaw|Start|End|State\n10|2026-12-02T10:00:00|x|COMPLETED\n", &ids, clock, 0).unwrap_err();
        assert!(err.to_string().contains("SLURM_TIME_FORMAT=%s"), "{err}");
        assert_eq!(runs("JobIDRaw|Start\n", &ids, clock, 0).unwrap_err(), SacctError::Header("End".into()));
    }
}

#[cfg(test)]
mod history_tests {
    use super::*;

    fn rules() -> ContractRules {
        tally_config::Config::parse("[accounts.nlp]\nshare = 100\n", "t.toml").unwrap().contracts
    }

    /// A field of megabytes (a log pasted into a comment, a binary file
    /// named as a trace) is quoted back cut, in every importer: the message
    /// says what is wrong in a line, not in 20 MB.
    #[test]
    fn a_huge_field_is_quoted_cut_in_every_importer() {
        let huge = "9".repeat(20 << 20);
        let short = |e: String| {
            assert!(e.len() < 1000, "{} bytes: {}…", e.len(), &e[..200]);
            assert!(e.contains("… (2097152") && e.contains(" bytes)"), "{e}");
            e
        };
        // sacct history: a time, a time limit, a field count's header, a class.
        let h = "JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Timelimit|JobName|Comment";
        let row = "1|100|100|200|COMPLETED|nlp|ana|gres/gpu=1|30:00|x|contract=1h";
        let types = GpuWeights::default();
        short(history(&format!("{h}\n{}\n", row.replacen("|100|", &format!("|{huge}|"), 1)), &rules(), &types).unwrap_err().to_string());
        short(history(&format!("{h}\n{}\n", row.replace("30:00", &huge)), &rules(), &types).unwrap_err().to_string());
        let hist = history(&format!("{h}\n{row} class={huge} model_params={huge}\n"), &rules(), &types).unwrap();
        short(hist.comment_problems[0].1.clone());
        // sacct runs: an unknown state.
        let ids = BTreeMap::from([(1, 0)]);
        let e =
            runs(&format!("JobIDRaw|Start|End|State\n1|100|200|{huge}\n"), &ids, Clock { t0: 0, trace_origin: 0, speedup: 1.0 }, 300).unwrap_err();
        short(e.to_string());
        // ElasticFlow CSV and SWF.
        let ef = format!("job_id,submission_time,duration,num_gpu\na,{huge},60,1\n");
        short(crate::import::elasticflow(&ef).unwrap_err().to_string());
        let swf = format!("1 {huge} 0 60 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1\n");
        short(crate::import::swf(&swf, &crate::import::SwfOptions::default()).unwrap_err().to_string());
        // The canonical CSV: a number, a name, a GPU type.
        let head = "job_id,submit_s,duration_s,gpus,account,user,class,contract_s,resumable,priority,name,gpu_type";
        for row in [
            format!("1,{huge},60,1,a,u,debug,0,false,0,-,-"),
            format!("1,0,60,1,a,u,debug,0,false,0,a b{huge},-"),
            format!("1,0,60,1,a,u,debug,0,false,0,-,!{huge}"),
        ] {
            short(crate::trace::parse_csv(&format!("{head}\n{row}\n")).unwrap_err().to_string());
        }
    }

    #[test]
    fn runs_become_one_trace_job_each() {
        let text = "JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Comment\n\
                    10|1000|1100|1200|REQUEUED|nlp|ana|cpu=4,gres/gpu=8,gres/gpu:h100=8|contract=1h,resumable\n\
                    10|1000|1300|1900|COMPLETED|nlp|ana|cpu=4,gres/gpu=8|contract=1h,resumable\n\
                    11|1010|1050|1080|PREEMPTED|nlp|bo|gres/gpu=2|contract=30m class=debug\n\
                    11|1010|1500|1600|COMPLETED|nlp|bo|gres/gpu=2|contract=30m class=debug\n\
                    12|1020|Unknown|Unknown|CANCELLED|nlp|bo||contract=1h\n\
                    13|1030|1040|1090|COMPLETED|nlp|bo|cpu=8|\n\
                    14|1040|1050|Unknown|RUNNING|nlp|bo|gres/gpu=1|contract=1h\n\
                    15|1050|1060|1070|COMPLETED|nlp|cy|gres/gpu=4|contract=9h\n\
                    16|1060|1061|1062|COMPLETED|nlp|cy|gres/gpu=1|a|b class=debug\n\
                    10.batch|1000|1100|1200|CANCELLED|nlp|ana||\n";
        let h = history(text, &rules(), &GpuWeights::default()).unwrap();
        assert_eq!(h.origin_s, 1000);
        let by_id: BTreeMap<u64, &TraceJob> = h.trace.jobs.iter().map(|j| (j.job_id, j)).collect();
        assert_eq!(by_id.keys().copied().collect::<Vec<_>>(), vec![10, 11, 15, 16]);
        // Resumable: both runs are work; GPUs from AllocTRES, typed entry not counted twice.
        let j = by_id[&10];
        assert_eq!((j.submit_s, j.duration_s, j.gpus, j.contract_s, j.resumable), (0, 700, 8, 3600, true));
        assert_eq!((j.account.as_str(), j.user.as_str(), j.class), ("nlp", "ana", Class::Training));
        // Not resumable: the earlier run was thrown away; class from the comment.
        let j = by_id[&11];
        assert_eq!((j.submit_s, j.duration_s, j.gpus, j.contract_s, j.class), (10, 100, 2, 1800, Class::Debug));
        // 9h is above the 8h maximum: refused, imported unallocated.
        assert_eq!((by_id[&15].contract_s, h.refused_contracts), (0, 1));
        // No contract: the site's `missing` rule (here the default, unallocated);
        // a `|` in the last column stays in the comment.
        assert_eq!((by_id[&16].contract_s, by_id[&16].duration_s, by_id[&16].class), (0, 1, Class::Debug));
        assert_eq!(h.requeues, 2);
        assert_eq!(h.skipped, vec![(6, HistorySkip::NeverStarted), (7, HistorySkip::NoGpus), (8, HistorySkip::StillRunning)]);
        // Every run kept, in Unix seconds, for seeding a ledger.
        let runs_of_10: Vec<(u64, u64)> = h.runs.iter().filter(|r| r.job_id == 10).map(|r| (r.start_s, r.end_s)).collect();
        assert_eq!(runs_of_10, vec![(1100, 1200), (1300, 1900)]);
        assert_eq!(h.runs.len(), 6, "jobs 10, 11 (two runs each), 15, 16");
        // Round trip through the canonical CSV.
        assert_eq!(crate::trace::parse_csv(&crate::trace::to_csv(&h.trace)).unwrap(), h.trace);
    }

    #[test]
    fn time_limits_and_names_when_the_columns_are_there() {
        let text = "JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Timelimit|JobName|Comment\n\
                    1|100|100|200|COMPLETED|nlp|ana|gres/gpu=1|1-00:00:00|sft 7b|contract=1h class=training model_params=7b\n\
                    2|100|100|200|COMPLETED|nlp|ana|gres/gpu=1|02:00:00||class=Debug\n\
                    3|100|100|200|COMPLETED|nlp|ana|gres/gpu=1|30:00|eval|model_params=lots\n\
                    4|100|100|200|COMPLETED|nlp|ana|gres/gpu=1|UNLIMITED|x|class=gaming\n\
                    5|100|100|200|COMPLETED|nlp|ana|gres/gpu=1|Partition_Limit|y|class=debug;method=lora\n";
        let h = history(text, &rules(), &GpuWeights::default()).unwrap();
        let got: Vec<(Option<u64>, Option<&str>, Class)> = h.trace.jobs.iter().map(|j| (j.time_limit_s, j.name.as_deref(), j.class)).collect();
        assert_eq!(
            got,
            vec![
                (Some(86_400), Some("sft_7b"), Class::Training),
                (Some(7200), None, Class::Debug),
                (Some(1800), Some("eval"), Class::Training),
                (None, Some("x"), Class::Training),
                (None, Some("y"), Class::Debug),
            ]
        );
        // Bad tokens are counted, not fatal.
        let lines: Vec<usize> = h.comment_problems.iter().map(|p| p.0).collect();
        assert_eq!(lines, vec![4, 5]);
        assert!(h.comment_problems[0].1.contains("model_params=`lots`"), "{:?}", h.comment_problems);
        assert!(h.comment_problems[1].1.contains("class=`gaming`"), "{:?}", h.comment_problems);
        assert_eq!(crate::trace::parse_csv(&crate::trace::to_csv(&h.trace)).unwrap(), h.trace);
        let e = history(&text.replace("30:00", "half an hour"), &rules(), &GpuWeights::default()).unwrap_err();
        assert!(e.to_string().starts_with("sacct output line 4: time limit `half an hour`"), "{e}");
    }

    #[test]
    fn time_limits_in_every_form_sacct_prints() {
        let cases = [
            ("1-00:00:00", Some(86_400)),
            ("2-03:04:05", Some(2 * DAY_S + 3 * HOUR_S + 4 * 60 + 5)),
            ("02:00:00", Some(7200)),
            ("30:00", Some(1800)),
            ("45", Some(2700)),
            ("1-12", Some(86_400 + 12 * HOUR_S)),
            ("1-12:30", Some(86_400 + 12 * HOUR_S + 1800)),
            ("UNLIMITED", None),
            ("Partition_Limit", None),
            ("", None),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_time_limit(raw), Ok(want), "{raw}");
        }
        for raw in ["1:2:3:4", "x", "-1", "1-", "01:-1:00", "1.5"] {
            assert!(parse_time_limit(raw).is_err(), "{raw}");
        }
    }

    #[test]
    fn bad_input_says_what_to_run() {
        let e = history("JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES\n", &rules(), &GpuWeights::default()).unwrap_err();
        assert_eq!(e, SacctError::Header("Comment".into()));
        let e = history("JobIDRaw|Comment|Submit|Start|End|State|Account|User|AllocTRES\n", &rules(), &GpuWeights::default()).unwrap_err();
        assert!(e.to_string().contains(HISTORY_COLUMNS), "{e}");
        let e = history(
            "JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Comment\n1|2026-12-01T10:00:00|1|2|COMPLETED|a|b|gres/gpu=1|\n",
            &rules(),
            &GpuWeights::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 2") && e.to_string().contains("SLURM_TIME_FORMAT=%s"), "{e}");
        let e = history("JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Comment\n1|2|3\n", &rules(), &GpuWeights::default()).unwrap_err();
        assert!(e.to_string().contains("3 fields, expected 9"), "{e}");
    }
}

#[cfg(test)]
mod seed_tests {
    use super::*;

    #[test]
    fn only_allocated_runs_inside_the_window_are_charged() {
        let config =
            tally_config::Config::parse("[cluster]\ngpus = 8\n[ledger]\nwindow = \"1d\"\nbucket = \"1h\"\n[accounts.nlp]\nshare = 100\n", "t.toml")
                .unwrap();
        let run = |job_id, account: &str, contract_s, start_s, end_s| HistoryRun {
            job_id,
            account: account.into(),
            user: "ana".into(),
            gpus: 2,
            gpu_type: None,
            contract_s,
            start_s,
            end_s,
        };
        let day = 86_400;
        let now = 10 * day;
        let runs = [
            run(1, "nlp", 3600, now - 7200, now - 3600),              // 1 h on 2 GPUs: charged
            run(2, "nlp", 0, now - 7200, now - 3600),                 // unallocated: never charged
            run(3, "vision", 3600, now - 7200, now),                  // not in the tree: unallocated
            run(4, "nlp", 3600, now - 3 * day, now - 3 * day + 3600), // before the window
            run(5, "nlp", 3600, now - 1800, now + 1800),              // cut at now
        ];
        let (ledger, s) = seed_ledger(&runs, &config, now).unwrap();
        assert_eq!((s.runs, s.unallocated), (3, 2));
        assert!((s.gpu_hours - 3.0).abs() < 1e-9, "2 GPU-h + 1 GPU-h, got {}", s.gpu_hours);
        assert!((ledger.usage(now).account_gpu_hours("nlp") - 3.0).abs() < 1e-9);
        // The state text the plugin loads gives the same usage back.
        let mut snap = tally_allocator::Snapshot::new(ledger);
        snap.saved_at = now;
        let back = tally_allocator::Snapshot::parse(&snap.to_text(), 3600, day).unwrap();
        assert!((back.snapshot.ledger.usage(now).account_gpu_hours("nlp") - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_history_on_typed_gpus_is_charged_at_their_weights() {
        let config =
            tally_config::Config::parse("[cluster]\ngpus = 16\n[cluster.gpu_types]\nb200 = 2.5\nh100 = 1\n[accounts.nlp]\nshare = 100\n", "t.toml")
                .unwrap();
        let text = "JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Comment\n\
                    1|100|1000|4600|COMPLETED|nlp|ana|cpu=2,gres/gpu=2,gres/gpu:b200=2|contract=1h\n\
                    2|100|1000|4600|COMPLETED|nlp|ana|gres/gpu=2,gres/gpu:fake=2|contract=1h\n\
                    3|100|1000|4600|COMPLETED|nlp|ana|gres/gpu=2|contract=1h\n";
        let h = history(text, &config.contracts, &config.cluster.gpu_types).unwrap();
        // A type the table names is kept; `fake` (not in the table) weighs 1 anyway.
        let types: Vec<Option<&str>> = h.trace.jobs.iter().map(|j| j.gpu_type.as_deref()).collect();
        assert_eq!(types, vec![Some("b200"), None, None]);
        let (ledger, s) = seed_ledger(&h.runs, &config, 10_000).unwrap();
        assert!((s.gpu_hours - (2.0 * 2.5 + 2.0 + 2.0)).abs() < 1e-9, "{}", s.gpu_hours);
        assert!((ledger.usage(10_000).account_gpu_hours("nlp") - 9.0).abs() < 1e-9);
        // Without the table: no type, every GPU-hour one.
        let plain = history(text, &config.contracts, &GpuWeights::default()).unwrap();
        assert!(plain.trace.jobs.iter().all(|j| j.gpu_type.is_none()));
    }
}
