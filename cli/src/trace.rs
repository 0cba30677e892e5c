//! `tally trace import` and `tally trace augment`: public traces into
//! Tally's canonical CSV, and the seeded augmentation that gives them teams,
//! users, classes, contracts and debug jobs (docs/traces.md).
//!
//! The trace goes to stdout (or `-o FILE`); a summary goes to stderr.

use crate::table::{Column, Table};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use tally_allocator::{DAY_S, HOUR};
use tally_sim::augment::{self, AugmentError, AugmentOptions};
use tally_sim::import::{self, SwfOptions};
use tally_sim::trace::{self, Class, Trace};

#[derive(clap::Subcommand, Debug)]
pub enum TraceCommand {
    /// Convert a public trace (ElasticFlow CSV, Standard Workload Format) or
    /// your own cluster's sacct history to Tally's canonical CSV.
    Import(ImportArgs),
    /// Give a canonical trace teams, users, classes, contracts, priorities
    /// and debug jobs from a tally.toml, seeded and reproducible.
    Augment(AugmentArgs),
}

/// Formats `tally trace import` reads.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `job_id,submission_time,duration,num_gpu` (ElasticFlow ITP traces).
    Elasticflow,
    /// Standard Workload Format of the Parallel Workloads Archive.
    Swf,
    /// Your cluster's history: `SLURM_TIME_FORMAT=%s sacct -a -X -D -P -S
    /// START -E END -o JobIDRaw,Submit,Start,End,State,Account,User,AllocTRES,Timelimit,JobName,Comment`
    /// (contracts from the comments under --config's rules; Timelimit and
    /// JobName optional, Comment last).
    Sacct,
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// Format of INPUT.
    #[arg(long, value_enum)]
    pub format: Format,
    /// SWF only: processors per GPU (a job of P processors asks for
    /// ceil(P / N) GPUs), 1 to 4294967295: a divisor, it sizes nothing.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub procs_per_gpu: u32,
    #[command(flatten)]
    pub io: ImportIo,
}

/// What every import reads and writes; `--config` and `--seed-ledger`
/// are for sacct histories.
#[derive(clap::Args, Debug)]
pub struct ImportIo {
    /// sacct only: the config whose contract rules read the comments
    /// (default: $TALLY_CONFIG or /etc/slurm/tally.toml).
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// sacct only: also write a ledger of the history's allocated runs over
    /// the config's window (up to now) to this new file, for a new install
    /// to start from (copy it to StateSaveLocation/tally/ledger.state before
    /// slurmctld first starts with Tally). An existing file is never
    /// overwritten.
    #[arg(long, value_name = "STATE_FILE")]
    pub seed_ledger: Option<PathBuf>,
    /// The trace to read, a regular file of at most 1 GiB (`-`: standard
    /// input, as much).
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    /// Where to write the canonical CSV (default: stdout).
    #[arg(long, short, value_name = "OUTPUT")]
    pub output: Option<PathBuf>,
}

/// `tally history import`: your cluster's sacct history (the sacct format
/// of `tally trace import`, under its own name).
#[derive(clap::Subcommand, Debug)]
pub enum HistoryCommand {
    /// Your cluster's history, from `SLURM_TIME_FORMAT=%s sacct -a -X -D -P
    /// -S START -E END -o JobIDRaw,Submit,Start,End,State,Account,User,AllocTRES,Timelimit,JobName,Comment`
    /// (Timelimit and JobName optional, Comment last), as a canonical trace
    /// (`tally trace import --format sacct`); with --seed-ledger, the ledger
    /// a new install starts from.
    Import(ImportIo),
    /// Online job-duration predictions over a canonical trace: the mean
    /// absolute error of the predictions and of the time limits, overall
    /// and per class, and how many predictions came from each fallback
    /// level (docs/planner.md, "Demand predictors").
    Predict(crate::predict::PredictArgs),
    /// Each realtime service's weekly profile of GPUs in use and its 24-hour
    /// demand curve from a given time (a planner scenario's
    /// `[[services]] demand`).
    Profile(crate::predict::ProfileArgs),
}

