//! What a replay measures, from what ran: one scoring for the simulator and
//! for a real Slurm replayed from sacct (`crate::sacct`).
//!
//! Input: the trace's jobs ([`JobMeta`]) and every run segment ([`Run`]:
//! a job held its GPUs from `start` to `end`, and the run completed, was
//! preempted, or was still going when the replay stopped). Everything is
//! integrated per hour from the first submission. Definitions (docs/sim.md):
//! - occupancy = busy GPU-hours ÷ (GPUs × hours) over the arrival window
//!   (the whole hours from the first submission to the one holding the last);
//! - goodput = the same for *useful* GPU-hours: runs that completed, or
//!   belong to a resumable job (its progress survives), or were still going;
//!   a preempted run of a non-resumable job is lost work;
//! - owed / delivered per team and hour with `allocator::Delivery` (the one
//!   definition): owed = min(allocation rate, GPUs its allocated jobs asked
//!   for — pending or running), delivered = useful GPU-hours of its allocated
//!   jobs (lost work excluded); over the arrival window, and after it (the
//!   drain) apart; and the same scored per team over the whole arrival
//!   window, min(Σ delivered, Σ owed) ÷ Σ owed (`Delivery::window_ratio`);
//! - the same with owed from the trace's own demand (each allocated job asks
//!   from its submission for its duration, as if run at once): one
//!   denominator for every policy;
//! - waits per class (first start − submit), requeues per job, unfinished
//!   jobs, priority-weighted value = Σ priority × GPU-hours run in the
//!   arrival window (Dharma's metric).
//!
//! With GPU types (`allocator::gpu_types`) owed and delivered are in budget
//! units, as the ledger charges: a job asks for its GPUs × its type's
//! weight ([`JobMeta::weight`]), a run delivers its GPUs × the weight of
//! the GPUs it held ([`Run::weight`]), and the teams' rates are in units.
//! Occupancy, goodput, lost work and value stay in GPUs; the granularity
//! [`ceiling`] counts GPUs (an estimate that ignores types).

use crate::trace::Class;
use std::collections::BTreeMap;
use tally_allocator::{summarize, summarize_window, Delivery, FairnessSummary, Weight, HOUR, HOUR_S};

/// A step function integrated per hour.
#[derive(Debug, Clone, Default)]
pub struct Hourly {
    /// Level × seconds per hour since the origin.
    pub buckets: Vec<f64>,
}

impl Hourly {
    /// Add `level` over `[from, to)` (seconds since the origin).
    pub fn add(&mut self, from: u64, to: u64, level: f64) {
        if level == 0.0 || to <= from {
            return;
        }
        let mut t = from;
        while t < to {
            let h = (t / HOUR_S) as usize;
            let end = ((h as u64 + 1) * HOUR_S).min(to);
            if self.buckets.len() <= h {
                self.buckets.resize(h + 1, 0.0);
            }
            self.buckets[h] += level * (end - t) as f64;
            t = end;
        }
    }
    /// Per-hour values in hours (GPU-hours for a GPU level).
    pub fn hours(&self, n: usize) -> Vec<f64> {
        (0..n).map(|h| self.buckets.get(h).copied().unwrap_or(0.0) / HOUR).collect()
    }
}

/// What the scoring needs of one trace job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobMeta {
    /// Index into the team list.
    pub team: usize,
    pub gpus: u32,
    pub submit_s: u64,
    pub duration_s: u64,
    /// Allocated work (a trace contract > 0): counts towards owed/delivered.
    pub asks: bool,
    pub resumable: bool,
    pub class: Class,
    pub priority: i32,
    /// The weight of the GPU type it asks for (1 untyped): what it asks
    /// for in budget units, and what its runs deliver unless they say.
    pub weight: Weight,
}

/// How a run segment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The job finished.
    Completed,
    /// Preempted (requeued): lost unless the job is resumable.
    Preempted,
    /// Still running when the replay stopped (counted as useful).
    Cut,
}

/// A job held its GPUs over `[start_s, end_s)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Index into the jobs.
    pub job: usize,
    pub start_s: u64,
    pub end_s: u64,
    pub end: RunEnd,
    /// The weight of the GPUs the run held (an untyped job landing on
    /// typed GPUs); `None`: its job's ([`JobMeta::weight`]).
    pub weight: Option<Weight>,
}

impl Run {
    /// Useful work: its GPU-time is not thrown away.
    pub fn useful(&self, job: &JobMeta) -> bool {
        self.end != RunEnd::Preempted || job.resumable
    }
}

