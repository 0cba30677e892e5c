//! Hand-computable micro-traces: two teams, four GPUs on one node; the exact
//! schedule each policy must produce.

use tally_allocator::HOUR_S;
use tally_config::Config;
use tally_sim::sim::{run_logged, Happening, Policy, Settings};
use tally_sim::trace::{Class, Trace, TraceJob};

/// Two teams of 50%; contracts of at most a minute; no debug class
/// (tested apart).
fn config() -> Config {
    Config::parse(
        "[cluster]\ngpus = 4\ngpus_per_node = 4\n[contracts]\nmax = \"1m\"\n[priority]\ndebug_max_gpus = 0\n\
         [accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n",
        "micro.toml",
    )
    .unwrap()
}

fn settings() -> Settings {
    // Requeued jobs may start again at once (the delay is tested apart).
    Settings { gpus: 4, gpus_per_node: 4, replan_s: 60, backfill_depth: 10, requeue_delay_s: 0, ..Settings::default() }
}

/// (id, submit, duration, gpus, team, class, contract, resumable)
type Row<'a> = (u64, u64, u64, u32, &'a str, Class, u64, bool);

fn trace(rows: &[Row]) -> Trace {
    Trace {
        jobs: rows
            .iter()
            .map(|&(job_id, submit_s, duration_s, gpus, account, class, contract_s, resumable)| TraceJob {
                job_id,
                submit_s,
                duration_s,
                gpus,
                account: account.to_string(),
                user: format!("{account}-u1"),
                class,
                contract_s,
                resumable,
                priority: 0,
                gpu_type: None,
                time_limit_s: None,
                name: None,
            })
            .collect(),
    }
}

use Happening::{End, Preempt, Start};
const T: Class = Class::Training;

fn start(t: u64, job: u64) -> Happening {
    Start { t, job, nodes: vec![0] }
}

fn schedule(policy: Policy, tr: &Trace) -> Vec<Happening> {
    let (r, log) = run_logged(tr, &config(), policy, settings()).unwrap();
    assert_eq!(r.contract_violations, 0, "{policy:?}");
    log
}

#[test]
fn fifo_runs_in_arrival_order_and_backfills_without_delay() {
    // 1 holds 2 GPUs until 100; 2 needs all 4 (reserved at 100); 3 fits in the
    // gap and ends by 100 (backfilled); 4 would outlast 100 on reserved GPUs.
    let tr = trace(&[
        (1, 0, 100, 2, "a", T, 0, false),
        (2, 10, 100, 4, "b", T, 0, false),
        (3, 20, 50, 2, "a", T, 0, false),
        (4, 30, 200, 2, "a", T, 0, false),
    ]);
    let want = vec![
        start(0, 1),
        start(20, 3),
        End { t: 70, job: 3 },
        End { t: 100, job: 1 },
        start(100, 2),
        End { t: 200, job: 2 },
        start(200, 4),
        End { t: 400, job: 4 },
    ];
    for p in [Policy::Fifo, Policy::Multifactor] {
        assert_eq!(schedule(p, &tr), want, "{p:?}");
    }
    // Tally: all four are unallocated (no contract), nobody is charged, the
    // teams tie and `a` ranks first by name: at the re-plan at 60 job 4 (a)
    // moves ahead of job 2 (b) and takes the 2 GPUs free at 70.
    assert_eq!(
        schedule(Policy::Tally, &tr),
        vec![
            start(0, 1),
            start(20, 3),
            End { t: 70, job: 3 },
            start(70, 4),
            End { t: 100, job: 1 },
            End { t: 270, job: 4 },
            start(270, 2),
            End { t: 370, job: 2 },
        ]
    );
}

