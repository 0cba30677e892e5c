//! Owed and delivered: the headline fairness figure.
//!
//! Per team, per hour:
//! ```text
//! owed      = min(allocation rate, GPU-hours the team asked for that hour)
//! delivered = allocated GPU-hours the team ran that hour
//! credited  = min(delivered, owed)
//! ratio     = Σ credited / Σ owed        (1 when nothing was owed)
//! ```
//! "Asked for" counts the GPUs of the team's allocated jobs that were pending
//! or running during the hour. Use beyond what was owed (idle capacity
//! soaked up) is reported as `delivered` but does not lift the ratio above
//! what was owed: a team cannot make up a starved hour with a lucky one.
//! Ai2 reported 98% overall, 13 of 15 teams ≥ 95%, the worst at 90%.

/// One team's running totals.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Delivery {
    pub owed_gpu_hours: f64,
    pub delivered_gpu_hours: f64,
    pub credited_gpu_hours: f64,
}

impl Delivery {
    /// Add one hour: `rate_gpus` = the team's allocation rate,
    /// `asked_gpu_hours` = its demand that hour, `ran_gpu_hours` = what it got.
    pub fn add_hour(&mut self, rate_gpus: f64, asked_gpu_hours: f64, ran_gpu_hours: f64) {
        let owed = rate_gpus.min(asked_gpu_hours).max(0.0);
        self.owed_gpu_hours += owed;
        self.delivered_gpu_hours += ran_gpu_hours.max(0.0);
        self.credited_gpu_hours += ran_gpu_hours.max(0.0).min(owed);
    }

    /// Credited ÷ owed; `None` when nothing was owed.
    pub fn ratio(&self) -> Option<f64> {
        (self.owed_gpu_hours > 0.0).then(|| self.credited_gpu_hours / self.owed_gpu_hours)
    }
}

/// Cluster-wide summary.
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessSummary {
    /// Σ credited ÷ Σ owed over all teams (1 when nothing was owed).
    pub overall: f64,
    /// Teams that were owed anything.
    pub teams: usize,
    /// Teams whose ratio ≥ `threshold`.
    pub teams_at_threshold: usize,
    pub threshold: f64,
    /// The team with the lowest ratio.
    pub worst: Option<(String, f64)>,
}

pub fn summarize<'a>(teams: impl IntoIterator<Item = (&'a str, &'a Delivery)>, threshold: f64) -> FairnessSummary {
    let mut owed = 0.0;
    let mut credited = 0.0;
    let mut n = 0;
    let mut ok = 0;
    let mut worst: Option<(String, f64)> = None;
    for (name, d) in teams {
        owed += d.owed_gpu_hours;
        credited += d.credited_gpu_hours;
        if let Some(r) = d.ratio() {
            n += 1;
            if r >= threshold {
                ok += 1;
            }
            if worst.as_ref().is_none_or(|(wn, w)| r < *w || (r == *w && name < wn.as_str())) {
                worst = Some((name.to_string(), r));
            }
        }
    }
    FairnessSummary {
        overall: if owed > 0.0 { credited / owed } else { 1.0 },
        teams: n,
        teams_at_threshold: ok,
        threshold,
        worst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owed_is_capped_by_what_was_asked() {
        let mut d = Delivery::default();
        // Rate 4 GPUs; asked 2 GPU-hours; ran 2: fully delivered.
        d.add_hour(4.0, 2.0, 2.0);
        // Asked 10, owed 4, ran 3.
        d.add_hour(4.0, 10.0, 3.0);
        // Asked 10, owed 4, ran 8: credited 4 only.
        d.add_hour(4.0, 10.0, 8.0);
        assert_eq!(d.owed_gpu_hours, 10.0);
        assert_eq!(d.delivered_gpu_hours, 13.0);
        assert_eq!(d.credited_gpu_hours, 9.0);
        assert_eq!(d.ratio(), Some(0.9));
    }

    #[test]
    fn idle_team_is_owed_nothing() {
        let mut d = Delivery::default();
        d.add_hour(8.0, 0.0, 0.0);
        assert_eq!(d.ratio(), None);
    }

    #[test]
    fn summary_counts_teams_and_worst() {
        let mut a = Delivery::default();
        a.add_hour(1.0, 1.0, 1.0);
        let mut b = Delivery::default();
        b.add_hour(2.0, 2.0, 1.0);
        let idle = Delivery::default();
        let s = summarize([("a", &a), ("b", &b), ("idle", &idle)], 0.95);
        assert_eq!(s.teams, 2);
        assert_eq!(s.teams_at_threshold, 1);
        assert_eq!(s.worst, Some(("b".to_string(), 0.5)));
        assert!((s.overall - 2.0 / 3.0).abs() < 1e-12);
    }
}
