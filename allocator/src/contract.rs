//! Contracts: the minimum runtime a job declares in its comment.
//!
//! `sbatch --comment "contract=2h,resumable"` declares that the job needs two
//! hours without preemption and can be requeued after that. A contract > 0
//! makes the job *allocated* (charged, fair-shared, protected for its
//! contract); contract 0 makes it *unallocated* (never charged, preemptible by
//! any allocated job at any time).
//!
//! Comment grammar: the comment is split into tokens at `,`, `;` and
//! whitespace. Two tokens belong to Tally, case-insensitively:
//! `contract=<duration>` (see [`crate::duration`]) and `resumable`. Every other
//! token is the user's and is kept as written. `resumable` only means
//! something next to a contract or a missing-contract default.

use crate::duration::{format_duration, parse_duration, DurationError, HOUR_S};
use thiserror::Error;

/// Eight hours: the longest minimum runtime Ai2's scheduler accepts.
pub const DEFAULT_MAX_CONTRACT_S: u64 = 8 * HOUR_S;

/// A job's declared minimum runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Contract {
    /// Seconds of protected runtime. 0 = unallocated.
    pub min_runtime_s: u64,
    /// May be requeued (and resumed from a checkpoint) once past its contract.
    pub resumable: bool,
}

impl Contract {
    pub const UNALLOCATED: Contract = Contract { min_runtime_s: 0, resumable: false };

    pub fn new(min_runtime_s: u64, resumable: bool) -> Self {
        Contract { min_runtime_s, resumable }
    }

    /// A contract > 0 asks for allocated (charged, protected) time.
    pub fn is_allocated(&self) -> bool {
        self.min_runtime_s > 0
    }

    /// The one spelling reports and the job_submit plugin write back:
    /// `contract=1h30m` or `contract=2h,resumable`.
    pub fn canonical(&self) -> String {
        let mut s = format!("contract={}", format_duration(self.min_runtime_s));
        if self.resumable {
            s.push_str(",resumable");
        }
        s
    }
}

/// Why a contract was refused. The `Display` text is shown to the user by
/// sbatch, so it says what is wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ContractError {
    #[error("contract= has no value (write e.g. contract=2h, contract=90m, or contract=0 for unallocated)")]
    Empty,
    #[error("contract={value}: {source}")]
    BadDuration { value: String, source: DurationError },
    #[error("contract={given} exceeds the {max} maximum (allowed: 0 to {max}, e.g. contract=2h)",
        given = format_duration(*given_s), max = format_duration(*max_s))]
    TooLong { given_s: u64, max_s: u64 },
    #[error("contract given twice (contract={first} and contract={second}); give it once")]
    Duplicate { first: String, second: String },
    #[error("no contract given and this cluster requires one: add --comment \"contract=<duration>\" (0 for unallocated work, at most {max})",
        max = format_duration(*max_s))]
    Missing { max_s: u64 },
    #[error("contract={contract} is longer than the job's time limit of {limit} (a job cannot be promised more than it may run)",
        contract = format_duration(*contract_s), limit = format_duration(*time_limit_s))]
    LongerThanTimeLimit { contract_s: u64, time_limit_s: u64 },
    #[error("{}", long_job_text(*time_limit_s, *max_s))]
    LongNotResumable { time_limit_s: Option<u64>, max_s: u64 },
}

/// The text of [`ContractError::LongNotResumable`], the same at every site:
/// such a job is never requeued once started (preempt.rs), so what it may
/// cost its owner is a later start ([`crate::long_start`]).
fn long_job_text(time_limit_s: Option<u64>, max_s: u64) -> String {
    let limit = time_limit_s.map_or("no time limit".to_string(), |l| format!("a time limit of {}", format_duration(l)));
    format!(
        "this job is not resumable and has {limit}, longer than the {max} a contract can protect: it starts only while your team runs below its \
         share or no other team is owed GPUs, and once started nothing requeues it (it would lose its run). Add `resumable` to the comment if it \
         checkpoints (it then starts on any free GPUs and yields past its contract without losing work), or ask for --time of at most {max}",
        max = format_duration(max_s)
    )
}

/// [`ContractRules::long_job`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LongJobVerdict {
    /// Accept, and tell the user (sbatch prints it).
    Warn(ContractError),
    Refuse(ContractError),
}

/// What job_submit does with a non-resumable allocated job whose time limit
/// is longer than the contract maximum (`contracts.long_jobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LongJobs {
    /// Accept it and tell the user what may happen (the default).
    #[default]
    Warn,
    /// Refuse it with the same message.
    Reject,
}

