//! The independent checker: every plan, from any mode, is validated and
//! scored here, against the scenario alone. It shares no code with the
//! modes that build plans (not even `grid`): the block rule and the value
//! are stated again here, on purpose, so that it stays an oracle for them.

use super::{Plan, Scenario};
use std::collections::BTreeSet;
use thiserror::Error;

/// A broken constraint.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Violation {
    #[error("job {0} is placed twice")]
    Twice(u64),
    #[error("job {0} is not in the scenario")]
    Unknown(u64),
    #[error("job {job}: {gpus} GPUs is not a power of two")]
    NotPowerOfTwo { job: u64, gpus: u32 },
    #[error("job {job}: block at GPU {first} is not aligned to its size {gpus} (or straddles nodes)")]
    Unaligned { job: u64, first: u32, gpus: u32 },
    #[error("job {job}: block {first}..{end} is outside the cluster")]
    Outside { job: u64, first: u32, end: u32 },
    #[error("job {job} starts at step {start}, before its arrival at {arrival}")]
    BeforeArrival { job: u64, start: usize, arrival: usize },
    #[error("job {job} runs steps {start}..{end}, past the horizon's {steps} steps (must_finish: a job runs only if it ends inside the horizon)")]
    PastHorizon { job: u64, start: usize, end: usize, steps: usize },
    #[error("pinned job {0} was moved")]
    PinnedMoved(u64),
    #[error("pinned job {0} was dropped")]
    PinnedDropped(u64),
    #[error("GPU {gpu} used twice at step {step}")]
    Overlap { gpu: u32, step: usize },
    #[error("service {service}: {swaps} GPUs change hands between steps {step} and {next}, cap {cap}")]
    Swaps { service: String, step: usize, next: usize, swaps: u32, cap: u32 },
    #[error("service {service} has {got} steps, the horizon {want}")]
    Horizon { service: String, got: usize, want: usize },
    #[error("plan has {got} services, the scenario {want}")]
    Services { got: usize, want: usize },
}

/// The figures of a valid plan.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Score {
    /// Σ priority × decay^t × GPUs over batch GPU-steps − penalty × Σ weight × unmet.
    pub value: f64,
    pub batch_value: f64,
    pub unmet_gpu_steps: u64,
    /// Weighted unmet × penalty (the cost part of `value`).
    pub unmet_cost: f64,
    pub batch_gpu_steps: u64,
    pub realtime_gpu_steps: u64,
    /// (batch + served realtime GPU-steps) ÷ (GPUs × steps).
    pub utilisation: f64,
    /// Per step: GPUs busy (batch + realtime).
    pub busy: Vec<u32>,
    /// Jobs placed inside the horizon (running ones included).
    pub placed: usize,
    /// Jobs whose run ends inside the horizon (running ones included).
    pub finished: usize,
    /// Free GPUs per step that no block of the smallest waiting job's size
    /// could use (fragmentation), summed over steps.
    pub fragmented_gpu_steps: u64,
}

/// Whether job `job`'s block of `g` GPUs may start at GPU `first` of a
/// cluster of `gpus`, `per_node` to a node: `g` a power of two, the block
/// aligned to its size inside one node when it fits in one, to a node
/// boundary otherwise, and inside the cluster. Every plan is checked against
/// it here, and a scenario's running jobs when it is loaded.
///
/// Deliberately a second statement of the rule the planning modes build
/// blocks from (`grid::firsts`), not a call to it: the validator is the
/// oracle for those modes, so a mistake in the rule they share must not
/// pass here too. A test in `grid` checks the two accept the same blocks.
pub fn check_block(gpus: u32, per_node: u32, job: u64, first: u32, g: u32) -> Result<(), Violation> {
    if !g.is_power_of_two() {
        return Err(Violation::NotPowerOfTwo { job, gpus: g });
    }
    let per_node = per_node.max(1);
    let align = if g <= per_node { g } else { per_node };
    let last = u64::from(first) + u64::from(g) - 1;
    if first % align != 0 || (g <= per_node && u64::from(first / per_node) != last / u64::from(per_node)) {
        return Err(Violation::Unaligned { job, first, gpus: g });
    }
    if last >= u64::from(gpus) {
        return Err(Violation::Outside { job, first, end: first.saturating_add(g) });
    }
    Ok(())
}

