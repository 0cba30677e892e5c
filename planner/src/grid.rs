//! The grid of GPUs × steps and the rules every planning mode shares, each
//! written once, here:
//!
//! - which blocks a batch job may take ([`firsts`]: the legal-block rule);
//! - what a placement is worth ([`value`], and [`Discounts`] for the same
//!   sum from prefix sums);
//! - the least curve within a swap cap ([`dilate`]);
//! - who holds what: per-step GPU bitsets ([`Bits`]), pinned jobs on them
//!   ([`pinned_bits`], [`pinned_plan`]), and the step masks fast mode keeps
//!   per block ([`step_bits`]).
//!
//! Fast mode, FIFO and full mode (both models) build plans from these. The
//! validator ([`validate`](crate::validate())) deliberately does not: it
//! states the block rule and the value again, on its own, as the oracle the
//! plans built here are checked against (a test below checks the two block
//! rules agree).

use super::{Placed, Plan, PlanJob, Scenario};

/// The first GPUs, ascending, of the legal blocks of `g` GPUs on a cluster
/// of `gpus`, `per_node` to a node: `g` a power of two; a block of at most a
/// node aligned to its size and inside one node; a larger one from a node
/// boundary; the whole block inside the cluster. None when `g` is 0, not a
/// power of two or more than `gpus`.
pub(crate) fn firsts(gpus: u32, per_node: u32, g: u32) -> impl Iterator<Item = u32> {
    let per_node = per_node.max(1);
    let align = if g <= per_node { g } else { per_node };
    let count = if g.is_power_of_two() && g <= gpus { (gpus - g) / align + 1 } else { 0 };
    (0..count).map(move |k| k * align).filter(move |&f| g > per_node || f / per_node == (f + g - 1) / per_node)
}

/// The last step job `j` may start at, or `None` when it may not start in
/// the horizon at all: from its arrival, up to the last step of the horizon
/// or, with [`Scenario::must_finish`], up to the last step at which its run
/// still ends inside the horizon (the horizon rule every mode builds plans
/// by; the validator states it again).
pub fn last_start(s: &Scenario, j: &PlanJob) -> Option<usize> {
    let last = if s.must_finish { s.steps.checked_sub(j.duration_steps)? } else { s.steps.checked_sub(1)? };
    (j.arrival_step <= last).then_some(last)
}

/// A batch job as Dharma's placement order ranks it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rank {
    pub priority: f64,
    pub arrival: usize,
    pub gpus: u32,
    pub id: u64,
}

/// Dharma's placement order ("priority × time decay"), first placed first:
/// priority × decay^arrival (what a GPU-step of the job is worth when it
/// arrives) highest first, then bigger blocks, earlier arrival, lower id.
/// The simple greedy places jobs in this order, and fast mode's search
/// decodes it among its seed orders.
pub(crate) fn placement_order(decay: f64, a: Rank, b: Rank) -> std::cmp::Ordering {
    let discounted = |r: Rank| r.priority * decay.powi(r.arrival.min(i32::MAX as usize) as i32);
    discounted(b).total_cmp(&discounted(a)).then(b.gpus.cmp(&a.gpus)).then(a.arrival.cmp(&b.arrival)).then(a.id.cmp(&b.id))
}

/// What job `j` started at step `t` is worth: priority × GPUs × decay^u
/// summed over the steps `u` of its run inside the horizon, one step at a
/// time (as the validator sums it).
#[cfg_attr(not(feature = "highs"), allow(dead_code))] // full mode's
pub(crate) fn value(s: &Scenario, j: &PlanJob, t: usize) -> f64 {
    let mut v = 0.0;
    for u in t..(t + j.duration_steps).min(s.steps) {
        v += j.priority * s.decay.powi(u as i32) * f64::from(j.gpus);
    }
    v
}

/// Prefix sums of the discount (`Σ_{u<t} decay^u`): [`value`] of a run in
/// constant time, for fast mode's incremental scoring. The same sum,
/// grouped differently (fast mode's test checks it matches the validator's
/// to 1e-9).
#[derive(Debug, Clone)]
pub(crate) struct Discounts(Vec<f64>);

