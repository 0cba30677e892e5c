//! Job order: one function from a job and the fair-share ranking to a Slurm
//! priority (u32, higher runs first).
//!
//! Bit layout (most significant first):
//!
//! ```text
//!  31      tier    1 = allocated, 0 = unallocated
//!  30      plan    1 = the planner starts it in its committed step (0 without a planner)
//!  29..20  team    1023 − min(rank, 1023)          (10 bits; rank 0 = most under-served)
//!  19..10  inside  clamp(within_team, −512, 511) + 512   (10 bits; nice negated)
//!   9..0   age     min(⌊(now − submit) / age_unit⌋, 1023)   (10 bits)
//!  result  max(1, …)   (0 means "held" to Slurm)
//! ```
//! Consequences, in order: every allocated job outranks every unallocated
//! one; inside a tier, the jobs the planner starts now (`[planner]`, off by
//! default: Dharma's rolling horizon packing blocks into the holes the
//! running jobs leave) come first; then teams are ordered by fair share and
//! nothing below the team bits can reorder two teams (priority never sorts
//! across teams); inside a team the user's nice/priority decides, then age.
//! The planner values jobs by this same order ([`crate::plan::queue`]), so
//! it only lifts a job over a better-ranked one that cannot start now.
//! Deliberate limits: more than 1023 ranked accounts share the last team
//! value; age saturates after
//! 1023 age units (17 h with the default 1 min), after which Slurm's own
//! tie-break (job id, i.e. submit order) keeps FIFO.

use crate::fairshare::{FairShare, Standing};
use crate::job::Job;

pub const TIER_SHIFT: u32 = 31;
pub const PLAN_SHIFT: u32 = 30;
pub const TEAM_SHIFT: u32 = 20;
pub const TEAM_MAX: u32 = (1 << 10) - 1;
pub const INSIDE_SHIFT: u32 = 10;
pub const INSIDE_MIN: i32 = -512;
pub const INSIDE_MAX: i32 = 511;
pub const AGE_MAX: u32 = (1 << 10) - 1;

/// Settings of the order (from `[priority]` in tally.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityRules {
    /// One step of the age field (default 60 s).
    pub age_unit_s: u64,
}

impl Default for PriorityRules {
    fn default() -> Self {
        PriorityRules { age_unit_s: 60 }
    }
}

/// A priority and the fields it was built from (what sprio shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    pub value: u32,
    pub allocated: bool,
    /// The planner starts it in its committed step.
    pub planned: bool,
    /// The account's rank, `None` if the account is not in the tree.
    pub rank: Option<u32>,
    pub team: u32,
    pub inside: u32,
    pub age: u32,
}

/// The one job-order function shared by the plugin, the simulator and reports.
pub fn job_priority(job: &Job, fs: &FairShare, rules: &PriorityRules, now: u64) -> Priority {
    job_priority_with(job, fs.standing(&job.account), rules, now)
}

/// [`job_priority`] with the job's account already looked up in the
/// ranking (`None`: not in the tree) — for callers that order many jobs of
/// few teams.
pub fn job_priority_with(job: &Job, standing: Option<&Standing>, rules: &PriorityRules, now: u64) -> Priority {
    // Allocated ⇔ a contract > 0 and an account in the tree (`Job::is_allocated`).
    let allocated = job.contract.is_allocated() && standing.is_some();
    let rank = standing.map(|s| s.rank);
    let team = TEAM_MAX - rank.unwrap_or(TEAM_MAX).min(TEAM_MAX);
    let inside = (job.within_team.clamp(INSIDE_MIN, INSIDE_MAX) - INSIDE_MIN) as u32;
    let waited = now.saturating_sub(job.submit_s) / rules.age_unit_s.max(1);
    let age = waited.min(u64::from(AGE_MAX)) as u32;
    let value = (u32::from(allocated) << TIER_SHIFT) | (team << TEAM_SHIFT) | (inside << INSIDE_SHIFT) | age;
    Priority { value: value.max(1), allocated, planned: false, rank, team, inside, age }
}

impl Priority {
    /// The same job when the planner starts it now (or not): the plan bit.
    pub fn planned(self, starts_now: bool) -> Priority {
        let value = (self.value & !(1 << PLAN_SHIFT)) | (u32::from(starts_now) << PLAN_SHIFT);
        Priority { value: value.max(1), planned: starts_now, ..self }
    }
}

/// Decode a priority value into its fields (for sprio-like displays):
/// (allocated, planned now, team, inside, age).
pub fn decode(value: u32) -> (bool, bool, u32, i32, u32) {
    let allocated = value >> TIER_SHIFT == 1;
    let planned = (value >> PLAN_SHIFT) & 1 == 1;
    let team = (value >> TEAM_SHIFT) & TEAM_MAX;
    let inside = ((value >> INSIDE_SHIFT) & 0x3ff) as i32 + INSIDE_MIN;
    let age = value & AGE_MAX;
    (allocated, planned, team, inside, age)
}
