//! The planner over a live queue: the one rule by which the plugin's planner
//! thread and the simulator's `planner` policy turn running and waiting jobs
//! into a [`Scenario`], plan it in fast mode and read off the committed step.
//!
//! - Running jobs are pinned where they run: on each of their nodes, the
//!   GPUs they hold there, for the steps their remaining time covers. The
//!   planner knows their nodes, not which GPU indices Slurm gave them: a
//!   node's holdings are cut into power-of-two pieces laid out biggest first
//!   (so each is a legal aligned block).
//! - Waiting jobs, in the order given (the caller's priority order), up to
//!   `max_jobs`: their GPUs rounded up to a power of two (the plan's block;
//!   Slurm still allocates what was asked), their duration (time limit, or
//!   the caller's default) in whole steps, and a value per GPU-step: the
//!   caller's (the simulator passes the trace's priority), or by default one
//!   that falls with the position in the order (`n − position`), so the plan
//!   prefers the jobs the fair-share order prefers and only packing reorders
//!   them (the plugin).
//! - The result: each planned job's start step. Step 0 is the committed
//!   step — the jobs "the plan starts now".

use super::{fast, PlanJob, Scenario};
use crate::grid::{firsts, pinned_bits};
use crate::time::HOUR_S;
use std::collections::BTreeMap;

/// The planner's settings (`[planner]` in tally.toml).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueRules {
    /// Length of a step, seconds (default 1 h).
    pub step_s: u64,
    /// Steps in the horizon (default 24).
    pub steps: usize,
    /// Per-step discount of value (default 0.97).
    pub decay: f64,
    /// At most this many waiting jobs are planned (the first in the order).
    pub max_jobs: usize,
    /// Duration assumed for a job without a time limit, seconds.
    pub default_duration_s: u64,
}

impl Default for QueueRules {
    fn default() -> Self {
        QueueRules { step_s: HOUR_S, steps: 24, decay: 0.97, max_jobs: 300, default_duration_s: HOUR_S }
    }
}

/// A running job: the GPUs it holds on each of its nodes, and how long it has left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    /// (node index, GPUs on that node).
    pub nodes: Vec<(u32, u32)>,
    /// Seconds left (time limit minus elapsed); `None` = no limit.
    pub remaining_s: Option<u64>,
}

/// A job waiting to start (eligible now).
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingJob {
    pub id: u64,
    pub gpus: u32,
    /// Time limit, seconds; `None` = no limit.
    pub duration_s: Option<u64>,
    /// Value per GPU-step (> 0); `None` = by position in the order.
    pub value: Option<f64>,
}

/// What one plan of the queue decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueuePlan {
    /// Planned start step of each waiting job the horizon holds (job id → step).
    pub start_step: BTreeMap<u64, usize>,
    /// Waiting jobs considered (at most `max_jobs`).
    pub considered: usize,
    /// Waiting jobs not planned: no GPUs asked, or bigger than the cluster.
    pub skipped: usize,
}

impl QueuePlan {
    /// Jobs the plan starts in the committed step.
    pub fn starts_now(&self) -> impl Iterator<Item = u64> + '_ {
        self.start_step.iter().filter(|(_, &t)| t == 0).map(|(&id, _)| id)
    }
}

fn steps_of(seconds: u64, rules: &QueueRules) -> usize {
    (seconds.div_ceil(rules.step_s.max(1)).max(1) as usize).min(rules.steps.max(1))
}

