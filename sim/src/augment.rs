//! Augmentation: give a bare trace (times, durations, GPUs) the teams, users,
//! classes, contracts, priorities and debug jobs that public traces lack.
//!
//! Every choice is seeded ([`AugmentOptions::seed`], ChaCha8): the same seed,
//! input trace and config give a byte-identical [`to_csv`](crate::trace::to_csv).
//! The input jobs keep `job_id`, `submit_s`, `duration_s` and `gpus`; every
//! other column is replaced. The rules, in order (rationale in
//! docs/traces.md):
//!
//! 1. **Teams.** The teams are the leaf accounts of the config's tree. Team
//!    `i` has the allocation fraction `a_i` (its GPU-hours per window over
//!    the cluster's, at [`cluster_gpus`] GPUs) and a Zipf factor `1/k^0.8`,
//!    where `k` is its 1-based place in a seeded permutation of the teams.
//!    A job goes to team `i` with probability ∝ `a_i / k_i^0.8`, so expected
//!    demand over budget is ∝ `1/k^0.8`: some teams ask for more than their
//!    share, some for less. A team without a budget (`a_i = 0`) counts as
//!    half the smallest funded team. If the fixed GPU-hour budgets do not
//!    fit that cluster size, all teams count as equal (the CLI refuses that
//!    case first).
//! 2. **Users.** Each team has 3-8 users (uniform, seeded), named
//!    `<team>-u<k>`; a job goes to user `k` with probability ∝ `1/k`.
//! 3. **Classes**, first rule that matches:
//!
//!    | rule | class |
//!    |---|---|
//!    | gpus ≤ 8, with probability 3% | `realtime` (inference services) |
//!    | duration < 1 h and gpus ≤ 2 | `interactive` |
//!    | gpus ≥ 8 or duration ≥ 12 h | `training` |
//!    | otherwise, with probability 60% / 25% / 15% | `batch_inference` / `quantization` / `training` |
//!
//! 4. **Contracts.** With probability `unallocated_fraction` (default 0.15)
//!    a job gets contract 0 (unallocated). Otherwise a uniform fraction in
//!    [0.25, 1.0) of its duration, rounded down to whole minutes, at least
//!    1 min, at most the config's `contracts.max_s`.
//! 5. **Resumable** with probability 60% (training), 80% (batch_inference),
//!    50% (quantization); never for the other classes — except that a job
//!    longer than `contracts.max_s` is always resumable: it cannot finish
//!    inside any contract, so under Tally it must checkpoint (as Ai2 asks of
//!    jobs longer than the 8 h cap); without that it would lose all its work
//!    at every preemption after its contract.
//! 6. **Priority** 0 with probability 80%, else uniform in 1..=10.
//! 7. **Debug jobs** are added: a Poisson process of `debug_per_day`
//!    (default 40) arrivals per working day across all teams, only during
//!    working hours 09:00-18:00 Monday to Friday, between the trace's first
//!    and last submission. The trace's t = 0 is Monday 00:00, shifted by
//!    [`AugmentOptions::week_offset_s`]. Each debug job: team by the weights
//!    of rule 1, user by rule 2, 1 or 2 GPUs (even odds), duration uniform in
//!    120..=900 s, contract = duration (capped at `contracts.max_s`), not
//!    resumable, priority by rule 6, class `debug`. Their ids continue after
//!    the trace's largest id, in arrival order. At most [`MAX_DEBUG_JOBS`]
//!    are expected: [`AugmentOptions::validate_for`] refuses a rate that
//!    would expect more over the trace, [`augment`] lowers it to that cap.
//!
//! 8. **Time limits** (`time_limit_s`), the way users set them: each user
//!    has a habit, drawn once — ask for 1.5×, 2×, 3× or 4× the job's real
//!    duration (20% / 30% / 20% / 15% of users), or always the partition's
//!    maximum, [`MAX_TIME_LIMIT_S`] (15%). A job's limit is its duration
//!    times its user's factor, rounded up to a whole hour, at most
//!    [`MAX_TIME_LIMIT_S`] — but never below the duration rounded up to an
//!    hour (a job longer than the maximum had a longer limit).
//! 9. **Job names** (`name`): each user has a word (`sft`, `eval`, …,
//!    drawn once) and names a job `<word>-<b>`, `b` the job's duration
//!    bucket (`floor(log2(duration / 10 min))`, 0 below 20 min): a user's
//!    few scripts, each running about as long each time. With probability
//!    30% the bucket is off by 1 or 2 (the same script on other data).
//!    This is an assumption, made so that (user, name) carries information
//!    about the duration as it does on real clusters; how much it carries
//!    (within 2× for 70% of jobs) is invented, not measured. Realtime jobs
//!    are named `<user>-serve` (one service per user), debug jobs
//!    `<word>-debug`.
//!
//! The output is sorted by `(submit_s, job_id)`. Random draws come from
//! independent streams (teams and users; the trace's jobs, a fixed
//! number of draws per job; debug arrivals; the users' limit and name
//! habits; the trace jobs' names), so changing e.g.
//! `debug_per_day` leaves the original jobs' columns unchanged, changing
//! `unallocated_fraction` only flips contracts, and rules 8 and 9 leave
//! every other column as it was before they existed.

use crate::trace::{Class, Trace, TraceJob};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tally_allocator::{DAY_S, HOUR_S, MINUTE_S, WEEK_S};
use thiserror::Error;

