//! When an account is back under its allocation if it runs nothing more:
//! the window's buckets leave it whole, at bucket edges
//! ([`crate::ledger`]), so the answer is exact.
//!
//! ```text
//! used(t)  = Σ GPU-seconds of the account's buckets b with first_bucket(t) ≤ b ≤ ⌊now / bucket_s⌋
//! bucket b leaves the window at (b + n) · bucket_s,   n = window_s / bucket_s
//! back(t)  ⇔ used(t) ≤ allocated GPU-hours · 3600
//! answer   = the first t ≥ now with back(t): `now` itself, or the edge at
//!            which the oldest bucket that has to go leaves
//! ```
//! Nothing is charged after `now` in this outlook (the account's running
//! jobs stop now, nothing else of it starts); it always ends, since the
//! whole window expires.

use crate::ledger::Ledger;
use crate::HOUR;

/// The outlook of one account ([`back_under`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BackUnder {
    /// Its window usage is already at or below its allocation.
    Already,
    /// It is above now, and back at or below at this time (Unix seconds,
    /// a bucket edge).
    At(u64),
}

/// The first time `t ≥ now` at which `account`'s usage in the window is at
/// most `allocated_gpu_hours` if nothing more is charged to it (module
/// docs). Usage of the account's own jobs, as the ranking reads it;
/// buckets after `now`'s are not counted (none exist before `now` reaches
/// them).
pub fn back_under(ledger: &Ledger, account: &str, allocated_gpu_hours: f64, now: u64) -> BackUnder {
    let bucket_s = ledger.bucket_s();
    let n = ledger.window_s() / bucket_s;
    let (first, last) = (ledger.first_bucket(now), now / bucket_s);
    // Per bucket of the window, in order: the account's GPU-seconds.
    let mut buckets: Vec<(u64, u64)> = Vec::new();
    for (b, key, gs) in ledger.whole_entries() {
        if b < first || b > last || &*key.account != account {
            continue;
        }
        match buckets.last_mut() {
            Some((lb, sum)) if *lb == b => *sum = sum.saturating_add(gs),
            _ => buckets.push((b, gs)),
        }
    }
    let allowed = if allocated_gpu_hours.is_finite() { (allocated_gpu_hours * HOUR).max(0.0) } else { 0.0 };
    let mut used: u64 = buckets.iter().map(|&(_, gs)| gs).fold(0, u64::saturating_add);
    if used as f64 <= allowed {
        return BackUnder::Already;
    }
    for (b, gs) in buckets {
        used = used.saturating_sub(gs);
        if used as f64 <= allowed {
            return BackUnder::At((b + n).saturating_mul(bucket_s));
        }
    }
    // Unreachable: with every bucket gone `used` is 0 ≤ `allowed`.
    BackUnder::At((last + n).saturating_mul(bucket_s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::UsageKey;

    use crate::{DAY_S, HOUR_S, WEEK_S};

    /// The same question asked of `Ledger::usage` second by second around
    /// the answer: the definitions agree.
    fn check(l: &Ledger, account: &str, alloc_h: f64, now: u64) -> BackUnder {
        let got = back_under(l, account, alloc_h, now);
        let used_h = |t: u64| l.usage(t).account_gpu_hours(account);
        match got {
            BackUnder::Already => assert!(used_h(now) <= alloc_h, "{} > {alloc_h}", used_h(now)),
            BackUnder::At(t) => {
                assert!(t > now);
                assert_eq!(t % l.bucket_s(), 0, "a bucket edge");
                assert!(used_h(t) <= alloc_h, "at {t}: {}", used_h(t));
                assert!(used_h(t - 1) > alloc_h, "at {}: {}", t - 1, used_h(t - 1));
                assert!(used_h(now) > alloc_h);
            }
        }
        got
    }

    #[test]
    fn back_when_enough_buckets_left() {
        let mut l = Ledger::new(HOUR_S, WEEK_S).unwrap();
        let k = UsageKey::new("nlp", "alice");
        // 8 GPUs for 10 h from hour 0, then 2 GPUs for 5 h from hour 20.
        l.charge(&k, 8, 0, 10 * HOUR_S);
        l.charge(&k, 2, 20 * HOUR_S, 25 * HOUR_S);
        l.charge(&UsageKey::new("cv", "bob"), 8, 0, 30 * HOUR_S);
        let now = 2 * DAY_S + 1234;
        // 90 GPU-hours used; 40 allowed: hours 0..=6 (56 GPU-h) must go,
        // hour 6 leaves at (6 + 168) h.
        assert_eq!(check(&l, "nlp", 40.0, now), BackUnder::At((6 + 168) * HOUR_S));
        // 10 allowed: all of the 8-GPU hours (hour 9 leaves at 177 h).
        assert_eq!(check(&l, "nlp", 10.0, now), BackUnder::At((9 + 168) * HOUR_S));
        // 0 allowed (an unfunded account with usage): the last bucket.
        assert_eq!(check(&l, "nlp", 0.0, now), BackUnder::At((24 + 168) * HOUR_S));
        assert_eq!(check(&l, "nlp", 90.0, now), BackUnder::Already);
        assert_eq!(check(&l, "nobody", 0.0, now), BackUnder::Already);
        // Later, part of the window already left: the answer is the same edge.
        assert_eq!(check(&l, "nlp", 10.0, 170 * HOUR_S + 5), BackUnder::At((9 + 168) * HOUR_S));
    }

    #[test]
    fn random_ledgers_agree_with_usage() {
        let mut seed = 11u64;
        let mut rnd = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..200 {
            let mut l = Ledger::new(HOUR_S, 12 * HOUR_S).unwrap();
            // Nothing is charged after `now` (the outlook's assumption).
            let now = 10 * HOUR_S + rnd(12 * HOUR_S);
            for _ in 0..rnd(6) {
                let from = rnd(now);
                let user = if rnd(2) == 0 { "u" } else { "v" };
                l.charge(&UsageKey::new("a", user), 1 + rnd(8) as u32, from, (from + rnd(6 * HOUR_S)).min(now));
            }
            check(&l, "a", rnd(60) as f64, now);
        }
    }
}