impl Discounts {
    pub(crate) fn new(decay: f64, steps: usize) -> Discounts {
        let mut prefix = vec![0.0; steps + 1];
        for t in 0..steps {
            prefix[t + 1] = prefix[t] + decay.powi(t as i32);
        }
        Discounts(prefix)
    }

    /// The value of `gpus` GPUs at `priority` over steps `a..b` (`a ≤ b ≤ steps`).
    pub(crate) fn run(&self, priority: f64, gpus: u32, a: usize, b: usize) -> f64 {
        priority * f64::from(gpus) * (self.0[b] - self.0[a])
    }
}

/// GPUs service `svc` wants at step `t` (0 past the end of its curve).
pub(crate) fn demand(s: &Scenario, svc: usize, t: usize) -> u32 {
    s.services[svc].demand.get(t).copied().unwrap_or(0)
}

/// `v` raised to the least curve ≥ `v` changing by at most `cap` between
/// steps: `r_t = max_u (v_u − cap·|t − u|)`.
pub(crate) fn dilate(v: &mut [u32], cap: u32) {
    for t in 1..v.len() {
        v[t] = v[t].max(v[t - 1].saturating_sub(cap));
    }
    for t in (0..v.len().saturating_sub(1)).rev() {
        v[t] = v[t].max(v[t + 1].saturating_sub(cap));
    }
}

/// Bits `a..b` of a step mask (bit `t` for step `t`; horizons of at most 64
/// steps).
pub(crate) fn step_bits(a: usize, b: usize) -> u64 {
    if a >= b {
        0
    } else {
        (!0u64 >> (64 - (b - a))) << a
    }
}

/// Per-step GPU bitsets: bit `g` of row `t` set when GPU `g` is held at step `t`.
#[derive(Debug, Clone)]
pub(crate) struct Bits {
    gpus: u32,
    rows: Vec<Vec<u64>>,
}

#[cfg_attr(not(feature = "highs"), allow(dead_code))] // some only full mode uses
impl Bits {
    pub(crate) fn new(gpus: u32, steps: usize) -> Bits {
        Bits { gpus, rows: vec![vec![0; (gpus as usize).div_ceil(64)]; steps] }
    }

    pub(crate) fn steps(&self) -> usize {
        self.rows.len()
    }

    /// Row `t`: one bit a GPU.
    pub(crate) fn row(&self, t: usize) -> &[u64] {
        &self.rows[t]
    }

    /// The words and masks of GPUs `first..first + n`.
    fn masks(first: u32, n: u32) -> impl Iterator<Item = (usize, u64)> {
        let (lo, hi) = (first, first + n);
        (lo / 64..hi.div_ceil(64)).map(move |w| {
            let a = lo.max(w * 64) - w * 64;
            let b = hi.min(w * 64 + 64) - w * 64;
            let m = if b - a == 64 { u64::MAX } else { ((1u64 << (b - a)) - 1) << a };
            (w as usize, m)
        })
    }

    /// Whether GPUs `first..first + n` are all clear in `row`.
    pub(crate) fn free_in(row: &[u64], first: u32, n: u32) -> bool {
        Self::masks(first, n).all(|(w, m)| row[w] & m == 0)
    }

    /// Whether GPUs `first..first + n` are all free at step `t`.
    pub(crate) fn free(&self, t: usize, first: u32, n: u32) -> bool {
        Self::free_in(&self.rows[t], first, n)
    }

    /// How many of GPUs `first..first + n` are held at step `t`.
    pub(crate) fn count(&self, t: usize, first: u32, n: u32) -> u32 {
        Self::masks(first, n).map(|(w, m)| (self.rows[t][w] & m).count_ones()).sum()
    }

    pub(crate) fn get(&self, t: usize, gpu: u32) -> bool {
        self.rows[t][(gpu / 64) as usize] >> (gpu % 64) & 1 == 1
    }

