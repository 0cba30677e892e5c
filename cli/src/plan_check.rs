//! `tally plan --instances N`: the planner measured on seeded instances
//! drawn like the shipped scenarios (`tally_planner::generate`), each
//! planned by Dharma's FIFO, the simple greedy, fast mode's search alone,
//! fast mode, and full mode asked for a proof (gap 0 within the time limit);
//! every plan through the validator. The README's and docs/planner.md's
//! robustness figures are this command's output.

use crate::table::{Column, Table};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use tally_planner::generate::{instances, Family};
use tally_planner::{fast, fifo, last_start, validate, Plan, Scenario};

/// One instance's figures.
struct Row {
    family: Family,
    seed: u64,
    fifo: f64,
    greedy: f64,
    search: f64,
    fast: f64,
    /// Fast mode under the rule before issue 15 (runs cut at the horizon
    /// counted), its unfinishable runs then dropped: what the rule cost.
    cut: f64,
    full: Option<(f64, f64)>,
    violations: Vec<String>,
}

impl Row {
    /// The best value known to be reachable and the best proven bound:
    /// full mode's objective (or fast mode's, if full mode failed) and its bound.
    fn reference(&self) -> (f64, f64) {
        match self.full {
            Some((objective, bound)) => (objective.max(self.fast), bound),
            None => (self.fast, f64::INFINITY),
        }
    }

    fn proved(&self) -> bool {
        let (best, bound) = self.reference();
        bound.is_finite() && bound - best <= 1e-6 * bound.abs().max(1.0)
    }

    /// `v` over the optimum when it is proven, else over the bound (a lower
    /// bound on the true ratio).
    fn ratio(&self, v: f64) -> f64 {
        let (best, bound) = self.reference();
        let opt = if self.proved() { best } else { bound };
        if opt > 0.0 && opt.is_finite() {
            v / opt
        } else {
            f64::NAN
        }
    }
}

/// Full mode asked for a proof: the plan and its bound.
type Solver<'a> = &'a dyn Fn(&Scenario, &Plan) -> Result<(Plan, f64), String>;

/// Keep only the runs the horizon rule of `s` (must-finish) allows: the
/// planner's own rule, `tally_planner::last_start`.
fn drop_unfinished(s: &Scenario, p: &Plan) -> Plan {
    let mut p = p.clone();
    p.batch.retain(|b| {
        s.jobs.iter().find(|j| j.id == b.job_id).is_some_and(|j| j.pinned.is_some() || last_start(s, j).is_some_and(|last| b.start_step <= last))
    });
    p
}

