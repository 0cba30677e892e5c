//! `tally plan`: plan a scenario's horizon (fast mode, or HiGHS full mode
//! when built with it) and compare it with FIFO with peak reservation.

use crate::table::{Column, Table};
use serde_json::{json, Value};
use std::iter::once;
use std::path::PathBuf;
use tally_allocator::format_duration;
use tally_planner::{fast, fifo, validate, Plan, Scenario, Score};

/// A gap at most this (relative) is a proof of optimality: the bound and
/// the plan's value are summed differently, so an exact 0 is not expected.
const PROVED: f64 = 1e-6;

/// The plan's gap to a bound: `(bound − value) / |bound|`, ≥ 0.
fn gap(value: f64, bound: f64) -> f64 {
    (bound - value).max(0.0) / bound.abs().max(1e-9)
}

/// What a bound says about a plan, in words that do not claim more than
/// it proves: "proved optimal" only at gap 0; "within N%" when the solver
/// stopped at its gap target and the plan is within it; the model's bound
/// when the model was solved but the plan laid out from it is further
/// below (the count model's decoder); the dual bound at the time limit
/// otherwise. The gap itself is always printed beside it.
fn bound_label(model: &str, stopped_at_target: bool, gap: f64, target: f64) -> String {
    if gap <= PROVED {
        format!("{model} model: proved optimal by HiGHS")
    } else if stopped_at_target && gap <= target + PROVED {
        format!("{model} model: HiGHS proved the plan within {}% of the optimum (--gap {target})", 100.0 * target)
    } else if stopped_at_target {
        format!("{model} model: HiGHS solved the model to --gap {target}; the plan laid out from it is further below its bound")
    } else {
        format!("{model} model: HiGHS's dual bound at the time limit")
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The heuristic search (legal by construction; milliseconds, and with realtime services the co-placement search: about 0.3 s at 64 GPUs / 30 jobs).
    Fast,
    /// The MIP in HiGHS, warm-started with the fast plan.
    #[cfg(feature = "highs")]
    Full,
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Scenario file (TOML, docs/planner.md).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["generated", "instances"])]
    pub scenario: Option<PathBuf>,
    /// Plan a generated instance instead of a file: FAMILY:SEED, FAMILY one
    /// of the shipped scenarios' names (e.g. mixed:3; docs/planner.md).
    #[arg(long, value_name = "FAMILY:SEED", conflicts_with = "scenario")]
    pub generated: Option<String>,
    /// Measure the planner on N generated instances (FIFO, the greedy, fast
    /// mode and, with --mode full, full mode asked for a proof within
    /// --time-limit each), every plan validated; N from 1 to 10000.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["scenario", "generated", "json", "svg"],
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=crate::plan_check::MAX_INSTANCES as u64)
    )]
    pub instances: Option<usize>,
    /// With --instances: no progress bar.
    #[arg(long)]
    pub quiet: bool,
    #[arg(long, value_enum, default_value = "fast")]
    pub mode: Mode,
    /// Fast mode's search budget in multiples of the default (1-100). The
    /// budget is counted work, so plans stay deterministic; the time grows
    /// about linearly (docs/planner.md, "Robustness").
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub effort: u32,
    /// Print the plans and figures as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also draw the plan's grid as SVG into this file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Full mode: solver time limit.
    #[cfg(feature = "highs")]
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub time_limit: String,
    /// Full mode: relative MIP gap at which to stop.
    #[cfg(feature = "highs")]
    #[arg(long, value_name = "GAP", default_value_t = 0.01)]
    pub gap: f64,
    /// Full mode: which MIP (auto = the exact model when it is small, else the count model).
    #[cfg(feature = "highs")]
    #[arg(long, value_enum, default_value = "auto")]
    pub model: Model,
}

/// Full mode's formulation (docs/planner.md).
#[cfg(feature = "highs")]
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// The exact model for small instances, the count model otherwise.
    Auto,
    /// The exact block-indexed model whatever the size (slow beyond 8 GPUs; for proofs).
    Exact,
    /// The count model (a relaxation, decoded into blocks).
    Count,
}

