//! Host drain that honours contracts (Ai2): when an admin drains a node,
//! each job on it is requeued as soon as its contract has passed, never
//! inside one, so the node empties as fast as the contracts allow.
//!
//! ```text
//! requeue V now ⇔ V running on a draining node ∧
//!                 ( V unallocated ∨ now ≥ start(V) + contract(V) )
//! ```
//!
//! The contract is the one [`Job::contract_left_s`] counts (over all of a
//! job's runs, as preemption does). Unlike preemption, a drain is the
//! admin's and restores nothing between teams: the restorative rule does
//! not apply, and neither does preemption's shield for an allocated job
//! that cannot checkpoint (never requeued past its contract, preempt.rs),
//! or such a job would keep a sick node busy to its time limit. Among
//! the jobs a drain requeues at one moment: unallocated first, then
//! resumable (they lose nothing), then the rest (the order of
//! [`crate::VictimClass`]); ties by job id.

use crate::job::{Job, KnownAccounts};
use crate::preempt::VictimClass;
use std::sync::Arc;

/// A running job on draining nodes.
#[derive(Debug, Clone, Copy)]
pub struct OnDraining<'a> {
    pub job: &'a Job,
    /// The draining nodes it runs on.
    pub nodes: &'a [Arc<str>],
}

/// A job the drain waits for, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub job_id: u64,
    pub nodes: Vec<Arc<str>>,
    /// Unix seconds its contract ends.
    pub until_s: u64,
}

/// What a drain does now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    /// Jobs to requeue now, in order, with why.
    pub requeue: Vec<(u64, VictimClass)>,
    /// Jobs inside their contracts, soonest end first.
    pub waiting: Vec<Waiting>,
}

/// The drain rule for the jobs on draining nodes at `now`.
pub fn drain_plan(jobs: &[OnDraining<'_>], accounts: &impl KnownAccounts, now: u64) -> DrainPlan {
    let mut plan = DrainPlan::default();
    for d in jobs {
        let j = d.job;
        if j.start_s.is_none() {
            continue;
        }
        let class = if !j.is_allocated(accounts) {
            VictimClass::Unallocated
        } else {
            match j.contract_left_s(now) {
                0 if j.contract.resumable => VictimClass::PastContractResumable,
                0 => VictimClass::PastContract,
                left => {
                    plan.waiting.push(Waiting { job_id: j.id, nodes: d.nodes.to_vec(), until_s: now + left });
                    continue;
                }
            }
        };
        plan.requeue.push((j.id, class));
    }
    plan.requeue.sort_by_key(|&(id, class)| (class, id));
    plan.waiting.sort_by_key(|w| (w.until_s, w.job_id));
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Contract;

    struct Funded;
    impl KnownAccounts for Funded {
        fn knows(&self, account: &str) -> bool {
            account == "nlp"
        }
    }

    fn running(id: u64, contract_s: u64, resumable: bool, start: u64) -> Job {
        let mut j = Job::new(id, "nlp", "u");
        j.contract = Contract::new(contract_s, resumable);
        j.start_s = Some(start);
        j
    }

    #[test]
    fn nothing_inside_a_contract_and_everything_at_its_end() {
        let n: Vec<Arc<str>> = vec!["n1".into()];
        let a = running(1, 3600, false, 1000);
        let b = running(2, 600, true, 1000);
        let c = running(3, 600, false, 1000);
        let mut free = running(4, 0, false, 1000);
        free.account = "nobody".into();
        let on: Vec<OnDraining> = [&a, &b, &c, &free].into_iter().map(|job| OnDraining { job, nodes: &n }).collect();
        // Before any contract ends only the unallocated job goes.
        let p = drain_plan(&on, &Funded, 1000 + 599);
        assert_eq!(p.requeue, vec![(4, VictimClass::Unallocated)]);
        assert_eq!(p.waiting.iter().map(|w| (w.job_id, w.until_s)).collect::<Vec<_>>(), vec![(2, 1600), (3, 1600), (1, 4600)]);
        // At the end of the 10-minute contracts: resumable first, then the rest.
        let p = drain_plan(&on, &Funded, 1600);
        assert_eq!(p.requeue, vec![(4, VictimClass::Unallocated), (2, VictimClass::PastContractResumable), (3, VictimClass::PastContract)]);
        assert_eq!(p.waiting.len(), 1);
        assert!(drain_plan(&on, &Funded, 4600).waiting.is_empty());
    }

    #[test]
    fn earlier_runs_count_and_a_job_that_cannot_checkpoint_is_requeued_past_its_contract() {
        let n: Vec<Arc<str>> = vec!["n1".into()];
        let mut j = running(1, 3600, false, 5000);
        j.earlier_run_s = 3000; // ran 50 min before a requeue
        j.restarts = 9; // requeued often before: nothing protects it past its contract
        let on = [OnDraining { job: &j, nodes: &n }];
        assert_eq!(drain_plan(&on, &Funded, 5000).waiting[0].until_s, 5600);
        assert_eq!(drain_plan(&on, &Funded, 5600).requeue, vec![(1, VictimClass::PastContract)]);
        // A pending job (start unknown) is not the drain's.
        let p = Job::new(2, "nlp", "u");
        assert_eq!(drain_plan(&[OnDraining { job: &p, nodes: &n }], &Funded, 9999), DrainPlan::default());
    }
}
