//! The suite's promises as tests: the symmetric case is delivered, jobs
//! that cannot checkpoint all finish, two equal teams never preempt a job
//! twice, debug jobs start at once where their owners' contracts allow it,
//! and every run the scheduler starts after preempting a job keeps its
//! whole contract — each on several seeds (other instances of the same
//! generators).

use tally_allocator::{DAY_S, HOUR_S};
use tally_config::Config;
use tally_sim::sim::{run, run_logged, Happening, Policy, Settings};
use tally_sim::suite::{debug_on_short_contracts, idle_returns, long_not_resumable, symmetric, Case};
use tally_sim::trace::{Class, Trace, TraceJob};

fn tally(case: &Case) -> tally_sim::sim::PolicyResult {
    let s = Settings { gpus: case.gpus, gpus_per_node: 8, ..Settings::default() };
    run(&case.trace, &case.config, Policy::Tally, s, &mut |_| {}).unwrap_or_else(|e| panic!("{}: {e}", case.name))
}

#[test]
fn the_symmetric_case_is_delivered() {
    for seed in 1..=3 {
        let r = tally(&symmetric(seed));
        let f = &r.score.fairness;
        assert!(f.overall >= 0.95, "seed {seed}: delivered/owed {:.3}", f.overall);
        assert_eq!(f.teams_at_threshold, f.teams, "seed {seed}: every team >= 95%: {:?}", f.worst);
        assert_eq!(r.score.lost_gpu_hours, 0.0);
    }
}

#[test]
fn every_long_job_that_cannot_checkpoint_finishes() {
    for seed in 1..=3 {
        let case = long_not_resumable(seed);
        let training = case.trace.jobs.iter().filter(|j| j.class == Class::Training).count();
        for max_requeues in [None, Some(0), Some(1)] {
            let mut config = case.config.clone();
            config.contracts.max_requeues = max_requeues;
            let c = Case { config, ..case.clone() };
            let r = tally(&c);
            assert_eq!(r.unfinished(), 0, "seed {seed}, max_requeues {max_requeues:?}");
            assert!(r.score.completed >= training, "seed {seed}: {} of {training} training jobs", r.score.completed);
            if let Some(max) = max_requeues {
                assert!(r.score.max_requeues.allocated <= max, "seed {seed}: {:?}", r.score.max_requeues);
            }
            if max_requeues == Some(0) {
                assert_eq!(r.score.lost_allocated_gpu_hours, 0.0, "seed {seed}: nothing allocated thrown away");
            }
        }
    }
}

/// Two equal teams on 32 GPUs, 8-GPU resumable jobs of 12-24 h with 1 h
/// contracts, twice what the cluster holds; team b alone for the first day
/// (it fills the cluster), then both: a takes its half back by preemption,
/// and no job is preempted twice.
#[test]
fn two_equal_teams_never_preempt_a_job_twice() {
    use rand::{Rng, SeedableRng};
    let config = Config::parse("[cluster]\ngpus = 32\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n", "pingpong.toml").unwrap();
    for seed in 1..=5u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut jobs = Vec::new();
        let mut t = 0;
        while t < 10 * DAY_S {
            t += rng.gen_range(600..5400);
            let team = if t > 86_400 && rng.gen_bool(0.5) { "a" } else { "b" };
            jobs.push(TraceJob {
                job_id: jobs.len() as u64 + 1,
                submit_s: t,
                duration_s: rng.gen_range(12 * 3600..24 * 3600),
                gpus: 8,
                account: team.into(),
                user: format!("{team}-u1"),
                class: Class::Training,
                contract_s: 3600,
                resumable: true,
                priority: 0,
                gpu_type: None,
                time_limit_s: None,
                name: None,
            });
        }
        let case = Case { name: "ping-pong".into(), about: String::new(), trace: Trace { jobs }, config: config.clone(), gpus: 32, demand: 0.0 };
        let r = tally(&case);
        assert!(r.score.preemptions > 0, "seed {seed}: the case must make the teams preempt");
        assert!(r.score.max_requeues.resumable <= 1, "seed {seed}: a job preempted {} times", r.score.max_requeues.resumable);
    }
}

/// A full cluster of 8 h jobs that cannot checkpoint, with 2 h contracts
/// their owners chose: debug jobs start within minutes (time-slicing), and
/// what that throws away is reported, not hidden.
#[test]
fn debug_jobs_start_at_once_where_contracts_allow() {
    for seed in 1..=2 {
        let r = tally(&debug_on_short_contracts(seed));
        let p90 = r.score.waits.get(&Class::Debug).and_then(|w| w.pct(90.0)).expect("debug jobs");
        assert!(p90 <= 300, "seed {seed}: debug p90 {p90} s");
        assert!(r.score.lost_gpu_hours > 0.0, "seed {seed}: time-slicing jobs that cannot checkpoint throws work away");
        assert_eq!((r.contract_violations, r.unfinished()), (0, 0), "seed {seed}");
    }
}

/// Read off the replay's own log, not the rule's bookkeeping: a job the
/// scheduler preempted is never preempted again before its whole contract
/// has run in its new run.
#[test]
fn every_run_after_a_preemption_keeps_its_whole_contract() {
    for case in [debug_on_short_contracts(1), idle_returns(1)] {
        let contract: std::collections::BTreeMap<u64, u64> = case.trace.jobs.iter().map(|j| (j.job_id, j.contract_s.min(8 * HOUR_S))).collect();
        let s = Settings { gpus: case.gpus, gpus_per_node: 8, ..Settings::default() };
        let (_, log) = run_logged(&case.trace, &case.config, Policy::Tally, s).unwrap();
        let mut started: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        let mut preempted_before = std::collections::BTreeSet::new();
        let mut checked = 0;
        for h in &log {
            match *h {
                Happening::Start { t, job, .. } => {
                    started.insert(job, t);
                }
                Happening::Preempt { t, job, .. } => {
                    if preempted_before.contains(&job) && contract[&job] > 0 {
                        let ran = t - started[&job];
                        assert!(
                            ran >= contract[&job],
                            "{}: job {job} preempted {ran} s into a run after a preemption (contract {} s)",
                            case.name,
                            contract[&job]
                        );
                        checked += 1;
                    }
                    preempted_before.insert(job);
                }
                Happening::End { .. } => {}
            }
        }
        assert!(checked > 0, "{}: some job must be preempted twice for the test to mean anything", case.name);
    }
}

/// The gaming family's targets as a check: on two seeds, no reshaped case
/// lets the reshaping team gain more than 5% of its honest GPU-hours under
/// Tally, nor leaves an honest team below 95% of its own (docs/design.md
/// rule 11; `tally sim suite --cases gaming` prints the table).
#[test]
fn no_team_gains_by_reshaping_its_work() {
    use tally_sim::gaming::{cases, Gaming, Shape};
    for seed in [1, 2] {
        let family = cases(seed);
        let per_team = |c: &Case| -> Vec<(String, f64)> { tally(c).score.teams.iter().map(|t| (t.team.clone(), t.useful_gpu_hours)).collect() };
        let honest = per_team(&family.iter().find(|(s, _)| *s == Shape::Honest).expect("the honest case").1);
        let mut missed = Vec::new();
        for (shape, case) in family.iter().filter(|(s, _)| *s != Shape::Honest) {
            let g = Gaming::compare(&honest, &per_team(case));
            missed.extend(g.judge().into_iter().map(|m| format!("seed {seed} {}: {m}", shape.name())));
        }
        assert!(missed.is_empty(), "{missed:#?}");
    }
}