struct Solved {
    label: &'static str,
    plan: Plan,
    score: Score,
    /// Full mode: the solver's proven bound and whether it stopped at its
    /// gap target (not the time limit), and which model ("exact" or "count").
    bound: Option<(f64, bool)>,
    model: Option<&'static str>,
    micros: u128,
    /// Full mode: the relative gap it was asked to stop at (`--gap`).
    gap_target: f64,
    /// Full mode: the fast plan it started from (for the side-by-side).
    fast: Option<Score>,
    /// The simple greedy fast mode is held to (from the same search).
    greedy: Plan,
}

fn solve(s: &Scenario, a: &PlanArgs) -> Result<Solved, String> {
    let t = std::time::Instant::now();
    let fast::Parts { greedy, fast: p, .. } = fast::parts(s, a.effort);
    let fast_us = t.elapsed().as_micros();
    let score = validate(s, &p).map_err(|e| format!("fast plan invalid (a bug): {e}"))?;
    match a.mode {
        Mode::Fast => Ok(Solved { label: "fast", plan: p, score, bound: None, model: None, micros: fast_us, gap_target: 0.0, fast: None, greedy }),
        #[cfg(feature = "highs")]
        Mode::Full => {
            use tally_planner::full;
            let limit = tally_allocator::parse_duration(&a.time_limit).map_err(|e| format!("--time-limit: {e}"))?;
            let formulation = match a.model {
                Model::Auto => full::Formulation::Auto,
                Model::Exact => full::Formulation::Exact,
                Model::Count => full::Formulation::Count,
            };
            let opts = full::FullOptions { time_limit_s: limit.max(1) as f64, mip_rel_gap: a.gap, formulation };
            let t = std::time::Instant::now();
            match full::plan(s, &p, &opts) {
                Ok(r) => {
                    let full_score = validate(s, &r.plan).map_err(|e| format!("full plan invalid (a bug): {e}"))?;
                    let optimal = r.status == full::FullStatus::Optimal;
                    Ok(Solved {
                        label: "full",
                        plan: r.plan,
                        score: full_score,
                        bound: Some((r.bound, optimal)),
                        model: Some(if r.model == full::Formulation::Exact { "exact" } else { "count" }),
                        micros: t.elapsed().as_micros(),
                        gap_target: a.gap,
                        fast: Some(score),
                        greedy,
                    })
                }
                Err(e) => {
                    eprintln!("full mode failed ({e}); using the fast plan");
                    Ok(Solved { label: "fast", plan: p, score, bound: None, model: None, micros: fast_us, gap_target: 0.0, fast: None, greedy })
                }
            }
        }
    }
}

const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// `cells[gpu][step]`: ' ' idle, a job letter, or a service mark.
fn cells(s: &Scenario, p: &Plan) -> Vec<Vec<char>> {
    let mut g = vec![vec!['.'; s.steps]; s.gpus as usize];
    let mut order: Vec<u64> = s.jobs.iter().map(|j| j.id).collect();
    order.sort();
    for b in &p.batch {
        let j = s.jobs.iter().find(|j| j.id == b.job_id).expect("validated");
        let c = CHARS[order.iter().position(|&i| i == j.id).unwrap_or(0) % CHARS.len()] as char;
        for t in b.start_step..(b.start_step + j.duration_steps).min(s.steps) {
            for row in &mut g[b.first_gpu as usize..(b.first_gpu + j.gpus) as usize] {
                row[t] = c;
            }
        }
    }
    for (k, held) in p.realtime.iter().enumerate() {
        let c = ['@', '#', '%', '&', '*'][k % 5];
        for (t, gpus) in held.iter().enumerate() {
            for &gpu in gpus {
                g[gpu as usize][t] = c;
            }
        }
    }
    g
}

fn print_grid(s: &Scenario, p: &Plan) {
    let g = cells(s, p);
    // One row per GPU up to 64 GPUs, else one per node (its first GPU).
    let stride = if s.gpus <= 64 { 1 } else { s.gpus_per_node as usize };
    let mut table = Table::new([Column::right(8), Column::left(0)]).gap("  ");
    table.row(["step".to_string(), (0..s.steps).map(|t| if t % 10 == 0 { char::from(b'0' + ((t / 10) % 10) as u8) } else { ' ' }).collect()]);
    for (i, row) in g.iter().enumerate().step_by(stride) {
        let label = if stride == 1 { format!("gpu {i}") } else { format!("node {}", i / stride) };
        table.row([label, row.iter().collect()]);
    }
    print!("{table}");
}

