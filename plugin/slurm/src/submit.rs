//! What job_submit/tally checks and rewrites, without Slurm: a submission
//! (or an update) as owned values in, a verdict out.
//!
//! Refused, with a message that says what is wrong and what is allowed:
//! a malformed or over-long contract, a missing one where the config
//! requires it, a contract longer than the job's time limit, an allocated
//! contract in an account outside the tree (when `require_funded_account`),
//! a GPU count that is not a power of two (when `power_of_two_gpus`), and a
//! job that is not resumable with a time limit beyond the contract maximum
//! when `long_jobs = "reject"` (with `"warn"` and `max_requeues` > 0 it is
//! accepted with a warning sbatch prints). Accepted submissions get their
//! comment normalised (`ContractRules::normalise_comment`), the user's other
//! text kept.

use tally_config::Config;

/// A submission or update, as job_submit sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitView {
    pub comment: Option<String>,
    /// The account asked for (`None`: the user's default, unknown here).
    pub account: Option<String>,
    /// Seconds; `None` = not given / unlimited.
    pub time_limit_s: Option<u64>,
    /// GPUs asked for in total; `None` = no GPU request seen.
    pub gpus: Option<u32>,
}

/// Which Slurm error a refusal maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `ESLURM_INVALID_TIME_VALUE`: the contract itself.
    Contract,
    /// `ESLURM_INVALID_TIME_LIMIT`: contract longer than the time limit.
    TimeLimit,
    /// `ESLURM_INVALID_ACCOUNT`: allocated contract without a budget.
    Account,
    /// `ESLURM_INVALID_GRES`: not a power of two.
    Gpus,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub refusal: Refusal,
    /// Shown by sbatch as `sbatch: error: …`.
    pub message: String,
}

fn reject(refusal: Refusal, message: String) -> Rejection {
    Rejection { refusal, message: format!("tally: {message}") }
}

/// An accepted submission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// The comment in its one spelling, when it changed.
    pub comment: Option<String>,
    /// A warning for the user (sbatch prints it).
    pub warning: Option<String>,
}

