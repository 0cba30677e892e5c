//! The baseline Dharma compared against: FIFO with realtime held at its
//! peak. Each service holds a band of its peak demand for the whole horizon
//! (the GPUs it does not need stay reserved and idle); batch jobs start in
//! arrival order, each no earlier than the one before it (no backfill), at
//! the earliest step a legal block is free.

use super::fast::layout::{band, Edge};
use super::grid::{pinned_bits, pinned_plan};
use super::{Placed, Plan, Scenario};

pub fn plan(s: &Scenario) -> Plan {
    let mut grid = pinned_bits(s);
    let mut plan = pinned_plan(s);
    let curves: Vec<Vec<u32>> = s
        .services
        .iter()
        .map(|svc| {
            let peak = svc.demand.iter().copied().max().unwrap_or(0);
            let free_top = (0..s.steps).map(|t| (0..s.gpus).rev().take_while(|&g| grid.free(t, g, 1)).count() as u32).min().unwrap_or(0);
            vec![peak.min(free_top); s.steps]
        })
        .collect();
    // The bands at the top, one below the other.
    let mut offset = 0;
    for curve in &curves {
        plan.realtime.push(band(&mut grid, s.gpus, curve, Edge::Top, offset));
        offset += curve.iter().copied().max().unwrap_or(0);
    }
    let mut order: Vec<&super::PlanJob> = s.jobs.iter().filter(|j| j.pinned.is_none()).collect();
    order.sort_by_key(|j| (j.arrival_step, j.id));
    let mut not_before = 0;
    for j in order {
        if let Some((t, first)) = grid.earliest(j.gpus, s.gpus_per_node, j.arrival_step.max(not_before), j.duration_steps) {
            grid.set_run(first, j.gpus, t, (t + j.duration_steps).min(s.steps));
            plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
            not_before = t;
        }
    }
    plan
}