#[test]
fn tally_protects_a_contract_then_restores_what_is_owed() {
    // a (rate 2) runs two 2-GPU resumable jobs with 60 s contracts: twice
    // its rate. b's job (rate 2, running 0) arrives at 10 and waits until
    // the contracts have run out; at the re-plan at 60 it takes one of a's
    // jobs (equal progress: the higher id), which leaves a at its rate.
    let tr = trace(&[(1, 0, 1000, 2, "a", T, 60, true), (2, 0, 1000, 2, "a", T, 60, true), (3, 10, 100, 2, "b", T, 60, false)]);
    let (r, log) = run_logged(&tr, &config(), Policy::Tally, settings()).unwrap();
    assert_eq!(
        log,
        vec![
            start(0, 1),
            start(0, 2),
            Preempt { t: 60, job: 2, by: 3 },
            start(60, 3),
            End { t: 160, job: 3 },
            start(160, 2),
            End { t: 1000, job: 1 },
            // Resumable: 940 s of work left.
            End { t: 1100, job: 2 },
        ]
    );
    assert_eq!((r.score.preemptions, r.contract_violations, r.score.lost_gpu_hours), (1, 0, 0.0));
    // FIFO and multifactor never preempt here (no high-QOS class).
    assert!(!schedule(Policy::Fifo, &tr).iter().any(|h| matches!(h, Preempt { .. })));
    assert_eq!(schedule(Policy::Multifactor, &tr), schedule(Policy::Fifo, &tr));
}

#[test]
fn tally_never_requeues_a_job_that_cannot_checkpoint() {
    // The same, but a's jobs cannot checkpoint: past their contracts
    // nothing takes them (a requeue would throw their runs away), so b's
    // job waits for one to end.
    let tr = trace(&[(1, 0, 1000, 2, "a", T, 60, false), (2, 0, 1000, 2, "a", T, 60, false), (3, 10, 100, 2, "b", T, 60, false)]);
    let (r, log) = run_logged(&tr, &config(), Policy::Tally, settings()).unwrap();
    assert_eq!(log, vec![start(0, 1), start(0, 2), End { t: 1000, job: 1 }, End { t: 1000, job: 2 }, start(1000, 3), End { t: 1100, job: 3 }]);
    assert_eq!((r.score.preemptions, r.score.lost_gpu_hours), (0, 0.0));
}

#[test]
fn by_default_work_that_cannot_checkpoint_runs_to_its_end() {
    // The default config: contracts of at most 8 h. a's jobs cannot
    // checkpoint and have no time limit: past their 20-minute contracts
    // neither a restoration nor a time-slice takes them. They end at 3000:
    // b waits.
    let tr = trace(&[(1, 0, 3000, 2, "a", T, 1200, false), (2, 0, 3000, 2, "a", T, 1200, false), (3, 10, 100, 2, "b", T, 1200, false)]);
    let config = Config::parse("[cluster]\ngpus = 4\ngpus_per_node = 4\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n", "d.toml").unwrap();
    let (r, log) = run_logged(&tr, &config, Policy::Tally, settings()).unwrap();
    assert_eq!(r.score.preemptions, 0, "{log:?}");
    assert!(log.contains(&start(3000, 3)), "{log:?}");
}

#[test]
fn a_debug_job_past_its_contract_has_no_shield() {
    // The same, but a's jobs are debug jobs (2 GPUs, a contract of 1 min):
    // past their contracts nothing shields them, whether they checkpoint
    // or not. b's job (owed 2 GPUs) takes one at the re-plan at 60, which
    // leaves a at its rate; the other runs to its end.
    let tr = trace(&[(1, 0, 3000, 2, "a", T, 60, false), (2, 0, 3000, 2, "a", T, 60, false), (3, 10, 100, 2, "b", T, 1200, false)]);
    let config = Config::parse("[cluster]\ngpus = 4\ngpus_per_node = 4\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n", "d.toml").unwrap();
    let (r, log) = run_logged(&tr, &config, Policy::Tally, settings()).unwrap();
    assert_eq!(r.score.preemptions, 1, "{log:?}");
    assert!(log.contains(&start(60, 3)), "{log:?}");
    assert!(!log.iter().any(|h| matches!(h, Preempt { job: 1, .. })), "a keeps its rate: {log:?}");
}