/// Check a submission.
pub fn check(config: &Config, v: &SubmitView) -> Result<Accepted, Rejection> {
    let rules = &config.contracts;
    let comment = v.comment.as_deref().unwrap_or("");
    let contract = rules.resolve(Some(comment)).map_err(|e| reject(Refusal::Contract, e.to_string()))?;
    rules.check_time_limit(contract, v.time_limit_s).map_err(|e| reject(Refusal::TimeLimit, e.to_string()))?;
    let warning = match rules.long_job(contract, v.time_limit_s) {
        Some(tally_allocator::LongJobVerdict::Refuse(e)) => return Err(reject(Refusal::TimeLimit, e.to_string())),
        Some(tally_allocator::LongJobVerdict::Warn(e)) => Some(format!("tally: warning: {e}")),
        None => None,
    };
    if contract.is_allocated() && config.submit.require_funded_account {
        if let Some(account) = v.account.as_deref().filter(|a| !a.is_empty()) {
            if !config.tree.contains(account) {
                return Err(reject(
                    Refusal::Account,
                    format!(
                        "account `{account}` has no budget in {}, so it cannot hold contract={}: use a team account, or contract=0 to run unallocated",
                        config.source,
                        tally_allocator::format_duration(contract.min_runtime_s)
                    ),
                ));
            }
        }
    }
    if config.submit.power_of_two_gpus {
        if let Some(g) = v.gpus.filter(|&g| g > 0 && !g.is_power_of_two()) {
            let below = 1u32 << (31 - g.leading_zeros());
            return Err(reject(
                Refusal::Gpus,
                format!("{g} GPUs is not a power of two: this cluster places GPU jobs in blocks of 1, 2, 4, 8, 16 ...; ask for {below} or {}", below * 2),
            ));
        }
    }
    let normal = rules.normalise_comment(comment).map_err(|e| reject(Refusal::Contract, e.to_string()))?;
    Ok(Accepted { comment: (normal != comment).then_some(normal), warning })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        Config::parse(&format!("[accounts.nlp]\nshare = 50\n{extra}"), "t.toml").unwrap()
    }

    fn view(comment: &str) -> SubmitView {
        SubmitView { comment: (!comment.is_empty()).then(|| comment.to_string()), ..SubmitView::default() }
    }

    #[test]
    fn refusals_say_what_is_allowed() {
        let c = config("");
        let cases: &[(SubmitView, Refusal, &str)] = &[
            (view("contract=9h"), Refusal::Contract, "tally: contract=9h exceeds the 8h maximum (allowed: 0 to 8h, e.g. contract=2h)"),
            (view("contract=2x"), Refusal::Contract, "tally: contract=2x: unknown unit `x` in `2x` (use d, h, m or s)"),
            (view("contract=-1h"), Refusal::Contract, "tally: contract=-1h: negative duration `-1h` (durations are >= 0)"),
            (view("contract="), Refusal::Contract, "tally: contract= has no value (write e.g. contract=2h, contract=90m, or contract=0 for unallocated)"),
            (
                SubmitView { time_limit_s: Some(1800), ..view("contract=1h") },
                Refusal::TimeLimit,
                "tally: contract=1h is longer than the job's time limit of 30m (a job cannot be promised more than it may run)",
            ),
            (
                SubmitView { account: Some("ghost".into()), ..view("contract=1h") },
                Refusal::Account,
                "tally: account `ghost` has no budget in t.toml, so it cannot hold contract=1h: use a team account, or contract=0 to run unallocated",
            ),
        ];
        for (v, refusal, msg) in cases {
            let r = check(&c, v).unwrap_err();
            assert_eq!((r.refusal, r.message.as_str()), (*refusal, *msg), "{v:?}");
        }
    }

    fn comment(c: &Config, v: &SubmitView) -> Result<Option<String>, Rejection> {
        check(c, v).map(|a| a.comment)
    }

    #[test]
    fn accepted_comments_are_normalised() {
        let c = config("");
        assert_eq!(comment(&c, &view("lr=3e-4, Contract=90m")), Ok(Some("contract=1h30m lr=3e-4".into())));
        assert_eq!(comment(&c, &view("contract=2h")), Ok(None));
        assert_eq!(comment(&c, &view("no tally here")), Ok(None));
        assert_eq!(comment(&c, &view("")), Ok(None));
        // Unallocated work needs no budget.
        assert_eq!(comment(&c, &SubmitView { account: Some("ghost".into()), ..view("contract=0") }), Ok(None));
        // Known account, time limit long enough.
        assert_eq!(comment(&c, &SubmitView { account: Some("nlp".into()), time_limit_s: Some(7200), ..view("contract=2h") }), Ok(None));
    }

    #[test]
    fn long_jobs_that_cannot_checkpoint_are_warned_or_refused() {
        let day = SubmitView { time_limit_s: Some(86_400), ..view("contract=8h") };
        // Default: never requeued, nothing to say.
        assert_eq!(check(&config(""), &day), Ok(Accepted::default()));
        let warn = check(&config("[contracts]\nmax_requeues = 1\n"), &day).unwrap();
        assert!(warn.warning.as_deref().unwrap().starts_with("tally: warning: this job is not resumable and has a time limit of 1d"), "{warn:?}");
        let r = check(&config("[contracts]\nlong_jobs = \"reject\"\n"), &day).unwrap_err();
        assert_eq!(r.refusal, Refusal::TimeLimit);
        assert!(r.message.contains("Add `resumable` to the comment if it checkpoints"), "{}", r.message);
        // Resumable, or within the maximum: accepted silently.
        let c = config("[contracts]\nlong_jobs = \"reject\"\n");
        assert!(check(&c, &SubmitView { time_limit_s: Some(86_400), ..view("contract=8h,resumable") }).is_ok());
        assert!(check(&c, &SubmitView { time_limit_s: Some(8 * 3600), ..view("contract=8h") }).is_ok());
    }

    #[test]
    fn missing_contract_policies_and_gpu_blocks() {
        let c = config("[contracts]\nmissing = \"reject\"\n");
        let r = check(&c, &view("")).unwrap_err();
        assert_eq!(r.refusal, Refusal::Contract);
        assert!(r.message.contains("no contract given and this cluster requires one"), "{}", r.message);
        let c = config("[contracts]\nmissing = \"30m\"\npower_of_two_gpus = true\n");
        assert_eq!(comment(&c, &view("sweep 4")), Ok(Some("contract=30m sweep 4".into())));
        let r = check(&c, &SubmitView { gpus: Some(6), ..view("contract=1h") }).unwrap_err();
        assert_eq!(r.refusal, Refusal::Gpus);
        assert!(r.message.ends_with("ask for 4 or 8"), "{}", r.message);
        for g in [1, 2, 4, 8, 16, 64] {
            assert!(check(&c, &SubmitView { gpus: Some(g), ..view("contract=1h") }).is_ok());
        }
    }
}
