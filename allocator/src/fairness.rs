//! Owed and delivered: the headline fairness figure, credited hour by hour,
//! and the same scored over the whole window.
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
//! This hourly figure is the strict one, the one the targets are set on.
//!
//! Per team, over the whole window (its weekly promise):
//! ```text
//! window credited = min(Σ delivered, Σ owed)
//! window ratio    = min(Σ delivered, Σ owed) / Σ owed        (≤ 1)
//! overall         = Σ_t min(D_t, O_t) / Σ_t O_t              (teams t)
//! ```
//! Here an over-served hour makes up a starved one of the same team, never
//! another team's: window ratio ≥ ratio, equal for a team never delivered
//! more than it was owed in any hour.
//! Ai2 reported 98% overall, 13 of 15 teams ≥ 95%, the worst at 90%, over a
//! 30-day test: a sum over the test period, closest to the window figure.

use crate::ledger::Ledger;
use crate::HOUR;
use std::collections::BTreeMap;
use std::sync::Arc;

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

    /// Credited ÷ owed, hour by hour; `None` when nothing was owed.
    pub fn ratio(&self) -> Option<f64> {
        (self.owed_gpu_hours > 0.0).then(|| self.credited_gpu_hours / self.owed_gpu_hours)
    }

    /// `min(Σ delivered, Σ owed)`: what the whole window credits, an
    /// over-served hour making up a starved one (≥ `credited_gpu_hours`).
    pub fn window_credited_gpu_hours(&self) -> f64 {
        self.delivered_gpu_hours.min(self.owed_gpu_hours).max(0.0)
    }

    /// `min(Σ delivered, Σ owed) ÷ Σ owed`, over the whole window: ≤ 1, ≥
    /// [`Delivery::ratio`]; `None` when nothing was owed.
    pub fn window_ratio(&self) -> Option<f64> {
        (self.owed_gpu_hours > 0.0).then(|| self.window_credited_gpu_hours() / self.owed_gpu_hours)
    }
}

/// Cluster-wide summary, of the hourly figure ([`summarize`]) or of the
/// window figure ([`summarize_window`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessSummary {
    /// Σ credited ÷ Σ owed over all teams (1 when nothing was owed); the
    /// window summary: Σ_t min(D_t, O_t) ÷ Σ_t O_t.
    pub overall: f64,
    /// Teams that were owed anything.
    pub teams: usize,
    /// Teams whose ratio ≥ `threshold`.
    pub teams_at_threshold: usize,
    pub threshold: f64,
    /// The team with the lowest ratio.
    pub worst: Option<(String, f64)>,
}

/// The hourly figure: Σ credited ÷ Σ owed, per team ([`Delivery::ratio`])
/// and over all teams.
pub fn summarize<'a>(teams: impl IntoIterator<Item = (&'a str, &'a Delivery)>, threshold: f64) -> FairnessSummary {
    summary(teams, threshold, |d| d.credited_gpu_hours)
}

/// The window figure: Σ_t min(D_t, O_t) ÷ Σ_t O_t over all teams, per team
/// min(Σ delivered, Σ owed) ÷ Σ owed ([`Delivery::window_ratio`]).
pub fn summarize_window<'a>(teams: impl IntoIterator<Item = (&'a str, &'a Delivery)>, threshold: f64) -> FairnessSummary {
    summary(teams, threshold, Delivery::window_credited_gpu_hours)
}

fn summary<'a>(teams: impl IntoIterator<Item = (&'a str, &'a Delivery)>, threshold: f64, credit: impl Fn(&Delivery) -> f64) -> FairnessSummary {
    let mut owed = 0.0;
    let mut credited = 0.0;
    let mut n = 0;
    let mut ok = 0;
    let mut worst: Option<(String, f64)> = None;
    for (name, d) in teams {
        owed += d.owed_gpu_hours;
        credited += credit(d);
        if d.owed_gpu_hours > 0.0 {
            let r = credit(d) / d.owed_gpu_hours;
            n += 1;
            if r >= threshold {
                ok += 1;
            }
            if worst.as_ref().is_none_or(|(wn, w)| r < *w || (r == *w && name < wn.as_str())) {
                worst = Some((name.to_string(), r));
            }
        }
    }
    FairnessSummary { overall: if owed > 0.0 { credited / owed } else { 1.0 }, teams: n, teams_at_threshold: ok, threshold, worst }
}

/// What one account was entitled to and asked for in one bucket, as the
/// priority plugin measured it live: the owed half of owed and delivered
/// on a real cluster (the delivered half is the ledger's use).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Asked {
    /// Its own part's allocation rate over the time measured, GPU-seconds.
    pub entitled_gs: f64,
    /// GPUs of its allocated jobs running or waiting (eligible) over the
    /// time measured, GPU-seconds.
    pub asked_gs: f64,
    /// GPUs of its unallocated jobs (contract 0) running, GPU-seconds:
    /// never charged, never owed, shown.
    pub unallocated_gs: f64,
}

