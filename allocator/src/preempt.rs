//! The preemption rule: may pending job P preempt running job V?
//!
//! ```text
//! yes ⇔ P ≠ V ∧ P allocated ∧ V running ∧
//!       ( V unallocated
//!       ∨ (now ≥ start(V) + contract(V) ∧ team(P) outranks team(V)) )
//! ```
//! Never inside a contract: an allocated job that has run less than its
//! contract is not a victim for anyone. "Outranks" means a strictly better
//! fair-share standing *now* ([`FairShare::outranks`]: at the level where the
//! two teams' paths part, a strictly lower funding class or `used /
//! allocated`). Deliberately, a rank that differs only by the name
//! tie-break is not enough: two teams at equal ratios would otherwise take
//! turns preempting each other every contract. The same team never preempts
//! itself.
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
    victim_side(preemptor, victim, fs, now)
}

/// What the victim alone decides: `Err` = never a victim now (whoever
/// asks); `Ok(None)` = a victim for any allocated preemptor (unallocated);
/// `Ok(Some(class))` = a victim for a preemptor whose team outranks its own.
fn victim_alone(victim: &Job, fs: &FairShare, now: u64) -> Result<Option<VictimClass>, Refusal> {
    if victim.start_s.is_none() {
        return Err(Refusal::VictimNotRunning);
    }
    if !victim.is_allocated(fs) {
        return Ok(None);
    }
    let left = victim.contract_left_s(now);
    if left > 0 {
        return Err(Refusal::InsideContract(left));
    }
    Ok(Some(if victim.contract.resumable { VictimClass::PastContractResumable } else { VictimClass::PastContract }))
}

/// The victim's half of the rule, for an allocated preemptor.
fn victim_side(preemptor: &Job, victim: &Job, fs: &FairShare, now: u64) -> Decision {
    if preemptor.id == victim.id {
        return Decision::No(Refusal::SameJob);
    }
    match victim_alone(victim, fs, now) {
        Err(r) => Decision::No(r),
        Ok(None) => Decision::Yes(VictimClass::Unallocated),
        // Both accounts are in the tree (both allocated).
        Ok(Some(_)) if !fs.outranks(&preemptor.account, &victim.account) => Decision::No(Refusal::VictimTeamNotBelow),
        Ok(Some(class)) => Decision::Yes(class),
    }
}

/// The running jobs `preemptor` may preempt ([`may_preempt`] says yes), in
/// the order they should go ([`victim_rank`], then highest id): the batch
/// form for schedulers that ask for many candidates at once.
pub fn eligible_victims<'a>(preemptor: &Job, running: impl IntoIterator<Item = &'a Job>, fs: &FairShare, now: u64) -> Vec<&'a Job> {
    let running: Vec<&'a Job> = running.into_iter().collect();
    let pool = VictimPool::new(running.iter().enumerate().map(|(i, j)| (i, *j)), fs, now);
    pool.for_preemptor(preemptor, fs).into_iter().map(|i| running[i]).collect()
}

/// Running jobs that are victims for *someone* at `now`, in victim order,
/// built once and asked for many preemptors: [`may_preempt`]'s rule with
/// the victim's half evaluated once per victim. `H` is the caller's handle
/// for a job (an index, an id).
#[derive(Debug, Clone)]
pub struct VictimPool<H> {
    /// (victim rank, highest id first, id, handle, account index when the
    /// preemptor must outrank it)
    victims: Vec<Victim<H>>,
}

/// (victim rank, highest id first, id, handle, account index when the
/// preemptor must outrank it)
type Victim<H> = (u32, std::cmp::Reverse<u64>, u64, H, Option<usize>);

impl<H: Copy> VictimPool<H> {
    pub fn new<'a>(running: impl IntoIterator<Item = (H, &'a Job)>, fs: &FairShare, now: u64) -> VictimPool<H> {
        let mut victims: Vec<_> = running
            .into_iter()
            .filter_map(|(h, v)| match victim_alone(v, fs, now) {
                Err(_) => None,
                Ok(class) => {
                    let needs = class.map(|_| fs.account_index(&v.account).unwrap_or(usize::MAX));
                    Some((victim_rank(v, fs, now), std::cmp::Reverse(v.id), v.id, h, needs))
                }
            })
            .collect();
        victims.sort_by_key(|&(r, id, _, _, _)| (r, id));
        VictimPool { victims }
    }

    pub fn is_empty(&self) -> bool {
        self.victims.is_empty()
    }

    /// The victims of `preemptor`, in victim order.
    pub fn for_preemptor(&self, preemptor: &Job, fs: &FairShare) -> Vec<H> {
        if !preemptor.is_allocated(fs) {
            return Vec::new();
        }
        let Some(p) = fs.account_index(&preemptor.account) else { return Vec::new() };
        self.victims
            .iter()
            .filter(|&&(_, _, id, _, needs)| id != preemptor.id && needs.is_none_or(|v| fs.outranks_index(p, v)))
            .map(|&(_, _, _, h, _)| h)
            .collect()
    }
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
