//! The planner thread's work, without Slurm: from slurmctld's jobs (copied
//! out under its read lock) to the [`PlanBoard`] of jobs the plan starts
//! now. The rule itself is `tally_planner::queue`, shared with the
//! simulator's `planner` policy.

use crate::engine::{queue, walked_priority, PlanBoard, Ranking};
use crate::view::{JobView, NodeView, RunState};
use std::collections::BTreeMap;
use tally_planner::queue::{plan_queue, QueuePlan, RunningJob, WaitingJob};

/// A job and the node indices it runs on (empty unless running).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub view: JobView,
    pub nodes: Vec<u32>,
}

impl Placed {
    /// The GPUs it holds on each of its nodes: (node index, GPUs)
    /// ([`held_on`]).
    pub fn held(&self) -> Vec<(u32, u32)> {
        held_on(self.view.gpus, &self.nodes)
    }
}

/// The GPUs a running job of `gpus` GPUs holds on each of `nodes`: (node
/// index, GPUs). Slurm gives a multi-node GPU job the same count on each
/// node (the first nodes take what does not divide).
pub fn held_on(gpus: u32, nodes: &[u32]) -> Vec<(u32, u32)> {
    let n = nodes.len() as u32;
    if n == 0 {
        return Vec::new();
    }
    let (each, extra) = (gpus / n, gpus % n);
    nodes.iter().enumerate().map(|(k, &node)| (node, each + u32::from((k as u32) < extra))).collect()
}

/// The nodes as a preemption sees them ([`tally_allocator::Nodes`]): each
/// node's GPUs and those the running jobs leave free (`held`: where each
/// running job holds its GPUs, [`held_on`]), by node index, and which are
/// the debug capacity's (`debug_nodes`, by name).
pub fn preemption_nodes<'a>(nodes: &[NodeView], held: impl IntoIterator<Item = &'a [(u32, u32)]>, debug_nodes: &[String]) -> tally_allocator::Nodes {
    let slots = nodes.iter().map(|n| n.index as usize + 1).max().unwrap_or(0);
    let mut size = vec![0u32; slots];
    let mut debug = vec![false; slots];
    for n in nodes {
        size[n.index as usize] = n.gpu_total();
        debug[n.index as usize] = debug_nodes.iter().any(|d| **d == *n.name);
    }
    let mut free = size.clone();
    for &(node, g) in held.into_iter().flatten() {
        if let Some(f) = free.get_mut(node as usize) {
            *f = f.saturating_sub(g);
        }
    }
    tally_allocator::Nodes { size, free, debug }
}

/// What a re-plan saw and decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replan {
    pub board: PlanBoard,
    pub plan: QueuePlan,
    pub running: usize,
    pub waiting: usize,
}