/// Zipf exponent of team demand over the seeded permutation of the teams.
pub const TEAM_ZIPF_EXPONENT: f64 = 0.8;
/// Zipf exponent of users inside a team.
pub const USER_ZIPF_EXPONENT: f64 = 1.0;
/// Users per team, uniform in this range.
pub const USERS_PER_TEAM: (u32, u32) = (3, 8);
/// Share of jobs with gpus <= [`REALTIME_MAX_GPUS`] that become `realtime`.
pub const REALTIME_FRACTION: f64 = 0.03;
pub const REALTIME_MAX_GPUS: u32 = 8;
/// `interactive`: shorter than this and at most [`INTERACTIVE_MAX_GPUS`].
pub const INTERACTIVE_MAX_DURATION_S: u64 = HOUR_S;
pub const INTERACTIVE_MAX_GPUS: u32 = 2;
/// `training`: at least this many GPUs or at least this long.
pub const TRAINING_MIN_GPUS: u32 = 8;
pub const TRAINING_MIN_DURATION_S: u64 = 12 * HOUR_S;
/// The rest: cumulative probabilities of batch_inference, quantization,
/// training (60% / 25% / 15%).
pub const MIX: [(Class, f64); 3] = [(Class::BatchInference, 0.60), (Class::Quantization, 0.85), (Class::Training, 1.0)];
/// An allocated contract is this fraction of the duration, uniform in [lo, hi).
pub const CONTRACT_FRACTION: (f64, f64) = (0.25, 1.0);
/// Probability of `resumable` per class (others: never).
pub const RESUMABLE: [(Class, f64); 3] = [(Class::Training, 0.6), (Class::BatchInference, 0.8), (Class::Quantization, 0.5)];
/// Probability of priority 0; otherwise uniform in 1..=[`PRIORITY_MAX`].
pub const PRIORITY_ZERO: f64 = 0.8;
pub const PRIORITY_MAX: i32 = 10;
/// Working hours of debug arrivals, seconds after midnight (09:00-18:00).
pub const WORK_START_S: u64 = 9 * HOUR_S;
pub const WORK_END_S: u64 = 18 * HOUR_S;
/// Working days: the first 5 of the week (Monday-Friday).
pub const WORK_DAYS: u64 = 5;
/// Debug jobs: GPUs and duration ranges (inclusive).
pub const DEBUG_GPUS: (u32, u32) = (1, 2);
pub const DEBUG_DURATION_S: (u64, u64) = (120, 900);
/// The partition's longest time limit: a user's limit is never above it
/// (unless the job itself ran longer).
pub const MAX_TIME_LIMIT_S: u64 = 7 * DAY_S;
/// Users' time-limit habits, cumulative: an overestimate factor of the
/// duration, or `None` for always the partition's maximum.
pub const LIMIT_HABITS: [(Option<f64>, f64); 5] = [(Some(1.5), 0.20), (Some(2.0), 0.50), (Some(3.0), 0.70), (Some(4.0), 0.85), (None, 1.0)];
/// The words users name their scripts with (one per user).
pub const NAME_WORDS: [&str; 12] = ["sft", "pretrain", "eval", "sweep", "distill", "rlhf", "bench", "finetune", "export", "embed", "probe", "ablate"];
/// Shortest duration of name bucket 1 (bucket `floor(log2(d / this))`).
pub const NAME_BUCKET_BASE_S: u64 = 600;
/// Probability that a job's name bucket is off by 1 or 2.
pub const NAME_NOISE: f64 = 0.3;

/// Demand over supply assumed when neither the options nor the config give
/// a cluster size: `gpus = round(mean busy GPUs / 2.5)`.
pub const DEMAND_OVER_SUPPLY: f64 = 2.5;

/// Most debug jobs expected (rate × working seconds of the trace): about a
/// GB of trace in memory, over 300 a working day for a year and a half of
/// trace. `--debug-per-day 1e9` over a week would be 5 × 10⁹ jobs,
/// terabytes.
pub const MAX_DEBUG_JOBS: u64 = 10_000_000;

const WORKING_DAY_S: u64 = WORK_END_S - WORK_START_S;

/// What [`augment`] adds, and how much.
#[derive(Debug, Clone, PartialEq)]
pub struct AugmentOptions {
    /// Seed of every random choice. Default 1.
    pub seed: u64,
    /// Debug jobs per working day (Monday-Friday), all teams together.
    /// Default 40; 0 adds none.
    pub debug_per_day: f64,
    /// Share of the trace's jobs with contract 0, in [0, 1]. Default 0.15.
    pub unallocated_fraction: f64,
    /// Cluster size that turns budgets into allocation fractions (matters
    /// only for `gpu_hours` budgets). Default `None`: the config's
    /// `[cluster] gpus`, else `round(mean busy GPUs / 2.5)` of the trace.
    pub gpus: Option<u32>,
    /// Where t = 0 falls in the week, in seconds after Monday 00:00, in
    /// `0..604800`. Default 0 (t = 0 is Monday 00:00).
    pub week_offset_s: u64,
}

impl Default for AugmentOptions {
    fn default() -> Self {
        AugmentOptions { seed: 1, debug_per_day: 40.0, unallocated_fraction: 0.15, gpus: None, week_offset_s: 0 }
    }
}

/// An option out of range.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AugmentError {
    #[error("debug_per_day must be a finite number >= 0 (debug jobs per working day), found {0}")]
    DebugPerDay(f64),
    #[error("unallocated_fraction must be in [0, 1] (share of jobs with contract 0), found {0}")]
    UnallocatedFraction(f64),
    #[error("gpus must be at least 1 (cluster size for the allocation fractions), found 0")]
    Gpus,
    #[error("week_offset_s must be below 604800 (one week), found {0}")]
    WeekOffset(u64),
    #[error(
        "debug_per_day {per_day} would add about {expected:.0} debug jobs over the trace's {working_days:.1} working days \
         (Mon-Fri 09:00-18:00 between its first and last submission); at most {MAX_DEBUG_JOBS} are allowed \
         (debug_per_day up to {max_per_day} for this trace)"
    )]
    TooManyDebugJobs { per_day: f64, expected: f64, working_days: f64, max_per_day: f64 },
}

