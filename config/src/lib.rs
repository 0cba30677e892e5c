//! `tally.toml`: Tally's configuration.
//!
//! Parsing happens in two steps, as in ripgrep's flags: [`raw`] types that
//! mirror the file (serde, `deny_unknown_fields`), then [`Config::from_raw`]
//! validates them into the allocator's types ([`OrgTree`], [`ContractRules`],
//! [`PriorityRules`], ledger geometry). Every problem names the file, the
//! line, the key path and what was expected:
//!
//! ```text
//! examples/broken.toml:12: accounts.nlp.share: share 140 is not a percentage in (0, 100]
//! ```
//!
//! This is the only crate that derives serde. Default path:
//! `/etc/slurm/tally.toml`, overridden by `$TALLY_CONFIG`.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use tally_allocator::{
    AccountSpec, Allocation, Budget, Capacity, Contract, ContractRules, FairShare, GpuTypeError, GpuWeights, Inventory, Ledger, LongJobs,
    MissingContract, OrgTree, PriorityRules, TreeError, Weight,
};
use tally_planner::queue::QueueRules;

pub mod input;
pub mod lines;
pub mod raw;
pub mod scenario;

use lines::LineIndex;

/// Where slurmctld and the CLI look unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/slurm/tally.toml";

/// The largest file [`Config::load`] (and [`scenario::load`]) reads: 16 MiB.
/// slurmctld reads tally.toml on its main thread (at start and on
/// reconfigure); a tree of 1,000 accounts is about 50 KB, so the cap leaves
/// a margin of hundreds while bounding what one wrong file (a log, a
/// device) can cost. The file is read through a reader that stops one byte
/// past the cap, so its size as reported by the file system does not decide.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The largest `[priority] debug_max_gpus`: debug jobs are a node's worth
/// at most.
pub const MAX_DEBUG_GPUS: u32 = 64;

/// The most GPUs a cluster may have: `[cluster] gpus`, `gpus_per_node`
/// and a `[cluster.gpu_types]` count in tally.toml, and every `--gpus`
/// and `--gpus-per-node` of the `tally` command. 2^22 = 4,194,304 GPUs is
/// well past the largest GPU clusters built (some hundreds of thousands of
/// GPUs). The bound is for memory: the simulator keeps 24 bytes per node
/// in each policy's replay (100 MB at this bound, one GPU per node),
/// where `--gpus 4294967295` asked it for tens of GB.
pub const MAX_CLUSTER_GPUS: u32 = 1 << 22;

/// Read at most [`MAX_FILE_BYTES`] of `path` as UTF-8 ([`input::read_text`]:
/// a regular file only); `what` names the kind of file in the refusal ("a
/// tally.toml"), `why` follows a refusal for size.
pub(crate) fn read_capped(path: &Path, file: &str, what: &str, why: &str) -> Result<String, ConfigError> {
    input::read_text(path, what, MAX_FILE_BYTES).map_err(|e| {
        let message = match e {
            input::InputError::TooBig { .. } => format!("{e}{why}"),
            e => e.to_string(),
        };
        ConfigError::one(file, "", None, message)
    })
}

/// `$TALLY_CONFIG` or [`DEFAULT_PATH`].
pub fn default_path() -> PathBuf {
    std::env::var_os("TALLY_CONFIG").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_PATH))
}

/// One thing wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `accounts.nlp.share`.
    pub key: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong and what is expected.
    pub message: String,
}

/// Everything wrong with one config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match p.line {
                Some(line) => write!(f, "{}:{}: ", self.file, line)?,
                None => write!(f, "{}: ", self.file)?,
            }
            if p.key.is_empty() {
                write!(f, "{}", p.message)?;
            } else {
                write!(f, "{}: {}", p.key, p.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    pub(crate) fn one(file: &str, key: &str, line: Option<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError { file: file.to_string(), problems: vec![Problem { key: key.to_string(), line, message: message.into() }] }
    }
}

/// `[reports]`, in the spirit of slurm.conf's `PrivateData=usage`: with
/// `private` (the default) a user who is not an admin (root, SlurmUser, or
/// listed in `admins`) sees the rows of their own accounts only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reports {
    pub private: bool,
    pub admins: Vec<String>,
}

