//! Full mode's count model: a relaxation of the planner that counts GPUs
//! instead of placing them, built here and solved through
//! [`solver`](super::solver); [`decode`](super::decode) turns its solutions
//! into GPU indices.
//!
//! ## Formulation
//!
//! ```text
//! max  Σ_j Σ_t v[j,t]·x[j,t]  −  penalty · Σ_s Σ_t weight_s · u[s,t]
//!        v[j,t] = priority_j · g_j · Σ_{t ≤ t' < min(t + dur_j, T)} decay^t'
//!
//! s.t. Σ_t x[j,t] ≤ 1                                             ∀ j        (placed at most once)
//!      Σ_j g_j · run[j,t] + Σ_s h[s,t] ≤ G − pinned[t]             ∀ t        (capacity)
//!      Σ_{j : g_j ≥ c} (g_j / c) · run[j,t] ≤ F_c[t]               ∀ c, t     (aligned blocks pinned jobs leave)
//!      h[s,t] + u[s,t] ≥ d[s,t]                                    ∀ s, t     (unmet demand)
//!      −cap_s ≤ h[s,t+1] − h[s,t] ≤ cap_s                          ∀ s, t<T−1 (swap cap on counts)
//!
//!      run[j,t] = Σ_{t − dur_j < t' ≤ t} x[j,t']   (job j holds g_j GPUs at step t)
//!      x[j,t] ∈ {0,1} (arrival_j ≤ t < T);  h[s,t] ∈ ℤ, 0 ≤ h ≤ H_s;  0 ≤ u[s,t] ≤ d[s,t]
//! ```
//!
//! - `x[j,t]`: batch job `j` starts at step `t`; a job at 0 everywhere waits
//!   beyond the horizon. It is written in *step* form: the binary column is
//!   `S[j,t] = Σ_{t' ≤ t} x[j,t']` ("started by t", rows `S[j,t−1] ≤ S[j,t]`,
//!   and `S ≤ 1` is "placed at most once"), so `run[j,t] = S[j,t] −
//!   S[j,t−dur_j]` costs two nonzeros per capacity row instead of `dur_j`
//!   (the same LP relaxation, a third of the nonzeros, and branching on
//!   "started by t" splits the time axis). `S[j,t]` costs `v[j,t] − v[j,t+1]`.
//! - Pinned jobs are not variables: their GPUs are `pinned[t]`, their value a
//!   constant added back to the bound.
//! - `h[s,t]`: GPUs service `s` holds at step `t`. It may exceed the demand
//!   (idle GPUs held so that a coming peak, or a sharp drop, stays within the
//!   swap cap); `u[s,t] ≥ d[s,t] − h[s,t]` is the unmet demand. `H_s` is the
//!   service's peak demand (or the warm plan's peak holding, if higher).
//! - `F_c[t]`: how many disjoint legal blocks of `c` GPUs (for each job size
//!   `c` present) pinned jobs leave whole at step `t`; written only where it
//!   is tighter than the capacity row (pinned jobs fragment the grid) and when
//!   the node size is a power of two.
//!
//! Size: `Σ_j (T − arrival_j)` binaries + `2·S·T` service columns (`S`
//! services); `Σ_j (T − arrival_j − 1) + T + S·(2T − 1)` rows, plus the
//! fragmentation rows. On random instances (see `full_bench`): ~500 columns
//! and rows, ~2 000 nonzeros for 64 GPUs, 30 jobs, 24 steps, 2 services;
//! ~9 500 columns, ~9 400 rows, ~42 000 nonzeros for 512 GPUs, 300 jobs,
//! 48 steps, 4 services.
//!
//! This is a *count* model, not the block-indexed one (`x[j,k,t]` on aligned
//! block `k`: millions of binaries at 512 GPUs × 48 steps × 300 jobs). It is a
//! relaxation of the real problem: every valid plan maps to a feasible point
//! (`x` from its starts, `h` from the number of GPUs held, `|Δh| ≤` GPUs
//! changing hands) of the same objective, so the solver's dual bound bounds
//! the best valid plan and the reported gap is honest. Step by step it is
//! tight (power-of-two blocks on power-of-two nodes always pack, first-fit
//! decreasing); it loses through fragmentation across steps and the churn of
//! GPUs between batch and services, which decoding has to absorb.

