//! Planner tests: every plan passes the independent validator; tiny
//! instances with a hand-known optimum; pinned jobs stay; the penalty
//! protects realtime demand; the swap cap holds.

use super::fixtures::{job, scenario, svc};
use super::grid::dilate;
use super::rng::Rng;
use super::time::HOUR_S;
use super::*;

#[test]
fn higher_priority_first_when_both_cannot_run_now() {
    // 4 GPUs, two 4-GPU jobs of 1 step: the valuable one takes step 0.
    let s = scenario(4, 2, vec![job(1, 4, 1, 1.0, 0), job(2, 4, 1, 5.0, 0)], vec![]);
    let p = fast::plan(&s);
    let score = validate(&s, &p).unwrap();
    let start = |id| p.batch.iter().find(|b| b.job_id == id).unwrap().start_step;
    assert_eq!((start(2), start(1)), (0, 1));
    // Hand value: 5·4 at t=0 + 1·4·0.95 at t=1.
    assert!((score.value - (20.0 + 3.8)).abs() < 1e-9);
    assert_eq!(score.utilisation, 1.0);
    // FIFO: arrival order (ids), the cheap one first.
    let f = fifo::plan(&s);
    let fs = validate(&s, &f).unwrap();
    assert!((fs.value - (4.0 + 20.0 * 0.95)).abs() < 1e-9);
}

#[test]
fn blocks_are_aligned_and_never_straddle_nodes() {
    let mut s = scenario(16, 1, vec![job(1, 2, 1, 1.0, 0), job(2, 8, 1, 1.0, 0), job(3, 4, 1, 1.0, 0), job(4, 2, 1, 1.0, 0)], vec![]);
    s.gpus_per_node = 8;
    let p = fast::plan(&s);
    validate(&s, &p).unwrap();
    for b in &p.batch {
        let g = s.jobs.iter().find(|j| j.id == b.job_id).unwrap().gpus;
        assert_eq!(b.first_gpu % g, 0);
        assert_eq!(b.first_gpu / 8, (b.first_gpu + g - 1) / 8);
    }
    // A misaligned block is refused by the validator.
    let bad = Plan { batch: vec![Placed { job_id: 3, start_step: 0, first_gpu: 6 }], realtime: vec![] };
    assert!(matches!(validate(&s, &bad), Err(Violation::Unaligned { .. })));
}

#[test]
fn pinned_jobs_never_move() {
    let mut running = job(1, 4, 3, 1.0, 0);
    running.pinned = Some((0, 4));
    let s = scenario(8, 3, vec![running, job(2, 8, 1, 9.0, 0), job(3, 4, 2, 2.0, 0)], vec![]);
    for p in [fast::plan(&s), fifo::plan(&s)] {
        validate(&s, &p).unwrap();
        assert!(p.batch.contains(&Placed { job_id: 1, start_step: 0, first_gpu: 4 }));
    }
    let moved = Plan { batch: vec![Placed { job_id: 1, start_step: 0, first_gpu: 0 }], realtime: vec![] };
    assert_eq!(validate(&s, &moved), Err(Violation::PinnedMoved(1)));
    assert_eq!(validate(&s, &Plan::default()), Err(Violation::PinnedDropped(1)));
}

#[test]
fn realtime_follows_demand_within_the_swap_cap() {
    // Demand jumps 0 → 6 at step 3 with cap 2: fast mode ramps up early.
    let s = scenario(8, 6, vec![job(1, 2, 6, 1.0, 0)], vec![svc(vec![0, 0, 0, 6, 6, 0], 2)]);
    let p = fast::plan(&s);
    let score = validate(&s, &p).unwrap();
    let counts: Vec<usize> = p.realtime[0].iter().map(Vec::len).collect();
    assert_eq!(counts, vec![0, 2, 4, 6, 6, 4]);
    assert_eq!(score.unmet_gpu_steps, 0, "the penalty protects realtime demand");
    // FIFO holds the peak all the time: the 2-GPU job still fits, 6 reserved.
    let f = fifo::plan(&s);
    let fs = validate(&s, &f).unwrap();
    assert!(f.realtime[0].iter().all(|g| g.len() == 6));
    assert!(fs.utilisation < score.utilisation || fs.value <= score.value);
    // A plan moving more GPUs than the cap is refused.
    let mut bad = p.clone();
    bad.realtime[0][2] = vec![];
    assert!(matches!(validate(&s, &bad), Err(Violation::Swaps { .. })));
}

