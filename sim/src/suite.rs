//! The benchmark suite's cases: windows of real traces at chosen demands,
//! and synthetic cases built to stress one property each. Pure: traces and
//! configs in, [`Case`]s out; `tally sim suite` runs them through every
//! policy (docs/sim.md, "The suite").
//!
//! Demand is `mean busy GPUs ÷ cluster GPUs`, the busy GPUs being what the
//! window's jobs would keep busy if each ran at arrival (`Trace::mean_busy_gpus`).
//!
//! | case | what it stresses |
//! |---|---|
//! | `<trace> ×D` | a 14-day window of a real trace (augmented with the example tree), cluster sized so demand is D |
//! | `symmetric` | 4 equal teams, 8-GPU 24 h resumable jobs, demand 1.5×: fair delivery without churn |
//! | `idle-returns` | a team idle for 5 days comes back: its share is restored without thrashing |
//! | `small-teams-big-jobs` | 12 teams with rates of 8 GPUs and 8-32 GPU jobs: the granularity ceiling |
//! | `long-not-resumable` | 24 h jobs that cannot checkpoint, contracts capped at 8 h: no livelock, none requeued once started |
//! | `debug-on-short-contracts` | a full cluster of 8 h jobs that cannot checkpoint with 2 h contracts: none is time-sliced past its contract, so debug jobs wait for ends (what never requeuing such a job costs them) |
//!
//! Every synthetic case also has a stream of debug jobs (1-2 GPUs,
//! 2-15 minutes, contract = duration). Seeds change the instances, not the
//! rules.

use crate::augment::{augment, AugmentOptions};
use crate::trace::{Class, Trace, TraceJob};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tally_allocator::{DAY_S, HOUR, HOUR_S};
use tally_config::Config;

/// One case of the suite.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// What the case is for (one line).
    pub about: String,
    pub trace: Trace,
    pub config: Config,
    pub gpus: u32,
    /// Demand over supply of the arrival window.
    pub demand: f64,
}

/// The demands at which each real-trace window is replayed.
pub const DEMANDS: [f64; 5] = [0.8, 1.0, 1.3, 2.0, 3.0];
/// Window of a real trace: `WINDOW_DAYS` days from day `WINDOW_START_DAY`
/// (the first week of a collection is often a ramp-up).
pub const WINDOW_START_DAY: u64 = 7;
pub const WINDOW_DAYS: u64 = 14;

/// The jobs submitted in `[from, from + days)` days after the trace's first
/// submission.
pub fn window(trace: &Trace, from_day: u64, days: u64) -> Trace {
    let origin = trace.jobs.first().map_or(0, |j| j.submit_s);
    let (a, b) = (origin + from_day * DAY_S, origin + (from_day + days) * DAY_S);
    Trace { jobs: trace.jobs.iter().filter(|j| j.submit_s >= a && j.submit_s < b).cloned().collect() }
}

/// GPUs for a demand: `mean busy ÷ demand`, in whole nodes (at least one).
pub fn gpus_for(trace: &Trace, demand: f64, gpus_per_node: u32) -> u32 {
    let per = gpus_per_node.max(1);
    let nodes = (trace.mean_busy_gpus() / demand / f64::from(per)).round().max(1.0) as u32;
    nodes * per
}

/// The window of an imported (bare) trace at each demand of [`DEMANDS`],
/// augmented with `config`'s tree (seed 1).
pub fn trace_cases(name: &str, bare: &Trace, config: &Config) -> Vec<Case> {
    let w = window(bare, WINDOW_START_DAY, WINDOW_DAYS);
    DEMANDS
        .iter()
        .map(|&d| {
            let gpus = gpus_for(&w, d, config.cluster.gpus_per_node);
            let opts = AugmentOptions { seed: 1, gpus: Some(gpus), ..AugmentOptions::default() };
            let trace = augment(&w, config, &opts);
            let demand = trace.mean_busy_gpus() / f64::from(gpus);
            Case {
                name: format!("{name} x{d}"),
                about: format!("{name}: {WINDOW_DAYS} days from day {WINDOW_START_DAY}, augmented (seed 1)"),
                trace,
                config: config.clone(),
                gpus,
                demand,
            }
        })
        .collect()
}

