//! How each policy keys the queue: a job's priority when it enters the
//! queue, the periodic re-keying, and the queue's and the teams' orders.
//!
//! Tally's re-keying is the plugin's walk of the whole queue
//! ([`QueueWalk`]), kept from pass to pass. A team's keys are a function
//! of what it runs, its fair share and 7-day rank (the entitlement and the
//! ranking of the pass), its waiting jobs and their plan bits; so a team
//! none of which changed since its last walk keeps its keys, and what a job
//! arriving later waits behind it. A team that is walked is walked only
//! until it is settled ([`QueueWalk::settled`]: every later job gets its
//! [`settled_priority`]) if every later job already has that key: the
//! settled keys change only with the rank and the plan bits, and a team
//! whose rank or plan bits changed is walked whole. So the keys are the
//! whole walk's, bit for bit (debug builds check each pass).

use super::{Policy, Sim, Status};
use std::collections::BTreeSet;
use tally_allocator::priority::InsideKey;
use tally_allocator::{inside_key, settled_priority, slurm_key, Priority, QueueWalk, SlurmKey};

/// The queue in Slurm's order ([`slurm_key`]: priority descending, submit,
/// job id), then the job's index.
pub(super) type QueueKey = (SlurmKey<i64>, usize);
/// A team's waiting jobs: ([`inside_key`], index).
pub(super) type TeamQueue = BTreeSet<(InsideKey, usize)>;

/// What Tally's last re-keying of a team leaves for the next one.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TeamWalk {
    /// The 7-day rank its keys were computed with; `None`: walk it whole
    /// (never walked, or its plan bits changed).
    rank: Option<Option<u32>>,
    /// What it ran and its fair share (their bits) at its last walk;
    /// `None`: its queue changed since.
    seen: Option<(u64, u64)>,
    /// Its waiting jobs whose key is not their settled priority.
    unsettled: usize,
}

impl TeamWalk {
    /// Its jobs' plan bits changed: walk it whole.
    pub(super) fn replanned(&mut self) {
        self.rank = None;
    }
}

impl<'a> Sim<'a> {
    /// The key of a job entering the queue (Slurm's `priority_p_set` at
    /// submit or requeue).
    fn key_at_entry(&self, i: usize, now: u64) -> i64 {
        let j = &self.jobs[i];
        match self.policy {
            // Arrival order: earlier first (ties: job id, by the sort).
            Policy::Fifo => -(j.job.submit_s as i64),
            Policy::Planner => -i64::from(self.plan_rank[i]),
            Policy::Tally | Policy::TallyPlanner => self.tally_key(i, self.order.priority_of_new(&j.job, &self.fs, &self.ent, &self.config.priority)),
            Policy::Multifactor => self.multifactor_key(i, now),
        }
    }

    /// Tally's key of job `i` at priority `p`: with tally+planner, its plan bit.
    fn tally_key(&self, i: usize, p: Priority) -> i64 {
        let p = if self.policy == Policy::TallyPlanner { p.planned(self.jobs[i].planned) } else { p };
        i64::from(p.value)
    }

    /// Tally: the key of job `i` once its team is settled.
    fn settled_key(&self, i: usize) -> i64 {
        let job = &self.jobs[i].job;
        self.tally_key(i, settled_priority(job, self.fs.standing(&job.account), &self.ent, &self.config.priority))
    }

    /// Whether job `i`'s key is its settled one (true out of the queue),
    /// kept in its team's count.
    fn set_settled(&mut self, i: usize, settled: bool) {
        let j = &mut self.jobs[i];
        let count = &mut self.team_walks[j.team].unsettled;
        match (j.settled, settled) {
            (true, false) => *count += 1,
            (false, true) => *count -= 1,
            _ => {}
        }
        j.settled = settled;
    }

    /// Recompute every waiting job's key (the policy's periodic re-plan).
    pub(super) fn rekey(&mut self, now: u64) {
        let keys: Vec<(usize, i64)> = match self.policy {
            Policy::Fifo => return,
            Policy::Planner => self.queue.iter().map(|&(_, i)| (i, -i64::from(self.plan_rank[i]))).collect(),
            Policy::Multifactor => self.queue.iter().map(|&(_, i)| (i, self.multifactor_key(i, now))).collect(),
            Policy::Tally | Policy::TallyPlanner => self.tally_keys(),
        };
        for (i, k) in keys {
            if self.keys[i] != k {
                self.queue.remove(&self.queue_key(i));
                self.keys[i] = k;
                self.queue.insert(self.queue_key(i));
            }
        }
        if cfg!(debug_assertions) && self.policy.tally() {
            self.check_tally_keys();
        }
    }

