//! An online job-duration predictor.
//!
//! A job is described by its keys ([`JobKey`]: user, account, job name,
//! class, method, model-size bucket). The predictor keeps, for each key at
//! each [`Level`], the last [`PredictRules::window`] durations of jobs that
//! have ended, and predicts a new job's duration as a quantile
//! ([`PredictRules::quantile`], the median by default) of the most specific
//! key with at least [`PredictRules::min_samples`] durations:
//!
//! 1. (user, job name) — a user resubmitting the same script;
//! 2. (user, class, method, model bucket) — only when the job gives a
//!    method or a model size (else it would be level 3 again);
//! 3. (user, class);
//! 4. (account, class);
//! 5. (class);
//! 6. the job's time limit, when it has one;
//! 7. [`PredictRules::default_s`].
//!
//! A prediction is never above the job's time limit (Slurm kills the job
//! there) and never below 1 s. The quantile of the last N durations is
//! robust: one job that crashed after a minute, or one that ran 10× longer,
//! moves a median of 20 by one place.
//!
//! Online means causal: the caller [`Predictor::observe`]s a job when it
//! ends, and a prediction at time t only sees jobs observed by then.
//! [`predict_online`] does that over a list of past jobs, each predicted at
//! its submission from the jobs that ended at or before it.

use crate::time::HOUR_S;
use std::collections::{HashMap, VecDeque};

/// How predictions are made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictRules {
    /// Durations kept per key (the last N).
    pub window: usize,
    /// Quantile of those durations predicted, in [0, 1] (0.5: the median).
    pub quantile: f64,
    /// A key needs at least this many durations to be used.
    pub min_samples: usize,
    /// Prediction for a job with no usable history and no time limit, seconds.
    pub default_s: u64,
}

impl Default for PredictRules {
    fn default() -> Self {
        PredictRules { window: 20, quantile: 0.5, min_samples: 2, default_s: HOUR_S }
    }
}

/// Where a prediction came from, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    UserName,
    UserClassModel,
    UserClass,
    AccountClass,
    Class,
    /// No usable history: the job's time limit.
    Limit,
    /// No usable history and no time limit: [`PredictRules::default_s`].
    Default,
}

impl Level {
    pub const ALL: [Level; 7] =
        [Level::UserName, Level::UserClassModel, Level::UserClass, Level::AccountClass, Level::Class, Level::Limit, Level::Default];

    /// How reports name the level.
    pub fn name(self) -> &'static str {
        match self {
            Level::UserName => "user+name",
            Level::UserClassModel => "user+class+method+model",
            Level::UserClass => "user+class",
            Level::AccountClass => "account+class",
            Level::Class => "class",
            Level::Limit => "time limit",
            Level::Default => "default",
        }
    }

    /// The history levels (those with keys), in fallback order.
    const HISTORY: [Level; 5] = [Level::UserName, Level::UserClassModel, Level::UserClass, Level::AccountClass, Level::Class];
}

/// What the predictor knows of a job before it runs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct JobKey {
    pub user: String,
    pub account: String,
    /// The job name (`sbatch --job-name`), if known.
    pub name: Option<String>,
    /// `class=` of the comment (or the trace's class).
    pub class: Option<String>,
    /// `method=` of the comment.
    pub method: Option<String>,
    /// [`crate::predict::model_bucket`] of `model_params=`.
    pub model_bucket: Option<i32>,
}

impl JobKey {
    /// The job's key at a history level, `None` when the level does not
    /// apply (no name; no method and no model size).
    fn at(&self, level: Level) -> Option<String> {
        // Fields joined by a separator no name contains.
        const S: char = '\u{1f}';
        let class = self.class.as_deref().unwrap_or("-");
        match level {
            Level::UserName => self.name.as_ref().map(|n| format!("{}{S}{n}", self.user)),
            Level::UserClassModel => (self.method.is_some() || self.model_bucket.is_some()).then(|| {
                let bucket = self.model_bucket.map_or_else(|| "-".to_string(), |b| b.to_string());
                format!("{}{S}{class}{S}{}{S}{bucket}", self.user, self.method.as_deref().unwrap_or("-"))
            }),
            Level::UserClass => Some(format!("{}{S}{class}", self.user)),
            Level::AccountClass => Some(format!("{}{S}{class}", self.account)),
            Level::Class => Some(class.to_string()),
            Level::Limit | Level::Default => None,
        }
    }
}

