//! What job_submit/tally checks and rewrites, without Slurm: a submission
//! (or an update) as owned values in, a verdict out.
//!
//! Refused, with a message that says what is wrong and what is allowed:
//! a malformed or over-long contract, a missing one where the config
//! requires it, a contract longer than the job's time limit, an allocated
//! contract in an account outside the tree (when `require_funded_account`),
//! a GPU count that is not a power of two (when `power_of_two_gpus`), and a
//! job that is not resumable with a time limit beyond the contract maximum
//! when `long_jobs = "reject"` (with `"warn"`, the default, it is accepted
//! with a warning sbatch prints: it starts only on its team's fair share or
//! on GPUs no other team asks for, and nothing requeues it once started; a
//! debug job is no long job). Accepted submissions get their
//! comment normalised (`ContractRules::normalise_comment`), the user's other
//! text kept, and, where the config names a debug capacity (`[priority]
//! debug_nodes`), an allocated job that is not a debug job gets those
//! nodes added to its excluded nodes ([`debug_nodes_excluded`]).

use tally_allocator::{parse_comment, ContractError, KnownAccounts, ParsedComment};
use tally_config::Config;

/// A submission or update, as job_submit sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitView {
    pub comment: Option<String>,
    /// The account asked for (`None`: the user's default, unknown here).
    pub account: Option<String>,
    /// Seconds; `None` = not given / unlimited.
    pub time_limit_s: Option<u64>,
    /// GPUs asked for in total: `Ok(None)` = no GPU request seen,
    /// `Err(how)` = not known before placement (e.g. `--gpus-per-socket`).
    pub gpus: Result<Option<u32>, &'static str>,
    /// Whole nodes (`--exclusive`: the request's `shared` is 0).
    pub exclusive: bool,
    /// Nodes asked for (at least 1).
    pub nodes: u32,
}

impl Default for SubmitView {
    fn default() -> Self {
        SubmitView { comment: None, account: None, time_limit_s: None, gpus: Ok(None), exclusive: false, nodes: 1 }
    }
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
    /// `ESLURM_ACCESS_DENIED`: a started job's contract cannot change.
    Started,
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
    /// Nodes to add to the job's excluded nodes: the debug capacity, for
    /// an allocated job that is not a debug job ([`debug_nodes_excluded`]).
    pub exclude_nodes: Option<String>,
}

/// The debug capacity's nodes, comma-separated, if a job of this comment,
/// GPUs and shape may not run there ([`tally_allocator::PriorityRules::may_use_debug_nodes`]:
/// an allocated job that is not a debug job, judged by what it will hold:
/// an exclusive one by its whole nodes, one whose GPUs are not known yet as
/// more than a debug job). `None`: the config names no debug nodes, or the
/// job may run there (unallocated, or a debug job).
pub fn debug_nodes_excluded(config: &Config, comment: Option<&str>, gpus: Option<u32>, exclusive: bool, nodes: u32) -> Option<String> {
    if config.debug_nodes.is_empty() {
        return None;
    }
    let contract = config.contracts.resolve(comment).ok()?;
    let job = as_submitted(config, contract, gpus, exclusive, nodes);
    (!config.priority.may_use_debug_nodes(&job, contract.is_allocated())).then(|| config.debug_nodes.join(","))
}

/// The job a submission will be, as far as its class goes: judged by what
/// it will hold (an exclusive one by its whole nodes, one whose GPUs are not
/// known yet as more than a debug job).
fn as_submitted(config: &Config, contract: tally_allocator::Contract, gpus: Option<u32>, exclusive: bool, nodes: u32) -> tally_allocator::Job {
    let holds = if exclusive { nodes.max(1).saturating_mul(config.cluster.gpus_per_node) } else { gpus.unwrap_or(u32::MAX) };
    tally_allocator::Job::new(0, "", "").contract(contract.min_runtime_s, contract.resumable).gpus(gpus.unwrap_or(0)).holds(holds)
}