/// What a job without `contract=` in its comment gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingContract {
    /// Contract 0: never charged, preemptible (the default: nothing is
    /// charged to a team that did not ask for it).
    Unallocated,
    /// This contract (e.g. 1h) is assumed.
    Default(Contract),
    /// Refuse the job at submit (job_submit plugin); the priority plugin
    /// treats such jobs as unallocated.
    Reject,
}

/// The contract rules of one cluster (from `[contracts]` in tally.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractRules {
    /// Longest contract accepted (default 8 h).
    pub max_s: u64,
    /// Contracts shorter than this count as unallocated (default 0: only
    /// `contract=0` is unallocated).
    pub unallocated_below_s: u64,
    pub missing: MissingContract,
    /// Non-resumable jobs longer than `max_s` at submit.
    pub long_jobs: LongJobs,
}

impl Default for ContractRules {
    fn default() -> Self {
        ContractRules { max_s: DEFAULT_MAX_CONTRACT_S, unallocated_below_s: 0, missing: MissingContract::Unallocated, long_jobs: LongJobs::Warn }
    }
}

/// A comment split into Tally's part and the user's text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedComment {
    /// The duration written after `contract=`, in seconds (not yet checked
    /// against the rules).
    pub contract_s: Option<u64>,
    /// `resumable` was present.
    pub resumable: bool,
    /// The rest of the comment, as the user wrote it minus Tally's tokens.
    pub rest: String,
}

fn is_sep(c: char) -> bool {
    c == ',' || c == ';' || c.is_whitespace()
}

/// The tokens of a job comment, as Tally reads every comment: split at
/// commas, semicolons and whitespace (`contract=2h,resumable class=debug`).
/// The one definition of that rule: the planner's comment metadata
/// (`tally_planner::predict::CommentMeta::from_tokens`) is read from these.
pub fn comment_tokens(comment: &str) -> impl Iterator<Item = &str> {
    tokens(comment).into_iter().map(|(_, t)| t)
}

