//! The suite's gaming family: one team reshapes the same GPU-hours of work
//! to reach a favoured treatment, against the same case honest.
//!
//! The honest case: 4 equal teams on 64 GPUs, each submitting 8-GPU jobs of
//! 6-18 h with 2 h contracts (half of them resumable) at about twice the
//! cluster's supply, plus the suite's stream of debug jobs. In every other
//! case the first team (`t01`, the *reshaping team*) submits the same work
//! at the same moments in another shape; the other teams' jobs and the
//! debug stream are the same, job for job. A rule set that cannot be gamed
//! leaves the reshaping team's GPU-hours where they were honest (it gains
//! at most a few percent) and every honest team's too ([`Gaming::judge`]).
//!
//! | case | the reshaping team's jobs | the treatment it reaches for |
//! |---|---|---|
//! | `honest` | as every team's | - |
//! | `split-debug` | each job as four 2-GPU jobs with `contract=15m`, not resumable, no time limit | the debug lane, time-slicing, the protection of work that cannot checkpoint |
//! | `split-debug-resumable` | the same, resumable | the debug lane, time-slicing |
//! | `split-debug-limit` | the same with an 8 h time limit (longer work in 8 h pieces, submitted together) | the debug lane, time-slicing of jobs that are not long |
//! | `split-small` | four 2-GPU jobs, its own contracts | small jobs filling what big ones leave |
//! | `split-small-resumable` | the same, resumable | small jobs that lose nothing when taken |
//! | `split-1gpu-debug` | eight 1-GPU jobs with `contract=15m`, resumable | the debug class at its smallest |
//! | `short-contract` | its 8-GPU jobs with `contract=15m` (what `--exclusive` or a heterogeneous job with a 2-GPU first component looks like once classed by what it holds) | a short contract on big work |
//! | `never-resumable` | every job without `resumable` | the protection of work that cannot checkpoint |
//! | `quick-chunks` | 30-minute 8-GPU pieces with a 30 min time limit and `contract=15m`, submitted together | quick jobs |
//! | `many-users` | every job from a user of its own | per-user limits |
//! | `array-burst` | its 2-GPU `contract=15m` pieces of each day submitted at the day's first job, as one array | arrays |
//!
//! Pure: seeds in, traces out.

use crate::suite::{debug_jobs, equal_teams, next_arrival, Case};
use crate::trace::{Class, TraceJob};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tally_allocator::{DAY_S, HOUR_S, MINUTE_S};

/// The team that reshapes its work.
pub const RESHAPER: &str = "t01";

/// One way of reshaping the reshaping team's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Honest,
    SplitDebug,
    SplitDebugResumable,
    SplitDebugLimit,
    SplitSmall,
    SplitSmallResumable,
    SplitOneGpu,
    ShortContract,
    NeverResumable,
    QuickChunks,
    ManyUsers,
    ArrayBurst,
}

impl Shape {
    pub const ALL: [Shape; 12] = [
        Shape::Honest,
        Shape::SplitDebug,
        Shape::SplitDebugResumable,
        Shape::SplitDebugLimit,
        Shape::SplitSmall,
        Shape::SplitSmallResumable,
        Shape::SplitOneGpu,
        Shape::ShortContract,
        Shape::NeverResumable,
        Shape::QuickChunks,
        Shape::ManyUsers,
        Shape::ArrayBurst,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Honest => "honest",
            Shape::SplitDebug => "split-debug",
            Shape::SplitDebugResumable => "split-debug-resumable",
            Shape::SplitDebugLimit => "split-debug-limit",
            Shape::SplitSmall => "split-small",
            Shape::SplitSmallResumable => "split-small-resumable",
            Shape::SplitOneGpu => "split-1gpu-debug",
            Shape::ShortContract => "short-contract",
            Shape::NeverResumable => "never-resumable",
            Shape::QuickChunks => "quick-chunks",
            Shape::ManyUsers => "many-users",
            Shape::ArrayBurst => "array-burst",
        }
    }

    /// What the case is for (one line).
    pub fn about(self) -> &'static str {
        match self {
            Shape::Honest => "every team submits 8-GPU 6-18 h jobs, 2 h contracts, half resumable",
            Shape::SplitDebug => "t01: four 2-GPU jobs, contract=15m, not resumable, no time limit",
            Shape::SplitDebugResumable => "t01: four 2-GPU jobs, contract=15m, resumable",
            Shape::SplitDebugLimit => "t01: four 2-GPU jobs, contract=15m, 8 h time limit, in 8 h pieces",
            Shape::SplitSmall => "t01: four 2-GPU jobs, its own contracts",
            Shape::SplitSmallResumable => "t01: four 2-GPU jobs, its own contracts, resumable",
            Shape::SplitOneGpu => "t01: eight 1-GPU jobs, contract=15m, resumable",
            Shape::ShortContract => "t01: its 8-GPU jobs with contract=15m",
            Shape::NeverResumable => "t01: every job without resumable",
            Shape::QuickChunks => "t01: 30-min 8-GPU pieces, 30 min time limit, contract=15m",
            Shape::ManyUsers => "t01: every job from a user of its own",
            Shape::ArrayBurst => "t01: a day's 2-GPU contract=15m pieces at once",
        }
    }
}

