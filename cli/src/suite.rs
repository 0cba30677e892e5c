//! `tally sim suite`: the benchmark suite (docs/sim.md, "The suite"):
//! windows of the shared traces at several demands and the synthetic cases,
//! each replayed through every policy, with Tally's targets checked.

use crate::scored::{policy_names, scored_json};
use crate::table::{Column, Table};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;
use tally_allocator::{parse_duration, HOUR, HOUR_S, MINUTE_S};
use tally_sim::gaming::{self, Gaming, Shape};
use tally_sim::import::elasticflow;
use tally_sim::metrics::ceiling;
use tally_sim::sim::{job_meta, run, Policy, PolicyResult, Settings};
use tally_sim::suite::{synthetic_cases, trace_cases, Case};
use tally_sim::trace::Class;

#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// The org tree that augments the trace windows (default: $TALLY_CONFIG
    /// or /etc/slurm/tally.toml; the README uses examples/tally.toml).
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Folder of the ElasticFlow traces (default: $TALLY_TRACES, else the
    /// cache scripts/fetch.sh fills when it holds the --trace-files,
    /// ${TALLY_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tally}/traces/elasticflow-itp,
    /// else ../shared/traces/elasticflow-itp from the current folder).
    /// Without one only the synthetic cases run, and a note on stderr says so.
    #[arg(long, value_name = "DIR")]
    pub traces: Option<PathBuf>,
    /// The trace files (without .csv) whose windows are replayed.
    #[arg(long, value_name = "LIST", default_value = "cluster02,cluster04,cluster07")]
    pub trace_files: String,
    /// Seed of the synthetic cases (other seeds: other instances).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Only cases whose name contains one of these (comma-separated).
    #[arg(long, value_name = "LIST")]
    pub cases: Option<String>,
    /// Policies, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "fifo,multifactor,tally,tally+planner")]
    pub policies: String,
    /// How long a requeued job waits before it may start again.
    #[arg(long, value_name = "DURATION", default_value = "121s")]
    pub requeue_delay: String,
    /// Turn the debug lane on or off in every case's config (`[priority]
    /// debug_lane`; on by default): measure the order without it
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub debug_lane: Option<String>,
    /// Nodes of the debug capacity in every case (the last ones of the
    /// cluster; default: as many as the config's `[priority] debug_nodes`
    /// names, none in the synthetic cases): only debug jobs and unallocated
    /// work run there under Tally.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=64))]
    pub debug_nodes: Option<usize>,
    /// Replays run at once, 1 to 1024 (default: the machine's cores).
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_THREADS as u64))]
    pub threads: Option<usize>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The most replays `--threads` runs at once: 1,024. Each holds a
/// replay's state (its case's jobs and cluster) while it runs, so threads
/// beyond the cores add memory and no speed; no more run than there are
/// replays.
pub const MAX_THREADS: usize = 1024;

/// Tally's targets (issue 10), checked on every case at demand ≥ 1.
struct Targets {
    delivered: f64,
    team: f64,
    occupancy_slack: f64,
    lost_share: f64,
    debug_p90_s: u64,
}

const TARGETS: Targets = Targets { delivered: 0.98, team: 0.95, occupancy_slack: 0.01, lost_share: 0.02, debug_p90_s: 300 };

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn dur(s: Option<u64>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s < MINUTE_S => format!("{s}s"),
        Some(s) if s < HOUR_S => format!("{}m", s / MINUTE_S),
        Some(s) => format!("{:.1}h", s as f64 / HOUR),
    }
}

/// The traces' folder beside the repository, from the current folder.
const SHARED_TRACES: &str = "../shared/traces/elasticflow-itp";

/// The traces' folder in the cache `scripts/fetch.sh` fills:
/// `$TALLY_CACHE/traces/elasticflow-itp`, the cache defaulting to
/// `${XDG_CACHE_HOME:-$HOME/.cache}/tally` (an empty variable counts as
/// unset, as in the script). `None` without a home.
fn cached_traces() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let cache = var("TALLY_CACHE").or_else(|| var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache"))).map(|c| c.join("tally")))?;
    Some(cache.join("traces/elasticflow-itp"))
}

