//! Full mode's exact model: the planner itself as a block-indexed MIP, used
//! instead of the count model of [`count`](super::count) when the instance
//! is small enough ([`fits`]).
//!
//! ## Formulation
//!
//! ```text
//! max  Σ_j Σ_k Σ_t v[j,t]·x[j,k,t]  −  penalty · Σ_s Σ_t weight_s · u[s,t]
//!        v[j,t] = priority_j · g_j · Σ_{t ≤ t' < min(t + dur_j, T)} decay^t'
//!
//! s.t. Σ_k Σ_t x[j,k,t] ≤ 1                                     ∀ j          (placed at most once)
//!      Σ_{(j,k) ∋ i} run[j,k,t] + Σ_s y[s,i,t] ≤ 1               ∀ i, t       (one holder per GPU-step)
//!      Σ_i y[s,i,t] + u[s,t] ≥ d[s,t]                           ∀ s, t       (unmet demand)
//!      a[s,i,t] ≥ y[s,i,t+1] − y[s,i,t]                         ∀ s, i, t<T−1
//!      Σ_i (2·a[s,i,t] − y[s,i,t+1] + y[s,i,t]) ≤ cap_s          ∀ s, t<T−1   (swap cap)
//!
//!      run[j,k,t] = Σ_{t − dur_j < t' ≤ t} x[j,k,t']   (job j holds block k at step t)
//!      x[j,k,t], y[s,i,t] ∈ {0,1};  a[s,i,t] ≥ 0;  0 ≤ u[s,t] ≤ d[s,t]
//! ```
//!
//! - `x[j,k,t]`: batch job `j` starts at step `t` on the legal block `k` (a
//!   first GPU from the one block rule, [`firsts`]). Only starts at which
//!   the block is free of pinned jobs for the whole run exist (arrival ≤ t <
//!   T). As in the count model the binary column is the *step* form
//!   `S[j,k,t] = Σ_{t' ≤ t} x[j,k,t']` over the starts that exist (rows
//!   `S[j,k,t_{i−1}] ≤ S[j,k,t_i]`; "placed at most once" is `Σ_k S[j,k,last]
//!   ≤ 1`), so `run[j,k,t] = S[j,k,t] − S[j,k,t − dur_j]` (each at the last
//!   start that exists at or before its step) costs two nonzeros per GPU of
//!   the block instead of `dur_j`.
//! - `y[s,i,t]`: service `s` holds GPU `i` at step `t` (no column on GPUs
//!   pinned jobs hold). `a[s,i,t]` is the GPU added between `t` and `t + 1`:
//!   the GPUs changing hands are `Σ_i |y' − y| = Σ_i (2·(y' − y)⁺ − (y' − y))`,
//!   the validator's symmetric difference, so the swap row is exact (a larger
//!   `a` only makes it harder to meet).
//! - Pinned jobs are not variables: their GPU-steps have no column at all,
//!   their value is a constant added back to the bound.
//! - Capacity rows where at most one block or service can be are left out.
//!
//! ### Rows that make the LP tight (valid for every plan, so the optimum is unchanged)
//!
//! The plain model's LP spreads a service over fractions of every GPU and
//! lets a whole-node job run at 7/8 beside it (root bounds 10-40% above the
//! optimum on the shipped 8-GPU scenarios). With `R[j,t] = Σ_k run[j,k,t]`
//! (one continuous column per job and step, `= Σ_k S[j,k,t]` minus its value
//! `dur_j` steps earlier), `D_t = Σ_s d[s,t]`, `U_t = Σ_s u[s,t]`, `F_t` the
//! GPUs pinned jobs leave:
//!
//! ```text
//!      U_t ≥ (D_t − F_t + g_j) · R[j,t]                  ∀ j, t with D_t − F_t + g_j > 0
//!      Σ_{j : g_j ≥ c} (g_j / c) · R[j,t] + m[c,t] ≤ F_c[t]   ∀ c ≤ node, t   (blocks services break)
//!      c · m[c,t] ≥ Σ_s Σ_i y[s,i,t]
//!      e · m[c,t] + U_t ≥ e · q        q = ⌈D_t / c⌉, e = D_t − (q − 1)·c   (when D_t > 0)
//!      m[c,t] ∈ ℤ, 0 ≤ m ≤ F_c[t]
//! ```
//!
//! The first: a job of `g_j` GPUs running leaves the services at most
//! `F_t − g_j`. The others: services holding `n` GPUs touch `m ≥ ⌈n/c⌉`
//! aligned blocks of `c` GPUs (`c` a job size up to the node size; `F_c[t]`
//! the blocks with a GPU pinned jobs leave), which jobs of `c` GPUs or more
//! cannot use; `n ≥ D_t − U_t`, and `⌈(D − U)/c⌉ ≥ q − U/e` for every
//! integral `U` in `[0, D]`. With them the root LP bound is the optimum on
//! three of the four 8-GPU scenarios and 2% above it on training-heavy.
//!
//! Every valid plan is a feasible point of the same value and every integral
//! point decodes to a valid plan of the same value (read each job's block and
//! start, each service's GPUs), so the model's optimum is the best valid
//! plan and HiGHS's dual bound is a true bound: no decoding loss, no rounding.
//!
//! Size: `Σ_j Σ_k |starts(j,k)|` + `S·G·T` binaries, `S·G·(T − 1)`
//! continuous `a` columns; nonzeros about `2·g_j` per batch column and
//! `5` per service GPU-step. The shipped 8-GPU scenarios have 1 300-1 500
//! binaries and 10 000-11 300 nonzeros; scale-64 (64 GPUs, 30 jobs, 24
//! steps, 2 services) ~14 000 binaries and ~140 000 nonzeros, whose root LP
//! alone takes HiGHS ~9 s; 512 GPUs × 300 jobs × 48 steps would be millions.
//! [`fits`] therefore sends only models estimated at ≤ [`MAX_NONZEROS`]
//! nonzeros here (the 8-GPU scenarios: 6 600-7 700 by the estimate; scale-64: ~119 000);
//! larger ones go to the count model.
//!
//! ## Solving
//!
//! One MIP run, warm-started (`setSolution`) from the best valid plan so far
//! (the warm plan), stopping at `mip_rel_gap` or the time limit; its
//! incumbent is read back directly.

