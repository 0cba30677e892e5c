//! The preemption rule: may pending job P preempt running job V?
//!
//! ```text
//! yes ⇔ P ≠ V ∧ P allocated ∧ V running ∧
//!       ( V unallocated
//!       ∨ (now ≥ start(V) + contract(V) ∧ rank(team(V)) > rank(team(P))) )
//! ```
//! Never inside a contract: an allocated job that has run less than its
//! contract is not a victim for anyone. "Ranks below" means a worse (higher)
//! fair-share rank *now*, so the same team never preempts itself.
//!
//! Victim order among the eligible, first victim first:
//! 1. unallocated, then past-contract resumable, then past-contract
//!    non-resumable;
//! 2. most over-allocated team first (ratio descending);
//! 3. youngest first (latest start);
//! 4. highest job id first (deterministic).
//!
//! Steps 1–3 are packed into one number, [`victim_rank`] (lowest taken
//! first), because that is how Slurm asks a preempt plugin to order its
//! candidates (`PREEMPT_DATA_PRIO`, sorted ascending).

use crate::fairshare::FairShare;
use crate::job::Job;

/// Why a victim may be taken (its place in step 1 of the victim order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VictimClass {
    Unallocated = 0,
    PastContractResumable = 1,
    PastContract = 2,
}

/// Why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    SameJob,
    PreemptorUnallocated,
    VictimNotRunning,
    /// Seconds of contract left.
    InsideContract(u64),
    VictimTeamNotBelow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Yes(VictimClass),
    No(Refusal),
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Yes(_))
    }
}

/// The rule. `now` is unix seconds.
pub fn may_preempt(preemptor: &Job, victim: &Job, fs: &FairShare, now: u64) -> Decision {
    if preemptor.id == victim.id {
        return Decision::No(Refusal::SameJob);
    }
    if !preemptor.is_allocated(fs) {
        return Decision::No(Refusal::PreemptorUnallocated);
    }
    if victim.start_s.is_none() {
        return Decision::No(Refusal::VictimNotRunning);
    }
    if !victim.is_allocated(fs) {
        return Decision::Yes(VictimClass::Unallocated);
    }
    let left = victim.contract_left_s(now);
    if left > 0 {
        return Decision::No(Refusal::InsideContract(left));
    }
    // Both accounts are in the tree (both allocated).
    let rank = |j: &Job| fs.standing(&j.account).map(|s| s.rank).unwrap_or(u32::MAX);
    if rank(victim) <= rank(preemptor) {
        return Decision::No(Refusal::VictimTeamNotBelow);
    }
    Decision::Yes(if victim.contract.resumable {
        VictimClass::PastContractResumable
    } else {
        VictimClass::PastContract
    })
}

const CLASS_SHIFT: u32 = 30;
const TEAM_SHIFT: u32 = 18;
const TEAM_MAX: u32 = (1 << 12) - 1;
const AGE_MAX: u64 = (1 << 18) - 1;

/// The victim order as one number, lowest taken first:
///
/// ```text
///  31..30  class  0 unallocated, 1 past contract & resumable,
///                 2 past contract, 3 inside its contract
///  29..18  team   position of its account, most over-allocated first
///                 (saturating at 4095; 0 outside the tree)
///  17..0   age    minutes since it started, saturating (youngest first)
/// ```
/// Independent of the preemptor: [`may_preempt`] decides who is eligible,
/// this number only orders the eligible.
pub fn victim_rank(victim: &Job, fs: &FairShare, now: u64) -> u32 {
    let class: u32 = if !victim.is_allocated(fs) {
        0
    } else if victim.contract_left_s(now) > 0 {
        3
    } else if victim.contract.resumable {
        1
    } else {
        2
    };
    let team = fs.over_allocation_position(&victim.account).unwrap_or(0).min(TEAM_MAX);
    let age = victim.start_s.map_or(0, |s| now.saturating_sub(s) / 60).min(AGE_MAX) as u32;
    (class << CLASS_SHIFT) | (team << TEAM_SHIFT) | age
}

/// Sort eligible victims (those with `Decision::Yes`) into the order in which
/// they should be taken: by [`victim_rank`], then highest job id. Victims for
/// which the rule says no are put last, so a caller that forgot to filter
/// still never takes them first.
pub fn order_victims(preemptor: &Job, victims: &mut [Job], fs: &FairShare, now: u64) {
    victims.sort_by_cached_key(|v| {
        (!may_preempt(preemptor, v, fs, now).allowed(), victim_rank(v, fs, now), std::cmp::Reverse(v.id))
    });
}
