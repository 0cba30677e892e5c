//! Re-planning: the periodic re-plan of each policy, the entitlement, the
//! planners' plans and the durations they believe.

use super::keys::QueueKey;
use super::{PlanDurations, Policy, Sim, Status};
use std::collections::BTreeSet;
use tally_allocator::{charge_from_mark, order_queue, Funded, Job, Load, HOUR_S};
use tally_planner::predict::Outcome;
use tally_planner::queue::{plan_queue, plan_starts_now, QueueRules, RunningJob, WaitingJob};

/// The planner policy's horizon: 24 steps of 1 h, for at most this many of
/// the oldest waiting jobs.
const PLAN_STEPS: usize = 24;
const PLAN_STEP_S: u64 = HOUR_S;
const PLAN_JOBS: usize = 100;

impl<'a> Sim<'a> {
    /// Re-plan: charge, re-rank (tally); decay and charge (multifactor);
    /// then every waiting job's priority anew.
    pub(super) fn replan(&mut self, now: u64) {
        match self.policy {
            Policy::Fifo => {}
            Policy::Planner => self.plan_queue(now),
            Policy::Tally | Policy::TallyPlanner => {
                for &i in &self.running {
                    let j = &self.jobs[i];
                    charge_from_mark(&mut self.marks, &j.job, &Funded::new(&self.config.tree, &self.alloc), &mut self.ledger, j.run_start, now);
                }
                self.ledger.prune(now);
                self.ledger.usage_into(now, &mut self.usage_now);
                self.fs.update(&self.config.tree, &self.alloc, &self.usage_now);
                self.ranks = self.team_names.iter().map(|t| self.fs.standing(t).map(|s| s.rank)).collect();
            }
            Policy::Multifactor => {
                self.decay_to(now);
                let running: Vec<usize> = self.running.iter().copied().collect();
                for i in running {
                    self.mf_charge(i, now);
                }
            }
        }
        self.rekey(now);
    }

    /// The entitlement from the per-node counters (every scheduling pass;
    /// as it was if they did not change).
    pub(super) fn refresh_entitlement(&mut self) {
        if !self.ent_stale {
            return;
        }
        self.ent_stale = false;
        let mut load = Load::new(&self.config.tree);
        for n in 0..self.run_gpus.len() {
            load.run_units(n, self.run_gpus[n]);
            load.wait_units(n, self.wait_gpus[n]);
            load.debug_gpus(n, self.debug_run[n], true);
            load.debug_gpus(n, self.debug_wait[n], false);
        }
        self.ent.update(&self.config.tree, &self.alloc, &load);
    }

    /// A job is submitted: what the planners will believe its duration is.
    pub(super) fn believe(&mut self, i: usize) {
        let j = &self.jobs[i];
        let limit = j.time_limit_s.unwrap_or(j.duration_s);
        let belief = match (self.s.plan_durations, &self.predictor) {
            (PlanDurations::True, _) => return,
            (PlanDurations::Limit, _) => limit,
            (PlanDurations::Predicted, Some((p, keys))) => p.predict(&keys[i], j.time_limit_s).duration_s,
            (PlanDurations::Predicted, None) => limit,
        };
        self.outcomes.push(Outcome { predicted_s: belief, actual_s: j.duration_s, time_limit_s: j.time_limit_s });
        self.jobs[i].belief_s = belief.max(1);
    }

    /// The work the planners believe job `i` has left at `now`: the truth
    /// ([`PlanDurations::True`]), else its belief minus the work done (this
    /// run and, if resumable, the runs before), or when it has outlived its
    /// belief, its time limit minus the work done.
    fn believed_left(&self, i: usize, now: u64) -> u64 {
        let j = &self.jobs[i];
        let ran = if j.status == Status::Running { now.saturating_sub(j.run_start) } else { 0 };
        if self.s.plan_durations == PlanDurations::True {
            return j.remaining_s.saturating_sub(ran);
        }
        let done = j.duration_s.saturating_sub(j.remaining_s) + ran;
        if j.belief_s > done {
            j.belief_s - done
        } else {
            j.time_limit_s.unwrap_or(j.duration_s).saturating_sub(done).max(1)
        }
    }

