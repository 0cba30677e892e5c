//! Planner tests: every plan passes the independent validator; tiny
//! instances with a hand-known optimum; pinned jobs stay; the penalty
//! protects realtime demand; the swap cap holds.

use super::*;

fn job(id: u64, gpus: u32, dur: usize, priority: f64, arrival: usize) -> PlanJob {
    PlanJob { id, gpus, duration_steps: dur, priority, arrival_step: arrival, pinned: None }
}

fn scenario(gpus: u32, steps: usize, jobs: Vec<PlanJob>, services: Vec<Service>) -> Scenario {
    Scenario { gpus, gpus_per_node: 8.min(gpus), steps, step_s: 3600, decay: 0.95, penalty: 8.0, jobs, services }
}

fn svc(demand: Vec<u32>, cap: u32) -> Service {
    Service { name: "chat".into(), demand, swap_cap: cap, weight: 10.0 }
}

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

#[test]
fn dilation_is_the_least_curve_within_the_cap() {
    assert_eq!(fast::dilate(&[0, 0, 5, 0, 0], 2), vec![1, 3, 5, 3, 1]);
    assert_eq!(fast::dilate(&[4, 4], 0), vec![4, 4]);
    assert_eq!(fast::dilate(&[], 3), Vec::<u32>::new());
}
