//! Full-mode tests: both models' plans validate and their bounds hold, on
//! hand-checked instances and seeded random ones.

use super::count::Mip;
use super::solver::{set, solve_mip};
use super::*;
use crate::fixtures::{job, named_svc as svc, scenario};
use crate::grid::{firsts, pinned_plan, Bits};
use crate::rng::Rng;
use crate::{fast, Placed, Score, Service};
use highs::HighsModelStatus;

/// Pinned jobs only, services holding nothing.
fn trivial(s: &Scenario) -> Plan {
    Plan { realtime: vec![vec![Vec::new(); s.steps]; s.services.len()], ..pinned_plan(s) }
}

fn solve(s: &Scenario) -> FullResult {
    let r = plan(s, &trivial(s), &FullOptions { time_limit_s: 10.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
    let score = validate(s, &r.plan).unwrap();
    assert_eq!(score.value, r.objective);
    assert!(r.bound >= r.objective - 1e-6, "bound {} < objective {}", r.bound, r.objective);
    r
}

fn start(p: &Plan, id: u64) -> Option<usize> {
    p.batch.iter().find(|b| b.job_id == id).map(|b| b.start_step)
}

#[test]
fn higher_priority_wins_when_both_cannot_run_now() {
    let s = scenario(4, 2, vec![job(1, 4, 1, 1.0, 0), job(2, 4, 1, 5.0, 0)], vec![]);
    let r = solve(&s);
    assert_eq!((start(&r.plan, 2), start(&r.plan, 1)), (Some(0), Some(1)));
    assert!((r.objective - (20.0 + 3.8)).abs() < 1e-9);
    assert_eq!(r.status, FullStatus::Optimal);
    assert!(r.gap < 1e-6);
}

#[test]
fn penalised_realtime_outranks_batch() {
    // 4 GPUs, 1 step: serving 2 GPUs of demand saves 2·8·10 = 160, more
    // than the 4-GPU job's 4·5 = 20; the 2-GPU job fits beside it.
    let s = scenario(4, 1, vec![job(1, 4, 1, 5.0, 0), job(2, 2, 1, 1.0, 0)], vec![svc("chat", vec![2], 1)]);
    let r = solve(&s);
    assert_eq!(r.plan.realtime[0][0].len(), 2);
    assert_eq!(start(&r.plan, 1), None);
    assert_eq!(start(&r.plan, 2), Some(0));
    assert!((r.objective - 2.0).abs() < 1e-9);
}

#[test]
fn swap_cap_ramps_early_and_trades_against_batch() {
    // Demand 0 → 4 with cap 1: hold 3 idle GPUs at step 0.
    let s = scenario(4, 2, vec![], vec![svc("chat", vec![0, 4], 1)]);
    let r = solve(&s);
    assert_eq!(r.plan.realtime[0].iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(validate(&s, &r.plan).unwrap().unmet_gpu_steps, 0);
    // A 4-GPU job now worth 10·4 = 40 loses to 3 unmet GPU-steps (240)...
    let s = scenario(4, 2, vec![job(1, 4, 1, 10.0, 0)], vec![svc("chat", vec![0, 4], 1)]);
    let r = solve(&s);
    assert_eq!(start(&r.plan, 1), None);
    assert!((r.objective - 0.0).abs() < 1e-9);
    // ...one worth 100·4 = 400 wins: 400 − 3·80 = 160.
    let s = scenario(4, 2, vec![job(1, 4, 1, 100.0, 0)], vec![svc("chat", vec![0, 4], 1)]);
    let r = solve(&s);
    assert_eq!(start(&r.plan, 1), Some(0));
    assert!((r.objective - 160.0).abs() < 1e-9);
    // A sharp drop keeps idle GPUs within the cap instead of failing.
    let s = scenario(8, 3, vec![job(1, 2, 3, 1.0, 0)], vec![svc("chat", vec![6, 0, 0], 2)]);
    let r = solve(&s);
    let held: Vec<usize> = r.plan.realtime[0].iter().map(Vec::len).collect();
    // (6, 4, 2) or, as idle GPUs cost nothing, (6, 4, 4): the same value.
    assert!(held[..2] == [6, 4] && held[2] >= 2, "{held:?}");
    assert_eq!(validate(&s, &r.plan).unwrap().unmet_gpu_steps, 0);
}

#[test]
fn pinned_jobs_stay_put() {
    let mut running = job(1, 4, 3, 1.0, 0);
    running.pinned = Some((0, 4));
    let s = scenario(8, 3, vec![running, job(2, 8, 1, 9.0, 0), job(3, 4, 2, 2.0, 0), job(4, 2, 1, 1.0, 1)], vec![]);
    let r = solve(&s);
    assert!(r.plan.batch.contains(&Placed { job_id: 1, start_step: 0, first_gpu: 4 }));
    // The 8-GPU job can only run once the pinned one ends: beyond the horizon.
    assert_eq!(start(&r.plan, 2), None);
    assert_eq!(start(&r.plan, 3), Some(0));
}

#[test]
fn options_are_checked_before_they_reach_highs() {
    let s = scenario(4, 1, vec![job(1, 4, 1, 1.0, 0)], vec![]);
    let w = trivial(&s);
    for (t, g) in [(0.0, 0.01), (-1.0, 0.01), (f64::NAN, 0.01), (f64::INFINITY, 0.01)] {
        assert!(matches!(plan(&s, &w, &FullOptions { time_limit_s: t, mip_rel_gap: g, ..FullOptions::default() }), Err(FullError::TimeLimit(_))));
    }
    for g in [1.0, -0.1, f64::NAN] {
        assert!(matches!(plan(&s, &w, &FullOptions { time_limit_s: 1.0, mip_rel_gap: g, ..FullOptions::default() }), Err(FullError::Gap(_))));
    }
    // An invalid warm plan is ignored, not trusted.
    let bad = Plan { batch: vec![Placed { job_id: 1, start_step: 0, first_gpu: 2 }], realtime: vec![] };
    let r = plan(&s, &bad, &FullOptions::default()).unwrap();
    assert_eq!(r.plan.batch, vec![Placed { job_id: 1, start_step: 0, first_gpu: 0 }]);
}

#[test]
fn empty_scenarios() {
    let s = scenario(8, 0, vec![job(1, 2, 1, 1.0, 0)], vec![]);
    let r = solve(&s);
    assert_eq!(r.objective, 0.0);
    let s = scenario(8, 4, vec![], vec![]);
    let r = solve(&s);
    assert_eq!((r.objective, r.bound, r.status), (0.0, 0.0, FullStatus::Optimal));
}

/// A random scenario: mixed power-of-two jobs, some pinned at t = 0, and services.
fn random(seed: u64, gpus: u32, njobs: usize, steps: usize, nsvc: usize) -> Scenario {
    let mut rng = Rng::new(seed);
    let per_node = 8.min(gpus);
    let max_log = (gpus / 8).max(1).ilog2().min(6);
    let mut pinned = Bits::new(gpus, steps.max(1));
    let mut jobs = Vec::new();
    for id in 0..njobs as u64 {
        let g = 1u32 << rng.below(max_log as usize + 1);
        let dur = 1 + rng.below((steps / 2).max(1));
        let mut j = job(id + 1, g, dur, 0.5 + 4.5 * rng.unit(), rng.below((steps * 2 / 3).max(1)));
        // Running jobs: at most half the cluster.
        if rng.below(6) == 0 && pinned.count(0, 0, gpus) + g <= gpus / 2 {
            if let Some(f) = firsts(gpus, per_node, g).find(|&f| pinned.free(0, f, g)) {
                for t in 0..dur.min(steps) {
                    pinned.set(t, f, g);
                }
                j.pinned = Some((0, f));
                j.arrival_step = 0;
            }
        }
        jobs.push(j);
    }
    let services = (0..nsvc)
        .map(|k| {
            let base = gpus as f64 / (6.0 * nsvc as f64);
            let phase = rng.unit() * 6.0;
            let demand = (0..steps).map(|t| (base * (1.0 + 0.8 * ((t as f64) / 4.0 + phase).sin())).round() as u32).collect();
            Service { name: format!("svc{k}"), demand, swap_cap: 1 + rng.below((gpus / 32).max(2) as usize) as u32, weight: 1.0 + rng.unit() }
        })
        .collect();
    Scenario { gpus, gpus_per_node: per_node, steps, step_s: 900, decay: 0.97, penalty: 8.0, must_finish: true, jobs, services }
}

/// The count model is a relaxation: on seeded random instances the fast
/// plan, fixed as a point of the model, is feasible at its validated
/// value, and the model's optimum (its bound) is at least the fast plan's
/// value and the exact model's proven optimum.
#[test]
fn count_bound_is_above_every_plan() {
    let opts = FullOptions { time_limit_s: 30.0, mip_rel_gap: 0.0, ..FullOptions::default() };
    for seed in 0..6 {
        let s = random(seed, 32, 24, 8, 1 + seed as usize % 2);
        let warm = fast::plan(&s);
        let fast_value = validate(&s, &warm).unwrap().value;
        let tol = 1e-6 * fast_value.abs().max(1.0);
        // The fast plan as a fixed point of the model.
        let mut mip = Mip::build(&s, Some(&warm));
        if mip.num_cols == 0 {
            continue;
        }
        let point = mip.cols_of(&s, &warm).expect("the fast plan maps to the count model");
        let mut fixed = Model::try_new(std::mem::take(&mut mip.problem)).unwrap();
        set(&mut fixed, "time_limit", 30.0).unwrap();
        let all = mip.x.iter().flatten().flat_map(|(_, xs)| xs.iter()).chain(mip.h.iter().flatten()).chain(mip.u.iter().flatten());
        for &c in all {
            fixed.change_column_bounds(c, point[c.index()]..=point[c.index()]);
        }
        let solved = fixed.try_solve().unwrap();
        assert_eq!(solved.status(), HighsModelStatus::Optimal, "seed {seed}: the fast plan is not a point of the count model");
        let at = -solved.objective_value() + mip.pinned_value;
        assert!((at - fast_value).abs() <= tol, "seed {seed}: fast plan worth {at} in the model, {fast_value} validated");
        // The model's optimum.
        let mut mip = Mip::build(&s, Some(&warm));
        let model = Model::try_new(std::mem::take(&mut mip.problem)).unwrap();
        // Its dual bound, proven optimal or stopped by the limit, bounds every plan.
        let run = solve_mip(model, 30.0, &opts, Some(&point)).unwrap();
        let bound = -run.dual.expect("a dual bound") + mip.pinned_value;
        assert!(bound >= fast_value - tol, "seed {seed}: bound {bound} < fast plan {fast_value}");
        let exact = exact::solve(&s, Some(&warm), 30.0, &opts).unwrap();
        if let (true, Some(p)) = (exact.optimal, exact.plan) {
            let best = validate(&s, &p).unwrap().value;
            assert!(bound >= best - tol, "seed {seed}: bound {bound} < exact optimum {best}");
        }
    }
}

#[test]
fn random_plans_validate_and_beat_their_warm_start() {
    for seed in 0..12 {
        let s = random(seed, 32, 12, 8, 2);
        let warm = fast::plan(&s);
        let warm_value = validate(&s, &warm).unwrap().value;
        let trivial_value = validate(&s, &trivial(&s)).unwrap().value;
        let r = plan(&s, &warm, &FullOptions { time_limit_s: 5.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
        let score: Score = validate(&s, &r.plan).unwrap();
        assert_eq!(score.value, r.objective);
        assert!(r.objective >= warm_value - 1e-9, "seed {seed}: {} < fast {warm_value}", r.objective);
        assert!(r.objective >= trivial_value - 1e-9);
        assert!(r.bound >= r.objective - 1e-6 * r.bound.abs().max(1.0), "seed {seed}: bound {} < {}", r.bound, r.objective);
        for j in s.jobs.iter().filter(|j| j.pinned.is_some()) {
            let (t, f) = j.pinned.unwrap();
            assert!(r.plan.batch.contains(&Placed { job_id: j.id, start_step: t, first_gpu: f }));
        }
        // From a trivial warm start too.
        let r = plan(&s, &trivial(&s), &FullOptions { time_limit_s: 5.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
        validate(&s, &r.plan).unwrap();
        assert!(r.objective >= trivial_value - 1e-9);
    }
}

/// The exact model alone, and against the count model.
mod exact_model {
    use super::super::exact;
    use super::*;
    use crate::fixtures::svc;
    use crate::PlanJob;

    fn solve_exact(s: &Scenario) -> (Plan, f64, bool) {
        let warm = fast::plan(s);
        let out = exact::solve(s, Some(&warm), 30.0, &FullOptions { time_limit_s: 30.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
        (out.plan.expect("an incumbent"), out.bound.expect("a bound"), out.optimal)
    }

    #[test]
    fn fragmentation_the_count_model_cannot_see() {
        // 8 GPUs, 2 steps, a service needing 1 GPU: two 4-GPU jobs cannot
        // run together (the service breaks one half), so one waits a step.
        let s = scenario(8, 2, vec![job(1, 4, 1, 2.0, 0), job(2, 4, 1, 1.0, 0)], vec![svc(vec![1, 1], 0)]);
        assert!(exact::fits(&s));
        let (p, bound, optimal) = solve_exact(&s);
        let score = validate(&s, &p).unwrap();
        // Job 1 at 0 (2·4), job 2 at 1 (1·4·0.95).
        assert!((score.value - (8.0 + 3.8)).abs() < 1e-9, "{}", score.value);
        assert!(optimal);
        assert!((bound - score.value).abs() < 1e-6, "bound {bound} vs {}", score.value);
        let r = plan(&s, &fast::plan(&s), &FullOptions { time_limit_s: 30.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
        assert_eq!(r.status, FullStatus::Optimal);
        assert!(r.gap < 1e-6);
        assert!((r.objective - 11.8).abs() < 1e-9);
        // Either model may be forced.
        assert_eq!(r.model, Formulation::Exact, "small: the exact model");
        let with = |formulation| FullOptions { time_limit_s: 30.0, mip_rel_gap: 0.0, formulation };
        let count = plan(&s, &fast::plan(&s), &with(Formulation::Count)).unwrap();
        assert_eq!(count.model, Formulation::Count);
        assert!((count.objective - 11.8).abs() < 1e-9);
        assert!(count.bound >= 11.8 - 1e-6, "a relaxation's bound: {}", count.bound);
        let forced = plan(&s, &fast::plan(&s), &with(Formulation::Exact)).unwrap();
        assert_eq!(forced.model, Formulation::Exact);
        assert!((forced.bound - 11.8).abs() < 1e-6);
    }

    #[test]
    fn swap_cap_counts_gpus_added_and_removed() {
        // Cap 1 and demand 2 → 2: the service may not move at all once it
        // holds two GPUs, so an 8-GPU job never fits; a 2-GPU job beside it does.
        let s = scenario(4, 3, vec![job(1, 2, 3, 1.0, 0), job(2, 4, 1, 50.0, 1)], vec![svc(vec![2, 2, 2], 1)]);
        let (p, bound, optimal) = solve_exact(&s);
        let score = validate(&s, &p).unwrap();
        // Job 2 would need the service to drop 2 GPUs and take them back: over the cap.
        assert!(p.batch.iter().all(|b| b.job_id != 2));
        assert_eq!(score.unmet_gpu_steps, 0);
        assert!((score.value - 2.0 * (1.0 + 0.95 + 0.9025)).abs() < 1e-9);
        assert!(optimal && (bound - score.value).abs() < 1e-6);
    }

    #[test]
    fn pinned_jobs_stay_and_are_counted_in_the_bound() {
        let mut running = job(1, 4, 2, 3.0, 0);
        running.pinned = Some((0, 0));
        let s = scenario(8, 2, vec![running, job(2, 8, 1, 9.0, 0), job(3, 4, 2, 1.0, 0)], vec![]);
        let (p, bound, optimal) = solve_exact(&s);
        let score = validate(&s, &p).unwrap();
        assert!(p.batch.contains(&Placed { job_id: 1, start_step: 0, first_gpu: 0 }));
        // Pinned 3·4·(1 + 0.95) + job 3 on the other half 1·4·(1 + 0.95); job 2 never fits.
        assert!((score.value - 16.0 * 1.95).abs() < 1e-9);
        assert!(optimal && (bound - score.value).abs() < 1e-6);
    }

    #[test]
    fn random_plans_validate_and_the_bound_holds() {
        for seed in 1..9u64 {
            let mut rng = Rng::new(seed);
            let steps = 6;
            let mut jobs: Vec<PlanJob> = (0..7)
                .map(|id| {
                    let g = 1 << rng.below(4);
                    job(id + 1, g, 1 + rng.below(3), 1.0 + rng.below(9) as f64, rng.below(3))
                })
                .collect();
            if seed % 2 == 0 {
                jobs[0].pinned = Some((0, 0));
                jobs[0].arrival_step = 0;
            }
            let demand = (0..steps).map(|_| rng.below(4) as u32).collect();
            let s = Scenario {
                gpus: 8,
                gpus_per_node: 8,
                steps,
                step_s: crate::time::HOUR_S,
                decay: 0.97,
                penalty: 8.0,
                must_finish: true,
                jobs,
                services: vec![svc(demand, 2)],
            };
            let warm = fast::plan(&s);
            let warm_value = validate(&s, &warm).unwrap().value;
            let (p, bound, _) = solve_exact(&s);
            let score = validate(&s, &p).unwrap();
            assert!(bound >= warm_value - 1e-6, "seed {seed}: bound {bound} < fast {warm_value}");
            assert!(bound >= score.value - 1e-6, "seed {seed}: bound {bound} < {}", score.value);
            let r = plan(&s, &warm, &FullOptions { time_limit_s: 30.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
            assert!(r.objective >= warm_value - 1e-9);
            assert!(r.bound >= r.objective - 1e-6);
            assert_eq!(validate(&s, &r.plan).unwrap().value, r.objective);
        }
    }
}

#[test]
fn generated_instances_full_mode_validates_and_its_bound_holds() {
    for (f, seed, s) in crate::generate::instances(40) {
        let warm = fast::plan(&s);
        let fast_value = validate(&s, &warm).unwrap().value;
        let r = plan(&s, &warm, &FullOptions { time_limit_s: 0.3, ..FullOptions::default() }).unwrap_or_else(|e| panic!("{} #{seed}: {e}", f.name()));
        let score = validate(&s, &r.plan).unwrap_or_else(|e| panic!("{} #{seed}: {e}", f.name()));
        assert!(
            score.value >= fast_value - 1e-9 && r.bound >= score.value - 1e-6,
            "{} #{seed}: fast {fast_value}, full {}, bound {}",
            f.name(),
            score.value,
            r.bound
        );
    }
}
