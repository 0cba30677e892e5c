//! `tally history predict` and `tally history profile`: the demand
//! predictors of `tally_planner::predict` run over a canonical trace (an
//! augmented public trace, or your cluster's history from `tally history
//! import`), for what a planner would believe (docs/planner.md, "Demand
//! predictors").

use crate::table::{Column, Table};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tally_allocator::{DAY_S, HOUR, HOUR_S, WEEK_S};
use tally_planner::predict::{
    demand_curve, level_counts, mae, predict_online, weekly_profiles, JobKey, Outcome, PastJob, PredictRules, ServiceRun, HOURS_PER_WEEK,
};
use tally_sim::trace::{self, Class, Trace};

/// The largest `--window`: 10,000 durations per key, 500 times the
/// default 20. Every prediction takes a quantile over up to this many
/// durations (a sort), so the time of a run grows with jobs × window.
pub const MAX_WINDOW: usize = 10_000;

#[derive(clap::Args, Debug)]
pub struct PredictArgs {
    /// Canonical trace (with time_limit_s and name columns for the limits'
    /// error and the (user, name) level), a regular file of at most 1 GiB.
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// Durations kept per key (the last N), 1 to 10000.
    #[arg(
        long,
        value_name = "N",
        default_value_t = PredictRules::default().window,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_WINDOW as u64)
    )]
    pub window: usize,
    /// Quantile of those durations predicted, in [0, 1] (0.5: the median).
    #[arg(long, value_name = "Q", default_value_t = PredictRules::default().quantile)]
    pub quantile: f64,
    /// Durations a key needs before it is used, 1 to --window.
    #[arg(
        long,
        value_name = "N",
        default_value_t = PredictRules::default().min_samples,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_WINDOW as u64)
    )]
    pub min_samples: usize,
}

#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// Canonical trace: its realtime jobs, grouped by name (else account);
    /// a regular file of at most 1 GiB.
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// Where the 24-hour curves start, in the trace's seconds (default: the
    /// hour after the last realtime job ends).
    #[arg(long, value_name = "T")]
    pub from: Option<u64>,
    /// Where the trace's t = 0 falls in the week, after Monday 00:00, as for
    /// `tally trace augment` (e.g. "2d9h"). For Unix times, "3d" (1970-01-01
    /// was a Thursday).
    #[arg(long, value_name = "DURATION", default_value = "0")]
    pub week_offset: String,
    /// Also print each service's week: mean GPUs per hour, a line a day.
    #[arg(long)]
    pub week: bool,
}