use super::super::grid::{demand, dilate, firsts, last_start, pinned_bits, value, Bits};
use super::super::{Plan, Scenario};
use super::solver::{decided, eligible, pinned_value};
use highs::{Col, RowProblem};

/// A row's (column, coefficient) terms.
type Terms = Vec<(Col, f64)>;

/// The built model and what its columns mean.
#[derive(Debug)]
pub(super) struct Mip {
    pub(super) problem: RowProblem,
    pub(super) num_cols: usize,
    /// Per job (index into `s.jobs`): its arrival and its `S` column per step from it.
    pub(super) x: Vec<Option<(usize, Vec<Col>)>>,
    /// `h[s][t]`, `u[s][t]`.
    pub(super) h: Vec<Vec<Col>>,
    pub(super) u: Vec<Vec<Col>>,
    /// Upper bound of `h[s][·]`.
    peak: Vec<u32>,
    pub(super) pinned: Bits,
    pinned_busy: Vec<u32>,
    pub(super) pinned_value: f64,
    /// Jobs that can run at all (not pinned, fit the cluster, arrive in the horizon, worth something).
    pub(super) eligible: Vec<bool>,
}

impl Mip {
    /// The model (`warm` only raises the services' count bounds to what it holds).
    pub(super) fn build(s: &Scenario, warm: Option<&Plan>) -> Mip {
        let steps = s.steps;
        let mut pb = RowProblem::default();
        let pinned = pinned_bits(s);
        let pinned_value = pinned_value(s);
        let mut pinned_busy = vec![0u32; steps];
        for j in &s.jobs {
            if let Some((start, _)) = j.pinned {
                let end = (start + j.duration_steps).min(steps);
                for busy in pinned_busy.iter_mut().take(end).skip(start) {
                    *busy = busy.saturating_add(j.gpus);
                }
            }
        }
        let mut cap_rows: Vec<Terms> = vec![Vec::new(); steps];
        let mut sizes: Vec<u32> = Vec::new();
        let mut x = Vec::with_capacity(s.jobs.len());
        let mut eligibles = vec![false; s.jobs.len()];
        for (ji, j) in s.jobs.iter().enumerate() {
            let eligible = eligible(s, j);
            eligibles[ji] = eligible;
            if !eligible {
                x.push(None);
                continue;
            }
            let g = j.gpus;
            if !sizes.contains(&g) {
                sizes.push(g);
            }
            // S[j,t] = "started by t": monotone, its step up is the start.
            let a = j.arrival_step;
            let last = last_start(s, j).expect("eligible");
            let mut cols: Vec<Col> = Vec::with_capacity(last + 1 - a);
            for t in a..=last {
                let gain = value(s, j, t) - if t < last { value(s, j, t + 1) } else { 0.0 };
                let col = pb.add_integer_column(-gain, 0..=1);
                if let Some(&prev) = cols.last() {
                    pb.add_row(..=0, [(prev, 1.0), (col, -1.0)]);
                }
                cols.push(col);
            }
            for (t, row) in cap_rows.iter_mut().enumerate().skip(a) {
                row.extend(running(a, &cols, j.duration_steps, t, f64::from(g)));
            }
            x.push(Some((a, cols)));
        }
        // Σ_{g_j ≥ c} (g_j / c)·run[j,t] per job size c.
        let mut frag: Vec<(u32, Vec<Terms>)> = Vec::new();
        if s.gpus_per_node.max(1).is_power_of_two() {
            for &c in &sizes {
                let mut rows: Vec<Terms> = vec![Vec::new(); steps];
                for (ji, j) in s.jobs.iter().enumerate() {
                    let Some((a, cols)) = &x[ji] else { continue };
                    if j.gpus < c {
                        continue;
                    }
                    for (t, row) in rows.iter_mut().enumerate().skip(*a) {
                        row.extend(running(*a, cols, j.duration_steps, t, f64::from(j.gpus / c)));
                    }
                }
                frag.push((c, rows));
            }
        }

        // Services.
        let mut h = Vec::with_capacity(s.services.len());
        let mut u = Vec::with_capacity(s.services.len());
        let mut peaks = Vec::with_capacity(s.services.len());
        for (si, svc) in s.services.iter().enumerate() {
            let mut peak = (0..steps).map(|t| demand(s, si, t)).max().unwrap_or(0);
            if let Some(held) = warm.and_then(|w| w.realtime.get(si)) {
                peak = peak.max(held.iter().map(|g| g.len() as u32).max().unwrap_or(0));
            }
            let peak = peak.min(s.gpus);
            let mut hs = Vec::with_capacity(steps);
            let mut us = Vec::with_capacity(steps);
            for (t, row) in cap_rows.iter_mut().enumerate() {
                let hc = pb.add_integer_column(0.0, 0..=peak);
                let uc = pb.add_column(s.penalty * svc.weight, 0..=demand(s, si, t));
                row.push((hc, 1.0));
                hs.push(hc);
                us.push(uc);
            }
            for t in 0..steps {
                pb.add_row(f64::from(demand(s, si, t)).., [(hs[t], 1.0), (us[t], 1.0)]);
            }
            let cap = f64::from(svc.swap_cap);
            for t in 0..steps.saturating_sub(1) {
                pb.add_row(-cap..=cap, [(hs[t + 1], 1.0), (hs[t], -1.0)]);
            }
            h.push(hs);
            u.push(us);
            peaks.push(peak);
        }
        for t in 0..steps {
            if !cap_rows[t].is_empty() {
                pb.add_row(..=f64::from(s.gpus) - f64::from(pinned_busy[t]), &cap_rows[t]);
            }
        }
        for (c, rows) in &frag {
            for (t, row) in rows.iter().enumerate() {
                let blocks = whole_blocks(s, &pinned, t, *c);
                let free = s.gpus.saturating_sub(pinned_busy[t]);
                if !row.is_empty() && u64::from(blocks) * u64::from(*c) < u64::from(free) {
                    pb.add_row(..=f64::from(blocks), row);
                }
            }
        }
        let num_cols = pb.num_cols();
        Mip { problem: pb, num_cols, x, h, u, peak: peaks, pinned, pinned_busy, pinned_value, eligible: eligibles }
    }