/// A deterministic generator of small random scenarios: node sizes that
/// are and are not powers of two, pinned jobs, zero to two services,
/// horizons below and above 32 and 64 steps.
fn random_scenario(seed: u64) -> Scenario {
    let mut rng = Rng::new(seed);
    let mut pick = |n: u64| rng.below(n as usize) as u64;
    let (gpus, per_node) = [(4, 4), (8, 8), (16, 8), (32, 8), (12, 6), (64, 8), (16, 4)][pick(7) as usize];
    let steps = [4, 12, 24, 40, 64, 70][pick(6) as usize];
    let mut jobs = Vec::new();
    // Up to two pinned jobs in disjoint nodes' first GPUs.
    for n in 0..pick(3) as u32 {
        let first = n * per_node;
        if first + per_node <= gpus {
            let g = [1, 2, 4][pick(3) as usize].min(1 << per_node.trailing_zeros());
            let mut j = job(100 + u64::from(n), g, 1 + pick(steps as u64) as usize, 1.0 + pick(10) as f64, 0);
            j.pinned = Some((0, first));
            jobs.push(j);
        }
    }
    for id in 1..=(3 + pick(25)) {
        let g = [1, 2, 4, 8, 16][pick(5) as usize].min(gpus);
        let g = if g > per_node && g % per_node != 0 { 1 } else { g };
        jobs.push(job(id, g, 1 + pick((steps as u64 / 2).max(1)) as usize, 1.0 + pick(10) as f64, pick(steps as u64) as usize));
    }
    let services = (0..pick(3))
        .map(|i| Service {
            name: format!("s{i}"),
            demand: (0..steps).map(|_| pick(u64::from(gpus / 4).max(1) + 1) as u32).collect(),
            swap_cap: 1 + pick(3) as u32,
            weight: 10.0,
        })
        .collect();
    Scenario { gpus, gpus_per_node: per_node, steps, step_s: HOUR_S, decay: 0.97, penalty: 8.0, must_finish: true, jobs, services }
}

#[test]
fn fast_plans_validate_match_their_value_and_beat_the_single_greedy() {
    let mut co_placed = 0;
    for seed in 0..300 {
        let s = random_scenario(seed);
        let (p, value) = fast::plan_scored(&s, 1);
        let score = validate(&s, &p).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // The incremental scorer is the validator's value.
        assert!((score.value - value).abs() <= 1e-9 * value.abs().max(1.0), "seed {seed}: {} vs {value}", score.value);
        // Never worse than the single greedy order it starts from.
        let g = validate(&s, &fast::greedy(&s)).unwrap_or_else(|e| panic!("seed {seed}: greedy {e}"));
        assert!(score.value >= g.value - 1e-9, "seed {seed}: {} < greedy {}", score.value, g.value);
        // Deterministic, and the co-placement search's own plan is legal
        // and scored as the validator scores it.
        let parts = fast::parts(&s, 1);
        assert_eq!(parts.fast, p, "seed {seed}");
        if let Some(c) = &parts.co_placed {
            validate(&s, c).unwrap_or_else(|e| panic!("seed {seed}: co-placed {e}"));
            co_placed += 1;
        }
        // Pinned jobs unmoved (the validator checks it too).
        for j in s.jobs.iter().filter(|j| j.pinned.is_some()) {
            let (start, first) = j.pinned.unwrap();
            assert!(p.batch.contains(&Placed { job_id: j.id, start_step: start, first_gpu: first }));
        }
    }
    // The scenarios with services and horizons up to 64 steps ran it.
    assert!(co_placed >= 100, "the co-placement search ran on {co_placed} of 300");
}

