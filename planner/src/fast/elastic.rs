//! Elastic realtime placement. A service's curve `r` (the least one within
//! its swap cap covering its demand) is a set of *tokens*: one GPU held
//! from a step where the curve goes up (or step 0) to a step where it goes
//! down (or the horizon's end). Any pairing of those starts with later ends
//! gives the curve's counts, and a token held on one GPU for its whole
//! length changes hands only at its two ends, so the GPUs added + removed
//! between two steps are exactly the curve's change there, within the cap:
//! legal by construction wherever the tokens go.
//!
//! Where they go is guided by a batch plan decoded with the services kept
//! only as counts (the batch decoder leaving `r_t` GPUs free at step `t`):
//! each token, in order of its start, takes the end and the GPU over which
//! it collides least with that plan's batch jobs (then the GPU whose free
//! window fits it tightest), never where a pinned job or another token is.
//! The batch jobs are then decoded again around the services so placed.

use super::super::grid::step_bits;

/// First step ≥ `t` at which `m` (bit per step, set = free) is not set.
fn run_end(m: u64, t: usize, steps: usize) -> usize {
    let busy = !m >> t;
    if busy == 0 {
        steps
    } else {
        (t + busy.trailing_zeros() as usize).min(steps)
    }
}

/// Tokens of every service (in order): `hard[g]` bit `t` set when GPU `g`
/// may hold a service at step `t` (no pinned job), `soft[g]` when the
/// guiding batch plan leaves it free. Returns `realtime[s][t]` (sorted
/// GPUs), or `None` when some token finds no GPU free of pinned jobs and
/// earlier tokens over any end it may take. `work` counts GPUs examined.
pub(crate) fn place(hard: &[u64], soft: &[u64], steps: usize, curves: &[Vec<u32>], work: &mut u64) -> Option<Vec<Vec<Vec<u32>>>> {
    let gpus = hard.len();
    let (mut hard, mut soft) = (hard.to_vec(), soft.to_vec());
    let mut out = Vec::with_capacity(curves.len());
    for r in curves {
        let mut held = vec![Vec::new(); steps];
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        for t in 0..steps {
            let before = if t == 0 { 0 } else { r[t - 1] };
            starts.extend(std::iter::repeat_n(t, r[t].saturating_sub(before) as usize));
            ends.extend(std::iter::repeat_n(t, before.saturating_sub(r[t]) as usize));
        }
        ends.extend(std::iter::repeat_n(steps, r.last().copied().unwrap_or(0) as usize));
        // Both ascending; starts.len() == ends.len().
        for (i, &a) in starts.iter().enumerate() {
            let rest = &starts[i + 1..];
            // The ends `a` may take: later than `a`, leaving a pairing of
            // the remaining starts (the k-th start before the k-th end).
            let mut best: Option<((u32, usize, usize), usize, usize)> = None;
            let mut last = usize::MAX;
            for (k, &e) in ends.iter().enumerate() {
                if e <= a || e == last {
                    continue;
                }
                last = e;
                let ok = rest.iter().enumerate().all(|(q, &s)| s < ends[if q < k { q } else { q + 1 }]);
                if !ok {
                    continue;
                }
                let w = step_bits(a, e);
                *work += gpus as u64;
                for g in (0..gpus).rev() {
                    if hard[g] & w != w {
                        continue;
                    }
                    let clash = (!soft[g] & w).count_ones();
                    let waste = if clash == 0 { run_end(soft[g], a, steps) - e } else { 0 };
                    let key = (clash, waste, gpus - g);
                    if best.is_none_or(|b| key < b.0) {
                        best = Some((key, k, g));
                    }
                }
            }
            let (_, k, g) = best?;
            let e = ends.remove(k);
            let w = step_bits(a, e);
            hard[g] &= !w;
            soft[g] &= !w;
            for at in &mut held[a..e] {
                at.push(g as u32);
            }
        }
        for at in &mut held {
            at.sort_unstable();
        }
        out.push(held);
    }
    Some(out)
}