/// A tree of `n` equal teams (`t01`…), `gpus` GPUs in nodes of 8.
pub(crate) fn equal_teams(n: usize, gpus: u32) -> Config {
    let mut text = format!("[cluster]\ngpus = {gpus}\ngpus_per_node = 8\n");
    for i in 0..n {
        text.push_str(&format!("[accounts.t{:02}]\nshare = {}\n", i + 1, 100.0 / n as f64));
    }
    Config::parse(&text, "<suite>").expect("a valid generated tree")
}

/// Exponential inter-arrival times at `per_hour` jobs an hour.
pub(crate) fn next_arrival(rng: &mut ChaCha8Rng, per_hour: f64) -> u64 {
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    (-u.ln() / per_hour * HOUR) as u64
}

/// A job template drawn per arrival: (GPUs, duration, resumable, contract).
type Draw<'a> = dyn Fn(&mut ChaCha8Rng) -> (u32, u64, bool, u64) + 'a;

/// Poisson arrivals for `team` over `[from, to)`, `per_hour` an hour.
fn arrivals(rng: &mut ChaCha8Rng, team: &str, (from, to): (u64, u64), per_hour: f64, class: Class, draw: &Draw<'_>, jobs: &mut Vec<TraceJob>) {
    let mut t = from + next_arrival(rng, per_hour);
    while t < to {
        let (gpus, duration_s, resumable, contract_s) = draw(rng);
        jobs.push(TraceJob {
            job_id: 0,
            submit_s: t,
            duration_s,
            gpus,
            account: team.to_string(),
            user: format!("{team}-u{}", rng.gen_range(1..=3)),
            class,
            contract_s,
            resumable,
            priority: 0,
            gpu_type: None,
            time_limit_s: None,
            name: None,
        });
        t += next_arrival(rng, per_hour);
    }
}

/// Debug jobs: `per_day` a day spread over the teams, 1-2 GPUs, 2-15 min,
/// contract = duration, not resumable.
pub(crate) fn debug_jobs(rng: &mut ChaCha8Rng, teams: &[String], days: u64, per_day: f64, jobs: &mut Vec<TraceJob>) {
    let per_team = per_day / 24.0 / teams.len() as f64;
    for t in teams {
        let draw = |r: &mut ChaCha8Rng| {
            let d = r.gen_range(120..=900);
            (r.gen_range(1..=2), d, false, d)
        };
        arrivals(rng, t, (0, days * DAY_S), per_team, Class::Debug, &draw, jobs);
    }
}

pub(crate) fn finish(mut jobs: Vec<TraceJob>) -> Trace {
    jobs.sort_by_key(|j| (j.submit_s, j.account.clone(), j.duration_s));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.job_id = i as u64 + 1;
    }
    Trace { jobs }
}

pub(crate) fn team_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("t{i:02}")).collect()
}

/// Arrival rate per team so that `teams` teams at `demand` keep
/// `demand × gpus` busy with jobs of mean `gpu_hours` GPU-hours.
fn per_team_rate(demand: f64, gpus: u32, teams: usize, gpu_hours: f64) -> f64 {
    demand * f64::from(gpus) / gpu_hours / teams as f64
}

pub(crate) fn synthetic(name: &str, about: &str, config: Config, gpus: u32, jobs: Vec<TraceJob>) -> Case {
    let trace = finish(jobs);
    let demand = trace.mean_busy_gpus() / f64::from(gpus);
    Case { name: name.into(), about: about.into(), trace, config, gpus, demand }
}