    /// Each job's start in an integral solution (`None`: not started).
    pub(super) fn starts(&self, cols: &[f64]) -> Vec<Option<usize>> {
        self.x
            .iter()
            .map(|x| x.as_ref().and_then(|(a, xs)| xs.iter().position(|c| cols.get(c.index()).is_some_and(|&v| v > 0.5)).map(|k| a + k)))
            .collect()
    }

    /// A valid plan as a point of the model (a warm start).
    pub(super) fn cols_of(&self, s: &Scenario, plan: &Plan) -> Option<Vec<f64>> {
        let mut v = vec![0.0; self.num_cols];
        for (ji, p) in decided(s, plan)? {
            let (a, cols) = self.x[ji].as_ref()?;
            for c in cols.get(p.start_step.checked_sub(*a)?..)? {
                v[c.index()] = 1.0;
            }
        }
        for (si, (hs, us)) in self.h.iter().zip(&self.u).enumerate() {
            for t in 0..s.steps {
                let n = plan.realtime.get(si)?.get(t)?.len() as u32;
                if n > self.peak[si] {
                    return None;
                }
                v[hs[t].index()] = f64::from(n);
                v[us[t].index()] = f64::from(demand(s, si, t).saturating_sub(n));
            }
        }
        Some(v)
    }

    /// Whether an LP solution is already integral.
    pub(super) fn integral(&self, cols: &[f64]) -> bool {
        let near = |v: f64| (v - v.round()).abs() <= 1e-6;
        self.x.iter().flatten().all(|(_, xs)| xs.iter().all(|c| near(cols[c.index()]))) && self.h.iter().flatten().all(|c| near(cols[c.index()]))
    }

