//! A start-time estimate for one pending job: the replay ([`crate::sim`],
//! Tally's policy) run forward from a live moment — the running jobs
//! placed first with what their time limits leave them, the pending ones
//! queued, the ledger as it stands — until the job starts or a horizon
//! passes.
//!
//! The estimate assumes every job runs to its time limit (a job without
//! one runs `default_duration_s`, or its contract if that is longer: in
//! total if pending, from now if running) and that nothing new is
//! submitted; placement is the
//! simulator's (whole-node-aware on identical nodes), not the real nodes'
//! current layout. With `[cluster.gpu_types]` counts that fit the GPUs
//! forecast, jobs keep their types (typed nodes as in [`crate::sim`]);
//! counts that do not fit (a partition smaller than the cluster) are
//! dropped, and the jobs forecast untyped, as are jobs of a type the
//! config gives no count for.

use crate::sim::{run_from, Happening, Policy, Resumed, Settings, SimError, StartState};
use crate::trace::{Class, Trace, TraceJob};
use tally_allocator::{Contract, Ledger};
use tally_config::Config;

/// One job of the moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForecastJob {
    pub id: u64,
    /// The account it is charged to (the config's `account_for`).
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// Slurm's submit time (its order reads it).
    pub submit_s: u64,
    /// When it may start (its begin time): it enters the queue then.
    pub eligible_s: u64,
    /// The contract the cluster's rules give it.
    pub contract: Contract,
    /// Order inside its team, higher first (−nice).
    pub within_team: i32,
    pub time_limit_s: Option<u64>,
    /// Running since (Unix seconds); `None` while pending.
    pub started_s: Option<u64>,
    /// Its GPU type (held if running, asked for if pending); `None`: any.
    pub gpu_type: Option<String>,
}

/// The moment to forecast from.
#[derive(Debug, Clone)]
pub struct Moment {
    pub now: u64,
    pub jobs: Vec<ForecastJob>,
    pub ledger: Ledger,
    pub gpus: u32,
    pub gpus_per_node: u32,
    /// Run at most this long past `now`.
    pub horizon_s: u64,
    /// The duration of a job without a time limit.
    pub default_duration_s: u64,
}

/// What the replay says of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Estimate {
    /// It starts at this time (Unix seconds).
    StartsAt(u64),
    /// Not within the horizon (the run ended at `now + horizon_s`).
    NotWithin { horizon_end: u64 },
    /// It asks for more GPUs than the cluster has.
    NeverFits,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forecast {
    pub estimate: Estimate,
    /// Jobs given `default_duration_s` (no time limit).
    pub defaulted: Vec<u64>,
    /// Jobs replayed (running and pending).
    pub jobs: usize,
}

/// Replay `m` under Tally's policy until job `target` starts (module docs).
pub fn forecast(config: &Config, m: &Moment, target: u64) -> Result<Forecast, SimError> {
    forecast_stopping(config, m, target, true)
}

