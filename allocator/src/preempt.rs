//! The preemption rule: may pending job P preempt running job V now?
//!
//! ```text
//! yes ⇔ P ≠ V ∧ P allocated ∧ V running ∧
//!       ( V unallocated
//!       ∨ ( V past its contract (this run's: [`Job::contract_left_s`])
//!         ∧ (V resumable ∨ V debug)                               nothing, or a short try, to lose
//!         ∧ ( same account:  P debug/quick, V neither, nice(P) ≤ nice(V)   the team's own order
//!           ∨ other account: Reclaim::take(P, g_P, V, g_V) ) ) )  the standing rule (entitlement.rs)
//! ```
//! Never inside a contract, and never an allocated job that cannot
//! checkpoint (unless it is a debug job): a requeue that throws away hours
//! or days of a run gives the cluster less than it restores (docs/design.md,
//! "Jobs that cannot checkpoint"). Once started such a job runs to its end;
//! a long one (past the contract maximum) is kept instead from *starting*
//! where it would hold GPUs another team is owed ([`long_start`]). Unallocated work is preemptible by any allocated
//! job at any time. Past its contract a job keeps its GPUs only while its
//! allocation still ranks it above the waiting work (Ai2's time-slicing):
//! inside a team only a debug or quick job takes one that is neither and
//! does not come before it by nice ([`PriorityRules::slices`]; a higher
//! priority alone orders the queue but never preempts) — and across teams
//! by where the two sides of the tree stand now ([`Reclaim::take`]: the
//! preemptor's side with its job must stand at least as well as every item
//! of the victim's side without the victim). Why no two teams can preempt each other in turn:
//! docs/design.md, rule 9 ("No ping-pong").
//!
//! Victim order among the eligible, first victim first ([`victim_rank`]):
//! 1. unallocated, then past-contract resumable, then past-contract
//!    debug jobs that cannot checkpoint (least work lost first);
//! 2. for a job that loses its work, GPU-minutes the requeue throws away,
//!    fewest first; for a resumable one (which loses nothing), fewest
//!    requeues so far, then least run;
//! 3. highest job id first (deterministic).
//!
//! Eligibility of many victims for one preemptor is cumulative
//! ([`eligible_victims`], [`VictimPool::for_preemptor`]): walking the
//! candidates in victim order, each is eligible only if the rule still holds
//! with every eligible one before it taken too, so *any* subset of the
//! eligible victims (Slurm takes those on the nodes it picks) keeps the
//! rule.

use crate::contract::ContractRules;
use crate::entitlement::{Entitlement, Reclaim, ReclaimRefusal, Refused};
use crate::job::Job;
use crate::priority::{PriorityRules, SliceKey};
use crate::tree::NodeId;
use crate::MINUTE_S;
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
    /// Same team, and the team's own order does not let the preemptor
    /// take the victim (only a debug or quick job takes one that is
    /// neither and does not come before it by nice).
    TeamOrder,
    /// The victim cannot checkpoint (allocated, not debug), past its
    /// contract: nobody takes it, since a requeue would throw away its run
    /// so far (`ran_s`); its time limit (at most the contract maximum, or
    /// it is a [`Refusal::LongJob`]) ends it.
    NotResumable {
        ran_s: u64,
    },
    /// The victim cannot checkpoint and may run longer than the contract
    /// maximum (a long job, [`ContractRules::is_long`]), past its contract
    /// (`ran_s` of its run so far): nobody takes it, since a requeue would
    /// throw away hours or days; [`long_start`] decides where it may start.
    LongJob {
        ran_s: u64,
    },
    /// The rules between two allocated teams said no.
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
/// deliberately absent: preemption weighs what every side runs *now*
/// against what it is owed (docs/design.md says why).
#[derive(Debug, Clone, Copy)]
pub struct Moment<'a> {
    /// What every side of the tree runs and is owed now (and which accounts
    /// are in the tree: allocated jobs).
    pub ent: &'a Entitlement,
    /// The team's own order: nice, then debug and quick jobs
    /// ([`PriorityRules::is_quick`]); the debug class.
    pub rules: &'a PriorityRules,
    /// The contract maximum (what makes a job that cannot checkpoint long).
    pub contracts: &'a ContractRules,
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
    let class = match victim_alone(victim, m) {
        Err(r) => return Decision::No(r),
        Ok(c) => c,
    };
    let answer = if class == VictimClass::Unallocated {
        Ok(())
    } else if preemptor.account == victim.account {
        inside(m.rules.slice_key(preemptor), m.rules.slice_key(victim))
    } else {
        let (p_node, v_node) = (m.ent.id(&preemptor.account), m.ent.id(&victim.account));
        across(&mut m.ent.reclaim(), preemptor, p_node, m, v_node, victim.units()).map(|_| ()).map_err(|r| Refusal::Reclaim(r.named(m.ent)))
    };
    match answer {
        Ok(()) => Decision::Yes(class),
        Err(r) => Decision::No(r),
    }
}