/// Wait statistics of one class, in seconds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Waits {
    /// Every wait, sorted.
    pub sorted_s: Vec<u64>,
}

impl Waits {
    pub fn n(&self) -> usize {
        self.sorted_s.len()
    }
    /// Nearest-rank percentile.
    pub fn pct(&self, p: f64) -> Option<u64> {
        if self.sorted_s.is_empty() {
            return None;
        }
        let rank = ((p / 100.0) * self.sorted_s.len() as f64).ceil().max(1.0) as usize;
        Some(self.sorted_s[rank.min(self.sorted_s.len()) - 1])
    }
}

/// One team's result.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamResult {
    pub team: String,
    pub rate_gpus: f64,
    /// Over the arrival window, owed from what it asked.
    pub delivery: Delivery,
    /// Over the arrival window, owed from the trace's own demand.
    pub delivery_trace: Delivery,
    /// After the arrival window.
    pub drain: Delivery,
    /// GPU-hours of useful runs over the arrival window, allocated or not
    /// (what the gaming family compares).
    pub useful_gpu_hours: f64,
    /// Waits of its debug jobs (first start − submission).
    pub debug_waits: Waits,
}

/// The figures of one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub gpus: u32,
    /// First to last submission.
    pub window_s: u64,
    /// First submission to the last event.
    pub makespan_s: u64,
    pub occupancy: f64,
    pub goodput: f64,
    /// Busy GPU-hours per hour from the first submission.
    pub hourly_busy: Vec<f64>,
    /// Useful GPU-hours per hour.
    pub hourly_useful: Vec<f64>,
    pub teams: Vec<TeamResult>,
    /// Delivered / owed over the arrival window (owed from what was asked),
    /// credited hour by hour: the strict figure, the targets'.
    pub fairness: FairnessSummary,
    /// The same owed and delivered scored per team over the whole arrival
    /// window: Σ_t min(D_t, O_t) ÷ Σ_t O_t (`summarize_window`).
    pub fairness_window: FairnessSummary,
    /// The same with owed from the trace's own demand.
    pub fairness_trace: FairnessSummary,
    /// After the arrival window.
    pub drain: FairnessSummary,
    pub waits: BTreeMap<Class, Waits>,
    /// Runs of non-resumable jobs thrown away by a requeue, GPU-hours (all jobs).
    pub lost_gpu_hours: f64,
    /// The part of it that was allocated work (jobs with a contract).
    pub lost_allocated_gpu_hours: f64,
    /// Useful GPU-hours (the whole replay).
    pub useful_gpu_hours: f64,
    pub value: f64,
    pub completed: usize,
    /// Jobs that never completed (still waiting or running at the end).
    pub unfinished: usize,
    /// Preemptions (runs that ended preempted).
    pub preemptions: u64,
    /// Most requeues of one job, by kind.
    pub max_requeues: Requeues,
}

impl Scored {
    /// The waits of every job that started, whatever its class.
    pub fn all_waits(&self) -> Waits {
        let mut sorted_s: Vec<u64> = self.waits.values().flat_map(|w| w.sorted_s.iter().copied()).collect();
        sorted_s.sort_unstable();
        Waits { sorted_s }
    }
}

/// Most requeues of one job: allocated (a trace contract above 0) and not
/// resumable, allocated and resumable (progress kept), unallocated
/// (preemptible by any allocated job, by design). Information, not a
/// target: Tally never requeues an allocated job that cannot checkpoint
/// past its contract unless it is a debug job, but the scoring sees only
/// the trace's class and contract, not the rules' debug class or which
/// contracts the rules run unallocated (an unfunded account, a contract
/// above the maximum), and a real cluster's history has requeues of its
/// own (an admin's, a drain's, a failed node's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Requeues {
    pub allocated: u32,
    pub resumable: u32,
    pub unallocated: u32,
}

