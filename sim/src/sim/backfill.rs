//! The scheduling pass: jobs in priority order start where they fit, the
//! first blocked job gets an EASY reservation and lower jobs backfill
//! around it (FIFO keeps its realtime hold free).

use super::keys::QueueKey;
use super::preempt::PreemptGroup;
use super::{Policy, Sim, MAX_PREEMPT_TRIES, R};
use crate::cluster::{Cluster, Placement};
use crate::trace::Class;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use tally_allocator::{long_start, LongStart, VictimPool, DAY_S};

/// Queue keys a scheduling pass reads at once.
const QUEUE_BATCH: usize = 64;

impl<'a> Sim<'a> {
    fn fifo_reserve(&self, now: u64) -> u32 {
        let day = ((now - self.origin) / DAY_S) as usize;
        self.rt_reserve.get(day).copied().unwrap_or(0)
    }

    /// Where job `i` fits now (FIFO keeps its realtime reservation free).
    /// `too_big`: per GPU type, the fewest GPUs that found no place on the
    /// cluster as it is (a bigger job of the type finds none either).
    fn fit(&self, i: usize, now: u64, too_big: &mut Vec<(Option<Arc<str>>, bool, u32)>) -> Option<Placement> {
        let j = &self.jobs[i];
        let bound = too_big.iter_mut().find(|(t, d, _)| *t == j.gpu_type && *d == j.debug_ok);
        if bound.as_ref().is_some_and(|(_, _, g)| j.job.gpus >= *g) {
            return None;
        }
        let Some(p) = self.cluster.place_for(j.job.gpus, j.gpu_type.as_deref(), j.debug_ok) else {
            match bound {
                Some((_, _, g)) => *g = j.job.gpus,
                None => too_big.push((j.gpu_type.clone(), j.debug_ok, j.job.gpus)),
            }
            return None;
        };
        if self.policy == Policy::Fifo && j.class != Class::Realtime {
            let cap = self.cluster.total().saturating_sub(self.fifo_reserve(now).max(self.rt_busy));
            if self.nonrt_blocked + Cluster::blocked(&p) > cap {
                return None;
            }
        }
        Some(p)
    }

    /// Job `i` is a long job that cannot checkpoint and may not start now
    /// ([`long_start`]: the plugin's rule, on the entitlement as this pass
    /// moves it).
    fn long_held(&self, i: usize) -> bool {
        matches!(long_start(&self.jobs[i].job, &self.ent, 0.0, &self.config.priority, &self.config.contracts), LongStart::Held { .. })
    }

    /// EASY: when and where the blocked job `i` could start if nothing else
    /// started; returns (time, free GPUs per node then, its placement then).
    fn reservation(&self, i: usize) -> Option<(u64, Vec<u32>, Placement)> {
        let mut free = self.cluster.free.clone();
        let mut running: Vec<(u64, usize)> = self.running.iter().map(|&v| (self.jobs[v].run_start + self.jobs[v].remaining_s, v)).collect();
        running.sort();
        for (end, v) in running {
            for &(n, g) in &self.jobs[v].placement {
                free[n] += g;
            }
            if let Some(p) = self.cluster.fit_for(&free, self.jobs[i].job.gpus, self.jobs[i].gpu_type.as_deref(), self.jobs[i].debug_ok) {
                return Some((end, free, p));
            }
        }
        None
    }

    /// `preempt`: this instant had a submission or a re-plan (Slurm tries
    /// preemption when it schedules at submit and in its periodic pass, not
    /// at every job end).
    pub(super) fn schedule(&mut self, now: u64, preempt: bool) -> R<()> {
        // The first job that can neither start nor preempt gets an EASY
        // reservation (computed when a backfill candidate needs it).
        let mut first_blocked: Option<usize> = None;
        let mut reservation: Option<(u64, Vec<u32>, Placement)> = None;
        let mut tested = 0;
        let mut tries = 0;
        let can_preempt = preempt && self.policy != Policy::Fifo;
        if self.cluster.free_total() == 0 && !can_preempt {
            return Ok(());
        }
        if self.policy.tally() {
            self.refresh_entitlement();
        }
        // Per preemption group ([`Sim::preempt_group`]), the fewest GPUs a
        // job failed to preempt for in this pass: a job of the same group
        // asking for as many or more fails too.
        let mut failed: BTreeMap<PreemptGroup, u32> = BTreeMap::new();
        let mut pool: Option<VictimPool<usize>> = None;
        // The queue changes under the walk only by the start of the job
        // just walked, or by a preemption, after which the walk starts over:
        // the keys after the cursor are read a batch at a time.
        let mut cursor: Option<QueueKey> = None;
        let mut batch: VecDeque<QueueKey> = VecDeque::with_capacity(QUEUE_BATCH);
        let mut too_big = Vec::new();
        loop {
            if batch.is_empty() {
                let after = cursor.map_or(Bound::Unbounded, Bound::Excluded);
                batch.extend(self.queue.range((after, Bound::Unbounded)).take(QUEUE_BATCH));
            }
            let Some(key) = batch.pop_front() else { break };
            cursor = Some(key);
            let i = key.1;
            if self.policy.tally() && self.long_held(i) {
                // Not a candidate now (Slurm: a begin time ahead): neither
                // blocked nor preempting.
                continue;
            }
            if let Some(p) = self.fit(i, now, &mut too_big) {
                let ok = match first_blocked {
                    None => true,
                    Some(b) => {
                        if reservation.is_none() {
                            // No reservation possible (FIFO's realtime hold):
                            // backfill as if reserved at the end of time.
                            reservation = Some(self.reservation(b).unwrap_or((u64::MAX, self.cluster.free.clone(), Vec::new())));
                        }
                        let (t_res, free_then, res) = reservation.as_ref().expect("just set");
                        now + self.jobs[i].remaining_s <= *t_res
                            || p.iter().all(|&(n, g)| {
                                let need = res.iter().filter(|&&(m, _)| m == n).map(|&(_, r)| r).sum::<u32>();
                                free_then[n] >= g + need
                            })
                    }
                };
                if ok {
                    self.start(i, p, now)?;
                    too_big.clear();
                    continue;
                }
            } else if can_preempt && tries < MAX_PREEMPT_TRIES && failed.get(&self.preempt_group(i)).is_none_or(|&f| self.jobs[i].job.gpus < f) {
                tries += 1;
                if let Some(p) = self.try_preempt(i, now, &mut pool)? {
                    self.start(i, p, now)?;
                    // Victims left the cluster: start over from the top.
                    cursor = None;
                    batch.clear();
                    too_big.clear();
                    first_blocked = None;
                    reservation = None;
                    tested = 0;
                    failed.clear();
                    pool = None;
                    continue;
                }
                failed.insert(self.preempt_group(i), self.jobs[i].job.gpus);
            }
            if first_blocked.is_none() {
                first_blocked = Some(i);
            } else {
                tested += 1;
            }
            let more_preemption = can_preempt && tries < MAX_PREEMPT_TRIES;
            if tested >= self.s.backfill_depth || (!more_preemption && self.cluster.free_total() == 0) {
                break;
            }
        }
        Ok(())
    }
}