/// `tally history import|predict|profile`.
pub fn run_history(cmd: HistoryCommand) -> Result<(), String> {
    match cmd {
        HistoryCommand::Import(io) => run(TraceCommand::Import(ImportArgs { format: Format::Sacct, procs_per_gpu: 1, io })),
        HistoryCommand::Predict(a) => crate::predict::run_predict(a),
        HistoryCommand::Profile(a) => crate::predict::run_profile(a),
    }
}

#[derive(clap::Args, Debug)]
pub struct AugmentArgs {
    /// Config whose leaf accounts are the teams (default: $TALLY_CONFIG or
    /// /etc/slurm/tally.toml).
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seed of every random choice: the same seed, trace and config give the
    /// same output, byte for byte.
    #[arg(long, value_name = "N", default_value_t = AugmentOptions::default().seed)]
    pub seed: u64,
    /// Debug jobs added per working day (Mon-Fri, 09:00-18:00), all teams
    /// together: at most 10000000 debug jobs over the whole trace.
    #[arg(long, value_name = "X", default_value_t = AugmentOptions::default().debug_per_day)]
    pub debug_per_day: f64,
    /// Share of the trace's jobs given contract 0 (unallocated), in [0, 1].
    #[arg(long, value_name = "F", default_value_t = AugmentOptions::default().unallocated_fraction)]
    pub unallocated_fraction: f64,
    /// Cluster size that turns budgets into team weights, 1 to 4194304
    /// (default: `[cluster] gpus` of the config, else the trace's mean busy
    /// GPUs / 2.5).
    #[arg(long, value_name = "N", value_parser = crate::args::gpu_count)]
    pub gpus: Option<u32>,
    /// Where t = 0 falls in the week, after Monday 00:00, e.g. "2d9h"
    /// (default 0: t = 0 is Monday 00:00).
    #[arg(long, value_name = "DURATION", default_value = "0")]
    pub week_offset: String,
    /// The canonical trace to read, a regular file of at most 1 GiB (`-`:
    /// standard input, as much).
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    /// Where to write the augmented trace (default: stdout).
    #[arg(long, short, value_name = "OUTPUT")]
    pub output: Option<PathBuf>,
}

pub fn run(cmd: TraceCommand) -> Result<(), String> {
    match cmd {
        TraceCommand::Import(args) => import(args),
        TraceCommand::Augment(args) => augment(args),
    }
}

/// INPUT of `tally trace import|augment`: a trace file, or standard input
/// for `-`, at most [`crate::args::MAX_TRACE_BYTES`] either way.
fn read_input(path: &Path) -> Result<String, String> {
    use tally_config::input::{read_stream, read_text, InputError};
    if path.as_os_str() == "-" {
        return read_stream(std::io::stdin().lock(), "a trace", crate::args::MAX_TRACE_BYTES).map_err(|e| format!("stdin: {e}"));
    }
    read_text(path, "a trace", crate::args::MAX_TRACE_BYTES).map_err(|e| match e {
        // A pipe (a FIFO, `<(…)`) has its way in: standard input.
        InputError::NotRegular { kind: "a FIFO", .. } => {
            format!("{}: {e} (or give `-` to read standard input: `… - < {}`)", path.display(), path.display())
        }
        e => format!("{}: {e}", path.display()),
    })
}

fn write_output(path: Option<&Path>, text: &str) -> Result<(), String> {
    match path {
        Some(p) if p.as_os_str() != "-" => std::fs::write(p, text).map_err(|e| format!("{}: cannot write: {e}", p.display())),
        _ => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(|e| format!("stdout: cannot write: {e}"))
        }
    }
}

fn name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        path.display().to_string()
    }
}

/// `N jobs over D days, H GPU-hours (mean B GPUs busy; 2-3x demand on X-Y GPUs)`.
fn describe(trace: &Trace) -> String {
    let busy = trace.mean_busy_gpus();
    let sizing = if busy > 0.0 {
        format!("; demand is 2-3x supply on {:.0}-{:.0} GPUs", (busy / 3.0).ceil().max(1.0), (busy / 2.0).floor().max(1.0))
    } else {
        String::new()
    };
    format!(
        "{} jobs over {:.1} days, {:.0} GPU-hours (mean {:.1} GPUs busy{sizing})",
        trace.jobs.len(),
        trace.span_s() as f64 / DAY_S as f64,
        trace.gpu_hours(),
        busy
    )
}