/// The scenario for a cluster of `gpus` GPUs (`gpus_per_node` a node), the
/// running jobs pinned and the first `max_jobs` waiting jobs to place.
/// Waiting-job ids in the scenario are their indices into `waiting`.
pub fn scenario(gpus: u32, gpus_per_node: u32, rules: &QueueRules, running: &[RunningJob], waiting: &[WaitingJob]) -> (Scenario, usize) {
    let per_node = gpus_per_node.max(1);
    let nodes = gpus.div_ceil(per_node) as usize;
    let horizon = rules.steps.max(1);
    // Each node's holdings, cut into power-of-two pieces and laid out
    // biggest first from the node's first GPU: every piece is then aligned
    // to its size (a legal block), whatever Slurm's real GPU indices are.
    let mut pieces: Vec<Vec<(u32, usize)>> = vec![Vec::new(); nodes];
    for r in running {
        let steps = r.remaining_s.map_or(horizon, |s| steps_of(s, rules));
        for &(node, held) in &r.nodes {
            let Some(on) = pieces.get_mut(node as usize) else { continue };
            let mut left = held;
            while left > 0 {
                let piece = 1 << (31 - left.leading_zeros());
                on.push((piece, steps));
                left -= piece;
            }
        }
    }
    let mut jobs = Vec::new();
    // Pinned ids sit above every waiting index.
    let mut pinned_id = 1u64 << 62;
    for (node, on) in pieces.iter_mut().enumerate() {
        on.sort_by(|a, b| b.cmp(a));
        let mut used = 0u32;
        for &(g, steps) in on.iter() {
            // More GPUs than the node has (a config that undercounts): pin what fits.
            if used + g > per_node {
                continue;
            }
            let first = node as u32 * per_node + used;
            used += g;
            jobs.push(PlanJob { id: pinned_id, gpus: g, duration_steps: steps, priority: 1.0, arrival_step: 0, pinned: Some((0, first)) });
            pinned_id += 1;
        }
    }
    let mut skipped = 0;
    let n = waiting.len().min(rules.max_jobs);
    for (pos, w) in waiting.iter().take(n).enumerate() {
        let g = w.gpus.checked_next_power_of_two().unwrap_or(u32::MAX);
        if w.gpus == 0 || g > gpus {
            skipped += 1;
            continue;
        }
        jobs.push(PlanJob {
            id: pos as u64,
            gpus: g,
            duration_steps: steps_of(w.duration_s.unwrap_or(rules.default_duration_s), rules),
            priority: w.value.filter(|v| *v > 0.0).unwrap_or((n - pos) as f64),
            arrival_step: 0,
            pinned: None,
        });
    }
    let s = Scenario {
        gpus,
        gpus_per_node: per_node,
        steps: horizon,
        step_s: rules.step_s.max(1),
        decay: rules.decay,
        penalty: 8.0,
        // Live jobs are often longer than the horizon: the plan orders
        // them by when they start, so a long job is planned, not left out.
        must_finish: false,
        jobs,
        services: Vec::new(),
    };
    (s, skipped)
}

/// Plan the queue (fast mode) and return each waiting job's planned start.
pub fn plan_queue(gpus: u32, gpus_per_node: u32, rules: &QueueRules, running: &[RunningJob], waiting: &[WaitingJob]) -> QueuePlan {
    let (s, skipped) = scenario(gpus, gpus_per_node, rules, running, waiting);
    planned(&s, skipped, rules, waiting)
}

/// The fast plan of `s` (built from `waiting` by [`scenario`]) as a
/// [`QueuePlan`].
fn planned(s: &Scenario, skipped: usize, rules: &QueueRules, waiting: &[WaitingJob]) -> QueuePlan {
    let plan = fast::plan(s);
    let mut start_step = BTreeMap::new();
    for p in plan.batch.iter().filter(|p| p.job_id < 1 << 62) {
        start_step.insert(waiting[p.job_id as usize].id, p.start_step);
    }
    QueuePlan { start_step, considered: waiting.len().min(rules.max_jobs), skipped }
}

