//! GPU types in the replay (`[cluster.gpu_types]`): typed nodes, typed
//! jobs, and every charge, rate and figure in budget units.

use tally_allocator::HOUR_S;
use tally_config::Config;
use tally_sim::sim::{run_logged, Happening, Policy, PolicyResult, Settings, SimError};
use tally_sim::trace::{Class, Trace, TraceJob};

/// Two teams of 50% on 8 H100s and 8 B200s (`b200` weighs `w`).
fn config(w: f64) -> Config {
    let text = format!(
        "[cluster]\ngpus = 16\ngpus_per_node = 8\n[cluster.gpu_types]\nh100 = {{ gpus = 8 }}\nb200 = {{ weight = {w:?}, gpus = 8 }}\n\
         [accounts.alpha]\nshare = 50\n[accounts.beta]\nshare = 50\n"
    );
    Config::parse(&text, "types.toml").unwrap()
}

fn settings() -> Settings {
    Settings { gpus: 16, gpus_per_node: 8, replan_s: 60, backfill_depth: 10, requeue_delay_s: 0, ..Settings::default() }
}

/// (id, submit, duration, gpus, team, type)
type Row<'a> = (u64, u64, u64, u32, &'a str, Option<&'a str>);

fn trace(rows: &[Row]) -> Trace {
    let jobs = rows
        .iter()
        .map(|&(job_id, submit_s, duration_s, gpus, team, gpu_type)| TraceJob {
            account: team.into(),
            user: format!("{team}-u1"),
            class: Class::Training,
            contract_s: HOUR_S,
            gpu_type: gpu_type.map(str::to_string),
            ..TraceJob::bare(job_id, submit_s, duration_s, gpus)
        })
        .collect();
    let mut t = Trace { jobs };
    t.sort();
    t
}

fn tally(tr: &Trace, c: &Config) -> (PolicyResult, Vec<Happening>) {
    run_logged(tr, c, Policy::Tally, settings()).unwrap()
}

fn delivered(r: &PolicyResult, team: &str) -> f64 {
    r.score.teams.iter().find(|t| t.team == team).unwrap().delivery.delivered_gpu_hours
}

#[test]
fn a_b200_job_is_charged_its_weight_times_an_h100_job_of_the_same_length() {
    let tr = trace(&[(1, 0, HOUR_S, 8, "alpha", Some("h100")), (2, 0, HOUR_S, 8, "beta", Some("b200"))]);
    let (r, log) = tally(&tr, &config(2.2));
    // Each on the nodes of its type: node 0 holds the B200s (table order: b200, h100).
    assert!(log.contains(&Happening::Start { t: 0, job: 2, nodes: vec![0] }), "{log:?}");
    assert!(log.contains(&Happening::Start { t: 0, job: 1, nodes: vec![1] }), "{log:?}");
    assert_eq!(delivered(&r, "alpha"), 8.0);
    assert!((delivered(&r, "beta") - 8.0 * 2.2).abs() < 1e-9, "{}", delivered(&r, "beta"));
    // Owed in the same unit: the rate is half of 8 + 8 × 2.2; beta asked
    // 17.6 units an hour and is owed its rate, 12.8, all delivered.
    let beta = r.score.teams.iter().find(|t| t.team == "beta").unwrap();
    assert!((beta.rate_gpus - 12.8).abs() < 1e-9);
    assert!((beta.delivery.owed_gpu_hours - 12.8).abs() < 1e-9 && beta.delivery.ratio() == Some(1.0), "{beta:?}");
    // Occupancy counts GPUs: all 16 busy for the hour.
    assert_eq!(r.score.occupancy, 1.0);
}

#[test]
fn a_team_that_used_b200s_queues_behind_one_that_used_as_many_h100_hours() {
    // Hour 0: alpha runs 8 B200s, beta 8 H100s. At 2 h both want the 8
    // H100s for an hour: the team that spent less budget goes first.
    let tr = trace(&[
        (1, 0, HOUR_S, 8, "alpha", Some("b200")),
        (2, 0, HOUR_S, 8, "beta", Some("h100")),
        (3, 2 * HOUR_S, HOUR_S, 8, "alpha", Some("h100")),
        (4, 2 * HOUR_S, HOUR_S, 8, "beta", Some("h100")),
    ]);
    let first_at_2h = |c: &Config| {
        let (_, log) = tally(&tr, c);
        log.iter().find_map(|h| match h {
            Happening::Start { t, job, .. } if *t == 2 * HOUR_S => Some(*job),
            _ => None,
        })
    };
    assert_eq!(first_at_2h(&config(2.2)), Some(4), "beta, which used 8 budget units an hour to alpha's 17.6");
    // Weighed alike, the two tie and the name decides.
    assert_eq!(first_at_2h(&config(1.0)), Some(3));
}