impl AugmentOptions {
    /// Check the ranges. [`augment`] clamps out-of-range values instead.
    pub fn validate(&self) -> Result<(), AugmentError> {
        if !(self.debug_per_day.is_finite() && self.debug_per_day >= 0.0) {
            return Err(AugmentError::DebugPerDay(self.debug_per_day));
        }
        if !(0.0..=1.0).contains(&self.unallocated_fraction) {
            return Err(AugmentError::UnallocatedFraction(self.unallocated_fraction));
        }
        if self.gpus == Some(0) {
            return Err(AugmentError::Gpus);
        }
        if self.week_offset_s >= WEEK_S {
            return Err(AugmentError::WeekOffset(self.week_offset_s));
        }
        Ok(())
    }

    /// [`AugmentOptions::validate`], then the size of what [`augment`]
    /// would add to `trace`: expected debug jobs = `debug_per_day` × the
    /// trace's working days, at most [`MAX_DEBUG_JOBS`].
    pub fn validate_for(&self, trace: &Trace) -> Result<(), AugmentError> {
        self.validate()?;
        let working_s = trace_working_seconds(trace, self.week_offset_s);
        let working_days = working_s as f64 / WORKING_DAY_S as f64;
        let expected = self.debug_per_day * working_days;
        if expected > MAX_DEBUG_JOBS as f64 {
            // Rounded down to a whole number of jobs a day where it can be.
            let max = MAX_DEBUG_JOBS as f64 / working_days;
            let max_per_day = if max >= 10.0 { max.floor() } else { max };
            return Err(AugmentError::TooManyDebugJobs { per_day: self.debug_per_day, expected, working_days, max_per_day });
        }
        Ok(())
    }
}

/// Working seconds (Monday-Friday, 09:00-18:00) in `[start, end]` of trace
/// time, t = 0 being `offset` seconds after Monday 00:00. Closed form,
/// `f(end) − f(start)` with `f(x)` the working seconds of week time `[0, x)`:
/// whole weeks of 5 × 9 h, then the days of the last week.
pub fn working_seconds(start: u64, end: u64, offset: u64) -> u64 {
    fn before(x: u64) -> u64 {
        let in_week = x % WEEK_S;
        let days: u64 = (0..WORK_DAYS).map(|d| in_week.saturating_sub(d * DAY_S + WORK_START_S).min(WORKING_DAY_S)).sum();
        (x / WEEK_S).saturating_mul(WORK_DAYS * WORKING_DAY_S).saturating_add(days)
    }
    if end <= start {
        return 0;
    }
    let offset = offset % WEEK_S;
    before(end.saturating_add(offset)).saturating_sub(before(start.saturating_add(offset)))
}

/// Working seconds between the trace's first and last submission.
fn trace_working_seconds(trace: &Trace, offset: u64) -> u64 {
    let first = trace.jobs.iter().map(|j| j.submit_s).min();
    let last = trace.jobs.iter().map(|j| j.submit_s).max();
    match (first, last) {
        (Some(a), Some(b)) => working_seconds(a, b, offset),
        _ => 0,
    }
}

/// Debug arrivals per working second: `debug_per_day` over a working day,
/// lowered so that `working_s` seconds expect at most [`MAX_DEBUG_JOBS`].
fn debug_rate_per_s(debug_per_day: f64, working_s: u64) -> f64 {
    let rate = if debug_per_day.is_finite() { debug_per_day.max(0.0) } else { 0.0 } / WORKING_DAY_S as f64;
    if working_s > 0 && rate * working_s as f64 > MAX_DEBUG_JOBS as f64 {
        MAX_DEBUG_JOBS as f64 / working_s as f64
    } else {
        rate
    }
}

/// One team as [`augment`] sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Team {
    pub name: String,
    /// Allocated GPU-hours of the team over the cluster's (0 without budget).
    pub allocation_fraction: f64,
    /// 1-based place in the seeded permutation (Zipf rank).
    pub zipf_rank: usize,
    /// Probability that a job is the team's (all teams sum to 1).
    pub weight: f64,
    /// Users and their probabilities inside the team (sum to 1).
    pub users: Vec<(String, f64)>,
}

/// The cluster size that turns budgets into fractions: `opts.gpus`, else the
/// config's `[cluster] gpus`, else `round(mean busy GPUs / 2.5)` (at least 1).
pub fn cluster_gpus(trace: &Trace, config: &tally_config::Config, opts: &AugmentOptions) -> u32 {
    opts.gpus
        .filter(|&g| g > 0)
        .or(config.cluster.gpus.filter(|&g| g > 0))
        .unwrap_or_else(|| ((trace.mean_busy_gpus() / DEMAND_OVER_SUPPLY).round() as u32).max(1))
}

fn rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

const STREAM_TEAMS: u64 = 0;
const STREAM_JOBS: u64 = 1;
const STREAM_DEBUG: u64 = 2;
const STREAM_HABITS: u64 = 3;
const STREAM_NAMES: u64 = 4;

/// A user's habits (rules 8 and 9): their time-limit factor (`None`: the
/// partition's maximum) and the word of their job names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Habit {
    pub limit_factor: Option<f64>,
    pub word: &'static str,
}

/// Every user's habits, drawn in the teams' and users' order from their own
/// stream (two draws a user).
fn habits(teams: &[Team], seed: u64) -> std::collections::HashMap<String, Habit> {
    let mut rng = rng(seed, STREAM_HABITS);
    let mut out = std::collections::HashMap::new();
    for (user, _) in teams.iter().flat_map(|t| &t.users) {
        let (u_factor, u_word) = (unit(&mut rng), unit(&mut rng));
        let limit_factor = LIMIT_HABITS.iter().find(|(_, c)| u_factor < *c).and_then(|(f, _)| *f);
        let word = NAME_WORDS[uniform_int(u_word, 0, NAME_WORDS.len() as u64 - 1) as usize];
        out.insert(user.clone(), Habit { limit_factor, word });
    }
    out
}

