//! Fast mode: a greedy plan that is legal by construction.
//!
//! 1. Pinned (running) jobs keep their blocks.
//! 2. Each realtime service gets a band at the top of the GPU range (bands
//!    stacked at fixed offsets, so one service's changes never move
//!    another's GPUs) holding, per step, the smallest curve that covers its
//!    demand and changes by at most its swap cap between steps:
//!    `r_t = max_u (d_u − cap·|t − u|)`, clipped to what the pinned jobs
//!    leave. Unmet demand costs `penalty × weight` per GPU-step, which the
//!    shipped scenarios make dearer than any batch GPU-step, so realtime is
//!    served first.
//! 3. Batch jobs, highest priority first (then bigger blocks, then earlier
//!    arrival, then id), start at the earliest step ≥ their arrival at which
//!    an aligned block of their size is free for their whole run inside the
//!    horizon; the lowest such block is taken. A job that fits nowhere in the
//!    horizon waits for the next plan.

use super::{Placed, Plan, Scenario};

/// Per-step occupancy as bitsets.
#[derive(Debug, Clone)]
pub(crate) struct Grid {
    gpus: u32,
    bits: Vec<Vec<u64>>,
}

impl Grid {
    pub(crate) fn new(gpus: u32, steps: usize) -> Grid {
        let words = (gpus as usize).div_ceil(64);
        Grid { gpus, bits: vec![vec![0; words]; steps] }
    }
    fn steps(&self) -> usize {
        self.bits.len()
    }
    pub(crate) fn is_free(&self, t: usize, first: u32, n: u32) -> bool {
        (first..first + n).all(|g| self.bits[t][(g / 64) as usize] & (1 << (g % 64)) == 0)
    }
    pub(crate) fn take(&mut self, t: usize, first: u32, n: u32) {
        for g in first..first + n {
            self.bits[t][(g / 64) as usize] |= 1 << (g % 64);
        }
    }
    /// Lowest aligned block of `g` GPUs free over steps `from..to`.
    pub(crate) fn block(&self, g: u32, per_node: u32, from: usize, to: usize) -> Option<u32> {
        // Inside one node when it fits in one; whole nodes otherwise.
        let step = if g <= per_node { g } else { per_node }.max(1);
        (0..)
            .map(|k| k * step)
            .take_while(|&first| first + g <= self.gpus)
            .find(|&first| (from..to).all(|t| self.is_free(t, first, g)))
    }
}

/// `r_t = max_u (d_u − cap·|t − u|)`: the least curve ≥ demand whose steps
/// change by at most `cap`.
pub(crate) fn dilate(demand: &[u32], cap: u32) -> Vec<u32> {
    let n = demand.len();
    let mut r: Vec<i64> = demand.iter().map(|&d| i64::from(d)).collect();
    let c = i64::from(cap);
    for t in 1..n {
        r[t] = r[t].max(r[t - 1] - c);
    }
    for t in (0..n.saturating_sub(1)).rev() {
        r[t] = r[t].max(r[t + 1] - c);
    }
    r.into_iter().map(|x| x.max(0) as u32).collect()
}

/// Clip a curve to `limit` per step keeping steps within `cap`.
pub(crate) fn clip(r: &mut [u32], limit: &[u32], cap: u32) {
    for t in 0..r.len() {
        r[t] = r[t].min(limit[t]);
    }
    for t in 1..r.len() {
        r[t] = r[t].min(r[t - 1] + cap);
    }
    for t in (0..r.len().saturating_sub(1)).rev() {
        r[t] = r[t].min(r[t + 1] + cap);
    }
}

/// Pinned jobs first: their blocks on the grid and in the plan.
pub(crate) fn place_pinned(s: &Scenario, grid: &mut Grid, plan: &mut Plan) {
    for j in &s.jobs {
        if let Some((start, first)) = j.pinned {
            for t in start..(start + j.duration_steps).min(s.steps) {
                grid.take(t, first, j.gpus);
            }
            plan.batch.push(Placed { job_id: j.id, start_step: start, first_gpu: first });
        }
    }
}

/// Realtime bands at the top, at fixed offsets; `curves[s][t]` GPUs each.
pub(crate) fn place_bands(s: &Scenario, grid: &mut Grid, curves: &[Vec<u32>], plan: &mut Plan) {
    let mut offset = 0;
    for curve in curves {
        let peak = curve.iter().copied().max().unwrap_or(0);
        let top = s.gpus - offset;
        let mut held = Vec::with_capacity(s.steps);
        for (t, &n) in curve.iter().enumerate() {
            let gpus: Vec<u32> = (top - n..top).filter(|&g| grid.is_free(t, g, 1)).collect();
            for &g in &gpus {
                grid.take(t, g, 1);
            }
            held.push(gpus);
        }
        plan.realtime.push(held);
        offset += peak;
    }
}

/// Realtime curves: demand dilated by the swap cap, clipped to the GPUs the
/// pinned jobs and the bands above leave free.
fn curves(s: &Scenario, grid: &Grid) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut above = 0u32;
    for svc in &s.services {
        let mut demand = svc.demand.clone();
        demand.resize(s.steps, 0);
        let mut r = dilate(&demand, svc.swap_cap);
        // A band cannot reach into GPUs pinned jobs hold at the top: the
        // limit is the free span below the bands above.
        let limit: Vec<u32> = (0..s.steps)
            .map(|t| {
                let top = s.gpus.saturating_sub(above);
                (0..top).rev().take_while(|&g| grid.is_free(t, g, 1)).count() as u32
            })
            .collect();
        clip(&mut r, &limit, svc.swap_cap);
        above += r.iter().copied().max().unwrap_or(0);
        out.push(r);
    }
    out
}

/// The fast plan.
pub fn plan(s: &Scenario) -> Plan {
    let mut grid = Grid::new(s.gpus, s.steps);
    let mut plan = Plan::default();
    place_pinned(s, &mut grid, &mut plan);
    let curves = curves(s, &grid);
    place_bands(s, &mut grid, &curves, &mut plan);
    let mut order: Vec<&super::PlanJob> = s.jobs.iter().filter(|j| j.pinned.is_none()).collect();
    order.sort_by(|a, b| {
        b.priority.total_cmp(&a.priority).then(b.gpus.cmp(&a.gpus)).then(a.arrival_step.cmp(&b.arrival_step)).then(a.id.cmp(&b.id))
    });
    for j in order {
        for t in j.arrival_step..s.steps {
            let end = (t + j.duration_steps).min(grid.steps());
            if let Some(first) = grid.block(j.gpus, s.gpus_per_node, t, end) {
                for u in t..end {
                    grid.take(u, first, j.gpus);
                }
                plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
                break;
            }
        }
    }
    plan
}
