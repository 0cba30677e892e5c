//! The owned copy of a Slurm job ([`JobView`]) that everything after
//! `tally_ffi::view` works on, the names one copy shares ([`Names`]), and
//! GPU requests in Slurm's spellings ([`gpu_count`], [`GpuAsk`]).

use rustc_hash::FxHashSet;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where a job is in its life, as far as Tally cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Pending,
    Running,
    Suspended,
    /// Completed, cancelled, failed, timed out, preempted, …
    Done,
}

/// A job, copied out of slurmctld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub job_id: u32,
    pub state: RunState,
    /// Slurm account (empty without accounting). Names are shared among
    /// the jobs of one copy ([`Names`]).
    pub account: Option<Arc<str>>,
    pub user: Arc<str>,
    pub user_id: u32,
    pub comment: Option<String>,
    pub partition: Option<Arc<str>>,
    pub gpus: u32,
    /// The GPU type (GRES type as Slurm spells it: `h100` of
    /// `gpu:h100:8`): the allocated type of a job holding GPUs, the
    /// requested type of a pending one; `None` when untyped, unknown, or
    /// GPUs of several types. Weighs its GPUs through `[cluster.gpu_types]`
    /// (`None`: weight 1). [`gpu_type`] reads it from a TRES string.
    pub gpu_type: Option<Arc<str>>,
    /// Unix seconds (0 = unknown).
    pub submit_s: u64,
    pub begin_s: u64,
    pub start_s: u64,
    pub end_s: u64,
    /// `nice` as the user gave it (NICE_OFFSET removed).
    pub nice: i64,
    /// Time limit in seconds; `None` = no limit.
    pub time_limit_s: Option<u64>,
    pub priority: u32,
    pub direct_set_prio: bool,
    /// Times Slurm requeued it (`restart_cnt`).
    pub restarts: u16,
    /// When it last started preempting for its GPUs (0 = never;
    /// `details->preempt_start_time`).
    pub preempt_start_s: u64,
    /// Run seconds before its last suspension (`pre_sus_time`), and when it
    /// was last suspended or resumed (`suspend_time`, 0 = never).
    pub pre_sus_s: u64,
    pub suspend_s: u64,
    /// Heterogeneous job: the leader's job id (`het_job_id`; 0 = not a het job).
    pub het_job_id: u32,
    /// Nodes asked for (`details->min_nodes`, at least 1).
    pub nodes: u32,
    /// Whole nodes: `--exclusive`, or a partition with
    /// `OverSubscribe=EXCLUSIVE` (`details->whole_node`'s
    /// `WHOLE_NODE_REQUIRED`; squeue's `shared: none`). Slurm gives such a
    /// job every GPU of the nodes it gets, whatever it asked for.
    pub exclusive: bool,
    /// The most GPUs a node it may use has (its partitions' nodes), for an
    /// exclusive pending job, when the copy read the nodes
    /// ([`PartitionGpus`]); `None`: not known (the config's `[cluster]
    /// gpus_per_node` then, [`JobView::whole_gpus`]).
    pub node_gpus: Option<u32>,
    /// A job array's record of pending tasks: how many it still holds
    /// (`array_recs->task_cnt`; squeue's `array_task_string`); 1 for any
    /// other job.
    pub array_tasks: u32,
}

impl JobView {
    /// A pending job of `user` with no account, comment or partition, 1
    /// GPU, submitted at 0 with no begin time yet (0: slurmctld has not
    /// found it independent, so it does not wait: set `begin_s` for one
    /// that does, `engine::queue::waiting`), priority 1 (not held), no time
    /// limit, untyped GPUs: the start of a test's or benchmark's job, finished with
    /// struct update syntax (`JobView { gpus: 8, ..JobView::pending(1, u) }`).
    pub fn pending(job_id: u32, user: Arc<str>) -> JobView {
        JobView {
            job_id,
            state: RunState::Pending,
            account: None,
            user,
            user_id: 0,
            comment: None,
            partition: None,
            gpus: 1,
            gpu_type: None,
            submit_s: 0,
            begin_s: 0,
            start_s: 0,
            end_s: 0,
            nice: 0,
            time_limit_s: None,
            priority: 1,
            direct_set_prio: false,
            restarts: 0,
            preempt_start_s: 0,
            pre_sus_s: 0,
            suspend_s: 0,
            het_job_id: 0,
            nodes: 1,
            exclusive: false,
            node_gpus: None,
            array_tasks: 1,
        }
    }