impl Asked {
    fn add(&mut self, o: &Asked) {
        self.entitled_gs += o.entitled_gs;
        self.asked_gs += o.asked_gs;
        self.unallocated_gs += o.unallocated_gs;
    }
}

/// One account's state over a stretch of time: its rate and demand now
/// ([`crate::TeamNow`]) and its unallocated GPUs running.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Held {
    pub rate_gpus: f64,
    pub demand_gpus: f64,
    pub unallocated_gpus: f64,
}

/// [`Asked`] per bucket per account over the ledger's window: what the
/// priority plugin saw, tick by tick, so owed and delivered are measured on
/// the cluster itself with the same rule as the simulator's
/// ([`Delivery::add_hour`], per bucket).
#[derive(Debug, Clone, PartialEq)]
pub struct OwedBook {
    bucket_s: u64,
    window_s: u64,
    buckets: BTreeMap<u64, BTreeMap<Arc<str>, Asked>>,
}

/// An account's owed and delivered over the window (or one day of it).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Owed {
    pub delivery: Delivery,
    pub unallocated_gpu_hours: f64,
}

impl Owed {
    pub fn add(&mut self, o: &Owed) {
        self.delivery.owed_gpu_hours += o.delivery.owed_gpu_hours;
        self.delivery.delivered_gpu_hours += o.delivery.delivered_gpu_hours;
        self.delivery.credited_gpu_hours += o.delivery.credited_gpu_hours;
        self.unallocated_gpu_hours += o.unallocated_gpu_hours;
    }
}

impl OwedBook {
    /// An empty book in a ledger's geometry (`bucket_s` divides `window_s`,
    /// as [`Ledger::new`] checks).
    pub fn new(bucket_s: u64, window_s: u64) -> OwedBook {
        OwedBook { bucket_s: bucket_s.max(1), window_s: window_s.max(1), buckets: BTreeMap::new() }
    }

    pub fn bucket_s(&self) -> u64 {
        self.bucket_s
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Record that `account` was in state `held` over `[from, to)`, split
    /// across the buckets the stretch overlaps.
    pub fn record(&mut self, account: &Arc<str>, held: Held, from: u64, to: u64) {
        let mut t = from;
        while t < to {
            let b = t / self.bucket_s;
            let end = b.saturating_add(1).saturating_mul(self.bucket_s).min(to).max(t + 1);
            let dt = (end - t) as f64;
            let add = Asked {
                entitled_gs: held.rate_gpus.max(0.0) * dt,
                asked_gs: held.demand_gpus.max(0.0) * dt,
                unallocated_gs: held.unallocated_gpus.max(0.0) * dt,
            };
            if add != Asked::default() {
                self.add(b, account, add);
            }
            t = end;
        }
    }

    /// Add to one bucket directly (loading saved state, re-bucketing).
    pub fn add(&mut self, bucket: u64, account: &Arc<str>, asked: Asked) {
        let m = self.buckets.entry(bucket).or_default();
        match m.get_mut(account) {
            Some(a) => a.add(&asked),
            None => {
                m.insert(account.clone(), asked);
            }
        }
    }

    /// Drop buckets that have left the window at `now` (the ledger's rule),
    /// and, in buckets that are over, the entries of accounts that asked
    /// for nothing and ran nothing unallocated: their owed is min(entitled,
    /// 0) = 0 whatever they were entitled to, so they change no figure
    /// (the current bucket keeps them: its account may still ask).
    pub fn prune(&mut self, now: u64) {
        let first = self.first_bucket(now);
        self.buckets = self.buckets.split_off(&first);
        let current = now / self.bucket_s;
        for (_, m) in self.buckets.range_mut(..current) {
            m.retain(|_, a| a.asked_gs > 0.0 || a.unallocated_gs > 0.0);
        }
        self.buckets.retain(|_, m| !m.is_empty());
    }

    /// Keep only the accounts `keep` names (the tree in force): a config
    /// in force for a moment leaves no record of its accounts behind.
    pub fn retain_accounts(&mut self, keep: impl Fn(&str) -> bool) {
        for m in self.buckets.values_mut() {
            m.retain(|a, _| keep(a));
        }
        self.buckets.retain(|_, m| !m.is_empty());
    }

    fn first_bucket(&self, now: u64) -> u64 {
        (now / self.bucket_s).saturating_sub(self.window_s / self.bucket_s - 1)
    }

    /// Every entry, in bucket and account order (the saved form).
    pub fn entries(&self) -> impl Iterator<Item = (u64, &Arc<str>, &Asked)> + '_ {
        self.buckets.iter().flat_map(|(b, m)| m.iter().map(move |(a, x)| (*b, a, x)))
    }

