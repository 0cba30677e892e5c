//! The baseline Dharma compared against: FIFO with realtime held at its
//! peak. Each service holds a band of its peak demand for the whole horizon
//! (the GPUs it does not need stay reserved and idle); batch jobs start in
//! arrival order, each no earlier than the one before it (no backfill), at
//! the earliest step an aligned block is free.

use super::fast::{place_bands, place_pinned, Grid};
use super::{Placed, Plan, Scenario};

pub fn plan(s: &Scenario) -> Plan {
    let mut grid = Grid::new(s.gpus, s.steps);
    let mut plan = Plan::default();
    place_pinned(s, &mut grid, &mut plan);
    let curves: Vec<Vec<u32>> = s
        .services
        .iter()
        .map(|svc| {
            let peak = svc.demand.iter().copied().max().unwrap_or(0);
            let free_top = (0..s.steps).map(|t| (0..s.gpus).rev().take_while(|&g| grid.is_free(t, g, 1)).count() as u32).min().unwrap_or(0);
            vec![peak.min(free_top); s.steps]
        })
        .collect();
    place_bands(s, &mut grid, &curves, &mut plan);
    let mut order: Vec<&super::PlanJob> = s.jobs.iter().filter(|j| j.pinned.is_none()).collect();
    order.sort_by_key(|j| (j.arrival_step, j.id));
    let mut not_before = 0;
    for j in order {
        for t in j.arrival_step.max(not_before)..s.steps {
            let end = (t + j.duration_steps).min(s.steps);
            if let Some(first) = grid.block(j.gpus, s.gpus_per_node, t, end) {
                for u in t..end {
                    grid.take(u, first, j.gpus);
                }
                plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
                not_before = t;
                break;
            }
        }
    }
    plan
}
