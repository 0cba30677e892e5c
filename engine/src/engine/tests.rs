use super::*;
use tally_allocator::state::seal;
use tally_allocator::WEEK_S;

use crate::fixtures::{running, T0, TWO_TEAMS as CONFIG};

fn engine() -> Engine {
    Engine::new(Config::parse(CONFIG, "test.toml").unwrap(), None, T0)
}

fn view(id: u32, account: &str, user: &str, comment: &str) -> JobView {
    JobView {
        account: (!account.is_empty()).then(|| account.into()),
        user_id: 1000,
        comment: (!comment.is_empty()).then(|| comment.to_string()),
        partition: Some("gpu".into()),
        gpus: 2,
        submit_s: T0,
        begin_s: T0,
        ..JobView::pending(id, user.into())
    }
}

#[test]
fn charges_running_allocated_jobs_once() {
    let mut e = engine();
    let j = running(view(1, "a", "alice", "contract=1h"), T0);
    e.tick(T0 + 60, std::slice::from_ref(&j), None);
    e.tick(T0 + 120, std::slice::from_ref(&j), None);
    // The same tick twice charges nothing more.
    let r = e.tick(T0 + 120, std::slice::from_ref(&j), None);
    assert_eq!(r.charged_gpu_s, 0.0);
    assert_eq!(e.usage_by_account(T0 + 120)["a"], 2.0 * 120.0 / HOUR);
}

#[test]
fn an_empty_walk_forgets_no_run_and_charges_nothing_twice() {
    // The primary charged job 1 to +60 and saved; a backup slurmctld takes
    // over with that ledger and (24.11 on) may be walked before it has
    // recovered its jobs: an empty job_list.
    let mut primary = engine();
    let j = running(view(1, "a", "alice", "contract=1h"), T0);
    primary.tick(T0 + 60, std::slice::from_ref(&j), None);
    let config = Config::parse(CONFIG, "test.toml").unwrap();
    let saved = Snapshot::parse(&primary.state_text(T0 + 60), config.bucket_s, config.window_s).unwrap().snapshot;
    let mut backup = Engine::new(config, Some(saved), T0 + 70);
    backup.tick(T0 + 70, Vec::<JobView>::new(), None);
    assert_eq!(backup.snapshot().runs.len(), 1, "the mark of job 1 survives the empty walk");
    // The jobs recovered: job 1 charged from its mark, once (it was charged
    // from its start again: 2 × 180 s).
    backup.tick(T0 + 120, std::slice::from_ref(&j), None);
    assert_eq!(backup.usage_by_account(T0 + 120)["a"], 2.0 * 120.0 / HOUR);
    // A walk with jobs still forgets the runs of jobs gone from the list,
    // and so does an empty one once jobs were seen (an idle cluster).
    let two = running(view(2, "b", "bob", "contract=1h"), T0 + 150);
    backup.tick(T0 + 180, std::slice::from_ref(&two), None);
    assert_eq!(backup.snapshot().runs.get(1).map(|_| ()), None, "job 1 left the list: its run is forgotten");
    backup.tick(T0 + 240, Vec::<JobView>::new(), None);
    assert!(backup.snapshot().runs.is_empty());
}

#[test]
fn unallocated_and_unknown_jobs_are_not_charged() {
    let mut e = engine();
    let jobs = [
        running(view(1, "a", "alice", ""), T0),
        running(view(2, "ghost", "alice", "contract=1h"), T0),
        running(view(3, "a", "alice", "contract=99h"), T0), // refused contract → unallocated
    ];
    let r = e.tick(T0 + 600, &jobs, None);
    assert_eq!(r.charged_gpu_s, 0.0);
    assert!(e.usage_by_account(T0 + 600).is_empty());
}

#[test]
fn users_map_stands_in_for_accounting() {
    let mut e = engine();
    e.tick(T0 + 3600, &[running(view(1, "", "bob", "contract=1h"), T0)], None);
    assert_eq!(e.usage_by_account(T0 + 3600)["b"], 2.0);
}