fn measure(family: Family, seed: u64, s: &Scenario, full: Option<Solver<'_>>, effort: u32) -> Row {
    let mut violations = Vec::new();
    let mut score = |name: &str, p: &Plan| match validate(s, p) {
        Ok(sc) => sc.value,
        Err(e) => {
            violations.push(format!("{name}: {e}"));
            f64::NAN
        }
    };
    let fifo = score("fifo", &fifo::plan(s));
    let parts = fast::parts(s, effort);
    let greedy = score("greedy", &parts.greedy);
    let search = score("search", &parts.search);
    let fast_plan = parts.fast;
    let fast = score("fast", &fast_plan);
    let old = Scenario { must_finish: false, ..s.clone() };
    let cut = score("fast (cut runs dropped)", &drop_unfinished(s, &fast::plan_with_effort(&old, effort)));
    let solved = full.map(|f| f(s, &fast_plan));
    let full = match solved {
        Some(Ok((p, bound))) => Some((score("full", &p), bound)),
        Some(Err(e)) => {
            violations.push(format!("full: {e}"));
            None
        }
        None => None,
    };
    Row { family, seed, fifo, greedy, search, fast, cut, full, violations }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn worst(v: &[f64]) -> f64 {
    v.iter().copied().filter(|x| x.is_finite()).fold(f64::INFINITY, f64::min)
}

/// Run `n` instances; `time_limit_s`/`gap` for full mode (`None`: without HiGHS).
/// The most instances `--instances` plans: 10,000, 250 times the README's
/// 40. They are drawn up front and kept with their figures (some KB each),
/// and each is planned in turn (fast mode up to about 0.3 s, full mode up
/// to --time-limit): a larger N only asks for hours.
pub const MAX_INSTANCES: usize = 10_000;

pub fn run(n: usize, full_limit: Option<f64>, quiet: bool, effort: u32) -> Result<(), String> {
    if !(1..=MAX_INSTANCES).contains(&n) {
        return Err(format!("--instances {n}: give 1 to {MAX_INSTANCES}"));
    }
    let all = instances(n);
    let bar = ProgressBar::with_draw_target(
        Some(n as u64),
        if quiet || !std::io::stderr().is_terminal() { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() },
    );
    bar.set_style(
        ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} instances ({elapsed}, {msg})")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    bar.set_prefix("plan");
    #[cfg(feature = "highs")]
    let solver = full_limit.map(|limit| {
        move |s: &Scenario, warm: &Plan| -> Result<(Plan, f64), String> {
            use tally_planner::full;
            let opts = full::FullOptions { time_limit_s: limit, mip_rel_gap: 0.0, formulation: full::Formulation::Auto };
            full::plan(s, warm, &opts).map(|r| (r.plan, r.bound)).map_err(|e| e.to_string())
        }
    });
    #[cfg(not(feature = "highs"))]
    let solver: Option<fn(&Scenario, &Plan) -> Result<(Plan, f64), String>> = {
        let _ = full_limit;
        None
    };
    let mut rows = Vec::with_capacity(n);
    for (family, seed, s) in &all {
        bar.set_message(format!("{} #{seed}", family.name()));
        let f = solver.as_ref().map(|f| f as Solver<'_>);
        rows.push(measure(*family, *seed, s, f, effort));
        bar.inc(1);
    }
    bar.finish_and_clear();

    let pct = |v: f64| if v.is_finite() { format!("{:.1}%", 100.0 * v) } else { "-".into() };
    let mut t = Table::new([Column::left(22)].into_iter().chain((0..9).map(|_| Column::right(9)))).gap(" ");
    t.row(["instance", "fifo", "greedy", "fast", "full", "bound", "fast/opt", "greedy", "search", "cut runs"].map(String::from));
    for r in &rows {
        let (full, bound) = r.full.map_or(("-".into(), "-".into()), |(v, b)| {
            (format!("{v:.1}"), if b.is_finite() { format!("{b:.1}{}", if r.proved() { "" } else { "+" }) } else { "none".into() })
        });
        t.row([
            format!("{} #{}", r.family.name(), r.seed),
            format!("{:.1}", r.fifo),
            format!("{:.1}", r.greedy),
            format!("{:.1}", r.fast),
            full,
            bound,
            pct(r.ratio(r.fast)),
            pct(r.ratio(r.greedy)),
            pct(r.ratio(r.search)),
            pct(r.ratio(r.cut)),
        ]);
    }
    println!("{n} instances drawn like the shipped scenarios (tally_planner::generate), must-finish on, fast mode at effort {effort};");
    println!("x/opt = value over full mode's proven optimum (over its bound where none was proven: a bound marked +);");
    println!("search = fast mode's search without the greedy's floor; cut runs = fast mode under the old rule (runs cut at the horizon counted), those runs then dropped\n");
    print!("{t}");
    let mut s = Table::new([Column::left(22)].into_iter().chain((0..7).map(|_| Column::right(11)))).gap(" ");
    s.row(["family", "proved", "fast med", "fast worst", "greedy med", "fifo med", "fast<greedy", "search<grdy"].map(String::from));
    let groups: Vec<(String, Vec<&Row>)> = Family::ALL
        .iter()
        .map(|f| (f.name().to_string(), rows.iter().filter(|r| r.family == *f).collect::<Vec<_>>()))
        .chain(std::iter::once(("all".to_string(), rows.iter().collect())))
        .filter(|(_, g)| !g.is_empty())
        .collect();
    for (name, g) in &groups {
        let fast: Vec<f64> = g.iter().map(|r| r.ratio(r.fast)).collect();
        s.row([
            name.clone(),
            format!("{}/{}", g.iter().filter(|r| r.proved()).count(), g.len()),
            pct(median(fast.clone())),
            pct(worst(&fast)),
            pct(median(g.iter().map(|r| r.ratio(r.greedy)).collect())),
            pct(median(g.iter().map(|r| r.ratio(r.fifo)).collect())),
            g.iter().filter(|r| r.fast < r.greedy - 1e-9).count().to_string(),
            g.iter().filter(|r| r.search < r.greedy - 1e-9).count().to_string(),
        ]);
    }
    println!();
    print!("{s}");
    let violations: Vec<String> =
        rows.iter().flat_map(|r| r.violations.iter().map(move |v| format!("{} #{}: {v}", r.family.name(), r.seed))).collect();
    println!("validator violations: {}", violations.len());
    for v in &violations {
        println!("  {v}");
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(format!("{} plans failed the validator (listed above)", violations.len()))
    }
}