use super::super::grid::{demand, firsts, last_start, pinned_bits, pinned_plan, value};
use super::super::{Placed, Plan, Scenario};
use super::api::{FullError, FullOptions};
use super::solver::{decided, eligible, pinned_value, solve_mip};
use highs::{Col, Model, RowProblem};

/// Largest model (estimated nonzeros) sent to the exact formulation; above
/// it the count model is used. See docs/planner.md for the measurements.
pub(super) const MAX_NONZEROS: usize = 60_000;

/// Estimated nonzeros of the exact model, without building it.
pub(super) fn size(s: &Scenario) -> usize {
    let steps = s.steps;
    let mut nz = 0usize;
    for j in s.jobs.iter().filter(|j| eligible(s, j)) {
        let blocks = firsts(s.gpus, s.gpus_per_node, j.gpus).count();
        nz = nz.saturating_add(blocks.saturating_mul(steps - j.arrival_step).saturating_mul(2 * j.gpus as usize + 2));
    }
    nz.saturating_add(s.services.len().saturating_mul(s.gpus as usize).saturating_mul(steps).saturating_mul(5))
}

/// Whether the exact model is small enough to be worth solving.
pub(super) fn fits(s: &Scenario) -> bool {
    size(s) <= MAX_NONZEROS
}

/// What the exact run gave.
#[derive(Debug)]
pub(super) struct Outcome {
    /// The incumbent decoded (not yet validated).
    pub plan: Option<Plan>,
    /// Upper bound on every valid plan's value, if the solver proved one.
    pub bound: Option<f64>,
    /// Proven optimal within `mip_rel_gap`.
    pub optimal: bool,
}

/// One block a job may take: its first GPU, the starts that exist and their `S` columns.
#[derive(Debug)]
struct Slot {
    job: usize,
    first: u32,
    starts: Vec<usize>,
    cols: Vec<Col>,
}