/// Four equal teams on 64 GPUs, 8-GPU 24 h jobs with 8 h contracts at
/// demand 1.5, resumable or not.
fn four_teams_of_day_jobs(seed: u64, resumable: bool, name: &str, about: &str) -> Case {
    let (gpus, days) = (64, WINDOW_DAYS);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teams = team_names(4);
    let mut jobs = Vec::new();
    let rate = per_team_rate(1.5, gpus, teams.len(), 8.0 * 24.0);
    for t in &teams {
        arrivals(&mut rng, t, (0, days * DAY_S), rate, Class::Training, &|_: &mut ChaCha8Rng| (8, 24 * HOUR_S, resumable, 8 * HOUR_S), &mut jobs);
    }
    debug_jobs(&mut rng, &teams, days, 20.0, &mut jobs);
    synthetic(name, about, equal_teams(4, gpus), gpus, jobs)
}

/// Four equal teams on 64 GPUs, 8-GPU 24 h resumable jobs (contract 8 h),
/// demand 1.5.
pub fn symmetric(seed: u64) -> Case {
    four_teams_of_day_jobs(seed, true, "symmetric", "4 equal teams, 8-GPU 24 h resumable jobs, demand 1.5x")
}

/// A mixed job: 1-8 GPUs (powers of two), 1-12 h, resumable half the
/// time, contract a quarter to all of the duration (at most 8 h).
fn mixed(r: &mut ChaCha8Rng) -> (u32, u64, bool, u64) {
    let gpus = [1, 2, 4, 8][r.gen_range(0..4)];
    let d = r.gen_range(HOUR_S..=12 * HOUR_S);
    let c = ((d as f64 * r.gen_range(0.25..1.0)) as u64).clamp(60, 8 * HOUR_S);
    (gpus, d, r.gen_bool(0.5), c)
}

/// Four equal teams on 64 GPUs; three busy from the start (together 1.5×
/// their share), the fourth idle for 5 days, then as busy.
pub fn idle_returns(seed: u64) -> Case {
    let (gpus, days) = (64, WINDOW_DAYS);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teams = team_names(4);
    let mut jobs = Vec::new();
    // Mean GPU-hours of `mixed`: E[gpus] 3.75 × E[duration] 6.5 h.
    let rate = per_team_rate(2.0, gpus, teams.len(), 3.75 * 6.5);
    for (i, t) in teams.iter().enumerate() {
        let from = if i == 0 { 5 * DAY_S } else { 0 };
        arrivals(&mut rng, t, (from, days * DAY_S), rate, Class::Training, &mixed, &mut jobs);
    }
    debug_jobs(&mut rng, &teams, days, 20.0, &mut jobs);
    synthetic("idle-returns", "4 equal teams, one idle for 5 days then back; mixed jobs", equal_teams(4, gpus), gpus, jobs)
}

/// Twelve equal teams on 96 GPUs (a rate of 8 GPUs each) whose jobs are
/// 8, 16 or 32 GPUs, 2-12 h, demand 1.5.
pub fn small_teams_big_jobs(seed: u64) -> Case {
    let (gpus, days) = (96, WINDOW_DAYS);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teams = team_names(12);
    let mut jobs = Vec::new();
    let big = |r: &mut ChaCha8Rng| {
        let g = [8, 16, 32][r.gen_range(0..3)];
        let d = r.gen_range(2 * HOUR_S..=12 * HOUR_S);
        let c = ((d as f64 * r.gen_range(0.25..1.0)) as u64).clamp(60, 8 * HOUR_S);
        (g, d, r.gen_bool(0.6), c)
    };
    let rate = per_team_rate(1.5, gpus, teams.len(), (56.0 / 3.0) * 7.0);
    for t in &teams {
        arrivals(&mut rng, t, (0, days * DAY_S), rate, Class::Training, &big, &mut jobs);
    }
    debug_jobs(&mut rng, &teams, days, 20.0, &mut jobs);
    synthetic("small-teams-big-jobs", "12 teams with 8-GPU rates, jobs of 8-32 GPUs, demand 1.5x", equal_teams(12, gpus), gpus, jobs)
}