    /// Tally's re-keying: the entitlement now, then the keys of the jobs of
    /// each team that changed, up to where it is settled if it may stop
    /// there (see the module's header). What a job arriving later waits
    /// behind is its team's allocated waiting GPUs: as before for a team
    /// not walked, the walk's sum for a team walked to its end, else the
    /// team's count (`wait_gpus`, the same sum: with whole units, sums are
    /// exact in any order).
    fn tally_keys(&mut self) -> Vec<(usize, i64)> {
        self.refresh_entitlement();
        let mut walked = Vec::new();
        // Teams walked, and whether their walk stopped before the end.
        let mut teams = Vec::new();
        let mut walk = QueueWalk::new(&self.fs, &self.ent, &self.config.priority);
        for (t, q) in self.team_queues.iter().enumerate() {
            let seen = self.team_nodes[t].map_or((0, 0), |n| {
                let team = self.ent.team_at(n);
                (team.running.to_bits(), team.fair.to_bits())
            });
            let tw = &mut self.team_walks[t];
            let same_rank = tw.rank == Some(self.ranks[t]);
            if same_rank && tw.seen == Some(seen) {
                continue;
            }
            let may_stop = same_rank && self.whole_units;
            // Unsettled keys among the jobs not walked yet.
            let mut left = tw.unsettled;
            (tw.rank, tw.seen) = (Some(self.ranks[t]), Some(seen));
            let mut stopped = false;
            if let Some(&(_, first)) = q.first() {
                walk.enter(&self.jobs[first].job.account);
            }
            for &(_, i) in q {
                let settled = walk.settled();
                if may_stop && settled && left == 0 {
                    stopped = true;
                    break;
                }
                left -= usize::from(!self.jobs[i].settled);
                walked.push((i, walk.next(&self.jobs[i].job), settled));
            }
            teams.push((t, stopped));
        }
        let sums = walk.finish().waiting_gpus;
        for (t, stopped) in teams {
            let name = &self.team_names[t];
            let total = if stopped { self.team_nodes[t].map_or(0.0, |n| self.wait_gpus[n]) } else { sums.get(name).copied().unwrap_or(0.0) };
            let behind = &mut self.order.waiting_gpus;
            match behind.get_mut(name) {
                Some(g) if total > 0.0 => *g = total,
                Some(_) => {
                    behind.remove(name);
                }
                None if total > 0.0 => {
                    behind.insert(name.clone(), total);
                }
                None => {}
            }
        }
        walked
            .into_iter()
            .map(|(i, p, settled)| {
                self.set_settled(i, settled);
                (i, self.tally_key(i, p))
            })
            .collect()
    }

    /// Debug builds: the keys and what a new job waits behind are the
    /// whole walk's, settled keys are, and each team's count of the others.
    fn check_tally_keys(&self) {
        let mut walk = QueueWalk::new(&self.fs, &self.ent, &self.config.priority);
        for (t, q) in self.team_queues.iter().enumerate() {
            for &(_, i) in q {
                let k = self.tally_key(i, walk.next(&self.jobs[i].job));
                assert_eq!(self.keys[i], k, "job {}: the kept key is not the whole walk's", self.jobs[i].job.id);
                assert!(!self.jobs[i].settled || k == self.settled_key(i), "job {}: not its settled key", self.jobs[i].job.id);
            }
            assert_eq!(q.iter().filter(|&&(_, i)| !self.jobs[i].settled).count(), self.team_walks[t].unsettled, "team {t}: unsettled keys");
        }
        assert_eq!(walk.finish().waiting_gpus, self.order.waiting_gpus, "what a new job waits behind");
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
            if self.config.priority.is_debug(&self.jobs[i].job) {
                self.debug_wait[n] += f64::from(self.jobs[i].job.gpus);
            }
            self.ent_stale = true;
        }
        self.keys[i] = self.key_at_entry(i, now);
        self.queue.insert(self.queue_key(i));
        let k = self.inside_key(i);
        self.team_queues[self.jobs[i].team].insert(k);
        self.team_walks[self.jobs[i].team].seen = None;
        let settled = !self.policy.tally() || self.keys[i] == self.settled_key(i);
        self.set_settled(i, settled);
    }

    /// Out of the queue (started).
    pub(super) fn dequeue(&mut self, i: usize) {
        self.queue.remove(&self.queue_key(i));
        let k = self.inside_key(i);
        self.team_queues[self.jobs[i].team].remove(&k);
        self.team_walks[self.jobs[i].team].seen = None;
        self.set_settled(i, true);
    }
}