    /// Owed and delivered per account in each bucket of the window at `now`
    /// that `group` maps to the same key (a day, the whole window): per
    /// bucket, owed = min(entitled, asked) and delivered = the account's
    /// allocated use in `ledger` (every user's), credited = min of the two
    /// ([`Delivery::add_hour`]). Accounts with use but no record (before
    /// the plugin measured, a seeded ledger) are delivered, owed nothing.
    pub fn owed_by<K: Ord + Copy>(&self, ledger: &Ledger, now: u64, group: impl Fn(u64) -> K) -> BTreeMap<K, BTreeMap<String, Owed>> {
        let first = self.first_bucket(now);
        let last = now / self.bucket_s;
        let mut per_bucket: BTreeMap<u64, BTreeMap<String, (Asked, f64)>> = BTreeMap::new();
        for (b, m) in self.buckets.range(first..=last) {
            let row = per_bucket.entry(*b).or_default();
            for (a, x) in m {
                row.entry(a.to_string()).or_default().0.add(x);
            }
        }
        for (b, key, gs) in ledger.entries().filter(|(b, _, _)| (first..=last).contains(b)) {
            per_bucket.entry(b).or_default().entry(key.account.to_string()).or_default().1 += gs;
        }
        let mut out: BTreeMap<K, BTreeMap<String, Owed>> = BTreeMap::new();
        for (b, row) in per_bucket {
            let k = group(b * self.bucket_s);
            for (account, (asked, ran_gs)) in row {
                let mut one = Owed::default();
                one.delivery.add_hour(asked.entitled_gs / HOUR, asked.asked_gs / HOUR, ran_gs / HOUR);
                one.unallocated_gpu_hours = asked.unallocated_gs / HOUR;
                // An account that was only entitled (asked and ran nothing)
                // has nothing to show.
                if one != Owed::default() {
                    out.entry(k).or_default().entry(account).or_default().add(&one);
                }
            }
        }
        out
    }

    /// [`OwedBook::owed_by`] over the whole window at `now`.
    pub fn owed(&self, ledger: &Ledger, now: u64) -> BTreeMap<String, Owed> {
        self.owed_by(ledger, now, |_| ()).remove(&()).unwrap_or_default()
    }

    /// The same book in another geometry: each bucket moved to the bucket
    /// holding its start (as the ledger is).
    pub fn rebucket(&self, bucket_s: u64, window_s: u64) -> OwedBook {
        let mut out = OwedBook::new(bucket_s, window_s);
        for (b, a, x) in self.entries() {
            out.add(b * self.bucket_s / out.bucket_s, a, *x);
        }
        out
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

    #[test]
    fn a_starved_hour_made_up_the_next_counts_over_the_window_only() {
        // Rate 4, asking 8 both hours: starved (1 of 4), then over-served
        // (7 against 4 owed).
        let mut d = Delivery::default();
        d.add_hour(4.0, 8.0, 1.0);
        d.add_hour(4.0, 8.0, 7.0);
        assert_eq!((d.owed_gpu_hours, d.delivered_gpu_hours, d.credited_gpu_hours), (8.0, 8.0, 5.0));
        assert_eq!(d.ratio(), Some(5.0 / 8.0));
        assert_eq!(d.window_credited_gpu_hours(), 8.0);
        assert_eq!(d.window_ratio(), Some(1.0));
        assert!(d.ratio() < d.window_ratio());
        // A team never above what it was owed: the same figure both ways.
        let mut e = Delivery::default();
        e.add_hour(4.0, 8.0, 1.0);
        e.add_hour(4.0, 2.0, 2.0);
        e.add_hour(4.0, 8.0, 4.0);
        assert_eq!(e.ratio(), Some(7.0 / 10.0));
        assert_eq!(e.window_ratio(), e.ratio());
        // Nothing owed: no figure either way.
        let mut idle = Delivery::default();
        idle.add_hour(4.0, 0.0, 0.0);
        assert_eq!(idle.window_ratio(), None);
    }

    #[test]
    fn the_window_figure_is_at_most_one_and_at_least_the_hourly() {
        // Hours of every mix of rate, asked and ran, over-served included.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as f64
        };
        for _ in 0..200 {
            let mut d = Delivery::default();
            for _ in 0..24 {
                d.add_hour(next(9), next(17), next(33));
            }
            if let (Some(h), Some(w)) = (d.ratio(), d.window_ratio()) {
                assert!(w <= 1.0 && h <= w, "{d:?}: hourly {h}, window {w}");
            }
        }
    }