    /// Hold GPUs `first..first + n` at step `t`.
    pub(crate) fn set(&mut self, t: usize, first: u32, n: u32) {
        for (w, m) in Self::masks(first, n) {
            self.rows[t][w] |= m;
        }
    }

    /// Release GPUs `first..first + n` at step `t`.
    pub(crate) fn clear(&mut self, t: usize, first: u32, n: u32) {
        for (w, m) in Self::masks(first, n) {
            self.rows[t][w] &= !m;
        }
    }

    /// Hold GPUs `first..first + n` over steps `from..to`.
    pub(crate) fn set_run(&mut self, first: u32, n: u32, from: usize, to: usize) {
        for t in from..to {
            self.set(t, first, n);
        }
    }

    /// The lowest legal block of `g` GPUs ([`firsts`]) free over steps
    /// `from..to` (the definition [`Bits::earliest`] is tested against).
    #[cfg(test)]
    pub(crate) fn block(&self, g: u32, per_node: u32, from: usize, to: usize) -> Option<u32> {
        firsts(self.gpus, per_node, g).find(|&first| (from..to).all(|t| self.free(t, first, g)))
    }

    /// The earliest start in `from..=last` at which a legal block of `g`
    /// GPUs is free for `dur` steps (clipped to the horizon), and the lowest
    /// such block.
    ///
    /// Block by block (lowest first), each from `from` jumping past the
    /// last busy step of the window it tried, and only to starts earlier
    /// than the best so far: the same answer as trying every start against
    /// every block, in about one pass over each block's steps.
    pub(crate) fn earliest(&self, g: u32, per_node: u32, from: usize, last: usize, dur: usize) -> Option<(usize, u32)> {
        let steps = self.steps();
        let last = last.min(steps.saturating_sub(1));
        if steps == 0 || from > last {
            return None;
        }
        let mut best: Option<(usize, u32)> = None;
        for first in firsts(self.gpus, per_node, g) {
            // A lower block already starts as early as any could.
            let limit = match best {
                Some((t, _)) if t == from => break,
                Some((t, _)) => t - 1,
                None => last,
            };
            let mut t = from;
            while t <= limit {
                match (t..(t + dur).min(steps)).rev().find(|&u| !self.free(u, first, g)) {
                    None => {
                        best = Some((t, first));
                        break;
                    }
                    Some(busy) => t = busy + 1,
                }
            }
        }
        best
    }

    /// [`Bits::earliest`] for job `j` of `s` under the horizon rule
    /// ([`last_start`]), from `from` (at least its arrival).
    pub(crate) fn earliest_for(&self, s: &Scenario, j: &PlanJob, from: usize) -> Option<(usize, u32)> {
        let last = last_start(s, j)?;
        self.earliest(j.gpus, s.gpus_per_node, from.max(j.arrival_step), last, j.duration_steps)
    }
}

/// The pinned (running) jobs' placements, in the scenario's order, and no
/// services: where every plan starts.
pub(crate) fn pinned_plan(s: &Scenario) -> Plan {
    let batch = s.jobs.iter().filter_map(|j| j.pinned.map(|(start, first)| Placed { job_id: j.id, start_step: start, first_gpu: first })).collect();
    Plan { batch, realtime: Vec::new() }
}

