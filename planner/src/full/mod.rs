//! Full mode: the planner as a mixed-integer programme solved by HiGHS
//! (feature `highs`), warm-started from the fast plan, decoded into GPU
//! indices and checked by [`validate`](crate::validate()).
//!
//! Small instances (the exact model estimated at ≤ `exact::MAX_NONZEROS`
//! nonzeros: the shipped 8-GPU scenarios) are solved with the block-indexed
//! model of `exact.rs`, whose optimum is the best valid plan and whose bound
//! is true; larger ones with the count model of `count.rs` (a relaxation),
//! whose solutions `decode.rs` turns into GPU indices.
//!
//! ## Modules (imports only go down this list)
//!
//! - `mod.rs`: [`plan`], the order of the attempts below;
//! - `exact.rs`: the exact model, built, solved and read back;
//! - `decode.rs`: count-model solutions → plans; the best valid plan so far;
//! - `count.rs`: the count model, its rounding;
//! - `solver.rs`: what both models share: HiGHS calls, eligible jobs, the
//!   warm start's placements, the pinned constant;
//! - `api.rs`: the public types.
//!
//! Blocks, values, demand, dilation and bitsets come from
//! `grid`, as in every mode.
//!
//! ## Solving the count model (HiGHS, presolve off: it costs more than it saves here)
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
//! Every decoded plan and the warm plan go through [`validate()`]; the best is
//! returned, so full mode is never worse than its warm start. `objective` is
//! its validated score, `bound` the tightest of the LP and MIP dual bounds
//! (+ pinned value); `status` is [`FullStatus::Optimal`] when the solver
//! proved its count model optimal (within `mip_rel_gap`) — the gap may still
//! show what decoding lost.

mod api;
mod count;
mod decode;
mod exact;
mod solver;
#[cfg(test)]
mod tests;

pub use api::{Formulation, FullError, FullOptions, FullResult, FullStatus};

use super::{validate, Plan, Scenario};
use count::Mip;
use decode::{check, Best, Style};
use highs::{HighsModelStatus, Model};
use solver::{set, solve_mip, MipRun, MIN_MIP_S};
use std::time::Instant;

/// Plan the scenario with HiGHS, warm-started from `warm` (normally the fast
/// plan; an invalid one is ignored). Every returned plan passes [`validate()`].
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
        Formulation::Auto => exact::fits(s),
        Formulation::Exact => true,
        Formulation::Count => false,
    };
    if exact {
        match exact::solve(s, best.plan(), left(), opts) {
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
            // 3. Decoding lost value: the exact model around the solution's starts.
            if best.value() < bound - 1e-6 * bound.abs().max(1.0) && left() > MIN_MIP_S {
                let window: Vec<Option<(usize, usize)>> =
                    mip.starts(&sol).into_iter().map(|t| t.map(|t| (t.saturating_sub(WINDOW), t + WINDOW))).collect();
                if exact::window_size(s, &window) <= MAX_WINDOW_NONZEROS {
                    let hint = best.plan().cloned();
                    if let Ok(Some(p)) = exact::solve_window(s, &window, hint.as_ref(), left(), opts) {
                        best.offer(check(s, p));
                    }
                }
            }
        }
    }
    if !solved_any {
        return Err(FullError::NoSolution("time limit".into()));
    }
    best.finish(status, bound, Formulation::Count)
}

/// Steps either side of the count solution's start the windowed exact
/// model may move a job.
const WINDOW: usize = 1;
/// Largest windowed exact model (estimated nonzeros) tried.
const MAX_WINDOW_NONZEROS: usize = 400_000;

/// Decoding may use up to the time limit (it takes milliseconds per try).
fn decode_until(began: Instant, opts: &FullOptions) -> Instant {
    began + std::time::Duration::from_secs_f64(opts.time_limit_s.min(1e6))
}