/// Same team: the team's own order ([`PriorityRules::slices`]).
fn inside(p_key: SliceKey, v_key: SliceKey) -> Result<(), Refusal> {
    if PriorityRules::slices(p_key, v_key) {
        Ok(())
    } else {
        Err(Refusal::TeamOrder)
    }
}

/// Between two accounts (their nodes, `p_node` the preemptor's), of a
/// victim another team may take ([`victim_alone`]): restoration
/// ([`Reclaim::take_units`]) for any preemptor; then, for a debug job,
/// time-slicing ([`Reclaim::slice`]). Both count on the same `reclaim`
/// (cumulative over one preemptor's victims).
#[inline]
fn across(
    reclaim: &mut Reclaim<'_>,
    p: &Job,
    p_node: Option<NodeId>,
    m: &Moment<'_>,
    v_node: Option<NodeId>,
    v_units: f64,
) -> Result<PreemptReason, Refused> {
    match reclaim.take_at(p_node, p.units(), v_node, v_units) {
        Ok(()) => Ok(PreemptReason::Restore),
        Err(r) if !slices_across(p, p_node, m) => Err(r),
        Err(_) => reclaim.slice_at(p_node, p.units(), v_node, v_units).map(|()| PreemptReason::TimeSlice),
    }
}

/// May `p` time-slice another team's work: a debug job whose GPUs fit its
/// team's debug allowance beside the team's debug jobs running
/// ([`Entitlement::debug_room`]; beyond it a debug job is ordinary work).
fn slices_across(p: &Job, p_node: Option<NodeId>, m: &Moment<'_>) -> bool {
    m.rules.is_debug(p) && p_node.is_some_and(|id| f64::from(p.gpus) <= m.ent.debug_room(id, m.rules) + 1e-9)
}

/// Which rule made a running job a victim of a preemptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PreemptReason {
    /// The victim was unallocated work (contract 0): any allocated job may take its GPUs.
    Unallocated,
    /// Restoration: the preemptor's side of the tree was below what it is owed now.
    Restore,
    /// Time-slicing past the victim's contract: a debug or quick job of
    /// the victim's own team (never a job of higher priority alone); or a
    /// debug job of a side that stays at or above its rate.
    TimeSlice,
}

impl PreemptReason {
    pub const ALL: [PreemptReason; 3] = [PreemptReason::Unallocated, PreemptReason::Restore, PreemptReason::TimeSlice];

    /// Its name in files and reports: `unallocated`, `restore`, `time_slice`.
    pub fn name(self) -> &'static str {
        match self {
            PreemptReason::Unallocated => "unallocated",
            PreemptReason::Restore => "restore",
            PreemptReason::TimeSlice => "time_slice",
        }
    }

    pub fn parse(s: &str) -> Option<PreemptReason> {
        PreemptReason::ALL.into_iter().find(|r| r.name() == s)
    }
}

/// The GPU-seconds a preemption at `now` throws away: the run so far of a
/// job that cannot checkpoint (× its GPUs' weight with GPU types); nothing
/// for a resumable one (the simulator's rule: a preempted run of a
/// resumable job is useful work).
pub fn lost_gpu_seconds(victim: &Job, now: u64) -> f64 {
    if victim.contract.resumable {
        return 0.0;
    }
    victim.start_s.map_or(0.0, |s| now.saturating_sub(s) as f64 * victim.units())
}

/// Protection the victim's runs have used at `now` (its run since the
/// scheduler last preempted it).
fn protection_used(v: &Job, now: u64) -> u64 {
    v.start_s.map_or(0, |s| v.earlier_run_s.saturating_add(now.saturating_sub(s)))
}