/// [`forecast`]; `stop`: the replay ends at the target's first start
/// (false only to check, in tests, that stopping there changes nothing).
fn forecast_stopping(config: &Config, m: &Moment, target: u64, stop: bool) -> Result<Forecast, SimError> {
    // Typed counts that do not fit the GPUs forecast: dropped, and the jobs' types too.
    let untyped;
    let typed = u64::from(config.cluster.gpu_types.counted_gpus()) <= u64::from(m.gpus);
    let config = if typed {
        config
    } else {
        let mut c = config.clone();
        c.cluster.gpu_types = c.cluster.gpu_types.without_counts();
        untyped = c;
        &untyped
    };
    let mut defaulted = Vec::new();
    let mut trace = Trace::default();
    let mut running = Vec::new();
    let mut submitted = Vec::new();
    // Running jobs first (placed in this order), then the queue by its
    // entry time and id: the trace's canonical order.
    let mut jobs: Vec<&ForecastJob> = m.jobs.iter().collect();
    jobs.sort_by_key(|j| (j.started_s.is_none(), j.eligible_s.max(m.now), j.id));
    for j in jobs {
        // Without a time limit: the default, or the minimum run the job
        // declared (its contract) if that is longer.
        let contract_left = j.contract.min_runtime_s.saturating_sub(j.started_s.map_or(0, |s| m.now.saturating_sub(s)));
        let limit = match j.time_limit_s {
            Some(l) => l.max(1),
            None => {
                defaulted.push(j.id);
                m.default_duration_s.max(contract_left).max(1)
            }
        };
        let index = trace.jobs.len();
        let (entry_s, duration_s) = match j.started_s {
            Some(start) => {
                let ran_s = m.now.saturating_sub(start);
                // Without a limit it runs the default from now.
                let remaining_s = if j.time_limit_s.is_some() { limit.saturating_sub(ran_s).max(1) } else { limit };
                running.push(Resumed { job: index, ran_s, remaining_s });
                (m.now, limit.max(ran_s + remaining_s))
            }
            None => (j.eligible_s.max(m.now), limit),
        };
        submitted.push((index, j.submit_s.min(entry_s)));
        trace.jobs.push(TraceJob {
            job_id: j.id,
            submit_s: entry_s,
            duration_s,
            gpus: j.gpus,
            account: j.account.clone(),
            user: j.user.clone(),
            class: Class::Training,
            contract_s: j.contract.min_runtime_s,
            resumable: j.contract.resumable,
            priority: j.within_team,
            // A type the forecast has nodes of (the config counts it); others forecast untyped.
            gpu_type: j.gpu_type.clone().filter(|t| typed && config.cluster.gpu_types.iter().any(|(n, ty)| **n == **t && ty.gpus.is_some())),
            time_limit_s: None,
            name: None,
        });
    }
    defaulted.sort_unstable();
    let n = trace.jobs.len();
    let Some(asked) = m.jobs.iter().find(|j| j.id == target).map(|j| j.gpus) else {
        return Ok(Forecast { estimate: Estimate::NotWithin { horizon_end: m.now + m.horizon_s }, defaulted, jobs: n });
    };
    if asked > m.gpus {
        return Ok(Forecast { estimate: Estimate::NeverFits, defaulted, jobs: n });
    }
    // The trace's origin is its first entry: `now` when anything runs or
    // waits now, else the first begin time.
    let s = Settings { gpus: m.gpus, gpus_per_node: m.gpus_per_node, drain_limit_s: m.horizon_s, ..Settings::default() };
    // The replay stops at the target's first start: what comes after cannot
    // change the estimate.
    let until_started = trace.jobs.iter().position(|j| j.job_id == target).filter(|_| stop);
    let start = StartState { ledger: m.ledger.clone(), running, submitted, until_started };
    let (_, happenings) = run_from(&trace, config, Policy::Tally, s, &start)?;
    let horizon_end = m.now + m.horizon_s;
    let estimate = happenings
        .iter()
        .find_map(|h| match h {
            Happening::Start { t, job, .. } if *job == target && *t <= horizon_end => Some(Estimate::StartsAt(*t)),
            _ => None,
        })
        .unwrap_or(Estimate::NotWithin { horizon_end });
    Ok(Forecast { estimate, defaulted, jobs: n })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_allocator::{UsageKey, HOUR_S, WEEK_S};

    const NOW: u64 = 1_000 * HOUR_S;

    fn config() -> Config {
        Config::parse("[cluster]\ngpus = 16\ngpus_per_node = 8\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n", "f.toml").unwrap()
    }

    fn job(id: u64, account: &str, gpus: u32, limit_h: Option<u64>, started: Option<u64>) -> ForecastJob {
        ForecastJob {
            id,
            account: account.into(),
            user: format!("u{account}"),
            gpus,
            submit_s: NOW - 100 + id,
            eligible_s: NOW - 100 + id,
            contract: Contract::new(HOUR_S, false),
            within_team: 0,
            time_limit_s: limit_h.map(|h| h * HOUR_S),
            started_s: started,
            gpu_type: None,
        }
    }

    fn moment(jobs: Vec<ForecastJob>, ledger: Ledger) -> Moment {
        Moment { now: NOW, jobs, ledger, gpus: 16, gpus_per_node: 8, horizon_s: WEEK_S, default_duration_s: 2 * HOUR_S }
    }

    #[test]
    fn starts_when_the_running_jobs_reach_their_limits() {
        let config = config();
        // Two nodes busy: a's job ends in 3 h (4 h limit, 1 h run), b's in 1 h.
        let jobs = vec![
            job(1, "a", 8, Some(4), Some(NOW - HOUR_S)),
            job(2, "b", 8, Some(2), Some(NOW - HOUR_S)),
            // Waiting: b's 8-GPU job (first in line: b is below its rate after
            // its job ends), then a's 8-GPU job.
            job(3, "b", 8, Some(5), None),
            job(4, "a", 8, Some(1), None),
        ];
        let f = forecast(&config, &moment(jobs.clone(), config.new_ledger()), 4).unwrap();
        // Job 2's node frees at +1 h and job 3 (b) takes it; job 1's frees at +3 h: job 4 starts then.
        assert_eq!(f.estimate, Estimate::StartsAt(NOW + 3 * HOUR_S));
        assert_eq!(forecast(&config, &moment(jobs.clone(), config.new_ledger()), 3).unwrap().estimate, Estimate::StartsAt(NOW + HOUR_S));
        assert_eq!(f.jobs, 4);
        assert!(f.defaulted.is_empty());
    }

    #[test]
    fn the_ledger_decides_between_two_teams() {
        let config = Config::parse(
            "[cluster]\ngpus = 16\ngpus_per_node = 8\n[accounts.a]\nshare = 40\n[accounts.b]\nshare = 40\n[accounts.c]\nshare = 20\n",
            "f.toml",
        )
        .unwrap();
        // c runs both nodes, inside its contracts for 59 min; its first job
        // ends then (1 h limit), the second runs 10 h and may not be taken
        // (c would fall below its rate). a and b each wait with an 8-GPU
        // job: both owed, equally, so the 7-day rank decides.
        let jobs = vec![
            job(1, "c", 8, Some(1), Some(NOW - 60)),
            job(2, "c", 8, Some(10), Some(NOW - 60)),
            job(3, "a", 8, Some(1), None),
            job(4, "b", 8, Some(1), None),
        ];
        let free_at = NOW - 60 + HOUR_S;
        let mut heavy = config.new_ledger();
        heavy.charge(&UsageKey::new("a", "ua"), 16, NOW - 48 * HOUR_S, NOW - 24 * HOUR_S);
        assert_eq!(forecast(&config, &moment(jobs.clone(), heavy), 4).unwrap().estimate, Estimate::StartsAt(free_at));
        // Without a's usage the two tie and a goes first (by name): b waits
        // for a's 1 h job.
        let f = forecast(&config, &moment(jobs, config.new_ledger()), 4).unwrap();
        assert_eq!(f.estimate, Estimate::StartsAt(free_at + HOUR_S));
    }

    #[test]
    fn defaults_and_horizons_are_said() {
        let config = config();
        let jobs = vec![job(1, "a", 16, None, Some(NOW - 5 * HOUR_S)), job(2, "b", 8, Some(1), None), job(3, "b", 32, Some(1), None)];
        let mut m = moment(jobs, config.new_ledger());
        // No limit: it runs the default (2 h) from now.
        let f = forecast(&config, &m, 2).unwrap();
        assert_eq!((f.estimate.clone(), f.defaulted.clone()), (Estimate::StartsAt(NOW + 2 * HOUR_S), vec![1]));
        m.horizon_s = HOUR_S;
        assert_eq!(forecast(&config, &m, 2).unwrap().estimate, Estimate::NotWithin { horizon_end: NOW + HOUR_S });
        assert_eq!(forecast(&config, &m, 3).unwrap().estimate, Estimate::NeverFits);
    }

    #[test]
    fn stopping_at_the_targets_start_changes_no_estimate() {
        let config = Config::parse(
            "[cluster]\ngpus = 32\ngpus_per_node = 8\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 30\n[accounts.c]\nshare = 20\n",
            "f.toml",
        )
        .unwrap();
        // A busy moment: 32 GPUs running, 60 waiting jobs of every size,
        // contracts from none to 2 h (preemptions and requeues on the way).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let teams = ["a", "b", "c"];
        let mut jobs = Vec::new();
        for id in 1..=64 {
            let account = teams[next(3) as usize];
            let gpus = [1, 2, 4, 8][next(4) as usize];
            let started = (id <= 4).then(|| NOW - next(3 * HOUR_S));
            let mut j = job(id, account, if started.is_some() { 8 } else { gpus }, Some(1 + next(6)), started);
            j.contract = Contract::new(next(3) * HOUR_S, next(2) == 0);
            jobs.push(j);
        }
        let m = Moment { gpus: 32, ..moment(jobs, config.new_ledger()) };
        let mut starts = 0;
        for target in 5..=64 {
            let full = forecast_stopping(&config, &m, target, false).unwrap();
            assert_eq!(forecast(&config, &m, target).unwrap(), full, "job {target}");
            starts += usize::from(matches!(full.estimate, Estimate::StartsAt(_)));
        }
        assert_eq!(starts, 60, "every waiting job starts within the week");
    }
}
