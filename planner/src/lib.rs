//! The rolling-horizon planner (Dharma AI's constraint-aware allocator):
//! plan a horizon of `steps` × `step_s` on a grid of GPUs, commit only the
//! first step, re-plan.
//!
//! Model (docs/planner.md):
//! - **Batch jobs** take a contiguous, aligned block of `gpus` GPUs (a power
//!   of two: a block of g starts at a multiple of g, so it never straddles
//!   nodes unless it is a whole-node multiple) for `duration_steps`
//!   consecutive steps from a start ≥ their arrival, never interrupted;
//!   with [`Scenario::must_finish`] (Dharma's rule) the run ends inside the
//!   horizon or the job is not placed. Pinned jobs (already running) keep
//!   their block and start.
//! - **Realtime services** follow a demand curve: at step t a service holds
//!   a set of GPUs; GPUs changing hands between consecutive steps (added +
//!   removed) are at most its `swap_cap`; demand not served costs `penalty`
//!   × its weight per GPU-step.
//! - **Objective:** Σ_batch priority × decay^t per GPU-step it holds −
//!   penalty × Σ_services weight × unmet GPU-steps.
//! - **Utilisation:** (batch GPU-steps + served realtime GPU-steps) ÷
//!   (GPUs × steps); reserved-but-idle GPUs do not count.
//!
//! [`fast::plan`] is the heuristic (legal by construction); [`fifo::plan`]
//! the baseline (arrival order, realtime held at its peak); `full::plan`
//! (feature `highs`) the MIP; [`validate()`] the independent checker and
//! scorer every plan goes through; [`queue`] the rule turning a live queue
//! into a scenario. The rules the planning modes share — legal blocks, a
//! placement's value, dilation to a swap cap, per-step GPU bitsets — are
//! written once, in `grid`; the validator states its own, as the oracle.
//!
//! The crate does no IO, has no unsafe code and shares nothing with the
//! rules crate (`tally-allocator`): the plugin's planner thread and the
//! simulator turn jobs into a [`Scenario`].

#![forbid(unsafe_code)]

pub mod fast;
pub mod fifo;
#[cfg(feature = "highs")]
pub mod full;
pub mod generate;
mod grid;
pub mod predict;
pub mod queue;
mod rng;
pub mod time;
pub mod validate;

pub use grid::last_start;
pub use validate::{validate, Score, Violation};

/// A batch job to place.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanJob {
    pub id: u64,
    /// Power of two.
    pub gpus: u32,
    pub duration_steps: usize,
    /// Value per GPU-step (the user's/team's priority), > 0.
    pub priority: f64,
    /// First step it may start.
    pub arrival_step: usize,
    /// Already running: (start step, first GPU); start may be before 0
    /// only as 0 with the remaining duration.
    pub pinned: Option<(usize, u32)>,
}

/// A realtime inference service.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    /// GPUs wanted per step (`steps` values).
    pub demand: Vec<u32>,
    /// At most this many GPUs added + removed between consecutive steps.
    pub swap_cap: u32,
    /// Allocation weight (unmet demand costs penalty × weight per GPU-step).
    pub weight: f64,
}

/// What to plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub gpus: u32,
    pub gpus_per_node: u32,
    pub steps: usize,
    pub step_s: u64,
    /// Per-step discount of batch value (< 1: the present is worth more).
    pub decay: f64,
    /// Multiplier of unmet realtime demand (5-10).
    pub penalty: f64,
    /// Dharma's horizon rule (the scenario files' default): a batch job
    /// runs only if it finishes inside the horizon, since a run is never
    /// interrupted and one cut off at the horizon's end earns nothing now (it
    /// waits for a later plan). `false`: a run may overrun the horizon and
    /// its steps inside it count (the live queue's planner, whose jobs are
    /// often longer than the horizon). Pinned (running) jobs are exempt.
    pub must_finish: bool,
    pub jobs: Vec<PlanJob>,
    pub services: Vec<Service>,
}

/// Where a batch job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub job_id: u64,
    pub start_step: usize,
    pub first_gpu: u32,
}

/// A plan: batch placements (jobs not placed wait beyond the horizon) and,
/// per service, the GPUs it holds at each step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub batch: Vec<Placed>,
    /// `realtime[s][t]` = sorted GPU indices of service `s` at step `t`.
    pub realtime: Vec<Vec<Vec<u32>>>,
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;
