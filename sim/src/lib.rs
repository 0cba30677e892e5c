//! `tally-sim`: replay GPU job traces through Slurm's mechanics under
//! several policies, with the allocator's own rules, and score what ran.
//!
//! The crate is pure: strings and values in, results out. It does no IO
//! (the `tally` CLI reads and writes files, draws the plots and lays out
//! the tables), knows no Slurm type, and contains no `unsafe`.
//!
//! - [`trace`]: the canonical trace ([`trace::Trace`], one job a row) and
//!   its CSV, read and written with the `csv` crate.
//! - [`import`]: public traces (ElasticFlow CSV, the Standard Workload
//!   Format) into canonical traces.
//! - [`augment`]: seeded teams, users, classes, contracts, priorities and
//!   debug jobs for a bare trace, from a config's tree.
//! - [`cluster`]: GPUs on nodes and whole-node-aware placement.
//! - [`sim`]: the event-jumping replay ([`sim::run`]) of fifo, multifactor,
//!   tally, tally+planner and planner: priority order, EASY backfill,
//!   preemption with requeue, periodic re-plans. Tally's order, contracts,
//!   preemption and charging are the allocator's functions, the planner's
//!   plan is the planner's; the simulator's own code is Slurm's mechanics
//!   and the baselines.
//! - [`metrics`]: run segments into every figure ([`metrics::score`]), for
//!   a replay and for a real Slurm alike.
//! - [`sacct`]: a real Slurm's runs (sacct output) for the same scoring.
//! - [`suite`]: the benchmark suite's cases (trace windows at chosen
//!   demands, synthetic cases).
//! - [`gaming`]: the suite's gaming family (one team reshapes the same
//!   work to reach a favoured treatment, against the same case honest).
//! - [`forecast`]: a pending job's start estimated by the replay run
//!   forward from a live moment (`tally explain`).
#![forbid(unsafe_code)]

pub mod augment;
pub mod cluster;
pub mod forecast;
pub mod gaming;
pub mod import;
pub mod metrics;
pub mod sacct;
pub mod sim;
pub mod suite;
pub mod trace;
