//! `tally budget`: what a proposed budget would have delivered. The same
//! trace (your cluster's history, `tally trace import --format sacct`)
//! replays under the current config and the proposed one, with the same
//! policy, cluster and settings; per team, owed and delivered side by side.

use crate::table::{Column, Table};
use indicatif::ProgressBar;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tally_allocator::{Delivery, DAY_S};
use tally_config::Config;
use tally_sim::sim::{run, Policy, PolicyResult, Settings};
use tally_sim::trace;

#[derive(clap::Args, Debug)]
pub struct BudgetArgs {
    /// The proposed config (its budgets are what is tried).
    #[arg(long, short, value_name = "FILE")]
    pub config: PathBuf,
    /// The config in force (default: $TALLY_CONFIG, else StateSaveLocation/
    /// tally/tally.toml.active, else /etc/slurm/tally.toml).
    #[arg(long, value_name = "FILE")]
    pub current: Option<PathBuf>,
    /// Canonical trace to replay (`tally trace import --format sacct` makes
    /// one from your cluster's history), a regular file of at most 1 GiB.
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    /// GPUs in the cluster, 1 to 4194304 (default: `[cluster] gpus` of the current config).
    #[arg(long, value_name = "N", value_parser = crate::args::gpu_count)]
    pub gpus: Option<u32>,
    /// The policy both replays use: tally or tally+planner.
    #[arg(long, value_name = "POLICY", default_value = "tally")]
    pub policy: String,
    /// No progress bars (they are off anyway when stderr is not a terminal).
    #[arg(long)]
    pub quiet: bool,
}

/// Per team: (rate in GPUs, delivery over the arrival window).
fn teams(r: &PolicyResult) -> BTreeMap<String, (f64, Delivery)> {
    r.score.teams.iter().map(|t| (t.team.clone(), (t.rate_gpus, t.delivery))).collect()
}

fn ratio(d: Option<&(f64, Delivery)>) -> String {
    d.and_then(|(_, d)| d.ratio()).map_or("-".into(), |x| format!("{:.1}%", 100.0 * x))
}

pub fn run_cmd(a: BudgetArgs) -> Result<(), String> {
    // Without slurm.conf there is no config in force to find: the default path.
    let current = match crate::live::ledger_path(None) {
        Ok(ledger) => Some(crate::live::config_in_force(a.current.clone(), &ledger)),
        Err(_) => a.current.clone(),
    };
    let ((_, current), (_, proposed)) = (crate::args::config_at(current)?, crate::args::config_at(Some(a.config.clone()))?);
    let policy = match Policy::parse(&a.policy) {
        Some(p @ (Policy::Tally | Policy::TallyPlanner)) => p,
        _ => return Err(format!("--policy: `{}` is not a budget-aware policy (use tally or tally+planner)", tally_allocator::text::clip(&a.policy))),
    };
    let gpus = a.gpus.or(current.cluster.gpus).ok_or("--gpus: the current config has no [cluster] gpus; give the cluster's size")?;
    let text = crate::args::read_trace(&a.trace)?;
    let trace = trace::parse_csv(&text).map_err(|e| format!("{}: {e}", a.trace.display()))?;
    if trace.jobs.is_empty() {
        return Err(format!("{}: no jobs", a.trace.display()));
    }
    let settings = |c: &Config| Settings {
        gpus,
        gpus_per_node: current.cluster.gpus_per_node,
        plan_interval_s: c.planner.map_or(1800, |p| p.interval_s),
        ..Settings::default()
    };
    let (mp, style) = crate::sim::replay_bars(a.quiet)?;
    let days = (trace.span_s() as f64 / DAY_S as f64).max(1.0).ceil() as u64;
    let origin = trace.jobs[0].submit_s;
    let [before, after] = std::thread::scope(|scope| {
        [("current", &current), ("proposed", &proposed)]
            .map(|(name, config)| {
                let bar = mp.add(ProgressBar::new(days));
                bar.set_style(style.clone());
                bar.set_prefix(name);
                let (trace, s) = (&trace, settings(config));
                scope.spawn(move || {
                    let r = run(trace, config, policy, s, &mut |t| bar.set_position((t - origin) / DAY_S));
                    bar.finish();
                    r.map_err(|e| format!("{name} ({}): {e}", config.source))
                })
            })
            .map(|h| h.join().expect("replay thread"))
    });
    let (before, after) = (before?, after?);
    print!("{}", report(&a.trace, gpus, policy, (&current, &before), (&proposed, &after)));
    Ok(())
}

/// The side-by-side table (pure: the tests read it).
fn report(trace: &std::path::Path, gpus: u32, policy: Policy, now: (&Config, &PolicyResult), new: (&Config, &PolicyResult)) -> String {
    let (b, a) = (teams(now.1), teams(new.1));
    let mut names: Vec<&String> = b.keys().chain(a.keys()).collect();
    names.sort();
    names.dedup();
    let mut t = Table::new([
        Column::left(14),
        Column::right(9).after("  "),
        Column::right(9),
        Column::right(10),
        Column::right(9).after("   "),
        Column::right(9),
        Column::right(10),
        Column::right(7).after("   "),
    ]);
    t.row(["TEAM", "RATE NOW", "OWED NOW", "DELIV NOW", "RATE NEW", "OWED NEW", "DELIV NEW", "CHANGE"]);
    for n in names {
        let (x, y) = (b.get(n), a.get(n));
        let rate = |d: Option<&(f64, Delivery)>| d.map_or("-".into(), |(r, _)| format!("{r:.1}"));
        let owed = |d: Option<&(f64, Delivery)>| d.map_or("-".into(), |(_, d)| format!("{:.0}", d.owed_gpu_hours));
        let change = match (x.and_then(|(_, d)| d.ratio()), y.and_then(|(_, d)| d.ratio())) {
            (Some(p), Some(q)) => format!("{:+.1}", 100.0 * (q - p)),
            _ => "-".into(),
        };
        t.row([n.clone(), rate(x), owed(x), ratio(x), rate(y), owed(y), ratio(y), change]);
    }
    let all = |r: &PolicyResult| format!("{:.1}%", 100.0 * r.score.fairness.overall);
    let worst = |r: &PolicyResult| r.score.fairness.worst.as_ref().map_or("-".into(), |(t, x)| format!("{t} {:.1}%", 100.0 * x));
    format!(
        "Replay of {} on {gpus} GPUs under {}: the config in force ({}) against the proposed one ({}).\n\
         RATE: the team's allocation in GPUs; OWED: GPU-hours, each hour the rate capped at what the team asked;\n\
         DELIV: delivered / owed over the arrival window; CHANGE: points.\n\n\
         {t}\nall teams: {} now, {} proposed; worst team: {} now, {} proposed\n",
        trace.display(),
        policy.name(),
        now.0.source,
        new.0.source,
        all(now.1),
        all(new.1),
        worst(now.1),
        worst(new.1)
    )
}