#[test]
fn a_debug_job_time_slices_its_team_and_the_victim_restarts_with_its_whole_contract() {
    // Debug jobs (1 GPU, 20 s contracts) of a; a's two 2-GPU resumable jobs
    // have 60 s contracts. At 100 the first debug job takes job 2 (the
    // younger, lower in victim order by id); job 2 runs again at 120 with a
    // whole contract, so at 130 the second debug job takes job 1, although
    // job 2 has run less.
    let config = Config::parse(
        "[cluster]\ngpus = 4\ngpus_per_node = 4\n[contracts]\nmax = \"1m\"\n[priority]\ndebug_max_contract = \"30s\"\n\
         [accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n",
        "debug.toml",
    )
    .unwrap();
    let d = Class::Debug;
    let tr = trace(&[
        (1, 0, 1000, 2, "a", T, 60, true),
        (2, 0, 1000, 2, "a", T, 60, true),
        (3, 100, 20, 1, "a", d, 20, false),
        (4, 130, 20, 1, "a", d, 20, false),
    ]);
    let (r, log) = run_logged(&tr, &config, Policy::Tally, settings()).unwrap();
    for h in [Preempt { t: 100, job: 2, by: 3 }, start(100, 3), start(120, 2), Preempt { t: 130, job: 1, by: 4 }, start(130, 4)] {
        assert!(log.contains(&h), "{h:?} in {log:?}");
    }
    assert_eq!((r.score.preemptions, r.contract_violations, r.score.lost_gpu_hours), (2, 0, 0.0));
}

#[test]
fn tally_never_takes_a_team_below_its_rate() {
    // a's one 4-GPU job is twice a's rate, but taking it would leave a at 0,
    // below its rate of 2 (and b would end above a's share): b waits for it.
    let tr = trace(&[(1, 0, 1000, 4, "a", T, 60, false), (2, 10, 100, 4, "b", T, 60, false)]);
    assert_eq!(schedule(Policy::Tally, &tr), vec![start(0, 1), End { t: 1000, job: 1 }, start(1000, 2), End { t: 1100, job: 2 }]);
}

#[test]
fn a_job_that_is_not_resumable_is_never_requeued_however_long_others_wait() {
    // a runs two 2-GPU jobs; b keeps sending 2-GPU jobs. Resumable, a's
    // jobs are taken past their contracts (a runs twice its rate); not
    // resumable, neither is ever taken: b's jobs wait for them to end.
    let rows = |resumable| {
        trace(&[
            (1, 0, 5000, 2, "a", T, 60, resumable),
            (2, 1, 5000, 2, "a", T, 60, resumable),
            (3, 10, 100, 2, "b", T, 60, false),
            (4, 500, 100, 2, "b", T, 60, false),
            (5, 1000, 100, 2, "b", T, 60, false),
        ])
    };
    let log = schedule(Policy::Tally, &rows(true));
    let preempted = |log: &[Happening], id| log.iter().filter(|h| matches!(h, Preempt { job, .. } if *job == id)).count();
    assert!(preempted(&log, 1) + preempted(&log, 2) >= 1, "{log:?}");
    let log = schedule(Policy::Tally, &rows(false));
    assert_eq!((preempted(&log, 1), preempted(&log, 2)), (0, 0), "{log:?}");
    assert!(log.contains(&start(5000, 3)), "{log:?}");
}

#[test]
fn requeued_jobs_wait_the_requeue_delay() {
    // As the contract test, with Slurm's default delay of 121 s: job 2 may
    // start again no earlier than 60 + 121, though b's job ended at 110.
    let tr = trace(&[(1, 0, 1000, 2, "a", T, 60, true), (2, 0, 1000, 2, "a", T, 60, true), (3, 10, 50, 2, "b", T, 60, false)]);
    let s = Settings { requeue_delay_s: 121, ..settings() };
    let (_, log) = run_logged(&tr, &config(), Policy::Tally, s).unwrap();
    assert!(log.contains(&Preempt { t: 60, job: 2, by: 3 }), "{log:?}");
    assert!(log.contains(&start(181, 2)), "{log:?}");
}

