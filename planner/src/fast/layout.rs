//! What fast mode lays on the grid before the batch search: the realtime
//! services as bands at fixed offsets from an edge of the GPU range, each
//! its demand dilated to its swap cap and clipped to the GPUs left free.

use super::super::grid::{dilate, Bits};
use super::super::Scenario;

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

/// Which edge of the GPU range a realtime band grows from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    Top,
    Bottom,
}

/// One band on a cluster of `gpus`: at step `t`, the free GPUs of the
/// `curve[t]` from `offset` GPUs off `edge`, inwards, taken on `grid`.
/// Returns them per step.
fn band(grid: &mut Bits, gpus: u32, curve: &[u32], edge: Edge, offset: u32) -> Vec<Vec<u32>> {
    let mut held = Vec::with_capacity(curve.len());
    for (t, &n) in curve.iter().enumerate() {
        let span = match edge {
            Edge::Top => (gpus - offset - n)..(gpus - offset),
            Edge::Bottom => offset..(offset + n),
        };
        let free: Vec<u32> = span.filter(|&g| grid.free(t, g, 1)).collect();
        for &g in &free {
            grid.set(t, g, 1);
        }
        held.push(free);
    }
    held
}

/// Bands placed one after the other (`(service, edge)`), each at a fixed
/// offset from its edge (the peaks of the bands before it on that edge),
/// its dilated curve clipped to the contiguous free GPUs from there. Returns
/// `realtime[s][t]` in the scenario's service order.
pub(crate) fn place_layout(s: &Scenario, grid: &mut Bits, layout: &[(usize, Edge)]) -> Vec<Vec<Vec<u32>>> {
    let mut out = vec![vec![Vec::new(); s.steps]; s.services.len()];
    let (mut top_off, mut bottom_off) = (0u32, 0u32);
    for &(si, edge) in layout {
        let svc = &s.services[si];
        let mut r = svc.demand.clone();
        r.resize(s.steps, 0);
        dilate(&mut r, svc.swap_cap);
        // The contiguous free span from the band's fixed edge inwards.
        let limit: Vec<u32> = (0..s.steps)
            .map(|t| match edge {
                Edge::Top => (0..s.gpus.saturating_sub(top_off)).rev().take_while(|&g| grid.free(t, g, 1)).count() as u32,
                Edge::Bottom => (bottom_off..s.gpus).take_while(|&g| grid.free(t, g, 1)).count() as u32,
            })
            .collect();
        clip(&mut r, &limit, svc.swap_cap);
        let offset = match edge {
            Edge::Top => top_off,
            Edge::Bottom => bottom_off,
        };
        out[si] = band(grid, s.gpus, &r, edge, offset);
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
