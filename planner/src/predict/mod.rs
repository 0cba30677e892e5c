//! Demand predictors: what a job will need, from what Slurm knows of it and
//! of the jobs before it ("the plan is only as good as its durations").
//!
//! - [`meta`]: the job metadata a comment carries (`class=`, `model_params=`,
//!   `method=`), one definition for every reader of comments.
//! - [`duration`]: an online job-duration predictor — a robust quantile of
//!   the last durations of the most specific key with enough history,
//!   falling back from (user, name) to the class, then to the time limit —
//!   and the mean absolute errors of a prediction and of the time limit.
//! - [`profile`]: a realtime service's weekly hourly profile of GPUs in use,
//!   and the 24-step demand curve a planner scenario's service takes.
//!
//! Everything here is pure: values in, values out; no IO, no clock (the
//! caller says what "now" is).

pub mod duration;
pub mod meta;
pub mod profile;

pub use duration::{level_counts, mae, predict_online, JobKey, Level, Mae, Outcome, PastJob, PredictRules, Prediction, Predictor};
pub use meta::{model_bucket, parse_model_params, CommentMeta, MetaError};
pub use profile::{demand_curve, weekly_profiles, ServiceRun, WeekProfile, HOURS_PER_WEEK, UNIX_WEEK_OFFSET_S};