#[test]
fn services_without_batch_jobs_are_planned() {
    // Only realtime: the co-placement search has tokens and no job to
    // move or hold back. Every demanded GPU-step is served.
    let s = scenario(16, 12, Vec::new(), vec![svc(vec![2, 3, 5, 8, 8, 6, 4, 3, 2, 2, 1, 1], 3)]);
    let p = fast::plan(&s);
    assert_eq!(validate(&s, &p).unwrap().unmet_gpu_steps, 0, "{p:?}");
    // With a pinned job beside the service, and still no job to place.
    let mut a = job(1, 8, 12, 1.0, 0);
    a.pinned = Some((0, 0));
    let s = Scenario { jobs: vec![a], ..s };
    let p = fast::plan(&s);
    assert_eq!(validate(&s, &p).unwrap().unmet_gpu_steps, 0, "{p:?}");
}

#[test]
fn a_service_moves_around_pinned_jobs_within_its_swap_cap() {
    // One node of 2 GPUs, 4 steps; pinned jobs on GPU 1 at steps 0-1 and
    // on GPU 0 at steps 2-3; a service wanting 1 GPU at every step. No GPU
    // is free all day: the service holds GPU 0, then GPU 1 (one GPU removed
    // and one added at step 2: 2 changes). A 2-GPU job never fits.
    let mut a = job(101, 1, 2, 1.0, 0);
    a.pinned = Some((0, 1));
    let mut b = job(102, 1, 2, 1.0, 0);
    b.pinned = Some((2, 0));
    let s = scenario(2, 4, vec![a, b, job(1, 2, 1, 1.0, 0)], vec![svc(vec![1; 4], 2)]);
    let p = fast::plan(&s);
    assert_eq!(validate(&s, &p).unwrap().unmet_gpu_steps, 0, "{p:?}");
    assert_eq!(p.realtime[0], vec![vec![0], vec![0], vec![1], vec![1]]);
    // With a swap cap of 1 the move is not allowed: two steps go unmet.
    let s = Scenario { services: vec![svc(vec![1; 4], 1)], ..s };
    let p = fast::plan(&s);
    assert_eq!(validate(&s, &p).unwrap().unmet_gpu_steps, 2, "{p:?}");
}

#[test]
fn the_search_finds_the_optimum_the_priority_greedy_misses() {
    // 4 GPUs, 3 steps: A (2 GPUs × 2 steps, priority 5) and B (4 GPUs × 1
    // step, priority 4). By priority, A takes steps 0-1 and B step 2:
    // 5·2·(1 + 0.95) + 4·4·0.95² = 33.94. Optimum: B at 0 (16), A at 1
    // (5·2·(0.95 + 0.95²) = 18.525): 34.525.
    let s = scenario(4, 3, vec![job(1, 2, 2, 5.0, 0), job(2, 4, 1, 4.0, 0)], vec![]);
    let greedy = validate(&s, &fast::greedy(&s)).unwrap();
    assert!((greedy.value - 33.94).abs() < 1e-9, "{}", greedy.value);
    let p = fast::plan(&s);
    let score = validate(&s, &p).unwrap();
    assert!((score.value - 34.525).abs() < 1e-9, "{}", score.value);
    assert!(p.batch.contains(&Placed { job_id: 2, start_step: 0, first_gpu: 0 }));
}

#[test]
fn best_fit_keeps_a_node_whole() {
    // 8 GPUs in two nodes of 4; GPU 7 busy (pinned) over both steps. A
    // 1-GPU job taking the lowest block (GPU 0) leaves no free 4-GPU block
    // for the 4-GPU job; next to the busy GPU it leaves node 0 whole.
    let mut pinned = job(9, 1, 2, 1.0, 0);
    pinned.pinned = Some((0, 7));
    let mut s = scenario(8, 2, vec![pinned, job(1, 1, 2, 9.0, 0), job(2, 4, 2, 5.0, 0)], vec![]);
    s.gpus_per_node = 4;
    let greedy = validate(&s, &fast::greedy(&s)).unwrap();
    let score = validate(&s, &fast::plan(&s)).unwrap();
    let all = 1.0 + 0.95;
    assert!((score.value - (1.0 + 9.0 + 4.0 * 5.0) * all).abs() < 1e-9, "{}", score.value);
    assert!((greedy.value - 10.0 * all).abs() < 1e-9, "{}", greedy.value);
}

