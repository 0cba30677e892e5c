//! A job is classed by what it will hold (docs/design.md, rule 8): an
//! exclusive job by its whole nodes, a heterogeneous job by all its
//! components, a job array's pending record as all its pending tasks.

mod common;
use common::*;
use tally_allocator::priority::NEED_LANE;
use tally_allocator::*;

/// Teams `a` and `b`, half of 16 GPUs each: a rate of 8 GPUs, so a debug
/// allowance of `max(2, 5% × 8)` = 2 GPUs.
fn world() -> World {
    World::new(16).share("a", None, 50.0).share("b", None, 50.0)
}

/// A debug-shaped job of `a`: 1 GPU, a 10-minute contract.
fn debug(id: u64) -> Job {
    Job::new(id, "a", "u").gpus(1).contract(600, false).submitted(id)
}

/// Each waiting job's priority and GPUs ahead, in the order given.
fn walk(jobs: &[Job]) -> QueueOrder {
    let w = world();
    let waiting: Vec<&Job> = jobs.iter().filter(|j| j.start_s.is_none()).collect();
    order_queue(&waiting, &w.fs(), &w.ent(jobs), &RULES)
}

#[test]
fn a_job_is_debug_by_what_one_task_of_it_will_hold() {
    let two = Job::new(1, "a", "u").gpus(2).contract(600, false);
    let cases: [(&str, Job, bool); 6] = [
        ("2 GPUs", two.clone(), true),
        ("a het job of 2 + 8 GPUs, its 2-GPU leader", two.clone().holds(10), false),
        ("a het job of 1 + 1 GPUs", Job::new(2, "a", "u").gpus(1).contract(600, false).holds(2), true),
        ("an exclusive 2-GPU job on 8-GPU nodes", two.clone().holds(8), false),
        ("an array's record of 200 tasks of 2 GPUs: one task is", two.clone().tasks(200), true),
        ("a job holding fewer than it shows holds what it shows", two.clone().holds(1), true),
    ];
    for (what, job, debug) in cases {
        assert_eq!(RULES.is_debug(&job), debug, "{what}");
        assert_eq!(RULES.is_quick(&job), debug, "{what}: a debug job is quick");
    }
    assert_eq!((two.clone().holds(10).class_gpus(), two.clone().holds(1).class_gpus(), two.tasks(5).class_gpus()), (10, 2, 2));
    assert_eq!(Job::new(3, "a", "u").tasks(0).tasks, 1, "a record stands for at least one task");
}

#[test]
fn an_array_record_takes_the_lane_only_if_all_its_tasks_fit_the_allowance() {
    // (pending tasks of a record of 1-GPU debug tasks, in the lane?)
    // The allowance: two debug jobs of 2 GPUs, 4 GPUs.
    assert_eq!(RULES.debug_allowance(1.0), 4.0);
    for (tasks, lane) in [(1, true), (2, true), (4, true), (5, false), (200, false)] {
        let order = walk(&[debug(1).tasks(tasks)]);
        assert_eq!(order.priorities[0].need == NEED_LANE, lane, "{tasks} tasks against an allowance of 4 GPUs");
        assert!(order.priorities[0].quick, "{tasks} tasks: each is a debug job");
    }
    // A record left out of the lane leaves the allowance to the next
    // debug job; one in it takes its tasks' GPUs from it.
    let order = walk(&[debug(1).tasks(5), debug(2)]);
    assert_eq!((order.priorities[0].need == NEED_LANE, order.priorities[1].need == NEED_LANE), (false, true));
    let order = walk(&[debug(1).tasks(4), debug(2)]);
    assert_eq!((order.priorities[0].need == NEED_LANE, order.priorities[1].need == NEED_LANE), (true, false));
    // A job submitted since the walk: the same rule behind every waiting debug GPU.
    let w = world();
    let ent = w.ent(&[]);
    let fresh = QueueOrder { priorities: Vec::new(), ahead: Vec::new(), waiting_gpus: Default::default() };
    assert_ne!(fresh.priority_of_new(&debug(3).tasks(5), &w.fs(), &ent, &RULES).need, NEED_LANE);
    assert_eq!(fresh.priority_of_new(&debug(3).tasks(4), &w.fs(), &ent, &RULES).need, NEED_LANE);
}

#[test]
fn a_het_job_or_an_exclusive_one_is_not_in_the_lane() {
    let leader = debug(1).gpus(2).holds(10);
    let second = Job::new(2, "a", "u").gpus(8).contract(600, false).submitted(1).holds(10);
    let exclusive = debug(3).gpus(2).holds(8);
    let order = walk(&[leader, second, exclusive, debug(4)]);
    let lane: Vec<bool> = order.priorities.iter().map(|p| p.need == NEED_LANE).collect();
    assert_eq!(lane, [false, false, false, true]);
}

#[test]
fn a_record_counts_all_its_tasks_ahead_and_in_its_teams_demand() {
    // A record of 3 tasks × 2 GPUs (1 h contracts), then a 1-GPU job.
    let record = Job::new(1, "a", "u").gpus(2).contract(HOUR_S, false).submitted(1).tasks(3);
    let after = Job::new(2, "a", "u").gpus(1).contract(HOUR_S, false).submitted(2);
    let order = walk(&[record.clone(), after.clone()]);
    assert_eq!(order.ahead, [0.0, 6.0]);
    assert_eq!(order.waiting_gpus.get("a"), Some(&7.0));
    let t = world().ent(&[record, after]).team("a").unwrap();
    assert_eq!((t.demand, t.debug_waiting), (7.0, 0.0));
    // Units × tasks with a GPU weight; debug GPUs × tasks (not weighted).
    let typed = debug(3).gpus(2).weight(Weight::new(1.5).unwrap()).tasks(2);
    let t = world().ent(std::slice::from_ref(&typed)).team("a").unwrap();
    assert_eq!((t.demand, t.debug_waiting), (6.0, 4.0));
    assert_eq!(walk(&[typed, debug(4)]).ahead, [0.0, 6.0]);
}

#[test]
fn a_het_component_counts_its_own_gpus() {
    // 2 + 8 GPUs: 10 waiting, not 20; the job behind both waits behind 10.
    let leader = Job::new(1, "a", "u").gpus(2).contract(HOUR_S, false).submitted(1).holds(10);
    let second = Job::new(2, "a", "u").gpus(8).contract(HOUR_S, false).submitted(1).holds(10);
    let after = Job::new(3, "a", "u").gpus(1).contract(HOUR_S, false).submitted(2);
    let jobs = [leader, second, after];
    assert_eq!(walk(&jobs).ahead, [0.0, 2.0, 10.0]);
    assert_eq!(world().ent(&jobs).team("a").unwrap().demand, 11.0);
    // Running, an exclusive job holds what Slurm allocated it (its `gpus`).
    let running = Job::new(4, "a", "u").gpus(8).contract(600, false).started(NOW - 60);
    let t = world().ent(&[running]).team("a").unwrap();
    assert_eq!((t.running, t.debug_running), (8.0, 0.0));
}
