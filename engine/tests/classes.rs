//! The engine classes a job by what it will hold (docs/design.md, rule 8):
//! an exclusive pending job by its whole nodes, every component of a
//! heterogeneous job by all of them, an array's pending record as all its
//! pending tasks; and the walk gives none of them the debug lane.

use std::sync::Arc;
use tally_allocator::priority::NEED_LANE;
use tally_allocator::{Job, Snapshot};
use tally_config::Config;
use tally_engine::engine::{classify, entitlement_of, rank, to_job, Counted};
use tally_engine::view::{JobView, PartitionGpus, RunState};

const T0: u64 = 1_796_083_200;

/// Teams `a` and `b`, half of 64 GPUs each (a rate of 32 GPUs: a debug
/// allowance of `max(2, 5% × 32)` = 2 GPUs), nodes of 8 GPUs.
fn config() -> Arc<Config> {
    let text = "[cluster]\ngpus = 64\ngpus_per_node = 8\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n[users]\nalice = \"a\"\n";
    Arc::new(Config::parse(text, "test.toml").unwrap())
}

/// A pending debug-shaped job of `a`: `gpus` GPUs, a 10-minute contract.
fn pending(id: u32, gpus: u32) -> JobView {
    JobView {
        account: Some("a".into()),
        comment: Some("contract=10m".into()),
        partition: Some("gpu".into()),
        gpus,
        submit_s: T0 + u64::from(id),
        begin_s: T0,
        ..JobView::pending(id, "alice".into())
    }
}

fn running(mut v: JobView) -> JobView {
    v.state = RunState::Running;
    v.start_s = T0;
    v
}

fn jobs(views: &[JobView]) -> Vec<(Counted, Job)> {
    classify(&config(), views, &tally_allocator::RunBook::new(), T0 + 60, 0)
}

/// Which of `views` the walk puts in the debug lane.
fn lane(views: &[JobView]) -> Vec<bool> {
    let config = config();
    let ranking = rank(&config, &Snapshot::new(config.new_ledger()), &jobs(views), T0 + 60);
    views.iter().map(|v| ranking.walked.get(v.job_id).is_some_and(|p| p.priority.need == NEED_LANE)).collect()
}

#[test]
fn an_exclusive_pending_job_is_classed_by_its_whole_nodes() {
    let c = config();
    let exclusive = JobView { exclusive: true, ..pending(1, 2) };
    // Without the nodes: `[cluster] gpus_per_node`.
    let (job, _) = to_job(&c, &exclusive);
    assert_eq!((job.gpus, job.class_gpus(), c.priority.is_debug(&job)), (2, 8, false));
    // Two nodes of its partition's largest.
    let nodes: [(&[&str], u32); 3] = [(&["gpu"], 4), (&["gpu", "big"], 8), (&["small"], 2)];
    let whole = PartitionGpus::new(nodes);
    let mut two = JobView { nodes: 2, ..exclusive.clone() };
    two.set_node_gpus(&whole);
    assert_eq!((two.node_gpus, to_job(&c, &two).0.class_gpus()), (Some(8), 16));
    // On nodes of 2 GPUs it holds 2: a debug job.
    let mut small = JobView { partition: Some("small".into()), ..exclusive.clone() };
    small.set_node_gpus(&whole);
    assert!(c.priority.is_debug(&to_job(&c, &small).0));
    // Not exclusive: what it asks for; running: what Slurm allocated it.
    assert!(c.priority.is_debug(&to_job(&c, &pending(2, 2)).0));
    let holding = running(JobView { gpus: 8, ..exclusive.clone() });
    assert_eq!(to_job(&c, &holding).0.holds_gpus, None);
    assert_eq!(lane(&[exclusive, pending(3, 2)]), [false, true]);
}

#[test]
fn a_het_job_is_classed_by_all_its_components() {
    let c = config();
    let leader = JobView { het_job_id: 10, ..pending(10, 2) };
    let second = JobView { het_job_id: 10, gpus: 8, comment: None, ..pending(11, 8) };
    let views = [leader.clone(), second.clone(), pending(12, 2)];
    let classified = jobs(&views);
    let debug: Vec<bool> = classified.iter().map(|(_, j)| c.priority.is_debug(j)).collect();
    assert_eq!(debug, [false, false, true]);
    assert_eq!(classified.iter().map(|(_, j)| (j.gpus, j.class_gpus())).collect::<Vec<_>>(), [(2, 10), (8, 10), (2, 2)]);
    assert_eq!(lane(&views), [false, false, true]);
    // Each component counts its own GPUs: 2 + 8 + 2 waiting, not 22.
    let ent = entitlement_of(&c, &tally_engine::engine::allocation(&c), &classified);
    assert_eq!(ent.team("a").unwrap().demand, 12.0);
    // A leader of 1 GPU with a 1-GPU component: 2 GPUs, debug.
    let small = [JobView { het_job_id: 20, ..pending(20, 1) }, JobView { het_job_id: 20, ..pending(21, 1) }];
    assert!(jobs(&small).iter().all(|(_, j)| c.priority.is_debug(j)));
    // An exclusive component counts its whole nodes in the total.
    let ex = [JobView { het_job_id: 30, ..pending(30, 1) }, JobView { het_job_id: 30, exclusive: true, ..pending(31, 1) }];
    assert!(jobs(&ex).iter().all(|(_, j)| j.class_gpus() == 9));
}

#[test]
fn an_array_record_stands_for_its_pending_tasks() {
    let c = config();
    let record = JobView { array_tasks: 200, ..pending(1, 1) };
    let classified = jobs(std::slice::from_ref(&record));
    let job = &classified[0].1;
    assert_eq!((job.tasks, job.gpus, c.priority.is_debug(job)), (200, 1, true));
    let ent = entitlement_of(&c, &tally_engine::engine::allocation(&c), &classified);
    let team = ent.team("a").unwrap();
    assert_eq!((team.demand, team.debug_waiting), (200.0, 200.0));
    // All 200 tasks do not fit an allowance of 4 GPUs (two debug jobs of
    // 2); 4 tasks do, and leave no room for the next debug job.
    assert_eq!(lane(&[record, pending(2, 1)]), [false, true]);
    assert_eq!(lane(&[JobView { array_tasks: 4, ..pending(1, 1) }, pending(2, 1)]), [true, false]);
    // A running job is one task, whatever its record said.
    assert_eq!(to_job(&c, &running(JobView { array_tasks: 5, ..pending(3, 1) })).0.tasks, 1);
}
