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

use crate::fairshare::{FairShare, RankKey};
use crate::job::Job;
use std::cmp::Ordering;

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

fn over_allocation(job: &Job, fs: &FairShare) -> RankKey {
    fs.standing(&job.account).map(|s| s.key).unwrap_or(RankKey::new(0.0, f64::INFINITY))
}

/// Sort eligible victims (those with `Decision::Yes`) into the order in which
/// they should be taken. Victims for which the rule says no are put last, in
/// id order, so a caller that forgot to filter still never takes them first.
pub fn order_victims(preemptor: &Job, victims: &mut [Job], fs: &FairShare, now: u64) {
    let class = |v: &Job| match may_preempt(preemptor, v, fs, now) {
        Decision::Yes(c) => c as u8,
        Decision::No(_) => u8::MAX,
    };
    victims.sort_by(|a, b| {
        let (ka, kb) = (over_allocation(a, fs), over_allocation(b, fs));
        class(a)
            .cmp(&class(b))
            // 2: most over-allocated first: reverse of the fair-share order.
            .then_with(|| kb.class.cmp(&ka.class).then(kb.ratio.total_cmp(&ka.ratio)))
            // 3: youngest first.
            .then_with(|| b.start_s.cmp(&a.start_s))
            .then_with(|| b.id.cmp(&a.id))
            .then(Ordering::Equal)
    });
}
