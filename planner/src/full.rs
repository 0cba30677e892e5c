//! Full mode: the planner as a mixed-integer programme solved by HiGHS
//! (feature `highs`), warm-started from the fast plan, decoded into GPU
//! indices and checked by [`validate`](super::validate()).
//!
//! Small instances (the exact model estimated at ≤ `exact::MAX_NONZEROS`
//! nonzeros: the shipped 8-GPU scenarios) are solved with the block-indexed
//! model of `exact.rs` instead, whose optimum is the best valid plan and
//! whose bound is true; everything below is the count model used otherwise.
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
//!
//! ## Solving (HiGHS, presolve off: it costs more than it saves here)
//!
//! 1. The LP relaxation (`solve_relaxation`): its value is a bound; it is
//!    rounded (jobs by LP mass, each at its likeliest start that still fits
//!    the counts; service counts rounded and dilated to the cap) and decoded.
//!    An integral LP optimum ends the search ([`FullStatus::Optimal`]).
//! 2. With the time left, the MIP, warm-started (`setSolution`) from the best
//!    valid plan so far (the warm plan or the rounded LP), stopping at
//!    `mip_rel_gap` or the time limit; its incumbent is decoded.
//!
//! Small instances (64 GPUs, 30 jobs) are solved to optimality in tens of
//! milliseconds. At 512 GPUs × 300 jobs × 48 steps one second only buys the
//! LP and its rounding (the MIP does not get past its root); the MIP needs
//! ~10 s to close the count model to a few per cent.
//!
//! Every decoded plan and the warm plan go through [`validate`]; the best is
//! returned, so full mode is never worse than its warm start. `objective` is
//! its validated score, `bound` the tightest of the LP and MIP dual bounds
//! (+ pinned value); `status` is [`FullStatus::Optimal`] when the solver
//! proved its count model optimal (within `mip_rel_gap`) — the gap may still
//! show what decoding lost.
//!
//! ## Decoding (counts → GPU indices)
//!
//! Service targets are the least curve ≥ `min(d, h)` within the cap (never
//! above `h`: idle holdings only where the cap needs them).
//!
//! 1. Batch jobs at the solver's starts (jobs the hint plan — the best so
//!    far — had at the same start first, on its blocks), each on the legal
//!    block free over its run that reuses most GPUs batch held at `t − 1`
//!    (so services keep theirs), then best fits (fullest node), then lowest
//!    (or highest, for blocks of a node or less, in one style).
//! 2. Services, step by step: each keeps the GPUs it held that batch leaves
//!    it, drops down to its target those batch wants soonest, and adds the
//!    GPUs batch leaves alone longest, as far as its swap cap allows (served
//!    demand is reduced, never the cap broken). A batch job starting at `t`
//!    that takes a service's GPUs beyond what the cap lets it replace moves to
//!    the block losing least, and stays where services lose demand only if it
//!    is worth more than that demand (estimated until the service catches
//!    up); otherwise it waits for the fill pass. (In the other style services
//!    go first, on the highest GPUs pinned jobs leave, and batch around them.)
//! 3. A fill pass places every job left over (highest priority first) at its
//!    most valuable start where an aligned block is free of batch and services.
//!
//! Eight styles (services or batch first × start or size order × small
//! blocks low or high) are decoded, then the best again with the jobs it
//! missed placed first while that helps ("squeaky wheel"): a decoding takes
//! about 2 ms at 512 GPUs.

use super::{validate, Placed, Plan, PlanJob, Scenario, Score, Violation};
use highs::{Col, HighsModelStatus, HighsSolutionStatus, Model, RowProblem, SolvedModel};
use std::time::Instant;
use thiserror::Error;

/// Solver limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FullOptions {
    /// Wall-clock budget of the whole call (model building and decoding included), > 0.
    pub time_limit_s: f64,
    /// HiGHS `mip_rel_gap`: stop once the incumbent is this close to the bound, in [0, 1).
    pub mip_rel_gap: f64,
    /// Which formulation.
    pub formulation: Formulation,
}

impl Default for FullOptions {
    fn default() -> Self {
        FullOptions { time_limit_s: 1.0, mip_rel_gap: 0.01, formulation: Formulation::Auto }
    }
}

/// The MIP full mode solves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Formulation {
    /// The exact model when it is small (estimated ≤ 60 000 nonzeros), else the count model.
    #[default]
    Auto,
    /// The exact (block-indexed) model whatever its size: slow beyond 8 GPUs, for proofs.
    Exact,
    /// The count model (a relaxation, decoded).
    Count,
}

/// A full-mode plan with the solver's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct FullResult {
    /// Passes [`validate`].
    pub plan: Plan,
    /// The plan's validated score value.
    pub objective: f64,
    /// Upper bound on any valid plan's value (the solver's dual bound plus
    /// the pinned jobs' value); +∞ if the solver proved none in time.
    pub bound: f64,
    /// `(bound − objective) / max(|bound|, 1e-9)`, ≥ 0 (+∞ without a bound).
    pub gap: f64,
    pub status: FullStatus,
    /// The model the bound comes from: [`Formulation::Exact`] or [`Formulation::Count`].
    pub model: Formulation,
}

/// How the solver stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullStatus {
    /// The count model was solved to optimality (within `mip_rel_gap`).
    Optimal,
    /// Stopped by the time (or iteration) limit with a feasible incumbent.
    TimeLimit,
}

