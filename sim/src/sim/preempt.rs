//! Preemption: which running jobs a job may preempt, in what order, and
//! the requeue of the ones it does.

use super::multifactor::high_qos;
use super::{broken, Happening, Policy, Sim, Status, R};
use crate::cluster::Placement;
use crate::metrics::RunEnd;
use std::cmp::Reverse;
use tally_allocator::priority::SliceKey;
use tally_allocator::{protection_after, Moment, Nodes, Requeue, VictimPool};

/// See [`Sim::preempt_group`].
pub(super) type PreemptGroup = (usize, bool, SliceKey, bool);

impl<'a> Sim<'a> {
    fn preempt(&mut self, v: usize, by: usize, now: u64) -> R<()> {
        let ran = now - self.jobs[v].run_start;
        // Inside a declared minimum runtime (over all its runs)?
        if self.jobs[v].job.contract_left_s(now) > 0 && self.jobs[v].node.is_some() {
            self.violations += 1;
            if self.policy.tally() {
                return Err(broken(now, format!("job {} preempted inside its contract", self.jobs[v].job.id)));
            }
        }
        self.stop(v, now, RunEnd::Preempted);
        let j = &mut self.jobs[v];
        if j.job.contract.resumable {
            j.remaining_s = j.remaining_s.saturating_sub(ran).max(1);
        } else {
            j.remaining_s = j.duration_s;
        }
        j.job.restarts += 1;
        // Every preemption here is the policy's own: the next run is
        // protected for its whole contract.
        j.job.earlier_run_s = protection_after(j.job.earlier_run_s, ran, Requeue::Preempted);
        let (id, by_id) = (self.jobs[v].job.id, self.jobs[by].job.id);
        self.note(Happening::Preempt { t: now, job: id, by: by_id });
        if self.s.requeue_delay_s == 0 {
            self.enqueue(v, now);
        } else {
            self.jobs[v].status = Status::Requeued;
            self.requeues.push(Reverse((now + self.s.requeue_delay_s, v)));
        }
        Ok(())
    }

    /// Running jobs that `i` may preempt, in the order they should go.
    /// Tally asks the pass's [`VictimPool`] (built once per pass), which
    /// makes them eligible cumulatively.
    fn victims(&self, i: usize, now: u64, pool: &mut Option<VictimPool<usize>>) -> Vec<usize> {
        let p = &self.jobs[i];
        match self.policy {
            Policy::Fifo | Policy::Planner => Vec::new(),
            Policy::Tally | Policy::TallyPlanner => {
                let m = Moment { ent: &self.ent, rules: &self.config.priority, contracts: &self.config.contracts, now };
                let pool = pool.get_or_insert_with(|| {
                    let at: Vec<Vec<(u32, u32)>> =
                        self.running.iter().map(|&v| self.jobs[v].placement.iter().map(|&(n, g)| (n as u32, g)).collect()).collect();
                    let nodes = Nodes { size: self.cluster.size.clone(), free: self.cluster.free.clone(), debug: self.cluster.debug.clone() };
                    VictimPool::placed(self.running.iter().zip(&at).map(|(&v, a)| (v, &self.jobs[v].job, &a[..])), nodes, &m)
                });
                pool.for_preemptor(&p.job, &m)
            }
            Policy::Multifactor => {
                if !high_qos(p.class) {
                    return Vec::new();
                }
                let mut v: Vec<(i64, Reverse<u64>, usize)> = self
                    .running
                    .iter()
                    .copied()
                    .filter(|&v| !high_qos(self.jobs[v].class) && !self.jobs[v].asks)
                    .map(|v| (self.multifactor_key(v, now), Reverse(self.jobs[v].run_start), v))
                    .collect();
                v.sort();
                v.into_iter().map(|(_, _, v)| v).collect()
            }
        }
    }

    /// Free room for job `i` by preempting, in victim order, only the
    /// victims on the nodes it then takes. Returns the placement.
    pub(super) fn try_preempt(&mut self, i: usize, now: u64, pool: &mut Option<VictimPool<usize>>) -> R<Option<Placement>> {
        if self.policy == Policy::Fifo {
            return Ok(None);
        }
        let cands = self.victims(i, now, pool);
        if cands.is_empty() {
            return Ok(None);
        }
        let mut free = self.cluster.free.clone();
        let mut chosen = Vec::new();
        for v in cands {
            for &(n, g) in &self.jobs[v].placement {
                free[n] += g;
            }
            chosen.push(v);
            if let Some(p) = self.cluster.fit_for(&free, self.jobs[i].job.gpus, self.jobs[i].gpu_type.as_deref(), self.jobs[i].debug_ok) {
                let nodes: Vec<usize> = p.iter().map(|&(n, _)| n).collect();
                let needed: Vec<usize> = chosen.into_iter().filter(|&v| self.jobs[v].placement.iter().any(|(n, _)| nodes.contains(n))).collect();
                for v in needed {
                    self.preempt(v, i, now)?;
                }
                let again = self.cluster.place_for(self.jobs[i].job.gpus, self.jobs[i].gpu_type.as_deref(), self.jobs[i].debug_ok);
                return Ok(again.filter(|q| q.iter().all(|(n, _)| nodes.contains(n))).or(Some(p)));
            }
        }
        Ok(None)
    }

    /// What decides whether job `i` may preempt, besides its size: its team
    /// and, under Tally, its tier, its place in its team's order and the
    /// debug class (the other policies: its team and tier).
    pub(super) fn preempt_group(&self, i: usize) -> PreemptGroup {
        let j = &self.jobs[i];
        match self.policy {
            Policy::Tally | Policy::TallyPlanner => {
                let rules = &self.config.priority;
                (j.team, j.node.is_some(), rules.slice_key(&j.job), rules.is_debug(&j.job))
            }
            _ => (j.team, j.node.is_some(), SliceKey::default(), false),
        }
    }
}