/// What the victim alone decides: `Err` = never a victim now (whoever
/// asks); `Ok(Unallocated)` = a victim for any allocated preemptor;
/// otherwise a victim if the preemptor's rule agrees.
fn victim_alone(victim: &Job, m: &Moment<'_>) -> Result<VictimClass, Refusal> {
    victim_alone_at(victim, m.ent.id(&victim.account), m)
}

/// [`victim_alone`] with the victim's node (`None`: outside the tree)
/// already looked up.
fn victim_alone_at(victim: &Job, node: Option<NodeId>, m: &Moment<'_>) -> Result<VictimClass, Refusal> {
    if victim.start_s.is_none() {
        return Err(Refusal::VictimNotRunning);
    }
    if !victim.is_allocated_at(node, m.ent) {
        return Ok(VictimClass::Unallocated);
    }
    let left = victim.contract_left_s(m.now);
    if left > 0 {
        return Err(Refusal::InsideContract(left));
    }
    if victim.contract.resumable {
        Ok(VictimClass::PastContractResumable)
    } else if !never_requeued(victim, true, m.rules) {
        // A debug job declares it is done within a short contract: past it,
        // nothing shields it, or a team could hold GPUs for hours behind the
        // debug class's favours.
        Ok(VictimClass::PastContract)
    } else if m.contracts.is_long(victim.contract, victim.time_limit_s) {
        Err(Refusal::LongJob { ran_s: protection_used(victim, m.now) })
    } else {
        Err(Refusal::NotResumable { ran_s: protection_used(victim, m.now) })
    }
}

/// Is `job` one Tally never requeues once it started: allocated (`allocated`:
/// [`Job::is_allocated`]), unable to checkpoint, not a debug job. The
/// rule's shield ([`Refusal::NotResumable`], [`Refusal::LongJob`]), stated
/// once for the tests and replays that check no such job was requeued.
pub fn never_requeued(job: &Job, allocated: bool, rules: &PriorityRules) -> bool {
    allocated && !job.contract.resumable && !rules.is_debug(job)
}

/// May a job start now, as far as [`long_start`] is concerned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LongStart {
    /// Not a long job that cannot checkpoint (or it is, and its GPUs are
    /// nobody's owed time): it starts like any other.
    Free,
    /// A long job that cannot checkpoint, held: its team already runs
    /// `running` GPUs (with its long jobs let go ahead of this one), its
    /// `fair` share of what is asked now or more, while `short_team` waits
    /// `short` GPUs below what it is owed.
    Held { running: f64, fair: f64, short_team: NodeId, short: f64 },
}

/// The start rule for a long job that cannot checkpoint ([`ContractRules::is_long`];
/// allocated, not debug), the other half of never taking one past its
/// contract ([`Refusal::LongJob`]):
///
/// ```text
/// held ⇔ J long ∧ running(team J) + ahead ≥ fair(team J) ∧ ∃ another team short now
/// ```
///
/// `fair` is the team's water-filled share of what every team asks now
/// (`TeamNow::fair`: its rate, plus what teams asking for less than
/// theirs leave). The job starts on its team's own share, or on GPUs no
/// other team asks for now; otherwise it waits, so it never holds for days
/// the GPUs another team is owed. What it may cost: a team idle when it
/// started, back later, waits for the job to end or for other GPUs
/// (docs/design.md measures it). `ahead_gpus`: the team's long jobs
/// let go before this one and not yet running (the plugin's tick lets go
/// several at once; the simulator starts each it lets go, so `ent` counts
/// it and `ahead_gpus` is 0).
pub fn long_start(job: &Job, ent: &Entitlement, ahead_gpus: f64, rules: &PriorityRules, contracts: &ContractRules) -> LongStart {
    long_start_asking(job, ent, ahead_gpus, 0.0, rules, contracts)
}