/// Why there is no full-mode plan (the caller falls back to fast mode).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum FullError {
    #[error("time limit must be a positive number of seconds, got {0}")]
    TimeLimit(f64),
    #[error("relative MIP gap must be in [0, 1), got {0}")]
    Gap(f64),
    #[error("HiGHS failed {0}")]
    Solver(&'static str),
    #[error("HiGHS refused option {0}")]
    Option(&'static str),
    #[error("HiGHS found the model infeasible (pinned jobs overfill the cluster?)")]
    Infeasible,
    #[error("HiGHS stopped ({0}) without a solution")]
    NoSolution(String),
    #[error("no valid plan: {0}")]
    Invalid(Violation),
}

/// Time left for the MIP below which it is not started (it would not get past its root).
const MIN_MIP_S: f64 = 0.05;

/// Plan the scenario with HiGHS, warm-started from `warm` (normally the fast
/// plan; an invalid one is ignored). Every returned plan passes [`validate`].
pub fn plan(s: &Scenario, warm: &Plan, opts: &FullOptions) -> Result<FullResult, FullError> {
    let began = Instant::now();
    if !(opts.time_limit_s.is_finite() && opts.time_limit_s > 0.0) {
        return Err(FullError::TimeLimit(opts.time_limit_s));
    }
    if !(opts.mip_rel_gap >= 0.0 && opts.mip_rel_gap < 1.0) {
        return Err(FullError::Gap(opts.mip_rel_gap));
    }
    let left = || opts.time_limit_s - began.elapsed().as_secs_f64();
    let mut best = Best::default();
    let warm = validate(s, warm).ok().map(|score| {
        best.offer(Ok((warm.clone(), score)));
        warm
    });
    // Small instances: the exact model (its optimum is the best valid plan).
    let exact = match opts.formulation {
        Formulation::Auto => super::exact::fits(s),
        Formulation::Exact => true,
        Formulation::Count => false,
    };
    if exact {
        match super::exact::solve(s, best.plan(), left(), opts) {
            Ok(out) => {
                if let Some(p) = out.plan {
                    best.offer(check(s, p));
                }
                if best.plan().is_some() {
                    let status = if out.optimal { FullStatus::Optimal } else { FullStatus::TimeLimit };
                    return best.finish(status, out.bound.unwrap_or(f64::INFINITY), Formulation::Exact);
                }
            }
            Err(FullError::Infeasible) => return Err(FullError::Infeasible),
            // Otherwise the count model below, with the time left.
            Err(_) => {}
        }
    }
    let mut mip = Mip::build(s, warm);
    let mut status = FullStatus::TimeLimit;
    let mut bound = f64::INFINITY;
    let mut solved_any = false;

    if mip.num_cols == 0 {
        // Nothing to decide (no job can start, no service): the pinned plan.
        best.offer(check(s, mip.decode(s, &[], None, &Style::default()).0));
        return best.finish(FullStatus::Optimal, mip.pinned_value, Formulation::Count);
    }
    let mut model = Model::try_new(std::mem::take(&mut mip.problem)).map_err(|_| FullError::Solver("to load the model"))?;
    set(&mut model, "time_limit", left().max(MIN_MIP_S))?;
    set(&mut model, "mip_rel_gap", opts.mip_rel_gap)?;
    // Presolve costs more than it saves on these models within a second.
    set(&mut model, "presolve", "off")?;
    // 1. The LP relaxation, rounded.
    set(&mut model, "solve_relaxation", true)?;
    let lp = model.try_solve().map_err(|_| FullError::Solver("to solve the LP relaxation"))?;
    let mut lp_cols = None;
    // Time the MIP leaves for decoding its incumbent: what decoding the LP took.
    let mut reserve = 0.0;
    match lp.status() {
        HighsModelStatus::Optimal => {
            let cols = lp.get_solution().columns().to_vec();
            bound = -lp.objective_value() + mip.pinned_value;
            let rounded = mip.round(s, &cols);
            let hint = best.plan().cloned();
            let decoding = Instant::now();
            mip.decode_into(s, &rounded, hint.as_ref(), &mut best, decode_until(began, opts));
            reserve = decoding.elapsed().as_secs_f64();
            solved_any = true;
            lp_cols = Some(cols);
        }
        HighsModelStatus::Infeasible => return Err(FullError::Infeasible),
        HighsModelStatus::ReachedTimeLimit | HighsModelStatus::ReachedIterationLimit => {}
        other => return Err(FullError::NoSolution(format!("{other:?}"))),
    }
    if lp_cols.as_ref().is_some_and(|cols| mip.integral(cols)) {
        // The LP optimum is integral: it is the count model's optimum.
        status = FullStatus::Optimal;
    } else if left() - reserve > MIN_MIP_S {
        // 2. The MIP from the best plan so far, with the time left.
        let model = Model::from(lp);
        let start = best.plan().and_then(|p| mip.cols_of(s, p));
        let MipRun { sol, optimal, dual } = solve_mip(model, left() - reserve, opts, start.as_deref())?;
        if optimal {
            status = FullStatus::Optimal;
        }
        if let Some(dual) = dual {
            bound = bound.min(-dual + mip.pinned_value);
        }
        if let Some(sol) = sol {
            let hint = best.plan().cloned();
            mip.decode_into(s, &sol, hint.as_ref(), &mut best, decode_until(began, opts));
            solved_any = true;
        }
    }
    if !solved_any {
        return Err(FullError::NoSolution("time limit".into()));
    }
    best.finish(status, bound, Formulation::Count)
}

/// What a MIP run gave.
#[derive(Debug)]
pub(super) struct MipRun {
    /// The incumbent's columns, if any.
    pub(super) sol: Option<Vec<f64>>,
    /// Proven optimal (within `mip_rel_gap`).
    pub(super) optimal: bool,
    /// The dual bound (of the minimisation), if finite.
    pub(super) dual: Option<f64>,
}

/// Solve a MIP within `time_s` from an optional start (the count model's
/// and the exact model's).
pub(super) fn solve_mip(mut model: Model, time_s: f64, opts: &FullOptions, start: Option<&[f64]>) -> Result<MipRun, FullError> {
    set(&mut model, "solve_relaxation", false)?;
    set(&mut model, "time_limit", time_s.max(MIN_MIP_S))?;
    set(&mut model, "mip_rel_gap", opts.mip_rel_gap)?;
    if let Some(start) = start {
        // A start HiGHS finds infeasible is dropped by it; not fatal.
        let _ = model.try_set_solution(Some(start), None, None, None);
    }
    let solved = model.try_solve().map_err(|_| FullError::Solver("to solve the MIP"))?;
    let incumbent = has_solution(&solved);
    let optimal = match solved.status() {
        HighsModelStatus::Optimal => incumbent,
        HighsModelStatus::ReachedTimeLimit | HighsModelStatus::ReachedIterationLimit => false,
        HighsModelStatus::Infeasible => return Err(FullError::Infeasible),
        other => return Err(FullError::NoSolution(format!("{other:?}"))),
    };
    let dual = solved.double_info_value(c"mip_dual_bound").ok().filter(|b| b.is_finite());
    let sol = incumbent.then(|| solved.get_solution().columns().to_vec());
    Ok(MipRun { sol, optimal, dual })
}

pub(super) fn set<V: highs::HighsOptionValue>(model: &mut Model, name: &'static str, value: V) -> Result<(), FullError> {
    model.try_set_option(name, value).map_err(|_| FullError::Option(name))
}

pub(super) fn has_solution(m: &SolvedModel) -> bool {
    m.int_info_value(c"primal_solution_status").ok() == Some(HighsSolutionStatus::Feasible as i64)
}

fn check(s: &Scenario, plan: Plan) -> Result<(Plan, Score), Violation> {
    validate(s, &plan).map(|score| (plan, score))
}

/// The best valid plan seen, or the last violation.
#[derive(Debug, Default)]
struct Best {
    plan: Option<(Plan, Score)>,
    violation: Option<Violation>,
}

impl Best {
    fn offer(&mut self, candidate: Result<(Plan, Score), Violation>) {
        match candidate {
            Ok((p, sc)) => {
                if self.plan.as_ref().is_none_or(|(_, b)| sc.value > b.value) {
                    self.plan = Some((p, sc));
                }
            }
            Err(v) => self.violation = Some(v),
        }
    }
    fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref().map(|(p, _)| p)
    }
    fn finish(self, status: FullStatus, bound: f64, model: Formulation) -> Result<FullResult, FullError> {
        let Some((plan, score)) = self.plan else {
            return Err(self.violation.map_or(FullError::NoSolution("no plan decoded".into()), FullError::Invalid));
        };
        let objective = score.value;
        let gap = if bound.is_finite() { ((bound - objective) / bound.abs().max(1e-9)).max(0.0) } else { f64::INFINITY };
        Ok(FullResult { plan, objective, bound, gap, status, model })
    }
}

