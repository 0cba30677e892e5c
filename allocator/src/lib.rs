//! Tally's pure core: the rules every other part of Tally calls.
//!
//! - [`tree`]: the org tree ([`OrgTree`]) and budgets, turned into an
//!   [`Allocation`] of GPU-hours per window for a cluster [`Capacity`].
//! - [`ledger`]: the [`Ledger`] of allocated GPU-seconds per (account, user)
//!   in hourly buckets over a hard sliding window.
//! - [`fairshare`]: the [`FairShare`] ranking of accounts by
//!   `used / allocated`, depth-first like Slurm's Fair Tree.
//! - [`contract`]: the comment parser (`contract=2h,resumable`) and the
//!   cluster's [`ContractRules`].
//! - [`entitlement`]: what every part of the tree runs and is owed *now*
//!   ([`Entitlement`]: rates, the water-filled fair share, and [`Reclaim`],
//!   the restorative half of the preemption rule).
//! - [`priority`]: [`job_priority`], the one job-order function (bit layout
//!   documented there).
//! - [`preempt`]: [`may_preempt`], [`eligible_victims`] and
//!   [`victim_rank`], the one preemption rule.
//! - [`fairness`]: owed versus delivered GPU-hours.
//! - [`runs`]: what a host saw of each job's runs ([`RunBook`]): charging
//!   by run seconds, frozen at the run's start, protection over requeues.
//! - [`state`]: the ledger's saved text form ([`Snapshot`]).
//! - [`tres`]: GPUs in Slurm's TRES strings ([`tres::gpu_count`],
//!   [`tres::gpu_type`]).
//! - [`gpu_types`]: GPU types and their budget weights ([`GpuWeights`],
//!   [`Weight`]): GPUs of different kinds in one budget unit, for every
//!   rule above.
//! - [`names`]: [`names::ByName`], shared names looked up once by address.
//! - [`outlook`]: [`outlook::back_under`], when an account is back under
//!   its allocation if it runs nothing more (buckets leaving the window).
//!
//! The rolling-horizon planner is its own crate, `tally-planner`.
//!
//! The crate does no IO, has no unsafe code and knows no Slurm type: the
//! plugins, the simulator and the reports hand it owned [`Job`] values.
//! Design: `docs/design.md`.

#![forbid(unsafe_code)]

pub mod contract;
pub mod drain;
pub mod duration;
pub mod entitlement;
pub mod fairness;
pub mod fairshare;
pub mod gpu_types;
pub mod job;
pub mod ledger;
pub mod names;
pub mod outlook;
pub mod preempt;
pub mod priority;
pub mod runs;
pub mod state;
pub mod text;
pub mod tree;
pub mod tres;

pub use contract::{comment_tokens, parse_comment, Contract, ContractError, ContractRules, LongJobVerdict, LongJobs, MissingContract, ParsedComment};
pub use drain::{drain_plan, DrainPlan, OnDraining};
pub use duration::{format_duration, parse_duration, DurationError, DAY_S, HOUR, HOUR_S, MINUTE_S, WEEK_S};
pub use entitlement::{Entitlement, Load, Need, Reclaim, ReclaimRefusal, TeamNow};
pub use fairness::{summarize, summarize_window, Asked, Delivery, FairnessSummary, Held, Owed, OwedBook};
pub use fairshare::{FairShare, FundingClass, RankKey, Standing};
pub use gpu_types::{check_gpu_type_name, GpuType, GpuTypeError, GpuWeights, Inventory, Weight};
pub use job::{charge_from_mark, Funded, Job, KnownAccounts};
pub use ledger::{Ledger, LedgerError, UsageKey, WindowUsage};
pub use preempt::{
    eligible_victims, long_start, long_start_asking, lost_gpu_seconds, may_preempt, never_requeued, victim_rank, Decision, LongStart, Moment, Nodes,
    PreemptReason, Refusal, VictimClass, VictimPool,
};
pub use priority::{
    inside_key, inside_order, job_priority, order_queue, settled_priority, slurm_key, Priority, PriorityRules, QueueOrder, QueueWalk, SlurmKey,
    TeamLoad,
};
pub use runs::{protection_after, Requeue, RunBook, RunRecord, Seen};
pub use state::{Snapshot, StateError};
pub use tree::{AccountSpec, Allocation, Budget, Capacity, OrgTree, TreeError, ROOT};