#[test]
fn tally_preempts_unallocated_work_at_once_and_resumable_keeps_progress() {
    let tr = trace(&[(1, 0, 1000, 4, "a", T, 0, true), (2, 5, 50, 2, "b", T, 30, false)]);
    let (r, log) = run_logged(&tr, &config(), Policy::Tally, settings()).unwrap();
    assert_eq!(
        log,
        vec![
            start(0, 1),
            Preempt { t: 5, job: 1, by: 2 },
            start(5, 2),
            End { t: 55, job: 2 },
            // Resumable: 995 s of work left.
            start(55, 1),
            End { t: 1050, job: 1 },
        ]
    );
    assert_eq!(r.score.lost_gpu_hours, 0.0);
    // An unallocated job never preempts.
    let tr = trace(&[(1, 0, 1000, 4, "a", T, 0, true), (2, 5, 50, 2, "b", T, 0, false)]);
    assert_eq!(schedule(Policy::Tally, &tr)[1], End { t: 1000, job: 1 });
}

#[test]
fn multifactor_debug_preempts_only_jobs_that_did_not_opt_out() {
    let tr = trace(&[(1, 0, 1000, 4, "a", T, 0, false), (2, 5, 10, 1, "b", Class::Debug, 0, false)]);
    assert_eq!(
        schedule(Policy::Multifactor, &tr),
        vec![start(0, 1), Preempt { t: 5, job: 1, by: 2 }, start(5, 2), End { t: 15, job: 2 }, start(15, 1), End { t: 1015, job: 1 }]
    );
    // Opted out (a contract in the trace): the debug job waits.
    let tr = trace(&[(1, 0, 1000, 4, "a", T, 3600, false), (2, 5, 10, 1, "b", Class::Debug, 0, false)]);
    assert_eq!(schedule(Policy::Multifactor, &tr), vec![start(0, 1), End { t: 1000, job: 1 }, start(1000, 2), End { t: 1010, job: 2 }]);
}

#[test]
fn fifo_holds_the_daily_realtime_peak() {
    // A realtime service of 2 GPUs runs 100-200 on day 0: FIFO keeps 2 GPUs
    // for it all day, so a 4-GPU training job cannot start until day 1.
    let tr = trace(&[(1, 0, 10, 1, "a", T, 0, false), (2, 100, 100, 2, "a", Class::Realtime, 0, false), (3, 300, 50, 4, "b", T, 0, false)]);
    let log = schedule(Policy::Fifo, &tr);
    assert!(log.contains(&start(86_400, 3)), "{log:?}");
    // Tally has no such hold: it starts at once.
    assert!(schedule(Policy::Tally, &tr).contains(&start(300, 3)));
}

#[test]
fn metrics_of_a_micro_trace() {
    let tr = trace(&[(1, 0, 3600, 4, "a", T, 600, false), (2, 3600, 3600, 2, "b", T, 600, false)]);
    let (r, _) = run_logged(&tr, &config(), Policy::Tally, settings()).unwrap();
    // Arrival window: the hours holding submissions, 0 and 1 (the last job
    // arrives at 3600): 4 + 2 busy GPU-hours of 8.
    let r = r.score;
    assert!((r.occupancy - 0.75).abs() < 1e-9, "{}", r.occupancy);
    assert_eq!(r.goodput, r.occupancy);
    assert_eq!(r.hourly_busy, vec![4.0, 2.0, 0.0]);
    assert_eq!(r.waits[&T].sorted_s, vec![0, 0]);
    // a's rate is 2 GPUs: hour 0 owed 2, delivered 4 (credited 2).
    let a = r.teams.iter().find(|t| t.team == "a").unwrap();
    assert_eq!((a.delivery.owed_gpu_hours, a.delivery.delivered_gpu_hours, a.delivery.credited_gpu_hours), (2.0, 4.0, 2.0));
    assert_eq!(r.fairness.overall, 1.0);
    assert_eq!(r.completed, 2);
}

#[test]
fn same_input_same_result() {
    let tr = trace(&[(1, 0, 1000, 4, "a", T, 0, true), (2, 5, 50, 2, "b", T, 30, false), (3, 7, 500, 2, "a", T, 60, true)]);
    for p in Policy::ALL {
        assert_eq!(run_logged(&tr, &config(), p, settings()), run_logged(&tr, &config(), p, settings()));
    }
}