/// How [`Mip::decode`] breaks ties.
#[derive(Debug, Clone, Default)]
struct Style {
    /// Services take their GPUs before batch (highest first), else batch first and services around it.
    services_first: bool,
    /// Batch by size (biggest first) before start step, else by start step.
    size_first: bool,
    /// Blocks of one node or less from the highest GPUs, else from the lowest.
    small_high: bool,
    /// Jobs placed before all others, in this order.
    urgent: Vec<usize>,
}

/// Decoding may use up to the time limit (it takes milliseconds per try).
fn decode_until(began: Instant, opts: &FullOptions) -> Instant {
    began + std::time::Duration::from_secs_f64(opts.time_limit_s.min(1e6))
}

/// Value of job `j` started at `t`, summed exactly as [`validate`] does.
pub(super) fn value(s: &Scenario, j: &PlanJob, t: usize) -> f64 {
    let mut v = 0.0;
    for u in t..(t + j.duration_steps).min(s.steps) {
        v += j.priority * s.decay.powi(u as i32) * f64::from(j.gpus);
    }
    v
}

pub(super) fn demand(s: &Scenario, svc: usize, t: usize) -> u32 {
    s.services[svc].demand.get(t).copied().unwrap_or(0)
}

/// Legal first GPUs of a block of `g` (the validator's rule).
pub(super) fn firsts(s: &Scenario, g: u32) -> Vec<u32> {
    let per_node = s.gpus_per_node.max(1);
    if g == 0 || !g.is_power_of_two() || g > s.gpus {
        return Vec::new();
    }
    let align = if g <= per_node { g } else { per_node };
    (0..=(s.gpus - g) / align)
        .map(|k| k * align)
        .filter(|&f| g > per_node || f / per_node == (f + g - 1) / per_node)
        .collect()
}

/// Per-step GPU bitsets.
#[derive(Debug, Clone)]
pub(super) struct Bits {
    rows: Vec<Vec<u64>>,
}

impl Bits {
    pub(super) fn new(gpus: u32, steps: usize) -> Bits {
        Bits { rows: vec![vec![0; (gpus as usize).div_ceil(64)]; steps] }
    }
    fn masks(first: u32, n: u32) -> impl Iterator<Item = (usize, u64)> {
        let (lo, hi) = (first, first + n);
        (lo / 64..hi.div_ceil(64)).map(move |w| {
            let a = lo.max(w * 64) - w * 64;
            let b = hi.min(w * 64 + 64) - w * 64;
            let m = if b - a == 64 { u64::MAX } else { ((1u64 << (b - a)) - 1) << a };
            (w as usize, m)
        })
    }
    fn free_in(row: &[u64], first: u32, n: u32) -> bool {
        Self::masks(first, n).all(|(w, m)| row[w] & m == 0)
    }
    fn count_in(row: &[u64], first: u32, n: u32) -> u32 {
        Self::masks(first, n).map(|(w, m)| (row[w] & m).count_ones()).sum()
    }
    pub(super) fn free(&self, t: usize, first: u32, n: u32) -> bool {
        Self::free_in(&self.rows[t], first, n)
    }
    pub(super) fn get(&self, t: usize, gpu: u32) -> bool {
        self.rows[t][(gpu / 64) as usize] >> (gpu % 64) & 1 == 1
    }
    pub(super) fn set(&mut self, t: usize, first: u32, n: u32) {
        for (w, m) in Self::masks(first, n) {
            self.rows[t][w] |= m;
        }
    }
}

/// The least curve ≥ `v` changing by at most `cap` per step.
fn dilate(v: &mut [u32], cap: u32) {
    for t in 1..v.len() {
        v[t] = v[t].max(v[t - 1].saturating_sub(cap));
    }
    for t in (0..v.len().saturating_sub(1)).rev() {
        v[t] = v[t].max(v[t + 1].saturating_sub(cap));
    }
}

/// A row's (column, coefficient) terms.
type Terms = Vec<(Col, f64)>;

/// The built model and what its columns mean.
#[derive(Debug)]
struct Mip {
    problem: RowProblem,
    num_cols: usize,
    /// Per job (index into `s.jobs`): its arrival and its `S` column per step from it.
    x: Vec<Option<(usize, Vec<Col>)>>,
    /// `h[s][t]`, `u[s][t]`.
    h: Vec<Vec<Col>>,
    u: Vec<Vec<Col>>,
    /// Upper bound of `h[s][·]`.
    peak: Vec<u32>,
    pinned: Bits,
    pinned_busy: Vec<u32>,
    pinned_value: f64,
    /// Jobs that can run at all (not pinned, fit the cluster, arrive in the horizon, worth something).
    eligible: Vec<bool>,
}

