//! The sections of tally.toml, each validated on its own: [`cluster`]
//! (with `[cluster.gpu_types]`), [`ledger`], [`contracts`], [`priority`]
//! (and the [`dropped_keys`] these two may still hold), [`planner`],
//! [`log`], [`reports`], [`accounts`] and [`users`]. [`crate::Config::from_raw`]
//! calls them in that order; each adds what is wrong to the shared
//! [`Problems`], so a file's problems are said in the order of its
//! sections.

use crate::lines::LineIndex;
use crate::raw::{RawAccount, RawCluster, RawContracts, RawLedger, RawLog, RawPlanner, RawPriority, RawReports};
use crate::{scenario, too_many_gpus, Cluster, ConfigError, Planner, Problem, Reports, SubmitPolicy, DROPPED_KEYS, MAX_CLUSTER_GPUS, MAX_DEBUG_GPUS};
use std::collections::BTreeMap;
use tally_allocator::{
    format_duration, AccountSpec, Budget, Contract, ContractRules, GpuTypeError, GpuWeights, LongJobs, MissingContract, OrgTree, PriorityRules,
    DAY_S, HOUR_S, MINUTE_S,
};
use tally_planner::queue::QueueRules;
use toml::Spanned;

/// Every problem found so far, in the order found.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<Problem>);

impl Problems {
    /// `key` (a dotted path) is wrong, at `line` when known.
    pub(crate) fn bad(&mut self, key: &str, line: Option<usize>, message: impl Into<String>) {
        self.0.push(Problem { key: key.to_string(), line, message: message.into() });
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// Fail with every problem found, if there is one.
    pub(crate) fn finish(self, file: &str) -> Result<(), ConfigError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { file: file.to_string(), problems: self.0 })
        }
    }
}

/// `[cluster]` and `[cluster.gpu_types]`. The cluster's GPUs: `gpus`, or
/// the sum of the types' counts when it is left out ([`gpu_types`]).
pub(crate) fn cluster(raw: Option<RawCluster>, lines: &LineIndex, problems: &mut Problems) -> Cluster {
    let cluster = raw.unwrap_or_default();
    match cluster.gpus {
        Some(0) => problems.bad("cluster.gpus", None, "must be at least 1 (or left out to count the nodes' GPUs)"),
        Some(g) if g > MAX_CLUSTER_GPUS => problems.bad("cluster.gpus", None, too_many_gpus(g)),
        _ => {}
    }
    let gpus_per_node = cluster.gpus_per_node.unwrap_or(8);
    if gpus_per_node == 0 {
        problems.bad("cluster.gpus_per_node", None, "must be at least 1");
    } else if gpus_per_node > MAX_CLUSTER_GPUS {
        problems.bad("cluster.gpus_per_node", None, too_many_gpus(gpus_per_node));
    }
    let (gpu_types, gpus) = gpu_types(&cluster, lines, problems);
    Cluster { name: cluster.name, gpus, gpus_per_node, gpu_types }
}