#[test]
fn requeued_jobs_are_charged_to_their_requeue_only() {
    let mut e = engine();
    let mut j = running(view(1, "a", "alice", "contract=1h"), T0);
    e.tick(T0 + 60, std::slice::from_ref(&j), None);
    // Requeued (preempted) at +90: Slurm zeroes start and end, resets the
    // submit time and counts the restart.
    j.state = RunState::Pending;
    j.start_s = 0;
    j.restarts = 1;
    j.submit_s = T0 + 90;
    e.tick(T0 + 120, std::slice::from_ref(&j), None);
    e.tick(T0 + 180, std::slice::from_ref(&j), None);
    assert_eq!(e.usage_by_account(T0 + 180)["a"], 2.0 * 90.0 / HOUR);
    // Runs again from +300: charged from its new start, not from +90.
    let j = running(j, T0 + 300);
    e.tick(T0 + 360, &[j], None);
    assert_eq!(e.usage_by_account(T0 + 360)["a"], 2.0 * 150.0 / HOUR);
}

#[test]
fn pending_estimates_and_suspended_time_are_not_charged() {
    let mut e = engine();
    // The backfill's start and end estimates on a pending job.
    let planned = JobView { start_s: T0 + 600, end_s: T0 + 4200, ..view(1, "a", "alice", "contract=1h") };
    // Ran 60 s, suspended since +60 (pre_sus_time 60, suspend_time +60).
    let suspended = JobView { state: RunState::Suspended, pre_sus_s: 60, suspend_s: T0 + 60, ..running(view(2, "a", "alice", "contract=1h"), T0) };
    e.tick(T0 + 30, &[planned.clone(), running(view(2, "a", "alice", "contract=1h"), T0)], None);
    e.tick(T0 + 3600, &[planned.clone(), suspended.clone()], None);
    e.tick(T0 + 7000, &[planned, suspended], None);
    assert_eq!(e.usage_by_account(T0 + 7000)["a"], 2.0 * 60.0 / HOUR);
}

#[test]
fn a_running_job_keeps_the_contract_it_started_with() {
    let mut e = engine();
    let j = running(view(1, "a", "alice", "contract=2h"), T0);
    e.tick(T0 + 60, std::slice::from_ref(&j), None);
    // The comment now says contract=0 (job_submit refuses that; an admin may not).
    let edited = JobView { comment: Some("contract=0".into()), ..j };
    e.tick(T0 + 120, std::slice::from_ref(&edited), None);
    assert_eq!(e.usage_by_account(T0 + 120)["a"], 2.0 * 120.0 / HOUR, "still charged");
    let jobs = classify(e.config(), &[edited], &e.snapshot().runs, T0 + 120, DEFAULT_PREEMPT_WINDOW_S);
    assert_eq!(jobs[0].1.contract.min_runtime_s, 7200, "still protected");
}

#[test]
fn a_het_job_has_its_leaders_contract() {
    let e = engine();
    let leader = JobView { het_job_id: 10, ..running(view(10, "a", "alice", "contract=0"), T0) };
    let big = JobView { het_job_id: 10, gpus: 8, ..running(view(11, "a", "alice", "contract=8h"), T0) };
    let jobs = classify(e.config(), &[leader, big], &e.snapshot().runs, T0 + 60, DEFAULT_PREEMPT_WINDOW_S);
    assert!(jobs.iter().all(|(_, j)| !j.contract.is_allocated()), "{jobs:?}");
}

#[test]
fn marks_survive_a_restart_so_nothing_is_charged_twice() {
    let mut e = engine();
    let j = running(view(7, "a", "alice", "contract=1h"), T0);
    e.tick(T0 + 600, std::slice::from_ref(&j), None);
    let saved = e.state_text(T0 + 600);
    let snap = Snapshot::parse(&saved, 3600, WEEK_S).unwrap().snapshot;
    let mut again = Engine::new(Config::parse(CONFIG, "test.toml").unwrap(), Some(snap), T0 + 700);
    again.tick(T0 + 900, &[j], None);
    assert_eq!(again.usage_by_account(T0 + 900)["a"], 2.0 * 900.0 / HOUR);
}