fn refused(e: ContractError) -> Rejection {
    reject(Refusal::Contract, e.to_string())
}

/// Check a submission.
pub fn check(config: &Config, funded: &impl KnownAccounts, v: &SubmitView) -> Result<Accepted, Rejection> {
    let comment = v.comment.as_deref().unwrap_or("");
    check_parsed(config, funded, v, &parse_comment(comment).map_err(refused)?)
}

/// [`check`] with the comment read once ([`parse_comment`] of `v.comment`):
/// the contract is resolved from it and the comment normalised from it.
fn check_parsed(config: &Config, funded: &impl KnownAccounts, v: &SubmitView, parsed: &ParsedComment) -> Result<Accepted, Rejection> {
    let rules = &config.contracts;
    let comment = v.comment.as_deref().unwrap_or("");
    let contract = rules.resolve_parsed(parsed).map_err(refused)?;
    rules.check_time_limit(contract, v.time_limit_s).map_err(|e| reject(Refusal::TimeLimit, e.to_string()))?;
    // A debug job is no long job: past its short contract anyone's
    // restoration takes it, checkpoint or not (docs/design.md, rule 9).
    let debug = config.priority.is_debug(&as_submitted(config, contract, v.gpus.ok().flatten(), v.exclusive, v.nodes));
    let verdict = if debug { None } else { rules.long_job(contract, v.time_limit_s) };
    let warning = match verdict {
        Some(tally_allocator::LongJobVerdict::Refuse(e)) => return Err(reject(Refusal::TimeLimit, e.to_string())),
        Some(tally_allocator::LongJobVerdict::Warn(e)) => Some(format!("tally: warning: {e}")),
        None => None,
    };
    let mut warning = warning;
    if contract.is_allocated() {
        if let Some(account) = v.account.as_deref().filter(|a| !a.is_empty() && !funded.knows(a)) {
            // The one definition of a funded account (`KnownAccounts`): what
            // the plugins would run unallocated is refused, or said, here.
            let why = if account == tally_allocator::tree::ROOT {
                format!("account `{account}` is the whole cluster, not a team with a budget")
            } else if config.tree.contains(account) {
                format!("account `{account}` has no budget of its own in {} (only its sub-accounts have)", config.source)
            } else {
                format!("account `{account}` has no budget in {}", config.source)
            };
            let contract = tally_allocator::format_duration(contract.min_runtime_s);
            if config.submit.require_funded_account {
                return Err(reject(
                    Refusal::Account,
                    format!("{why}, so it cannot hold contract={contract}: use a team account, or contract=0 to run unallocated"),
                ));
            }
            let w = format!(
                "tally: warning: {why}: contract={contract} is not honoured, the job runs unallocated (never charged, preemptible at any time)"
            );
            warning = Some(warning.map_or(w.clone(), |earlier| format!("{earlier}\n{w}")));
        }
    }
    if config.submit.power_of_two_gpus {
        if let Err(how) = v.gpus {
            return Err(reject(
                Refusal::Gpus,
                format!("GPUs asked {how}: the total is only known once the job is placed, so it cannot be checked to be a power of two; ask with --gpus, --gpus-per-node or --gres=gpu:N"),
            ));
        }
        if let Some(g) = v.gpus.ok().flatten().filter(|&g| g > 0 && !g.is_power_of_two()) {
            let below = 1u32 << (31 - g.leading_zeros());
            return Err(reject(
                Refusal::Gpus,
                format!(
                    "{g} GPUs is not a power of two: this cluster places GPU jobs in blocks of 1, 2, 4, 8, 16 ...; ask for {below} or {}",
                    below * 2
                ),
            ));
        }
    }
    let normal = rules.normalise_parsed(comment, parsed).map_err(refused)?;
    let exclude_nodes = debug_nodes_excluded(config, Some(comment), v.gpus.ok().flatten(), v.exclusive, v.nodes);
    Ok(Accepted { comment: (normal != comment).then_some(normal), warning, exclude_nodes })
}