#[test]
fn runs_past_the_horizon_and_long_horizons() {
    // 40 steps (the step masks' tail): a 30-step job arriving at 35 cannot
    // end inside the horizon, so it is not placed; a 5-step one is, at 35.
    let s = scenario(8, 40, vec![job(1, 8, 30, 2.0, 35), job(2, 8, 5, 1.0, 35)], vec![]);
    let p = fast::plan(&s);
    let score = validate(&s, &p).unwrap();
    assert_eq!(p.batch, vec![Placed { job_id: 2, start_step: 35, first_gpu: 0 }]);
    assert_eq!((score.placed, score.finished), (1, 1));
    // Without the horizon rule the long one runs from its arrival past the
    // horizon (its 5 steps inside are worth more than the short job's).
    let s = Scenario { must_finish: false, ..s };
    let p = fast::plan(&s);
    let score = validate(&s, &p).unwrap();
    assert_eq!(p.batch, vec![Placed { job_id: 1, start_step: 35, first_gpu: 0 }]);
    assert_eq!((score.placed, score.finished), (1, 0));
    // The validator refuses a run past the horizon under the rule.
    let s = Scenario { must_finish: true, ..s };
    assert!(matches!(validate(&s, &p), Err(crate::Violation::PastHorizon { job: 1, start: 35, end: 65, steps: 40 })));
    // Over 64 steps: the single greedy, still valid.
    let s = scenario(8, 80, vec![job(1, 4, 30, 2.0, 0), job(2, 8, 10, 3.0, 5)], vec![svc(vec![1; 80], 1)]);
    let p = fast::plan(&s);
    validate(&s, &p).unwrap();
    assert_eq!(p, fast::greedy(&s));
}

#[test]
fn elastic_tokens_keep_the_swap_cap_and_avoid_the_busy() {
    // Random busy masks and curves: the tokens stay off busy GPU-steps, hold
    // the curve's count at every step and change by the curve's step.
    let mut rng = Rng::new(12345);
    let mut pick = |n: u64| rng.below(n as usize) as u64;
    for _ in 0..200 {
        let (gpus, steps) = (8usize, 12usize);
        let cap = 1 + pick(3) as u32;
        let demand: Vec<u32> = (0..steps).map(|_| pick(3) as u32).collect();
        let mut r = demand.clone();
        dilate(&mut r, cap);
        let beyond = !((1u64 << steps) - 1);
        // Hard: a few pinned GPU-steps; soft: random batch.
        let hard: Vec<u64> = (0..gpus).map(|_| if pick(4) == 0 { beyond | ((1 << steps) - 1) & !(1 << pick(steps as u64)) } else { !0 }).collect();
        let soft: Vec<u64> = hard.iter().map(|&h| h & !(pick(1 << steps) & pick(1 << steps))).collect();
        let mut work = 0;
        let Some(held) = fast::elastic::place(&hard, &soft, steps, std::slice::from_ref(&r), &mut work) else { continue };
        for t in 0..steps {
            assert_eq!(held[0][t].len() as u32, r[t]);
            for &g in &held[0][t] {
                assert!(hard[g as usize] >> t & 1 == 1, "GPU {g} busy at {t}");
            }
            if t + 1 < steps {
                let (a, b) = (&held[0][t], &held[0][t + 1]);
                let swaps = a.iter().filter(|g| !b.contains(g)).count() + b.iter().filter(|g| !a.contains(g)).count();
                assert!(swaps as u32 <= cap && swaps as u32 == r[t].abs_diff(r[t + 1]));
            }
        }
    }
}

#[test]
fn an_elastic_service_beats_the_fixed_band() {
    // 4 GPUs, 2 steps; a pinned job on GPU 0 at step 0; a service of 1 GPU;
    // a 2-GPU job of priority 10 arriving at 0. The band at the top (GPU 3)
    // leaves no free aligned pair at step 0: the job waits (10·2·0.95 = 19).
    // The service on GPU 1 lets it run at once on GPUs 2-3 (20).
    let mut pinned = job(9, 1, 1, 1.0, 0);
    pinned.pinned = Some((0, 0));
    let mut s = scenario(4, 2, vec![pinned, job(1, 2, 1, 10.0, 0)], vec![svc(vec![1, 1], 2)]);
    s.gpus_per_node = 4;
    let band = validate(&s, &fast::greedy(&s)).unwrap();
    assert!((band.value - (1.0 + 19.0)).abs() < 1e-9, "{}", band.value);
    let p = fast::plan(&s);
    let score = validate(&s, &p).unwrap();
    assert!((score.value - (1.0 + 20.0)).abs() < 1e-9, "{}", score.value);
    assert_eq!(score.unmet_gpu_steps, 0);
    assert!(p.batch.contains(&Placed { job_id: 1, start_step: 0, first_gpu: 2 }));
    assert_eq!(p.realtime[0][0], vec![1]);
}