/// The honest case's cluster and length.
pub const GPUS: u32 = 64;
pub const DAYS: u64 = 14;
/// Demand over supply of the honest case's work (before debug jobs).
pub const DEMAND: f64 = 2.0;

/// The reshaping team's (and every team's) honest jobs: 8 GPUs, 6-18 h,
/// contract 2 h, resumable half the time.
fn honest_jobs(seed: u64) -> Vec<TraceJob> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teams = crate::suite::team_names(4);
    // Mean GPU-hours of a job: 8 GPUs × 12 h.
    let per_team_hour = DEMAND * f64::from(GPUS) / (8.0 * 12.0) / teams.len() as f64;
    let mut jobs = Vec::new();
    for t in &teams {
        let mut at = next_arrival(&mut rng, per_team_hour);
        while at < DAYS * DAY_S {
            let duration_s = rng.gen_range(6 * HOUR_S..=18 * HOUR_S);
            let resumable = rng.gen_bool(0.5);
            jobs.push(TraceJob {
                job_id: 0,
                submit_s: at,
                duration_s,
                gpus: 8,
                account: t.clone(),
                user: format!("{t}-u{}", rng.gen_range(1..=3)),
                class: Class::Training,
                contract_s: 2 * HOUR_S,
                resumable,
                priority: 0,
                gpu_type: None,
                time_limit_s: None,
                name: None,
            });
            at += next_arrival(&mut rng, per_team_hour);
        }
    }
    debug_jobs(&mut rng, &teams, DAYS, 20.0, &mut jobs);
    jobs
}

/// `job` in `n` pieces of `gpus / n` GPUs.
fn split(job: &TraceJob, n: u32) -> Vec<TraceJob> {
    (0..n).map(|_| TraceJob { gpus: job.gpus / n, ..job.clone() }).collect()
}

/// `job` cut into pieces of at most `most_s`, submitted together.
fn chunks(job: &TraceJob, most_s: u64) -> Vec<TraceJob> {
    let mut out = Vec::new();
    let mut left = job.duration_s;
    while left > 0 {
        let d = left.min(most_s);
        out.push(TraceJob { duration_s: d, ..job.clone() });
        left -= d;
    }
    out
}

/// The reshaping team's job `job` (not a debug job) in `shape`; `k` counts
/// its jobs (for users of their own).
fn reshape(shape: Shape, job: &TraceJob, k: usize) -> Vec<TraceJob> {
    let debug_piece = |j: &TraceJob| TraceJob { contract_s: 15 * MINUTE_S, ..j.clone() };
    match shape {
        Shape::Honest => vec![job.clone()],
        Shape::SplitDebug | Shape::ArrayBurst => split(job, 4).iter().map(|j| TraceJob { resumable: false, ..debug_piece(j) }).collect(),
        Shape::SplitDebugResumable => split(job, 4).iter().map(|j| TraceJob { resumable: true, ..debug_piece(j) }).collect(),
        Shape::SplitDebugLimit => split(job, 4)
            .iter()
            .flat_map(|j| chunks(j, 8 * HOUR_S))
            .map(|j| TraceJob { resumable: false, time_limit_s: Some(8 * HOUR_S), ..debug_piece(&j) })
            .collect(),
        Shape::SplitSmall => split(job, 4),
        Shape::SplitSmallResumable => split(job, 4).into_iter().map(|j| TraceJob { resumable: true, ..j }).collect(),
        Shape::SplitOneGpu => split(job, 8).iter().map(|j| TraceJob { resumable: true, ..debug_piece(j) }).collect(),
        Shape::ShortContract => vec![debug_piece(job)],
        Shape::NeverResumable => vec![TraceJob { resumable: false, ..job.clone() }],
        Shape::QuickChunks => {
            chunks(job, 30 * MINUTE_S).into_iter().map(|j| TraceJob { time_limit_s: Some(30 * MINUTE_S), ..debug_piece(&j) }).collect()
        }
        Shape::ManyUsers => vec![TraceJob { user: format!("{}-x{k}", job.account), ..job.clone() }],
    }
}