/// `[cluster.gpu_types]` validated into the allocator's [`GpuWeights`],
/// and the cluster's GPUs (`[cluster] gpus`, or the sum of the types'
/// counts when it is left out and every type has one). Problems name the
/// row's line.
fn gpu_types(cluster: &RawCluster, lines: &LineIndex, problems: &mut Problems) -> (GpuWeights, Option<u32>) {
    let Some(rows) = &cluster.gpu_types else { return (GpuWeights::default(), cluster.gpus) };
    let mut good: Vec<(&str, f64, Option<u32>, usize)> = Vec::new();
    for (name, row) in rows {
        let at = lines.line(row.span().start);
        let line = Some(at);
        let key = format!("cluster.gpu_types.{name}");
        let r = row.get_ref();
        let gpus = match r.gpus {
            None => None,
            Some(n) if (1..=i64::from(MAX_CLUSTER_GPUS)).contains(&n) => Some(n as u32),
            Some(0) => {
                problems.bad(&format!("{key}.gpus"), line, GpuTypeError::NoGpus(name.clone()).to_string());
                continue;
            }
            Some(n) => {
                problems.bad(
                    &format!("{key}.gpus"),
                    line,
                    format!("{n} is not a number of GPUs (1 to {MAX_CLUSTER_GPUS}), or leave it out to count Slurm's nodes"),
                );
                continue;
            }
        };
        // Each row alone first (name, weight), then the table (spellings).
        match GpuWeights::new([(name.as_str(), r.weight, gpus)]) {
            Ok(_) => good.push((name, r.weight, gpus, at)),
            Err(e) => problems.bad(&key, line, e.to_string()),
        }
    }
    let weights = match GpuWeights::new(good.iter().map(|&(n, w, g, _)| (n, w, g))) {
        Ok(w) => w,
        Err(e) => {
            let (key, line) = match &e {
                GpuTypeError::CaseTwin(_, second) => (format!("cluster.gpu_types.{second}"), good.iter().find(|g| g.0 == second).map(|g| g.3)),
                _ => ("cluster.gpu_types".to_string(), None),
            };
            problems.bad(&key, line, e.to_string());
            GpuWeights::default()
        }
    };
    let counted = u64::from(weights.counted_gpus());
    let all_counted = weights.iter().all(|(_, t)| t.gpus.is_some());
    let gpus = match cluster.gpus {
        Some(g) if counted > u64::from(g) => {
            problems.bad(
                "cluster.gpu_types",
                None,
                format!("the types' GPUs add up to {counted}, more than cluster.gpus = {g} (every type's GPUs are part of cluster.gpus)"),
            );
            Some(g)
        }
        Some(g) => Some(g),
        None if all_counted && counted > u64::from(MAX_CLUSTER_GPUS) => {
            problems.bad(
                "cluster.gpu_types",
                None,
                format!("the types' GPUs add up to {counted}: a cluster may have at most {MAX_CLUSTER_GPUS} GPUs (tally_config::MAX_CLUSTER_GPUS)"),
            );
            None
        }
        None if all_counted && counted > 0 => u32::try_from(counted).ok(),
        None => None,
    };
    (weights, gpus)
}

/// `[ledger]`: the window and its buckets, seconds.
pub(crate) struct LedgerGeometry {
    pub window_s: u64,
    pub bucket_s: u64,
}

/// `[ledger]`: a window (default 7 days) of whole buckets (default 1 hour).
pub(crate) fn ledger(raw: Option<RawLedger>, problems: &mut Problems) -> LedgerGeometry {
    let ledger = raw.unwrap_or_default();
    let window_s = ledger.window.map_or(7 * DAY_S, |d| d.0);
    let bucket_s = ledger.bucket.map_or(HOUR_S, |d| d.0);
    if bucket_s == 0 {
        problems.bad("ledger.bucket", None, "must be longer than 0 (e.g. \"1h\")");
    } else if window_s < bucket_s || window_s % bucket_s != 0 {
        problems.bad(
            "ledger.window",
            None,
            format!(
                "{} is not a whole number of buckets of {} (e.g. window = \"7d\", bucket = \"1h\")",
                format_duration(window_s),
                format_duration(bucket_s)
            ),
        );
    }
    LedgerGeometry { window_s, bucket_s }
}