    #[test]
    fn the_window_summary_does_not_lend_between_teams() {
        // a: starved then made up (window 1, hourly 0.5); b: over-served
        // all along (both 1); c: starved (both 0.25).
        let mut a = Delivery::default();
        a.add_hour(2.0, 2.0, 0.0);
        a.add_hour(2.0, 4.0, 4.0);
        let mut b = Delivery::default();
        b.add_hour(1.0, 8.0, 8.0);
        let mut c = Delivery::default();
        c.add_hour(4.0, 4.0, 1.0);
        let teams = [("a", &a), ("b", &b), ("c", &c)];
        let hourly = summarize(teams, 0.95);
        let window = summarize_window(teams, 0.95);
        // Hourly: (2 + 1 + 1) / (4 + 1 + 4).
        assert!((hourly.overall - 4.0 / 9.0).abs() < 1e-12);
        assert_eq!((hourly.teams, hourly.teams_at_threshold), (3, 1));
        // Window: (4 + 1 + 1) / 9: b's 7 GPU-hours beyond its own owed do
        // not make up c's shortfall.
        assert!((window.overall - 6.0 / 9.0).abs() < 1e-12);
        assert_eq!((window.teams, window.teams_at_threshold), (3, 2));
        assert_eq!(window.worst, Some(("c".to_string(), 0.25)));
        assert!(window.overall <= 1.0 && window.overall >= hourly.overall);
    }

    #[test]
    fn the_book_owes_per_bucket_and_credits_from_the_ledger() {
        use crate::ledger::UsageKey;
        let h = crate::HOUR_S;
        let mut book = OwedBook::new(h, crate::WEEK_S);
        let team: Arc<str> = "t".into();
        // Rate 4 GPUs, demand 8 GPUs for 1.5 h from the start of bucket 10:
        // bucket 10 owes 4 GPU-h (asked 8), bucket 11 owes 2 (half an hour).
        let held = Held { rate_gpus: 4.0, demand_gpus: 8.0, unallocated_gpus: 2.0 };
        book.record(&team, held, 10 * h, 10 * h + h + h / 2);
        let mut ledger = Ledger::new(h, crate::WEEK_S).unwrap();
        // It ran 8 GPUs for the first hour (credited 4: owed caps it), and
        // 1 GPU for the half hour (credited 0.5 of 2).
        ledger.charge(&UsageKey::new("t", "u"), 8, 10 * h, 11 * h);
        ledger.charge(&UsageKey::new("t", "v"), 1, 11 * h, 11 * h + h / 2);
        // An account that ran before anything was recorded for it.
        ledger.charge(&UsageKey::new("old", "u"), 1, 9 * h, 10 * h);
        let now = 12 * h;
        let owed = book.owed(&ledger, now);
        let t = owed["t"];
        assert_eq!(t.delivery.owed_gpu_hours, 6.0);
        assert_eq!(t.delivery.delivered_gpu_hours, 8.5);
        assert_eq!(t.delivery.credited_gpu_hours, 4.5);
        assert_eq!(t.delivery.ratio(), Some(0.75));
        assert_eq!(t.unallocated_gpu_hours, 3.0);
        assert_eq!(owed["old"].delivery.ratio(), None);
        assert_eq!(owed["old"].delivery.delivered_gpu_hours, 1.0);
        // By bucket: the same totals, split.
        let by = book.owed_by(&ledger, now, |t0| t0 / h);
        assert_eq!(by[&10]["t"].delivery.owed_gpu_hours, 4.0);
        assert_eq!(by[&11]["t"].delivery.credited_gpu_hours, 0.5);
        // An idle account's entitlement in a bucket that is over changes
        // nothing and is dropped; in the current bucket it stays.
        let idle: Arc<str> = "idle".into();
        book.record(&idle, Held { rate_gpus: 4.0, demand_gpus: 0.0, unallocated_gpus: 0.0 }, 10 * h, now + 10);
        let before = book.owed(&ledger, now);
        book.prune(now);
        assert_eq!(book.owed(&ledger, now), before);
        assert_eq!(book.entries().filter(|(_, a, _)| &***a == "idle").map(|(b, _, _)| b).collect::<Vec<_>>(), vec![12]);
        // The window moves on: bucket 10 leaves with the ledger's.
        let later = 10 * h + crate::WEEK_S;
        assert_eq!(book.owed(&ledger, later)["t"].delivery.owed_gpu_hours, 2.0);
        book.prune(later);
        assert_eq!(book.entries().count(), 1);
        // Two buckets merge into one of twice the size.
        let two = book.rebucket(2 * h, crate::WEEK_S);
        assert_eq!(two.entries().map(|(b, _, x)| (b, x.entitled_gs)).collect::<Vec<_>>(), vec![(5, 4.0 * 1800.0)]);
    }
}