/// [`long_start`] with the team asking `more_gpus` beyond what `ent`
/// counts (a job submitted since `ent` was computed, and its team's others
/// since): its fair share is [`Entitlement::fair_with_more`].
pub fn long_start_asking(
    job: &Job,
    ent: &Entitlement,
    ahead_gpus: f64,
    more_gpus: f64,
    rules: &PriorityRules,
    contracts: &ContractRules,
) -> LongStart {
    let Some(id) = ent.id(&job.account) else { return LongStart::Free };
    if !job.is_allocated_at(Some(id), ent) || !contracts.is_long(job.contract, job.time_limit_s) || rules.is_debug(job) {
        return LongStart::Free;
    }
    let t = ent.team_at(id);
    let fair = ent.fair_with_more(id, more_gpus);
    let running = t.running + ahead_gpus.max(0.0);
    if running + 1e-9 < fair {
        return LongStart::Free;
    }
    match ent.most_short_besides(id) {
        Some((short_team, short)) => LongStart::Held { running, fair, short_team, short },
        None => LongStart::Free,
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
    /// Where the victims run ([`VictimPool::placed`]); empty: not known.
    nodes: Nodes,
}

/// The cluster's nodes as the scheduler sees them when it preempts: each
/// node's GPUs and how many of them are free, by node index (the index a
/// victim's placement names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nodes {
    pub size: Vec<u32>,
    pub free: Vec<u32>,
    /// The debug capacity's nodes ([`PriorityRules::may_use_debug_nodes`]):
    /// there a debug job of a team within its debug allowance takes any
    /// debug job past its contract, whatever its team.
    pub debug: Vec<bool>,
}

#[derive(Debug, Clone)]
struct Victim<H> {
    /// [`victim_rank`] without the preemptor's fit.
    rank: u32,
    gpus: u32,
    id: u64,
    handle: H,
    account: Arc<str>,
    /// Its account's node (`None`: outside the tree).
    node: Option<NodeId>,
    /// Budget units ([`Job::units`]).
    units: f64,
    /// Allocated: the rule decides for each preemptor.
    needs_reclaim: bool,
    /// Its place in its team's order ([`PriorityRules::slice_key`]).
    slice: SliceKey,
    /// Where it holds its GPUs: (node index, GPUs); empty: not known.
    at: Vec<(u32, u32)>,
    /// A debug job on a node of the debug capacity.
    debug_there: bool,
}