/// The case where the reshaping team submits its work in `shape` (seeded:
/// the same seed, the same work in every shape).
pub fn case(shape: Shape, seed: u64) -> Case {
    let honest = honest_jobs(seed);
    let mut jobs = Vec::with_capacity(honest.len() * 4);
    let mut k = 0;
    for j in &honest {
        if j.account == RESHAPER && j.class != Class::Debug {
            jobs.extend(reshape(shape, j, k));
            k += 1;
        } else {
            jobs.push(j.clone());
        }
    }
    if shape == Shape::ArrayBurst {
        // A day's pieces submitted with the day's first one.
        let mut first: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for j in jobs.iter().filter(|j| j.account == RESHAPER && j.class != Class::Debug) {
            let day = j.submit_s / DAY_S;
            first.entry(day).and_modify(|t| *t = (*t).min(j.submit_s)).or_insert(j.submit_s);
        }
        for j in jobs.iter_mut().filter(|j| j.account == RESHAPER && j.class != Class::Debug) {
            j.submit_s = first[&(j.submit_s / DAY_S)];
        }
    }
    crate::suite::synthetic(&format!("gaming/{}", shape.name()), shape.about(), equal_teams(4, GPUS), GPUS, jobs)
}

/// Every case of the family, honest first.
pub fn cases(seed: u64) -> Vec<(Shape, Case)> {
    Shape::ALL.iter().map(|&s| (s, case(s, seed))).collect()
}

/// The family's targets: the reshaping team gains at most `gain` of its
/// honest GPU-hours, every honest team keeps at least `keep` of its own.
pub const MAX_GAIN: f64 = 0.05;
pub const MIN_KEEP: f64 = 0.95;

/// One policy's GPU-hours per team in a reshaped case against the honest
/// one: `reshaper` = its GPU-hours ÷ honest, `others` = each honest team's.
#[derive(Debug, Clone, PartialEq)]
pub struct Gaming {
    pub reshaper: f64,
    pub others: Vec<(String, f64)>,
}

impl Gaming {
    /// From each team's useful GPU-hours over the arrival window, honest
    /// and reshaped (by team name).
    pub fn compare(honest: &[(String, f64)], reshaped: &[(String, f64)]) -> Gaming {
        let of = |v: &[(String, f64)], t: &str| v.iter().find(|(n, _)| n == t).map_or(0.0, |(_, g)| *g);
        let ratio = |t: &str| {
            let h = of(honest, t);
            if h > 0.0 {
                of(reshaped, t) / h
            } else {
                1.0
            }
        };
        let others = honest.iter().filter(|(n, _)| n != RESHAPER).map(|(n, _)| (n.clone(), ratio(n))).collect();
        Gaming { reshaper: ratio(RESHAPER), others }
    }

    /// The honest team that kept the least.
    pub fn worst_other(&self) -> Option<(&str, f64)> {
        self.others.iter().map(|(n, r)| (n.as_str(), *r)).min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// What the family's targets say of it (empty: met).
    pub fn judge(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.reshaper > 1.0 + MAX_GAIN {
            out.push(format!("{RESHAPER} gains {:.1}% > {:.0}%", 100.0 * (self.reshaper - 1.0), 100.0 * MAX_GAIN));
        }
        for (n, r) in &self.others {
            if *r < MIN_KEEP {
                out.push(format!("{n} keeps {:.1}% < {:.0}%", 100.0 * r, 100.0 * MIN_KEEP));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_is_the_same_work() {
        let gpu_hours = |c: &Case, team: &str| -> f64 {
            c.trace.jobs.iter().filter(|j| j.account == team && j.class != Class::Debug).map(|j| f64::from(j.gpus) * j.duration_s as f64).sum()
        };
        let honest = case(Shape::Honest, 1);
        assert!((honest.demand - 2.0).abs() < 0.4, "demand {:.2}", honest.demand);
        for (shape, c) in cases(1) {
            for t in ["t01", "t02", "t03", "t04"] {
                assert_eq!(gpu_hours(&c, t), gpu_hours(&honest, t), "{}: {t}", shape.name());
            }
            // The other teams' jobs are the same, job for job.
            let others = |c: &Case| -> Vec<(u64, u64, u32, String)> {
                c.trace.jobs.iter().filter(|j| j.account != RESHAPER).map(|j| (j.submit_s, j.duration_s, j.gpus, j.account.clone())).collect()
            };
            assert_eq!(others(&c), others(&honest), "{}", shape.name());
        }
    }

    #[test]
    fn gains_and_losses_are_judged_against_the_targets() {
        let v = |a: f64, b: f64| vec![("t01".to_string(), a), ("t02".to_string(), b)];
        let g = Gaming::compare(&v(100.0, 100.0), &v(104.0, 96.0));
        assert!(g.judge().is_empty(), "{:?}", g.judge());
        let g = Gaming::compare(&v(100.0, 100.0), &v(106.0, 94.0));
        assert_eq!(g.judge().len(), 2);
        assert_eq!(g.worst_other(), Some(("t02", 0.94)));
    }
}
