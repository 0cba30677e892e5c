//! The baseline Dharma compared against: FIFO with realtime held at its
//! peak.
//!
//! - **Realtime at its daily peak.** Each service holds the same GPUs for
//!   the whole horizon, as many as its peak demand: the highest GPUs no
//!   running job holds at any step of the horizon and no service before it
//!   took (fewer if fewer are left). The GPUs it does not need at a step
//!   stay reserved and idle. A set that never changes never swaps.
//! - **Batch in arrival order** (then id), each at its *earliest legal fit*:
//!   the first step ≥ its arrival at which an aligned block of its size is
//!   free for its whole run, the lowest such block. Holes an earlier job
//!   left are filled by later ones (list scheduling), and the horizon rule
//!   holds ([`Scenario::must_finish`]: a job that cannot end inside the
//!   horizon waits for a later plan).
//!
//! [`Variant::Strict`] is the same without filling holes: no job starts
//! before the one that arrived before it (FIFO without backfill, as a
//! scheduler that blocks its queue on its head). It shows what filling
//! holes alone is worth; the comparisons quote [`Variant::Dharma`].

use super::grid::{pinned_bits, pinned_plan};
use super::{Placed, Plan, Scenario};

/// Which FIFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Dharma's baseline: arrival order, each job at its earliest legal fit (holes filled).
    Dharma,
    /// No job starts before the one that arrived before it (no backfill).
    Strict,
}

/// Dharma's FIFO baseline ([`Variant::Dharma`]).
pub fn plan(s: &Scenario) -> Plan {
    plan_variant(s, Variant::Dharma)
}

/// FIFO with realtime held at its peak, as `variant`.
pub fn plan_variant(s: &Scenario, variant: Variant) -> Plan {
    let mut grid = pinned_bits(s);
    let mut plan = pinned_plan(s);
    // The GPUs free of running jobs over the whole horizon, highest first.
    let mut free: Vec<u32> = (0..s.gpus).rev().filter(|&g| (0..s.steps).all(|t| grid.free(t, g, 1))).collect();
    for svc in &s.services {
        let peak = svc.demand.iter().take(s.steps).copied().max().unwrap_or(0) as usize;
        let mut held: Vec<u32> = free.drain(..peak.min(free.len())).collect();
        held.sort_unstable();
        for t in 0..s.steps {
            for &g in &held {
                grid.set(t, g, 1);
            }
        }
        plan.realtime.push(vec![held; s.steps]);
    }
    let mut order: Vec<&super::PlanJob> = s.jobs.iter().filter(|j| j.pinned.is_none()).collect();
    order.sort_by_key(|j| (j.arrival_step, j.id));
    let mut not_before = 0;
    for j in order {
        let from = if variant == Variant::Strict { not_before } else { 0 };
        if let Some((t, first)) = grid.earliest_for(s, j, from) {
            grid.set_run(first, j.gpus, t, (t + j.duration_steps).min(s.steps));
            plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
            not_before = t;
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{job, scenario, svc};
    use crate::validate;

    #[test]
    fn holes_are_filled_in_arrival_order_and_runs_end_inside_the_horizon() {
        // 8 GPUs, 6 steps. Job 1 (8 GPUs) waits for job 0's end at step 2;
        // job 2 (4 GPUs, 2 steps) arrives after 1 but fits the hole beside
        // job 0 at step 0; job 3 (8 GPUs, 3 steps) cannot end by step 6
        // once job 1 holds steps 2-4, so it is not placed.
        let s = scenario(8, 6, vec![job(0, 4, 2, 1.0, 0), job(1, 8, 3, 1.0, 0), job(2, 4, 2, 1.0, 0), job(3, 8, 3, 1.0, 1)], vec![]);
        let start = |p: &Plan, id| p.batch.iter().find(|b| b.job_id == id).map(|b| b.start_step);
        let p = plan(&s);
        validate(&s, &p).unwrap();
        assert_eq!([0, 1, 2, 3].map(|id| start(&p, id)), [Some(0), Some(2), Some(0), None]);
        // Strict: job 2 may not start before job 1 (step 2), so it waits to step 5 … and cannot end by 6.
        let p = plan_variant(&s, Variant::Strict);
        validate(&s, &p).unwrap();
        assert_eq!([0, 1, 2, 3].map(|id| start(&p, id)), [Some(0), Some(2), None, None]);
        // Without the horizon rule job 3 starts at step 5 and is cut off.
        let s = Scenario { must_finish: false, ..s };
        assert_eq!(start(&plan(&s), 3), Some(5));
    }

    #[test]
    fn realtime_holds_its_peak_on_fixed_gpus_around_running_jobs() {
        let mut s = scenario(8, 3, vec![job(0, 2, 1, 1.0, 0)], vec![svc(vec![1, 3, 2], 1)]);
        // A running job on GPUs 6-7 at step 0: the band skips them.
        s.jobs.push(crate::PlanJob { pinned: Some((0, 6)), ..job(9, 2, 1, 1.0, 0) });
        let p = plan(&s);
        let score = validate(&s, &p).unwrap();
        assert_eq!(p.realtime[0], vec![vec![3, 4, 5]; 3]);
        assert_eq!(score.unmet_gpu_steps, 0);
        assert_eq!(p.batch.iter().find(|b| b.job_id == 0).map(|b| (b.start_step, b.first_gpu)), Some((0, 0)));
    }
}
