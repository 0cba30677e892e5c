//! Fast mode: a bounded search over greedy plans, each legal by
//! construction.
//!
//! 1. Pinned (running) jobs keep their blocks.
//! 2. Each realtime service gets a band holding, per step, the smallest
//!    curve that covers its demand and changes by at most its swap cap
//!    between steps: `r_t = max_u (d_u − cap·|t − u|)`, clipped to the
//!    contiguous GPUs the pinned jobs and the bands placed before leave.
//!    Bands sit at fixed offsets from an edge of the GPU range (so one
//!    service's changes never move another's GPUs). Unmet demand costs
//!    `penalty × weight` per GPU-step, which the shipped scenarios make
//!    dearer than any batch GPU-step, so realtime is served first. Up to
//!    three layouts are tried: all bands stacked at the top in the given
//!    order (below each other's peaks), the same in reverse order, and
//!    bands alternating between the top and the bottom edge.
//!    Then, with its own budget (80% of the bands' work, at most 1.5M
//!    units), *elastic* layouts (`fast/elastic.rs`): batch decoded with the
//!    services kept only as per-step counts (a short search of its own);
//!    the services' curves cut into tokens (one GPU from a rise of the
//!    curve to a fall), each token put on the GPU and end that collide
//!    least with that batch plan, so the services move around the batch
//!    blocks within their swap caps by construction; then batch decoded
//!    and improved again around them. The best plan of either kind wins,
//!    so the bands' plan is a floor.
//! 3. Batch jobs are decoded from an *order*: each in turn starts at the
//!    earliest step ≥ its arrival at which an aligned block of its size is
//!    free for its whole run inside the horizon; among the blocks free at
//!    that step a *block rule* picks one (lowest, highest, best fit by
//!    buddy — the block whose neighbours inside its node are busiest over
//!    the run — or best fit in time — the block whose free window around
//!    the run is shortest). A job that fits nowhere waits for the next plan.
//! 4. Passes: several orders (priority then bigger blocks — the old single
//!    greedy, decoded first, so fast mode is never worse than it —;
//!    decay-discounted priority; whole-run value; bigger blocks first;
//!    earliest arrival; shorter first) × the block rules × the layouts; the
//!    best by value is kept. Then a bounded improvement loop on the best
//!    order: squeaky wheel (a job that started late or not at all moves
//!    earlier in the order, alone or with all the late ones) and small
//!    swaps, accepting plans that are not worse, keeping the best.
//!
//! The value of a decoded plan is computed incrementally with the same
//! definition as [`validate()`](super::validate()) (priority × decay^t per GPU-step minus
//! penalty × weight per unmet realtime GPU-step; a test checks they agree).
//! Occupancy is one `u64` step mask per aligned block of every size, so a
//! block's earliest free run is a few shifts. The improvement loop resumes
//! decoding at a saved state before the first changed position. The work
//! is counted (a candidate block examined is one unit, a job decoded four),
//! never timed, so the result is deterministic: 60 times the single
//! greedy's work, at least 45,000 units (small instances: hundreds of
//! decodes) and at most 4,000,000 (1024 GPUs / 1,000 jobs: about a dozen),
//! two thirds for the seeded passes. `cargo bench -p tally-allocator
//! --bench plan`: 0.70 ms at 64 GPUs / 30 jobs / 24 steps, 28 ms at 1024 /
//! 1,000 / 48 (with one service each). Horizons longer than 64 steps fall back to the single
//! greedy order.

pub(crate) mod elastic;
mod pack;

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
    /// Lowest aligned block of `g` GPUs free over steps `from..to` (inside
    /// one node when it fits in one, whole nodes from a node boundary
    /// otherwise).
    pub(crate) fn block(&self, g: u32, per_node: u32, from: usize, to: usize) -> Option<u32> {
        let per_node = per_node.max(1);
        let step = if g <= per_node { g } else { per_node }.max(1);
        (0..)
            .map(|k| k * step)
            .take_while(|&first| first + g <= self.gpus)
            .filter(|&first| g > per_node || first / per_node == (first + g - 1) / per_node)
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

/// Which edge of the GPU range a realtime band grows from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    Top,
    Bottom,
}