impl<H: Copy> VictimPool<H> {
    pub fn new<'a>(running: impl IntoIterator<Item = (H, &'a Job)>, m: &Moment<'_>) -> VictimPool<H> {
        Self::placed(running.into_iter().map(|(h, j)| (h, j, &[][..])), Nodes::default(), m)
    }

    /// [`VictimPool::new`] knowing where each job runs (node index, GPUs)
    /// and the nodes: a preemptor's victims then come node by node, whole
    /// nodes that could host it first ([`VictimPool::for_preemptor_why`]).
    pub fn placed<'a, 'p>(running: impl IntoIterator<Item = (H, &'a Job, &'p [(u32, u32)])>, nodes: Nodes, m: &Moment<'_>) -> VictimPool<H> {
        let running = running.into_iter();
        let mut victims: Vec<Victim<H>> = Vec::with_capacity(running.size_hint().0);
        victims.extend(running.filter_map(|(h, v, at)| {
            let node = m.ent.id(&v.account);
            let e = victim_alone_at(v, node, m).ok()?;
            Some(Victim {
                rank: rank(e as u32, side(node, m.ent), v, None, m.now),
                gpus: v.gpus,
                id: v.id,
                handle: h,
                account: v.account.clone(),
                node,
                units: v.units(),
                needs_reclaim: e != VictimClass::Unallocated,
                slice: m.rules.slice_key(v),
                at: at.to_vec(),
                debug_there: m.rules.is_debug(v) && at.iter().any(|&(n, _)| nodes.debug.get(n as usize).copied().unwrap_or(false)),
            })
        }));
        victims.sort_by_key(|v| (v.rank, std::cmp::Reverse(v.id)));
        VictimPool { victims, nodes }
    }

    pub fn is_empty(&self) -> bool {
        self.victims.is_empty()
    }

    /// The victims of `preemptor`, in victim order, cumulatively eligible.
    pub fn for_preemptor(&self, preemptor: &Job, m: &Moment<'_>) -> Vec<H> {
        self.for_preemptor_why(preemptor, m).into_iter().map(|(h, _)| h).collect()
    }

    /// [`VictimPool::for_preemptor`], each victim with the rule that made it one.
    ///
    /// The victims are walked in this preemptor's victim order ([`victim_rank`]
    /// with its fit), each admitted only if the rule still holds with every
    /// one admitted before it gone. When the pool knows where jobs run
    /// ([`VictimPool::placed`]), whole nodes come first: a node whose free
    /// GPUs and victims could host the preemptor (for a preemptor larger
    /// than a node, a node its victims would empty) is admitted with all of
    /// its victims or not at all, nodes in the order of their last victim;
    /// then the other victims one by one. Admitting victims scattered over
    /// nodes where the preemptor cannot fit would spend what the rule lets
    /// it take on GPUs it cannot use.
    pub fn for_preemptor_why(&self, preemptor: &Job, m: &Moment<'_>) -> Vec<(H, PreemptReason)> {
        let p_node = m.ent.id(&preemptor.account);
        if !preemptor.is_allocated_at(p_node, m.ent) {
            return Vec::new();
        }
        let mut reclaim = m.ent.reclaim();
        let slice = m.rules.slice_key(preemptor);
        // In this preemptor's order: the closest in size first (ties in
        // the pool's order, by position).
        let mut order: Vec<(u32, std::cmp::Reverse<u64>, usize)> = self
            .victims
            .iter()
            .enumerate()
            .filter(|(_, v)| v.id != preemptor.id)
            .map(|(k, v)| (v.rank | FIT.put(fit(v.gpus, Some(preemptor.gpus))), std::cmp::Reverse(v.id), k))
            .collect();
        order.sort_unstable();
        let order: Vec<usize> = order.into_iter().map(|(_, _, k)| k).collect();
        // A debug job within its team's allowance owns the debug capacity:
        // there it takes any debug job past its contract.
        let owns_debug_nodes = slices_across(preemptor, p_node, m);
        let admit = |v: &Victim<H>, reclaim: &mut Reclaim<'_>| -> Option<PreemptReason> {
            if !v.needs_reclaim {
                Some(PreemptReason::Unallocated)
            } else if owns_debug_nodes && v.debug_there {
                Some(PreemptReason::TimeSlice)
            } else if v.account == preemptor.account {
                inside(slice, v.slice).is_ok().then_some(PreemptReason::TimeSlice)
            } else {
                across(reclaim, preemptor, p_node, m, v.node, v.units).ok()
            }
        };
        let mut out = Vec::new();
        let mut taken = vec![false; self.victims.len()];
        for group in self.whole_nodes(&order, preemptor.gpus) {
            let mut trial = reclaim.clone();
            let mut whys = Vec::with_capacity(group.len());
            for &k in &group {
                match admit(&self.victims[k], &mut trial) {
                    Some(w) => whys.push((k, w)),
                    None => break,
                }
            }
            if whys.len() == group.len() {
                reclaim = trial;
                for (k, w) in whys {
                    taken[k] = true;
                    out.push((self.victims[k].handle, w));
                }
            }
        }
        for k in order {
            if !taken[k] {
                if let Some(w) = admit(&self.victims[k], &mut reclaim) {
                    out.push((self.victims[k].handle, w));
                }
            }
        }
        out
    }

    /// For each node that could host a preemptor of `gpus` GPUs (for one
    /// larger than a node: that its victims would empty), the fewest of its
    /// victims, in victim order, whose GPUs there with the node's free ones
    /// make room (positions in the pool); nodes by the place in `order` of
    /// the last victim they need, a victim already in an earlier node's
    /// group not repeated. Empty when placements are not known.
    fn whole_nodes(&self, order: &[usize], gpus: u32) -> Vec<Vec<usize>> {
        let n = self.nodes.size.len();
        if n == 0 {
            return Vec::new();
        }
        // Per node: its victims in order, with the GPUs each holds there.
        let mut members: Vec<Vec<(usize, u32)>> = vec![Vec::new(); n];
        for &k in order {
            for &(node, g) in &self.victims[k].at {
                if let Some(m) = members.get_mut(node as usize) {
                    m.push((k, g));
                }
            }
        }
        let mut place = vec![0usize; self.victims.len()];
        for (p, &k) in order.iter().enumerate() {
            place[k] = p;
        }
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, m) in members.iter().enumerate() {
            let (size, free) = (self.nodes.size[i], self.nodes.free.get(i).copied().unwrap_or(0));
            let need = gpus.min(size);
            let mut room = free;
            let mut group = Vec::new();
            for &(k, g) in m {
                if room >= need {
                    break;
                }
                room += g;
                group.push(k);
            }
            if room >= need && !group.is_empty() {
                groups.push((group.iter().map(|&k| place[k]).max().unwrap_or(0), group));
            }
        }
        groups.sort_unstable();
        let mut seen = vec![false; self.victims.len()];
        groups
            .into_iter()
            .map(|(_, g)| g.into_iter().filter(|&k| !std::mem::replace(&mut seen[k], true)).collect::<Vec<_>>())
            .filter(|g| !g.is_empty())
            .collect()
    }
}

