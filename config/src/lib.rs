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
use tally_allocator::{Allocation, Capacity, ContractRules, FairShare, GpuWeights, Inventory, Ledger, OrgTree, PriorityRules, TreeError, Weight};
use tally_planner::queue::QueueRules;

pub mod hostlist;
pub mod input;
pub mod lines;
pub mod raw;
pub mod scenario;
mod sections;

use lines::LineIndex;
use sections::Problems;
// tests.rs (`use super::*`) names these.
#[cfg(test)]
use tally_allocator::{Contract, MissingContract};

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
    /// `[priority] debug_nodes`: the nodes of the debug capacity, by name
    /// (only debug jobs and unallocated work run there,
    /// [`PriorityRules::may_use_debug_nodes`]); empty: none.
    pub debug_nodes: Vec<String>,
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
    (
        "contracts.max_requeues",
        "Tally never requeues an allocated job that cannot checkpoint (other than a debug job): past its contract it runs to its end, and a long \
         one starts only on its team's fair share or on GPUs no other team asks for",
    ),
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

    /// Validation of the raw file, one function per section (`sections`).
    /// Collects every problem it can before failing (the tree is checked
    /// only once its parts are valid, the users once the tree is).
    pub fn from_raw(raw: raw::RawConfig, text: &str, file: &str) -> Result<Config, ConfigError> {
        let lines = LineIndex::new(text);
        let mut problems = Problems::default();
        let cluster = sections::cluster(raw.cluster, &lines, &mut problems);
        let ledger = sections::ledger(raw.ledger, &mut problems);
        let raw_contracts = raw.contracts.unwrap_or_default();
        let (contracts, submit) = sections::contracts(&raw_contracts, &lines, &mut problems);
        let raw_priority = raw.priority.unwrap_or_default();
        let (priority, calc_period_s) = sections::priority(&raw_priority, contracts.max_s, &mut problems);
        let debug_nodes = sections::debug_nodes(&raw_priority, &mut problems);
        let warnings = sections::dropped_keys(&raw_contracts, &raw_priority, &lines);
        let planner = sections::planner(raw.planner, cluster.gpus, &mut problems);
        let (specs, account_lines) = sections::accounts(&raw.accounts, &lines, &mut problems);
        problems.finish(file)?;
        let tree = OrgTree::new(&specs).map_err(|e| tree_problem(file, &e, &account_lines))?;
        let mut problems = Problems::default();
        let users = sections::users(raw.users, &tree, &lines, &mut problems);
        problems.finish(file)?;

        let config = Config {
            source: file.to_string(),
            cluster,
            window_s: ledger.window_s,
            bucket_s: ledger.bucket_s,
            contracts,
            submit,
            priority,
            debug_nodes,
            calc_period_s,
            planner,
            tree,
            users,
            debug: sections::log(raw.log),
            reports: sections::reports(raw.reports),
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