/// The GPUs pinned jobs hold at each step of the horizon (a block outside
/// the cluster, which the validator refuses, is left off).
pub(crate) fn pinned_bits(s: &Scenario) -> Bits {
    let mut bits = Bits::new(s.gpus, s.steps);
    for j in &s.jobs {
        if let Some((start, first)) = j.pinned {
            if first.checked_add(j.gpus).is_some_and(|e| e <= s.gpus) {
                bits.set_run(first, j.gpus, start, (start + j.duration_steps).min(s.steps));
            }
        }
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::check_block;

    /// The rule written here and the validator's own statement of it agree.
    #[test]
    fn legal_blocks_are_the_ones_the_validator_accepts() {
        for (gpus, per_node) in [(4, 4), (8, 8), (16, 8), (32, 8), (12, 6), (24, 8), (16, 4), (64, 16), (7, 8), (10, 1)] {
            for g in 0..=gpus + 1 {
                let legal: Vec<u32> = firsts(gpus, per_node, g).collect();
                let accepted: Vec<u32> = (0..gpus + 2).filter(|&f| check_block(gpus, per_node, 0, f, g).is_ok()).collect();
                assert_eq!(legal, accepted, "{gpus} GPUs, {per_node} a node, blocks of {g}");
            }
        }
    }

    /// The skipping search finds what trying every start against every
    /// block finds (the definition), on random grids.
    #[test]
    fn earliest_is_the_first_start_of_the_lowest_block() {
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..400 {
            let (gpus, per_node) = [(8, 8), (16, 8), (32, 8), (70, 8), (130, 64)][rng.below(5)];
            let steps = 1 + rng.below(70);
            let mut b = Bits::new(gpus, steps);
            for _ in 0..rng.below(3 * gpus as usize) {
                let (g, t) = (rng.below(gpus as usize) as u32, rng.below(steps));
                b.set_run(g, 1, t, (t + 1 + rng.below(8)).min(steps));
            }
            let g = 1 << rng.below(6);
            let (from, last, dur) = (rng.below(steps + 2), rng.below(steps + 2), rng.below(10));
            let definition = (from..=last.min(steps - 1)).find_map(|t| b.block(g, per_node, t, (t + dur).min(steps)).map(|first| (t, first)));
            assert_eq!(b.earliest(g, per_node, from, last, dur), definition, "{gpus}/{per_node} g{g} from {from} last {last} dur {dur}");
        }
    }

    #[test]
    fn dilation_is_the_least_curve_within_the_cap() {
        let dilated = |v: &[u32], cap| {
            let mut v = v.to_vec();
            dilate(&mut v, cap);
            v
        };
        assert_eq!(dilated(&[0, 0, 5, 0, 0], 2), vec![1, 3, 5, 3, 1]);
        assert_eq!(dilated(&[4, 4], 0), vec![4, 4]);
        assert_eq!(dilated(&[], 3), Vec::<u32>::new());
    }

    #[test]
    fn placement_order_ranks_by_discounted_priority_then_blocks_arrival_id() {
        let r = |priority, arrival, gpus, id| Rank { priority, arrival, gpus, id };
        let mut jobs = [r(8.0, 0, 1, 1), r(10.0, 9, 1, 2), r(10.0, 2, 1, 3), r(8.0, 0, 4, 4), r(8.0, 0, 4, 5)];
        jobs.sort_by(|a, b| placement_order(0.9, *a, *b));
        // 10·0.9² = 8.1 beats 8; 10·0.9⁹ ≈ 3.9 comes last.
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3, 4, 5, 1, 2]);
        // Without decay the arrival only breaks ties: earlier first.
        let mut jobs = [r(5.0, 7, 2, 1), r(5.0, 3, 2, 2), r(5.0, 3, 8, 3)];
        jobs.sort_by(|a, b| placement_order(1.0, *a, *b));
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3, 2, 1]);
    }

    #[test]
    fn bits_across_words() {
        let mut b = Bits::new(130, 2);
        b.set(1, 60, 8);
        assert!(b.free(0, 60, 8) && !b.free(1, 67, 1) && b.free(1, 68, 62));
        assert_eq!((b.count(1, 0, 130), b.get(1, 63), b.get(1, 68)), (8, true, false));
        b.clear(1, 62, 4);
        assert_eq!(b.count(1, 0, 130), 4);
        // One node of 130: blocks of 64 at 0 and 64, each busy at step 1.
        assert_eq!(b.block(64, 130, 0, 2), None);
        assert_eq!(b.block(64, 130, 0, 1), Some(0));
        assert_eq!(b.earliest(2, 130, 0, 1, 1), Some((0, 0)));
        assert_eq!(b.earliest(2, 130, 1, 1, 1), Some((1, 0)));
    }
}