    /// Seconds the current run has run by `now` (or by its end), suspended
    /// time excluded, from Slurm's own bookkeeping: `pre_sus_time` is what
    /// ran before the last suspension, `suspend_time` the last suspension
    /// or resumption.
    pub fn run_s(&self, now: u64) -> u64 {
        if self.start_s == 0 {
            return 0;
        }
        let until = match self.state {
            RunState::Suspended => return self.pre_sus_s,
            RunState::Running => now,
            RunState::Done => self.end_s.max(self.start_s),
            RunState::Pending => return 0,
        };
        if self.suspend_s > 0 {
            self.pre_sus_s.saturating_add(until.saturating_sub(self.suspend_s.max(self.start_s)))
        } else {
            until.saturating_sub(self.start_s)
        }
    }

    /// A component of a heterogeneous job other than its leader.
    pub fn het_component(&self) -> bool {
        self.het_job_id != 0 && self.het_job_id != self.job_id
    }

    /// Does it hold GPUs now (running or suspended, started)? Then `gpus`
    /// is what Slurm allocated it (`tres_alloc_str`).
    pub fn holding(&self) -> bool {
        matches!(self.state, RunState::Running | RunState::Suspended) && self.start_s > 0
    }

    /// What an exclusive job that does not hold its nodes yet will hold:
    /// `nodes ×` the GPUs of a node it may use ([`JobView::node_gpus`], else
    /// `gpus_per_node`), or `gpus` if that is more; `None` for any other
    /// job (what it holds or asks for is `gpus`).
    pub fn whole_gpus(&self, gpus_per_node: u32) -> Option<u32> {
        (self.exclusive && !self.holding()).then(|| self.nodes.max(1).saturating_mul(self.node_gpus.unwrap_or(gpus_per_node)).max(self.gpus))
    }

    /// The GPUs its class is judged by, for this job alone: its whole
    /// nodes' ([`JobView::whole_gpus`]) or its own.
    pub fn class_gpus(&self, gpus_per_node: u32) -> u32 {
        self.whole_gpus(gpus_per_node).unwrap_or(self.gpus)
    }

    /// Pending tasks it stands for: an array's record's while it waits
    /// ([`JobView::array_tasks`]), else 1.
    pub fn tasks(&self) -> u32 {
        if self.state == RunState::Pending {
            self.array_tasks.max(1)
        } else {
            1
        }
    }

    /// Note the most GPUs a node of its partitions has, for an exclusive
    /// pending job (any other job is left alone).
    pub fn set_node_gpus(&mut self, nodes: &PartitionGpus) {
        if self.exclusive && !self.holding() {
            self.node_gpus = nodes.most(self.partition.as_deref());
        }
    }
}

/// The most GPUs a node has, per partition: what an exclusive pending
/// job of the partition will hold per node ([`JobView::set_node_gpus`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionGpus {
    by_partition: BTreeMap<String, u32>,
    /// Over every node (a job without a partition).
    any: Option<u32>,
}