/// The traces' folder without `--traces`: `$TALLY_TRACES`, else the cache
/// when it holds every one of `files`, else [`SHARED_TRACES`] when it
/// exists; `None`: only the synthetic cases run.
fn default_traces(files: &[&str]) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TALLY_TRACES") {
        return Some(dir.into());
    }
    let holds = |d: &PathBuf| files.iter().all(|f| d.join(format!("{f}.csv")).is_file());
    cached_traces().filter(holds).or_else(|| Some(PathBuf::from(SHARED_TRACES)).filter(|d| d.is_dir()))
}

pub fn run_cmd(a: SuiteArgs) -> Result<(), String> {
    let (_, config) = crate::args::config_at(a.config)?;
    let mut policies = Vec::new();
    for name in a.policies.split(',').filter(|s| !s.trim().is_empty()) {
        policies.push(Policy::parse(name).ok_or_else(|| format!("--policies: unknown policy `{}` (known: {})", name.trim(), policy_names()))?);
    }
    if policies.is_empty() {
        return Err(format!("--policies: name at least one ({})", policy_names()));
    }
    let requeue_delay_s = parse_duration(&a.requeue_delay).map_err(|e| format!("--requeue-delay: {e}"))?;

    let trace_files: Vec<&str> = a.trace_files.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let mut cases: Vec<Case> = Vec::new();
    match a.traces.or_else(|| default_traces(&trace_files)) {
        Some(traces_dir) if traces_dir.is_dir() => {
            for name in &trace_files {
                let p = traces_dir.join(format!("{name}.csv"));
                let text = crate::args::read_trace(&p)?;
                let bare = elasticflow(&text).map_err(|e| format!("{}: {e}", p.display()))?;
                cases.extend(trace_cases(name, &bare, &config));
            }
        }
        Some(traces_dir) => eprintln!("note: {}: no such folder: only the synthetic cases run (give --traces DIR)", traces_dir.display()),
        None => eprintln!(
            "note: no GPU traces ($TALLY_TRACES unset; {}; no {SHARED_TRACES} here): only the synthetic cases run; give --traces DIR \
             or TALLY_TRACES=DIR, or fetch them into the cache with `bash scripts/fetch.sh ensure traces` in a clone of Tally",
            cached_traces().map_or_else(
                || "no cache: $HOME unset".into(),
                |d| format!("{} does not hold {}", d.display(), trace_files.iter().map(|f| format!("{f}.csv")).collect::<Vec<_>>().join(", "))
            )
        ),
    }
    cases.extend(synthetic_cases(a.seed));
    // The gaming family: judged against its honest case, which runs
    // whenever one of its reshaped cases does.
    let family = gaming::cases(a.seed);
    let wanted = |name: &str| a.cases.as_ref().is_none_or(|f| f.split(',').map(str::trim).filter(|w| !w.is_empty()).any(|w| name.contains(w)));
    let any_gaming = family.iter().any(|(s, c)| *s != Shape::Honest && wanted(&c.name));
    cases.extend(family.into_iter().filter(|(s, c)| wanted(&c.name) || (*s == Shape::Honest && any_gaming)).map(|(_, c)| c));
    cases.retain(|c| c.name.starts_with(GAMING) || wanted(&c.name));
    if cases.is_empty() {
        return Err("no case left to run (check --cases)".into());
    }
    if let Some(lane) = &a.debug_lane {
        for c in &mut cases {
            c.config.priority.debug_lane = lane == "on";
        }
    }

    // Every (case, policy) pair, on a few threads.
    let jobs: Vec<(usize, Policy)> = (0..cases.len()).flat_map(|c| policies.iter().map(move |&p| (c, p))).collect();
    let bar = ProgressBar::with_draw_target(
        Some(jobs.len() as u64),
        if a.quiet || !std::io::stderr().is_terminal() { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() },
    );
    bar.set_style(
        ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} replays ({elapsed}, {msg})")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    bar.set_prefix("suite");
    // No more threads than replays.
    let threads =
        a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).clamp(1, MAX_THREADS).min(jobs.len().max(1));
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<Result<PolicyResult, String>>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let k = {
                    let mut n = next.lock().expect("not poisoned");
                    let k = *n;
                    *n += 1;
                    k
                };
                let Some(&(c, p)) = jobs.get(k) else { break };
                let case = &cases[c];
                bar.set_message(format!("{} {}", case.name, p.name()));
                let s = Settings {
                    gpus: case.gpus,
                    gpus_per_node: case.config.cluster.gpus_per_node,
                    requeue_delay_s,
                    plan_interval_s: case.config.planner.map_or(1800, |pl| pl.interval_s),
                    debug_nodes: a.debug_nodes.unwrap_or(case.config.debug_nodes.len()),
                    ..Settings::default()
                };
                let r = run(&case.trace, &case.config, p, s, &mut |_| {}).map_err(|e| format!("{} {}: {e}", case.name, p.name()));
                results.lock().expect("not poisoned")[k] = Some(r);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let results: Vec<Result<PolicyResult, String>> =
        results.into_inner().expect("not poisoned").into_iter().map(|r| r.expect("every replay ran")).collect();
    let mut by_case: Vec<Vec<(Policy, PolicyResult)>> = vec![Vec::new(); cases.len()];
    for ((c, p), r) in jobs.iter().zip(results) {
        by_case[*c].push((*p, r?));
    }
    let ceilings: Vec<Option<f64>> = cases
        .iter()
        .map(|c| {
            let (meta, teams) = job_meta(&c.trace, &c.config, c.gpus);
            ceiling(&meta, &teams, c.gpus)
        })
        .collect();

    if a.json {
        let out: Vec<Value> = cases
            .iter()
            .zip(&by_case)
            .zip(&ceilings)
            .map(|((c, rs), ceil)| {
                json!({
                    "case": c.name, "about": c.about, "gpus": c.gpus, "demand_over_supply": c.demand, "jobs": c.trace.jobs.len(),
                    "ceiling": ceil,
                    "policies": rs.iter().map(|(p, r)| {
                        let mut v = scored_json(&r.score);
                        if let Value::Object(m) = &mut v {
                            m.insert("policy".into(), json!(p.name()));
                            m.insert("contract_violations".into(), json!(r.contract_violations));
                            m.insert("unfinished".into(), json!(r.unfinished()));
                            m.insert("unrunnable".into(), json!(r.unrunnable));
                            m.insert("missed_targets".into(), json!(missed(c, r, rs)));
                        }
                        v
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        let gaming: Vec<Value> = gaming_rows(&cases, &by_case)
            .into_iter()
            .map(|(name, p, g)| {
                json!({
                    "case": name, "policy": p.name(), "reshaper": gaming::RESHAPER,
                    "reshaper_vs_honest": g.reshaper,
                    "others_vs_honest": g.others.iter().map(|(t, r)| json!({ "team": t, "ratio": r })).collect::<Vec<_>>(),
                    "missed_targets": if p.tally() { g.judge() } else { Vec::new() },
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "config": config.source, "seed": a.seed, "cases": out, "gaming": gaming }))
                .map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let main: Vec<usize> = (0..cases.len()).filter(|&k| !cases[k].name.starts_with(GAMING)).collect();
    if !main.is_empty() {
        print_table(&pick(&cases, &main), &pick(&by_case, &main), &pick(&ceilings, &main));
    }
    let rows = gaming_rows(&cases, &by_case);
    if !rows.is_empty() {
        if !main.is_empty() {
            println!();
        }
        print_gaming(&cases, &by_case, &rows);
    }
    Ok(())
}

/// The items of `v` at `idx`.
fn pick<T: Clone>(v: &[T], idx: &[usize]) -> Vec<T> {
    idx.iter().map(|&k| v[k].clone()).collect()
}

/// The gaming family's cases are named `gaming/<shape>`.
const GAMING: &str = "gaming/";

/// Each reshaped case of the gaming family, per policy, against the honest
/// case under the same policy.
fn gaming_rows(cases: &[Case], by_case: &[Vec<(Policy, PolicyResult)>]) -> Vec<(String, Policy, Gaming)> {
    let honest_name = format!("{GAMING}{}", Shape::Honest.name());
    let Some(h) = cases.iter().position(|c| c.name == honest_name) else { return Vec::new() };
    let per_team = |r: &PolicyResult| -> Vec<(String, f64)> { r.score.teams.iter().map(|t| (t.team.clone(), t.useful_gpu_hours)).collect() };
    let mut out = Vec::new();
    for (c, rs) in cases.iter().zip(by_case) {
        if !c.name.starts_with(GAMING) || c.name == honest_name {
            continue;
        }
        for (p, r) in rs {
            if let Some((_, hr)) = by_case[h].iter().find(|(q, _)| q == p) {
                out.push((c.name.clone(), *p, Gaming::compare(&per_team(hr), &per_team(r))));
            }
        }
    }
    out
}

/// The 90th percentile of the honest teams' debug waits (the reshaping
/// team's own debug jobs queue behind its reshaped work by design).
fn honest_debug_p90(s: &tally_sim::metrics::Scored) -> Option<u64> {
    let mut w = tally_sim::metrics::Waits::default();
    for t in s.teams.iter().filter(|t| t.team != gaming::RESHAPER) {
        w.sorted_s.extend(&t.debug_waits.sorted_s);
    }
    w.sorted_s.sort_unstable();
    w.pct(90.0)
}

/// The gaming family's table: what the reshaping team gains and what the
/// honest teams keep, against the honest case, under each policy.
fn print_gaming(cases: &[Case], by_case: &[Vec<(Policy, PolicyResult)>], rows: &[(String, Policy, Gaming)]) {
    let (l, r) = (Column::left, Column::right);
    let mut table = Table::new([l(30), l(13), r(8), r(12), r(7), r(7), r(6), r(7)]);
    table.row(["gaming case", "policy", "t01", "honest worst", "deliv.", "dbg p90*", "lost", "verdict"].map(String::from));
    let mut misses = Vec::new();
    for (name, p, g) in rows {
        let res = cases.iter().position(|c| &c.name == name).and_then(|k| by_case[k].iter().find(|(q, _)| q == p)).map(|(_, r)| &r.score);
        let Some(s) = res else { continue };
        let m = g.judge();
        let verdict = if !p.tally() {
            "-".to_string()
        } else if m.is_empty() {
            "ok".to_string()
        } else {
            misses.push(format!("{name} / {}: {}", p.name(), m.join("; ")));
            "MISSED".to_string()
        };
        let signed = |x: f64| format!("{:+.1}%", 100.0 * (x - 1.0));
        table.row([
            name.trim_start_matches(GAMING).to_string(),
            p.name().to_string(),
            signed(g.reshaper),
            g.worst_other().map_or("-".into(), |(t, x)| format!("{t} {}", signed(x))),
            pct(s.fairness.overall),
            dur(honest_debug_p90(s)),
            if s.useful_gpu_hours > 0.0 { format!("{:.1}%", 100.0 * s.lost_gpu_hours / s.useful_gpu_hours) } else { "-".into() },
            verdict,
        ]);
    }
    print!("{table}");
    println!("\nt01 = the reshaping team's useful GPU-hours against the honest case under the same policy; honest worst = the");
    println!("honest team that kept the least; dbg p90* = the honest teams' debug jobs.");
    println!(
        "Targets (Tally): t01 gains at most {:.0}%, every honest team keeps at least {:.0}%.",
        100.0 * gaming::MAX_GAIN,
        100.0 * gaming::MIN_KEEP
    );
    if misses.is_empty() {
        println!("\nNo reshaping gains more than the rules allow.");
    } else {
        println!("\nTargets missed:");
        for m in misses {
            println!("  {m}");
        }
    }
}

/// The targets a Tally policy misses on a case (empty when it meets them
/// all, or when the case is not at demand ≥ 1 or the policy is not Tally's).
fn missed(case: &Case, r: &PolicyResult, peers: &[(Policy, PolicyResult)]) -> Vec<String> {
    if !matches!(Policy::parse(r.policy), Some(Policy::Tally | Policy::TallyPlanner)) || case.demand < 0.995 {
        return Vec::new();
    }
    let s = &r.score;
    let mut out = Vec::new();
    if s.fairness.overall < TARGETS.delivered {
        out.push(format!("delivered/owed {} < 98%", pct(s.fairness.overall)));
    }
    if let Some((team, x)) = s.fairness.worst.as_ref().filter(|(_, x)| *x < TARGETS.team) {
        out.push(format!("team {team} at {} < 95%", pct(*x)));
    }
    let best_peer =
        peers.iter().filter(|(p, _)| matches!(p, Policy::Fifo | Policy::Multifactor)).map(|(_, q)| q.score.occupancy).fold(f64::NAN, f64::max);
    if best_peer.is_finite() && s.occupancy < best_peer - TARGETS.occupancy_slack {
        out.push(format!("occupancy {} more than 1 point below {}", pct(s.occupancy), pct(best_peer)));
    }
    if s.useful_gpu_hours > 0.0 && s.lost_gpu_hours > TARGETS.lost_share * s.useful_gpu_hours {
        out.push(format!("lost {:.1}% of delivered > 2%", 100.0 * s.lost_gpu_hours / s.useful_gpu_hours));
    }
    if r.unfinished() > 0 {
        out.push(format!("{} jobs unfinished", r.unfinished()));
    }
    if r.contract_violations > 0 {
        out.push(format!("{} contract violations", r.contract_violations));
    }
    if let Some(p90) = s.waits.get(&Class::Debug).and_then(|w| w.pct(90.0)).filter(|&p| p > TARGETS.debug_p90_s) {
        out.push(format!("debug p90 {} > 5m", dur(Some(p90))));
    }
    out
}

fn print_table(cases: &[Case], by_case: &[Vec<(Policy, PolicyResult)>], ceilings: &[Option<f64>]) {
    let (l, r) = (Column::left, Column::right);
    let mut table = Table::new([l(24), r(5), r(5), l(13), r(7), r(6), r(6), r(6), r(6), r(7), r(6), r(5), r(7), r(7), r(5), r(4), r(7)]);
    table.row([
        "case", "GPUs", "dem.", "policy", "deliv.", "window", ">=95%", "worst", "occup.", "goodput", "lost", "requ.", "dbg p50", "dbg p90", "unfin",
        "viol", "ceiling",
    ]);
    let mut misses = Vec::new();
    for ((c, rs), ceil) in cases.iter().zip(by_case).zip(ceilings) {
        for (k, (p, r)) in rs.iter().enumerate() {
            let s = &r.score;
            let debug = s.waits.get(&Class::Debug);
            let (head, gpus, dem, ceil) = if k == 0 {
                (c.name.clone(), c.gpus.to_string(), format!("{:.1}x", c.demand), ceil.map_or("-".into(), pct))
            } else {
                Default::default()
            };
            table.row([
                head,
                gpus,
                dem,
                p.name().to_string(),
                pct(s.fairness.overall),
                pct(s.fairness_window.overall),
                format!("{}/{}", s.fairness.teams_at_threshold, s.fairness.teams),
                s.fairness.worst.as_ref().map_or("-".into(), |(_, x)| pct(*x)),
                pct(s.occupancy),
                pct(s.goodput),
                if s.useful_gpu_hours > 0.0 { format!("{:.1}%", 100.0 * s.lost_gpu_hours / s.useful_gpu_hours) } else { "-".into() },
                s.max_requeues.allocated.to_string(),
                dur(debug.and_then(|w| w.pct(50.0))),
                dur(debug.and_then(|w| w.pct(90.0))),
                r.unfinished().to_string(),
                r.contract_violations.to_string(),
                ceil,
            ]);
            let m = missed(c, r, rs);
            if !m.is_empty() {
                misses.push(format!("{} / {}: {}", c.name, p.name(), m.join("; ")));
            }
        }
    }
    print!("{table}");
    println!("\ndeliv. = delivered / owed over the arrival window, credited hour by hour (per team and hour: min(delivered, owed));");
    println!("window = the same scored per team over the whole window (per team: min(total delivered, total owed)), so a starved");
    println!("hour made up later counts; >=95% and worst are of deliv.; lost = GPU-hours thrown away by requeues, % of delivered;");
    println!("requ. = most requeues of a job with a contract that cannot checkpoint (information, no target: Tally still takes");
    println!("a debug job, or one it runs unallocated, past its contract); ceiling = granularity ceiling of delivered / owed");
    println!("(docs/sim.md). Targets (demand >= 1, on deliv., the hourly figure): deliv. >= 98%, every team >= 95%, occupancy");
    println!("within 1 point of fifo's and multifactor's best, lost <= 2%, nothing unfinished, no violation, debug p90 <= 5 min.");
    if misses.is_empty() {
        println!("\nEvery Tally replay at demand >= 1 meets every target.");
    } else {
        println!("\nTargets missed:");
        for m in misses {
            println!("  {m}");
        }
    }
}
