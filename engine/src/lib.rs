//! The host-free logic of Tally's plugins: everything the plugin cdylibs
//! (`priority_tally.so`, …) decide, in safe Rust that knows no Slurm type.
//! Slurm's pointers, symbols and log live in `tally-ffi`, which reads job
//! records into this crate's owned [`view::JobView`]s.
//!
//! - [`view`]: the owned job ([`view::JobView`]), the shared names of one
//!   copy ([`view::Names`]), GPU requests in Slurm's spellings.
//! - [`engine`]: charging the ledger from job views, re-ranking, what
//!   counts as running or waiting, computing priorities.
//! - [`recalc`]: priority/tally's threads (the recalculation's tick,
//!   reload, drain and save; the planner's round) over the
//!   [`recalc::Controller`] the plugin implements with slurmctld's locks.
//! - [`arbiter`]: preempt/tally's state between two copies of the jobs
//!   (answers, claims, offers, victim order) and its notes.
//! - [`planner`]: the planner thread's work: jobs → the plan's committed
//!   step ([`engine::PlanBoard`]).
//! - [`submit`]: what job_submit/tally checks and rewrites.
//! - [`statefile`]: atomic save and careful load of the ledger.
//! - [`preempted`]: the runs preempt/tally preempted, written by it and
//!   read by the priority plugin (a preempted job's next run gets its whole
//!   contract).
//! - [`worker`]: the background thread shape (tick, reload, stop) of every
//!   plugin; [`follower`]: config and ledger followed from disk by the
//!   job_submit and preempt plugins.
//! - [`guard`]: the one panic firewall every exported function and every
//!   thread body goes through.
//!
//! `#![forbid(unsafe_code)]`, and no dependency on `slurm-sys`: the
//! compiler keeps this crate free of pointers and Slurm types.

#![forbid(unsafe_code)]

pub mod arbiter;
pub mod engine;
#[cfg(test)]
mod fixtures;
pub mod follower;
pub mod guard;
pub mod planner;
pub mod preempted;
pub mod recalc;
pub mod statefile;
pub mod submit;
pub mod view;
pub mod worker;

/// Unix seconds now, the clock of every plugin (0 if the clock is before 1970).
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Tally's log level from the config's `[log] debug` (slurmctld's own
/// debug level is left alone): debug lines only when asked for.
pub fn set_debug(debug: bool) {
    log::set_max_level(if debug { log::LevelFilter::Debug } else { log::LevelFilter::Info });
}