impl Mip {
    /// The model (`warm` only raises the services' count bounds to what it holds).
    fn build(s: &Scenario, warm: Option<&Plan>) -> Mip {
        let steps = s.steps;
        let mut pb = RowProblem::default();
        let mut pinned = Bits::new(s.gpus, steps);
        let mut pinned_busy = vec![0u32; steps];
        let mut pinned_value = 0.0;
        for j in &s.jobs {
            if let Some((start, first)) = j.pinned {
                pinned_value += value(s, j, start);
                let end = (start + j.duration_steps).min(steps);
                for (t, busy) in pinned_busy.iter_mut().enumerate().take(end).skip(start) {
                    if first.checked_add(j.gpus).is_some_and(|e| e <= s.gpus) {
                        pinned.set(t, first, j.gpus);
                    }
                    *busy = busy.saturating_add(j.gpus);
                }
            }
        }
        let mut cap_rows: Vec<Terms> = vec![Vec::new(); steps];
        let mut sizes: Vec<u32> = Vec::new();
        let mut x = Vec::with_capacity(s.jobs.len());
        let mut eligibles = vec![false; s.jobs.len()];
        for (ji, j) in s.jobs.iter().enumerate() {
            let eligible = j.pinned.is_none()
                && j.duration_steps > 0
                && j.priority > 0.0
                && j.arrival_step < steps
                && !firsts(s, j.gpus).is_empty();
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
            let mut cols: Vec<Col> = Vec::with_capacity(steps - a);
            for t in a..steps {
                let gain = value(s, j, t) - if t + 1 < steps { value(s, j, t + 1) } else { 0.0 };
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

    /// A valid plan as a point of the model (a warm start).
    fn cols_of(&self, s: &Scenario, plan: &Plan) -> Option<Vec<f64>> {
        let mut v = vec![0.0; self.num_cols];
        for (ji, p) in crate::decided(s, plan)? {
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
    fn integral(&self, cols: &[f64]) -> bool {
        let near = |v: f64| (v - v.round()).abs() <= 1e-6;
        self.x.iter().flatten().all(|(_, xs)| xs.iter().all(|c| near(cols[c.index()])))
            && self.h.iter().flatten().all(|c| near(cols[c.index()]))
    }

    /// Round an LP solution to an integral point of the count model: service
    /// counts rounded and dilated to their cap; then jobs by LP mass (then
    /// value), each at its likeliest start (by LP weight) where the counts
    /// still fit.
    fn round(&self, s: &Scenario, lp: &[f64]) -> Vec<f64> {
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

    /// Decode a solution in every [`Style`], then again with the jobs the
    /// best decoding missed placed first (while that helps and `until` is
    /// not past), offering each plan to `best`.
    fn decode_into(&self, s: &Scenario, cols: &[f64], hint: Option<&Plan>, best: &mut Best, until: Instant) {
        let mut top: Option<(f64, Style, Vec<usize>)> = None;
        for k in 0..8u8 {
            let style = Style { services_first: k & 1 != 0, size_first: k & 2 != 0, small_high: k & 4 != 0, urgent: Vec::new() };
            let (plan, missed) = self.decode(s, cols, hint, &style);
            let candidate = check(s, plan);
            if let Ok((_, score)) = &candidate {
                if top.as_ref().is_none_or(|(v, _, _)| score.value > *v) {
                    top = Some((score.value, style, missed));
                }
            }
            best.offer(candidate);
        }
        // Squeaky wheel: what the best style missed goes first next time.
        let Some((mut value, mut style, mut missed)) = top else { return };
        for _ in 0..8 {
            let fresh: Vec<usize> = missed.iter().copied().filter(|ji| !style.urgent.contains(ji)).collect();
            if fresh.is_empty() || Instant::now() >= until {
                return;
            }
            let mut next = style.clone();
            next.urgent.extend(fresh);
            let (plan, m) = self.decode(s, cols, hint, &next);
            let candidate = check(s, plan);
            let improved = matches!(&candidate, Ok((_, score)) if score.value > value);
            if let Ok((_, score)) = &candidate {
                value = value.max(score.value);
            }
            best.offer(candidate);
            if !improved {
                return;
            }
            (style, missed) = (next, m);
        }
    }

    /// Turn a solution (`cols` empty: nothing decided) into GPU indices;
    /// also the jobs the solution starts that did not get their start.
    fn decode(&self, s: &Scenario, cols: &[f64], hint: Option<&Plan>, style: &Style) -> (Plan, Vec<usize>) {
        let services_first = style.services_first;
        let steps = s.steps;
        let nsvc = s.services.len();
        let ngpu = s.gpus as usize;
        let per_node = s.gpus_per_node.max(1);
        let val = |c: Col| cols.get(c.index()).copied().unwrap_or(0.0);
        // The hint plan's (start, first GPU) per job and GPUs per service and step.
        let mut hint_batch = vec![None; s.jobs.len()];
        let mut hint_rt = vec![Bits::new(s.gpus, steps); nsvc];
        if let Some(w) = hint {
            for p in &w.batch {
                if let Some(ji) = s.jobs.iter().position(|j| j.id == p.job_id) {
                    hint_batch[ji] = Some((p.start_step, p.first_gpu));
                }
            }
            for (si, held) in w.realtime.iter().enumerate().take(nsvc) {
                for (t, gpus) in held.iter().enumerate().take(steps) {
                    for &gpu in gpus.iter().filter(|&&g| g < s.gpus) {
                        hint_rt[si].set(t, gpu, 1);
                    }
                }
            }
        }
        // Service targets: the least curve ≥ min(demand, h) within the cap.
        let targets: Vec<Vec<u32>> = (0..nsvc)
            .map(|si| {
                let mut v: Vec<u32> = (0..steps)
                    .map(|t| {
                        let h = self.h[si].get(t).map_or(0.0, |&c| val(c)).round().max(0.0) as u32;
                        h.min(demand(s, si, t))
                    })
                    .collect();
                dilate(&mut v, s.services[si].swap_cap);
                v
            })
            .collect();
        let mut by_weight: Vec<usize> = (0..nsvc).collect();
        by_weight.sort_by(|&a, &b| s.services[b].weight.total_cmp(&s.services[a].weight).then(a.cmp(&b)));
        let mut batch = self.pinned.clone();
        let mut rt = Bits::new(s.gpus, steps);
        let mut held: Vec<Vec<u32>> = vec![Vec::new(); nsvc];
        let mut realtime: Vec<Vec<Vec<u32>>> = vec![Vec::with_capacity(steps); nsvc];
        let mut record = |t: usize, held: &[Vec<u32>], rt: &mut Bits| {
            for si in 0..nsvc {
                for &gpu in &held[si] {
                    rt.set(t, gpu, 1);
                }
                realtime[si].push(held[si].clone());
            }
        };

        // 0. Services first: the highest GPUs pinned jobs leave.
        if services_first {
            for t in 0..steps {
                services_step(s, t, &targets, &mut held, &hint_rt, &by_weight, |gpu| self.pinned.get(t, gpu), u64::from);
                record(t, &held, &mut rt);
            }
        }

        // 1. Batch at the solver's starts: by start, bigger first, best fit.
        let mut order: Vec<(usize, usize)> = Vec::new();
        for (ji, x) in self.x.iter().enumerate() {
            if let Some((a, xs)) = x {
                if let Some(k) = xs.iter().position(|&c| val(c) > 0.5) {
                    order.push((a + k, ji));
                }
            }
        }
        // Jobs kept where the hint plan had them go first, on its blocks.
        let kept = |t: usize, ji: usize| hint_batch[ji].is_some_and(|(ht, _)| ht == t);
        order.sort_by(|&(ta, a), &(tb, b)| {
            let (ja, jb) = (&s.jobs[a], &s.jobs[b]);
            let urgent = |ji: usize| style.urgent.iter().position(|&u| u == ji).unwrap_or(usize::MAX);
            urgent(a)
                .cmp(&urgent(b))
                .then(kept(tb, b).cmp(&kept(ta, a)))
                .then(if style.size_first { jb.gpus.cmp(&ja.gpus) } else { std::cmp::Ordering::Equal })
                .then(ta.cmp(&tb))
                .then(jb.gpus.cmp(&ja.gpus))
                .then(jb.priority.total_cmp(&ja.priority))
                .then(ja.id.cmp(&jb.id))
        });
        let wanted = order.clone();
        // Per job: (start, first GPU) once placed.
        let mut at: Vec<Option<(usize, u32)>> = vec![None; s.jobs.len()];
        for (t, ji) in order {
            let j = &s.jobs[ji];
            let end = (t + j.duration_steps).min(steps);
            let free = |batch: &Bits, f: u32| (t..end).all(|u| batch.free(u, f, j.gpus) && rt.free(u, f, j.gpus));
            let mut best: Option<((i64, i64, bool, u32), u32)> = None;
            if let Some((_, f)) = hint_batch[ji].filter(|_| kept(t, ji)) {
                if f.checked_add(j.gpus).is_some_and(|e| e <= s.gpus) && free(&batch, f) {
                    best = Some(((i64::MIN, 0, false, 0), f));
                }
            }
            let candidates = if best.is_some() { Vec::new() } else { firsts(s, j.gpus) };
            for first in candidates {
                if !free(&batch, first) {
                    continue;
                }
                let fit: i64 = if j.gpus <= per_node {
                    let node = first / per_node * per_node;
                    let n = per_node.min(s.gpus - node);
                    (t..end).map(|u| i64::from(Bits::count_in(&batch.rows[u], node, n))).sum()
                } else {
                    0
                };
                // GPUs batch frees at t − 1 first: services keep theirs.
                let reuse = if t > 0 { i64::from(Bits::count_in(&batch.rows[t - 1], first, j.gpus)) } else { 0 };
                let end_pref = if style.small_high && j.gpus <= per_node { u32::MAX - first } else { first };
                let key = (-reuse, -fit, first % j.gpus != 0, end_pref);
                if best.is_none_or(|(k, _)| key < k) {
                    best = Some((key, first));
                }
            }
            if let Some((_, first)) = best {
                for u in t..end {
                    batch.set(u, first, j.gpus);
                }
                at[ji] = Some((t, first));
            }
        }

        // 2. Otherwise services now, step by step, around batch: `next[t][gpu]`
        // is the first step ≥ t at which batch takes the GPU.
        if !services_first {
            let mut next = vec![vec![0u32; ngpu]; steps];
            next_busy(&batch, &mut next, 0..s.gpus);
            for t in 0..steps {
                if t > 0 {
                    self.spare_services(s, t, &targets, &held, &mut batch, &mut at, &mut next);
                }
                let rank = |gpu: u32| u64::from(next[t][gpu as usize]) << 32 | u64::from(gpu);
                services_step(s, t, &targets, &mut held, &hint_rt, &by_weight, |gpu| batch.get(t, gpu), rank);
                record(t, &held, &mut rt);
            }
        }
        let mut plan = Plan::default();
        for j in &s.jobs {
            if let Some((start, first)) = j.pinned {
                plan.batch.push(Placed { job_id: j.id, start_step: start, first_gpu: first });
            }
        }
        let mut placed = vec![false; s.jobs.len()];
        for (ji, a) in at.iter().enumerate() {
            if let Some((t, first)) = *a {
                placed[ji] = true;
                plan.batch.push(Placed { job_id: s.jobs[ji].id, start_step: t, first_gpu: first });
            }
        }
        plan.realtime = realtime;

        // Fill: leftover jobs where batch and realtime leave aligned blocks free.
        let mut left: Vec<usize> =
            (0..s.jobs.len()).filter(|&ji| self.eligible[ji] && !placed[ji]).collect();
        left.sort_by(|&a, &b| {
            let (ja, jb) = (&s.jobs[a], &s.jobs[b]);
            jb.priority.total_cmp(&ja.priority).then(jb.gpus.cmp(&ja.gpus)).then(ja.id.cmp(&jb.id))
        });
        let words = (s.gpus as usize).div_ceil(64);
        for ji in left {
            let j = &s.jobs[ji];
            let candidates = firsts(s, j.gpus);
            let mut best: Option<(f64, usize, u32)> = None;
            for t in j.arrival_step..steps {
                let end = (t + j.duration_steps).min(steps);
                let mut busy = vec![0u64; words];
                for u in t..end {
                    for (b, (x, y)) in busy.iter_mut().zip(batch.rows[u].iter().zip(&rt.rows[u])) {
                        *b |= x | y;
                    }
                }
                if let Some(&first) = candidates.iter().find(|&&f| Bits::free_in(&busy, f, j.gpus)) {
                    let v = value(s, j, t);
                    if best.is_none_or(|(b, _, _)| v > b) {
                        best = Some((v, t, first));
                    }
                    if s.decay <= 1.0 {
                        break; // later starts are worth no more
                    }
                }
            }
            if let Some((_, t, first)) = best {
                for u in t..(t + j.duration_steps).min(steps) {
                    batch.set(u, first, j.gpus);
                }
                plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
            }
        }
        let missed = wanted.into_iter().filter(|&(t, ji)| at[ji].is_none_or(|(st, _)| st != t)).map(|(_, ji)| ji).collect();
        (plan, missed)
    }

    /// Batch jobs starting at `t` may take GPUs services held at `t − 1`
    /// only as far as each service can still reach its target within its
    /// swap cap (an evicted GPU costs a removal and an addition). A job that
    /// takes more moves to the block losing least; it stays where services
    /// lose demand only if it is worth more than the unmet demand (estimated
    /// until the service catches up), and otherwise waits for the fill pass.
    #[allow(clippy::too_many_arguments)]
    fn spare_services(
        &self,
        s: &Scenario,
        t: usize,
        targets: &[Vec<u32>],
        held: &[Vec<u32>],
        batch: &mut Bits,
        at: &mut [Option<(usize, u32)>],
        next: &mut [Vec<u32>],
    ) {
        let nsvc = s.services.len();
        let steps = s.steps;
        let hits = |si: usize, f: u32, g: u32| {
            let h = &held[si];
            (h.partition_point(|&x| x < f + g) - h.partition_point(|&x| x < f)) as u32
        };
        // Per service: (held, reachable target, evictions free of loss).
        let plan: Vec<(u32, u32, u32)> = (0..nsvc)
            .map(|si| {
                let (n, cap) = (held[si].len() as u32, s.services[si].swap_cap);
                let want = targets[si][t].clamp(n.saturating_sub(cap), n.saturating_add(cap));
                let natural = n.saturating_sub(want);
                (n, want, natural + (cap - want.abs_diff(n)) / 2)
            })
            .collect();
        // Unmet cost of `e` evictions from each service (u32::MAX evictions: over the cap).
        let loss = |e: &[u32]| -> Option<f64> {
            let mut cost = 0.0;
            for si in 0..nsvc {
                let (n, want, free) = plan[si];
                let cap = s.services[si].swap_cap;
                if e[si] > cap {
                    return None;
                }
                if e[si] <= free {
                    continue;
                }
                let natural = n.saturating_sub(want);
                let swaps = want.abs_diff(n) + 2 * e[si].saturating_sub(natural);
                let adds = (want + e[si]).saturating_sub(n);
                cost += deficit_cost(s, si, &targets[si], t, swaps.saturating_sub(cap).min(adds));
            }
            Some(cost)
        };
        let evictions = |batch: &Bits| -> Vec<u32> {
            (0..nsvc).map(|si| held[si].iter().filter(|&&gpu| batch.get(t, gpu)).count() as u32).collect()
        };
        let mut kept: Vec<usize> = Vec::new();
        loop {
            let e = evictions(batch);
            let over: Vec<bool> = (0..nsvc).map(|si| e[si] > plan[si].2).collect();
            let victim = (0..s.jobs.len())
                .filter(|ji| !kept.contains(ji))
                .filter_map(|ji| {
                    let (st, f) = at[ji]?;
                    let hit: u32 = (0..nsvc).filter(|&si| over[si]).map(|si| hits(si, f, s.jobs[ji].gpus)).sum();
                    (st == t && hit > 0).then_some((hit, std::cmp::Reverse(ji), f))
                })
                .max();
            let Some((_, std::cmp::Reverse(ji), first)) = victim else { break };
            let j = &s.jobs[ji];
            let (g, end) = (j.gpus, (t + j.duration_steps).min(steps));
            for u in t..end {
                for (w, m) in Bits::masks(first, g) {
                    batch.rows[u][w] &= !m;
                }
            }
            next_busy(batch, next, first..first + g);
            let e = evictions(batch);
            let base = loss(&e).unwrap_or(f64::INFINITY);
            let mut best: Option<(f64, u32, u32)> = None;
            for f in firsts(s, g) {
                if !(t..end).all(|u| batch.free(u, f, g)) {
                    continue;
                }
                let e2: Vec<u32> = (0..nsvc).map(|si| e[si] + hits(si, f, g)).collect();
                let Some(l) = loss(&e2) else { continue };
                let key = (l, e2.iter().sum::<u32>() - e.iter().sum::<u32>(), f);
                if best.is_none_or(|b| (key.0, key.1, key.2) < b) {
                    best = Some(key);
                }
            }
            match best {
                Some((l, _, f)) if l <= base || value(s, j, t) > l - base => {
                    for u in t..end {
                        batch.set(u, f, g);
                    }
                    at[ji] = Some((t, f));
                    next_busy(batch, next, f..f + g);
                    kept.push(ji);
                }
                _ => at[ji] = None,
            }
        }
    }
}

/// One step of the services: each keeps the GPUs it held that are not
/// `busy`, drops down to its target (GPUs the hint plan does not hold now,
/// then lowest `rank`, first), and adds up to it from the free GPUs (the
/// hint's first, then highest `rank`), within its swap cap.
#[allow(clippy::too_many_arguments)]
fn services_step(
    s: &Scenario,
    t: usize,
    targets: &[Vec<u32>],
    held: &mut [Vec<u32>],
    hint: &[Bits],
    by_weight: &[usize],
    busy: impl Fn(u32) -> bool,
    rank: impl Fn(u32) -> u64,
) {
    let nsvc = s.services.len();
    let mut taken = vec![false; s.gpus as usize];
    let mut room = vec![u32::MAX; nsvc];
    for si in 0..nsvc {
        let before = held[si].len() as u32;
        held[si].retain(|&gpu| !busy(gpu));
        let cap = s.services[si].swap_cap;
        let keep = if t == 0 { targets[si][t] } else { targets[si][t].max(before.saturating_sub(cap)) };
        if held[si].len() > keep as usize {
            held[si].sort_by_key(|&gpu| (hint[si].get(t, gpu), rank(gpu)));
            let n = held[si].len() - keep as usize;
            held[si].drain(..n);
        }
        if t > 0 {
            room[si] = cap.saturating_sub(before - held[si].len() as u32);
        }
        for &gpu in &held[si] {
            taken[gpu as usize] = true;
        }
    }
    let mut pool: Vec<u32> = (0..s.gpus).filter(|&gpu| !taken[gpu as usize] && !busy(gpu)).collect();
    pool.sort_by_key(|&gpu| std::cmp::Reverse(rank(gpu)));
    for &si in by_weight {
        let want = targets[si][t].saturating_sub(held[si].len() as u32).min(room[si]) as usize;
        let mut add: Vec<u32> = pool.iter().copied().filter(|&gpu| hint[si].get(t, gpu)).take(want).collect();
        if add.len() < want {
            let more: Vec<u32> = pool.iter().copied().filter(|&gpu| !hint[si].get(t, gpu)).take(want - add.len()).collect();
            add.extend(more);
        }
        pool.retain(|gpu| !add.contains(gpu));
        held[si].extend(add);
        held[si].sort_unstable();
    }
}

/// `next[t][gpu]`: the first step ≥ t at which batch holds the GPU (`steps` if none).
fn next_busy(batch: &Bits, next: &mut [Vec<u32>], gpus: std::ops::Range<u32>) {
    let steps = batch.rows.len();
    for gpu in gpus {
        let mut n = steps as u32;
        for t in (0..steps).rev() {
            if batch.get(t, gpu) {
                n = t as u32;
            }
            next[t][gpu as usize] = n;
        }
    }
}

/// Unmet cost of a service missing `d` GPUs at step `t`, catching up as its
/// cap allows beyond the target's own changes.
fn deficit_cost(s: &Scenario, si: usize, targets: &[u32], t: usize, mut d: u32) -> f64 {
    let svc = &s.services[si];
    let mut cost = 0.0;
    let mut u = t;
    while d > 0 && u < s.steps {
        let short = d.saturating_sub(targets[u].saturating_sub(demand(s, si, u)));
        cost += s.penalty * svc.weight * f64::from(short);
        u += 1;
        if u < s.steps {
            let delta = i64::from(targets[u]) - i64::from(targets[u - 1]);
            d = (i64::from(d) - i64::from(svc.swap_cap) + delta).max(0) as u32;
        }
    }
    cost
}

/// `coef · run[j,t] = coef · (S[j,t] − S[j,t−dur])` for a job whose
/// `S` columns start at step `a` (`t ≥ a`).
fn running(a: usize, cols: &[Col], dur: usize, t: usize, coef: f64) -> impl Iterator<Item = (Col, f64)> + '_ {
    let on = Some((cols[t - a], coef));
    let off = t.checked_sub(dur).filter(|&u| u >= a).map(|u| (cols[u - a], -coef));
    on.into_iter().chain(off)
}

/// Disjoint legal blocks of `c` GPUs free of pinned jobs at step `t`.
fn whole_blocks(s: &Scenario, pinned: &Bits, t: usize, c: u32) -> u32 {
    let per_node = s.gpus_per_node.max(1);
    if c <= per_node {
        return firsts(s, c).into_iter().filter(|&f| pinned.free(t, f, c)).count() as u32;
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::{job, named_svc as svc, scenario};
    use super::super::{fast, Score, Service};
    use super::*;


    /// Pinned jobs only, services holding nothing.
    fn trivial(s: &Scenario) -> Plan {
        Plan {
            batch: s
                .jobs
                .iter()
                .filter_map(|j| j.pinned.map(|(t, f)| Placed { job_id: j.id, start_step: t, first_gpu: f }))
                .collect(),
            realtime: vec![vec![Vec::new(); s.steps]; s.services.len()],
        }
    }

    fn solve(s: &Scenario) -> FullResult {
        let r = plan(s, &trivial(s), &FullOptions { time_limit_s: 10.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
        let score = validate(s, &r.plan).unwrap();
        assert_eq!(score.value, r.objective);
        assert!(r.bound >= r.objective - 1e-6, "bound {} < objective {}", r.bound, r.objective);
        r
    }

    fn start(p: &Plan, id: u64) -> Option<usize> {
        p.batch.iter().find(|b| b.job_id == id).map(|b| b.start_step)
    }

    #[test]
    fn higher_priority_wins_when_both_cannot_run_now() {
        let s = scenario(4, 2, vec![job(1, 4, 1, 1.0, 0), job(2, 4, 1, 5.0, 0)], vec![]);
        let r = solve(&s);
        assert_eq!((start(&r.plan, 2), start(&r.plan, 1)), (Some(0), Some(1)));
        assert!((r.objective - (20.0 + 3.8)).abs() < 1e-9);
        assert_eq!(r.status, FullStatus::Optimal);
        assert!(r.gap < 1e-6);
    }

    #[test]
    fn penalised_realtime_outranks_batch() {
        // 4 GPUs, 1 step: serving 2 GPUs of demand saves 2·8·10 = 160, more
        // than the 4-GPU job's 4·5 = 20; the 2-GPU job fits beside it.
        let s = scenario(4, 1, vec![job(1, 4, 1, 5.0, 0), job(2, 2, 1, 1.0, 0)], vec![svc("chat", vec![2], 1)]);
        let r = solve(&s);
        assert_eq!(r.plan.realtime[0][0].len(), 2);
        assert_eq!(start(&r.plan, 1), None);
        assert_eq!(start(&r.plan, 2), Some(0));
        assert!((r.objective - 2.0).abs() < 1e-9);
    }

    #[test]
    fn swap_cap_ramps_early_and_trades_against_batch() {
        // Demand 0 → 4 with cap 1: hold 3 idle GPUs at step 0.
        let s = scenario(4, 2, vec![], vec![svc("chat", vec![0, 4], 1)]);
        let r = solve(&s);
        assert_eq!(r.plan.realtime[0].iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(validate(&s, &r.plan).unwrap().unmet_gpu_steps, 0);
        // A 4-GPU job now worth 10·4 = 40 loses to 3 unmet GPU-steps (240)...
        let s = scenario(4, 2, vec![job(1, 4, 1, 10.0, 0)], vec![svc("chat", vec![0, 4], 1)]);
        let r = solve(&s);
        assert_eq!(start(&r.plan, 1), None);
        assert!((r.objective - 0.0).abs() < 1e-9);
        // ...one worth 100·4 = 400 wins: 400 − 3·80 = 160.
        let s = scenario(4, 2, vec![job(1, 4, 1, 100.0, 0)], vec![svc("chat", vec![0, 4], 1)]);
        let r = solve(&s);
        assert_eq!(start(&r.plan, 1), Some(0));
        assert!((r.objective - 160.0).abs() < 1e-9);
        // A sharp drop keeps idle GPUs within the cap instead of failing.
        let s = scenario(8, 3, vec![job(1, 2, 3, 1.0, 0)], vec![svc("chat", vec![6, 0, 0], 2)]);
        let r = solve(&s);
        let held: Vec<usize> = r.plan.realtime[0].iter().map(Vec::len).collect();
        // (6, 4, 2) or, as idle GPUs cost nothing, (6, 4, 4): the same value.
        assert!(held[..2] == [6, 4] && held[2] >= 2, "{held:?}");
        assert_eq!(validate(&s, &r.plan).unwrap().unmet_gpu_steps, 0);
    }

    #[test]
    fn pinned_jobs_stay_put() {
        let mut running = job(1, 4, 3, 1.0, 0);
        running.pinned = Some((0, 4));
        let s = scenario(8, 3, vec![running, job(2, 8, 1, 9.0, 0), job(3, 4, 2, 2.0, 0), job(4, 2, 1, 1.0, 1)], vec![]);
        let r = solve(&s);
        assert!(r.plan.batch.contains(&Placed { job_id: 1, start_step: 0, first_gpu: 4 }));
        // The 8-GPU job can only run once the pinned one ends: beyond the horizon.
        assert_eq!(start(&r.plan, 2), None);
        assert_eq!(start(&r.plan, 3), Some(0));
    }

    #[test]
    fn options_are_checked_before_they_reach_highs() {
        let s = scenario(4, 1, vec![job(1, 4, 1, 1.0, 0)], vec![]);
        let w = trivial(&s);
        for (t, g) in [(0.0, 0.01), (-1.0, 0.01), (f64::NAN, 0.01), (f64::INFINITY, 0.01)] {
            assert!(matches!(plan(&s, &w, &FullOptions { time_limit_s: t, mip_rel_gap: g, ..FullOptions::default() }), Err(FullError::TimeLimit(_))));
        }
        for g in [1.0, -0.1, f64::NAN] {
            assert!(matches!(plan(&s, &w, &FullOptions { time_limit_s: 1.0, mip_rel_gap: g, ..FullOptions::default() }), Err(FullError::Gap(_))));
        }
        // An invalid warm plan is ignored, not trusted.
        let bad = Plan { batch: vec![Placed { job_id: 1, start_step: 0, first_gpu: 2 }], realtime: vec![] };
        let r = plan(&s, &bad, &FullOptions::default()).unwrap();
        assert_eq!(r.plan.batch, vec![Placed { job_id: 1, start_step: 0, first_gpu: 0 }]);
    }

    #[test]
    fn empty_scenarios() {
        let s = scenario(8, 0, vec![job(1, 2, 1, 1.0, 0)], vec![]);
        let r = solve(&s);
        assert_eq!(r.objective, 0.0);
        let s = scenario(8, 4, vec![], vec![]);
        let r = solve(&s);
        assert_eq!((r.objective, r.bound, r.status), (0.0, 0.0, FullStatus::Optimal));
    }

    /// xorshift64*: deterministic instances without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A random scenario: mixed power-of-two jobs, some pinned at t = 0, and services.
    fn random(seed: u64, gpus: u32, njobs: usize, steps: usize, nsvc: usize) -> Scenario {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let per_node = 8.min(gpus);
        let max_log = (gpus / 8).max(1).ilog2().min(6);
        let mut pinned = Bits::new(gpus, steps.max(1));
        let mut jobs = Vec::new();
        for id in 0..njobs as u64 {
            let g = 1u32 << rng.below(u64::from(max_log) + 1);
            let dur = 1 + rng.below((steps as u64 / 2).max(1)) as usize;
            let mut j = job(id + 1, g, dur, 0.5 + 4.5 * rng.unit(), rng.below((steps as u64 * 2 / 3).max(1)) as usize);
            // Running jobs: at most half the cluster.
            if rng.below(6) == 0 && Bits::count_in(&pinned.rows[0], 0, gpus) + g <= gpus / 2 {
                let s0 = Scenario { gpus, gpus_per_node: per_node, steps, step_s: 1, decay: 1.0, penalty: 1.0, jobs: vec![], services: vec![] };
                if let Some(f) = firsts(&s0, g).into_iter().find(|&f| pinned.free(0, f, g)) {
                    for t in 0..dur.min(steps) {
                        pinned.set(t, f, g);
                    }
                    j.pinned = Some((0, f));
                    j.arrival_step = 0;
                }
            }
            jobs.push(j);
        }
        let services = (0..nsvc)
            .map(|k| {
                let base = gpus as f64 / (6.0 * nsvc as f64);
                let phase = rng.unit() * 6.0;
                let demand = (0..steps).map(|t| (base * (1.0 + 0.8 * ((t as f64) / 4.0 + phase).sin())).round() as u32).collect();
                Service { name: format!("svc{k}"), demand, swap_cap: 1 + rng.below((gpus / 32).max(2).into()) as u32, weight: 1.0 + rng.unit() }
            })
            .collect();
        Scenario { gpus, gpus_per_node: per_node, steps, step_s: 900, decay: 0.97, penalty: 8.0, jobs, services }
    }

    /// The count model is a relaxation: on seeded random instances the fast
    /// plan, fixed as a point of the model, is feasible at its validated
    /// value, and the model's optimum (its bound) is at least the fast plan's
    /// value and the exact model's proven optimum.
    #[test]
    fn count_bound_is_above_every_plan() {
        let opts = FullOptions { time_limit_s: 30.0, mip_rel_gap: 0.0, ..FullOptions::default() };
        for seed in 0..6 {
            let s = random(seed, 32, 24, 8, 1 + seed as usize % 2);
            let warm = fast::plan(&s);
            let fast_value = validate(&s, &warm).unwrap().value;
            let tol = 1e-6 * fast_value.abs().max(1.0);
            // The fast plan as a fixed point of the model.
            let mut mip = Mip::build(&s, Some(&warm));
            if mip.num_cols == 0 {
                continue;
            }
            let point = mip.cols_of(&s, &warm).expect("the fast plan maps to the count model");
            let mut fixed = Model::try_new(std::mem::take(&mut mip.problem)).unwrap();
            set(&mut fixed, "time_limit", 30.0).unwrap();
            let all = mip.x.iter().flatten().flat_map(|(_, xs)| xs.iter()).chain(mip.h.iter().flatten()).chain(mip.u.iter().flatten());
            for &c in all {
                fixed.change_column_bounds(c, point[c.index()]..=point[c.index()]);
            }
            let solved = fixed.try_solve().unwrap();
            assert_eq!(solved.status(), HighsModelStatus::Optimal, "seed {seed}: the fast plan is not a point of the count model");
            let at = -solved.objective_value() + mip.pinned_value;
            assert!((at - fast_value).abs() <= tol, "seed {seed}: fast plan worth {at} in the model, {fast_value} validated");
            // The model's optimum.
            let mut mip = Mip::build(&s, Some(&warm));
            let model = Model::try_new(std::mem::take(&mut mip.problem)).unwrap();
            // Its dual bound, proven optimal or stopped by the limit, bounds every plan.
            let run = solve_mip(model, 30.0, &opts, Some(&point)).unwrap();
            let bound = -run.dual.expect("a dual bound") + mip.pinned_value;
            assert!(bound >= fast_value - tol, "seed {seed}: bound {bound} < fast plan {fast_value}");
            let exact = super::super::exact::solve(&s, Some(&warm), 30.0, &opts).unwrap();
            if let (true, Some(p)) = (exact.optimal, exact.plan) {
                let best = validate(&s, &p).unwrap().value;
                assert!(bound >= best - tol, "seed {seed}: bound {bound} < exact optimum {best}");
            }
        }
    }

    #[test]
    fn random_plans_validate_and_beat_their_warm_start() {
        for seed in 0..12 {
            let s = random(seed, 32, 12, 8, 2);
            let warm = fast::plan(&s);
            let warm_value = validate(&s, &warm).unwrap().value;
            let trivial_value = validate(&s, &trivial(&s)).unwrap().value;
            let r = plan(&s, &warm, &FullOptions { time_limit_s: 5.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
            let score: Score = validate(&s, &r.plan).unwrap();
            assert_eq!(score.value, r.objective);
            assert!(r.objective >= warm_value - 1e-9, "seed {seed}: {} < fast {warm_value}", r.objective);
            assert!(r.objective >= trivial_value - 1e-9);
            assert!(r.bound >= r.objective - 1e-6 * r.bound.abs().max(1.0), "seed {seed}: bound {} < {}", r.bound, r.objective);
            for j in s.jobs.iter().filter(|j| j.pinned.is_some()) {
                let (t, f) = j.pinned.unwrap();
                assert!(r.plan.batch.contains(&Placed { job_id: j.id, start_step: t, first_gpu: f }));
            }
            // From a trivial warm start too.
            let r = plan(&s, &trivial(&s), &FullOptions { time_limit_s: 5.0, mip_rel_gap: 0.0, ..FullOptions::default() }).unwrap();
            validate(&s, &r.plan).unwrap();
            assert!(r.objective >= trivial_value - 1e-9);
        }
    }
}