/// Split a comment into tokens with their byte offsets.
fn tokens(comment: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in comment.char_indices() {
        match (is_sep(c), start) {
            (true, Some(s)) => {
                out.push((s, &comment[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, &comment[s..]));
    }
    out
}

/// Parse a job comment. Only syntax is checked here; [`ContractRules::resolve`]
/// applies the maximum and the missing-contract policy.
pub fn parse_comment(comment: &str) -> Result<ParsedComment, ContractError> {
    let mut parsed = ParsedComment::default();
    let mut first_value: Option<&str> = None;
    let mut prev_end: Option<usize> = None; // end of the last kept user token
    for (start, tok) in tokens(comment) {
        let (key, value) = match tok.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (tok, None),
        };
        if key.eq_ignore_ascii_case("contract") && value.is_some() {
            let value = value.unwrap_or_default();
            if let Some(first) = first_value {
                return Err(ContractError::Duplicate { first: crate::text::clip(first), second: crate::text::clip(value) });
            }
            first_value = Some(value);
            if value.is_empty() {
                return Err(ContractError::Empty);
            }
            let secs = parse_duration(value).map_err(|source| ContractError::BadDuration { value: crate::text::clip(value), source })?;
            parsed.contract_s = Some(secs);
        } else if value.is_none() && key.eq_ignore_ascii_case("resumable") {
            parsed.resumable = true;
        } else {
            // The user's text: keep it, with the separator run that preceded
            // it in the original (dropped before the first kept token).
            if let Some(end) = prev_end {
                let gap = &comment[end..start];
                // The gap may span one of our removed tokens: keep only the
                // separators just before this token.
                let sep_start = gap.rfind(|c: char| !is_sep(c)).map(|i| i + gap[i..].chars().next().map(char::len_utf8).unwrap_or(1));
                parsed.rest.push_str(&gap[sep_start.unwrap_or(0)..]);
            }
            parsed.rest.push_str(tok);
            prev_end = Some(start + tok.len());
        }
    }
    Ok(parsed)
}

impl ContractRules {
    /// The contract a job gets from its comment under these rules.
    ///
    /// 1. `contract=` present: must be ≤ `max_s`; below `unallocated_below_s`
    ///    it counts as 0.
    /// 2. absent: the `missing` policy decides (`Reject` → [`ContractError::Missing`]).
    pub fn resolve(&self, comment: Option<&str>) -> Result<Contract, ContractError> {
        let parsed = parse_comment(comment.unwrap_or(""))?;
        self.resolve_parsed(&parsed)
    }

    pub fn resolve_parsed(&self, parsed: &ParsedComment) -> Result<Contract, ContractError> {
        let contract = match parsed.contract_s {
            Some(s) if s > self.max_s => return Err(ContractError::TooLong { given_s: s, max_s: self.max_s }),
            Some(s) => Contract::new(s, parsed.resumable),
            None => match self.missing {
                MissingContract::Unallocated => Contract::new(0, parsed.resumable),
                MissingContract::Default(c) => Contract::new(c.min_runtime_s, c.resumable || parsed.resumable),
                MissingContract::Reject => return Err(ContractError::Missing { max_s: self.max_s }),
            },
        };
        if contract.min_runtime_s < self.unallocated_below_s {
            return Ok(Contract::new(0, contract.resumable));
        }
        Ok(contract)
    }

    /// A contract may not promise more than the job may run. `time_limit_s`
    /// None means no limit.
    pub fn check_time_limit(&self, contract: Contract, time_limit_s: Option<u64>) -> Result<(), ContractError> {
        match time_limit_s {
            Some(limit) if contract.min_runtime_s > limit => {
                Err(ContractError::LongerThanTimeLimit { contract_s: contract.min_runtime_s, time_limit_s: limit })
            }
            _ => Ok(()),
        }
    }

    /// A contract given as a number of seconds (a trace's `contract_s`, a
    /// sacct history) under these rules: above the maximum it is refused as
    /// job_submit would ([`ContractError::TooLong`]); below
    /// `unallocated_below_s` it counts as 0.
    pub fn resolve_seconds(&self, contract_s: u64, resumable: bool) -> Result<Contract, ContractError> {
        let parsed = ParsedComment { contract_s: Some(contract_s), resumable, rest: String::new() };
        self.resolve_parsed(&parsed)
    }

    /// The longest contract these rules accept for a job that wants
    /// `wanted_s` of protection: what a user who knows the maximum writes
    /// (the synthetic traces' users do).
    pub fn longest_accepted(&self, wanted_s: u64) -> u64 {
        wanted_s.min(self.max_s)
    }

    /// A *long* job: allocated, not resumable, and it may run longer than
    /// the contract maximum (its time limit above `max_s`, or none). Its
    /// owner could not ask for a contract covering it (the one definition:
    /// job_submit's warning, and which jobs [`crate::long_start`] may hold
    /// from starting).
    pub fn is_long(&self, contract: Contract, time_limit_s: Option<u64>) -> bool {
        contract.is_allocated() && !contract.resumable && time_limit_s.is_none_or(|l| l > self.max_s)
    }

    /// An allocated job that is not resumable and may run longer than any
    /// contract (its time limit above `max_s`, or none): what job_submit
    /// does with it. `long_jobs = "reject"` refuses it (the site keeps every
    /// job that cannot checkpoint within the contract maximum); `"warn"`
    /// accepts it and tells the user where it may start and that it is
    /// never requeued once started. `None`: not a long job, accept it.
    pub fn long_job(&self, contract: Contract, time_limit_s: Option<u64>) -> Option<LongJobVerdict> {
        if !self.is_long(contract, time_limit_s) {
            return None;
        }
        let e = ContractError::LongNotResumable { time_limit_s, max_s: self.max_s };
        Some(match self.long_jobs {
            LongJobs::Reject => LongJobVerdict::Refuse(e),
            LongJobs::Warn => LongJobVerdict::Warn(e),
        })
    }

    /// The comment in its one spelling: Tally's tokens first, canonically
    /// written, then the user's own text unchanged. A comment without
    /// `contract=` gets the cluster's default contract written in when
    /// `missing` is a default (so reports show what applies); otherwise a
    /// comment without Tally tokens is returned as it was.
    pub fn normalise_comment(&self, comment: &str) -> Result<String, ContractError> {
        self.normalise_parsed(comment, &parse_comment(comment)?)
    }

    /// [`ContractRules::normalise_comment`] of `comment` already parsed
    /// (`parsed` is [`parse_comment`] of it): job_submit reads a comment once.
    pub fn normalise_parsed(&self, comment: &str, parsed: &ParsedComment) -> Result<String, ContractError> {
        let default_applies = parsed.contract_s.is_none() && matches!(self.missing, MissingContract::Default(_));
        if parsed.contract_s.is_none() && !parsed.resumable && !default_applies {
            // Still refuses a missing contract under `Reject`.
            self.resolve_parsed(parsed)?;
            return Ok(comment.to_string());
        }
        let contract = self.resolve_parsed(parsed)?;
        let mut out = contract.canonical();
        if !parsed.rest.is_empty() {
            out.push(' ');
            out.push_str(&parsed.rest);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> ContractRules {
        ContractRules::default()
    }

    #[test]
    fn comment_tokens_split_at_commas_semicolons_and_whitespace() {
        let got: Vec<&str> = comment_tokens(" contract=2h,resumable class=Training;model_params=7b\tmethod=LoRA,, my words ").collect();
        assert_eq!(got, ["contract=2h", "resumable", "class=Training", "model_params=7b", "method=LoRA", "my", "words"]);
        assert_eq!(comment_tokens(" ;, ").count(), 0);
    }

    #[test]
    fn contract_parser_table() {
        // (comment, expected contract seconds, resumable)
        let ok: &[(&str, u64, bool)] = &[
            ("contract=2h", 7200, false),
            ("contract=90m", 5400, false),
            ("contract=1h30m", 5400, false),
            ("contract=0", 0, false),
            ("contract=2h,resumable", 7200, true),
            ("resumable contract=1m", 60, true),
            ("CONTRACT=2H;Resumable", 7200, true),
            ("contract=8h", 8 * HOUR_S, false),
            ("contract=7h59m59s", 8 * HOUR_S - 1, false),
            ("sweep lr=3e-4, contract=45m", 2700, false),
            ("", 0, false),
            ("no contract here", 0, false),
            ("%n%s%x contract=1h %n", 3600, false),
            ("expérience ✓ contract=15m 日本語", 900, false),
        ];
        for (comment, secs, resumable) in ok {
            let c = rules().resolve(Some(comment)).unwrap_or_else(|e| panic!("{comment}: {e}"));
            assert_eq!(c, Contract::new(*secs, *resumable), "{comment}");
        }
        assert_eq!(rules().resolve(None), Ok(Contract::UNALLOCATED));
    }

    #[test]
    fn contract_parser_rejects() {
        type Case = (&'static str, fn(&ContractError) -> bool);
        let cases: &[Case] = &[
            ("contract=8h1m", |e| matches!(e, ContractError::TooLong { given_s: 28_860, max_s: 28_800 })),
            ("contract=9h", |e| matches!(e, ContractError::TooLong { .. })),
            ("contract=", |e| matches!(e, ContractError::Empty)),
            ("contract=-1h", |e| matches!(e, ContractError::BadDuration { source: DurationError::Negative(_), .. })),
            ("contract=2", |e| matches!(e, ContractError::BadDuration { source: DurationError::MissingUnit(_), .. })),
            ("contract=2x", |e| matches!(e, ContractError::BadDuration { source: DurationError::UnknownUnit { .. }, .. })),
            ("contract=%n%s", |e| matches!(e, ContractError::BadDuration { .. })),
            ("contract=２h", |e| matches!(e, ContractError::BadDuration { .. })),
            ("contract=1h contract=2h", |e| matches!(e, ContractError::Duplicate { .. })),
        ];
        for (comment, pred) in cases {
            let err = rules().resolve(Some(comment)).expect_err(comment);
            assert!(pred(&err), "{comment}: {err:?}");
        }
    }

    #[test]
    fn error_messages_say_what_is_allowed() {
        let e = rules().resolve(Some("contract=9h")).unwrap_err();
        assert_eq!(e.to_string(), "contract=9h exceeds the 8h maximum (allowed: 0 to 8h, e.g. contract=2h)");
        // A 1 MB value is quoted cut, not echoed to sbatch and the log.
        let e = rules().resolve(Some(&format!("contract={}", "9".repeat(1 << 20)))).unwrap_err().to_string();
        assert!(e.len() < 400 && e.contains("… (1048576 bytes)"), "{}", e.chars().take(400).collect::<String>());
        let e = rules().resolve(Some("contract=2x")).unwrap_err();
        assert!(e.to_string().contains("use d, h, m or s"), "{e}");
    }

    #[test]
    fn ten_kilobyte_comment() {
        let mut big = "x".repeat(5000);
        big.push_str(" contract=3h ");
        big.push_str(&"é".repeat(2600));
        assert!(big.len() > 10_000);
        assert_eq!(rules().resolve(Some(&big)), Ok(Contract::new(3 * HOUR_S, false)));
        let parsed = parse_comment(&big).unwrap();
        assert_eq!(parsed.rest.len(), 5000 + 1 + 2600 * 2);
    }

    #[test]
    fn missing_contract_policies() {
        let mut r = rules();
        r.missing = MissingContract::Default(Contract::new(3600, false));
        assert_eq!(r.resolve(Some("hello")), Ok(Contract::new(3600, false)));
        assert_eq!(r.resolve(Some("resumable")), Ok(Contract::new(3600, true)));
        r.missing = MissingContract::Reject;
        assert_eq!(r.resolve(None), Err(ContractError::Missing { max_s: 8 * HOUR_S }));
        assert_eq!(r.resolve(Some("contract=0")), Ok(Contract::UNALLOCATED));
    }

    #[test]
    fn short_contracts_can_count_as_unallocated() {
        let r = ContractRules { unallocated_below_s: 300, ..rules() };
        assert_eq!(r.resolve(Some("contract=4m")), Ok(Contract::UNALLOCATED));
        assert_eq!(r.resolve(Some("contract=5m")), Ok(Contract::new(300, false)));
    }

    #[test]
    fn configurable_maximum() {
        let r = ContractRules { max_s: 3600, ..rules() };
        assert!(r.resolve(Some("contract=1h")).is_ok());
        assert_eq!(r.resolve(Some("contract=61m")), Err(ContractError::TooLong { given_s: 3660, max_s: 3600 }));
    }

    #[test]
    fn time_limit_check() {
        let c = Contract::new(7200, false);
        assert!(rules().check_time_limit(c, Some(7200)).is_ok());
        assert!(rules().check_time_limit(c, None).is_ok());
        assert_eq!(rules().check_time_limit(c, Some(3600)), Err(ContractError::LongerThanTimeLimit { contract_s: 7200, time_limit_s: 3600 }));
    }

    #[test]
    fn normalisation_keeps_user_text() {
        let cases: &[(&str, &str)] = &[
            ("contract=90m", "contract=1h30m"),
            ("Resumable, CONTRACT=120m", "contract=2h,resumable"),
            ("lr sweep #3, contract=2h, seed=7", "contract=2h lr sweep #3, seed=7"),
            ("a contract=1h b", "contract=1h a b"),
            ("plain text", "plain text"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(rules().normalise_comment(input).as_deref(), Ok(*want), "{input}");
        }
        // Normalising twice changes nothing.
        for (input, _) in cases {
            let once = rules().normalise_comment(input).unwrap();
            assert_eq!(rules().normalise_comment(&once).unwrap(), once);
        }
        // A default contract is written in; a required one is refused.
        let r = ContractRules { missing: MissingContract::Default(Contract::new(3600, false)), ..rules() };
        assert_eq!(r.normalise_comment("my run").as_deref(), Ok("contract=1h my run"));
        assert_eq!(r.normalise_comment("").as_deref(), Ok("contract=1h"));
        assert_eq!(r.normalise_comment("contract=0").as_deref(), Ok("contract=0"));
        let r = ContractRules { missing: MissingContract::Reject, ..rules() };
        assert!(matches!(r.normalise_comment("my run"), Err(ContractError::Missing { .. })));
    }

    #[test]
    fn long_jobs_that_cannot_checkpoint() {
        let c = Contract::new(3600, false);
        // Default: accepted, and the user is told where it may start and
        // that nothing requeues it once started.
        let Some(LongJobVerdict::Warn(e)) = rules().long_job(c, Some(86_400)) else { panic!("a warning") };
        assert_eq!(
            e.to_string(),
            "this job is not resumable and has a time limit of 1d, longer than the 8h a contract can protect: it starts only while your team runs \
             below its share or no other team is owed GPUs, and once started nothing requeues it (it would lose its run). Add `resumable` to the \
             comment if it checkpoints (it then starts on any free GPUs and yields past its contract without losing work), or ask for --time of at \
             most 8h"
        );
        let Some(LongJobVerdict::Warn(e)) = rules().long_job(c, None) else { panic!("a warning") };
        assert!(e.to_string().starts_with("this job is not resumable and has no time limit, longer than the 8h a contract can protect: "), "{e}");
        let reject = ContractRules { long_jobs: LongJobs::Reject, ..rules() };
        // Refused with the same text.
        assert_eq!(
            reject.long_job(c, Some(86_400)),
            Some(LongJobVerdict::Refuse(ContractError::LongNotResumable { time_limit_s: Some(86_400), max_s: 8 * HOUR_S }))
        );
        assert!(matches!(reject.long_job(c, None), Some(LongJobVerdict::Refuse(_))));
        // Within the maximum, resumable, or unallocated: fine.
        assert_eq!(reject.long_job(c, Some(8 * HOUR_S)), None);
        assert_eq!(reject.long_job(Contract::new(3600, true), None), None);
        assert_eq!(reject.long_job(Contract::UNALLOCATED, None), None);
    }
}
