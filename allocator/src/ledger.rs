//! The ledger: allocated GPU-seconds per (account, user) over a hard sliding
//! window.
//!
//! Time is cut into buckets of `bucket_s` (default 1 h). Bucket `b` covers
//! `[b × bucket_s, (b + 1) × bucket_s)`. The window at time `now` is the
//! bucket holding `now` and the `window_s / bucket_s − 1` buckets before it:
//!
//! ```text
//! cur        = ⌊now / bucket_s⌋
//! in window  ⇔ cur − n + 1 ≤ b ≤ cur,   n = window_s / bucket_s
//! ```
//! A bucket falls out whole, exactly when `now` crosses a bucket edge; nothing
//! decays smoothly (unlike Slurm's half-life decay). Only allocated work is
//! charged: callers never charge unallocated jobs (see [`crate::job`]).

use crate::HOUR;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use thiserror::Error;

/// Who used the GPUs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsageKey {
    pub account: Arc<str>,
    pub user: Arc<str>,
}

impl UsageKey {
    pub fn new(account: &str, user: &str) -> Self {
        UsageKey { account: account.into(), user: user.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LedgerError {
    #[error("bucket {bucket_s}s must be > 0 and divide the window {window_s}s")]
    BadGeometry { bucket_s: u64, window_s: u64 },
}

/// GPU-seconds charged per bucket per (account, user).
///
/// Amounts are whole GPU-seconds (integers: sums are exact, so two teams with
/// equal usage stay exactly equal). The sums over the current window are
/// cached and moved bucket by bucket, so `usage` after a small step of time
/// costs only the buckets that entered or left.
#[derive(Debug, Clone)]
pub struct Ledger {
    bucket_s: u64,
    window_s: u64,
    buckets: BTreeMap<u64, KeyMap>,
    cache: RefCell<Option<Sums>>,
}

/// Sums over buckets `first..=last`.
#[derive(Debug, Clone, PartialEq)]
struct Sums {
    first: u64,
    last: u64,
    by_user: KeyMap,
}

/// GPU-seconds per key: hashed (charging a running job is one lookup), put
/// in order only where order is shown ([`Ledger::entries`]).
type KeyMap = FxHashMap<UsageKey, u64>;

/// One bucket's entries in key order.
fn sorted(m: &KeyMap) -> Vec<(&UsageKey, u64)> {
    let mut v: Vec<(&UsageKey, u64)> = m.iter().map(|(k, &v)| (k, v)).collect();
    v.sort_unstable_by(|a, b| a.0.cmp(b.0));
    v
}

impl PartialEq for Ledger {
    fn eq(&self, other: &Self) -> bool {
        self.bucket_s == other.bucket_s && self.window_s == other.window_s && self.buckets == other.buckets
    }
}

/// Usage summed over one window, per account.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WindowUsage {
    /// GPU-seconds per account (its own jobs only, not its children's).
    pub by_account: BTreeMap<String, f64>,
}

impl WindowUsage {
    pub fn account_gpu_hours(&self, account: &str) -> f64 {
        self.by_account.get(account).copied().unwrap_or(0.0) / HOUR
    }
}

/// Usage summed over one window, per (account, user): GPU-seconds in key
/// order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UserUsage(pub BTreeMap<UsageKey, f64>);

impl UserUsage {
    pub fn user_gpu_hours(&self, account: &str, user: &str) -> f64 {
        self.0.get(&UsageKey::new(account, user)).copied().unwrap_or(0.0) / HOUR
    }
}

/// Add to an entry, cloning the key only when it is new.
fn bump(map: &mut KeyMap, key: &UsageKey, gs: u64) {
    match map.get_mut(key) {
        Some(v) => *v = v.saturating_add(gs),
        None => {
            map.insert(key.clone(), gs);
        }
    }
}

fn add_to(sums: &mut KeyMap, bucket: &KeyMap) {
    for (k, v) in bucket {
        bump(sums, k, *v);
    }
}

fn take_from(sums: &mut KeyMap, bucket: &KeyMap) {
    for (k, v) in bucket {
        if let Some(x) = sums.get_mut(k) {
            *x = x.saturating_sub(*v);
            if *x == 0 {
                sums.remove(k);
            }
        }
    }
}

impl Ledger {
    pub fn new(bucket_s: u64, window_s: u64) -> Result<Ledger, LedgerError> {
        if bucket_s == 0 || window_s == 0 || window_s % bucket_s != 0 {
            return Err(LedgerError::BadGeometry { bucket_s, window_s });
        }
        Ok(Ledger { bucket_s, window_s, buckets: BTreeMap::new(), cache: RefCell::new(None) })
    }

    pub fn bucket_s(&self) -> u64 {
        self.bucket_s
    }
    pub fn window_s(&self) -> u64 {
        self.window_s
    }

    fn window_buckets(&self) -> u64 {
        self.window_s / self.bucket_s
    }

    /// First bucket index still inside the window at `now`.
    pub fn first_bucket(&self, now: u64) -> u64 {
        (now / self.bucket_s).saturating_sub(self.window_buckets() - 1)
    }

    /// Charge `gpus` GPUs used over `[from, to)` (unix seconds), split across
    /// the buckets the interval overlaps. Empty intervals charge nothing.
    pub fn charge(&mut self, key: &UsageKey, gpus: u32, from: u64, to: u64) {
        if to <= from || gpus == 0 {
            return;
        }
        let mut t = from;
        while t < to {
            let b = t / self.bucket_s;
            let edge = b.saturating_add(1).saturating_mul(self.bucket_s);
            let end = edge.min(to).max(t + 1);
            self.add_whole(b, key, u64::from(gpus).saturating_mul(end - t));
            t = end;
        }
    }

    /// Charge `units` whole budget-unit-seconds spent evenly over `[from,
    /// to)`, split across the buckets the interval overlaps in proportion
    /// to the seconds in each (rounded cumulatively, so the pieces add up
    /// to `units`). For weighted GPUs ([`crate::gpu_types`]); `charge` is
    /// the same for `units = gpus × (to − from)`.
    pub fn charge_units(&mut self, key: &UsageKey, units: u64, from: u64, to: u64) {
        if to <= from || units == 0 {
            return;
        }
        let len = u128::from(to - from);
        let mut t = from;
        let mut done = 0u64;
        while t < to {
            let b = t / self.bucket_s;
            let edge = b.saturating_add(1).saturating_mul(self.bucket_s);
            let end = edge.min(to).max(t + 1);
            let upto = ((u128::from(units) * u128::from(end - from) + len / 2) / len) as u64;
            self.add_whole(b, key, upto - done);
            done = upto;
            t = end;
        }
    }

    /// Add GPU-seconds to one bucket directly (used when loading saved
    /// state); rounded to whole GPU-seconds, non-positive amounts ignored.
    pub fn add(&mut self, bucket: u64, key: &UsageKey, gpu_seconds: f64) {
        if gpu_seconds.is_finite() && gpu_seconds >= 0.5 {
            self.add_whole(bucket, key, gpu_seconds.round() as u64);
        }
    }

    /// Add whole GPU-seconds to one bucket (saturating).
    pub fn add_whole(&mut self, bucket: u64, key: &UsageKey, gs: u64) {
        if gs == 0 {
            return;
        }
        bump(self.buckets.entry(bucket).or_default(), key, gs);
        if let Some(c) = self.cache.get_mut() {
            if (c.first..=c.last).contains(&bucket) {
                bump(&mut c.by_user, key, gs);
            }
        }
    }

    /// Drop buckets that have left the window at `now`.
    pub fn prune(&mut self, now: u64) {
        let first = self.first_bucket(now);
        let kept = self.buckets.split_off(&first);
        let gone = std::mem::replace(&mut self.buckets, kept);
        if let Some(c) = self.cache.get_mut() {
            for (_, bucket) in gone.range(c.first..=c.last) {
                take_from(&mut c.by_user, bucket);
            }
            c.first = c.first.max(first);
            if c.first > c.last {
                *self.cache.get_mut() = None;
            }
        }
    }

    /// The cached sums over the window at `now`, moved there bucket by
    /// bucket (or summed afresh after a jump back or a long gap), passed to `f`.
    fn with_sums<R>(&self, now: u64, f: impl FnOnce(&KeyMap) -> R) -> R {
        let first = self.first_bucket(now);
        let last = now / self.bucket_s;
        let mut cache = self.cache.borrow_mut();
        let fresh = match cache.take() {
            Some(mut c) if first >= c.first && last >= c.last && first <= c.last + 1 => {
                for (_, bucket) in self.buckets.range(c.first..first.min(c.last + 1)) {
                    take_from(&mut c.by_user, bucket);
                }
                let from = (c.last + 1).max(first);
                if from <= last {
                    for (_, bucket) in self.buckets.range(from..=last) {
                        add_to(&mut c.by_user, bucket);
                    }
                }
                c.first = first;
                c.last = last;
                c
            }
            _ => {
                let mut by_user = KeyMap::default();
                for (_, bucket) in self.buckets.range(first..=last) {
                    add_to(&mut by_user, bucket);
                }
                Sums { first, last, by_user }
            }
        };
        let r = f(&fresh.by_user);
        *cache = Some(fresh);
        r
    }

    /// Each account's own usage summed over the window at `now` (what the
    /// ranking reads each tick: whole GPU-seconds summed exactly, in any
    /// order, so no per-user sort).
    pub fn usage(&self, now: u64) -> WindowUsage {
        let mut usage = WindowUsage::default();
        self.usage_into(now, &mut usage);
        usage
    }

    /// [`Ledger::usage`] into `usage`, keeping the names it holds (what a
    /// recalculation does every period without allocating them anew).
    pub fn usage_into(&self, now: u64, usage: &mut WindowUsage) {
        self.with_sums(now, |sums| {
            let mut by_account: FxHashMap<&str, u64> = FxHashMap::default();
            for (key, &gs) in sums {
                let e = by_account.entry(&*key.account).or_insert(0);
                *e = e.saturating_add(gs);
            }
            usage.by_account.retain(|a, _| by_account.contains_key(a.as_str()));
            for (a, gs) in by_account {
                match usage.by_account.get_mut(a) {
                    Some(v) => *v = gs as f64,
                    None => {
                        usage.by_account.insert(a.to_string(), gs as f64);
                    }
                }
            }
        })
    }

    /// GPU-seconds per (account, user) over the window at `now`, in key
    /// order (for reports).
    pub fn user_usage(&self, now: u64) -> UserUsage {
        self.with_sums(now, |sums| UserUsage(sorted(sums).into_iter().map(|(k, gs)| (k.clone(), gs as f64)).collect()))
    }

    /// Every stored entry: (bucket index, key, GPU-seconds), in order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &UsageKey, f64)> + '_ {
        self.buckets.iter().flat_map(|(b, m)| sorted(m).into_iter().map(move |(k, v)| (*b, k, v as f64)))
    }

    /// [`Ledger::entries`] in whole GPU-seconds, exact (the saved form).
    pub fn whole_entries(&self) -> impl Iterator<Item = (u64, &UsageKey, u64)> + '_ {
        self.buckets.iter().flat_map(|(b, m)| sorted(m).into_iter().map(move |(k, v)| (*b, k, v)))
    }