    fn running_for_plan(&self, now: u64) -> Vec<RunningJob> {
        self.running
            .iter()
            .map(|&i| {
                let j = &self.jobs[i];
                let nodes = j.placement.iter().map(|&(n, g)| (n as u32, g)).collect();
                RunningJob { nodes, remaining_s: Some(self.believed_left(i, now)) }
            })
            .collect()
    }

    fn waiting(&self) -> Vec<usize> {
        self.queue.iter().map(|&(_, i)| i).collect()
    }

    /// Planner: plan the next 24 h for the oldest waiting jobs, running
    /// jobs pinned where they run, and re-rank the queue by planned start.
    fn plan_queue(&mut self, now: u64) {
        let running = self.running_for_plan(now);
        let mut waiting = self.waiting();
        waiting.sort_by_key(|&i| (self.jobs[i].job.submit_s, self.jobs[i].job.id));
        // The oldest PLAN_JOBS jobs, valued by the trace's priority (Dharma's
        // priority × time decay); the durations are the true remaining work,
        // or the limit or a prediction (`Settings::plan_durations`).
        let queue: Vec<WaitingJob> = waiting
            .iter()
            .take(PLAN_JOBS)
            .map(|&i| {
                let j = &self.jobs[i];
                WaitingJob {
                    id: i as u64,
                    gpus: j.job.gpus,
                    duration_s: Some(self.believed_left(i, now)),
                    value: Some(f64::from(j.priority_col.max(0)) + 1.0),
                }
            })
            .collect();
        let rules = QueueRules { step_s: PLAN_STEP_S, steps: PLAN_STEPS, decay: 0.97, max_jobs: PLAN_JOBS, default_duration_s: PLAN_STEP_S };
        let plan = plan_queue(self.cluster.total(), self.cluster.gpus_per_node, &rules, &running, &queue);
        for &i in &waiting {
            self.plan_rank[i] = u32::MAX;
        }
        for (&i, &step) in &plan.start_step {
            self.plan_rank[i as usize] = step as u32;
        }
    }

    /// tally+planner, as the plugin's planner thread: the waiting jobs in
    /// Tally's order without the plan bit, planned by `plan::queue` with its
    /// default values; the jobs the plan starts now get the plan bit
    /// (`plan_starts_now`: no search when no waiting job could start now
    /// beside the running ones, as the plan would start none).
    pub(super) fn plan_tally(&mut self, now: u64) {
        self.refresh_entitlement();
        let running = self.running_for_plan(now);
        let waiting = self.waiting();
        let jobs: Vec<&Job> = waiting.iter().map(|&i| &self.jobs[i].job).collect();
        let order = order_queue(&jobs, &self.fs, &self.ent, &self.config.priority);
        let mut by_value: Vec<QueueKey> = waiting.iter().zip(&order.priorities).map(|(&i, p)| self.queue_key_at(i, i64::from(p.value))).collect();
        by_value.sort_unstable();
        let planner = self.config.planner.map(|p| p.rules).unwrap_or_default();
        let queue: Vec<WaitingJob> = by_value
            .iter()
            .map(|&(_, i)| WaitingJob { id: i as u64, gpus: self.jobs[i].job.gpus, duration_s: Some(self.believed_left(i, now)), value: None })
            .collect();
        let starts: BTreeSet<usize> =
            plan_starts_now(self.cluster.total(), self.cluster.gpus_per_node, &planner, &running, &queue).into_iter().map(|i| i as usize).collect();
        for &i in &waiting {
            let planned = starts.contains(&i);
            if self.jobs[i].planned != planned {
                self.jobs[i].planned = planned;
                self.team_walks[self.jobs[i].team].replanned();
            }
        }
        self.rekey(now);
    }
}
