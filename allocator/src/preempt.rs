//! The preemption rule: may pending job P preempt running job V now?
//!
//! ```text
//! yes ⇔ P ≠ V ∧ P allocated ∧ V running ∧
//!       ( V unallocated
//!       ∨ ( now ≥ start(V) + contract(V)                       past its contract
//!         ∧ (V resumable ∨ restarts(V) < max_requeues)         requeue budget left
//!         ∧ Reclaim::take(team P, g_P, team V, g_V) ) )        restorative (entitlement.rs)
//! ```
//! Never inside a contract. Unallocated work is preemptible by any allocated
//! job at any time. Between allocated jobs, preemption only *restores*
//! entitlement: the preemptor's side of the tree (where the two teams'
//! paths part) must be below its rate, the victim's side must stay at or
//! above its rate after losing the victim (and every victim taken before it
//! for the same preemptor), and the preemptor's side must end with a share
//! (`running / rate`) no higher than the victim's side keeps — KAI's
//! reclaim-to-deserved-quota and Kueue's "less than or equal to final
//! share". A team never preempts itself. A non-resumable job that was
//! already requeued `max_requeues` times is protected to its end, so no job
//! can be requeued forever. Why no two teams can preempt each other in
//! turn: docs/design.md, "Restorative preemption".
//!
//! Victim order among the eligible, first victim first ([`victim_rank`]):
//! 1. unallocated, then past-contract resumable, then past-contract
//!    non-resumable (least work lost first);
//! 2. for a job that loses its work, GPU-minutes the requeue throws away,
//!    fewest first; for a resumable one (which loses nothing), fewest
//!    requeues so far, then least run;
//! 3. highest job id first (deterministic).
//!
//! Eligibility of many victims for one preemptor is cumulative
//! ([`eligible_victims`], [`VictimPool::for_preemptor`]): walking the
//! candidates in victim order, each is eligible only if the rule still holds
//! with every eligible one before it taken too, so *any* subset of the
//! eligible victims (Slurm takes those on the nodes it picks) keeps every
//! side at or above its rate.

use crate::entitlement::{Entitlement, ReclaimRefusal};
use crate::job::Job;
use std::sync::Arc;

/// Why a victim may be taken (its place in step 1 of the victim order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VictimClass {
    Unallocated = 0,
    PastContractResumable = 1,
    PastContract = 2,
}

/// Why not.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    SameJob,
    PreemptorUnallocated,
    VictimNotRunning,
    /// Seconds of contract left.
    InsideContract(u64),
    /// A non-resumable job already requeued this many times (≥ `max_requeues`).
    RequeuesSpent(u32),
    /// The restorative rule between two allocated teams said no.
    Reclaim(ReclaimRefusal),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Yes(VictimClass),
    No(Refusal),
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Yes(_))
    }
}

/// Everything the rule reads besides the two jobs. The 7-day ranking is
/// deliberately absent: preemption restores what is owed *now*.
#[derive(Debug, Clone, Copy)]
pub struct Moment<'a> {
    /// What every side of the tree runs and is owed now (and which accounts
    /// are in the tree: allocated jobs).
    pub ent: &'a Entitlement,
    /// `contracts.max_requeues`.
    pub max_requeues: u32,
    /// Unix seconds.
    pub now: u64,
}

/// The rule for one pair, with no other victim taken.
pub fn may_preempt(preemptor: &Job, victim: &Job, m: &Moment<'_>) -> Decision {
    if preemptor.id == victim.id {
        return Decision::No(Refusal::SameJob);
    }
    if !preemptor.is_allocated(m.ent) {
        return Decision::No(Refusal::PreemptorUnallocated);
    }
    match victim_alone(victim, m) {
        Err(r) => Decision::No(r),
        Ok(VictimClass::Unallocated) => Decision::Yes(VictimClass::Unallocated),
        Ok(class) => match m.ent.reclaim().take_units(&preemptor.account, preemptor.units(), &victim.account, victim.units()) {
            Ok(()) => Decision::Yes(class),
            Err(e) => Decision::No(Refusal::Reclaim(e)),
        },
    }
}

/// What the victim alone decides: `Err` = never a victim now (whoever
/// asks); `Ok(Unallocated)` = a victim for any allocated preemptor;
/// otherwise a victim if the restorative rule agrees.
fn victim_alone(victim: &Job, m: &Moment<'_>) -> Result<VictimClass, Refusal> {
    if victim.start_s.is_none() {
        return Err(Refusal::VictimNotRunning);
    }
    if !victim.is_allocated(m.ent) {
        return Ok(VictimClass::Unallocated);
    }
    let left = victim.contract_left_s(m.now);
    if left > 0 {
        return Err(Refusal::InsideContract(left));
    }
    if victim.contract.resumable {
        Ok(VictimClass::PastContractResumable)
    } else if victim.restarts >= m.max_requeues {
        Err(Refusal::RequeuesSpent(victim.restarts))
    } else {
        Ok(VictimClass::PastContract)
    }
}