/// Cluster shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub name: Option<String>,
    /// GPUs in the cluster, if the file says; the plugin otherwise counts the
    /// GPUs of the nodes Slurm knows. Left out with `[cluster.gpu_types]`
    /// giving every type's count: their sum.
    pub gpus: Option<u32>,
    pub gpus_per_node: u32,
    /// `[cluster.gpu_types]`: the budget weight (and count) of each GPU
    /// type; empty without the table (every GPU weighs 1).
    pub gpu_types: GpuWeights,
}

/// `[planner]`: Dharma's rolling horizon inside slurmctld.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planner {
    /// Re-plan period, seconds (default 30 min).
    pub interval_s: u64,
    pub rules: QueueRules,
}

/// What the job_submit plugin enforces beyond the contract syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubmitPolicy {
    /// An allocated contract needs an account in the tree.
    pub require_funded_account: bool,
    /// GPU counts must be powers of two.
    pub power_of_two_gpus: bool,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from (for messages).
    pub source: String,
    pub cluster: Cluster,
    pub window_s: u64,
    pub bucket_s: u64,
    pub contracts: ContractRules,
    pub submit: SubmitPolicy,
    pub priority: PriorityRules,
    /// How often the plugin's thread charges usage and re-ranks.
    pub calc_period_s: u64,
    /// `[planner]`: the rolling-horizon planner thread, if enabled.
    pub planner: Option<Planner>,
    pub tree: OrgTree,
    /// user → account, for clusters without slurmdbd.
    pub users: BTreeMap<String, String>,
    /// Detailed logging in slurmctld's log.
    pub debug: bool,
    /// `[reports]`: who sees what in `tally share` and `tally explain`.
    pub reports: Reports,
    /// Line of each `[accounts.X]` (for messages found later, e.g. budgets
    /// that do not fit a cluster size).
    account_lines: BTreeMap<String, usize>,
    /// Keys the file sets that this release ignores ([`DROPPED_KEYS`]):
    /// said by `tally config check`, the reports and the plugins' log.
    pub warnings: Vec<Problem>,
    /// The text it was parsed from (the plugins keep it as the last good copy).
    pub text: String,
}

/// Keys an earlier release accepted and this one ignores, with what
/// replaced each. A file that sets one loads, with a warning; any other
/// unknown key is an error.
pub const DROPPED_KEYS: &[(&str, &str)] = &[
    ("priority.age_unit", "the priority has no age field; equal priorities run in submit order (Slurm's tie-break)"),
    ("priority.debug_lane_gpus", "the debug lane holds the debug class, set by priority.debug_max_gpus and priority.debug_max_contract"),
];

impl Config {
    /// Each warning as `file:line: key: message`, as errors are written.
    pub fn warning_lines(&self) -> Vec<String> {
        self.warnings
            .iter()
            .map(|w| match w.line {
                Some(l) => format!("{}:{l}: {}: {}", self.source, w.key, w.message),
                None => format!("{}: {}: {}", self.source, w.key, w.message),
            })
            .collect()
    }
}