/// A job's time limit under a user's factor (rule 8).
pub fn time_limit(duration_s: u64, limit_factor: Option<f64>) -> u64 {
    let hour = |s: u64| s.div_ceil(HOUR_S).max(1) * HOUR_S;
    let asked = match limit_factor {
        Some(f) => hour((duration_s as f64 * f).ceil() as u64).min(MAX_TIME_LIMIT_S),
        None => MAX_TIME_LIMIT_S,
    };
    asked.max(hour(duration_s))
}

/// A job's name bucket (rule 9): `floor(log2(duration / 10 min))`, 0 below 20 min.
pub fn name_bucket(duration_s: u64) -> u32 {
    (duration_s / NAME_BUCKET_BASE_S).max(1).ilog2()
}

/// A trace job's name from two draws (rule 9).
fn job_name(user: &str, class: Class, word: &str, duration_s: u64, u_noise: f64, u_shift: f64) -> String {
    if class == Class::Realtime {
        return format!("{user}-serve");
    }
    let b = i64::from(name_bucket(duration_s));
    let b = if u_noise < NAME_NOISE { (b + [-2, -1, 1, 2][uniform_int(u_shift, 0, 3) as usize]).max(0) } else { b };
    format!("{word}-{b}")
}

/// Uniform in [0, 1).
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    rng.gen::<f64>()
}

/// Uniform integer in `lo..=hi` from one draw.
fn uniform_int(u: f64, lo: u64, hi: u64) -> u64 {
    (lo + (u * (hi - lo + 1) as f64) as u64).min(hi)
}

/// Index `i` with probability `weights[i]` (weights summing to ~1), by one draw.
fn pick(cumulative: &[f64], u: f64) -> usize {
    let total = cumulative.last().copied().unwrap_or(0.0);
    cumulative.partition_point(|&c| c <= u * total).min(cumulative.len().saturating_sub(1))
}

fn cumulative(weights: impl Iterator<Item = f64>) -> Vec<f64> {
    weights
        .scan(0.0, |acc, w| {
            *acc += w;
            Some(*acc)
        })
        .collect()
}

fn zipf(k: usize, exponent: f64) -> f64 {
    1.0 / (k as f64).powf(exponent)
}

/// The teams with their weights and users (rules 1 and 2 of the module docs).
pub fn teams(trace: &Trace, config: &tally_config::Config, opts: &AugmentOptions) -> Vec<Team> {
    let tree = &config.tree;
    let mut ids: Vec<usize> = tree.leaves().collect();
    if ids.is_empty() {
        ids.push(tree.root()); // a tree without accounts: everything is root's
    }
    let gpus = cluster_gpus(trace, config, opts);
    let fractions: Vec<f64> = match config.allocation(gpus) {
        Ok(alloc) => ids.iter().map(|&id| alloc.fraction(id)).collect(),
        Err(_) => vec![1.0 / ids.len() as f64; ids.len()],
    };
    let floor = fractions.iter().copied().filter(|&f| f > 0.0).fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor / 2.0 } else { 1.0 };

    let mut rng = rng(opts.seed, STREAM_TEAMS);
    // Seeded Fisher-Yates permutation: order[p] = team index at rank p + 1.
    let mut order: Vec<usize> = (0..ids.len()).collect();
    for i in (1..order.len()).rev() {
        let j = uniform_int(unit(&mut rng), 0, i as u64) as usize;
        order.swap(i, j);
    }
    let mut rank = vec![0; ids.len()];
    for (p, &t) in order.iter().enumerate() {
        rank[t] = p + 1;
    }
    let raw: Vec<f64> = (0..ids.len())
        .map(|t| {
            let a = if fractions[t] > 0.0 { fractions[t] } else { floor };
            a * zipf(rank[t], TEAM_ZIPF_EXPONENT)
        })
        .collect();
    let total: f64 = raw.iter().sum();
    ids.iter()
        .enumerate()
        .map(|(t, &id)| {
            let name = tree.node(id).name.clone();
            let n = uniform_int(unit(&mut rng), u64::from(USERS_PER_TEAM.0), u64::from(USERS_PER_TEAM.1)) as usize;
            let user_total: f64 = (1..=n).map(|k| zipf(k, USER_ZIPF_EXPONENT)).sum();
            let users = (1..=n).map(|k| (format!("{name}-u{k}"), zipf(k, USER_ZIPF_EXPONENT) / user_total)).collect();
            Team { name, allocation_fraction: fractions[t], zipf_rank: rank[t], weight: raw[t] / total, users }
        })
        .collect()
}

/// Picks a team and a user from two draws.
struct Chooser<'a> {
    teams: &'a [Team],
    team_cum: Vec<f64>,
    user_cum: Vec<Vec<f64>>,
}

impl<'a> Chooser<'a> {
    fn new(teams: &'a [Team]) -> Self {
        Chooser {
            teams,
            team_cum: cumulative(teams.iter().map(|t| t.weight)),
            user_cum: teams.iter().map(|t| cumulative(t.users.iter().map(|u| u.1))).collect(),
        }
    }
    fn choose(&self, u_team: f64, u_user: f64) -> (String, String) {
        let t = pick(&self.team_cum, u_team);
        let u = pick(&self.user_cum[t], u_user);
        (self.teams[t].name.clone(), self.teams[t].users[u].0.clone())
    }
}

fn priority(u_zero: f64, u_value: f64) -> i32 {
    if u_zero < PRIORITY_ZERO {
        0
    } else {
        uniform_int(u_value, 1, PRIORITY_MAX as u64) as i32
    }
}