const CLASS: crate::priority::Field = crate::priority::Field { shift: 30, bits: 2 };
const SIDE: crate::priority::Field = crate::priority::Field { shift: 24, bits: 6 };
const FIT: crate::priority::Field = crate::priority::Field { shift: 18, bits: 6 };
const LOSS: crate::priority::Field = crate::priority::Field { shift: 0, bits: 18 };
/// Steps of the side field per unit of share (running ÷ rate).
const SIDE_STEPS: f64 = 8.0;

/// The victim order as one number, lowest taken first, for a preemptor of
/// `preemptor_gpus` GPUs (`None`: not known, every victim fits as well):
///
/// ```text
///  31..30  class  0 unallocated, 1 past contract & resumable,
///                 2 past contract (debug), 3 not a victim now (inside its
///                 contract, or it cannot checkpoint)
///  29..24  side   63 − min(63, ⌊8 · running ÷ rate⌋) of the victim's team:
///                 the most over-served team first (+∞ without a rate),
///                 as KAI and Kueue reclaim from the queue furthest over
///                 its share first
///  23..18  fit    |victim's GPUs − preemptor's GPUs|, saturating at 63:
///                 the victim closest in size first (a 1-GPU debug job
///                 takes a 1-GPU job before it requeues an 8-GPU one)
///  17..0   loss   not resumable: GPU-minutes the requeue throws away
///                 (gpus × minutes run; × the GPUs' weight with GPU
///                 types, [`crate::gpu_types`]), saturating;
///                 resumable: requeues so far (6 bits) above minutes run
///                 (12 bits), both saturating
/// ```
/// [`may_preempt`] decides who is eligible, this number only orders the
/// eligible (Slurm sorts the candidates it found for one preemptor by it,
/// `PREEMPT_DATA_PRIO`, ascending).
pub fn victim_rank(victim: &Job, preemptor_gpus: Option<u32>, m: &Moment<'_>) -> u32 {
    let class: u32 = match victim_alone(victim, m) {
        Ok(c) => c as u32,
        Err(_) => 3,
    };
    rank(class, side(m.ent.id(&victim.account), m.ent), victim, preemptor_gpus, m.now)
}

/// [`victim_rank`] of a victim of class `class` whose team's side field is `side`.
fn rank(class: u32, side: u32, victim: &Job, preemptor_gpus: Option<u32>, now: u64) -> u32 {
    CLASS.put(class) | SIDE.put(side) | FIT.put(fit(victim.gpus, preemptor_gpus)) | LOSS.put(loss(victim, now))
}

/// [`victim_rank`]'s side field of a victim of node `node` (`None`:
/// outside the tree, no rate).
fn side(node: Option<NodeId>, ent: &Entitlement) -> u32 {
    let share = node.map_or(f64::INFINITY, |id| {
        let t = ent.team_at(id);
        if t.rate > 0.0 {
            t.running / t.rate
        } else {
            f64::INFINITY
        }
    });
    let over = (SIDE_STEPS * share).floor().clamp(0.0, f64::from(SIDE.max())) as u32;
    SIDE.max() - over
}

fn fit(victim_gpus: u32, preemptor_gpus: Option<u32>) -> u32 {
    preemptor_gpus.map_or(0, |p| victim_gpus.abs_diff(p))
}

/// [`victim_rank`]'s loss field.
fn loss(victim: &Job, now: u64) -> u32 {
    let minutes = victim.start_s.map_or(0, |s| now.saturating_sub(s) / MINUTE_S);
    if victim.contract.resumable {
        (victim.restarts.min(63) << 12) | minutes.min((1 << 12) - 1) as u32
    } else {
        let lost = if victim.weight.is_one() {
            minutes.saturating_mul(u64::from(victim.gpus))
        } else {
            (minutes as f64 * victim.units()).round().min(u64::MAX as f64) as u64
        };
        lost.min(u64::from(LOSS.max())) as u32
    }
}