impl Config {
    /// Read (at most [`MAX_FILE_BYTES`]) and validate a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let why = ": slurmctld reads it on its main thread (a tree of 1,000 accounts is about 50 KB)";
        let text = read_capped(path, &file, "a tally.toml", why)?;
        Config::parse(&text, &file)
    }

    /// Validate TOML text; `file` names it in messages.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let raw = raw::parse(text).map_err(|(key, line, message)| ConfigError::one(file, &key, line, message))?;
        Config::from_raw(raw, text, file)
    }

    /// Validation of the raw file. Collects every problem it can before
    /// failing (the tree is checked only once its parts are valid).
    pub fn from_raw(raw: raw::RawConfig, text: &str, file: &str) -> Result<Config, ConfigError> {
        let lines = LineIndex::new(text);
        let line_of = |offset: usize| lines.line(offset);
        let mut problems = Vec::new();
        let mut bad = |key: &str, line: Option<usize>, message: String| problems.push(Problem { key: key.to_string(), line, message });

        let cluster = raw.cluster.unwrap_or_default();
        match cluster.gpus {
            Some(0) => bad("cluster.gpus", None, "must be at least 1 (or left out to count the nodes' GPUs)".into()),
            Some(g) if g > MAX_CLUSTER_GPUS => bad("cluster.gpus", None, too_many_gpus(g)),
            _ => {}
        }
        let gpus_per_node = cluster.gpus_per_node.unwrap_or(8);
        if gpus_per_node == 0 {
            bad("cluster.gpus_per_node", None, "must be at least 1".into());
        } else if gpus_per_node > MAX_CLUSTER_GPUS {
            bad("cluster.gpus_per_node", None, too_many_gpus(gpus_per_node));
        }
        let (gpu_types, cluster_gpus) = gpu_types(&cluster, &line_of, &mut bad);

        let ledger = raw.ledger.unwrap_or_default();
        let window_s = ledger.window.map_or(7 * 86_400, |d| d.0);
        let bucket_s = ledger.bucket.map_or(3600, |d| d.0);
        if bucket_s == 0 {
            bad("ledger.bucket", None, "must be longer than 0 (e.g. \"1h\")".into());
        } else if window_s < bucket_s || window_s % bucket_s != 0 {
            bad(
                "ledger.window",
                None,
                format!(
                    "{} is not a whole number of buckets of {} (e.g. window = \"7d\", bucket = \"1h\")",
                    tally_allocator::format_duration(window_s),
                    tally_allocator::format_duration(bucket_s)
                ),
            );
        }

        let c = raw.contracts.unwrap_or_default();
        let max_s = c.max.map_or(tally_allocator::contract::DEFAULT_MAX_CONTRACT_S, |d| d.0);
        if max_s == 0 {
            bad("contracts.max", None, "must be longer than 0 (default \"8h\")".into());
        }
        let unallocated_below_s = c.unallocated_below.as_ref().map_or(0, |d| d.get_ref().0);
        if unallocated_below_s > max_s {
            bad(
                "contracts.unallocated_below",
                c.unallocated_below.as_ref().map(|d| line_of(d.span().start)),
                format!(
                    "{} is longer than contracts.max {}, so every contract would count as unallocated (allowed: 0 to contracts.max)",
                    tally_allocator::format_duration(unallocated_below_s),
                    tally_allocator::format_duration(max_s)
                ),
            );
        }
        let missing = match c.missing.as_deref().map(str::trim) {
            None | Some("unallocated") => MissingContract::Unallocated,
            Some("reject") => MissingContract::Reject,
            Some(other) => match tally_allocator::parse_duration(other) {
                Ok(0) => MissingContract::Unallocated,
                Ok(s) if s <= max_s => MissingContract::Default(Contract::new(s, false)),
                Ok(s) => {
                    bad(
                        "contracts.missing",
                        None,
                        format!(
                            "default contract {} exceeds contracts.max {}",
                            tally_allocator::format_duration(s),
                            tally_allocator::format_duration(max_s)
                        ),
                    );
                    MissingContract::Unallocated
                }
                Err(e) => {
                    bad("contracts.missing", None, format!("expected \"unallocated\", \"reject\" or a default contract such as \"1h\": {e}"));
                    MissingContract::Unallocated
                }
            },
        };
        let max_requeues = c.max_requeues.or(tally_allocator::contract::DEFAULT_MAX_REQUEUES);
        if let Some(n) = max_requeues.filter(|&n| n > 100) {
            bad(
                "contracts.max_requeues",
                None,
                format!(
                    "{n} is too many (0 to 100, or leave it out: no limit, the default): each requeue of a job that is not resumable throws its work away"
                ),
            );
        }
        let long_jobs = match c.long_jobs.as_deref().map(str::trim) {
            None | Some("warn") => LongJobs::Warn,
            Some("reject") => LongJobs::Reject,
            Some(other) => {
                bad(
                    "contracts.long_jobs",
                    None,
                    format!("expected \"warn\" or \"reject\" (what job_submit does with a job that is not resumable and longer than contracts.max), found \"{other}\""),
                );
                LongJobs::Warn
            }
        };
        let contracts = ContractRules { max_s, unallocated_below_s, missing, max_requeues, long_jobs };
        let submit = SubmitPolicy {
            require_funded_account: c.require_funded_account.unwrap_or(true),
            power_of_two_gpus: c.power_of_two_gpus.unwrap_or(false),
        };

        let p = raw.priority.unwrap_or_default();
        let calc_period_s = p.calc_period.map_or(60, |d| d.0);
        if calc_period_s == 0 {
            bad("priority.calc_period", None, "must be longer than 0 (default \"1m\")".into());
        }
        let quick_time_limit_s = p.quick_time_limit.map_or(tally_allocator::priority::DEFAULT_QUICK_TIME_LIMIT_S, |d| d.0);
        let debug_lane = p.debug_lane.unwrap_or(true);
        let debug_max_gpus = p.debug_max_gpus.unwrap_or(tally_allocator::priority::DEFAULT_DEBUG_MAX_GPUS);
        if debug_max_gpus > MAX_DEBUG_GPUS {
            bad(
                "priority.debug_max_gpus",
                None,
                format!("{debug_max_gpus} is too many (0 to {MAX_DEBUG_GPUS}, default 2; 0 turns the debug class off): debug jobs are small"),
            );
        }
        // Default: 15 min, or the contract maximum where that is shorter.
        let debug_max_contract_s = p.debug_max_contract.map_or(tally_allocator::priority::DEFAULT_DEBUG_MAX_CONTRACT_S.min(max_s), |d| d.0);
        if debug_max_contract_s == 0 || debug_max_contract_s > max_s {
            bad(
                "priority.debug_max_contract",
                None,
                format!(
                    "must be longer than 0 and at most contracts.max ({}; default \"15m\"): the longest contract of a debug job",
                    tally_allocator::format_duration(max_s)
                ),
            );
        }
        // Keys an earlier Tally accepted: said and ignored, as Slurm treats
        // its deprecated options, so last month's file still loads.
        let mut warnings = Vec::new();
        for (key, at) in [
            ("priority.age_unit", p.age_unit.as_ref().map(|v| v.span().start)),
            ("priority.debug_lane_gpus", p.debug_lane_gpus.as_ref().map(|v| v.span().start)),
        ] {
            if let (Some(at), Some((_, instead))) = (at, DROPPED_KEYS.iter().find(|(k, _)| *k == key)) {
                warnings.push(Problem {
                    key: key.to_string(),
                    line: Some(line_of(at)),
                    message: format!("is no longer used and is ignored: {instead}; remove the key"),
                });
            }
        }

        let planner = raw.planner.and_then(|pl| {
            let enabled = pl.enabled.unwrap_or(false);
            let interval_s = pl.interval.map_or(1800, |d| d.0);
            let step_s = pl.step.map_or(3600, |d| d.0);
            let horizon_s = pl.horizon.map_or(86_400, |d| d.0);
            let decay = pl.decay.unwrap_or(0.97);
            let max_jobs = pl.max_jobs.unwrap_or(300);
            let default_duration_s = pl.default_duration.map_or(3600, |d| d.0);
            let mut ok = true;
            let mut bad = |key: &str, message: String| {
                ok = false;
                bad(key, None, message)
            };
            if interval_s == 0 {
                bad("planner.interval", "must be longer than 0 (default \"30m\"; Dharma re-plans every 30-60 min)".into());
            }
            if step_s == 0 {
                bad("planner.step", "must be longer than 0 (default \"1h\")".into());
            } else if horizon_s < step_s || horizon_s / step_s > 1000 {
                bad(
                    "planner.horizon",
                    format!(
                        "{} must hold 1 to 1000 steps of {} (default \"24h\")",
                        tally_allocator::format_duration(horizon_s),
                        tally_allocator::format_duration(step_s)
                    ),
                );
            }
            if !(decay > 0.0 && decay <= 1.0) {
                bad("planner.decay", format!("{decay} is not in (0, 1] (default 0.97 per step)"));
            }
            if !(1..=100_000).contains(&max_jobs) {
                bad("planner.max_jobs", format!("{max_jobs} is not in 1..=100000 (default 300)"));
            }
            if default_duration_s == 0 {
                bad("planner.default_duration", "must be longer than 0 (default \"1h\")".into());
            }
            if enabled && cluster_gpus.is_none() {
                bad("planner.enabled", "the planner needs the cluster's size: set [cluster] gpus (and gpus_per_node)".into());
            }
            let steps = (horizon_s / step_s.max(1)) as usize;
            // The planner thread keeps a grid of GPUs × steps, as `tally plan` does.
            let cells = u64::from(cluster_gpus.unwrap_or(0)) * steps as u64;
            if enabled && cells > scenario::MAX_GPU_STEPS {
                bad(
                    "planner.horizon",
                    format!(
                        "{} steps of {} on {} GPUs is {cells} GPU-steps: the planner allows at most {} (a shorter horizon or longer steps)",
                        steps,
                        tally_allocator::format_duration(step_s),
                        cluster_gpus.unwrap_or(0),
                        scenario::MAX_GPU_STEPS
                    ),
                );
            }
            (enabled && ok).then_some(Planner { interval_s, rules: QueueRules { step_s, steps, decay, max_jobs, default_duration_s } })
        });

        // Accounts.
        let mut specs = Vec::new();
        let mut account_lines = BTreeMap::new();
        for (name, acct) in &raw.accounts {
            let line = line_of(acct.span().start);
            account_lines.insert(name.clone(), line);
            let a = acct.get_ref();
            let key = format!("accounts.{name}");
            let budget = match (a.share, a.gpu_hours) {
                (Some(_), Some(_)) => {
                    bad(&key, Some(line), "give `share` (percent of the parent) or `gpu_hours` (per window), not both".into());
                    None
                }
                (Some(s), None) => Some(Budget::Share(s)),
                (None, Some(h)) => Some(Budget::GpuHours(h)),
                (None, None) => None,
            };
            specs.push(AccountSpec { name: name.clone(), parent: a.parent.clone(), budget });
        }
        if !problems.is_empty() {
            return Err(ConfigError { file: file.to_string(), problems });
        }
        let tree = OrgTree::new(&specs).map_err(|e| tree_problem(file, &e, &account_lines))?;

        let mut problems = Vec::new();
        for (user, account) in &raw.users {
            let (line, account) = (Some(line_of(account.span().start)), account.get_ref());
            let message = match tally_allocator::tree::check_account_name(account) {
                Err(e) => e.to_string(),
                Ok(()) if !tree.contains(account) => format!("account `{account}` is not declared under [accounts]"),
                Ok(()) => continue,
            };
            problems.push(Problem { key: format!("users.{}", tally_allocator::text::clip(user)), line, message });
        }
        if !problems.is_empty() {
            return Err(ConfigError { file: file.to_string(), problems });
        }

        let config = Config {
            source: file.to_string(),
            cluster: Cluster { name: cluster.name, gpus: cluster_gpus, gpus_per_node, gpu_types },
            window_s,
            bucket_s,
            contracts,
            submit,
            priority: PriorityRules { quick_time_limit_s, debug_max_gpus, debug_max_contract_s, debug_lane },
            calc_period_s,
            planner,
            tree,
            users: raw.users.into_iter().map(|(user, account)| (user, account.into_inner())).collect(),
            debug: raw.log.and_then(|l| l.debug).unwrap_or(false),
            reports: Reports {
                private: raw.reports.as_ref().and_then(|r| r.private).unwrap_or(true),
                admins: raw.reports.and_then(|r| r.admins).unwrap_or_default(),
            },
            account_lines,
            warnings,
            text: text.to_string(),
        };
        if let Some(gpus) = config.cluster.gpus {
            config.allocation(gpus)?;
        }
        Ok(config)
    }

    /// An empty ledger with this file's window and bucket.
    pub fn new_ledger(&self) -> Ledger {
        Ledger::new(self.bucket_s, self.window_s).expect("geometry validated in from_raw")
    }

    /// What a cluster of `gpus` GPUs gives per window: with
    /// `[cluster.gpu_types]`, in budget units, the types' GPUs counted as
    /// the file says ([`Config::capacity_with`] adds Slurm's nodes).
    pub fn capacity(&self, gpus: u32) -> Capacity {
        self.capacity_with(gpus, &Inventory::new())
    }

    /// [`Config::capacity`] with the GPUs per type Slurm's nodes have
    /// (`inventory`) for the types whose count the file leaves out
    /// ([`GpuWeights::capacity_units`]: the file's count first, then the
    /// nodes', the rest of the `gpus` at weight 1). Without
    /// `[cluster.gpu_types]` the inventory is not read: `gpus` GPUs.
    pub fn capacity_with(&self, gpus: u32, inventory: &Inventory) -> Capacity {
        if self.cluster.gpu_types.is_empty() {
            return Capacity::new(gpus, self.window_s);
        }
        Capacity::weighted(gpus, self.cluster.gpu_types.capacity_units(gpus, inventory), self.window_s)
    }

    /// The effective allocation for a cluster of `gpus` GPUs; fails when
    /// GPU-hour budgets do not fit that size.
    pub fn allocation(&self, gpus: u32) -> Result<Allocation, ConfigError> {
        self.allocation_with(gpus, &Inventory::new())
    }

    /// [`Config::allocation`] on the capacity of [`Config::capacity_with`].
    pub fn allocation_with(&self, gpus: u32, inventory: &Inventory) -> Result<Allocation, ConfigError> {
        Allocation::new(&self.tree, self.capacity_with(gpus, inventory)).map_err(|e| tree_problem(&self.source, &e, &self.account_lines))
    }

    /// The budget weight of a GPU of `gpu_type` (`None`: untyped): the
    /// `[cluster.gpu_types]` weight, 1 for a type the table does not name.
    pub fn weight_of(&self, gpu_type: Option<&str>) -> Weight {
        self.cluster.gpu_types.of(gpu_type)
    }

    /// GPUs used to turn shares into GPU-hours: `[cluster] gpus`, or 1 when
    /// the file leaves it out (the ranking of a share-only tree does not
    /// depend on it; GPU-hour figures then read per GPU).
    pub fn ranking_gpus(&self) -> u32 {
        self.cluster.gpus.unwrap_or(1)
    }

    /// The fair-share ranking of this tree for the ledger's window at `now`:
    /// the one computation shared by the plugin and the reports.
    pub fn fair_share(&self, ledger: &Ledger, now: u64) -> Result<FairShare, ConfigError> {
        self.fair_share_with(ledger, now, &Inventory::new())
    }

    /// [`Config::fair_share`] on the capacity of [`Config::capacity_with`]
    /// (the nodes' GPUs per type the plugin saved with the ledger).
    pub fn fair_share_with(&self, ledger: &Ledger, now: u64, inventory: &Inventory) -> Result<FairShare, ConfigError> {
        let alloc = self.allocation_with(self.ranking_gpus(), inventory)?;
        Ok(FairShare::compute(&self.tree, &alloc, &ledger.usage(now)))
    }

    /// The account a job is charged to: the job's Slurm account when it has
    /// one (slurmdbd), otherwise the `[users]` map.
    pub fn account_for<'a>(&'a self, slurm_account: Option<&'a str>, user: &str) -> Option<&'a str> {
        match slurm_account {
            Some(a) if !a.is_empty() => Some(a),
            _ => self.users.get(user).map(String::as_str),
        }
    }
}