impl PartitionGpus {
    /// From each node's partitions and GPUs.
    pub fn new<'a, P: AsRef<str> + 'a>(nodes: impl IntoIterator<Item = (&'a [P], u32)>) -> PartitionGpus {
        let mut out = PartitionGpus::default();
        for (partitions, gpus) in nodes {
            out.any = Some(out.any.map_or(gpus, |g| g.max(gpus)));
            for p in partitions {
                let most = out.by_partition.entry(p.as_ref().to_string()).or_insert(0);
                *most = (*most).max(gpus);
            }
        }
        out
    }

    /// The most GPUs of a node in `partitions` (Slurm's comma-separated
    /// list of a pending job's partitions; `None`: any node); `None` when
    /// no node is known there.
    pub fn most(&self, partitions: Option<&str>) -> Option<u32> {
        match partitions {
            None => self.any,
            Some(list) => list.split(',').filter_map(|p| self.by_partition.get(p.trim()).copied()).max(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.any.is_none()
    }
}

/// The names of one copy of the job list (accounts, users, partitions:
/// a few hundred distinct ones among up to 100,000s of jobs), each stored
/// once and shared. Names come from the site (Slurm's associations and
/// the password database), not from users, so they are hashed unkeyed.
/// Comments, the users' own text, are copied per job.
#[derive(Debug, Default)]
pub struct Names(FxHashSet<Arc<str>>);

impl Names {
    pub fn new() -> Names {
        Names::default()
    }

    /// The shared copy of `name`.
    #[inline]
    pub fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(a) = self.0.get(name) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(name);
        self.0.insert(a.clone());
        a
    }
}

pub use tally_allocator::tres::{gpu_count, gpu_type};

/// A node of slurmctld's table, copied with the jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// Its index in slurmctld's node table (the bits of a job's `node_bitmap`).
    pub index: u32,
    pub name: Arc<str>,
    /// Its GPUs as configured (`Gres=gpu:h100:8`), by type (`None`: untyped).
    pub gpus: Vec<(Option<Arc<str>>, u32)>,
    pub state: NodeState,
    /// Why it is down or draining, as the admin or Slurm wrote it.
    pub reason: Option<String>,
    /// The partitions it is in.
    pub partitions: Vec<Arc<str>>,
}

impl NodeView {
    pub fn gpu_total(&self) -> u32 {
        self.gpus.iter().map(|g| g.1).sum()
    }
}

/// The GPUs per type of `nodes` (`None`: untyped), summed: what
/// `Engine::set_gpu_inventory` takes.
pub fn gpu_inventory(nodes: &[NodeView]) -> BTreeMap<Option<Arc<str>>, u32> {
    let mut out: BTreeMap<Option<Arc<str>>, u32> = BTreeMap::new();
    for (t, n) in nodes.iter().flat_map(|node| node.gpus.iter()) {
        let sum = out.entry(t.clone()).or_insert(0);
        *sum = sum.saturating_add(*n);
    }
    out
}

/// What of a node's state Tally acts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeState {
    /// DOWN, or not yet known (UNKNOWN, FUTURE).
    pub down: bool,
    /// DRAIN (draining or drained) or FAIL: an admin wants it emptied.
    pub drain: bool,
    /// In an advanced reservation (RESERVED).
    pub reserved: bool,
    /// Powered down, powering down, not responding, in maintenance, or
    /// rebooting (reboot issued).
    pub unavailable: bool,
}

impl NodeState {
    /// Can start any job now: the one rule the planner thread (from the
    /// state word, `tally_ffi::view::node_state`) and the reports (from
    /// Slurm's JSON, [`NodeState::from_names`]) both use.
    pub fn usable(self) -> bool {
        !(self.down || self.drain || self.reserved || self.unavailable)
    }

    /// From the state names `scontrol show node --json` / `sinfo --json`
    /// print: the base state (`idle`, `mixed`, `down`, …, any case) and the
    /// flags (`DRAIN`, `RESERVED`, `NOT_RESPONDING`, …). Slurm 22.05 prints
    /// the base state and flags as one string (`IDLE+DRAIN`) and 24.11 a
    /// list; both are taken apart here. A base state or flag not known to
    /// Tally is ignored (an unknown base state counts as down).
    pub fn from_names<'a>(state: &'a str, flags: impl IntoIterator<Item = &'a str>) -> NodeState {
        let mut parts = state.split('+');
        let base = parts.next().unwrap_or("").trim().to_ascii_uppercase();
        let mut out = NodeState {
            down: !matches!(
                base.as_str(),
                "IDLE" | "MIXED" | "ALLOCATED" | "ALLOC" | "COMPLETING" | "DRAINED" | "DRAINING" | "DRAIN" | "RESERVED" | "MAINT" | "MAINTENANCE"
            ),
            ..NodeState::default()
        };
        // 22.05's combined names of a base state and its flags.
        match base.as_str() {
            "DRAINED" | "DRAINING" | "DRAIN" => out.drain = true,
            "RESERVED" => out.reserved = true,
            "MAINT" | "MAINTENANCE" => out.unavailable = true,
            _ => {}
        }
        for flag in parts.chain(flags) {
            match flag.trim().to_ascii_uppercase().as_str() {
                "DRAIN" | "DRAINING" | "DRAINED" | "FAIL" | "FAILING" => out.drain = true,
                "RESERVED" => out.reserved = true,
                "POWERED_DOWN" | "POWER_DOWN" | "POWERING_DOWN" | "NOT_RESPONDING" | "NO_RESPOND" | "MAINTENANCE" | "MAINT" | "REBOOT_ISSUED" => {
                    out.unavailable = true
                }
                _ => {}
            }
        }
        out
    }
}

/// A GPU request in Slurm's ways of asking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuAsk {
    pub per_job: Option<String>,
    pub per_node: Option<String>,
    pub per_task: Option<String>,
    pub per_socket: Option<String>,
    pub nodes: u32,
    /// Tasks asked for (`None`: not given).
    pub tasks: Option<u32>,
}