/// One prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// Predicted duration, seconds (≥ 1, ≤ the time limit when there is one).
    pub duration_s: u64,
    pub level: Level,
    /// Durations the quantile was taken over (0 for the limit and the default).
    pub samples: usize,
}

/// The online predictor: durations per key, the last [`PredictRules::window`] each.
#[derive(Debug, Clone, Default)]
pub struct Predictor {
    rules: PredictRules,
    /// (level, key) → the last durations, oldest first.
    history: [HashMap<String, VecDeque<u64>>; 5],
}

impl Predictor {
    pub fn new(rules: PredictRules) -> Predictor {
        Predictor { rules, history: Default::default() }
    }

    pub fn rules(&self) -> &PredictRules {
        &self.rules
    }

    /// A job ended after running `duration_s`: remember it under each of its keys.
    pub fn observe(&mut self, job: &JobKey, duration_s: u64) {
        let window = self.rules.window.max(1);
        for (k, level) in Level::HISTORY.into_iter().enumerate() {
            let Some(key) = job.at(level) else { continue };
            let past = self.history[k].entry(key).or_default();
            if past.len() == window {
                past.pop_front();
            }
            past.push_back(duration_s);
        }
    }

    /// Predict a job's duration from what has been observed so far.
    pub fn predict(&self, job: &JobKey, time_limit_s: Option<u64>) -> Prediction {
        let cap = |d: u64| time_limit_s.map_or(d, |l| d.min(l)).max(1);
        for (k, level) in Level::HISTORY.into_iter().enumerate() {
            let Some(key) = job.at(level) else { continue };
            let Some(past) = self.history[k].get(&key) else { continue };
            if past.len() >= self.rules.min_samples.max(1) {
                let d = quantile(past.iter().copied(), self.rules.quantile);
                return Prediction { duration_s: cap(d), level, samples: past.len() };
            }
        }
        match time_limit_s {
            Some(l) => Prediction { duration_s: l.max(1), level: Level::Limit, samples: 0 },
            None => Prediction { duration_s: self.rules.default_s.max(1), level: Level::Default, samples: 0 },
        }
    }
}

/// The nearest-rank quantile `q` of some values (`q` clamped to [0, 1]; the
/// median of an even count is the lower middle). 0 for no values.
fn quantile(values: impl Iterator<Item = u64>, q: f64) -> u64 {
    let mut v: Vec<u64> = values.collect();
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// A finished job of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastJob {
    pub key: JobKey,
    pub submit_s: u64,
    /// When it ended (its duration becomes known then).
    pub end_s: u64,
    /// How long it ran.
    pub duration_s: u64,
    pub time_limit_s: Option<u64>,
}

/// Predict every job at its submission from the jobs that ended at or
/// before that instant (the online rule), in the order given.
pub fn predict_online(jobs: &[PastJob], rules: PredictRules) -> Vec<Prediction> {
    let mut by_submit: Vec<usize> = (0..jobs.len()).collect();
    by_submit.sort_by_key(|&i| (jobs[i].submit_s, i));
    let mut by_end: Vec<usize> = (0..jobs.len()).collect();
    by_end.sort_by_key(|&i| (jobs[i].end_s, i));
    let mut p = Predictor::new(rules);
    let mut ended = 0;
    let mut out = vec![Prediction { duration_s: 0, level: Level::Default, samples: 0 }; jobs.len()];
    for i in by_submit {
        let now = jobs[i].submit_s;
        while let Some(&e) = by_end.get(ended).filter(|&&e| jobs[e].end_s <= now) {
            p.observe(&jobs[e].key, jobs[e].duration_s);
            ended += 1;
        }
        out[i] = p.predict(&jobs[i].key, jobs[i].time_limit_s);
    }
    out
}