#[test]
fn pending_priorities_follow_usage_and_skip_held_and_admin_set() {
    let mut e = engine();
    let busy = running(view(1, "a", "alice", "contract=1h"), T0);
    let pa = view(2, "a", "alice", "contract=1h");
    let pb = view(3, "b", "bob", "contract=1h");
    let held = JobView { priority: 0, ..view(4, "b", "bob", "contract=1h") };
    let admin = JobView { direct_set_prio: true, priority: 5, ..view(5, "b", "bob", "") };
    let jobs = [busy, pa, pb, held, admin];
    let r = e.tick(T0 + 3600, &jobs, None);
    let prio: BTreeMap<u32, u32> = r.priorities.iter().map(|&(i, p)| (jobs[i].job_id, p)).collect();
    assert_eq!(prio.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
    // b used nothing, a used 2 GPU-hours: b's job first.
    assert!(prio[&3] > prio[&2]);
    // Both allocated: above every unallocated job.
    assert!(prio[&2] >= 1 << 31);
}

#[test]
fn forgotten_jobs_lose_their_runs_and_old_usage_leaves() {
    let mut e = engine();
    e.tick(T0 + 3600, &[running(view(1, "a", "alice", "contract=1h"), T0)], None);
    assert_eq!(e.snapshot().runs.len(), 1);
    // Job 1 gone while job 2 starts: 1's run forgotten, 2's kept; then
    // both known again and nothing forgotten.
    let two = running(view(2, "a", "alice", "contract=1h"), T0 + 3600);
    e.tick(T0 + 3660, std::slice::from_ref(&two), None);
    assert_eq!(e.snapshot().runs.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![2]);
    let three = running(view(3, "a", "alice", "contract=1h"), T0 + 3660);
    e.tick(T0 + 3720, &[two.clone(), three], None);
    assert_eq!(e.snapshot().runs.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![2, 3]);
    e.tick(T0 + 7200, &[], None);
    assert!(e.snapshot().runs.is_empty());
    e.tick(T0 + 8 * DAY_S, &[], None);
    assert!(e.usage_by_account(T0 + 8 * DAY_S).is_empty());
}

#[test]
fn reload_keeps_usage() {
    let mut e = engine();
    e.tick(T0 + 3600, &[running(view(1, "a", "alice", "contract=1h"), T0)], None);
    let mut c = Config::parse(CONFIG, "test.toml").unwrap();
    c.debug = true;
    e.set_config(c, T0 + 3600);
    assert_eq!(e.usage_by_account(T0 + 3600)["a"], 2.0);
}

#[test]
fn what_counts_as_running_and_waiting() {
    let w = DEFAULT_PREEMPT_WINDOW_S;
    let pending = view(1, "a", "alice", "contract=1h");
    assert_eq!(counted(&pending, T0, w), Counted::Waiting);
    assert_eq!(counted(&running(pending.clone(), T0), T0, w), Counted::Running);
    // Held, or not yet eligible: waits for nothing.
    assert_eq!(counted(&JobView { priority: 0, ..pending.clone() }, T0, w), Counted::No);
    assert_eq!(counted(&JobView { begin_s: T0 + 60, ..pending.clone() }, T0, w), Counted::No);
    // Preempting for its GPUs: counts as running until Slurm's kill window ends.
    let preempting = JobView { preempt_start_s: T0, ..pending.clone() };
    assert_eq!(counted(&preempting, T0 + w - 1, w), Counted::Running);
    assert_eq!(counted(&preempting, T0 + w, w), Counted::Waiting);
    assert_eq!(counted(&JobView { state: RunState::Done, ..pending }, T0, w), Counted::No);
}

#[test]
fn the_queue_is_ordered_by_what_each_team_is_owed_now() {
    // 16 GPUs, rate 8 each. a runs 6 (short by 2), b runs 0; a used GPUs
    // in the window, so the 7-day ranking alone would put b first anyway.
    let mut e = engine();
    let busy = JobView { gpus: 6, ..running(view(1, "a", "alice", "contract=1h"), T0) };
    let a1 = view(2, "a", "alice", "contract=1h");
    let b1 = JobView { gpus: 8, ..view(3, "b", "bob", "contract=1h") };
    let b2 = JobView { submit_s: T0 + 1, ..view(4, "b", "bob", "contract=1h") };
    let jobs = [busy, a1, b1, b2];
    let r = e.tick(T0 + 60, &jobs, None);
    let prio: BTreeMap<u32, u32> = r.priorities.iter().map(|&(i, p)| (jobs[i].job_id, p)).collect();
    // b's first job starts b at share 0; a's at 6/8; b's second behind
    // b's 8 GPUs is at b's rate: not owed, after a's.
    assert!(prio[&3] > prio[&2] && prio[&2] > prio[&4], "{prio:?}");
    let rk = e.ranking();
    assert_eq!(rk.walked.ahead(4), Some(8.0));
    // The walk's priority is stored: what the tick wrote, read back.
    assert_eq!(rk.walked.get(4).map(|p| p.priority.value), Some(prio[&4]));
    assert_eq!(walked_priority(&rk, &jobs[3], None).value, prio[&4]);
    assert_eq!(rk.order.waiting_gpus["b"], 10.0);
    // A job submitted since the tick waits behind everything its team had.
    let late = view(9, "a", "alice", "contract=1h");
    let p = priority_of(&rk, &late, None);
    assert_eq!(p.need, tally_allocator::priority::NEED_NONE, "a: 6 running + 2 waiting = its rate");
}

#[test]
fn walked_places_are_found_by_id_in_any_order() {
    let at = |ahead_gpus: f64| Place { priority: Priority::default(), ahead_gpus };
    let a = Walked::new(vec![(7, at(1.0)), (3, at(2.0)), (9, at(0.0))]);
    assert_eq!((a.ahead(3), a.ahead(7), a.ahead(9), a.ahead(4)), (Some(2.0), Some(1.0), Some(0.0), None));
}

#[test]
fn owed_and_delivered_are_recorded_tick_by_tick_and_saved() {
    // 16 GPUs, a and b at 50%: rate 8 each.
    let mut e = engine();
    let jobs = [
        // a: 2 GPUs running, 2 waiting → demand 4 (owed 4).
        running(view(1, "a", "alice", "contract=1h"), T0),
        view(2, "a", "alice", "contract=1h"),
        // b: 2 unallocated GPUs running, nothing allocated asked.
        running(view(3, "b", "bob", ""), T0),
    ];
    e.tick(T0, &jobs, None);
    e.tick(T0 + 60, &jobs, None);
    e.tick(T0 + 120, &jobs, None);
    // A stretch longer than three calc periods is not recorded.
    e.tick(T0 + 3000, &jobs, None);
    e.tick(T0 + 3060, &jobs, None);
    let owed = e.snapshot().owed.owed(&e.snapshot().ledger, T0 + 3060);
    let a = owed["a"];
    // Recorded: 180 s (3 stretches of 60 s) at demand 4 → 0.2 GPU-h owed.
    assert!((a.delivery.owed_gpu_hours - 4.0 * 180.0 / HOUR).abs() < 1e-9, "{a:?}");
    // Delivered is the ledger's: 2 GPUs for 3060 s; credited up to owed.
    assert!((a.delivery.delivered_gpu_hours - 2.0 * 3060.0 / HOUR).abs() < 1e-9);
    assert_eq!(a.delivery.credited_gpu_hours, a.delivery.owed_gpu_hours);
    assert_eq!(a.unallocated_gpu_hours, 0.0);
    let b = owed["b"];
    assert_eq!(b.delivery.owed_gpu_hours, 0.0);
    assert!((b.unallocated_gpu_hours - 2.0 * 180.0 / HOUR).abs() < 1e-9);
    // The load of the moment: a runs 2 and waits for 2.
    assert_eq!(e.snapshot().load.get("a"), Some(&(2.0, 2.0)));
    assert_eq!(e.snapshot().load.get("b"), None);
    // Saved and read back.
    let text = e.state_text(T0 + 3060);
    let back = Snapshot::parse(&text, 3600, WEEK_S).unwrap();
    assert!(back.skipped.is_empty());
    assert_eq!(back.snapshot.owed, e.snapshot().owed);
    assert_eq!(back.snapshot.load, e.snapshot().load);
}

#[test]
fn the_records_of_accounts_gone_from_the_config_go_with_them() {
    let mut e = engine();
    let jobs = [view(1, "a", "alice", "contract=1h"), view(2, "b", "bob", "contract=1h")];
    e.tick(T0, &jobs, None);
    e.tick(T0 + 60, &jobs, None);
    let owes =
        |e: &mut Engine, account: &str| e.state_text(T0 + 120).lines().filter(|l| l.starts_with(&format!("owe {} {account} ", T0 / 3600))).count();
    assert_eq!((owes(&mut e, "a"), owes(&mut e, "b")), (1, 1));
    // b leaves the config: its owed records leave at the next tick.
    e.set_config(Config::parse("[cluster]\ngpus = 16\n[accounts.a]\nshare = 100\n[users]\nalice = \"a\"\n", "test.toml").unwrap(), T0 + 60);
    e.tick(T0 + 120, &jobs, None);
    assert_eq!((owes(&mut e, "a"), owes(&mut e, "b")), (1, 0));
    assert!(!e.state_text(T0 + 120).lines().any(|l| l.starts_with("load b ")));
}

/// [`CONFIG`] with a `[cluster.gpu_types]` table (weights only: the nodes
/// say how many of each).
fn typed_config(table: &str) -> Config {
    Config::parse(&format!("{CONFIG}\n[cluster.gpu_types]\n{table}\n"), "typed.toml").unwrap()
}

fn typed(v: JobView, gpu_type: &str) -> JobView {
    JobView { gpu_type: Some(gpu_type.into()), ..v }
}

#[test]
fn a_b200_hour_is_charged_its_weight() {
    let mut e = Engine::new(typed_config("h100 = 1.0\nb200 = 2.2"), None, T0);
    let jobs = [
        JobView { gpus: 8, ..typed(running(view(1, "a", "alice", "contract=1h"), T0), "h100") },
        JobView { gpus: 8, ..typed(running(view(2, "b", "bob", "contract=1h"), T0), "b200") },
        // A type the table does not name, and an untyped job: weight 1.
        typed(running(view(3, "a", "alice", "contract=1h"), T0), "a100"),
        running(view(4, "b", "bob", "contract=1h"), T0),
    ];
    e.tick(T0, &jobs, None);
    let r = e.tick(T0 + 3600, &jobs, None);
    assert!((r.charged_gpu_s - (8.0 + 8.0 * 2.2 + 2.0 + 2.0) * HOUR).abs() < 1e-6, "{}", r.charged_gpu_s);
    let used = e.usage_by_account(T0 + 3600);
    assert_eq!(used["a"], 8.0 + 2.0);
    assert!((used["b"] - (8.0 * 2.2 + 2.0)).abs() < 1e-9, "{used:?}");
    // The run keeps the weight it started with, and so does the saved record.
    let untyped_now = JobView { gpu_type: None, ..jobs[1].clone() };
    e.tick(T0 + 7200, &[jobs[0].clone(), untyped_now, jobs[2].clone(), jobs[3].clone()], None);
    assert!((e.usage_by_account(T0 + 7200)["b"] - 2.0 * (8.0 * 2.2 + 2.0)).abs() < 1e-9);
    let text = e.state_text(T0 + 7200);
    assert!(text.contains(&format!("\n{}\n", seal("run 2 1796083200 7200 1796090400 1 8 3600 0 0 b bob 2.2"))), "{text}");
    // What b runs now, in budget units: 8 × 2.2 + 2.
    let t = e.ranking().ent.team("b").unwrap();
    assert!((t.running - 19.6).abs() < 1e-9, "{t:?}");
}

#[test]
fn weights_of_one_change_nothing() {
    let jobs = |typed_views: bool| {
        let t = |v: JobView, ty: &str| if typed_views { typed(v, ty) } else { v };
        vec![
            t(JobView { gpus: 6, ..running(view(1, "a", "alice", "contract=1h"), T0) }, "h100"),
            t(view(2, "a", "alice", "contract=1h"), "b200"),
            t(JobView { gpus: 8, ..view(3, "b", "bob", "contract=1h") }, "b200"),
            t(running(view(4, "b", "bob", ""), T0), "h100"),
        ]
    };
    let run = |mut e: Engine, views: Vec<JobView>| {
        let mut prios = Vec::new();
        for k in 0..5 {
            prios.push(e.tick(T0 + 600 * k, views.clone(), None).priorities);
        }
        (prios, e.state_text(T0 + 3000))
    };
    let plain = run(engine(), jobs(false));
    let ones = run(Engine::new(typed_config("h100 = 1\nb200 = 1.0"), None, T0), jobs(true));
    assert_eq!(plain, ones);
    // And a table of weight 1 with the nodes' counts: the same capacity.
    let mut e = Engine::new(typed_config("h100 = 1\nb200 = 1.0"), None, T0);
    e.set_gpu_inventory([(Some("h100".into()), 8), (Some("b200".into()), 8)].into_iter().collect(), T0);
    assert_eq!(e.ranking().ent.capacity_gpus(), 16.0);
}

#[test]
fn the_nodes_gpus_per_type_set_the_capacity() {
    // 16 GPUs: 8 H100s and 8 B200s on the nodes.
    let nodes = || -> BTreeMap<Option<Arc<str>>, u32> { [(Some("h100".into()), 8), (Some("b200".into()), 8)].into_iter().collect() };
    let mut e = Engine::new(typed_config("h100 = 1.0\nb200 = 2.2"), None, T0);
    assert_eq!(e.ranking().ent.capacity_gpus(), 16.0, "until the nodes are counted: 16 of weight 1");
    assert!(e.set_gpu_inventory(nodes(), T0));
    assert!(!e.set_gpu_inventory(nodes(), T0), "the same counts change nothing");
    let cap = 8.0 + 8.0 * 2.2;
    assert!((e.ranking().ent.capacity_gpus() - cap).abs() < 1e-9);
    assert!((e.ranking().ent.team("a").unwrap().rate - cap / 2.0).abs() < 1e-9);
    // Saved with the ledger, read back by a restart (and the reports).
    let text = e.state_text(T0);
    assert!(text.ends_with(&format!("{}\n{}\n", seal("gpus b200 8"), seal("gpus h100 8"))), "{text}");
    let snap = Snapshot::parse(&text, 3600, WEEK_S).unwrap().snapshot;
    let again = Engine::new(typed_config("h100 = 1.0\nb200 = 2.2"), Some(snap.clone()), T0);
    assert!((again.ranking().ent.capacity_gpus() - cap).abs() < 1e-9);
    // Restarted on a config without the table: the counts are not kept.
    let plain = Engine::new(Config::parse(CONFIG, "test.toml").unwrap(), Some(snap), T0);
    assert!(plain.snapshot().inventory.is_empty());
    // A count in the file wins over the nodes'.
    let mut f = Engine::new(typed_config("h100 = 1.0\nb200 = { weight = 2.2, gpus = 4 }"), None, T0);
    f.set_gpu_inventory(nodes(), T0);
    assert!((f.ranking().ent.capacity_gpus() - (8.0 + 4.0 * 2.2 + 4.0)).abs() < 1e-9);
    // Without [cluster.gpu_types] the nodes' types are not read.
    let mut g = engine();
    assert!(!g.set_gpu_inventory(nodes(), T0));
    assert_eq!(g.ranking().ent.capacity_gpus(), 16.0);
    assert!(!g.state_text(T0).contains("\ngpus "));
    // A reload without the table forgets them.
    e.set_config(Config::parse(CONFIG, "test.toml").unwrap(), T0 + 60);
    assert_eq!(e.ranking().ent.capacity_gpus(), 16.0);
    assert!(e.snapshot().inventory.is_empty());
}

#[test]
fn a_team_on_b200s_ranks_behind_a_team_that_ran_as_long_on_h100s() {
    // a ran 8 B200s for an hour, b 8 H100s: the same GPU-hours, but a
    // used 2.2 times the budget. Their next jobs: b's first.
    let mut e = Engine::new(typed_config("h100 = 1.0\nb200 = 2.2"), None, T0);
    e.set_gpu_inventory([(Some("h100".into()), 8), (Some("b200".into()), 8)].into_iter().collect(), T0);
    let ran = [
        JobView { gpus: 8, end_s: T0 + 3600, state: RunState::Done, ..typed(running(view(1, "a", "alice", "contract=1h"), T0), "b200") },
        JobView { gpus: 8, end_s: T0 + 3600, state: RunState::Done, ..typed(running(view(2, "b", "bob", "contract=1h"), T0), "h100") },
    ];
    e.tick(T0 + 3600, &ran, None);
    let next = [typed(view(3, "a", "alice", "contract=1h"), "h100"), typed(view(4, "b", "bob", "contract=1h"), "h100")];
    let r = e.tick(T0 + 3660, &next, None);
    let prio: BTreeMap<u32, u32> = r.priorities.iter().map(|&(i, p)| (next[i].job_id, p)).collect();
    assert!(prio[&4] > prio[&3], "{prio:?}");
    let rk = e.ranking();
    assert!(rk.fs.standing("b").unwrap().rank < rk.fs.standing("a").unwrap().rank);
    // Untyped (no table), the same history ties and the name decides: a first.
    let mut u = engine();
    u.tick(T0 + 3600, &ran, None);
    let r = u.tick(T0 + 3660, &next, None);
    let prio: BTreeMap<u32, u32> = r.priorities.iter().map(|&(i, p)| (next[i].job_id, p)).collect();
    assert!(prio[&3] > prio[&4], "{prio:?}");
}

/// a (rate 8) runs `a_gpus`; b (rate 8) waits for 8 (owed: a's fair share
/// of what is asked is its rate); then a's 4-GPU jobs with these comments
/// and no time limit (long, unless resumable), ids 3, 4, … in submit order.
fn contended(a_gpus: u32, comments: &[&str]) -> Vec<JobView> {
    let mut jobs = vec![
        running(JobView { gpus: a_gpus, ..view(1, "a", "alice", "contract=1h") }, T0),
        JobView { gpus: 8, time_limit_s: Some(HOUR_S), ..view(2, "b", "bob", "contract=1h") },
    ];
    for (k, c) in (3..).zip(comments) {
        jobs.push(JobView { gpus: 4, submit_s: T0 + u64::from(k), ..view(k, "a", "alice", c) });
    }
    jobs
}

#[test]
fn a_long_job_that_cannot_checkpoint_is_held_by_its_begin_time_and_let_go() {
    let mut e = engine();
    // a's long job (no time limit, not resumable) and the same job resumable.
    let jobs = contended(8, &["contract=1h", "contract=1h,resumable"]);
    let now = T0 + 60;
    let r = e.tick(now, jobs.clone(), None);
    let until = now + HOLD_PERIODS * 60;
    assert_eq!(r.begins, [(2, until)], "only the long job is held, three periods ahead");
    // Slurm now shows the begin time written: the engine still counts the
    // job as waiting from its own begin time (in its team's demand, walked,
    // given a priority), and moves the hold on.
    let mut held = jobs.clone();
    held[2].begin_s = until;
    let r = e.tick(now + 60, held.clone(), None);
    assert_eq!(r.begins, [(2, until + 60)]);
    assert!(e.ranking().walked.get(3).is_some(), "the held job keeps its place in the walk");
    assert_eq!(e.ranking().ent.team("a").unwrap().demand, 16.0, "and its GPUs in its team's demand");
    // b's job leaves: nobody is owed, the hold goes back to the begin time it had.
    held[2].begin_s = until + 60;
    let gone: Vec<JobView> = held.iter().filter(|v| v.job_id != 2).cloned().collect();
    let r = e.tick(now + 120, gone.clone(), None);
    assert_eq!(r.begins, [(1, T0)], "released to its own begin time");
    // Let go, it is Tally's no longer: the next tick writes nothing.
    let mut released = gone;
    released[1].begin_s = T0;
    assert!(e.tick(now + 180, released, None).begins.is_empty());
}

#[test]
fn a_begin_time_someone_else_set_is_theirs() {
    let mut e = engine();
    let now = T0 + 60;
    let mut jobs = contended(8, &["contract=1h"]);
    let r = e.tick(now, jobs.clone(), None);
    assert_eq!(r.begins.len(), 1);
    // An admin moved it (`scontrol update StartTime=`) a day ahead: not a
    // job that waits now, and never given back Tally's idea of its begin.
    jobs[2].begin_s = now + DAY_S;
    let r = e.tick(now + 60, jobs.clone(), None);
    assert!(r.begins.is_empty(), "{:?}", r.begins);
    jobs.remove(1);
    assert!(e.tick(now + 120, jobs, None).begins.is_empty());
}

#[test]
fn long_jobs_let_go_count_ahead_of_their_teams_next() {
    // a runs 4 GPUs of its 8; two long 4-GPU jobs: the first starts on a's
    // own share, the second would take b's.
    let mut e = engine();
    let r = e.tick(T0 + 60, contended(4, &["contract=1h", "contract=1h"]), None);
    assert_eq!(r.begins.iter().map(|&(i, _)| i).collect::<Vec<_>>(), [3], "{:?}", r.begins);
}