fn idle_windows(score: &Score, s: &Scenario) -> String {
    // Maximal runs of steps with at least one GPU idle.
    let mut out = Vec::new();
    let mut t = 0;
    while t < s.steps {
        if score.busy[t] < s.gpus {
            let start = t;
            let mut min_free = s.gpus;
            while t < s.steps && score.busy[t] < s.gpus {
                min_free = min_free.min(s.gpus - score.busy[t]);
                t += 1;
            }
            out.push(format!("steps {start}-{} (>= {min_free} GPUs free)", t - 1));
        } else {
            t += 1;
        }
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(", ")
    }
}

fn coverage_risk(s: &Scenario, p: &Plan) -> String {
    let mut out = Vec::new();
    for (k, svc) in s.services.iter().enumerate() {
        let short: Vec<String> = (0..s.steps)
            .filter(|&t| (p.realtime[k][t].len() as u32) < svc.demand[t])
            .map(|t| format!("{t} ({}/{})", p.realtime[k][t].len(), svc.demand[t]))
            .collect();
        out.push(format!(
            "{}: {}",
            svc.name,
            if short.is_empty() { "covered at every step".to_string() } else { format!("short at steps {}", short.join(", ")) }
        ));
    }
    if out.is_empty() {
        "no services".into()
    } else {
        out.join("; ")
    }
}

fn plan_json(s: &Scenario, p: &Plan, score: &Score) -> Value {
    json!({
        "batch": p.batch.iter().map(|b| {
            let (g, d) = s.jobs.iter().find(|j| j.id == b.job_id).map_or((0, 0), |j| (j.gpus, j.duration_steps));
            json!({ "job": b.job_id, "start_step": b.start_step, "steps": d, "gpus": (b.first_gpu..b.first_gpu + g).collect::<Vec<_>>() })
        }).collect::<Vec<_>>(),
        "realtime": s.services.iter().zip(&p.realtime).map(|(svc, held)| json!({ "service": svc.name, "gpus_per_step": held })).collect::<Vec<_>>(),
        "score": {
            "value": score.value, "batch_value": score.batch_value, "unmet_gpu_steps": score.unmet_gpu_steps,
            "unmet_cost": score.unmet_cost, "utilisation": score.utilisation, "jobs_placed": score.placed, "jobs_finished": score.finished,
            "fragmented_gpu_steps": score.fragmented_gpu_steps, "busy_per_step": score.busy,
        },
    })
}

/// The plan's grid as SVG, drawn with plotters (crate::plot): GPUs (rows,
/// GPU 0 at the bottom) x steps (columns), a cell per GPU-step coloured by
/// its batch job, grey for realtime, white when idle.
fn svg(s: &Scenario, p: &Plan) -> String {
    use crate::plot::{render, Categories, DESC_SIZE, FONT, INK, LABEL_SIZE, TABLEAU10};
    use plotters::prelude::*;
    const REALTIME: RGBColor = RGBColor(0x88, 0x88, 0x88);
    let g = cells(s, p);
    let (steps, gpus) = (s.steps, s.gpus as usize);
    // Rows of up to 16 px, the grid 480 px high at most; 900 px for the steps.
    let row = (480 / gpus.max(1)).clamp(1, 16);
    let size = (960, (row * gpus) as u32 + 100);
    // A label on every step up to 24 steps, on every GPU up to 16 rows.
    let (x_every, y_every) = (steps.div_ceil(24).max(1), gpus.div_ceil(16).max(1));
    render(size, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("plan: GPUs (rows) x steps (columns); grey = realtime, white = idle", (FONT, DESC_SIZE).into_font().color(&INK))
            .margin(10)
            .margin_right(40)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(Categories { n: steps, every: x_every }, Categories { n: gpus, every: y_every })?;
        let index = |v: &f64| format!("{}", v.floor());
        chart
            .configure_mesh()
            .disable_mesh()
            .axis_style(INK)
            .label_style((FONT, LABEL_SIZE).into_font().color(&INK))
            .axis_desc_style((FONT, DESC_SIZE).into_font().color(&INK))
            .x_label_formatter(&index)
            .y_label_formatter(&index)
            .x_desc("step")
            .y_desc("GPU")
            .draw()?;
        // A white pixel between cells when they are big enough to spare it.
        let (w, h) = chart.plotting_area().dim_in_pixel();
        let gap_x = u32::from(w as usize >= 4 * steps);
        let gap_y = u32::from(h as usize >= 4 * gpus);
        let cells = g.iter().enumerate().flat_map(|(i, row)| {
            row.iter().enumerate().filter(|&(_, &c)| c != '.').map(move |(t, &c)| {
                let colour = match c {
                    '@' | '#' | '%' | '&' | '*' => REALTIME,
                    c => TABLEAU10[(c as usize) % TABLEAU10.len()],
                };
                let mut cell = Rectangle::new([(t as f64, i as f64), (t as f64 + 1.0, i as f64 + 1.0)], colour.filled());
                cell.set_margin(gap_y, 0, 0, gap_x);
                cell
            })
        });
        chart.draw_series(cells)?;
        Ok(())
    })
}