impl GpuAsk {
    /// From Slurm's four TRES request strings (`tres_per_job`,
    /// `tres_per_node`, `tres_per_task`, `tres_per_socket`).
    #[inline]
    pub fn new(tres: [Option<String>; 4], nodes: u32, tasks: Option<u32>) -> GpuAsk {
        let [per_job, per_node, per_task, per_socket] = tres;
        GpuAsk { per_job, per_node, per_task, per_socket, nodes, tasks }
    }

    /// GPUs asked for in total: `Ok(None)` when no GPU is asked for,
    /// `Err(how)` when the total is not known before the job is placed
    /// (per socket: the sockets come with the nodes).
    pub fn total(&self) -> Result<Option<u32>, &'static str> {
        if let Some(g) = self.per_job.as_deref().and_then(gpu_count) {
            return Ok(Some(g));
        }
        if let Some(g) = self.per_node.as_deref().and_then(gpu_count) {
            return Ok(Some(g.saturating_mul(self.nodes.max(1))));
        }
        if let Some(g) = self.per_task.as_deref().and_then(gpu_count) {
            // Slurm's default is one task per node.
            return Ok(Some(g.saturating_mul(self.tasks.unwrap_or(self.nodes.max(1)))));
        }
        if self.per_socket.as_deref().and_then(gpu_count).is_some() {
            return Err("--gpus-per-socket");
        }
        Ok(None)
    }

    /// The GPU type asked for ([`gpu_type`] of the first request string
    /// that asks for GPUs); `None` when untyped (any type will do).
    pub fn gpu_type(&self) -> Option<&str> {
        [&self.per_job, &self.per_node, &self.per_task, &self.per_socket]
            .into_iter()
            .flatten()
            .find(|s| gpu_count(s).is_some())
            .and_then(|s| gpu_type(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_states_from_slurms_names() {
        let usable = |state: &str, flags: &[&str]| NodeState::from_names(state, flags.iter().copied()).usable();
        for up in ["idle", "MIXED", "allocated", "completing"] {
            assert!(usable(up, &[]), "{up}");
            assert!(usable(up, &["PLANNED", "REBOOT_REQUESTED"]), "{up} with flags that do not stop new work");
        }
        for (state, flags) in [
            ("down", &[][..]),
            ("future", &[]),
            ("unknown", &[]),
            ("error", &[]),
            ("drained", &[]),
            ("idle+drain", &[]),
            ("mixed", &["DRAIN"]),
            ("idle", &["FAIL"]),
            ("idle", &["RESERVED"]),
            ("reserved", &[]),
            ("idle", &["NOT_RESPONDING"]),
            ("idle", &["POWERED_DOWN"]),
            ("idle", &["MAINTENANCE"]),
            ("idle", &["REBOOT_ISSUED"]),
        ] {
            assert!(!usable(state, flags), "{state} {flags:?}");
        }
        assert_eq!(NodeState::from_names("mixed", ["DRAIN", "RESERVED"]), NodeState { down: false, drain: true, reserved: true, unavailable: false });
    }

    #[test]
    fn the_nodes_gpus_per_type() {
        let node = |index: u32, gpus: Vec<(Option<Arc<str>>, u32)>| NodeView {
            index,
            name: format!("n{index}").into(),
            gpus,
            state: NodeState::default(),
            reason: None,
            partitions: Vec::new(),
        };
        let nodes =
            [node(0, vec![(Some("h100".into()), 8)]), node(1, vec![(Some("h100".into()), 8)]), node(2, vec![(None, 4), (Some("b200".into()), 4)])];
        let want: BTreeMap<Option<Arc<str>>, u32> = [(None, 4), (Some("b200".into()), 4), (Some("h100".into()), 16)].into_iter().collect();
        assert_eq!(gpu_inventory(&nodes), want);
    }

    #[test]
    fn the_type_asked_for() {
        let ask = |node: &str| GpuAsk::new([None, Some(node.to_string()), None, None], 2, None);
        assert_eq!(ask("gres/gpu:b200:8").gpu_type(), Some("b200"));
        assert_eq!(ask("gres/gpu:8").gpu_type(), None);
        let both = GpuAsk::new([Some("gres/gpu:h100:16".into()), Some("gres/gpu:b200:8".into()), None, None], 2, None);
        assert_eq!(both.gpu_type(), Some("h100"), "the request the total comes from");
        assert_eq!(GpuAsk::default().gpu_type(), None);
        assert_eq!(JobView::pending(1, "u".into()).gpu_type, None);
    }

    #[test]
    fn names_are_shared() {
        let mut names = Names::new();
        let a = names.intern("nlp");
        let b = names.intern(&String::from("nlp"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &names.intern("vision")));
    }
}