/// The running jobs `preemptor` may preempt, in the order they should go,
/// each eligible with all the eligible ones before it taken: the batch form
/// for schedulers that ask for many candidates at once.
pub fn eligible_victims<'a>(preemptor: &Job, running: impl IntoIterator<Item = &'a Job>, m: &Moment<'_>) -> Vec<&'a Job> {
    let running: Vec<&'a Job> = running.into_iter().collect();
    let pool = VictimPool::new(running.iter().enumerate().map(|(i, j)| (i, *j)), m);
    pool.for_preemptor(preemptor, m).into_iter().map(|i| running[i]).collect()
}

/// Running jobs that are victims for *someone* at one moment, in victim
/// order, built once and asked for many preemptors. `H` is the caller's
/// handle for a job (an index, an id).
#[derive(Debug, Clone)]
pub struct VictimPool<H> {
    victims: Vec<Victim<H>>,
}

#[derive(Debug, Clone)]
struct Victim<H> {
    rank: u32,
    id: u64,
    handle: H,
    account: Arc<str>,
    /// Budget units ([`Job::units`]).
    units: f64,
    /// Allocated: the restorative rule decides for each preemptor.
    needs_reclaim: bool,
}

impl<H: Copy> VictimPool<H> {
    pub fn new<'a>(running: impl IntoIterator<Item = (H, &'a Job)>, m: &Moment<'_>) -> VictimPool<H> {
        let mut victims: Vec<Victim<H>> = running
            .into_iter()
            .filter_map(|(h, v)| {
                let class = victim_alone(v, m).ok()?;
                Some(Victim {
                    rank: victim_rank(v, m),
                    id: v.id,
                    handle: h,
                    account: v.account.clone(),
                    units: v.units(),
                    needs_reclaim: class != VictimClass::Unallocated,
                })
            })
            .collect();
        victims.sort_by_key(|v| (v.rank, std::cmp::Reverse(v.id)));
        VictimPool { victims }
    }

    pub fn is_empty(&self) -> bool {
        self.victims.is_empty()
    }

    /// The victims of `preemptor`, in victim order, cumulatively eligible.
    pub fn for_preemptor(&self, preemptor: &Job, m: &Moment<'_>) -> Vec<H> {
        if !preemptor.is_allocated(m.ent) {
            return Vec::new();
        }
        let mut reclaim = m.ent.reclaim();
        self.victims
            .iter()
            .filter(|v| v.id != preemptor.id)
            .filter(|v| !v.needs_reclaim || reclaim.take_units(&preemptor.account, preemptor.units(), &v.account, v.units).is_ok())
            .map(|v| v.handle)
            .collect()
    }
}

const CLASS: crate::priority::Field = crate::priority::Field { shift: 30, bits: 2 };
const LOSS: crate::priority::Field = crate::priority::Field { shift: 0, bits: 30 };

/// The victim order as one number, lowest taken first:
///
/// ```text
///  31..30  class  0 unallocated, 1 past contract & resumable,
///                 2 past contract, 3 not a victim now (inside its contract,
///                 requeues spent)
///  29..0   loss   not resumable: GPU-minutes the requeue throws away
///                 (gpus × minutes run; × the GPUs' weight with GPU
///                 types, [`crate::gpu_types`]), saturating;
///                 resumable: requeues so far (10 bits) above minutes run
///                 (20 bits), both saturating
/// ```
/// Independent of the preemptor: [`may_preempt`] decides who is eligible,
/// this number only orders the eligible (Slurm sorts its candidates by it,
/// `PREEMPT_DATA_PRIO`, ascending).
pub fn victim_rank(victim: &Job, m: &Moment<'_>) -> u32 {
    let class: u32 = match victim_alone(victim, m) {
        Ok(c) => c as u32,
        Err(_) => 3,
    };
    let minutes = victim.start_s.map_or(0, |s| m.now.saturating_sub(s) / 60);
    let loss = if victim.contract.resumable {
        (victim.restarts.min(1023) << 20) | minutes.min((1 << 20) - 1) as u32
    } else {
        let lost = if victim.weight.is_one() {
            minutes.saturating_mul(u64::from(victim.gpus))
        } else {
            (minutes as f64 * victim.units()).round().min(u64::MAX as f64) as u64
        };
        lost.min(u64::from(LOSS.max())) as u32
    };
    CLASS.put(class) | LOSS.put(loss)
}