/// Four equal teams on 64 GPUs, 8-GPU 24 h jobs that cannot checkpoint,
/// contracts at the 8 h cap, demand 1.5.
pub fn long_not_resumable(seed: u64) -> Case {
    four_teams_of_day_jobs(
        seed,
        false,
        "long-not-resumable",
        "4 equal teams, 8-GPU 24 h jobs that cannot checkpoint, contracts capped at 8 h, demand 1.5x",
    )
}

/// Four equal teams on 64 GPUs, 1-8 GPU jobs (powers of two) of 8 h that
/// cannot checkpoint, with 2 h contracts and 8 h time limits, demand 1.5:
/// past two hours nothing takes such a job (a requeue would throw its run
/// away), not even a debug job's time-slice, so debug jobs wait for jobs to
/// end: what that rule costs them is this case's debug wait.
pub fn debug_on_short_contracts(seed: u64) -> Case {
    let (gpus, days) = (64, WINDOW_DAYS);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teams = team_names(4);
    let mut jobs = Vec::new();
    let draw = |r: &mut ChaCha8Rng| ([1, 2, 4, 8][r.gen_range(0..4)], 8 * HOUR_S, false, 2 * HOUR_S);
    // Mean GPU-hours: E[gpus] 3.75 × 8 h.
    let rate = per_team_rate(1.5, gpus, teams.len(), 3.75 * 8.0);
    for t in &teams {
        arrivals(&mut rng, t, (0, days * DAY_S), rate, Class::Training, &draw, &mut jobs);
    }
    for j in &mut jobs {
        j.time_limit_s = Some(8 * HOUR_S);
    }
    debug_jobs(&mut rng, &teams, days, 20.0, &mut jobs);
    synthetic(
        "debug-on-short-contracts",
        "4 equal teams, 1-8 GPU 8 h jobs that cannot checkpoint, 2 h contracts, demand 1.5x",
        equal_teams(4, gpus),
        gpus,
        jobs,
    )
}

/// Eight equal teams on 64 GPUs running long pods: 1-8 GPU jobs of 1 to
/// 10 days (log-uniform), three in four unable to checkpoint, contracts of
/// 1-8 h, no time limits, demand 2x. Restoration never takes one that
/// cannot checkpoint (it would throw hours or days away); such a pod starts
/// only on its team's fair share or on GPUs no other team asks for
/// (`allocator::long_start`).
pub fn long_pods(seed: u64) -> Case {
    let (gpus, days) = (64, WINDOW_DAYS);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teams = team_names(8);
    let mut jobs = Vec::new();
    const SIZES: [u32; 6] = [1, 1, 2, 2, 4, 8];
    let (short, long) = (DAY_S as f64, 10.0 * DAY_S as f64);
    let draw = |r: &mut ChaCha8Rng| {
        let g = SIZES[r.gen_range(0..SIZES.len())];
        let d = (short * (long / short).powf(r.gen_range(0.0..1.0))) as u64;
        let c = [HOUR_S, 2 * HOUR_S, 4 * HOUR_S, 8 * HOUR_S][r.gen_range(0..4)];
        (g, d, r.gen_bool(0.25), c)
    };
    // Mean GPU-hours: E[gpus] 3 × E[duration] (10 − 1) ÷ ln 10 days.
    let mean_hours = 3.0 * (long - short) / (long / short).ln() / HOUR;
    let rate = per_team_rate(2.0, gpus, teams.len(), mean_hours);
    for t in &teams {
        arrivals(&mut rng, t, (0, days * DAY_S), rate, Class::Training, &draw, &mut jobs);
    }
    debug_jobs(&mut rng, &teams, days, 20.0, &mut jobs);
    synthetic(
        "long-pods",
        "8 equal teams, 1-8 GPU pods of 1-10 days, 3 in 4 cannot checkpoint, no time limits, demand 2x",
        equal_teams(8, gpus),
        gpus,
        jobs,
    )
}

