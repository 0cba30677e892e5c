//! A realtime service's weekly profile: the mean GPUs it held in each of
//! the 168 hours of the week, and the demand curve a planner scenario's
//! `[[services]] demand` takes, read off the profile from a given time.
//!
//! Time is "week time": `t + week_offset_s` seconds after a Monday 00:00
//! (so hour 0 of the week is Monday 00:00-01:00). For Unix times (UTC) the
//! offset is [`UNIX_WEEK_OFFSET_S`]: 1970-01-01 was a Thursday. For a
//! canonical trace it is the augmentation's `week_offset_s` (t = 0 is a
//! Monday midnight by default).
//!
//! The mean for hour h is the GPU-seconds the service's runs held in the
//! hours h of the observed window, divided by the seconds of the window in
//! those hours: a run spanning hours counts pro rata in each, and a window
//! that is not a whole number of weeks still gives means, not sums. An
//! hour of the week the window never covers (a window shorter than a week)
//! takes the mean of the covered hours at the same time of day, else the
//! mean of all covered hours.

use crate::time::{DAY_S, HOUR_S, WEEK_S};
use std::collections::BTreeMap;

pub const HOURS_PER_WEEK: usize = (WEEK_S / HOUR_S) as usize;
const HOURS_PER_DAY: usize = (DAY_S / HOUR_S) as usize;
/// Unix time 0 (Thursday 1970-01-01 00:00 UTC) is three days after a Monday 00:00.
pub const UNIX_WEEK_OFFSET_S: u64 = 3 * DAY_S;

/// A run of a realtime service: it held `gpus` GPUs over `[start_s, end_s)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRun {
    /// The service: the job name if given, else the account.
    pub service: String,
    pub start_s: u64,
    pub end_s: u64,
    pub gpus: u32,
}

/// One service's week.
#[derive(Debug, Clone, PartialEq)]
pub struct WeekProfile {
    pub service: String,
    /// Mean GPUs in use in each hour of the week (Monday 00:00 first).
    pub mean_gpus: Vec<f64>,
}

/// Call `f(hour of week, seconds)` for each piece of `[from, to)` cut at the
/// hours of week time.
fn by_hour(from: u64, to: u64, offset: u64, mut f: impl FnMut(usize, u64)) {
    let offset = offset % WEEK_S;
    let mut t = from;
    while t < to {
        let w = t + offset;
        let next = ((w / HOUR_S + 1) * HOUR_S - offset).min(to);
        f(((w / HOUR_S) % HOURS_PER_WEEK as u64) as usize, next - t);
        t = next;
    }
}

/// The weekly profile of each service over the window `[from_s, to_s)`
/// (runs clipped to it), sorted by service name. Empty when the window is.
pub fn weekly_profiles(runs: &[ServiceRun], from_s: u64, to_s: u64, week_offset_s: u64) -> Vec<WeekProfile> {
    let mut exposure = [0u64; HOURS_PER_WEEK];
    by_hour(from_s, to_s, week_offset_s, |h, s| exposure[h] += s);
    let mut used: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in runs {
        let (a, b) = (r.start_s.max(from_s), r.end_s.min(to_s));
        let hours = used.entry(r.service.as_str()).or_insert_with(|| vec![0.0; HOURS_PER_WEEK]);
        by_hour(a, b, week_offset_s, |h, s| hours[h] += f64::from(r.gpus) * s as f64);
    }
    used.into_iter()
        .filter_map(|(service, gpu_s)| {
            let covered: Vec<Option<f64>> = (0..HOURS_PER_WEEK).map(|h| (exposure[h] > 0).then(|| gpu_s[h] / exposure[h] as f64)).collect();
            let known: Vec<f64> = covered.iter().flatten().copied().collect();
            if known.is_empty() {
                return None;
            }
            let overall = known.iter().sum::<f64>() / known.len() as f64;
            let mean_gpus = (0..HOURS_PER_WEEK)
                .map(|h| {
                    covered[h].unwrap_or_else(|| {
                        let same: Vec<f64> = (0..7).filter_map(|d| covered[d * HOURS_PER_DAY + h % HOURS_PER_DAY]).collect();
                        if same.is_empty() {
                            overall
                        } else {
                            same.iter().sum::<f64>() / same.len() as f64
                        }
                    })
                })
                .collect();
            Some(WeekProfile { service: service.to_string(), mean_gpus })
        })
        .collect()
}