/// `tally trace import --format elasticflow|swf|sacct [--procs-per-gpu N] [--config FILE] INPUT [-o OUTPUT]`.
pub fn import(args: ImportArgs) -> Result<(), String> {
    let file = name(&args.io.input);
    let text = read_input(&args.io.input)?;
    let report = match args.format {
        Format::Elasticflow => import::elasticflow(&text).map(|trace| import::ImportReport { trace, skipped: vec![] }),
        Format::Swf => import::swf(&text, &SwfOptions { procs_per_gpu: args.procs_per_gpu }),
        Format::Sacct => return import_history(&args.io, &file, &text),
    }
    .map_err(|e| format!("{file}: {e}"))?;
    write_output(args.io.output.as_deref(), &trace::to_csv(&report.trace))?;
    let skipped = match report.skip_summary(5) {
        s if s.is_empty() => "skipped 0 rows".to_string(),
        s => s,
    };
    eprintln!("{file}: imported {}; {skipped}", describe(&report.trace));
    Ok(())
}

/// `--format sacct`: a cluster's own history (`tally_sim::sacct::history`).
fn import_history(args: &ImportIo, file: &str, text: &str) -> Result<(), String> {
    let (path, config) = crate::args::config_at(args.config.clone())?;
    let h = tally_sim::sacct::history(text, &config.contracts, &config.cluster.gpu_types).map_err(|e| format!("{file}: {e}"))?;
    if let Some(state) = &args.seed_ledger {
        seed(state, &h, &config)?;
    }
    write_output(args.output.as_deref(), &trace::to_csv(&h.trace))?;
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    for (_, why) in &h.skipped {
        *skipped.entry(why.to_string()).or_default() += 1;
    }
    let skipped: Vec<String> = skipped.iter().map(|(why, n)| format!("{n} {why}")).collect();
    eprintln!(
        "{file}: imported {}; t = 0 is Unix time {}; requeues: {}; contracts refused by {}'s rules (imported unallocated): {}; jobs skipped: {}{}",
        describe(&h.trace),
        h.origin_s,
        h.requeues,
        path.display(),
        h.refused_contracts,
        h.skipped.len(),
        if skipped.is_empty() { String::new() } else { format!(" ({})", skipped.join(", ")) }
    );
    if let Some((line, first)) = h.comment_problems.first() {
        eprintln!(
            "{file}: {} jobs have a class=, model_params= or method= token that could not be read (imported without it); the first, line {line}: {first}",
            h.comment_problems.len()
        );
    }
    Ok(())
}

/// `--seed-ledger FILE`: the history's allocated runs charged into a new
/// ledger file, as the priority plugin would have charged them.
fn seed(state: &Path, h: &tally_sim::sacct::History, config: &tally_config::Config) -> Result<(), String> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (ledger, s) = tally_sim::sacct::seed_ledger(&h.runs, config, now)?;
    let mut snapshot = tally_allocator::Snapshot::new(ledger);
    snapshot.saved_at = now;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(state)
        .map_err(|e| format!("{}: cannot create ({e}); an existing ledger is never overwritten", state.display()))?;
    f.write_all(snapshot.to_text().as_bytes()).map_err(|e| format!("{}: cannot write: {e}", state.display()))?;
    eprintln!(
        "{}: seeded {:.1} GPU-hours in the last {} from {} runs of allocated jobs ({} runs of unallocated work not charged); \
         copy it to StateSaveLocation/tally/ledger.state (mode 0600, owned by SlurmUser) before slurmctld first starts with Tally",
        state.display(),
        s.gpu_hours,
        tally_allocator::format_duration(config.window_s),
        s.runs,
        s.unallocated
    );
    Ok(())
}