/// A bare trace (times, durations, GPUs) of `hours` hours keeping `busy`
/// GPUs busy on average: 1-16 GPU jobs of 10 minutes to 6 hours, Poisson
/// arrivals. [`augment`] gives it teams and contracts. Stands in for a
/// real trace's window where none is at hand (the test bed's replay test
/// without shared/).
pub fn bare_window(hours: u64, busy: f64, seed: u64) -> Trace {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    const SIZES: [u32; 7] = [1, 1, 1, 2, 4, 8, 16];
    let mean_gpus = SIZES.iter().sum::<u32>() as f64 / SIZES.len() as f64;
    let mean_hours = (10.0 / 60.0 + 6.0) / 2.0;
    let per_hour = busy / (mean_gpus * mean_hours);
    let mut jobs = Vec::new();
    let draw = |r: &mut ChaCha8Rng| (SIZES[r.gen_range(0..SIZES.len())], r.gen_range(600..=6 * HOUR_S), false, 0);
    arrivals(&mut rng, "-", (0, hours * HOUR_S), per_hour, Class::Training, &draw, &mut jobs);
    for j in &mut jobs {
        j.user = "-".into();
    }
    finish(jobs)
}

/// The jobs of `trace` Tally never requeues once started: allocated under
/// `config`'s rules on `gpus` GPUs (budgets that do not fit that size scale
/// by shares only, as the replay does), not resumable, not debug jobs
/// (docs/design.md rule 9). What the tests check the replay's log against.
pub fn never_requeued(trace: &Trace, config: &Config, gpus: u32) -> std::collections::BTreeSet<u64> {
    let Ok(alloc) = config.allocation(gpus).or_else(|_| config.allocation(config.ranking_gpus())) else { return Default::default() };
    let funded = tally_allocator::Funded::new(&config.tree, &alloc);
    trace
        .jobs
        .iter()
        .filter(|tj| {
            let mut j = tally_allocator::Job::new(tj.job_id, &tj.account, &tj.user).gpus(tj.gpus);
            j.contract = config.contracts.resolve_seconds(tj.contract_s, tj.resumable).unwrap_or(tally_allocator::Contract::UNALLOCATED);
            tally_allocator::never_requeued(&j, j.is_allocated(&funded), &config.priority)
        })
        .map(|tj| tj.job_id)
        .collect()
}

/// Every synthetic case for one seed.
pub fn synthetic_cases(seed: u64) -> Vec<Case> {
    vec![symmetric(seed), idle_returns(seed), small_teams_big_jobs(seed), long_not_resumable(seed), debug_on_short_contracts(seed), long_pods(seed)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_cases_have_the_demand_they_claim() {
        for c in synthetic_cases(1) {
            let want = match c.name.as_str() {
                "idle-returns" => 1.8,
                "long-pods" => 2.0,
                _ => 1.5,
            };
            assert!((c.demand - want).abs() < 0.35, "{}: demand {:.2}", c.name, c.demand);
            assert!(c.trace.jobs.iter().all(|j| j.gpus <= c.gpus));
            // Seeded: the same seed, the same trace.
            let again = synthetic_cases(1).into_iter().find(|d| d.name == c.name).unwrap();
            assert_eq!(again.trace, c.trace);
        }
    }

    #[test]
    fn windows_and_sizes() {
        let jobs = (0..100u64).map(|i| TraceJob::bare(i + 1, i * DAY_S / 2, 12 * HOUR_S, 8)).collect();
        let t = Trace { jobs };
        let w = window(&t, 7, 14);
        assert_eq!(w.jobs.len(), 28);
        assert_eq!(w.jobs[0].submit_s, 7 * DAY_S);
        // 2688 GPU-hours over 13.5 days: 8.3 GPUs busy on average.
        assert!((w.mean_busy_gpus() - 8.3).abs() < 0.01);
        assert_eq!(gpus_for(&w, 2.0, 8), 8);
        assert_eq!(gpus_for(&w, 0.25, 8), 32);
    }
}