/// Score one replay. `teams` = (name, allocation rate in GPUs) in team
/// index order; times are seconds since the trace's clock; `end_s` is when
/// the replay stopped.
pub fn score(jobs: &[JobMeta], runs: &[Run], teams: &[(String, f64)], gpus: u32, end_s: u64) -> Scored {
    let origin = jobs.iter().map(|j| j.submit_s).min().unwrap_or(0);
    let last_submit = jobs.iter().map(|j| j.submit_s).max().unwrap_or(origin);
    let end_s = end_s.max(last_submit);
    let hours = ((end_s - origin) / HOUR_S + 1) as usize;
    let window_hours = (((last_submit - origin) / HOUR_S) as usize + 1).min(hours);
    let rel = |t: u64| t.saturating_sub(origin);

    let mut busy = Hourly::default();
    let mut useful = Hourly::default();
    let mut value = Hourly::default();
    let mut ran = vec![Hourly::default(); teams.len()];
    let mut team_useful = vec![Hourly::default(); teams.len()];
    let mut asked = vec![Hourly::default(); teams.len()];
    let mut trace_asked = vec![Hourly::default(); teams.len()];
    let mut first_start: Vec<Option<u64>> = vec![None; jobs.len()];
    let mut done_at: Vec<Option<u64>> = vec![None; jobs.len()];
    let mut requeues = vec![0u32; jobs.len()];
    let (mut lost_s, mut lost_alloc_s, mut useful_s, mut preemptions) = (0.0, 0.0, 0.0, 0u64);
    for r in runs {
        let j = &jobs[r.job];
        let g = f64::from(j.gpus);
        let (a, b) = (rel(r.start_s), rel(r.end_s.max(r.start_s)));
        busy.add(a, b, g);
        value.add(a, b, g * f64::from(j.priority));
        first_start[r.job] = Some(first_start[r.job].map_or(r.start_s, |s| s.min(r.start_s)));
        match r.end {
            RunEnd::Completed => done_at[r.job] = Some(r.end_s),
            RunEnd::Preempted => {
                requeues[r.job] += 1;
                preemptions += 1;
            }
            RunEnd::Cut => {}
        }
        if r.useful(j) {
            useful.add(a, b, g);
            useful_s += g * (b - a) as f64;
            team_useful[j.team].add(a, b, g);
            if j.asks {
                ran[j.team].add(a, b, r.weight.unwrap_or(j.weight).units(j.gpus));
            }
        } else {
            lost_s += g * (b - a) as f64;
            if j.asks {
                lost_alloc_s += g * (b - a) as f64;
            }
        }
    }
    for (i, j) in jobs.iter().enumerate() {
        if j.asks {
            let until = done_at[i].unwrap_or(end_s);
            asked[j.team].add(rel(j.submit_s), rel(until), j.weight.units(j.gpus));
            trace_asked[j.team].add(rel(j.submit_s), rel(j.submit_s + j.duration_s.max(1)), j.weight.units(j.gpus));
        }
    }

    let mut team_debug = vec![Waits::default(); teams.len()];
    for (j, s) in jobs.iter().zip(&first_start) {
        if let (Class::Debug, Some(s)) = (j.class, s) {
            team_debug[j.team].sorted_s.push(s.saturating_sub(j.submit_s));
        }
    }
    let mut out_teams = Vec::with_capacity(teams.len());
    for (t, (name, rate)) in teams.iter().enumerate() {
        let (asked, trace_asked, ran) = (asked[t].hours(hours), trace_asked[t].hours(hours), ran[t].hours(hours));
        let (mut d, mut dt, mut drain) = (Delivery::default(), Delivery::default(), Delivery::default());
        for h in 0..hours {
            if h < window_hours {
                d.add_hour(*rate, asked[h], ran[h]);
                dt.add_hour(*rate, trace_asked[h], ran[h]);
            } else {
                drain.add_hour(*rate, asked[h], ran[h]);
            }
        }
        let useful_gpu_hours = team_useful[t].hours(hours).iter().take(window_hours).sum();
        let mut debug_waits = std::mem::take(&mut team_debug[t]);
        debug_waits.sorted_s.sort_unstable();
        out_teams.push(TeamResult { team: name.clone(), rate_gpus: *rate, delivery: d, delivery_trace: dt, drain, useful_gpu_hours, debug_waits });
    }
    let summary = |f: &dyn Fn(&TeamResult) -> &Delivery| summarize(out_teams.iter().map(|t| (t.team.as_str(), f(t))), 0.95);
    let fairness = summary(&|t| &t.delivery);
    let fairness_window = summarize_window(out_teams.iter().map(|t| (t.team.as_str(), &t.delivery)), 0.95);
    let fairness_trace = summary(&|t| &t.delivery_trace);
    let drain = summary(&|t| &t.drain);

    let hourly_busy = busy.hours(hours);
    let hourly_useful = useful.hours(hours);
    let capacity = f64::from(gpus.max(1)) * window_hours as f64;
    let occupancy = hourly_busy.iter().take(window_hours).sum::<f64>() / capacity;
    let goodput = hourly_useful.iter().take(window_hours).sum::<f64>() / capacity;
    let mut waits: BTreeMap<Class, Waits> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if let Some(s) = first_start[i] {
            waits.entry(j.class).or_default().sorted_s.push(s.saturating_sub(j.submit_s));
        }
    }
    for w in waits.values_mut() {
        w.sorted_s.sort_unstable();
    }
    let mut max_requeues = Requeues::default();
    for (j, &q) in jobs.iter().zip(&requeues) {
        let slot = match (j.asks, j.resumable) {
            (true, false) => &mut max_requeues.allocated,
            (true, true) => &mut max_requeues.resumable,
            (false, _) => &mut max_requeues.unallocated,
        };
        *slot = (*slot).max(q);
    }
    Scored {
        gpus,
        window_s: last_submit - origin,
        makespan_s: end_s - origin,
        occupancy,
        goodput,
        hourly_busy,
        hourly_useful,
        teams: out_teams,
        fairness,
        fairness_window,
        fairness_trace,
        drain,
        waits,
        lost_gpu_hours: lost_s / HOUR,
        lost_allocated_gpu_hours: lost_alloc_s / HOUR,
        useful_gpu_hours: useful_s / HOUR,
        value: value.hours(window_hours).iter().sum(),
        completed: done_at.iter().filter(|d| d.is_some()).count(),
        unfinished: done_at.iter().filter(|d| d.is_none()).count(),
        preemptions,
        max_requeues,
    }
}