/// The waiting jobs (their ids) that [`plan_queue`]'s plan starts in the
/// committed step: [`QueuePlan::starts_now`] of the same plan, without
/// planning when no waiting job it would place has a legal block free at
/// step 0 beside the running jobs ([`room_now`]). Every plan is legal (the
/// validator's invariant), so such a plan starts nothing now, whatever the
/// search finds later in the horizon.
pub fn plan_starts_now(gpus: u32, gpus_per_node: u32, rules: &QueueRules, running: &[RunningJob], waiting: &[WaitingJob]) -> Vec<u64> {
    let (s, skipped) = scenario(gpus, gpus_per_node, rules, running, waiting);
    if !room_now(&s) {
        return Vec::new();
    }
    planned(&s, skipped, rules, waiting).starts_now().collect()
}

/// Whether some job of `s` to place could start at step 0: a legal block
/// of its size (`firsts`) free at step 0 of the pinned jobs' grid. When
/// none is, no legal plan of `s` starts a job at step 0.
pub fn room_now(s: &Scenario) -> bool {
    if s.steps == 0 {
        return false;
    }
    let grid = pinned_bits(s);
    let mut sizes: Vec<u32> = s.jobs.iter().filter(|j| j.pinned.is_none() && j.arrival_step == 0).map(|j| j.gpus).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes.into_iter().any(|g| firsts(s.gpus, s.gpus_per_node, g).any(|first| grid.free(0, first, g)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(id: u64, gpus: u32, hours: u64) -> WaitingJob {
        WaitingJob { id, gpus, duration_s: Some(hours * HOUR_S), value: None }
    }

    #[test]
    fn a_job_that_fits_the_hole_starts_now_and_a_bigger_one_waits() {
        // 2 nodes × 8: node 0 full for 5 h, node 1 half full for 10 h.
        let running = vec![
            RunningJob { nodes: vec![(0, 8)], remaining_s: Some(5 * HOUR_S) },
            RunningJob { nodes: vec![(1, 4)], remaining_s: Some(10 * HOUR_S) },
        ];
        // First in the order: a whole-node job (no node is free now); then a 4-GPU job.
        let p = plan_queue(16, 8, &QueueRules::default(), &running, &[w(7, 8, 2), w(9, 3, 1)]);
        assert_eq!(p.start_step.get(&7), Some(&5), "the 8-GPU job waits for node 0");
        assert_eq!(p.start_step.get(&9), Some(&0), "the 3-GPU job (a 4-block) fills node 1 now");
        assert_eq!(p.starts_now().collect::<Vec<_>>(), vec![9]);
    }

    #[test]
    fn order_decides_between_jobs_competing_for_the_same_hole() {
        let running = vec![RunningJob { nodes: vec![(0, 4)], remaining_s: None }];
        // One node of 8 with 4 free: two 4-GPU jobs, only the first starts now.
        let p = plan_queue(8, 8, &QueueRules::default(), &running, &[w(1, 4, 1), w(2, 4, 1)]);
        assert_eq!(p.starts_now().collect::<Vec<_>>(), vec![1]);
        let p = plan_queue(8, 8, &QueueRules::default(), &running, &[w(2, 4, 1), w(1, 4, 1)]);
        assert_eq!(p.starts_now().collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn jobs_without_gpus_or_too_big_are_skipped_and_max_jobs_holds() {
        let rules = QueueRules { max_jobs: 2, ..QueueRules::default() };
        let p = plan_queue(8, 8, &rules, &[], &[w(1, 0, 1), w(2, 16, 1), w(3, 1, 1)]);
        assert_eq!((p.considered, p.skipped), (2, 2));
        assert!(p.start_step.is_empty(), "job 3 is beyond max_jobs");
        // No time limit: the default duration.
        let p = plan_queue(8, 8, &QueueRules::default(), &[], &[WaitingJob { id: 4, gpus: 8, duration_s: None, value: None }, w(5, 8, 1)]);
        assert_eq!((p.start_step[&4], p.start_step[&5]), (0, 1));
    }

    #[test]
    fn running_jobs_that_overfill_a_node_are_clipped_not_fatal() {
        let running =
            vec![RunningJob { nodes: vec![(0, 6), (5, 8)], remaining_s: Some(60) }, RunningJob { nodes: vec![(0, 3)], remaining_s: Some(60) }];
        let (s, _) = scenario(8, 8, &QueueRules::default(), &running, &[]);
        let pinned: Vec<(u32, u32)> = s.jobs.iter().map(|j| (j.gpus, j.pinned.unwrap().1)).collect();
        // 6 = 4 + 2 and 3 = 2 + 1 on node 0: 4@0, 2@4, 2@6; the 1 does not fit; node 5 does not exist.
        assert_eq!(pinned, vec![(4, 0), (2, 4), (2, 6)]);
        assert!(crate::validate(&s, &fast::plan(&s)).is_ok());
    }

    /// A generated queue on 4 nodes of 8: running jobs fill each node to a
    /// random level (often full), waiting jobs of 1-16 GPUs.
    fn generated(rng: &mut crate::rng::Rng) -> (Vec<RunningJob>, Vec<WaitingJob>) {
        let mut running = Vec::new();
        for node in 0..4u32 {
            let mut left = if rng.below(2) == 0 { 8 } else { rng.below(9) as u32 };
            while left > 0 {
                let g = (1 + rng.below(left as usize)) as u32;
                let remaining_s = (rng.below(2) == 0).then(|| (1 + rng.below(30)) as u64 * 1800);
                running.push(RunningJob { nodes: vec![(node, g)], remaining_s });
                left -= g;
            }
        }
        let sizes = [1, 2, 3, 4, 6, 8, 16];
        let waiting = (0..1 + rng.below(12))
            .map(|k| WaitingJob {
                id: 100 + k as u64,
                gpus: sizes[rng.below(sizes.len())],
                duration_s: Some((1 + rng.below(40)) as u64 * 1800),
                value: None,
            })
            .collect();
        (running, waiting)
    }

    #[test]
    fn starts_now_without_a_search_only_when_the_plan_starts_none() {
        let rules = QueueRules::default();
        let mut rng = crate::rng::Rng::new(7);
        let (mut skipped, mut planned) = (0, 0);
        for _ in 0..400 {
            let (running, waiting) = generated(&mut rng);
            let fresh: Vec<u64> = plan_queue(32, 8, &rules, &running, &waiting).starts_now().collect();
            assert_eq!(plan_starts_now(32, 8, &rules, &running, &waiting), fresh, "running {running:?}, waiting {waiting:?}");
            let (s, _) = scenario(32, 8, &rules, &running, &waiting);
            if room_now(&s) {
                planned += 1;
            } else {
                assert!(fresh.is_empty());
                skipped += 1;
            }
        }
        // Both sides of the condition are exercised.
        assert!(skipped >= 40 && planned >= 40, "skipped {skipped}, planned {planned}");
    }

    #[test]
    fn room_now_reads_aligned_blocks_not_free_gpus() {
        // 4 GPUs free on each of two nodes: room for a 4-GPU job, none for
        // an 8-GPU one (nor for a 16-GPU one across them).
        let running = vec![RunningJob { nodes: vec![(0, 4), (1, 4)], remaining_s: None }];
        let rules = QueueRules::default();
        let room = |gpus| room_now(&scenario(16, 8, &rules, &running, &[w(1, gpus, 1)]).0);
        assert!(room(3) && room(4));
        assert!(!room(8) && !room(16));
        assert!(plan_starts_now(16, 8, &rules, &running, &[w(1, 8, 1)]).is_empty());
        assert_eq!(plan_starts_now(16, 8, &rules, &running, &[w(1, 8, 1), w(2, 2, 1)]), vec![2]);
        // 6 held on a node leave one aligned 2-block: a 3-GPU job (a 4-block) has none.
        let running = vec![RunningJob { nodes: vec![(0, 6), (1, 8)], remaining_s: None }];
        let room = |gpus| room_now(&scenario(16, 8, &rules, &running, &[w(1, gpus, 1)]).0);
        assert!(room(2) && !room(3));
    }
}