/// Predictions per level, in [`Level::ALL`] order (levels with none included).
pub fn level_counts(predictions: &[Prediction]) -> Vec<(Level, usize)> {
    Level::ALL.iter().map(|&l| (l, predictions.iter().filter(|p| p.level == l).count())).collect()
}

/// What a prediction is scored against: the actual duration and the time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub predicted_s: u64,
    pub actual_s: u64,
    pub time_limit_s: Option<u64>,
}

/// Mean absolute errors, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Mae {
    /// Jobs scored.
    pub n: usize,
    /// Of the prediction, over all of them.
    pub predicted_s: f64,
    /// Jobs with a time limit.
    pub with_limit: usize,
    /// Of the time limit, over the jobs with one.
    pub limit_s: f64,
    /// Of the prediction, over the same jobs (to compare with `limit_s`).
    pub predicted_with_limit_s: f64,
}

/// The mean absolute error of the predictions and of the time limits
/// against the actual durations (0 for no jobs).
pub fn mae(outcomes: &[Outcome]) -> Mae {
    let err = |a: u64, b: u64| a.abs_diff(b) as f64;
    let mean = |sum: f64, n: usize| if n == 0 { 0.0 } else { sum / n as f64 };
    let limited: Vec<(&Outcome, u64)> = outcomes.iter().filter_map(|o| o.time_limit_s.map(|l| (o, l))).collect();
    Mae {
        n: outcomes.len(),
        predicted_s: mean(outcomes.iter().map(|o| err(o.predicted_s, o.actual_s)).sum(), outcomes.len()),
        with_limit: limited.len(),
        limit_s: mean(limited.iter().map(|(o, l)| err(*l, o.actual_s)).sum(), limited.len()),
        predicted_with_limit_s: mean(limited.iter().map(|(o, _)| err(o.predicted_s, o.actual_s)).sum(), limited.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(user: &str, account: &str, name: Option<&str>, class: &str) -> JobKey {
        JobKey { user: user.into(), account: account.into(), name: name.map(Into::into), class: Some(class.into()), ..JobKey::default() }
    }

    fn past(key: JobKey, submit_s: u64, duration_s: u64, limit: Option<u64>) -> PastJob {
        PastJob { key, submit_s, end_s: submit_s + duration_s, duration_s, time_limit_s: limit }
    }

    #[test]
    fn falls_back_from_the_most_specific_key_with_enough_history() {
        let mut p = Predictor::new(PredictRules::default());
        let alice_sft = key("alice", "nlp", Some("sft"), "training");
        assert_eq!(p.predict(&alice_sft, Some(7200)), Prediction { duration_s: 7200, level: Level::Limit, samples: 0 });
        assert_eq!(p.predict(&alice_sft, None), Prediction { duration_s: HOUR_S, level: Level::Default, samples: 0 });
        // Bob's training jobs in the same account: the account level.
        p.observe(&key("bob", "nlp", Some("pre"), "training"), 1000);
        assert_eq!(p.predict(&alice_sft, None).level, Level::Default, "one sample is not enough");
        p.observe(&key("bob", "nlp", Some("pre"), "training"), 3000);
        assert_eq!(p.predict(&alice_sft, None), Prediction { duration_s: 1000, level: Level::AccountClass, samples: 2 });
        // Another account's: only the class level.
        assert_eq!(p.predict(&key("carol", "vision", None, "training"), None).level, Level::Class);
        assert_eq!(p.predict(&key("carol", "vision", None, "debug"), None).level, Level::Default);
        // Alice's own other scripts, then this script.
        p.observe(&key("alice", "nlp", Some("eval"), "training"), 500);
        p.observe(&key("alice", "nlp", Some("eval"), "training"), 600);
        assert_eq!(p.predict(&alice_sft, None), Prediction { duration_s: 500, level: Level::UserClass, samples: 2 });
        p.observe(&alice_sft, 9000);
        p.observe(&alice_sft, 8000);
        p.observe(&alice_sft, 8500);
        assert_eq!(p.predict(&alice_sft, None), Prediction { duration_s: 8500, level: Level::UserName, samples: 3 });
        // Never above the time limit.
        assert_eq!(p.predict(&alice_sft, Some(3600)).duration_s, 3600);
    }

    #[test]
    fn method_and_model_size_make_their_own_level() {
        let mut p = Predictor::new(PredictRules { min_samples: 1, ..PredictRules::default() });
        let with = |method: &str, bucket: i32| JobKey { method: Some(method.into()), model_bucket: Some(bucket), ..key("u", "a", None, "training") };
        p.observe(&with("lora", 19), 600);
        p.observe(&with("full", 21), 36_000);
        assert_eq!(p.predict(&with("lora", 19), None), Prediction { duration_s: 600, level: Level::UserClassModel, samples: 1 });
        assert_eq!(p.predict(&with("full", 21), None).duration_s, 36_000);
        // Neither given: straight to (user, class), the lower middle of 600 and 36000.
        assert_eq!(p.predict(&key("u", "a", None, "training"), None), Prediction { duration_s: 600, level: Level::UserClass, samples: 2 });
    }

    #[test]
    fn the_quantile_is_over_the_last_window_durations() {
        let rules = PredictRules { window: 3, ..PredictRules::default() };
        let mut p = Predictor::new(rules);
        let k = key("u", "a", Some("n"), "training");
        for d in [100, 100, 100, 900, 800, 700] {
            p.observe(&k, d);
        }
        assert_eq!(p.predict(&k, None).duration_s, 800, "median of the last 3 (900, 800, 700)");
        assert_eq!(Predictor::new(PredictRules { quantile: 1.0, ..rules }).predict(&k, None).level, Level::Default, "a new predictor knows nothing");
        let mut high = Predictor::new(PredictRules { quantile: 1.0, ..rules });
        [100, 900, 800].into_iter().for_each(|d| high.observe(&k, d));
        assert_eq!(high.predict(&k, None).duration_s, 900, "the top quantile is the largest");
        assert_eq!(quantile([5, 1, 9, 3].into_iter(), 0.5), 3);
        assert_eq!(quantile([5, 1, 9, 3].into_iter(), 0.9), 9);
        assert_eq!(quantile([5, 1, 9, 3].into_iter(), 0.0), 1);
        assert_eq!(quantile(std::iter::empty(), 0.5), 0);
    }

    #[test]
    fn online_predictions_only_see_jobs_that_ended_before() {
        let k = key("u", "a", Some("n"), "training");
        let jobs = vec![
            past(k.clone(), 0, 100, Some(400)),
            past(k.clone(), 10, 200, Some(400)),
            // Submitted at 150: only the first (ended at 100) has ended.
            past(k.clone(), 150, 300, Some(400)),
            // At 210: two ended (100, 210 — at the instant counts).
            past(k.clone(), 210, 300, Some(400)),
        ];
        let p = predict_online(&jobs, PredictRules { min_samples: 1, ..PredictRules::default() });
        let got: Vec<(u64, Level)> = p.iter().map(|p| (p.duration_s, p.level)).collect();
        assert_eq!(got, vec![(400, Level::Limit), (400, Level::Limit), (100, Level::UserName), (100, Level::UserName)]);
        // The input order is kept whatever the submit order.
        let mut rev = jobs.clone();
        rev.reverse();
        let q = predict_online(&rev, PredictRules { min_samples: 1, ..PredictRules::default() });
        assert_eq!(q.iter().rev().copied().collect::<Vec<_>>(), p);
        let counts = level_counts(&p);
        assert_eq!(counts[0], (Level::UserName, 2));
        assert_eq!(counts[5], (Level::Limit, 2));
        assert_eq!(counts.iter().map(|c| c.1).sum::<usize>(), 4);
    }

    #[test]
    fn mean_absolute_errors() {
        let o = |p, a, l| Outcome { predicted_s: p, actual_s: a, time_limit_s: l };
        let m = mae(&[o(100, 150, Some(400)), o(300, 200, Some(200)), o(50, 60, None)]);
        assert_eq!(m.n, 3);
        assert!((m.predicted_s - 160.0 / 3.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.with_limit, 2);
        assert_eq!(m.limit_s, 125.0);
        assert_eq!(m.predicted_with_limit_s, 75.0);
        assert_eq!(mae(&[]), Mae::default());
    }
}