/// The built model.
#[derive(Debug)]
struct Exact {
    problem: RowProblem,
    num_cols: usize,
    /// Per job (index, arrival): `Σ_k S[j,k,t]` per step from its arrival.
    aggregated: Vec<(usize, usize, Vec<Col>)>,
    /// `m[c,t]`: blocks of `c` GPUs the services touch at step `t`.
    touched: Vec<(u32, usize, Col)>,
    slots: Vec<Slot>,
    /// `y[s][t][i]`, `None` on pinned GPU-steps.
    y: Vec<Vec<Vec<Option<Col>>>>,
    /// `a[s][t][i]` for `t < T − 1`, where `y` exists at `t + 1`.
    a: Vec<Vec<Vec<Option<Col>>>>,
    /// `u[s][t]` where demand is positive.
    u: Vec<Vec<Option<Col>>>,
    pinned_value: f64,
}

impl Exact {
    #[allow(clippy::needless_range_loop)] // steps index several tables at once
    fn build(s: &Scenario, window: Option<&[Option<(usize, usize)>]>) -> Exact {
        let steps = s.steps;
        let ngpu = s.gpus as usize;
        let mut pb = RowProblem::default();
        let pinned = pinned_bits(s);
        let pinned_value = pinned_value(s);
        // Capacity rows per (t, GPU): terms and how many blocks/services can be there.
        let mut cap: Vec<Vec<(Col, f64)>> = vec![Vec::new(); steps * ngpu];
        let mut sources = vec![0u32; steps * ngpu];
        // Per job with services to weigh against: `Σ_k S[j,k,·]` per step as
        // one column (`started[j][t − a_j]`), for the service rows below.
        let nsvc = s.services.len();
        let mut started: Vec<(u32, usize, usize, Vec<Col>)> = Vec::new();
        let mut aggregated: Vec<(usize, usize, Vec<Col>)> = Vec::new();
        let mut touched: Vec<(u32, usize, Col)> = Vec::new();
        let mut slots = Vec::new();
        for (ji, j) in s.jobs.iter().enumerate() {
            if !eligible(s, j) || window.is_some_and(|w| w[ji].is_none()) {
                continue;
            }
            let (lo, hi) = window.and_then(|w| w[ji]).unwrap_or((0, usize::MAX));
            let g = j.gpus;
            let mut once: Vec<(Col, f64)> = Vec::new();
            let mut by_step: Vec<Vec<(Col, f64)>> = vec![Vec::new(); steps];
            for first in firsts(s.gpus, s.gpus_per_node, g) {
                let last = last_start(s, j).expect("eligible");
                let starts: Vec<usize> = (j.arrival_step.max(lo)..=last.min(hi))
                    .filter(|&t| (t..(t + j.duration_steps).min(steps)).all(|u| pinned.free(u, first, g)))
                    .collect();
                if starts.is_empty() {
                    continue;
                }
                let mut cols: Vec<Col> = Vec::with_capacity(starts.len());
                for (i, &t) in starts.iter().enumerate() {
                    let next = starts.get(i + 1).map_or(0.0, |&n| value(s, j, n));
                    let col = pb.add_integer_column(-(value(s, j, t) - next), 0..=1);
                    if let Some(&prev) = cols.last() {
                        pb.add_row(..=0, [(prev, 1.0), (col, -1.0)]);
                    }
                    cols.push(col);
                }
                once.push((*cols.last().expect("a start"), 1.0));
                // run[t] = S[on(t)] − S[off(t)]: on = last start ≤ t, off = last start ≤ t − dur.
                let last_at_or_before = |t: usize| starts.partition_point(|&x| x <= t).checked_sub(1);
                for t in starts[0]..steps {
                    let on = last_at_or_before(t);
                    let off = t.checked_sub(j.duration_steps).and_then(last_at_or_before);
                    if let Some(on) = on {
                        by_step[t].push((cols[on], -1.0));
                    }
                    let Some(on) = on.filter(|&on| Some(on) != off) else { continue };
                    for gpu in first..first + g {
                        let cell = t * ngpu + gpu as usize;
                        cap[cell].push((cols[on], 1.0));
                        if let Some(off) = off {
                            cap[cell].push((cols[off], -1.0));
                        }
                        sources[cell] += 1;
                    }
                }
                slots.push(Slot { job: ji, first, starts, cols });
            }
            if nsvc > 0 && !once.is_empty() {
                let a = j.arrival_step;
                let mut agg = Vec::with_capacity(steps - a);
                for mut row in by_step.into_iter().skip(a) {
                    let col = pb.add_column(0.0, 0..=1);
                    row.push((col, 1.0));
                    pb.add_row(0..=0, row);
                    agg.push(col);
                }
                aggregated.push((ji, a, agg.clone()));
                started.push((g, a, j.duration_steps, agg));
            }
            if once.len() > 1 {
                pb.add_row(..=1, once);
            }
        }
        // Services.
        let mut y = vec![vec![vec![None; ngpu]; steps]; nsvc];
        let mut a = vec![vec![vec![None; ngpu]; steps.saturating_sub(1)]; nsvc];
        let mut u = vec![vec![None; steps]; nsvc];
        for (si, svc) in s.services.iter().enumerate() {
            for t in 0..steps {
                let mut served: Vec<(Col, f64)> = Vec::with_capacity(ngpu + 1);
                for gpu in 0..s.gpus {
                    if pinned.get(t, gpu) {
                        continue;
                    }
                    let col = pb.add_integer_column(0.0, 0..=1);
                    y[si][t][gpu as usize] = Some(col);
                    served.push((col, 1.0));
                    let cell = t * ngpu + gpu as usize;
                    cap[cell].push((col, 1.0));
                    sources[cell] += 1;
                }
                let d = demand(s, si, t);
                if d > 0 {
                    let uc = pb.add_column(s.penalty * svc.weight, 0..=d);
                    u[si][t] = Some(uc);
                    served.push((uc, 1.0));
                    pb.add_row(f64::from(d).., served);
                }
            }
            for t in 0..steps.saturating_sub(1) {
                let mut swaps: Vec<(Col, f64)> = Vec::with_capacity(3 * ngpu);
                for gpu in 0..ngpu {
                    match (y[si][t][gpu], y[si][t + 1][gpu]) {
                        (Some(now), Some(next)) => {
                            let ac = pb.add_column(0.0, 0..=1);
                            a[si][t][gpu] = Some(ac);
                            pb.add_row(0.., [(ac, 1.0), (next, -1.0), (now, 1.0)]);
                            swaps.extend([(ac, 2.0), (next, -1.0), (now, 1.0)]);
                        }
                        // Only one side exists: the other is 0, |Δ| is the one.
                        (Some(c), None) | (None, Some(c)) => swaps.push((c, 1.0)),
                        (None, None) => {}
                    }
                }
                if !swaps.is_empty() {
                    pb.add_row(..=f64::from(svc.swap_cap), swaps);
                }
            }
        }
        // Service rows: see the module doc ("blocks services break").
        let wanted: Vec<u32> = (0..steps).map(|t| (0..nsvc).map(|si| demand(s, si, t)).sum()).collect();
        let free: Vec<u32> = (0..steps).map(|t| (0..s.gpus).filter(|&gpu| !pinned.get(t, gpu)).count() as u32).collect();
        let run = |&(_, a, dur, ref cols): &(u32, usize, usize, Vec<Col>), t: usize, coef: f64| -> Vec<(Col, f64)> {
            if t < a {
                return Vec::new();
            }
            let mut terms = vec![(cols[t - a], coef)];
            if let Some(off) = t.checked_sub(dur).filter(|&o| o >= a) {
                terms.push((cols[off - a], -coef));
            }
            terms
        };
        let unmet = |t: usize| -> Vec<(Col, f64)> { u.iter().filter_map(|us| us[t]).map(|c| (c, 1.0)).collect() };
        for t in 0..steps {
            // A job of g GPUs running leaves the services at most F_t − g.
            for job in &started {
                let short = i64::from(wanted[t]) - i64::from(free[t]) + i64::from(job.0);
                if short > 0 && t >= job.1 {
                    let mut row = unmet(t);
                    row.extend(run(job, t, -(short as f64)));
                    pb.add_row(0.., row);
                }
            }
        }
        let per_node = s.gpus_per_node.max(1);
        let mut sizes: Vec<u32> = started.iter().map(|j| j.0.min(per_node)).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if per_node.is_power_of_two() && nsvc > 0 {
            for &c in &sizes {
                let blocks: Vec<u32> = firsts(s.gpus, per_node, c).collect();
                for t in 0..steps {
                    // Blocks with a GPU pinned jobs leave: batch of ≥ c GPUs
                    // and services share them without overlap.
                    let fc = blocks.iter().filter(|&&f| (f..f + c).any(|gpu| !pinned.get(t, gpu))).count() as u32;
                    let mut fill: Vec<(Col, f64)> = Vec::new();
                    for job in started.iter().filter(|j| j.0 >= c) {
                        fill.extend(run(job, t, f64::from(job.0 / c)));
                    }
                    let held: Vec<(Col, f64)> = y.iter().flat_map(|ys| ys[t].iter().flatten().map(|&col| (col, -1.0))).collect();
                    if fill.is_empty() || held.is_empty() {
                        continue;
                    }
                    let m = pb.add_integer_column(0.0, 0..=fc);
                    touched.push((c, t, m));
                    fill.push((m, 1.0));
                    pb.add_row(..=f64::from(fc), fill);
                    let mut touch = held;
                    touch.push((m, f64::from(c)));
                    pb.add_row(0.., touch);
                    let d = wanted[t];
                    if d > 0 {
                        let q = d.div_ceil(c);
                        let e = d - (q - 1) * c;
                        let mut row = unmet(t);
                        row.push((m, f64::from(e)));
                        pb.add_row(f64::from(e * q).., row);
                    }
                }
            }
        }
        for (row, n) in cap.into_iter().zip(sources) {
            if n > 1 {
                pb.add_row(..=1, row);
            }
        }
        let num_cols = pb.num_cols();
        Exact { problem: pb, num_cols, aggregated, touched, slots, y, a, u, pinned_value }
    }