fn read_trace(path: &Path) -> Result<Trace, String> {
    let text = crate::args::read_trace(path)?;
    trace::parse_csv(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The predictor's keys of a trace job.
pub fn key_of(j: &trace::TraceJob) -> JobKey {
    JobKey {
        user: j.user.clone(),
        account: j.account.clone(),
        name: j.name.clone(),
        class: Some(j.class.name().to_string()),
        method: None,
        model_bucket: None,
    }
}

fn hours(s: f64) -> String {
    format!("{:.2}h", s / HOUR)
}

/// `tally history predict --trace FILE`.
pub fn run_predict(a: PredictArgs) -> Result<(), String> {
    if !(0.0..=1.0).contains(&a.quantile) {
        return Err(format!("--quantile must be in [0, 1] (0.5: the median), found {}", a.quantile));
    }
    if a.min_samples > a.window {
        return Err(format!(
            "--min-samples {} is more than --window {}: a key keeps its last {} durations only, so it would never be used (1 to --window)",
            a.min_samples, a.window, a.window
        ));
    }
    let trace = read_trace(&a.trace)?;
    let rules = PredictRules { window: a.window, quantile: a.quantile, min_samples: a.min_samples, ..PredictRules::default() };
    // A job's end is its submission plus its duration: the trace has no
    // start times (the waits are the scheduler's), so this is the earliest
    // it could have ended — optimistic by the job's wait.
    let past: Vec<PastJob> = trace
        .jobs
        .iter()
        .map(|j| PastJob {
            key: key_of(j),
            submit_s: j.submit_s,
            end_s: j.submit_s + j.duration_s,
            duration_s: j.duration_s,
            time_limit_s: j.time_limit_s,
        })
        .collect();
    let predictions = predict_online(&past, rules);
    let outcomes: Vec<(Class, Outcome)> = trace
        .jobs
        .iter()
        .zip(&predictions)
        .map(|(j, p)| (j.class, Outcome { predicted_s: p.duration_s, actual_s: j.duration_s, time_limit_s: j.time_limit_s }))
        .collect();
    println!(
        "Online duration predictions for {} ({} jobs): each job predicted at its submission from the jobs ended by then\n\
         (a job's end taken as submit + duration: the trace has no start times); a quantile {} of the last {} durations\n\
         of the most specific key with at least {} of them, capped at the time limit.\n",
        a.trace.display(),
        trace.jobs.len(),
        rules.quantile,
        rules.window,
        rules.min_samples
    );
    let (l, r) = (Column::left, Column::right);
    let mut t = Table::new([l(16), r(7), r(14), r(10), r(14), r(14)]).gap("  ");
    t.row(["CLASS", "JOBS", "MAE PREDICTED", "WITH LIMIT", "MAE LIMIT", "MAE PRED (SAME)"]);
    let mut row = |name: &str, o: Vec<Outcome>| {
        let m = mae(&o);
        let limited = m.with_limit > 0;
        t.row([
            name.to_string(),
            m.n.to_string(),
            hours(m.predicted_s),
            m.with_limit.to_string(),
            if limited { hours(m.limit_s) } else { "-".into() },
            if limited { hours(m.predicted_with_limit_s) } else { "-".into() },
        ]);
    };
    row("all", outcomes.iter().map(|o| o.1).collect());
    for c in Class::ALL {
        let of: Vec<Outcome> = outcomes.iter().filter(|o| o.0 == c).map(|o| o.1).collect();
        if !of.is_empty() {
            row(c.name(), of);
        }
    }
    print!("{t}");
    let mean = trace.jobs.iter().map(|j| j.duration_s as f64).sum::<f64>() / trace.jobs.len().max(1) as f64;
    println!("(mean duration {}; MAE PRED (SAME) is the prediction's error over the jobs with a limit)\n", hours(mean));
    let mut t = Table::new([l(26), r(8), r(7)]).gap("  ");
    t.row(["PREDICTED FROM", "JOBS", "SHARE"]);
    let n = predictions.len().max(1) as f64;
    for (level, k) in level_counts(&predictions) {
        t.row([level.name().to_string(), k.to_string(), format!("{:.1}%", 100.0 * k as f64 / n)]);
    }
    print!("{t}");
    Ok(())
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// `tally history profile --trace FILE [--from T] [--week-offset D] [--week]`.
pub fn run_profile(a: ProfileArgs) -> Result<(), String> {
    let offset = tally_allocator::parse_duration(&a.week_offset).map_err(|e| format!("--week-offset: {e}"))?;
    if offset >= WEEK_S {
        return Err(format!("--week-offset must be below a week (7d), found {}", a.week_offset));
    }
    let trace = read_trace(&a.trace)?;
    // Realtime jobs run from their submission (they start at once or
    // preempt): the trace has no start times.
    let runs: Vec<ServiceRun> = trace
        .jobs
        .iter()
        .filter(|j| j.class == Class::Realtime)
        .map(|j| ServiceRun {
            service: j.name.clone().unwrap_or_else(|| j.account.clone()),
            start_s: j.submit_s,
            end_s: j.submit_s + j.duration_s,
            gpus: j.gpus,
        })
        .collect();
    if runs.is_empty() {
        return Err(format!("{}: no realtime jobs (class realtime) to profile", a.trace.display()));
    }
    let from_s = runs.iter().map(|r| r.start_s).min().unwrap_or(0);
    let to_s = runs.iter().map(|r| r.end_s).max().unwrap_or(0);
    let profiles = weekly_profiles(&runs, from_s, to_s, offset);
    let start = a.from.unwrap_or(to_s.div_ceil(HOUR_S) * HOUR_S);
    let week_hour = ((start + offset) % WEEK_S) / HOUR_S;
    println!(
        "Weekly profiles of {} realtime services in {} ({} jobs over {:.1} days; a service is a job name, else an account;\n\
         a job held its GPUs from its submission for its duration). Demand from t = {start} ({} {:02}:00), 24 steps of 1 h,\n\
         rounded up to whole GPUs (a planner scenario's [[services]] demand):\n",
        profiles.len(),
        a.trace.display(),
        runs.len(),
        (to_s - from_s) as f64 / DAY_S as f64,
        DAYS[(week_hour / 24) as usize],
        week_hour % 24
    );
    let width = profiles.iter().map(|p| p.service.len()).max().unwrap_or(7).max(7);
    for p in &profiles {
        let curve = demand_curve(p, start, offset, 24, HOUR_S);
        let mean = p.mean_gpus.iter().sum::<f64>() / HOURS_PER_WEEK as f64;
        let (peak_h, peak) = p.mean_gpus.iter().enumerate().fold((0, 0.0f64), |best, (h, &g)| if g > best.1 { (h, g) } else { best });
        println!(
            "{:width$}  demand = [{}]  (week: mean {mean:.2} GPUs, peak {peak:.2} {} {:02}:00)",
            p.service,
            curve.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            DAYS[peak_h / 24],
            peak_h % 24
        );
        if a.week {
            let mut t = Table::new(std::iter::once(Column::left(5)).chain((0..24).map(|_| Column::right(5)))).gap("").indent("  ");
            t.row(std::iter::once(String::new()).chain((0..24).map(|h| format!("{h:02}h"))));
            for (d, day) in DAYS.iter().enumerate() {
                t.row(std::iter::once(day.to_string()).chain((0..24).map(|h| format!("{:.1}", p.mean_gpus[d * 24 + h]))));
            }
            print!("{t}");
        }
    }
    let mut per_service: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &runs {
        *per_service.entry(r.service.as_str()).or_default() += 1;
    }
    println!(
        "\n({} services, {} to {} jobs each)",
        per_service.len(),
        per_service.values().min().unwrap_or(&0),
        per_service.values().max().unwrap_or(&0)
    );
    Ok(())
}