/// `[contracts]`: the contract rules, and what job_submit enforces beyond
/// their syntax.
pub(crate) fn contracts(c: &RawContracts, lines: &LineIndex, problems: &mut Problems) -> (ContractRules, SubmitPolicy) {
    let max_s = c.max.map_or(tally_allocator::contract::DEFAULT_MAX_CONTRACT_S, |d| d.0);
    if max_s == 0 {
        problems.bad("contracts.max", None, "must be longer than 0 (default \"8h\")");
    }
    let unallocated_below_s = c.unallocated_below.as_ref().map_or(0, |d| d.get_ref().0);
    if unallocated_below_s > max_s {
        problems.bad(
            "contracts.unallocated_below",
            c.unallocated_below.as_ref().map(|d| lines.line(d.span().start)),
            format!(
                "{} is longer than contracts.max {}, so every contract would count as unallocated (allowed: 0 to contracts.max)",
                format_duration(unallocated_below_s),
                format_duration(max_s)
            ),
        );
    }
    let missing = missing_contract(c.missing.as_deref(), max_s, problems);
    let long_jobs = match c.long_jobs.as_deref().map(str::trim) {
        None | Some("warn") => LongJobs::Warn,
        Some("reject") => LongJobs::Reject,
        Some(other) => {
            problems.bad(
                "contracts.long_jobs",
                None,
                format!("expected \"warn\" or \"reject\" (what job_submit does with a job that is not resumable and longer than contracts.max), found \"{other}\""),
            );
            LongJobs::Warn
        }
    };
    let rules = ContractRules { max_s, unallocated_below_s, missing, long_jobs };
    let submit =
        SubmitPolicy { require_funded_account: c.require_funded_account.unwrap_or(true), power_of_two_gpus: c.power_of_two_gpus.unwrap_or(false) };
    (rules, submit)
}

/// `[contracts] missing`: what a job without a contract gets, at most
/// `max_s` when it is a default contract.
fn missing_contract(missing: Option<&str>, max_s: u64, problems: &mut Problems) -> MissingContract {
    match missing.map(str::trim) {
        None | Some("unallocated") => MissingContract::Unallocated,
        Some("reject") => MissingContract::Reject,
        Some(other) => match tally_allocator::parse_duration(other) {
            Ok(0) => MissingContract::Unallocated,
            Ok(s) if s <= max_s => MissingContract::Default(Contract::new(s, false)),
            Ok(s) => {
                problems.bad(
                    "contracts.missing",
                    None,
                    format!("default contract {} exceeds contracts.max {}", format_duration(s), format_duration(max_s)),
                );
                MissingContract::Unallocated
            }
            Err(e) => {
                problems.bad("contracts.missing", None, format!("expected \"unallocated\", \"reject\" or a default contract such as \"1h\": {e}"));
                MissingContract::Unallocated
            }
        },
    }
}

/// `[priority]`: the priority rules, and how often the plugin's thread
/// charges usage and re-ranks (`calc_period`, seconds). `max_s`: the
/// contract maximum (`[contracts] max`), which bounds a debug job's.
pub(crate) fn priority(p: &RawPriority, max_s: u64, problems: &mut Problems) -> (PriorityRules, u64) {
    let calc_period_s = p.calc_period.map_or(MINUTE_S, |d| d.0);
    if calc_period_s == 0 {
        problems.bad("priority.calc_period", None, "must be longer than 0 (default \"1m\")");
    }
    let quick_time_limit_s = p.quick_time_limit.map_or(tally_allocator::priority::DEFAULT_QUICK_TIME_LIMIT_S, |d| d.0);
    let debug_lane = p.debug_lane.unwrap_or(true);
    let debug_max_gpus = p.debug_max_gpus.unwrap_or(tally_allocator::priority::DEFAULT_DEBUG_MAX_GPUS);
    if debug_max_gpus > MAX_DEBUG_GPUS {
        problems.bad(
            "priority.debug_max_gpus",
            None,
            format!("{debug_max_gpus} is too many (0 to {MAX_DEBUG_GPUS}, default 2; 0 turns the debug class off): debug jobs are small"),
        );
    }
    // Default: 15 min, or the contract maximum where that is shorter.
    let debug_max_contract_s = p.debug_max_contract.map_or(tally_allocator::priority::DEFAULT_DEBUG_MAX_CONTRACT_S.min(max_s), |d| d.0);
    if debug_max_contract_s == 0 || debug_max_contract_s > max_s {
        problems.bad(
            "priority.debug_max_contract",
            None,
            format!(
                "must be longer than 0 and at most contracts.max ({}; default \"15m\"): the longest contract of a debug job",
                format_duration(max_s)
            ),
        );
    }
    let default_pct = f64::from(tally_allocator::priority::DEFAULT_DEBUG_ALLOWANCE_BP) / 100.0;
    let debug_allowance_bp = match p.debug_allowance {
        None => tally_allocator::priority::DEFAULT_DEBUG_ALLOWANCE_BP,
        Some(pct) if pct.is_finite() && (0.0..=100.0).contains(&pct) => (pct * 100.0).round() as u32,
        Some(pct) => {
            problems.bad(
                "priority.debug_allowance",
                None,
                format!(
                    "{pct} is not a percentage in [0, 100] (default {default_pct}): the GPUs of debug jobs a team may hold at once with the debug \
                     class's favours, as a percent of its rate, never less than two debug jobs of debug_max_gpus"
                ),
            );
            tally_allocator::priority::DEFAULT_DEBUG_ALLOWANCE_BP
        }
    };
    (PriorityRules { quick_time_limit_s, debug_max_gpus, debug_max_contract_s, debug_lane, debug_allowance_bp }, calc_period_s)
}