#[test]
fn weights_of_one_and_untyped_jobs_change_nothing() {
    // An untyped trace on a cluster whose types all weigh 1, or whose
    // table has no counts: the same replay as without types.
    let mut jobs = Vec::new();
    for i in 0..60u64 {
        let team = if i % 3 == 0 { "alpha" } else { "beta" };
        let gpus = [1, 2, 4, 8, 16][(i % 5) as usize];
        jobs.push(TraceJob {
            account: team.into(),
            user: format!("{team}-u{}", i % 2),
            contract_s: if i % 4 == 0 { 0 } else { HOUR_S },
            resumable: i % 3 == 1,
            class: if i % 7 == 0 { Class::Debug } else { Class::Training },
            ..TraceJob::bare(i + 1, i * 900, HOUR_S / 2 + (i * 977) % (6 * HOUR_S), gpus)
        });
    }
    let tr = Trace { jobs };
    let plain =
        Config::parse("[cluster]\ngpus = 16\ngpus_per_node = 8\n[accounts.alpha]\nshare = 50\n[accounts.beta]\nshare = 50\n", "p.toml").unwrap();
    let weightless = Config::parse(
        "[cluster]\ngpus = 16\ngpus_per_node = 8\n[cluster.gpu_types]\nh100 = 1.0\nb200 = 2.2\n[accounts.alpha]\nshare = 50\n[accounts.beta]\nshare = 50\n",
        "w.toml",
    )
    .unwrap();
    // (The budget-blind planner plans as if untyped and is slow in debug builds.)
    for policy in [Policy::Fifo, Policy::Multifactor, Policy::Tally, Policy::TallyPlanner] {
        let (a, la) = run_logged(&tr, &plain, policy, settings()).unwrap();
        let (b, lb) = run_logged(&tr, &config(1.0), policy, settings()).unwrap();
        let (c, lc) = run_logged(&tr, &weightless, policy, settings()).unwrap();
        assert_eq!((&a.score, a.events, &la), (&b.score, b.events, &lb), "{policy:?}: weights of 1");
        assert_eq!((&a.score, a.events, &la), (&c.score, c.events, &lc), "{policy:?}: weights without counts");
    }
}

#[test]
fn an_untyped_job_is_charged_by_the_gpus_it_lands_on() {
    // Only B200s free: an untyped job takes them and is charged 2.2 a GPU.
    let tr = trace(&[(1, 0, 2 * HOUR_S, 8, "alpha", Some("h100")), (2, 0, HOUR_S, 8, "beta", None)]);
    let (r, _) = tally(&tr, &config(2.2));
    assert!((delivered(&r, "beta") - 8.0 * 2.2).abs() < 1e-9);
    // (The arrival window is hour 0: alpha's first hour on its H100s.)
    assert_eq!(delivered(&r, "alpha"), 8.0);
}

#[test]
fn a_type_the_cluster_lacks_never_runs_and_is_never_owed() {
    let tr = trace(&[(1, 0, HOUR_S, 8, "alpha", Some("a100")), (2, 0, HOUR_S, 16, "beta", Some("b200")), (3, 0, HOUR_S, 8, "beta", Some("b200"))]);
    let (r, log) = tally(&tr, &config(2.2));
    assert_eq!(r.unrunnable, 2);
    assert_eq!(log.iter().filter(|h| matches!(h, Happening::Start { .. })).count(), 1);
    let alpha = r.score.teams.iter().find(|t| t.team == "alpha").unwrap();
    assert_eq!(alpha.delivery.owed_gpu_hours, 0.0);
}

#[test]
fn more_typed_gpus_than_the_cluster_is_an_error() {
    let tr = trace(&[(1, 0, HOUR_S, 8, "alpha", None)]);
    let err = run_logged(&tr, &config(2.2), Policy::Tally, Settings { gpus: 12, ..settings() }).unwrap_err();
    assert_eq!(err, SimError::TypedGpus { typed: 16, gpus: 12 });
    assert_eq!(err.to_string(), "[cluster.gpu_types] counts 16 typed GPUs, more than the 12 GPUs simulated: give more GPUs or smaller counts");
}