/// The class of a trace job (rule 3) from two draws.
pub fn classify(duration_s: u64, gpus: u32, u_realtime: f64, u_mix: f64) -> Class {
    if gpus <= REALTIME_MAX_GPUS && u_realtime < REALTIME_FRACTION {
        Class::Realtime
    } else if duration_s < INTERACTIVE_MAX_DURATION_S && gpus <= INTERACTIVE_MAX_GPUS {
        Class::Interactive
    } else if gpus >= TRAINING_MIN_GPUS || duration_s >= TRAINING_MIN_DURATION_S {
        Class::Training
    } else {
        MIX.iter().find(|(_, c)| u_mix < *c).map_or(Class::Training, |(class, _)| *class)
    }
}

/// Augment a trace (see the module docs for every rule). Options out of
/// range are clamped (a debug rate to [`MAX_DEBUG_JOBS`] expected); call
/// [`AugmentOptions::validate_for`] first to refuse them.
pub fn augment(trace: &Trace, config: &tally_config::Config, opts: &AugmentOptions) -> Trace {
    let teams = teams(trace, config, opts);
    let chooser = Chooser::new(&teams);
    let max_s = config.contracts.max_s;
    let unallocated = if opts.unallocated_fraction.is_nan() { 0.0 } else { opts.unallocated_fraction.clamp(0.0, 1.0) };

    let mut input = trace.clone();
    input.sort(); // draws follow the canonical order, whatever the input's
    let mut rng_jobs = rng(opts.seed, STREAM_JOBS);
    let mut rng_names = rng(opts.seed, STREAM_NAMES);
    let habits = habits(&teams, opts.seed);
    let habit = |user: &str| habits.get(user).copied().unwrap_or(Habit { limit_factor: Some(2.0), word: NAME_WORDS[0] });
    let mut jobs: Vec<TraceJob> = Vec::with_capacity(input.jobs.len());
    for job in &input.jobs {
        let mut u = [0.0; 9];
        for x in &mut u {
            *x = unit(&mut rng_jobs);
        }
        let [u_team, u_user, u_rt, u_mix, u_unalloc, u_frac, u_res, u_prio0, u_prio] = u;
        let (account, user) = chooser.choose(u_team, u_user);
        let class = classify(job.duration_s, job.gpus, u_rt, u_mix);
        let contract_s = if u_unalloc < unallocated {
            0
        } else {
            let (lo, hi) = CONTRACT_FRACTION;
            let raw = ((lo + (hi - lo) * u_frac) * job.duration_s as f64) as u64;
            config.contracts.longest_accepted((raw / MINUTE_S * MINUTE_S).max(MINUTE_S))
        };
        let resumable = job.duration_s > max_s || RESUMABLE.iter().any(|&(c, p)| c == class && u_res < p);
        let (u_noise, u_shift) = (unit(&mut rng_names), unit(&mut rng_names));
        let h = habit(&user);
        jobs.push(TraceJob {
            time_limit_s: Some(time_limit(job.duration_s, h.limit_factor)),
            name: Some(job_name(&user, class, h.word, job.duration_s, u_noise, u_shift)),
            account,
            user,
            class,
            contract_s,
            resumable,
            priority: priority(u_prio0, u_prio),
            ..job.clone()
        });
    }

    // Debug jobs: Poisson arrivals in working hours between the first and
    // the last submission.
    let rate_per_s = debug_rate_per_s(opts.debug_per_day, trace_working_seconds(&input, opts.week_offset_s));
    if let (Some(first), Some(last)) = (input.jobs.first(), input.jobs.last()) {
        if rate_per_s > 0.0 {
            let mut rng = rng(opts.seed, STREAM_DEBUG);
            let offset = opts.week_offset_s % WEEK_S;
            let (start, end) = (first.submit_s, last.submit_s);
            let mut next_id = input.max_job_id() + 1;
            // Days in week time (t + offset); day 0 is a Monday.
            for day in (start + offset) / DAY_S..=(end + offset) / DAY_S {
                if day % 7 >= WORK_DAYS {
                    continue;
                }
                // The working interval in trace time, clipped to [start, end].
                let a = (day * DAY_S + WORK_START_S).saturating_sub(offset).max(start);
                let b = (day * DAY_S + WORK_END_S).saturating_sub(offset).min(end);
                if a >= b {
                    continue;
                }
                let mut t = a as f64;
                loop {
                    t += -(1.0 - unit(&mut rng)).ln() / rate_per_s;
                    if t >= b as f64 {
                        break;
                    }
                    let mut u = [0.0; 6];
                    for x in &mut u {
                        *x = unit(&mut rng);
                    }
                    let [u_team, u_user, u_gpus, u_dur, u_prio0, u_prio] = u;
                    let (account, user) = chooser.choose(u_team, u_user);
                    let duration_s = uniform_int(u_dur, DEBUG_DURATION_S.0, DEBUG_DURATION_S.1);
                    let h = habit(&user);
                    let (time_limit_s, name) = (Some(time_limit(duration_s, h.limit_factor)), Some(format!("{}-debug", h.word)));
                    jobs.push(TraceJob {
                        job_id: next_id,
                        submit_s: t as u64,
                        duration_s,
                        gpus: uniform_int(u_gpus, u64::from(DEBUG_GPUS.0), u64::from(DEBUG_GPUS.1)) as u32,
                        account,
                        user,
                        class: Class::Debug,
                        contract_s: config.contracts.longest_accepted(duration_s),
                        resumable: false,
                        priority: priority(u_prio0, u_prio),
                        gpu_type: None,
                        time_limit_s,
                        name,
                    });
                    next_id += 1;
                }
            }
        }
    }
    let mut out = Trace { jobs };
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::to_csv;
    use tally_allocator::HOUR;

    fn config() -> tally_config::Config {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/tally.toml");
        tally_config::Config::load(std::path::Path::new(path)).unwrap()
    }

    /// A synthetic bare trace: `n` jobs every 10 minutes over about 4 weeks,
    /// sizes and durations cycling through the class table's corners.
    fn bare(n: u64) -> Trace {
        let sizes = [1u32, 1, 2, 4, 8, 16, 64];
        let durations = [600u64, 1800, 3 * HOUR_S, 11 * HOUR_S, 13 * HOUR_S, 40 * HOUR_S];
        let jobs = (0..n)
            .map(|i| TraceJob::bare(i + 1, 3600 + i * 600, durations[(i as usize) % durations.len()], sizes[(i as usize / 3) % sizes.len()]))
            .collect();
        Trace { jobs }
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let (trace, config) = (bare(4000), config());
        let a = to_csv(&augment(&trace, &config, &AugmentOptions::default()));
        let b = to_csv(&augment(&trace, &config, &AugmentOptions::default()));
        let c = to_csv(&augment(&trace, &config, &AugmentOptions { seed: 2, ..Default::default() }));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn keeps_the_trace_and_assigns_leaf_teams_and_their_users() {
        let (trace, config) = (bare(4000), config());
        let out = augment(&trace, &config, &AugmentOptions::default());
        let leaves: Vec<&str> = config.tree.leaves().map(|id| config.tree.node(id).name.as_str()).collect();
        assert_eq!(leaves.len(), 15);
        for j in &out.jobs {
            assert!(leaves.contains(&j.account.as_str()), "{} is not a team", j.account);
            let k: u32 = j.user.strip_prefix(&format!("{}-u", j.account)).unwrap().parse().unwrap();
            assert!((1..=8).contains(&k), "{}", j.user);
        }
        // The original jobs keep id, submit, duration and GPUs.
        let kept: Vec<_> = out.jobs.iter().filter(|j| j.class != Class::Debug).map(|j| (j.job_id, j.submit_s, j.duration_s, j.gpus)).collect();
        let orig: Vec<_> = trace.jobs.iter().map(|j| (j.job_id, j.submit_s, j.duration_s, j.gpus)).collect();
        assert_eq!(kept, orig);
        let keys: Vec<_> = out.jobs.iter().map(|j| (j.submit_s, j.job_id)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted by (submit_s, job_id)");
        // Every team got work, and demand is uneven relative to budgets.
        let teams = teams(&trace, &config, &AugmentOptions::default());
        assert!((teams.iter().map(|t| t.weight).sum::<f64>() - 1.0).abs() < 1e-9);
        let ratio: Vec<f64> = teams.iter().map(|t| t.weight / t.allocation_fraction).collect();
        let (lo, hi) = ratio.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        assert!(hi / lo > 5.0, "demand/budget from {lo} to {hi}");
        for t in &teams {
            assert!(out.jobs.iter().any(|j| j.account == t.name), "{} has no job", t.name);
            assert!((3..=8).contains(&t.users.len()));
        }
    }

    #[test]
    fn contracts_classes_priorities_follow_the_rules() {
        let (trace, config) = (bare(6000), config());
        let out = augment(&trace, &config, &AugmentOptions::default());
        let max_s = config.contracts.max_s;
        assert_eq!(max_s, 8 * HOUR_S);
        let orig: Vec<&TraceJob> = out.jobs.iter().filter(|j| j.class != Class::Debug).collect();
        let mut unallocated = 0;
        for j in &orig {
            assert!(j.contract_s <= max_s);
            if j.contract_s == 0 {
                unallocated += 1;
            } else {
                assert_eq!(j.contract_s % 60, 0);
                let want_max = (j.duration_s / 60 * 60).max(60).min(max_s);
                let want_min = ((j.duration_s / 4) / 60 * 60).max(60).min(max_s);
                assert!((want_min..=want_max).contains(&j.contract_s), "{j:?}");
            }
            match j.class {
                Class::Realtime => assert!(j.gpus <= 8),
                Class::Interactive => assert!(j.duration_s < 3600 && j.gpus <= 2),
                Class::BatchInference | Class::Quantization => {
                    assert!(j.gpus < 8 && j.duration_s < 12 * HOUR_S && (j.duration_s >= 3600 || j.gpus > 2))
                }
                Class::Training => assert!(!(j.duration_s < 3600 && j.gpus <= 2), "{j:?}"),
                Class::Debug => unreachable!(),
            }
            if matches!(j.class, Class::Realtime | Class::Interactive) {
                assert_eq!(j.resumable, j.duration_s > 8 * HOUR_S, "{j:?}");
            }
            if j.duration_s > 8 * HOUR_S {
                assert!(j.resumable, "longer than any contract: must checkpoint");
            }
            assert!((0..=10).contains(&j.priority));
        }
        let frac = f64::from(unallocated) / orig.len() as f64;
        assert!((frac - 0.15).abs() < 0.02, "unallocated fraction {frac}");
        let zero_prio = orig.iter().filter(|j| j.priority == 0).count() as f64 / orig.len() as f64;
        assert!((zero_prio - 0.8).abs() < 0.03, "priority 0 fraction {zero_prio}");
        let small = orig.iter().filter(|j| j.gpus <= 8).count() as f64;
        let realtime = orig.iter().filter(|j| j.class == Class::Realtime).count() as f64;
        assert!((realtime / small - 0.03).abs() < 0.01, "realtime {}", realtime / small);

        for f in [0.0, 1.0] {
            let out = augment(&trace, &config, &AugmentOptions { unallocated_fraction: f, ..Default::default() });
            let zero = out.jobs.iter().filter(|j| j.class != Class::Debug && j.contract_s == 0).count();
            assert_eq!(zero, if f == 0.0 { 0 } else { trace.jobs.len() });
        }
    }

    #[test]
    fn class_table() {
        // (duration_s, gpus, u_realtime, u_mix, class)
        let h = 3600;
        let cases = [
            (600, 1, 0.0, 0.0, Class::Realtime),
            (600, 8, 0.029, 0.0, Class::Realtime),
            (600, 16, 0.0, 0.0, Class::Training),
            (600, 1, 0.5, 0.0, Class::Interactive),
            (h - 1, 2, 0.5, 0.9, Class::Interactive),
            (h, 2, 0.5, 0.0, Class::BatchInference),
            (600, 4, 0.5, 0.59, Class::BatchInference),
            (600, 4, 0.5, 0.60, Class::Quantization),
            (600, 4, 0.5, 0.849, Class::Quantization),
            (600, 4, 0.5, 0.85, Class::Training),
            (600, 8, 0.5, 0.0, Class::Training),
            (12 * h, 1, 0.5, 0.0, Class::Training),
            (12 * h - 1, 1, 0.5, 0.0, Class::BatchInference),
        ];
        for (d, g, ur, um, want) in cases {
            assert_eq!(classify(d, g, ur, um), want, "duration {d} gpus {g} u {ur} {um}");
        }
    }

    #[test]
    fn debug_jobs_only_in_working_hours() {
        let (trace, config) = (bare(4000), config()); // 3600 + 4000 x 600 s ≈ 27.8 days
        for (offset, per_day) in [(0, 40.0), (3 * DAY_S + 5 * HOUR_S, 100.0)] {
            let opts = AugmentOptions { week_offset_s: offset, debug_per_day: per_day, ..Default::default() };
            let out = augment(&trace, &config, &opts);
            let debug: Vec<&TraceJob> = out.jobs.iter().filter(|j| j.class == Class::Debug).collect();
            let (start, end) = (trace.jobs[0].submit_s, trace.jobs.last().unwrap().submit_s);
            // Working seconds between the first and last submission.
            let mut working_s = 0;
            for day in (start + offset) / DAY_S..=(end + offset) / DAY_S {
                if day % 7 < 5 {
                    let a = (day * DAY_S + WORK_START_S).saturating_sub(offset).max(start);
                    let b = (day * DAY_S + WORK_END_S).saturating_sub(offset).min(end);
                    working_s += b.saturating_sub(a);
                }
            }
            let expected = per_day * working_s as f64 / (9.0 * HOUR);
            let n = debug.len() as f64;
            assert!((n - expected).abs() < 4.0 * expected.sqrt(), "{n} debug jobs, expected about {expected}");
            for j in &debug {
                let w = j.submit_s + offset;
                assert!((w % WEEK_S) / DAY_S < 5, "weekend: {j:?}");
                assert!((9 * 3600..18 * 3600).contains(&(w % DAY_S)), "outside 09-18: {j:?}");
                assert!((start..=end).contains(&j.submit_s));
                assert!((1..=2).contains(&j.gpus));
                assert!((120..=900).contains(&j.duration_s));
                assert_eq!(j.contract_s, j.duration_s);
                assert!(j.contract_s <= 15 * 60);
                assert!(!j.resumable);
                assert!(j.job_id > 4000);
            }
            let mut ids: Vec<u64> = debug.iter().map(|j| j.job_id).collect();
            ids.sort_unstable();
            assert_eq!(ids, (4001..4001 + debug.len() as u64).collect::<Vec<_>>());
        }
    }

    #[test]
    fn streams_are_independent() {
        let (trace, config) = (bare(2000), config());
        let strip = |t: Trace| -> Vec<TraceJob> { t.jobs.into_iter().filter(|j| j.class != Class::Debug).collect() };
        let a = strip(augment(&trace, &config, &AugmentOptions::default()));
        let b = strip(augment(&trace, &config, &AugmentOptions { debug_per_day: 0.0, ..Default::default() }));
        assert_eq!(a, b);
    }

    #[test]
    fn limits_and_names_follow_user_habits_and_leave_the_other_columns_alone() {
        let (trace, config) = (bare(4000), config());
        let out = augment(&trace, &config, &AugmentOptions::default());
        for j in &out.jobs {
            let limit = j.time_limit_s.expect("every job has a limit");
            assert_eq!(limit % 3600, 0, "{j:?}");
            assert!(limit >= j.duration_s, "{j:?}");
            assert!(limit <= MAX_TIME_LIMIT_S.max(j.duration_s.div_ceil(3600) * 3600), "{j:?}");
            let name = j.name.as_deref().expect("every job has a name");
            assert!(crate::trace::parse_csv(&crate::trace::to_csv(&Trace { jobs: vec![j.clone()] })).is_ok(), "{name} is a valid name");
            match j.class {
                Class::Realtime => assert_eq!(name, format!("{}-serve", j.user)),
                Class::Debug => assert!(name.ends_with("-debug")),
                _ => {
                    let b: i64 = name.rsplit_once('-').unwrap().1.parse().unwrap();
                    assert!((b - i64::from(name_bucket(j.duration_s))).abs() <= 2, "{j:?}");
                }
            }
        }
        // Users are consistent: a user's 3-hour jobs all get one limit.
        let three_h: Vec<&TraceJob> = out.jobs.iter().filter(|j| j.duration_s == 3 * HOUR_S).collect();
        for j in &three_h {
            assert!(three_h.iter().filter(|k| k.user == j.user).all(|k| k.time_limit_s == j.time_limit_s), "{j:?}");
        }
        // Several habits across users, some at the partition maximum.
        let long: std::collections::BTreeSet<u64> = out.jobs.iter().filter(|j| j.duration_s == 3 * HOUR_S).filter_map(|j| j.time_limit_s).collect();
        assert!(long.len() >= 4, "{long:?}");
        assert!(long.contains(&MAX_TIME_LIMIT_S));
        // Names carry the duration: most jobs' bucket is their own.
        let own =
            out.jobs.iter().filter(|j| !matches!(j.class, Class::Realtime | Class::Debug)).filter(|j| {
                j.name.as_deref().and_then(|n| n.rsplit_once('-')).map(|(_, b)| b == name_bucket(j.duration_s).to_string()).unwrap_or(false)
            });
        let others = out.jobs.iter().filter(|j| !matches!(j.class, Class::Realtime | Class::Debug)).count() as f64;
        let share = own.count() as f64 / others;
        assert!((0.65..0.80).contains(&share), "share with their own bucket {share}");
        assert_eq!(time_limit(600, Some(1.5)), 3600);
        assert_eq!(time_limit(3 * HOUR_S, Some(1.5)), 5 * HOUR_S);
        assert_eq!(time_limit(3 * HOUR_S, None), MAX_TIME_LIMIT_S);
        assert_eq!(time_limit(5 * DAY_S, Some(4.0)), MAX_TIME_LIMIT_S);
        assert_eq!(time_limit(8 * DAY_S + 1, Some(2.0)), 8 * DAY_S + 3600, "a job longer than the maximum");
        assert_eq!((name_bucket(1), name_bucket(1199), name_bucket(1200), name_bucket(4800)), (0, 0, 1, 3));
    }

    #[test]
    fn empty_trace_stays_empty() {
        assert_eq!(augment(&Trace::default(), &config(), &AugmentOptions::default()), Trace::default());
    }

    /// Working seconds in `[start, end]` (trace time), day by day: the
    /// definition the closed form must agree with.
    fn working_by_days(start: u64, end: u64, offset: u64) -> u64 {
        let mut working_s = 0;
        for day in (start + offset) / DAY_S..=(end + offset) / DAY_S {
            if day % 7 < WORK_DAYS {
                let a = (day * DAY_S + WORK_START_S).saturating_sub(offset).max(start);
                let b = (day * DAY_S + WORK_END_S).saturating_sub(offset).min(end);
                working_s += b.saturating_sub(a);
            }
        }
        working_s
    }

    #[test]
    fn working_seconds_in_closed_form() {
        let mut x = 12345u64;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for _ in 0..2000 {
            let start = next(30 * DAY_S);
            let end = start + next(40 * DAY_S);
            let offset = next(WEEK_S);
            assert_eq!(working_seconds(start, end, offset), working_by_days(start, end, offset), "{start} {end} {offset}");
        }
        assert_eq!(working_seconds(0, WEEK_S, 0), 5 * 9 * HOUR_S);
        // No loop over days: a span of 10^13 years is as quick as a week.
        assert_eq!(working_seconds(0, u64::MAX / 2, 0) / (45 * HOUR_S), (u64::MAX / 2) / WEEK_S);
    }

    #[test]
    fn debug_jobs_are_refused_by_how_many_they_would_be() {
        // One week, Monday 00:00 to the next: 5 working days.
        let job = bare(1).jobs[0].clone();
        let week = Trace { jobs: vec![TraceJob { submit_s: 0, ..job.clone() }, TraceJob { job_id: 2, submit_s: WEEK_S, ..job }] };
        let opts = AugmentOptions { debug_per_day: 1e9, ..Default::default() };
        assert_eq!(opts.validate(), Ok(()), "the rate alone is a finite number >= 0");
        assert_eq!(
            opts.validate_for(&week).unwrap_err().to_string(),
            "debug_per_day 1000000000 would add about 5000000000 debug jobs over the trace's 5.0 working days \
             (Mon-Fri 09:00-18:00 between its first and last submission); at most 10000000 are allowed \
             (debug_per_day up to 2000000 for this trace)"
        );
        // At the cap: accepted; the default rate: far below it.
        let at_cap = AugmentOptions { debug_per_day: 2e6, ..Default::default() };
        assert_eq!(at_cap.validate_for(&week), Ok(()));
        assert_eq!(AugmentOptions::default().validate_for(&bare(4000)), Ok(()));
        // Options out of range come first, as validate() says them.
        let bad = AugmentOptions { debug_per_day: -1.0, ..Default::default() };
        assert_eq!(bad.validate_for(&week), Err(AugmentError::DebugPerDay(-1.0)));
        // augment() clamps instead: the rate it uses never expects more than the cap.
        let working_s = working_seconds(0, WEEK_S, 0);
        let rate = debug_rate_per_s(1e9, working_s);
        assert!((rate * working_s as f64 - MAX_DEBUG_JOBS as f64).abs() < 1e-3, "{}", rate * working_s as f64);
        assert_eq!(debug_rate_per_s(40.0, working_s), 40.0 / 32_400.0);
    }

    #[test]
    fn validate_options() {
        let cases: [(AugmentOptions, &str); 5] = [
            (
                AugmentOptions { debug_per_day: -1.0, ..Default::default() },
                "debug_per_day must be a finite number >= 0 (debug jobs per working day), found -1",
            ),
            (
                AugmentOptions { debug_per_day: f64::INFINITY, ..Default::default() },
                "debug_per_day must be a finite number >= 0 (debug jobs per working day), found inf",
            ),
            (
                AugmentOptions { unallocated_fraction: 1.5, ..Default::default() },
                "unallocated_fraction must be in [0, 1] (share of jobs with contract 0), found 1.5",
            ),
            (AugmentOptions { gpus: Some(0), ..Default::default() }, "gpus must be at least 1 (cluster size for the allocation fractions), found 0"),
            (AugmentOptions { week_offset_s: WEEK_S, ..Default::default() }, "week_offset_s must be below 604800 (one week), found 604800"),
        ];
        for (opts, want) in cases {
            assert_eq!(opts.validate().unwrap_err().to_string(), want);
        }
        assert_eq!(AugmentOptions::default().validate(), Ok(()));
    }
}
