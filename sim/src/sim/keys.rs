//! How each policy keys the queue: a job's priority when it enters the
//! queue, the periodic re-keying, and the queue's and the teams' orders.

use super::{Policy, Sim, Status};
use std::collections::BTreeSet;
use tally_allocator::priority::InsideKey;
use tally_allocator::{inside_key, slurm_key, QueueWalk, SlurmKey};

/// The queue in Slurm's order ([`slurm_key`]: priority descending, submit,
/// job id), then the job's index.
pub(super) type QueueKey = (SlurmKey<i64>, usize);
/// A team's waiting jobs: ([`inside_key`], index).
pub(super) type TeamQueue = BTreeSet<(InsideKey, usize)>;

impl<'a> Sim<'a> {
    /// The key of a job entering the queue (Slurm's `priority_p_set` at
    /// submit or requeue).
    fn key_at_entry(&self, i: usize, now: u64) -> i64 {
        let j = &self.jobs[i];
        match self.policy {
            // Arrival order: earlier first (ties: job id, by the sort).
            Policy::Fifo => -(j.job.submit_s as i64),
            Policy::Planner => -i64::from(self.plan_rank[i]),
            Policy::Tally | Policy::TallyPlanner => {
                let p = self.order.priority_of_new(&j.job, &self.fs, &self.ent, &self.config.priority);
                let p = if self.policy == Policy::TallyPlanner { p.planned(j.planned) } else { p };
                i64::from(p.value)
            }
            Policy::Multifactor => self.multifactor_key(i, now),
        }
    }

    /// Recompute every waiting job's key (the policy's periodic re-plan).
    pub(super) fn rekey(&mut self, now: u64) {
        let mut keys: Vec<(usize, i64)> = Vec::with_capacity(self.queue.len());
        match self.policy {
            Policy::Fifo => return,
            Policy::Planner => keys.extend(self.queue.iter().map(|&(_, i)| (i, -i64::from(self.plan_rank[i])))),
            Policy::Multifactor => keys.extend(self.queue.iter().map(|&(_, i)| (i, self.multifactor_key(i, now)))),
            Policy::Tally | Policy::TallyPlanner => {
                self.refresh_entitlement();
                let mut walk = QueueWalk::new(&self.fs, &self.ent, &self.config.priority);
                for q in &self.team_queues {
                    for &(_, i) in q {
                        let p = walk.next(&self.jobs[i].job);
                        let p = if self.policy == Policy::TallyPlanner { p.planned(self.jobs[i].planned) } else { p };
                        keys.push((i, i64::from(p.value)));
                    }
                }
                self.order = walk.finish();
            }
        }
        for (i, k) in keys {
            if self.keys[i] != k {
                self.queue.remove(&self.queue_key(i));
                self.keys[i] = k;
                self.queue.insert(self.queue_key(i));
            }
        }
    }

    pub(super) fn inside_key(&self, i: usize) -> (InsideKey, usize) {
        (inside_key(&self.jobs[i].job, &self.config.priority), i)
    }

    pub(super) fn queue_key(&self, i: usize) -> QueueKey {
        self.queue_key_at(i, self.keys[i])
    }

    /// Where job `i` queues at priority `key`: Slurm's order
    /// ([`slurm_key`]; the simulator's jobs are no array tasks).
    pub(super) fn queue_key_at(&self, i: usize, key: i64) -> QueueKey {
        (slurm_key(key, self.jobs[i].job.submit_s, self.jobs[i].job.id, None), i)
    }

    /// Into the queue (submitted, or eligible again after a requeue).
    pub(super) fn enqueue(&mut self, i: usize, now: u64) {
        self.jobs[i].status = Status::Waiting;
        if let Some(n) = self.jobs[i].node {
            self.wait_gpus[n] += self.jobs[i].job.units();
        }
        self.keys[i] = self.key_at_entry(i, now);
        self.queue.insert(self.queue_key(i));
        let k = self.inside_key(i);
        self.team_queues[self.jobs[i].team].insert(k);
    }
}