/// Bands placed one after the other (`(service, edge)`), each at a fixed
/// offset from its edge (the peaks of the bands before it on that edge),
/// its dilated curve clipped to the contiguous free GPUs from there. Returns
/// `realtime[s][t]` in the scenario's service order.
pub(crate) fn place_layout(s: &Scenario, grid: &mut Grid, layout: &[(usize, Edge)]) -> Vec<Vec<Vec<u32>>> {
    let mut out = vec![vec![Vec::new(); s.steps]; s.services.len()];
    let (mut top_off, mut bottom_off) = (0u32, 0u32);
    for &(si, edge) in layout {
        let svc = &s.services[si];
        let mut demand = svc.demand.clone();
        demand.resize(s.steps, 0);
        let mut r = dilate(&demand, svc.swap_cap);
        // The contiguous free span from the band's fixed edge inwards.
        let limit: Vec<u32> = (0..s.steps)
            .map(|t| match edge {
                Edge::Top => (0..s.gpus.saturating_sub(top_off)).rev().take_while(|&g| grid.is_free(t, g, 1)).count() as u32,
                Edge::Bottom => (bottom_off..s.gpus).take_while(|&g| grid.is_free(t, g, 1)).count() as u32,
            })
            .collect();
        clip(&mut r, &limit, svc.swap_cap);
        for (t, &n) in r.iter().enumerate() {
            let span = match edge {
                Edge::Top => (s.gpus - top_off - n)..(s.gpus - top_off),
                Edge::Bottom => bottom_off..(bottom_off + n),
            };
            let gpus: Vec<u32> = span.filter(|&g| grid.is_free(t, g, 1)).collect();
            for &g in &gpus {
                grid.take(t, g, 1);
            }
            out[si][t] = gpus;
        }
        let peak = r.iter().copied().max().unwrap_or(0);
        match edge {
            Edge::Top => top_off += peak,
            Edge::Bottom => bottom_off += peak,
        }
    }
    out
}

/// The band layouts fast mode tries (the first is the historical one).
pub(crate) fn layouts(n: usize) -> Vec<Vec<(usize, Edge)>> {
    let mut out = vec![(0..n).map(|i| (i, Edge::Top)).collect::<Vec<_>>()];
    if n >= 2 {
        out.push((0..n).rev().map(|i| (i, Edge::Top)).collect());
        out.push((0..n).map(|i| (i, if i % 2 == 0 { Edge::Top } else { Edge::Bottom })).collect());
    }
    out
}

/// The single greedy plan (fast mode before the search, and its fallback
/// for horizons over 64 steps): bands stacked at the top, batch jobs by
/// priority (then bigger blocks, earlier arrival, id) at the earliest step,
/// lowest block.
pub(crate) fn greedy(s: &Scenario) -> Plan {
    let mut grid = Grid::new(s.gpus, s.steps);
    let mut plan = Plan::default();
    place_pinned(s, &mut grid, &mut plan);
    plan.realtime = place_layout(s, &mut grid, &layouts(s.services.len())[0]);
    let mut order: Vec<&super::PlanJob> = s.jobs.iter().filter(|j| j.pinned.is_none()).collect();
    order.sort_by(|a, b| {
        b.priority.total_cmp(&a.priority).then(b.gpus.cmp(&a.gpus)).then(a.arrival_step.cmp(&b.arrival_step)).then(a.id.cmp(&b.id))
    });
    for j in order {
        if j.gpus == 0 || !j.gpus.is_power_of_two() {
            continue;
        }
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

/// The fast plan.
pub fn plan(s: &Scenario) -> Plan {
    plan_scored(s).0
}

/// The fast plan and its value (equal to `validate(s, &plan).value`).
pub(crate) fn plan_scored(s: &Scenario) -> (Plan, f64) {
    pack::search(s, pack::Budget::default())
}