#[test]
fn planner_orders_the_queue_by_the_plan() {
    // 1 holds all 4 GPUs until 100; 2 (priority 0) and 3 (priority 5) wait.
    // At the re-plan at 60 the plan starts 3 first: it runs at 100, then 2.
    let mut tr = trace(&[(1, 0, 100, 4, "a", T, 0, false), (2, 10, 50, 4, "b", T, 0, false), (3, 20, 50, 4, "a", T, 0, false)]);
    tr.jobs[2].priority = 5;
    let log = schedule(Policy::Planner, &tr);
    assert_eq!(log, vec![start(0, 1), End { t: 100, job: 1 }, start(100, 3), End { t: 150, job: 3 }, start(150, 2), End { t: 200, job: 2 }]);
    // FIFO: arrival order.
    assert!(schedule(Policy::Fifo, &tr).contains(&start(100, 2)));
}

mod plan_durations {
    use super::*;
    use tally_sim::sim::{run, PlanDurations};

    /// A stream of 2-GPU jobs of four users, each user's script running
    /// the same time every time; limits from `limit(duration)`.
    fn stream(limit: impl Fn(u64) -> Option<u64>) -> Trace {
        let jobs = (0..60u64)
            .map(|i| {
                let user = i % 4;
                let duration_s = 1800 * (user + 1);
                TraceJob {
                    account: if user < 2 { "a" } else { "b" }.into(),
                    user: format!("u{user}"),
                    name: Some(format!("script{user}")),
                    time_limit_s: limit(duration_s),
                    ..TraceJob::bare(i + 1, i * 1200, duration_s, 2)
                }
            })
            .collect();
        Trace { jobs }
    }

    fn with(d: PlanDurations) -> Settings {
        Settings { plan_durations: d, ..settings() }
    }

    #[test]
    fn limits_equal_to_the_durations_plan_as_the_truth() {
        let tr = stream(Some);
        for policy in [Policy::Planner, Policy::TallyPlanner] {
            let (truth, log_truth) = run_logged(&tr, &config(), policy, with(PlanDurations::True)).unwrap();
            let (limit, log_limit) = run_logged(&tr, &config(), policy, with(PlanDurations::Limit)).unwrap();
            assert_eq!(log_truth, log_limit, "{policy:?}");
            assert_eq!(truth.belief_mae, None);
            let m = limit.belief_mae.unwrap();
            assert_eq!((m.n, m.predicted_s, m.limit_s), (60, 0.0, 0.0));
        }
    }

    #[test]
    fn the_predictor_learns_each_script_and_beats_loose_limits() {
        // Every limit is 10 h; each user's script always runs (user + 1) × 30 min.
        let tr = stream(|_| Some(10 * HOUR_S));
        let limit = run(&tr, &config(), Policy::Planner, with(PlanDurations::Limit), &mut |_| {}).unwrap().belief_mae.unwrap();
        let mean_duration = tr.jobs.iter().map(|j| j.duration_s as f64).sum::<f64>() / 60.0;
        assert!((limit.predicted_s - (36_000.0 - mean_duration)).abs() < 1e-6, "{limit:?}");
        let predicted = run(&tr, &config(), Policy::Planner, with(PlanDurations::Predicted), &mut |_| {}).unwrap().belief_mae.unwrap();
        assert_eq!(predicted.limit_s, limit.limit_s);
        // Once two of a user's jobs have ended, its predictions are exact: only
        // the first few jobs of each user fall back (to the class, the limit).
        assert!(predicted.predicted_s < limit.predicted_s / 5.0, "{predicted:?} vs {limit:?}");
        // Jobs still run their true durations: the work done is the same.
        let busy = |d| run(&tr, &config(), Policy::Planner, with(d), &mut |_| {}).unwrap().score.useful_gpu_hours;
        assert!((busy(PlanDurations::Predicted) - busy(PlanDurations::True)).abs() < 1e-6);
    }
}