/// The scenario `--scenario` or `--generated` names, and how to call it.
fn scenario(a: &PlanArgs) -> Result<(Scenario, String), String> {
    if let Some(g) = &a.generated {
        use tally_planner::generate::{instance, Family};
        let names = Family::ALL.map(Family::name).join(", ");
        let (family, seed) = g.split_once(':').ok_or_else(|| format!("--generated {g}: write FAMILY:SEED, e.g. mixed:3 (families: {names})"))?;
        let family = Family::parse(family).ok_or_else(|| format!("--generated {g}: no family {family:?} (families: {names})"))?;
        let seed: u64 = seed.parse().map_err(|_| format!("--generated {g}: the seed {seed:?} is not a whole number >= 0"))?;
        return Ok((instance(family, seed), format!("generated {}:{seed}", family.name())));
    }
    let path = a.scenario.as_ref().ok_or("give --scenario FILE, --generated FAMILY:SEED or --instances N")?;
    Ok((tally_config::scenario::load(path).map_err(|e| e.to_string())?, path.display().to_string()))
}

pub fn run_cmd(a: PlanArgs) -> Result<(), String> {
    if let Some(n) = a.instances {
        #[cfg(feature = "highs")]
        let full = match a.mode {
            Mode::Full => Some(tally_allocator::parse_duration(&a.time_limit).map_err(|e| format!("--time-limit: {e}"))?.max(1) as f64),
            Mode::Fast => None,
        };
        #[cfg(not(feature = "highs"))]
        let full = None;
        return crate::plan_check::run(n, full, a.quiet, a.effort);
    }
    let (s, name) = scenario(&a)?;
    let ours = solve(&s, &a)?;
    let base_plan = fifo::plan(&s);
    let base = validate(&s, &base_plan).map_err(|e| format!("fifo plan invalid (a bug): {e}"))?;
    let strict_plan = fifo::plan_variant(&s, fifo::Variant::Strict);
    let strict = validate(&s, &strict_plan).map_err(|e| format!("strict fifo plan invalid (a bug): {e}"))?;
    if let Some(path) = &a.svg {
        std::fs::write(path, svg(&s, &ours.plan)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if a.json {
        let greedy = validate(&s, &ours.greedy).map_err(|e| format!("greedy plan invalid (a bug): {e}"))?;
        let out = json!({
            "scenario": name,
            "mode": ours.label,
            "effort": a.effort,
            "plan": plan_json(&s, &ours.plan, &ours.score),
            "bound": ours.bound.map(|(b, _)| b),
            "gap": ours.bound.map(|(b, _)| gap(ours.score.value, b)),
            "proved_optimal": ours.bound.map(|(b, _)| gap(ours.score.value, b) <= PROVED),
            "stopped_at_gap_target": ours.bound.map(|(_, o)| o),
            "bound_model": ours.model,
            "must_finish": s.must_finish,
            "fast_value": ours.fast.as_ref().map(|f| f.value),
            "fifo": plan_json(&s, &base_plan, &base),
            "greedy_value": greedy.value,
            "fifo_strict": plan_json(&s, &strict_plan, &strict),
        });
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!(
        "{}: {} GPUs ({} per node), {} steps of {}, {} jobs, {} services, penalty {}, decay {}, {}",
        name,
        s.gpus,
        s.gpus_per_node,
        s.steps,
        format_duration(s.step_s),
        s.jobs.len(),
        s.services.len(),
        s.penalty,
        s.decay,
        if s.must_finish { "jobs must finish inside the horizon" } else { "runs may overrun the horizon" }
    );
    println!("\nPlan ({} mode; letters = batch jobs by id, @ # = realtime services, . = idle):", ours.label);
    print_grid(&s, &ours.plan);
    let mut cols: Vec<(&str, &Score)> = vec![(ours.label, &ours.score)];
    if let Some(f) = &ours.fast {
        cols.push(("fast", f));
    }
    cols.push(("fifo+peak", &base));
    // A label column, one per plan, and ours over FIFO's.
    let mut table = Table::new(once(Column::left(28)).chain((0..=cols.len()).map(|_| Column::right(14)))).gap("");
    table.row(once(String::new()).chain(cols.iter().map(|(name, _)| name.to_string())).chain(once(format!("{}/fifo", ours.label))));
    let mut row = |name: &str, f: &dyn Fn(&Score) -> f64, pct: bool| {
        let show = |v: f64| if pct { format!("{:.1}%", 100.0 * v) } else { format!("{v:.1}") };
        let (x, y) = (f(&ours.score), f(&base));
        let ratio = if y.abs() > 1e-12 { format!("{:.2}x", x / y) } else { "-".into() };
        table.row(once(name.to_string()).chain(cols.iter().map(|(_, sc)| show(f(sc)))).chain(once(ratio)));
    };
    row("utilisation", &|sc| sc.utilisation, true);
    row("value", &|sc| sc.value, false);
    row("unmet realtime GPU-steps", &|sc| sc.unmet_gpu_steps as f64, false);
    row("jobs started in the horizon", &|sc| sc.placed as f64, false);
    row("jobs finished in the horizon", &|sc| sc.finished as f64, false);
    row("fragmented GPU-steps", &|sc| sc.fragmented_gpu_steps as f64, false);
    print!("\n{table}");
    println!("per-step utilisation: {}", ours.score.busy.iter().map(|b| format!("{}", 100 * b / s.gpus.max(1))).collect::<Vec<_>>().join(" "));
    match (ours.bound, &ours.fast) {
        (Some((bound, _)), _) if !bound.is_finite() => println!("bound: HiGHS proved none within the time limit"),
        (Some((bound, at_target)), Some(f)) => println!(
            "bound {bound:.1} ({}): full's gap {:.2}%, fast's gap {:.2}%",
            bound_label(ours.model.unwrap_or("count"), at_target, gap(ours.score.value, bound), ours.gap_target),
            100.0 * gap(ours.score.value, bound),
            100.0 * gap(f.value, bound)
        ),
        _ if cfg!(feature = "highs") => println!("bound: --mode full proves one (HiGHS)"),
        _ => println!("bound: needs full mode (this tally was built without HiGHS)"),
    }
    println!("planned in {} us", ours.micros);
    println!("idle windows (forecast): {}", idle_windows(&ours.score, &s));
    println!("realtime coverage risk: {}", coverage_risk(&s, &ours.plan));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::bound_label;

    #[test]
    fn bound_labels_claim_no_more_than_the_gap_proves() {
        assert!(bound_label("exact", true, 0.0, 0.01).contains("proved optimal"));
        assert!(bound_label("exact", true, 0.004, 0.01).contains("within 1% of the optimum"));
        // The count model solved to its gap, the decoded plan further below: no "within".
        let decoded = bound_label("count", true, 0.0127, 0.0);
        assert!(!decoded.contains("within") && !decoded.contains("proved optimal"), "{decoded}");
        assert!(bound_label("exact", false, 0.02, 0.01).contains("time limit"));
    }
}