/// Plan the queue under the ranking's config (`None` without `[planner]`
/// or `[cluster] gpus`). Waiting jobs are the pending, eligible (begin time
/// passed), not held jobs that ask for GPUs, in Tally's order without the
/// plan bit (so the last plan does not feed the next one).
///
/// `nodes`: slurmctld's node table. Given, the plan uses it: only nodes
/// that can run work now ([`crate::view::NodeState::usable`]: not down,
/// draining, reserved or powered off), each with its own GPU count, and
/// each job only on the nodes of its partitions. The planner's model has
/// nodes of one size: the largest node's; a node with fewer GPUs, or none
/// usable now, has the rest held for the whole horizon. Jobs of different
/// partition sets are planned one set after another, each on its nodes
/// (a job in a set planned later does not see a hole an earlier set was
/// planned into: both may get the plan bit, and Slurm starts one). Empty:
/// the config's `[cluster] gpus` and `gpus_per_node`, all nodes alike.
pub fn replan(r: &Ranking, jobs: &[Placed], nodes: &[NodeView], now: u64) -> Option<Replan> {
    let config = &r.config;
    let planner = config.planner?;
    let gpus = config.cluster.gpus?;
    let running: Vec<RunningJob> = jobs
        .iter()
        .filter(|p| p.view.state == RunState::Running && p.view.gpus > 0 && !p.nodes.is_empty())
        .map(|p| {
            let nodes = p.held();
            let remaining_s = p.view.time_limit_s.map(|limit| (p.view.start_s + limit).saturating_sub(now));
            RunningJob { nodes, remaining_s }
        })
        .collect();
    // In Slurm's order at the priorities of the last walk.
    let mut waiting: Vec<(queue::SlurmKey, &JobView)> = jobs
        .iter()
        .map(|p| &p.view)
        .filter(|v| queue::waiting(v, now) && v.gpus > 0)
        .map(|v| (queue::slurm_order_at(v, walked_priority(r, v, None).value, None), v))
        .collect();
    waiting.sort_unstable_by_key(|&(key, _)| key);
    let to_waiting = |v: &JobView| WaitingJob { id: u64::from(v.job_id), gpus: v.gpus, duration_s: v.time_limit_s, value: None };
    let plan = if nodes.is_empty() {
        let queue: Vec<WaitingJob> = waiting.iter().map(|(_, v)| to_waiting(v)).collect();
        plan_queue(gpus, config.cluster.gpus_per_node, &planner.rules, &running, &queue)
    } else {
        // Partition sets in the order of their first job.
        let mut sets: Vec<(Option<&str>, Vec<WaitingJob>)> = Vec::new();
        for (_, v) in &waiting {
            let set = v.partition.as_deref();
            match sets.iter_mut().find(|(s, _)| *s == set) {
                Some((_, q)) => q.push(to_waiting(v)),
                None => sets.push((set, vec![to_waiting(v)])),
            }
        }
        let per_node = nodes.iter().map(NodeView::gpu_total).max().unwrap_or(0).max(1);
        let slots = nodes.iter().map(|n| n.index as usize + 1).max().unwrap_or(0);
        let by_index: BTreeMap<u32, &NodeView> = nodes.iter().map(|n| (n.index, n)).collect();
        let mut merged = QueuePlan::default();
        for (set, queue) in &sets {
            let mut pinned = running.clone();
            for i in 0..slots as u32 {
                let open =
                    by_index.get(&i).filter(|n| n.state.usable() && set.is_none_or(|s| s.split(',').any(|p| n.partitions.iter().any(|q| &**q == p))));
                let held = per_node - open.map_or(0, |n| n.gpu_total().min(per_node));
                if held > 0 {
                    pinned.push(RunningJob { nodes: vec![(i, held)], remaining_s: None });
                }
            }
            let p = plan_queue(slots as u32 * per_node, per_node, &planner.rules, &pinned, queue);
            merged.start_step.extend(p.start_step);
            merged.considered += p.considered;
            merged.skipped += p.skipped;
        }
        merged
    };
    let board = PlanBoard { starts_now: plan.starts_now().filter_map(|id| u32::try_from(id).ok()).collect(), planned_at: now };
    Some(Replan { board, plan, running: running.len(), waiting: waiting.len() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{changed_priorities, Engine};
    use tally_config::Config;

    const T0: u64 = 1_796_083_200;

    fn config(planner: bool) -> Config {
        let text = format!(
            "[cluster]\ngpus = 16\ngpus_per_node = 8\n[planner]\nenabled = {planner}\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n[users]\nalice = \"a\"\nbob = \"b\"\n"
        );
        Config::parse(&text, "test.toml").unwrap()
    }

    fn job(id: u32, user: &str, gpus: u32, state: RunState, nodes: Vec<u32>) -> Placed {
        let view = JobView {
            state,
            user_id: 1000,
            comment: Some("contract=1h".into()),
            gpus,
            submit_s: T0,
            begin_s: T0,
            start_s: if state == RunState::Running { T0 } else { 0 },
            time_limit_s: Some(7200),
            ..JobView::pending(id, user.into())
        };
        Placed { view, nodes }
    }

    #[test]
    fn the_job_that_fits_the_hole_gets_the_plan_bit_over_a_better_ranked_one() {
        // b has used GPUs (ranks below a). Node 0 is full, node 1 half full.
        let mut e = Engine::new(config(true), None, T0);
        let busy = vec![job(1, "bob", 8, RunState::Running, vec![0]), job(2, "bob", 4, RunState::Running, vec![1])];
        let views: Vec<JobView> = busy.iter().map(|p| p.view.clone()).collect();
        e.tick(T0 + 600, views.as_slice(), None);
        let r = e.ranking();
        assert!(r.fs.standing("a").unwrap().rank < r.fs.standing("b").unwrap().rank);
        let mut jobs = busy;
        jobs.push(job(10, "alice", 8, RunState::Pending, vec![])); // a: a whole node, none free
        jobs.push(job(11, "bob", 4, RunState::Pending, vec![])); // b: fits node 1 now
        let t = T0 + 600;
        let before: Vec<u32> = jobs[2..].iter().map(|p| walked_priority(&r, &p.view, None).value).collect();
        assert!(before[0] > before[1], "without a plan a's job comes first");
        let re = replan(&r, &jobs, &[], t).expect("planner enabled");
        assert_eq!((re.running, re.waiting), (2, 2));
        assert_eq!(re.board.starts_now.iter().copied().collect::<Vec<_>>(), vec![11]);
        let views: Vec<JobView> = jobs.iter().map(|p| p.view.clone()).collect();
        let classified = crate::engine::classify(&r.config, &views, &tally_allocator::RunBook::new(), t, 0);
        let changed = changed_priorities(&r, &views, &classified, Some(&re.board));
        let p10 = changed.iter().find(|c| c.0 == 2).unwrap().1;
        let p11 = changed.iter().find(|c| c.0 == 3).unwrap().1;
        assert!(p11 > p10, "the plan starts b's job now: it goes first");
        assert_eq!(p11 & (1 << 30), 1 << 30);
        assert_eq!(p10 & (1 << 30), 0);
    }

    #[test]
    fn no_planner_no_board_and_held_or_future_jobs_are_not_planned() {
        let e = Engine::new(config(false), None, T0);
        assert!(replan(&e.ranking(), &[job(1, "alice", 1, RunState::Pending, vec![])], &[], T0).is_none());
        let e = Engine::new(config(true), None, T0);
        let mut held = job(1, "alice", 1, RunState::Pending, vec![]);
        held.view.priority = 0;
        let mut later = job(2, "alice", 1, RunState::Pending, vec![]);
        later.view.begin_s = T0 + 3600;
        let cpu_only = job(3, "alice", 0, RunState::Pending, vec![]);
        let re = replan(&e.ranking(), &[held, later, cpu_only, job(4, "bob", 2, RunState::Pending, vec![])], &[], T0).unwrap();
        assert_eq!(re.waiting, 1);
        assert_eq!(re.board.starts_now.iter().copied().collect::<Vec<_>>(), vec![4]);
    }

    #[test]
    fn multi_node_jobs_hold_their_share_of_each_node() {
        let e = Engine::new(config(true), None, T0);
        // 16 GPUs over both nodes: nothing fits now; a 1-GPU job waits 2 h.
        let jobs = vec![job(1, "bob", 16, RunState::Running, vec![0, 1]), job(2, "alice", 1, RunState::Pending, vec![])];
        let re = replan(&e.ranking(), &jobs, &[], T0).unwrap();
        assert!(re.board.starts_now.is_empty());
        assert_eq!(re.plan.start_step.get(&2), Some(&2));
    }

    fn node(index: u32, gpus: u32, partitions: &[&str]) -> NodeView {
        NodeView {
            index,
            name: format!("n{}", index + 1).into(),
            gpus: vec![(None, gpus)],
            state: crate::view::NodeState::default(),
            reason: None,
            partitions: partitions.iter().map(|&p| p.into()).collect(),
        }
    }

    fn pending_in(id: u32, gpus: u32, partition: &str) -> Placed {
        let mut p = job(id, "alice", gpus, RunState::Pending, vec![]);
        p.view.partition = Some(partition.into());
        p
    }

    #[test]
    fn only_usable_nodes_of_the_jobs_partitions_with_their_own_gpus_are_planned() {
        let e = Engine::new(config(true), None, T0);
        let r = e.ranking();
        let two = || vec![node(0, 8, &["gpu", "debug"]), node(1, 8, &["gpu"])];
        let q = vec![pending_in(5, 8, "gpu")];
        // Both nodes free: the job starts now.
        assert_eq!(replan(&r, &q, &two(), T0).unwrap().board.starts_now.len(), 1);
        // Node 1 draining, node 0 busy: nothing to start on.
        let mut nodes = two();
        nodes[1].state.drain = true;
        let busy0 = job(1, "bob", 8, RunState::Running, vec![0]);
        let re = replan(&r, &[busy0.clone(), q[0].clone()], &nodes, T0).unwrap();
        assert!(re.board.starts_now.is_empty(), "planned onto a draining node");
        // Down, reserved or powered off likewise.
        let marks: [fn(&mut crate::view::NodeState); 3] = [|s| s.down = true, |s| s.reserved = true, |s| s.unavailable = true];
        for f in marks {
            let mut nodes = two();
            f(&mut nodes[1].state);
            assert!(replan(&r, &[busy0.clone(), q[0].clone()], &nodes, T0).unwrap().board.starts_now.is_empty());
        }
        // A debug job sees node 0 only (full): it waits though node 1 is free.
        let re = replan(&r, &[busy0.clone(), pending_in(6, 4, "debug")], &two(), T0).unwrap();
        assert!(re.board.starts_now.is_empty(), "planned outside its partition");
        // A job of gpu fits node 1 now.
        assert_eq!(replan(&r, &[busy0, pending_in(7, 4, "gpu")], &two(), T0).unwrap().board.starts_now.len(), 1);
        // A 4-GPU node does not take an 8-GPU job.
        let small = vec![node(0, 8, &["gpu"]), node(1, 4, &["gpu"])];
        let busy = job(1, "bob", 8, RunState::Running, vec![0]);
        assert!(replan(&r, &[busy.clone(), pending_in(8, 8, "gpu")], &small, T0).unwrap().board.starts_now.is_empty());
        assert_eq!(replan(&r, &[busy, pending_in(9, 4, "gpu")], &small, T0).unwrap().board.starts_now.len(), 1);
    }
}