/// `[priority] debug_nodes`: a Slurm hostlist, expanded (bounded by
/// [`crate::hostlist`]).
pub(crate) fn debug_nodes(p: &RawPriority, problems: &mut Problems) -> Vec<String> {
    match p.debug_nodes.as_deref().map(str::trim) {
        None | Some("") => Vec::new(),
        Some(expr) => crate::hostlist::expand(expr).unwrap_or_else(|e| {
            problems.bad(
                "priority.debug_nodes",
                None,
                format!("{e}; give the debug capacity's nodes as slurm.conf names them, e.g. \"gpu[07-08]\" (at most 4096)"),
            );
            Vec::new()
        }),
    }
}

/// The warnings for keys an earlier Tally accepted ([`DROPPED_KEYS`]) in
/// `[contracts]` and `[priority]`: said and ignored, as Slurm treats its
/// deprecated options, so last month's file still loads. In the file's
/// order (by line).
pub(crate) fn dropped_keys(c: &RawContracts, p: &RawPriority, lines: &LineIndex) -> Vec<Problem> {
    let mut warnings = Vec::new();
    for (key, at) in [
        ("contracts.max_requeues", c.max_requeues.as_ref().map(|v| v.span().start)),
        ("priority.age_unit", p.age_unit.as_ref().map(|v| v.span().start)),
        ("priority.debug_lane_gpus", p.debug_lane_gpus.as_ref().map(|v| v.span().start)),
    ] {
        if let (Some(at), Some((_, instead))) = (at, DROPPED_KEYS.iter().find(|(k, _)| *k == key)) {
            warnings.push(Problem {
                key: key.to_string(),
                line: Some(lines.line(at)),
                message: format!("is no longer used and is ignored: {instead}; remove the key"),
            });
        }
    }
    warnings.sort_by_key(|w| w.line);
    warnings
}