    /// A valid plan as a point of the model (the warm start); `None` if it
    /// uses a block or start the model does not have.
    fn cols_of(&self, s: &Scenario, plan: &Plan) -> Option<Vec<f64>> {
        let mut v = vec![0.0; self.num_cols];
        for (ji, p) in decided(s, plan)? {
            let slot = self.slots.iter().find(|sl| sl.job == ji && sl.first == p.first_gpu)?;
            let i = slot.starts.iter().position(|&t| t == p.start_step)?;
            for c in &slot.cols[i..] {
                v[c.index()] = 1.0;
            }
            if let Some((_, a, agg)) = self.aggregated.iter().find(|(j, _, _)| *j == ji) {
                for c in agg.iter().skip(p.start_step.saturating_sub(*a)) {
                    v[c.index()] = 1.0;
                }
            }
        }
        for (si, held) in self.y.iter().enumerate() {
            let mut on: Vec<Vec<f64>> = vec![vec![0.0; s.gpus as usize]; s.steps];
            for (t, row) in on.iter_mut().enumerate() {
                for &gpu in plan.realtime.get(si)?.get(t)? {
                    let c = (*held[t].get(gpu as usize)?)?;
                    v[c.index()] = 1.0;
                    row[gpu as usize] = 1.0;
                }
                let n = plan.realtime[si][t].len() as u32;
                if let Some(uc) = self.u[si][t] {
                    v[uc.index()] = f64::from(demand(s, si, t).saturating_sub(n));
                }
            }
            for (t, row) in self.a[si].iter().enumerate() {
                for (gpu, ac) in row.iter().enumerate() {
                    if let Some(ac) = ac {
                        v[ac.index()] = (on[t + 1][gpu] - on[t][gpu]).max(0.0);
                    }
                }
            }
        }
        for &(c, t, m) in &self.touched {
            let mut blocks: Vec<u32> = plan.realtime.iter().filter_map(|held| held.get(t)).flatten().map(|&gpu| gpu / c).collect();
            blocks.sort_unstable();
            blocks.dedup();
            v[m.index()] = blocks.len() as f64;
        }
        Some(v)
    }