/// `[cluster.gpu_types]` validated into the allocator's [`GpuWeights`],
/// and the cluster's GPUs (`[cluster] gpus`, or the sum of the types'
/// counts when it is left out and every type has one). Problems go to
/// `bad` with the row's line.
fn gpu_types(
    cluster: &raw::RawCluster,
    line_of: &dyn Fn(usize) -> usize,
    bad: &mut dyn FnMut(&str, Option<usize>, String),
) -> (GpuWeights, Option<u32>) {
    let Some(rows) = &cluster.gpu_types else { return (GpuWeights::default(), cluster.gpus) };
    let mut good: Vec<(&str, f64, Option<u32>, usize)> = Vec::new();
    for (name, row) in rows {
        let at = line_of(row.span().start);
        let line = Some(at);
        let key = format!("cluster.gpu_types.{name}");
        let r = row.get_ref();
        let gpus = match r.gpus {
            None => None,
            Some(n) if (1..=i64::from(MAX_CLUSTER_GPUS)).contains(&n) => Some(n as u32),
            Some(0) => {
                bad(&format!("{key}.gpus"), line, GpuTypeError::NoGpus(name.clone()).to_string());
                continue;
            }
            Some(n) => {
                bad(
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
            Err(e) => bad(&key, line, e.to_string()),
        }
    }
    let weights = match GpuWeights::new(good.iter().map(|&(n, w, g, _)| (n, w, g))) {
        Ok(w) => w,
        Err(e) => {
            let (key, line) = match &e {
                GpuTypeError::CaseTwin(_, second) => (format!("cluster.gpu_types.{second}"), good.iter().find(|g| g.0 == second).map(|g| g.3)),
                _ => ("cluster.gpu_types".to_string(), None),
            };
            bad(&key, line, e.to_string());
            GpuWeights::default()
        }
    };
    let counted = u64::from(weights.counted_gpus());
    let all_counted = weights.iter().all(|(_, t)| t.gpus.is_some());
    let gpus = match cluster.gpus {
        Some(g) if counted > u64::from(g) => {
            bad(
                "cluster.gpu_types",
                None,
                format!("the types' GPUs add up to {counted}, more than cluster.gpus = {g} (every type's GPUs are part of cluster.gpus)"),
            );
            Some(g)
        }
        Some(g) => Some(g),
        None if all_counted && counted > u64::from(MAX_CLUSTER_GPUS) => {
            bad(
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

/// A refusal of a GPU count over [`MAX_CLUSTER_GPUS`]: what is allowed and why.
pub fn too_many_gpus(n: impl fmt::Display) -> String {
    format!("{n} GPUs is more than a cluster may have: at most {MAX_CLUSTER_GPUS} (2^22, well past the largest GPU clusters)")
}

fn tree_problem(file: &str, e: &TreeError, lines: &BTreeMap<String, usize>) -> ConfigError {
    let at = |name: &str| lines.get(name).copied();
    let (key, line) = match e {
        TreeError::Duplicate(a) | TreeError::BadName(a) | TreeError::UpperCase { name: a, .. } => (format!("accounts.{a}"), at(a)),
        TreeError::RootDeclared => ("accounts.root".to_string(), at("root")),
        TreeError::UnknownParent { account, .. } => (format!("accounts.{account}.parent"), at(account)),
        TreeError::Cycle(path) => (format!("accounts.{}.parent", path[0]), at(&path[0])),
        TreeError::BadShare { account, .. } => (format!("accounts.{account}.share"), at(account)),
        TreeError::BadGpuHours { account, .. } => (format!("accounts.{account}.gpu_hours"), at(account)),
        TreeError::SharesOverParent { parent, .. } | TreeError::GpuHoursOverParent { parent, .. } => {
            if parent == tally_allocator::ROOT {
                ("accounts".to_string(), None)
            } else {
                (format!("accounts.{parent}"), at(parent))
            }
        }
    };
    ConfigError::one(file, &key, line, e.to_string())
}

#[cfg(test)]
mod tests;