/// The demand curve of `steps` steps of `step_s` from `from_s`: each step
/// the profile's mean over it (pro rata across hours), rounded up to whole
/// GPUs (a step needing 2.1 GPUs needs 3).
pub fn demand_curve(profile: &WeekProfile, from_s: u64, week_offset_s: u64, steps: usize, step_s: u64) -> Vec<u32> {
    let step_s = step_s.max(1);
    (0..steps as u64)
        .map(|k| {
            let a = from_s + k * step_s;
            let mut gpu_s = 0.0;
            by_hour(a, a + step_s, week_offset_s, |h, s| gpu_s += profile.mean_gpus.get(h).copied().unwrap_or(0.0) * s as f64);
            // Floating error must not turn 2.0 into 3.
            (gpu_s / step_s as f64 - 1e-9).ceil().max(0.0) as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(service: &str, start_s: u64, end_s: u64, gpus: u32) -> ServiceRun {
        ServiceRun { service: service.into(), start_s, end_s, gpus }
    }

    #[test]
    fn means_per_hour_of_the_week_pro_rata() {
        // Two weeks from Monday 00:00. "chat": 4 GPUs Monday 09:00-10:30 in
        // week 1 only; 2 GPUs every Tuesday 00:00-01:00.
        let day = DAY_S;
        let runs = vec![
            run("chat", 9 * HOUR_S, 10 * HOUR_S + 1800, 4),
            run("chat", day, day + HOUR_S, 2),
            run("chat", WEEK_S + day, WEEK_S + day + HOUR_S, 2),
            run("search", 0, 2 * WEEK_S, 1),
        ];
        let p = weekly_profiles(&runs, 0, 2 * WEEK_S, 0);
        assert_eq!(p.iter().map(|p| p.service.as_str()).collect::<Vec<_>>(), vec!["chat", "search"]);
        let chat = &p[0].mean_gpus;
        assert_eq!(chat.len(), HOURS_PER_WEEK);
        assert_eq!(chat[9], 2.0, "4 GPUs in one of two Mondays 09-10");
        assert_eq!(chat[10], 1.0, "4 GPUs for half an hour of one of two");
        assert_eq!(chat[24], 2.0, "every Tuesday 00-01");
        assert_eq!(chat.iter().filter(|&&g| g > 0.0).count(), 3);
        assert!(p[1].mean_gpus.iter().all(|&g| g == 1.0));
    }

    #[test]
    fn the_week_offset_moves_the_hours_and_unix_time_starts_on_a_thursday() {
        // Unix time 0 is Thursday 00:00: hour 72 of the week.
        let p = weekly_profiles(&[run("s", 0, HOUR_S, 3)], 0, WEEK_S, UNIX_WEEK_OFFSET_S);
        assert_eq!(p[0].mean_gpus[72], 3.0);
        assert_eq!(p[0].mean_gpus.iter().sum::<f64>(), 3.0);
        // An offset that is not a whole hour cuts runs at week-time hours.
        let p = weekly_profiles(&[run("s", 0, HOUR_S, 2)], 0, WEEK_S, 1800);
        assert_eq!((p[0].mean_gpus[0], p[0].mean_gpus[1]), (1.0, 1.0));
    }

    #[test]
    fn hours_the_window_misses_take_the_same_hour_of_other_days() {
        // Three days (Monday-Wednesday), a service busy 08:00-09:00 with 1, 2, 3 GPUs.
        let day = DAY_S;
        let runs: Vec<ServiceRun> = (0..3).map(|d| run("s", d * day + 8 * HOUR_S, d * day + 9 * HOUR_S, d as u32 + 1)).collect();
        let p = weekly_profiles(&runs, 0, 3 * day, 0);
        let m = &p[0].mean_gpus;
        assert_eq!((m[8], m[24 + 8], m[48 + 8]), (1.0, 2.0, 3.0));
        assert_eq!(m[3 * 24 + 8], 2.0, "Thursday 08:00 was not observed: the mean of the observed 08:00s");
        assert_eq!(m[3 * 24 + 9], 0.0);
        assert!(weekly_profiles(&runs, 5, 5, 0).is_empty(), "an empty window");
    }

    #[test]
    fn demand_curves_round_up_and_wrap_the_week() {
        let mut mean_gpus = vec![0.0; HOURS_PER_WEEK];
        mean_gpus[167] = 1.5; // Sunday 23:00
        mean_gpus[0] = 2.0; // Monday 00:00
        mean_gpus[1] = 0.2;
        let p = WeekProfile { service: "s".into(), mean_gpus };
        // From Sunday 23:00 of the first week: wraps to Monday.
        assert_eq!(demand_curve(&p, 167 * HOUR_S, 0, 4, HOUR_S), vec![2, 2, 1, 0]);
        // Half-hour steps from Sunday 23:30, and a trace whose t = 0 is Sunday 23:00.
        assert_eq!(demand_curve(&p, 1800, 167 * HOUR_S, 3, 1800), vec![2, 2, 2]);
        // Two-hour steps: the mean over both hours (2.0 and 0.2 → 1.1 → 2).
        assert_eq!(demand_curve(&p, WEEK_S, 0, 1, 2 * HOUR_S), vec![2]);
        assert_eq!(demand_curve(&p, 0, 0, 24, HOUR_S).len(), 24);
    }
}