    /// GPU-seconds per (account, user) in one bucket (for hourly reports).
    pub fn bucket(&self, bucket: u64) -> impl Iterator<Item = (&UsageKey, f64)> + '_ {
        self.buckets.get(&bucket).into_iter().flat_map(|m| sorted(m).into_iter().map(|(k, v)| (k, v as f64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::{DAY_S, HOUR_S, WEEK_S};

    fn ledger() -> Ledger {
        Ledger::new(HOUR_S, WEEK_S).unwrap()
    }

    #[test]
    fn charge_splits_at_bucket_edges() {
        let mut l = ledger();
        let k = UsageKey::new("nlp", "alice");
        // 2 GPUs from 00:30 to 02:15.
        l.charge(&k, 2, HOUR_S / 2, 2 * HOUR_S + HOUR_S / 4);
        let e: Vec<_> = l.entries().map(|(b, _, v)| (b, v)).collect();
        assert_eq!(e, vec![(0, 2.0 * 1800.0), (1, 2.0 * HOUR), (2, 2.0 * 900.0)]);
        assert_eq!(l.usage(3 * HOUR_S).account_gpu_hours("nlp"), 3.5);
    }

    #[test]
    fn window_rolls_over_exactly_at_bucket_edges() {
        let mut l = ledger();
        let k = UsageKey::new("nlp", "alice");
        l.charge(&k, 1, 0, HOUR_S); // bucket 0
        l.charge(&k, 1, HOUR_S, 2 * HOUR_S); // bucket 1
        let n = 7 * 24;
        // The last second at which bucket 0 is still inside.
        assert_eq!(l.usage(n * HOUR_S - 1).account_gpu_hours("nlp"), 2.0);
        // Exactly at the edge it is gone, bucket 1 stays.
        assert_eq!(l.usage(n * HOUR_S).account_gpu_hours("nlp"), 1.0);
        assert_eq!(l.usage((n + 1) * HOUR_S - 1).account_gpu_hours("nlp"), 1.0);
        assert_eq!(l.usage((n + 1) * HOUR_S).account_gpu_hours("nlp"), 0.0);
    }

    #[test]
    fn idle_for_eight_days_is_back_to_zero() {
        let mut l = ledger();
        let k = UsageKey::new("cv", "bob");
        l.charge(&k, 8, 0, 3 * DAY_S);
        assert!(l.usage(3 * DAY_S).account_gpu_hours("cv") > 0.0);
        let later = 3 * DAY_S + 8 * DAY_S;
        assert_eq!(l.usage(later).account_gpu_hours("cv"), 0.0);
        l.prune(later);
        assert_eq!(l.entries().count(), 0);
    }

    #[test]
    fn prune_keeps_what_is_in_window() {
        let mut l = Ledger::new(HOUR_S, 2 * HOUR_S).unwrap();
        let k = UsageKey::new("a", "u");
        l.charge(&k, 1, 0, 3 * HOUR_S);
        l.prune(3 * HOUR_S - 1); // window = buckets 1..=2
        assert_eq!(l.entries().map(|(b, _, _)| b).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn users_and_accounts_are_summed() {
        let mut l = ledger();
        l.charge(&UsageKey::new("a", "u1"), 1, 0, HOUR_S);
        l.charge(&UsageKey::new("a", "u2"), 2, 0, HOUR_S);
        l.charge(&UsageKey::new("b", "u1"), 4, 0, HOUR_S);
        let u = l.usage(HOUR_S);
        assert_eq!(u.account_gpu_hours("a"), 3.0);
        assert_eq!(l.user_usage(HOUR_S).user_gpu_hours("a", "u2"), 2.0);
        assert_eq!(u.account_gpu_hours("b"), 4.0);
        assert_eq!(u.account_gpu_hours("zzz"), 0.0);
    }

    #[test]
    fn geometry_is_checked() {
        assert!(Ledger::new(0, 10).is_err());
        assert!(Ledger::new(7, 10).is_err());
        assert!(Ledger::new(HOUR_S, WEEK_S).is_ok());
    }

    #[test]
    fn cached_window_sums_match_a_fresh_sum() {
        // Charges, prunes and queries in every order: the cached sums must
        // equal a sum from scratch (a fresh clone has no cache).
        let mut l = Ledger::new(HOUR_S, 4 * HOUR_S).unwrap();
        let mut seed = 7u64;
        let mut rnd = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let keys = [UsageKey::new("a", "u"), UsageKey::new("b", "v"), UsageKey::new("a", "w")];
        let mut now = 0;
        for _ in 0..2000 {
            now += rnd(3000);
            match rnd(4) {
                0 => l.prune(now),
                1 => {
                    let from = now.saturating_sub(rnd(20_000));
                    l.charge(&keys[rnd(3) as usize], 1 + rnd(8) as u32, from, now);
                }
                _ => {}
            }
            let fresh = Ledger { cache: RefCell::new(None), ..l.clone() };
            assert_eq!(l.usage(now), fresh.usage(now), "at {now}");
            assert_eq!(l.user_usage(now), fresh.user_usage(now), "at {now}");
        }
    }

    #[test]
    fn units_split_like_gpu_seconds() {
        // A whole number of units per second splits exactly as `charge`.
        let (mut a, mut b) = (ledger(), ledger());
        let k = UsageKey::new("nlp", "alice");
        a.charge(&k, 3, HOUR_S / 2, 2 * HOUR_S + HOUR_S / 4);
        b.charge_units(&k, 3 * (2 * HOUR_S + HOUR_S / 4 - HOUR_S / 2), HOUR_S / 2, 2 * HOUR_S + HOUR_S / 4);
        assert_eq!(a, b);
        // 2.2 units a second from 00:30 to 02:00: 3960, 7920 in buckets 0, 1.
        let mut c = ledger();
        c.charge_units(&k, 11_880, HOUR_S / 2, 2 * HOUR_S);
        assert_eq!(c.entries().map(|(b, _, v)| (b, v)).collect::<Vec<_>>(), vec![(0, 3960.0), (1, 7920.0)]);
        // Uneven: the pieces still add up.
        let mut d = ledger();
        d.charge_units(&k, 10, 3599, 3602);
        assert_eq!(d.entries().map(|(_, _, v)| v).sum::<f64>(), 10.0);
        d.charge_units(&k, 0, 0, 10);
        d.charge_units(&k, 5, 10, 10);
        assert_eq!(d.entries().map(|(_, _, v)| v).sum::<f64>(), 10.0);
    }

    #[test]
    fn nothing_for_empty_or_reversed_intervals() {
        let mut l = ledger();
        let k = UsageKey::new("a", "u");
        l.charge(&k, 4, 100, 100);
        l.charge(&k, 4, 200, 100);
        l.charge(&k, 0, 0, 100);
        assert_eq!(l.entries().count(), 0);
    }
}
