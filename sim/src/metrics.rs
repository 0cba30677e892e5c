//! What a replay measures, hour by hour, and the figures it reports.
//!
//! Step functions (busy GPUs, per team: GPUs asked for and run by allocated
//! jobs, priority-weighted busy GPUs) are integrated into hourly buckets as
//! the simulation jumps from event to event. Definitions in docs/sim.md:
//! - occupancy = busy GPU-hours ÷ (GPUs × hours), over the trace's arrival
//!   window (first to last submission);
//! - owed / delivered per team and hour with `allocator::Delivery` (the one
//!   definition): owed = min(allocation rate, GPU-hours its allocated jobs
//!   asked for), delivered = GPU-hours they ran;
//! - waits per class, first start − submit;
//! - preemptions, GPU-hours lost by preempted non-resumable jobs, contract
//!   violations (a preemption inside a declared minimum runtime);
//! - priority-weighted value = Σ priority × GPU-hours run in the arrival
//!   window (Dharma's metric).

use crate::trace::Class;
use std::collections::BTreeMap;
use tally_allocator::{summarize, Delivery, FairnessSummary};

const H: u64 = 3600;

/// A step function integrated per hour.
#[derive(Debug, Clone, Default)]
pub struct Hourly {
    pub level: f64,
    /// GPU-seconds (level × seconds) per hour since the start.
    pub buckets: Vec<f64>,
}

impl Hourly {
    fn add(&mut self, from: u64, to: u64, origin: u64) {
        if self.level == 0.0 || to <= from {
            return;
        }
        let mut t = from;
        while t < to {
            let h = ((t - origin) / H) as usize;
            let edge = origin + (h as u64 + 1) * H;
            let end = edge.min(to);
            if self.buckets.len() <= h {
                self.buckets.resize(h + 1, 0.0);
            }
            self.buckets[h] += self.level * (end - t) as f64;
            t = end;
        }
    }
    /// Per-hour values in hours (GPU-hours for a GPU level).
    pub fn hours(&self, n: usize) -> Vec<f64> {
        (0..n).map(|h| self.buckets.get(h).copied().unwrap_or(0.0) / H as f64).collect()
    }
}

/// Collects the step functions during a replay.
#[derive(Debug, Clone)]
pub struct Recorder {
    origin: u64,
    last: u64,
    pub busy: Hourly,
    pub value: Hourly,
    pub asked: Vec<Hourly>,
    pub ran: Vec<Hourly>,
}

impl Recorder {
    pub fn new(origin: u64, teams: usize) -> Recorder {
        Recorder {
            origin,
            last: origin,
            busy: Hourly::default(),
            value: Hourly::default(),
            asked: vec![Hourly::default(); teams],
            ran: vec![Hourly::default(); teams],
        }
    }

    /// Integrate every level up to `t`.
    pub fn advance(&mut self, t: u64) {
        if t <= self.last {
            return;
        }
        let (from, o) = (self.last, self.origin);
        self.busy.add(from, t, o);
        self.value.add(from, t, o);
        for h in self.asked.iter_mut().chain(self.ran.iter_mut()) {
            h.add(from, t, o);
        }
        self.last = t;
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
    pub delivery: Delivery,
}

/// Everything one policy's replay reports.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyResult {
    pub policy: &'static str,
    pub gpus: u32,
    /// First to last submission.
    pub window_s: u64,
    /// First submission to the last completion.
    pub makespan_s: u64,
    pub occupancy: f64,
    /// Busy GPU-hours per hour from the first submission.
    pub hourly_busy: Vec<f64>,
    pub teams: Vec<TeamResult>,
    pub fairness: FairnessSummary,
    pub waits: BTreeMap<Class, Waits>,
    pub preemptions: u64,
    pub wasted_gpu_hours: f64,
    pub contract_violations: u64,
    pub value: f64,
    pub events: u64,
    pub completed: usize,
    /// Jobs larger than the cluster: never run.
    pub unrunnable: usize,
    /// Jobs still waiting or running when the drain limit stopped the replay.
    pub unfinished: usize,
}

/// Per-team delivery from the recorder: hour by hour with `Delivery::add_hour`.
pub fn deliveries(rec: &Recorder, teams: &[(String, f64)], hours: usize) -> (Vec<TeamResult>, FairnessSummary) {
    let out: Vec<TeamResult> = teams
        .iter()
        .enumerate()
        .map(|(i, (name, rate))| {
            let asked = rec.asked[i].hours(hours);
            let ran = rec.ran[i].hours(hours);
            let mut d = Delivery::default();
            for h in 0..hours {
                d.add_hour(*rate, asked[h], ran[h]);
            }
            TeamResult { team: name.clone(), rate_gpus: *rate, delivery: d }
        })
        .collect();
    let summary = summarize(out.iter().map(|t| (t.team.as_str(), &t.delivery)), 0.95);
    (out, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hourly_integration_splits_at_hour_edges() {
        let mut r = Recorder::new(1000, 1);
        r.busy.level = 4.0;
        r.advance(1000 + 5400); // 1.5 h at 4 GPUs
        r.busy.level = 2.0;
        r.advance(1000 + 7200);
        assert_eq!(r.busy.hours(3), vec![4.0, 2.0 + 1.0, 0.0]);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let w = Waits { sorted_s: (1..=10).collect() };
        assert_eq!((w.pct(50.0), w.pct(90.0), w.pct(99.0)), (Some(5), Some(9), Some(10)));
        assert_eq!(Waits::default().pct(50.0), None);
    }
}
