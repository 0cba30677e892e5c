//! `tally sim`: replay a canonical trace through several policies side by
//! side (docs/sim.md explains every figure).

use crate::scored::{policy_names, scored_json};
use crate::table::{Column, Table};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::iter::once;
use std::path::PathBuf;
use std::time::Instant;
use tally_allocator::{format_duration, parse_duration, GpuWeights, DAY_S, HOUR, HOUR_S};
use tally_config::Config;
use tally_sim::cluster::GpuGroup;
use tally_sim::sim::{run, PlanDurations, Policy, PolicyResult, Settings};
use tally_sim::trace::{self, Class, Trace};

/// `tally sim [OPTIONS]` or `tally sim suite [OPTIONS]`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimCmd {
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    #[command(flatten)]
    pub args: SimArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum SimCommand {
    /// The benchmark suite: windows of the shared traces at demands 0.8-3x
    /// and synthetic cases, through every policy, with Tally's targets.
    Suite(crate::suite::SuiteArgs),
}

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Canonical trace (CSV; `tally trace import` / `tally trace augment`
    /// make one), a regular file of at most 1 GiB.
    #[arg(long, value_name = "FILE", required = true)]
    pub trace: Option<PathBuf>,
    /// Budgets (default: $TALLY_CONFIG or /etc/slurm/tally.toml).
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// GPUs in the simulated cluster, 1 to 4194304.
    #[arg(long, value_name = "N", required = true, value_parser = crate::args::gpu_count)]
    pub gpus: Option<u32>,
    /// GPUs per node, 1 to 4194304 (default: `[cluster] gpus_per_node` of the config).
    #[arg(long, value_name = "N", value_parser = crate::args::gpu_count)]
    pub gpus_per_node: Option<u32>,
    /// GPUs of each type in the simulated cluster, e.g. `b200=32,h100=64`:
    /// types of the config's [cluster.gpu_types] (their weights), the rest
    /// of --gpus untyped (default: the counts of [cluster.gpu_types]).
    #[arg(long, value_name = "TYPE=N,...")]
    pub gpu_types: Option<String>,
    /// Policies to compare, comma-separated: fifo, multifactor, tally, tally+planner, planner.
    #[arg(long, value_name = "LIST", default_value = "fifo,multifactor,tally")]
    pub compare: String,
    /// Re-plan period of multifactor (Slurm's PriorityCalcPeriod) and the
    /// planner policy; tally re-ranks every calc_period of the config.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    pub replan: String,
    /// How long a requeued job waits before it may start again (Slurm:
    /// cred_expire + 1 s, 121 s by default).
    #[arg(long, value_name = "DURATION", default_value = "121s")]
    pub requeue_delay: String,
    /// The durations the planner policies (planner, tally+planner) plan
    /// with: true (the real remaining work, an oracle), limit (the trace's
    /// time_limit_s; the true duration where it has none) or predicted (the
    /// online predictor, trained on the jobs ended so far). Jobs always run
    /// their true durations.
    #[arg(long, value_name = "true|limit|predicted", default_value = "true")]
    pub plan_durations: String,
    /// Nodes of the debug capacity, the last ones of the simulated cluster
    /// (default: as many as the config's `[priority] debug_nodes` names):
    /// under Tally only debug jobs and unallocated work run there.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=4096))]
    pub debug_nodes: Option<usize>,
    /// Print the figures as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write SVG plots into this folder (occupancy, delivery, wait CDFs).
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// No progress bars (they are off anyway when stderr is not a terminal).
    #[arg(long)]
    pub quiet: bool,
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn dur(s: Option<u64>) -> String {
    match s {
        None => "-".to_string(),
        Some(0) => "0s".to_string(),
        Some(s) if s < HOUR_S => format_duration(s),
        // Hours with one decimal: long waits read better that way.
        Some(s) => format!("{:.1}h", s as f64 / HOUR),
    }
}

pub fn run_cmd(a: SimArgs) -> Result<(), String> {
    let (Some(trace_path), Some(gpus)) = (a.trace, a.gpus) else { return Err("tally sim needs --trace FILE and --gpus N".into()) };
    let (_, config) = crate::args::config_at(a.config)?;
    let config = match &a.gpu_types {
        Some(spec) => with_gpu_counts(&config, spec)?,
        None => config,
    };
    let text = crate::args::read_trace(&trace_path)?;
    let trace = trace::parse_csv(&text).map_err(|e| format!("{}: {e}", trace_path.display()))?;
    if trace.jobs.is_empty() {
        return Err(format!("{}: no jobs", trace_path.display()));
    }
    let mut policies = Vec::new();
    for name in a.compare.split(',').filter(|s| !s.trim().is_empty()) {
        let p = Policy::parse(name).ok_or_else(|| format!("--compare: unknown policy `{}` (known: {})", name.trim(), policy_names()))?;
        if !policies.contains(&p) {
            policies.push(p);
        }
    }
    if policies.is_empty() {
        return Err(format!("--compare: name at least one policy ({})", policy_names()));
    }
    let groups = tally_sim::sim::gpu_groups(&config, gpus)
        .map_err(|e| format!("--gpus {gpus}: {e} (--gpu-types, or the counts of [cluster.gpu_types] in {})", config.source))?;
    warn_missing_types(&trace, &groups);
    let replan_s = parse_duration(&a.replan).map_err(|e| format!("--replan: {e}"))?.max(1);
    let requeue_delay_s = parse_duration(&a.requeue_delay).map_err(|e| format!("--requeue-delay: {e}"))?;
    let plan_durations = PlanDurations::parse(&a.plan_durations)
        .ok_or_else(|| format!("--plan-durations: `{}` is not one of true, limit, predicted", a.plan_durations))?;
    if plan_durations == PlanDurations::Limit && trace.jobs.iter().all(|j| j.time_limit_s.is_none()) {
        eprintln!("warning: --plan-durations limit: {} has no time_limit_s column; the planner plans with the true durations", trace_path.display());
    }
    let settings = Settings {
        gpus,
        gpus_per_node: a.gpus_per_node.unwrap_or(config.cluster.gpus_per_node),
        replan_s,
        requeue_delay_s,
        plan_interval_s: config.planner.map_or(1800, |p| p.interval_s),
        plan_durations,
        debug_nodes: a.debug_nodes.unwrap_or(config.debug_nodes.len()),
        ..Settings::default()
    };

    // One thread per policy, a progress bar each (in simulated days).
    let span_days = (trace.span_s() as f64 / DAY_S as f64).max(1.0);
    let (mp, style) = replay_bars(a.quiet)?;
    let origin = trace.jobs[0].submit_s;
    let started = Instant::now();
    let results: Vec<(Policy, Result<PolicyResult, String>, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = policies
            .iter()
            .map(|&p| {
                let bar = mp.add(ProgressBar::new(span_days.ceil() as u64));
                bar.set_style(style.clone());
                bar.set_prefix(p.name());
                let (trace, config) = (&trace, &config);
                scope.spawn(move || {
                    let t0 = Instant::now();
                    let r = run(trace, config, p, settings, &mut |t| bar.set_position((t - origin) / DAY_S));
                    bar.finish();
                    (p, r.map_err(|e| format!("{}: {e}", p.name())), t0.elapsed().as_secs_f64())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("policy thread")).collect()
    });
    let mut ok = Vec::new();
    for (p, r, secs) in results {
        ok.push((p, r?, secs));
    }
    let demand = trace.gpu_hours() / (f64::from(gpus) * trace.span_s() as f64 / HOUR).max(1e-9);

    if let Some(dir) = &a.plots {
        write_plots(dir, &ok)?;
    }
    if a.json {
        let out = json!({
            "trace": { "file": trace_path.display().to_string(), "jobs": trace.jobs.len(), "span_s": trace.span_s(),
                       "gpu_hours": trace.gpu_hours(), "demand_over_supply": demand },
            "cluster": cluster_json(&config, gpus, settings.gpus_per_node, replan_s, &groups),
            "config": config.source,
            "plan_durations": plan_durations.name(),
            "policies": ok.iter().map(|(_, r, _)| policy_json(r)).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let types = types_line(&config, &groups);
    print_table(&trace_path, &trace, (&config.source, config.calc_period_s), settings, types, demand, &ok, started.elapsed().as_secs_f64());
    Ok(())
}

/// `config` with the simulated cluster's GPUs per type of `--gpu-types`
/// (`b200=32,h100=64`): the table's weights, these counts (a type left out
/// has no GPUs).
pub fn with_gpu_counts(config: &Config, spec: &str) -> Result<Config, String> {
    let table = &config.cluster.gpu_types;
    let known = || table.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>().join(", ");
    if table.is_empty() {
        return Err(format!("--gpu-types: {} has no [cluster.gpu_types]: give each type its weight there first (e.g. b200 = 2.2)", config.source));
    }
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, n) = item.split_once('=').ok_or_else(|| format!("--gpu-types: `{item}` is not TYPE=N (e.g. b200=32)"))?;
        let (name, n) = (name.trim(), n.trim());
        if !table.iter().any(|(t, _)| &**t == name) {
            return Err(format!("--gpu-types: `{name}` is not a type of [cluster.gpu_types] in {} (types: {})", config.source, known()));
        }
        let n: u32 = n.parse().ok().filter(|&n| n > 0).ok_or_else(|| format!("--gpu-types: `{item}`: the GPUs of a type are a whole number >= 1"))?;
        if counts.insert(name.to_string(), n).is_some() {
            return Err(format!("--gpu-types: `{name}` is given twice"));
        }
    }
    let rows: Vec<(&str, f64, Option<u32>)> = table.iter().map(|(t, ty)| (&**t, ty.weight.get(), counts.get(&**t).copied())).collect();
    let mut c = config.clone();
    c.cluster.gpu_types = GpuWeights::new(rows).map_err(|e| format!("--gpu-types: {e}"))?;
    Ok(c)
}

/// Say which trace jobs ask for a GPU type the simulated cluster has none of.
fn warn_missing_types(trace: &Trace, groups: &[GpuGroup]) {
    let mut missing: BTreeMap<&str, usize> = BTreeMap::new();
    for j in &trace.jobs {
        if let Some(t) = j.gpu_type.as_deref() {
            if !groups.iter().any(|(g, n)| g.as_deref() == Some(t) && *n > 0) {
                *missing.entry(t).or_default() += 1;
            }
        }
    }
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|(t, n)| format!("{t}: {n}")).collect();
        eprintln!(
            "warning: jobs ask for GPU types the simulated cluster has no GPUs of ({}); they never run: give the type a count in [cluster.gpu_types] or --gpu-types TYPE=N",
            list.join(", ")
        );
    }
}

/// The cluster's JSON: its GPU types only when the config has them.
fn cluster_json(config: &Config, gpus: u32, gpus_per_node: u32, replan_s: u64, groups: &[GpuGroup]) -> Value {
    let mut v = json!({ "gpus": gpus, "gpus_per_node": gpus_per_node, "replan_s": replan_s });
    if !config.cluster.gpu_types.is_empty() {
        if let Value::Object(m) = &mut v {
            let types: Vec<Value> =
                groups.iter().map(|(t, n)| json!({ "gpu_type": t.as_deref(), "gpus": n, "weight": config.weight_of(t.as_deref()).get() })).collect();
            m.insert("gpu_types".into(), json!(types));
            m.insert("capacity_units".into(), json!(config.capacity(gpus).units));
            m.insert(
                "units".into(),
                json!("owed, delivered and rates in budget units: GPU-hours x the weight of their GPU type ([cluster.gpu_types])"),
            );
        }
    }
    v
}

/// With GPU types: the cluster by type and the unit of owed and delivered.
fn types_line(config: &Config, groups: &[GpuGroup]) -> Option<String> {
    if config.cluster.gpu_types.is_empty() {
        return None;
    }
    let parts: Vec<String> =
        groups.iter().map(|(t, n)| format!("{n} {} x {}", t.as_deref().unwrap_or("untyped"), config.weight_of(t.as_deref()))).collect();
    let gpus: u32 = groups.iter().map(|(_, n)| n).sum();
    Some(format!(
        "GPU types: {} = {:.1} budget units; owed, delivered and rates are budget units (GPU-hours x the weight of their type, [cluster.gpu_types])",
        parts.join(", "),
        config.capacity(gpus).units
    ))
}

/// Progress bars for replays run side by side, in simulated days (hidden
/// with `quiet` or when stderr is not a terminal), and their style.
pub fn replay_bars(quiet: bool) -> Result<(MultiProgress, ProgressStyle), String> {
    let mp = MultiProgress::with_draw_target(if quiet || !std::io::stderr().is_terminal() {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    });
    let style = ProgressStyle::with_template("{prefix:>12} [{bar:40}] day {pos}/{len} ({elapsed})").map_err(|e| e.to_string())?.progress_chars("=> ");
    Ok((mp, style))
}

fn policy_json(r: &PolicyResult) -> Value {
    let mut v = scored_json(&r.score);
    if let Value::Object(m) = &mut v {
        m.insert("policy".into(), json!(r.policy));
        m.insert("contract_violations".into(), json!(r.contract_violations));
        m.insert("unrunnable".into(), json!(r.unrunnable));
        m.insert("unfinished".into(), json!(r.unfinished()));
        m.insert("events".into(), json!(r.events));
        if let Some(e) = &r.belief_mae {
            m.insert(
                "plan_durations_mae_s".into(),
                json!({ "jobs": e.n, "belief": e.predicted_s, "jobs_with_limit": e.with_limit, "time_limit": e.limit_s, "belief_on_those": e.predicted_with_limit_s }),
            );
        }
    }
    v
}

#[allow(clippy::too_many_arguments)]
fn print_table(
    file: &std::path::Path,
    trace: &Trace,
    (config, calc_period_s): (&str, u64),
    s: Settings,
    types: Option<String>,
    demand: f64,
    rs: &[(Policy, PolicyResult, f64)],
    wall: f64,
) {
    println!(
        "Replay of {} ({} jobs over {:.1} days, {:.0} GPU-hours) with {}",
        file.display(),
        trace.jobs.len(),
        trace.span_s() as f64 / DAY_S as f64,
        trace.gpu_hours(),
        config
    );
    println!(
        "on {} GPUs ({} per node): demand is {:.1}x supply over the arrival window; tally re-ranks every {} and at job ends,\nmultifactor and planner every {}; requeued jobs wait {}{}{}\n",
        s.gpus,
        s.gpus_per_node,
        demand,
        format_duration(calc_period_s),
        format_duration(s.replan_s),
        format_duration(s.requeue_delay_s),
        types.map_or(String::new(), |t| format!("\n{t}")),
        match s.plan_durations {
            PlanDurations::True => String::new(),
            d => format!("\nthe planners plan with durations: {} (jobs run their true durations)", d.name()),
        }
    );
    // A label column, then one column per policy.
    let mut table = Table::new(once(Column::left(38)).chain(rs.iter().map(|_| Column::right(14)))).gap("");
    table.row(once("").chain(rs.iter().map(|(p, _, _)| p.name())));
    let mut row = |label: &str, f: &dyn Fn(&PolicyResult) -> String| table.row(once(label.to_string()).chain(rs.iter().map(|(_, r, _)| f(r))));
    row("occupancy", &|r| pct(r.score.occupancy));
    row("goodput (useful GPU-hours)", &|r| pct(r.score.goodput));
    let teams = |f: &tally_allocator::FairnessSummary| format!("{} of {}", f.teams_at_threshold, f.teams);
    let worst = |f: &tally_allocator::FairnessSummary| f.worst.as_ref().map_or("-".into(), |(_, x)| pct(*x));
    let worst_name = |f: &tally_allocator::FairnessSummary| f.worst.as_ref().map_or(String::new(), |(t, _)| t.clone());
    row("delivered / owed, hour by hour", &|r| pct(r.score.fairness.overall));
    row("teams >= 95% of owed", &|r| teams(&r.score.fairness));
    row("worst team", &|r| worst(&r.score.fairness));
    row("", &|r| worst_name(&r.score.fairness));
    row("delivered / owed over the window", &|r| pct(r.score.fairness_window.overall));
    row("teams >= 95% of owed (window)", &|r| teams(&r.score.fairness_window));
    row("worst team (window)", &|r| worst(&r.score.fairness_window));
    row("", &|r| worst_name(&r.score.fairness_window));
    row("delivered / owed (trace demand)", &|r| pct(r.score.fairness_trace.overall));
    row("delivered / owed after the window", &|r| pct(r.score.drain.overall));
    for c in Class::ALL {
        if rs.iter().all(|(_, r, _)| !r.score.waits.contains_key(&c)) {
            continue;
        }
        for (q, name) in [(50.0, "p50"), (90.0, "p90"), (99.0, "p99")] {
            let label = format!("wait {name} {}", c.name());
            row(&label, &|r| dur(r.score.waits.get(&c).and_then(|w| w.pct(q))));
        }
    }
    row("preemptions", &|r| r.score.preemptions.to_string());
    row("most requeues: allocated, not resumable", &|r| r.score.max_requeues.allocated.to_string());
    row("most requeues: allocated, resumable", &|r| r.score.max_requeues.resumable.to_string());
    row("most requeues: unallocated", &|r| r.score.max_requeues.unallocated.to_string());
    row("GPU-hours lost to requeues", &|r| format!("{:.0}", r.score.lost_gpu_hours));
    row("  of which allocated work", &|r| format!("{:.0}", r.score.lost_allocated_gpu_hours));
    row("contract violations", &|r| r.contract_violations.to_string());
    row("priority-weighted value", &|r| format!("{:.0}", r.score.value));
    row("makespan (days)", &|r| format!("{:.1}", r.score.makespan_s as f64 / DAY_S as f64));
    row("jobs completed", &|r| r.score.completed.to_string());
    row("jobs unfinished (drain limit)", &|r| r.unfinished().to_string());
    row("too big for the cluster", &|r| r.unrunnable.to_string());
    row("events", &|r| r.events.to_string());
    if rs.iter().any(|(_, r, _)| r.belief_mae.is_some()) {
        let hours = |x: f64| format!("{:.2}h", x / HOUR);
        row("planned durations: MAE", &|r| r.belief_mae.map_or("-".into(), |m| hours(m.predicted_s)));
        row("  time limits' MAE (jobs with one)", &|r| r.belief_mae.filter(|m| m.with_limit > 0).map_or("-".into(), |m| hours(m.limit_s)));
    }
    table.row(once("replay time (s)".to_string()).chain(rs.iter().map(|(_, _, secs)| format!("{secs:.2}"))));
    print!("{table}");
    println!("\n(all policies in parallel: {wall:.1} s wall)");
}

fn write_plots(dir: &std::path::Path, rs: &[(Policy, PolicyResult, f64)]) -> Result<(), String> {
    use crate::plot::{bar_chart, line_chart, line_chart_log_seconds, Series};
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, svg: String| {
        let p = dir.join(name);
        std::fs::write(&p, svg).map_err(|e| format!("{}: {e}", p.display()))
    };
    // Occupancy per day.
    let series: Vec<Series> = rs
        .iter()
        .map(|(p, r, _)| Series {
            name: p.name(),
            points: r
                .score
                .hourly_busy
                .chunks(24)
                .enumerate()
                .map(|(d, c)| (d as f64, 100.0 * c.iter().sum::<f64>() / (f64::from(r.score.gpus) * c.len() as f64)))
                .collect(),
        })
        .collect();
    write("occupancy.svg", line_chart("Occupancy per day", "day", "busy GPUs (% of cluster)", &series, false))?;
    // Delivered / owed per team.
    if let Some((_, first, _)) = rs.first() {
        let teams: Vec<String> = first.score.teams.iter().map(|t| t.team.clone()).collect();
        let groups: Vec<(&str, Vec<f64>)> = rs
            .iter()
            .map(|(p, r, _)| (p.name(), r.score.teams.iter().map(|t| t.delivery.ratio().map_or(f64::NAN, |x| 100.0 * x)).collect()))
            .collect();
        write("delivery.svg", bar_chart("Delivered / owed GPU-hours per team", "% of owed", &teams, &groups, Some((95.0, "95%"))))?;
    }
    // Wait CDFs per class.
    for c in Class::ALL {
        let series: Vec<Series> = rs
            .iter()
            .filter_map(|(p, r, _)| {
                let w = r.score.waits.get(&c)?;
                let n = w.sorted_s.len() as f64;
                // At most ~1000 points per line.
                let step = (w.sorted_s.len() / 1000).max(1);
                let pts = w
                    .sorted_s
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % step == 0 || *i + 1 == w.sorted_s.len())
                    .map(|(i, &s)| (s as f64, 100.0 * (i + 1) as f64 / n))
                    .collect();
                Some(Series { name: p.name(), points: pts })
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        // Waits span seconds to weeks: a log time axis shows both ends.
        write(
            &format!("waits-{}.svg", c.name()),
            line_chart_log_seconds(&format!("Wait before start: {}", c.name()), "wait (log scale)", "% of jobs", &series, true),
        )?;
    }
    Ok(())
}