/// `[planner]`: the rolling-horizon planner, when it is enabled and its
/// keys are all valid. `cluster_gpus`: the cluster's size, which the
/// planner needs.
pub(crate) fn planner(raw: Option<RawPlanner>, cluster_gpus: Option<u32>, problems: &mut Problems) -> Option<Planner> {
    let pl = raw?;
    let enabled = pl.enabled.unwrap_or(false);
    let interval_s = pl.interval.map_or(30 * MINUTE_S, |d| d.0);
    let step_s = pl.step.map_or(HOUR_S, |d| d.0);
    let horizon_s = pl.horizon.map_or(DAY_S, |d| d.0);
    let decay = pl.decay.unwrap_or(0.97);
    let max_jobs = pl.max_jobs.unwrap_or(300);
    let default_duration_s = pl.default_duration.map_or(HOUR_S, |d| d.0);
    let before = problems.len();
    if interval_s == 0 {
        problems.bad("planner.interval", None, "must be longer than 0 (default \"30m\"; Dharma re-plans every 30-60 min)");
    }
    if step_s == 0 {
        problems.bad("planner.step", None, "must be longer than 0 (default \"1h\")");
    } else if horizon_s < step_s || horizon_s / step_s > 1000 {
        problems.bad(
            "planner.horizon",
            None,
            format!("{} must hold 1 to 1000 steps of {} (default \"24h\")", format_duration(horizon_s), format_duration(step_s)),
        );
    }
    if !(decay > 0.0 && decay <= 1.0) {
        problems.bad("planner.decay", None, format!("{decay} is not in (0, 1] (default 0.97 per step)"));
    }
    if !(1..=100_000).contains(&max_jobs) {
        problems.bad("planner.max_jobs", None, format!("{max_jobs} is not in 1..=100000 (default 300)"));
    }
    if default_duration_s == 0 {
        problems.bad("planner.default_duration", None, "must be longer than 0 (default \"1h\")");
    }
    if enabled && cluster_gpus.is_none() {
        problems.bad("planner.enabled", None, "the planner needs the cluster's size: set [cluster] gpus (and gpus_per_node)");
    }
    let steps = (horizon_s / step_s.max(1)) as usize;
    // The planner thread keeps a grid of GPUs × steps, as `tally plan` does.
    let cells = u64::from(cluster_gpus.unwrap_or(0)) * steps as u64;
    if enabled && cells > scenario::MAX_GPU_STEPS {
        problems.bad(
            "planner.horizon",
            None,
            format!(
                "{} steps of {} on {} GPUs is {cells} GPU-steps: the planner allows at most {} (a shorter horizon or longer steps)",
                steps,
                format_duration(step_s),
                cluster_gpus.unwrap_or(0),
                scenario::MAX_GPU_STEPS
            ),
        );
    }
    let ok = problems.len() == before;
    (enabled && ok).then_some(Planner { interval_s, rules: QueueRules { step_s, steps, decay, max_jobs, default_duration_s } })
}

/// `[log] debug`: detailed logging in slurmctld's log.
pub(crate) fn log(raw: Option<RawLog>) -> bool {
    raw.and_then(|l| l.debug).unwrap_or(false)
}

/// `[reports]`: private unless it says otherwise, no admins but root and
/// SlurmUser.
pub(crate) fn reports(raw: Option<RawReports>) -> Reports {
    Reports { private: raw.as_ref().and_then(|r| r.private).unwrap_or(true), admins: raw.and_then(|r| r.admins).unwrap_or_default() }
}

/// `[accounts.X]`: each account's spec for the tree, and the line of each
/// (for problems found later, by the tree or a cluster size).
pub(crate) fn accounts(
    raw: &BTreeMap<String, Spanned<RawAccount>>,
    lines: &LineIndex,
    problems: &mut Problems,
) -> (Vec<AccountSpec>, BTreeMap<String, usize>) {
    let mut specs = Vec::new();
    let mut account_lines = BTreeMap::new();
    for (name, acct) in raw {
        let line = lines.line(acct.span().start);
        account_lines.insert(name.clone(), line);
        let a = acct.get_ref();
        let key = format!("accounts.{name}");
        let budget = match (a.share, a.gpu_hours) {
            (Some(_), Some(_)) => {
                problems.bad(&key, Some(line), "give `share` (percent of the parent) or `gpu_hours` (per window), not both");
                None
            }
            (Some(s), None) => Some(Budget::Share(s)),
            (None, Some(h)) => Some(Budget::GpuHours(h)),
            (None, None) => None,
        };
        specs.push(AccountSpec { name: name.clone(), parent: a.parent.clone(), budget });
    }
    (specs, account_lines)
}

/// `[users]`: user → account, each account a valid name that `tree` (the
/// tree of `[accounts]`) has.
pub(crate) fn users(raw: BTreeMap<String, Spanned<String>>, tree: &OrgTree, lines: &LineIndex, problems: &mut Problems) -> BTreeMap<String, String> {
    for (user, account) in &raw {
        let (line, account) = (Some(lines.line(account.span().start)), account.get_ref());
        let message = match tally_allocator::tree::check_account_name(account) {
            Err(e) => e.to_string(),
            Ok(()) if !tree.contains(account) => format!("account `{account}` is not declared under [accounts]"),
            Ok(()) => continue,
        };
        problems.bad(&format!("users.{}", tally_allocator::text::clip(user)), line, message);
    }
    raw.into_iter().map(|(user, account)| (user, account.into_inner())).collect()
}