fn option_error(e: &AugmentError) -> String {
    let flag = match e {
        AugmentError::DebugPerDay(_) | AugmentError::TooManyDebugJobs { .. } => "--debug-per-day",
        AugmentError::UnallocatedFraction(_) => "--unallocated-fraction",
        AugmentError::Gpus => "--gpus",
        AugmentError::WeekOffset(_) => "--week-offset",
    };
    format!("{flag}: {e}")
}

/// `tally trace augment --config FILE [--seed N] [--debug-per-day X]
/// [--unallocated-fraction F] INPUT [-o OUTPUT]`.
pub fn augment(args: AugmentArgs) -> Result<(), String> {
    let week_offset_s = tally_allocator::parse_duration(&args.week_offset).map_err(|e| format!("--week-offset: {e}"))?;
    let opts = AugmentOptions {
        seed: args.seed,
        debug_per_day: args.debug_per_day,
        unallocated_fraction: args.unallocated_fraction,
        gpus: args.gpus,
        week_offset_s,
    };
    opts.validate().map_err(|e| option_error(&e))?;
    let (_, config) = crate::args::config_at(args.config)?;
    let file = name(&args.input);
    let input = trace::parse_csv(&read_input(&args.input)?).map_err(|e| format!("{file}: {e}"))?;
    // What would be generated, before any of it is.
    opts.validate_for(&input).map_err(|e| option_error(&e))?;
    if input.jobs.iter().any(|j| j.account != "-" || j.class == Class::Debug) {
        eprintln!("{file}: note: the trace already has accounts or debug jobs; augment replaces every account, user, class, contract, resumable and priority (it expects `tally trace import` output)");
    }
    let gpus = augment::cluster_gpus(&input, &config, &opts);
    config.allocation(gpus).map_err(|e| format!("{e} (team weights at {gpus} GPUs; give --gpus N)"))?;

    let out = augment::augment(&input, &config, &opts);
    write_output(args.output.as_deref(), &trace::to_csv(&out))?;

    // Summary on stderr.
    let debug_added = out.jobs.len() - input.jobs.len();
    eprintln!("{file}: augmented with {} (seed {}): {}; {debug_added} debug jobs added", config.source, opts.seed, describe(&out));
    let n = out.jobs.len().max(1) as f64;
    let classes: Vec<String> = out.class_counts().into_iter().map(|(c, k)| format!("{c} {k} ({:.1}%)", 100.0 * k as f64 / n)).collect();
    eprintln!("classes: {}", classes.join(", "));
    let original = out.jobs.iter().filter(|j| j.class != Class::Debug);
    let (mut unallocated, mut resumable, mut count) = (0usize, 0usize, 0usize);
    for j in original {
        count += 1;
        unallocated += usize::from(j.contract_s == 0);
        resumable += usize::from(j.resumable);
    }
    let pct = |k: usize| 100.0 * k as f64 / count.max(1) as f64;
    eprintln!("contracts: {:.1}% of the trace's jobs unallocated (contract 0), {:.1}% resumable", pct(unallocated), pct(resumable));
    let teams = augment::teams(&input, &config, &opts);
    let mut demand: BTreeMap<&str, f64> = BTreeMap::new();
    for j in &out.jobs {
        *demand.entry(j.account.as_str()).or_default() += f64::from(j.gpus) * j.duration_s as f64 / HOUR;
    }
    let total = out.gpu_hours().max(f64::MIN_POSITIVE);
    eprintln!("teams: {} (allocation at {gpus} GPUs; demand = share of the trace's GPU-hours)", teams.len());
    let width = teams.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    let (l, r) = (Column::left, Column::right);
    let mut table = Table::new([l(width), r(10), r(8), r(7), r(5)]).gap("  ").indent("  ");
    table.row(["TEAM", "ALLOCATION", "DEMAND", "RATIO", "USERS"]);
    for t in &teams {
        let d = demand.get(t.name.as_str()).copied().unwrap_or(0.0) / total;
        let ratio = if t.allocation_fraction > 0.0 { format!("{:.2}x", d / t.allocation_fraction) } else { "-".into() };
        table.row([t.name.clone(), format!("{:.1}%", 100.0 * t.allocation_fraction), format!("{:.1}%", 100.0 * d), ratio, t.users.len().to_string()]);
    }
    eprint!("{table}");
    Ok(())
}