#[test]
fn fast_mode_gives_up_realtime_demand_when_a_whole_node_job_is_worth_more() {
    // One node of 8, a service wanting 1 GPU at every step (weight 1,
    // penalty 5: 5 a GPU-step unmet), an 8-GPU job of priority 2 for 4
    // steps: 2·8 = 16 a step, more than the 5 its run leaves unmet. The
    // bands and the curves as they are never free the node; the optimum
    // gives the service up for those 4 steps (swap cap 1: 1 → 0 → 1).
    let mut s = scenario(8, 8, vec![job(1, 8, 4, 2.0, 0)], vec![Service { weight: 1.0, ..svc(vec![1; 8], 1) }]);
    s.penalty = 5.0;
    let p = fast::plan(&s);
    let score = validate(&s, &p).unwrap();
    assert_eq!(p.batch.iter().map(|b| b.start_step).collect::<Vec<_>>(), vec![0], "{p:?}");
    assert_eq!(score.unmet_gpu_steps, 4);
    let greedy = validate(&s, &fast::greedy(&s)).unwrap();
    assert!(greedy.batch_value == 0.0 && score.value > greedy.value);
    // At weight 10 (50 a GPU-step unmet) the job is not worth it: it waits beyond the horizon.
    s.services[0].weight = 10.0;
    let p = fast::plan(&s);
    assert!(p.batch.is_empty(), "{p:?}");
    assert_eq!(validate(&s, &p).unwrap().unmet_gpu_steps, 0);
}

#[test]
fn generated_instances_validate_in_every_mode_and_fast_is_never_below_the_greedy() {
    use crate::generate::instances;
    for (f, seed, s) in instances(40) {
        let name = format!("{} #{seed}", f.name());
        let fast = validate(&s, &fast::plan(&s)).unwrap_or_else(|e| panic!("{name}: fast: {e}"));
        let greedy = validate(&s, &fast::greedy(&s)).unwrap_or_else(|e| panic!("{name}: greedy: {e}"));
        let parts = fast::parts(&s, 1);
        validate(&s, &parts.search).unwrap_or_else(|e| panic!("{name}: search: {e}"));
        assert_eq!(parts.fast, fast::plan(&s), "{name}: the parts' choice is fast mode's plan");
        assert_eq!(parts.greedy, fast::greedy(&s), "{name}");
        // More effort: still legal, still above the greedy, and as deterministic.
        let more = fast::plan_with_effort(&s, 3);
        assert_eq!(more, fast::plan_with_effort(&s, 3), "{name}: effort 3 not deterministic");
        let more = validate(&s, &more).unwrap_or_else(|e| panic!("{name}: fast at effort 3: {e}"));
        let fifo = validate(&s, &crate::fifo::plan(&s)).unwrap_or_else(|e| panic!("{name}: fifo: {e}"));
        let strict =
            validate(&s, &crate::fifo::plan_variant(&s, crate::fifo::Variant::Strict)).unwrap_or_else(|e| panic!("{name}: strict fifo: {e}"));
        assert!(fast.value >= greedy.value - 1e-9, "{name}: fast {} < greedy {}", fast.value, greedy.value);
        assert!(more.value >= greedy.value - 1e-9, "{name}: fast at effort 3 {} < greedy {}", more.value, greedy.value);
        // Filling holes never loses to the blocked queue on these instances' FIFO order.
        assert!(fifo.finished >= strict.finished, "{name}: fifo finished {} < strict {}", fifo.finished, strict.finished);
        // Every placed job finishes inside the horizon.
        assert_eq!(fast.placed, fast.finished, "{name}");
    }
}