/// The granularity ceiling of delivered / owed (owed from the trace's own
/// demand) over the arrival window:
///
/// ```text
/// per hour h, per team t:  owed_t = min(rate_t, demand_t(h)),
///                          m_t    = the fewest GPUs of a job t asks with in h,
///                          cost_t = max(owed_t, m_t)   GPUs to be credited owed_t
/// ceiling(h) = fractional knapsack: credit per GPU owed_t / cost_t, best first,
///              within the cluster's GPUs
/// ceiling    = Σ ceiling(h) / Σ owed
/// ```
/// A team whose jobs are all larger than its rate can only be credited by
/// running more than its rate; when every team's such cost does not fit in
/// the cluster, no policy meets owed. Assumes a running job holds its GPUs
/// for whole hours (contracts and non-resumable work make that so in
/// practice): an estimate, not a proof. `None` when nothing was owed.
pub fn ceiling(jobs: &[JobMeta], teams: &[(String, f64)], gpus: u32) -> Option<f64> {
    let origin = jobs.iter().map(|j| j.submit_s).min()?;
    let last = jobs.iter().map(|j| j.submit_s).max()?;
    let hours = ((last - origin) / HOUR_S + 1) as usize;
    let mut demand = vec![Hourly::default(); teams.len()];
    let mut smallest = vec![vec![u32::MAX; hours]; teams.len()];
    for j in jobs.iter().filter(|j| j.asks) {
        let (a, b) = (j.submit_s - origin, j.submit_s - origin + j.duration_s.max(1));
        demand[j.team].add(a, b, f64::from(j.gpus));
        let end = ((b.saturating_sub(1) / HOUR_S) as usize).min(hours.saturating_sub(1));
        for m in &mut smallest[j.team][(a / HOUR_S) as usize..=end] {
            *m = (*m).min(j.gpus);
        }
    }
    let demand: Vec<Vec<f64>> = demand.iter().map(|d| d.hours(hours)).collect();
    let (mut owed_total, mut credit_total) = (0.0, 0.0);
    let mut items: Vec<(f64, f64)> = Vec::with_capacity(teams.len());
    for h in 0..hours {
        items.clear();
        for (t, (_, rate)) in teams.iter().enumerate() {
            let owed = rate.min(demand[t][h]);
            if owed > 0.0 {
                items.push((owed, owed.max(f64::from(smallest[t][h]))));
                owed_total += owed;
            }
        }
        items.sort_by(|a, b| (b.0 / b.1).total_cmp(&(a.0 / a.1)));
        let mut cap = f64::from(gpus);
        for &(owed, cost) in &items {
            if cap <= 0.0 {
                break;
            }
            let take = cost.min(cap);
            credit_total += owed * take / cost;
            cap -= take;
        }
    }
    (owed_total > 0.0).then(|| credit_total / owed_total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hourly_integration_splits_at_hour_edges() {
        let mut h = Hourly::default();
        h.add(0, 5400, 4.0); // 1.5 h at 4 GPUs
        h.add(5400, 7200, 2.0);
        assert_eq!(h.hours(3), vec![4.0, 2.0 + 1.0, 0.0]);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let w = Waits { sorted_s: (1..=10).collect() };
        assert_eq!((w.pct(50.0), w.pct(90.0), w.pct(99.0)), (Some(5), Some(9), Some(10)));
        assert_eq!(Waits::default().pct(50.0), None);
    }

    fn job(team: usize, gpus: u32, submit_s: u64, duration_s: u64, resumable: bool) -> JobMeta {
        JobMeta { team, gpus, submit_s, duration_s, asks: true, resumable, class: Class::Training, priority: 1, weight: Weight::ONE }
    }

    #[test]
    fn ceiling_of_jobs_larger_than_the_rate() {
        // Two teams with rates of 2 on 4 GPUs, each asking with 4-GPU jobs
        // all hour: only one can run; credit 2 of 4 owed.
        let jobs = vec![job(0, 4, 0, 3600, false), job(1, 4, 0, 3600, false)];
        let teams = [("a".to_string(), 2.0), ("b".to_string(), 2.0)];
        assert_eq!(ceiling(&jobs, &teams, 4), Some(0.5));
        // With 2-GPU jobs both fit.
        let jobs = vec![job(0, 2, 0, 3600, false), job(1, 2, 0, 3600, false)];
        assert_eq!(ceiling(&jobs, &teams, 4), Some(1.0));
    }

    #[test]
    fn the_window_figure_lets_a_team_make_up_a_starved_hour() {
        // Rate 4 on 8 GPUs: hour 0 asks 4 and runs nothing, hour 1 asks 8
        // and runs 8 (4 beyond what it is owed).
        let jobs = vec![job(0, 4, 0, 3600, false), job(0, 4, 3600, 3600, false)];
        let runs = vec![
            Run { job: 0, start_s: 3600, end_s: 7200, end: RunEnd::Completed, weight: None },
            Run { job: 1, start_s: 3600, end_s: 7200, end: RunEnd::Completed, weight: None },
        ];
        let s = score(&jobs, &runs, &[("a".into(), 4.0)], 8, 7200);
        assert_eq!((s.fairness.overall, s.fairness_window.overall), (0.5, 1.0));
        assert_eq!(s.fairness_window.worst, Some(("a".to_string(), 1.0)));
    }

    #[test]
    fn lost_work_is_not_delivered() {
        // One team, rate 4, on 4 GPUs; a 4-GPU job runs 30 min, is preempted
        // (thrown away), runs again 1 h and completes; another resumable job
        // keeps what it ran.
        let jobs = vec![job(0, 4, 0, 3600, false), job(0, 4, 0, 3600, true)];
        let runs = vec![
            Run { job: 0, start_s: 0, end_s: 1800, end: RunEnd::Preempted, weight: None },
            Run { job: 1, start_s: 1800, end_s: 3600, end: RunEnd::Preempted, weight: None },
            Run { job: 0, start_s: 3600, end_s: 7200, end: RunEnd::Completed, weight: None },
            Run { job: 1, start_s: 7200, end_s: 9000, end: RunEnd::Completed, weight: None },
        ];
        let s = score(&jobs, &runs, &[("a".into(), 4.0)], 4, 9000);
        assert_eq!(s.lost_gpu_hours, 2.0);
        assert_eq!(s.useful_gpu_hours, 4.0 * 2.0);
        // Window = hour 0 only (both submitted at 0): busy 4, useful 2.
        assert_eq!((s.occupancy, s.goodput), (1.0, 0.5));
        let d = &s.teams[0].delivery;
        assert_eq!((d.owed_gpu_hours, d.delivered_gpu_hours), (4.0, 2.0));
        // Trace demand: 8 GPUs asked in hour 0, owed 4.
        assert_eq!(s.teams[0].delivery_trace.owed_gpu_hours, 4.0);
        // The drain: hours 1 and 2 (asked 4 then 4 until 9000).
        assert_eq!(s.teams[0].drain.credited_gpu_hours, 4.0 + 2.0);
        let q = Requeues { allocated: 1, unallocated: 0, resumable: 1 };
        assert_eq!((s.preemptions, s.max_requeues, s.completed, s.unfinished), (2, q, 2, 0));
        assert_eq!(s.lost_allocated_gpu_hours, 2.0);
    }
}