/// Check every constraint and score the plan.
pub fn validate(s: &Scenario, plan: &Plan) -> Result<Score, Violation> {
    let steps = s.steps;
    let mut used: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); steps];
    let mut seen = BTreeSet::new();
    let mut score = Score { busy: vec![0; steps], ..Score::default() };
    for p in &plan.batch {
        if !seen.insert(p.job_id) {
            return Err(Violation::Twice(p.job_id));
        }
        let job = s.jobs.iter().find(|j| j.id == p.job_id).ok_or(Violation::Unknown(p.job_id))?;
        let g = job.gpus;
        check_block(s.gpus, s.gpus_per_node, job.id, p.first_gpu, g)?;
        match job.pinned {
            Some((start, first)) if (start, first) != (p.start_step, p.first_gpu) => return Err(Violation::PinnedMoved(job.id)),
            None if p.start_step < job.arrival_step => {
                return Err(Violation::BeforeArrival { job: job.id, start: p.start_step, arrival: job.arrival_step })
            }
            // The horizon rule, stated again: a run that is not already
            // going ends inside the horizon.
            None if s.must_finish && p.start_step.saturating_add(job.duration_steps) > steps => {
                return Err(Violation::PastHorizon { job: job.id, start: p.start_step, end: p.start_step.saturating_add(job.duration_steps), steps })
            }
            _ => {}
        }
        let end = (p.start_step + job.duration_steps).min(steps);
        for (t, at_t) in used.iter_mut().enumerate().take(end).skip(p.start_step) {
            for gpu in p.first_gpu..p.first_gpu + g {
                if !at_t.insert(gpu) {
                    return Err(Violation::Overlap { gpu, step: t });
                }
            }
            score.batch_gpu_steps += u64::from(g);
            score.busy[t] += g;
            score.batch_value += job.priority * s.decay.powi(t as i32) * f64::from(g);
        }
        if p.start_step < steps {
            score.placed += 1;
        }
        if p.start_step.saturating_add(job.duration_steps) <= steps {
            score.finished += 1;
        }
    }
    for j in s.jobs.iter().filter(|j| j.pinned.is_some()) {
        if !seen.contains(&j.id) {
            return Err(Violation::PinnedDropped(j.id));
        }
    }
    if plan.realtime.len() != s.services.len() {
        return Err(Violation::Services { got: plan.realtime.len(), want: s.services.len() });
    }
    for (svc, held) in s.services.iter().zip(&plan.realtime) {
        if held.len() != steps {
            return Err(Violation::Horizon { service: svc.name.clone(), got: held.len(), want: steps });
        }
        for t in 0..steps {
            for &gpu in &held[t] {
                if gpu >= s.gpus {
                    return Err(Violation::Outside { job: 0, first: gpu, end: gpu + 1 });
                }
                if !used[t].insert(gpu) {
                    return Err(Violation::Overlap { gpu, step: t });
                }
            }
            let n = held[t].len() as u32;
            score.busy[t] += n;
            let served = n.min(svc.demand.get(t).copied().unwrap_or(0));
            score.realtime_gpu_steps += u64::from(served);
            let unmet = svc.demand.get(t).copied().unwrap_or(0).saturating_sub(n);
            score.unmet_gpu_steps += u64::from(unmet);
            score.unmet_cost += s.penalty * svc.weight * f64::from(unmet);
            if t + 1 < steps {
                let (a, b): (BTreeSet<u32>, BTreeSet<u32>) = (held[t].iter().copied().collect(), held[t + 1].iter().copied().collect());
                let swaps = a.symmetric_difference(&b).count() as u32;
                if swaps > svc.swap_cap {
                    return Err(Violation::Swaps { service: svc.name.clone(), step: t, next: t + 1, swaps, cap: svc.swap_cap });
                }
            }
        }
    }
    score.value = score.batch_value - score.unmet_cost;
    let capacity = (u64::from(s.gpus) * steps as u64).max(1) as f64;
    score.utilisation = (score.batch_gpu_steps + score.realtime_gpu_steps) as f64 / capacity;
    // Fragmentation: free GPUs that cannot hold the smallest unplaced job's block.
    let waiting: Vec<u32> = s.jobs.iter().filter(|j| !seen.contains(&j.id)).map(|j| j.gpus).collect();
    if let Some(&g) = waiting.iter().min() {
        for at_t in &used {
            let free = s.gpus - at_t.len() as u32;
            let blocks = (0..s.gpus / g.max(1)).filter(|b| (b * g..(b + 1) * g).all(|x| !at_t.contains(&x))).count() as u32;
            score.fragmented_gpu_steps += u64::from(free.saturating_sub(blocks * g));
        }
    }
    Ok(score)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Placed, PlanJob};

    #[test]
    fn a_block_at_the_top_of_u32_is_outside_not_an_overflow() {
        let s = Scenario {
            gpus: 16,
            gpus_per_node: 8,
            steps: 2,
            step_s: crate::time::HOUR_S,
            decay: 1.0,
            penalty: 8.0,
            must_finish: true,
            jobs: vec![PlanJob { id: 1, gpus: 4, duration_steps: 1, priority: 1.0, arrival_step: 0, pinned: None }],
            services: vec![],
        };
        let at = |first_gpu: u32| Plan { batch: vec![Placed { job_id: 1, start_step: 0, first_gpu }], realtime: vec![] };
        let first = u32::MAX - 3;
        assert_eq!(validate(&s, &at(first)), Err(Violation::Outside { job: 1, first, end: u32::MAX }));
        assert_eq!(validate(&s, &at(16)), Err(Violation::Outside { job: 1, first: 16, end: 20 }));
        assert_eq!(validate(&s, &at(6)), Err(Violation::Unaligned { job: 1, first: 6, gpus: 4 }));
        assert!(validate(&s, &at(12)).is_ok());
        // Larger than a node: node boundaries.
        assert_eq!(check_block(32, 8, 2, 8, 16), Ok(()));
        assert_eq!(check_block(32, 8, 2, 4, 16), Err(Violation::Unaligned { job: 2, first: 4, gpus: 16 }));
        assert_eq!(check_block(32, 8, 2, 24, 16), Err(Violation::Outside { job: 2, first: 24, end: 40 }));
        assert_eq!(check_block(32, 8, 2, 0, 12), Err(Violation::NotPowerOfTwo { job: 2, gpus: 12 }));
    }
}