    /// Read an integral point back as a plan (pinned jobs included).
    fn decode(&self, s: &Scenario, cols: &[f64]) -> Plan {
        let on = |c: Col| cols.get(c.index()).is_some_and(|&v| v > 0.5);
        let mut plan = pinned_plan(s);
        let mut placed = vec![false; s.jobs.len()];
        for slot in &self.slots {
            if placed[slot.job] {
                continue;
            }
            if let Some(i) = slot.cols.iter().position(|&c| on(c)) {
                placed[slot.job] = true;
                plan.batch.push(Placed { job_id: s.jobs[slot.job].id, start_step: slot.starts[i], first_gpu: slot.first });
            }
        }
        plan.realtime = self
            .y
            .iter()
            .map(|per_t| {
                per_t.iter().map(|row| row.iter().enumerate().filter(|(_, c)| c.is_some_and(on)).map(|(gpu, _)| gpu as u32).collect()).collect()
            })
            .collect();
        plan
    }
}

/// Estimated nonzeros of the exact model restricted to `window` (per job:
/// the range its start may take, `None`: not placed).
pub(super) fn window_size(s: &Scenario, window: &[Option<(usize, usize)>]) -> usize {
    let mut nz = 0usize;
    for (j, w) in s.jobs.iter().zip(window) {
        if let (true, Some((lo, hi))) = (eligible(s, j), w) {
            let blocks = firsts(s.gpus, s.gpus_per_node, j.gpus).count();
            nz = nz.saturating_add(blocks.saturating_mul(hi + 1 - lo).saturating_mul(2 * j.gpus as usize + 2));
        }
    }
    nz.saturating_add(s.services.len().saturating_mul(s.gpus as usize).saturating_mul(s.steps).saturating_mul(5))
}

