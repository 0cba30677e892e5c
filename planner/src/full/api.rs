//! Full mode's public face: what the caller asks ([`FullOptions`],
//! [`Formulation`]), what it gets back ([`FullResult`], [`FullStatus`]) and
//! how it fails ([`FullError`]). Plain data, shared by every other module
//! of `full`.

use super::super::{Plan, Violation};
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
    /// The exact model when it is small (estimated ≤ 60 000 nonzeros, `exact::MAX_NONZEROS`), else the count model.
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
    /// Passes [`validate`](crate::validate()).
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