    /// Round an LP solution to an integral point of the count model: service
    /// counts rounded and dilated to their cap; then jobs by LP mass (then
    /// value), each at its likeliest start (by LP weight) where the counts
    /// still fit.
    pub(super) fn round(&self, s: &Scenario, lp: &[f64]) -> Vec<f64> {
        let steps = s.steps;
        let mut v = vec![0.0; self.num_cols];
        let mut free: Vec<i64> = (0..steps).map(|t| i64::from(s.gpus) - i64::from(self.pinned_busy[t])).collect();
        for (si, (hs, us)) in self.h.iter().zip(&self.u).enumerate() {
            let mut n: Vec<u32> = hs.iter().map(|c| lp[c.index()].round().clamp(0.0, f64::from(self.peak[si])) as u32).collect();
            for (t, n) in n.iter_mut().enumerate() {
                *n = (*n).min(demand(s, si, t));
            }
            dilate(&mut n, s.services[si].swap_cap);
            for t in 0..steps {
                v[hs[t].index()] = f64::from(n[t]);
                v[us[t].index()] = f64::from(demand(s, si, t).saturating_sub(n[t]));
                free[t] -= i64::from(n[t]);
            }
        }
        let mass = |xs: &[Col]| xs.last().map_or(0.0, |c| lp[c.index()]);
        let mut order: Vec<usize> = (0..s.jobs.len()).filter(|&ji| self.x[ji].as_ref().is_some_and(|(_, xs)| mass(xs) > 1e-6)).collect();
        order.sort_by(|&a, &b| {
            let (xa, xb) = (&self.x[a].as_ref().map(|(_, xs)| mass(xs)), &self.x[b].as_ref().map(|(_, xs)| mass(xs)));
            xb.partial_cmp(xa).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b))
        });
        for ji in order {
            let Some((a, xs)) = &self.x[ji] else { continue };
            let j = &s.jobs[ji];
            let mut starts: Vec<(f64, usize)> = xs
                .iter()
                .enumerate()
                .map(|(k, c)| (lp[c.index()] - if k > 0 { lp[xs[k - 1].index()] } else { 0.0 }, a + k))
                .filter(|&(w, _)| w > 1e-6)
                .collect();
            starts.sort_by(|p, q| q.0.partial_cmp(&p.0).unwrap_or(std::cmp::Ordering::Equal).then(p.1.cmp(&q.1)));
            let g = i64::from(j.gpus);
            if let Some(&(_, t)) = starts.iter().find(|&&(_, t)| (t..(t + j.duration_steps).min(steps)).all(|u| free[u] >= g)) {
                for f in free.iter_mut().take((t + j.duration_steps).min(steps)).skip(t) {
                    *f -= g;
                }
                for c in &xs[t - a..] {
                    v[c.index()] = 1.0;
                }
            }
        }
        v
    }
}

/// `coef · run[j,t] = coef · (S[j,t] − S[j,t−dur])` for a job whose
/// `S` columns start at step `a` (`t ≥ a`) and end at its last start
/// (`S` stays at its last column's value after it; the two terms cancel
/// once both are there, and are left out).
fn running(a: usize, cols: &[Col], dur: usize, t: usize, coef: f64) -> impl Iterator<Item = (Col, f64)> + '_ {
    let at = |u: usize| (u - a).min(cols.len() - 1);
    let off = t.checked_sub(dur).filter(|&u| u >= a).map(at);
    let on = Some(at(t)).filter(|&k| Some(k) != off);
    on.map(|k| (cols[k], coef)).into_iter().chain(off.filter(|_| on.is_some()).map(|k| (cols[k], -coef)))
}

/// Disjoint legal blocks of `c` GPUs free of pinned jobs at step `t`.
fn whole_blocks(s: &Scenario, pinned: &Bits, t: usize, c: u32) -> u32 {
    let per_node = s.gpus_per_node.max(1);
    if c <= per_node {
        return firsts(s.gpus, per_node, c).filter(|&f| pinned.free(t, f, c)).count() as u32;
    }
    // Whole nodes: runs of free GPUs from a node boundary.
    let mut blocks = 0;
    let mut gpu = 0;
    while gpu < s.gpus {
        if pinned.get(t, gpu) {
            gpu += 1;
            continue;
        }
        let start = gpu;
        while gpu < s.gpus && !pinned.get(t, gpu) {
            gpu += 1;
        }
        let from = start.div_ceil(per_node) * per_node;
        if gpu > from {
            blocks += (gpu - from) / c;
        }
    }
    blocks
}