/// The count model's decoder of last resort (`full::plan`): the exact model
/// with each job's start restricted to a window around the count
/// solution's (and the jobs it does not start left out), solved within
/// `time_s` from `warm`. Where the count solution can be laid out on GPU
/// indices at all, its value is reached; only the bound of the full exact
/// model would prove more, so the bound returned here is not one.
pub(super) fn solve_window(
    s: &Scenario,
    window: &[Option<(usize, usize)>],
    warm: Option<&Plan>,
    time_s: f64,
    opts: &FullOptions,
) -> Result<Option<Plan>, FullError> {
    let mut ex = Exact::build(s, Some(window));
    if ex.num_cols == 0 {
        return Ok(None);
    }
    let start = warm.and_then(|w| ex.cols_of(s, w));
    let model = Model::try_new(std::mem::take(&mut ex.problem)).map_err(|_| FullError::Solver("to load the windowed exact model"))?;
    let run = solve_mip(model, time_s, opts, start.as_deref())?;
    Ok(run.sol.map(|cols: Vec<f64>| ex.decode(s, &cols)))
}

/// Build and solve the exact model within `time_s`, warm-started from `warm`.
pub(super) fn solve(s: &Scenario, warm: Option<&Plan>, time_s: f64, opts: &FullOptions) -> Result<Outcome, FullError> {
    let mut ex = Exact::build(s, None);
    if ex.num_cols == 0 {
        // Nothing to decide: the pinned plan is the only one.
        return Ok(Outcome { plan: Some(ex.decode(s, &[])), bound: Some(ex.pinned_value), optimal: true });
    }
    let start = warm.and_then(|w| ex.cols_of(s, w));
    let model = Model::try_new(std::mem::take(&mut ex.problem)).map_err(|_| FullError::Solver("to load the exact model"))?;
    let run = solve_mip(model, time_s, opts, start.as_deref())?;
    let bound = run.dual.map(|d| -d + ex.pinned_value);
    let plan = run.sol.map(|cols: Vec<f64>| ex.decode(s, &cols));
    Ok(Outcome { plan, bound, optimal: run.optimal })
}