/// An update (`scontrol update job …`) of a job as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateView {
    /// What the request sets (`comment: None` = left alone, `Some("")` =
    /// cleared; `gpus: Ok(None)` = left alone).
    pub req: SubmitView,
    /// The request sets a time limit.
    pub new_limit: bool,
    /// The job as it is: its comment, account and time limit.
    pub job: SubmitView,
    /// The job has never run ([`never_ran`]).
    pub pending: bool,
}

/// Has `job` never run? Its contract is fixed once it first runs, nothing
/// else: a pending job's start time may be the backfill's estimate, and a
/// requeued job (Slurm counts its restarts) has run.
pub fn never_ran(job: &crate::view::JobView) -> bool {
    job.state == crate::view::RunState::Pending && job.restarts == 0
}

/// Check an update: a pending job's new comment, time limit or GPUs are
/// judged like a submission; a started job's contract is fixed (its
/// comment may change only where Tally's tokens stay the same).
pub fn check_update(config: &Config, funded: &impl KnownAccounts, u: &UpdateView) -> Result<Accepted, Rejection> {
    let gpus_changed = u.req.gpus != Ok(None);
    let account_changed = u.req.account.as_deref().is_some_and(|a| u.job.account.as_deref() != Some(a));
    if u.req.comment.is_none() && !u.new_limit && !gpus_changed && !account_changed {
        return Ok(Accepted::default());
    }
    // Each comment read once: the job's, and the request's new one.
    let old = parse_comment(u.job.comment.as_deref().unwrap_or(""));
    let new = u.req.comment.as_deref().map(parse_comment);
    if let (Some(new), false) = (&new, u.pending) {
        let tally_tokens = |p: &Result<ParsedComment, ContractError>| p.as_ref().ok().map(|p| (p.contract_s, p.resumable));
        if tally_tokens(new) != tally_tokens(&old) {
            return Err(reject(
                Refusal::Started,
                "a job's contract is fixed once it has started: change `contract=` or `resumable` only while the job is pending".to_string(),
            ));
        }
    }
    let view = SubmitView {
        comment: u.req.comment.clone().or_else(|| u.job.comment.clone()),
        account: u.req.account.clone().or_else(|| u.job.account.clone()),
        time_limit_s: if u.new_limit { u.req.time_limit_s } else { u.job.time_limit_s },
        gpus: if gpus_changed { u.req.gpus } else { Ok(None) },
        exclusive: u.job.exclusive,
        nodes: u.job.nodes,
    };
    let parsed = match new {
        Some(new) => new.map_err(refused)?,
        // An old job whose comment predates these rules: only a new comment is judged.
        None => match old.ok().filter(|p| config.contracts.resolve_parsed(p).is_ok()) {
            Some(old) => old,
            None => return Ok(Accepted::default()),
        },
    };
    let mut accepted = check_parsed(config, funded, &view, &parsed)?;
    // The job as it will be: the request's GPUs, else the job's own.
    let gpus = if gpus_changed { u.req.gpus } else { u.job.gpus };
    accepted.exclude_nodes = debug_nodes_excluded(config, view.comment.as_deref(), gpus.ok().flatten(), u.job.exclusive, u.job.nodes);
    if u.req.comment.is_none() {
        accepted.comment = None;
    }
    if !u.pending {
        // Its contract is fixed: what it may lose was said at submission.
        accepted.warning = None;
    }
    Ok(accepted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_allocator::HOUR_S;

    fn config(extra: &str) -> Config {
        Config::parse(&format!("[accounts.nlp]\nshare = 50\n{extra}"), "t.toml").unwrap()
    }

    /// The config's funded accounts, as the plugins see them.
    struct Funds(tally_allocator::OrgTree, tally_allocator::Allocation);
    impl KnownAccounts for Funds {
        fn knows(&self, account: &str) -> bool {
            tally_allocator::Funded::new(&self.0, &self.1).knows(account)
        }
    }
    fn funds(c: &Config) -> Funds {
        Funds(c.tree.clone(), c.allocation(c.ranking_gpus()).unwrap())
    }
    fn check(c: &Config, v: &SubmitView) -> Result<Accepted, Rejection> {
        super::check(c, &funds(c), v)
    }
    fn check_update(c: &Config, u: &UpdateView) -> Result<Accepted, Rejection> {
        super::check_update(c, &funds(c), u)
    }

    fn view(comment: &str) -> SubmitView {
        SubmitView { comment: (!comment.is_empty()).then(|| comment.to_string()), ..SubmitView::default() }
    }

    #[test]
    fn jobs_that_may_not_use_the_debug_capacity_exclude_its_nodes() {
        let c = config("[cluster]\ngpus = 24\ngpus_per_node = 8\n[priority]\ndebug_nodes = \"gpu[07-08]\"\n");
        let ex = |comment: &str, gpus: Option<u32>, exclusive: bool| {
            check(&c, &SubmitView { gpus: Ok(gpus), exclusive, ..view(comment) }).unwrap().exclude_nodes
        };
        let both = Some("gpu07,gpu08".to_string());
        // (comment, GPUs, --exclusive, excluded?)
        assert_eq!(ex("contract=2h", Some(8), false), both, "an ordinary allocated job");
        assert_eq!(ex("contract=10m", Some(2), false), None, "a debug job");
        assert_eq!(ex("contract=10m", Some(2), true), both, "--exclusive: it holds a whole node");
        assert_eq!(ex("contract=10m", None, false), both, "GPUs not known: not a debug job");
        assert_eq!(ex("contract=0", Some(8), false), None, "unallocated work fills the capacity");
        assert_eq!(ex("", Some(8), false), None, "no contract: unallocated by default");
        // Without debug nodes nothing is excluded.
        assert_eq!(check(&config(""), &SubmitView { gpus: Ok(Some(8)), ..view("contract=2h") }).unwrap().exclude_nodes, None);
        // An update that makes a pending debug job ordinary excludes them;
        // one that leaves it a debug job does not.
        let job = SubmitView { gpus: Ok(Some(2)), ..view("contract=10m") };
        let u = |comment: &str| UpdateView { req: view(comment), new_limit: false, job: job.clone(), pending: true };
        assert_eq!(check_update(&c, &u("contract=2h")).unwrap().exclude_nodes, both);
        assert_eq!(check_update(&c, &u("contract=5m")).unwrap().exclude_nodes, None);
    }

    #[test]
    fn refusals_say_what_is_allowed() {
        let c = config("");
        let cases: &[(SubmitView, Refusal, &str)] = &[
            (view("contract=9h"), Refusal::Contract, "tally: contract=9h exceeds the 8h maximum (allowed: 0 to 8h, e.g. contract=2h)"),
            (view("contract=2x"), Refusal::Contract, "tally: contract=2x: unknown unit `x` in `2x` (use d, h, m or s)"),
            (view("contract=-1h"), Refusal::Contract, "tally: contract=-1h: negative duration `-1h` (durations are >= 0)"),
            (
                view("contract="),
                Refusal::Contract,
                "tally: contract= has no value (write e.g. contract=2h, contract=90m, or contract=0 for unallocated)",
            ),
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

    fn update(req: SubmitView, job_comment: &str, pending: bool) -> UpdateView {
        UpdateView { req, new_limit: false, job: view(job_comment), pending }
    }

    #[test]
    fn a_started_job_keeps_its_contract() {
        let c = config("[contracts]\nmissing = \"reject\"\n");
        for new in ["contract=0", "contract=8h", "contract=2h,resumable", "", "just a note"] {
            let r = check_update(&c, &update(view_raw(new), "contract=2h", false)).unwrap_err();
            assert_eq!(r.refusal, Refusal::Started, "{new:?}");
        }
        // Other text may change; Tally's tokens stay.
        assert_eq!(check_update(&c, &update(view_raw("contract=2h lr=1e-4"), "contract=2h", false)), Ok(Accepted::default()));
        // Pending: judged like a submission, an empty comment too.
        assert!(check_update(&c, &update(view_raw("contract=8h"), "contract=2h", true)).is_ok());
        let r = check_update(&c, &update(view_raw(""), "contract=2h", true)).unwrap_err();
        assert_eq!(r.refusal, Refusal::Contract);
        assert!(r.message.contains("no contract given"), "{}", r.message);
    }

    #[test]
    fn a_contract_is_fixed_when_the_job_first_runs_not_when_backfill_plans_it() {
        use crate::view::{JobView, RunState};
        let pending = JobView::pending(7, "u".into());
        assert_eq!(pending.state, RunState::Pending);
        assert!(never_ran(&pending));
        // Backfill wrote its start estimate: still never ran.
        assert!(never_ran(&JobView { start_s: 1_796_000_000, ..pending.clone() }));
        assert!(!never_ran(&JobView { state: RunState::Running, start_s: 1_796_000_000, ..pending.clone() }));
        // Requeued: it ran.
        assert!(!never_ran(&JobView { restarts: 1, ..pending }));
    }

    #[test]
    fn contracts_need_an_account_with_a_budget_of_its_own() {
        let tree = "[accounts.ai]\nshare = 100\n[accounts.nlp]\nparent = \"ai\"\nshare = 100\n";
        let c = Config::parse(tree, "t.toml").unwrap();
        let with = |account: &str, comment: &str| check(&c, &SubmitView { account: Some(account.into()), ..view(comment) });
        // root and an account whose budget is all its sub-accounts': refused.
        let r = with("root", "contract=1h").unwrap_err();
        assert_eq!(r.refusal, Refusal::Account);
        assert!(r.message.starts_with("tally: account `root` is the whole cluster, not a team with a budget"), "{}", r.message);
        let r = with("ai", "contract=1h").unwrap_err();
        assert!(r.message.contains("has no budget of its own in t.toml (only its sub-accounts have)"), "{}", r.message);
        assert!(with("nlp", "contract=1h").is_ok());
        assert!(with("root", "contract=0").is_ok(), "unallocated work needs no budget");
        // Without require_funded_account: accepted, and the user told.
        let c = Config::parse(&format!("{tree}[contracts]\nrequire_funded_account = false\n"), "t.toml").unwrap();
        let a = check(&c, &SubmitView { account: Some("root".into()), ..view("contract=1h") }).unwrap();
        assert!(a.warning.as_deref().unwrap().contains("contract=1h is not honoured, the job runs unallocated"), "{a:?}");
    }

    #[test]
    fn an_update_of_the_account_is_checked_as_a_submission() {
        let c = config("");
        let mut u = update(SubmitView { account: Some("ghost".into()), ..SubmitView::default() }, "contract=1h", true);
        u.job.account = Some("nlp".into());
        let r = check_update(&c, &u).unwrap_err();
        assert_eq!(r.refusal, Refusal::Account, "{r:?}");
        u.req.account = Some("nlp".into());
        assert_eq!(check_update(&c, &u), Ok(Accepted::default()), "the same account: nothing changes");
        // Unallocated jobs go anywhere.
        let u = update(SubmitView { account: Some("ghost".into()), ..SubmitView::default() }, "contract=0", true);
        assert!(check_update(&c, &u).is_ok());
    }

    #[test]
    fn an_update_of_gpus_is_checked() {
        let c = config("[contracts]\npower_of_two_gpus = true\n");
        let r = check_update(&c, &update(SubmitView { gpus: Ok(Some(3)), ..SubmitView::default() }, "contract=1h", true)).unwrap_err();
        assert_eq!(r.refusal, Refusal::Gpus);
        assert!(check_update(&c, &update(SubmitView { gpus: Ok(Some(4)), ..SubmitView::default() }, "contract=1h", true)).is_ok());
    }

    /// A request whose comment is exactly `c` (empty included).
    fn view_raw(c: &str) -> SubmitView {
        SubmitView { comment: Some(c.to_string()), ..SubmitView::default() }
    }

    #[test]
    fn long_jobs_that_cannot_checkpoint_are_warned_or_refused() {
        let day = SubmitView { time_limit_s: Some(86_400), ..view("contract=8h") };
        // Default: accepted, and told where it may start and that nothing
        // requeues it once started.
        let text = "this job is not resumable and has a time limit of 1d, longer than the 8h a contract can protect: it starts only while your \
                    team runs below its share or no other team is owed GPUs, and once started nothing requeues it (it would lose its run). Add \
                    `resumable` to the comment if it checkpoints (it then starts on any free GPUs and yields past its contract without losing \
                    work), or ask for --time of at most 8h";
        let warn = check(&config(""), &day).unwrap();
        assert_eq!(warn, Accepted { warning: Some(format!("tally: warning: {text}")), ..Accepted::default() });
        // No time limit at all: the same warning.
        let warn = check(&config(""), &SubmitView { time_limit_s: None, ..day.clone() }).unwrap();
        assert!(warn.warning.as_deref().unwrap().starts_with("tally: warning: this job is not resumable and has no time limit, "), "{warn:?}");
        // Refused with the same text.
        let r = check(&config("[contracts]\nlong_jobs = \"reject\"\n"), &day).unwrap_err();
        assert_eq!(r.refusal, Refusal::TimeLimit);
        assert!(r.message.contains(text), "{}", r.message);
        // Resumable, or within the maximum: accepted silently.
        let c = config("[contracts]\nlong_jobs = \"reject\"\n");
        assert!(check(&c, &SubmitView { time_limit_s: Some(86_400), ..view("contract=8h,resumable") }).is_ok());
        assert!(check(&c, &SubmitView { time_limit_s: Some(8 * HOUR_S), ..view("contract=8h") }).is_ok());
        // A debug job (1 GPU, contract=10m) with no time limit is no long
        // job: past its contract anyone takes it. Neither refused nor warned;
        // the same job with 8 GPUs is.
        let debug = SubmitView { gpus: Ok(Some(1)), ..view("contract=10m") };
        assert_eq!(check(&c, &debug), Ok(Accepted::default()));
        assert_eq!(check(&config(""), &debug), Ok(Accepted::default()));
        assert!(check(&c, &SubmitView { gpus: Ok(Some(8)), ..view("contract=10m") }).is_err());
    }

    #[test]
    fn missing_contract_policies_and_gpu_blocks() {
        let c = config("[contracts]\nmissing = \"reject\"\n");
        let r = check(&c, &view("")).unwrap_err();
        assert_eq!(r.refusal, Refusal::Contract);
        assert!(r.message.contains("no contract given and this cluster requires one"), "{}", r.message);
        let c = config("[contracts]\nmissing = \"30m\"\npower_of_two_gpus = true\n");
        assert_eq!(comment(&c, &view("sweep 4")), Ok(Some("contract=30m sweep 4".into())));
        let r = check(&c, &SubmitView { gpus: Ok(Some(6)), ..view("contract=1h") }).unwrap_err();
        assert_eq!(r.refusal, Refusal::Gpus);
        assert!(r.message.ends_with("ask for 4 or 8"), "{}", r.message);
        for g in [1, 2, 4, 8, 16, 64] {
            assert!(check(&c, &SubmitView { gpus: Ok(Some(g)), ..view("contract=1h") }).is_ok());
        }
        let r = check(&c, &SubmitView { gpus: Err("--gpus-per-socket"), ..view("contract=1h") }).unwrap_err();
        assert_eq!(r.refusal, Refusal::Gpus);
        assert!(r.message.contains("GPUs asked --gpus-per-socket"), "{}", r.message);
    }
}
