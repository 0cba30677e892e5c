//! What one refresh of `tally exporter` reads, computed from the same
//! inputs and with the same functions as `tally share` (the account
//! figures are share's rows) and `tally explain` (the jobs are squeue's,
//! classified by the plugin's own rules). Pure: the daemon reads the files
//! and runs squeue, this turns them into figures.
//!
//! [`Counters`] are what the daemon accumulates between refreshes: the
//! preemptions preempt/tally noted (by reason, with the work they threw
//! away and the contracts they broke) and the waits of the jobs it saw
//! start, by class.

use crate::share::{self, Row};
use crate::slurm_json::QueueJob;
use std::collections::{BTreeMap, HashSet};
use tally_allocator::{Owed, Snapshot, HOUR_S};
use tally_config::Config;
use tally_engine::engine::classify;
use tally_engine::preempted::Notes;
use tally_engine::view::RunState;

/// A job's class, as the exporter counts jobs and waits: a debug job
/// (`PriorityRules::is_debug`: an allocated contract of at most
/// `debug_max_contract`, at most `debug_max_gpus` GPUs by what one task of
/// it will hold — an exclusive job its whole nodes, `[cluster]
/// gpus_per_node` each here, a heterogeneous job all its components, as
/// `classify` reads squeue), other allocated work, or unallocated work
/// (contract 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobClass {
    Debug,
    Allocated,
    Unallocated,
}

impl JobClass {
    pub const ALL: [JobClass; 3] = [JobClass::Debug, JobClass::Allocated, JobClass::Unallocated];

    pub fn name(self) -> &'static str {
        match self {
            JobClass::Debug => "debug",
            JobClass::Allocated => "allocated",
            JobClass::Unallocated => "unallocated",
        }
    }
}

/// One job of the queue, as the page lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveJob {
    pub id: u32,
    /// squeue's name of it (`24_3` for an array task).
    pub name: String,
    pub account: String,
    pub user: String,
    pub running: bool,
    pub class: JobClass,
    pub gpus: u32,
    /// The contract as Tally reads it (`2h`, `30m,resumable`, `0`).
    pub contract: String,
    pub submit_s: u64,
    pub start_s: u64,
    pub time_limit_s: Option<u64>,
    /// Times requeued: a first run has 0.
    pub restarts: u32,
    /// Slurm's reason while pending.
    pub reason: String,
}

/// The tree as the metrics label it: parent and path of each account.
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    pub parent: String,
    /// `root/research/nlp`: the account's names from the root down.
    pub path: String,
}

/// Everything one refresh read.
#[derive(Debug, Clone)]
pub struct Reading {
    /// When read (Unix s).
    pub at: u64,
    /// When the plugin saved the ledger.
    pub saved_at: u64,
    /// The plugin's last recalculation, microseconds (0: not known).
    pub tick_us: u64,
    /// The GPUs the ranking counts (`[cluster] gpus`, or the nodes').
    pub gpus: u32,
    /// `tally share`'s rows (accounts only, no user rows), in tree order.
    pub accounts: Vec<Row>,
    pub places: BTreeMap<String, Place>,
    /// Per account (subtree sums, as the rows): owed and delivered in the
    /// last whole hour.
    pub last_hour: BTreeMap<String, Owed>,
    /// Per leaf account: owed and delivered per day (the chart's).
    pub days: Vec<(String, BTreeMap<u64, Owed>)>,
    /// The queue (`None`: squeue did not answer this time).
    pub jobs: Option<Vec<LiveJob>>,
    /// The config's `[reports] private`, unless the exporter was told to
    /// show accounts anyway.
    pub private: bool,
    /// Where the config came from.
    pub config_source: String,
}

impl Reading {
    /// Read a config, a ledger and (when squeue answered) the queue at `now`.
    pub fn compute(config: &Config, snap: &Snapshot, queue: Option<&[QueueJob]>, now: u64, private: bool) -> Result<Reading, String> {
        let rep = share::report(config, snap, now, &share::Pick::default())?;
        let tree = &config.tree;
        let mut places = BTreeMap::new();
        for (id, _) in tree.walk() {
            let path: Vec<&str> = tree.path(id);
            let node = tree.node(id);
            let parent = node.parent.map(|p| tree.node(p).name.clone()).unwrap_or_default();
            let path = path.join("/");
            places.insert(node.name.clone(), Place { parent, path });
        }
        Ok(Reading {
            at: now,
            saved_at: snap.saved_at,
            tick_us: snap.tick_us,
            gpus: config.ranking_gpus(),
            accounts: rep.rows.into_iter().filter(|r| r.user.is_none()).collect(),
            places,
            last_hour: last_hour(config, snap, now),
            days: rep.days,
            jobs: queue.map(|q| live_jobs(config, snap, q, now)),
            private,
            config_source: config.source.clone(),
        })
    }

    /// GPUs running now, allocated and unallocated (from the queue).
    pub fn running_gpus(&self) -> Option<(u64, u64)> {
        let jobs = self.jobs.as_ref()?;
        let sum = |unalloc: bool| jobs.iter().filter(|j| j.running && (j.class == JobClass::Unallocated) == unalloc).map(|j| u64::from(j.gpus)).sum();
        Some((sum(false), sum(true)))
    }
}

/// Owed and delivered in the last whole hour, summed up the tree as the
/// rows are.
fn last_hour(config: &Config, snap: &Snapshot, now: u64) -> BTreeMap<String, Owed> {
    let hour = (now / HOUR_S).saturating_sub(1);
    let by_hour = snap.owed.owed_by(&snap.ledger, now, |t| t / HOUR_S);
    let leaves = by_hour.get(&hour).cloned().unwrap_or_default();
    let tree = &config.tree;
    let mut sums = vec![Owed::default(); tree.len()];
    let walk = tree.walk();
    for &(id, _) in walk.iter().rev() {
        if let Some(o) = leaves.get(&tree.node(id).name) {
            sums[id].add(o);
        }
        if let Some(p) = tree.node(id).parent {
            let o = sums[id];
            sums[p].add(&o);
        }
    }
    walk.iter().map(|&(id, _)| (tree.node(id).name.clone(), sums[id])).collect()
}

/// The queue's jobs, classified by the plugin's rules (pending and
/// running only).
fn live_jobs(config: &Config, snap: &Snapshot, queue: &[QueueJob], now: u64) -> Vec<LiveJob> {
    let views: Vec<_> = queue.iter().map(|q| q.view.clone()).collect();
    let jobs = classify(config, &views, &snap.runs, now, 0);
    queue
        .iter()
        .zip(jobs)
        .filter(|(q, _)| matches!(q.view.state, RunState::Pending | RunState::Running))
        .map(|(q, (_, job))| {
            let class = if !job.contract.is_allocated() {
                JobClass::Unallocated
            } else if config.priority.is_debug(&job) {
                JobClass::Debug
            } else {
                JobClass::Allocated
            };
            LiveJob {
                id: q.view.job_id,
                name: q.name(),
                account: job.account.to_string(),
                user: job.user.to_string(),
                running: q.view.state == RunState::Running,
                class,
                gpus: q.view.gpus,
                contract: job.contract.canonical(),
                submit_s: q.view.submit_s,
                start_s: q.view.start_s,
                time_limit_s: q.view.time_limit_s,
                restarts: job.restarts,
                reason: q.reason.clone(),
            }
        })
        .collect()
}

/// The buckets of the wait histograms, seconds: from Ai2's 30 s target for
/// debug jobs to a day.
pub const WAIT_BUCKETS_S: [f64; 13] = [10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14_400.0, 28_800.0, 86_400.0, 259_200.0];

/// What the daemon counts from refresh to refresh.
#[derive(Debug, Default)]
pub struct Counters {
    /// Preemptions by reason name: (count, GPU-seconds lost).
    pub preemptions: BTreeMap<&'static str, (u64, f64)>,
    /// Preemptions inside a contract.
    pub violations: u64,
    /// Per class: the waits observed, bucket counts ([`WAIT_BUCKETS_S`],
    /// not cumulative), their sum and count.
    pub waits: BTreeMap<JobClass, Waits>,
    /// Refreshes that failed to read the ledger or the config.
    pub read_errors: u64,
    seen_notes: HashSet<(u32, u64)>,
    seen_starts: HashSet<(u32, u64)>,
}

/// One class's waits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Waits {
    pub buckets: [u64; WAIT_BUCKETS_S.len()],
    pub sum_s: f64,
    pub count: u64,
}

impl Waits {
    fn observe(&mut self, wait_s: u64) {
        if let Some(i) = WAIT_BUCKETS_S.iter().position(|&b| wait_s as f64 <= b) {
            self.buckets[i] += 1;
        }
        self.sum_s += wait_s as f64;
        self.count += 1;
    }
}

impl Counters {
    /// Count the notes not counted yet (a note is one preempted run).
    pub fn observe_notes(&mut self, notes: &Notes) {
        for n in notes.iter() {
            if !self.seen_notes.insert((n.job_id, n.run_start_s)) {
                continue;
            }
            let (reason, lost) = n.why.map_or((tally_engine::preempted::OTHER, 0.0), |w| (w.reason_name(), w.lost_gpu_s as f64));
            let e = self.preemptions.entry(reason).or_default();
            e.0 += 1;
            e.1 += lost;
            if n.why.is_some_and(|w| w.contract_left_s > 0) {
                self.violations += 1;
            }
        }
        // Bounded as the notes are: forget runs no longer noted.
        if self.seen_notes.len() > 2 * tally_engine::preempted::MAX_NOTES {
            let live: HashSet<(u32, u64)> = notes.iter().map(|n| (n.job_id, n.run_start_s)).collect();
            self.seen_notes.retain(|k| live.contains(k));
        }
    }

    /// Observe the wait of every first run seen running that started at or
    /// after `since` (the exporter's start: a restarted exporter does not
    /// count a start twice), wait = first start − submit, as the
    /// simulator and the replay measure it.
    pub fn observe_starts(&mut self, jobs: &[LiveJob], since: u64) {
        for j in jobs.iter().filter(|j| j.running && j.restarts == 0 && j.start_s >= since && j.start_s > 0) {
            if self.seen_starts.insert((j.id, j.start_s)) {
                self.waits.entry(j.class).or_default().observe(j.start_s.saturating_sub(j.submit_s));
            }
        }
        // Bounded by the queue: forget starts no longer running.
        if self.seen_starts.len() > 4 * jobs.len().max(1024) {
            let live: HashSet<(u32, u64)> = jobs.iter().filter(|j| j.running).map(|j| (j.id, j.start_s)).collect();
            self.seen_starts.retain(|k| live.contains(k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_engine::preempted::{Note, Why};

    fn job(id: u32, class: JobClass, submit_s: u64, start_s: u64) -> LiveJob {
        LiveJob {
            id,
            name: id.to_string(),
            account: "nlp".into(),
            user: "alice".into(),
            running: start_s > 0,
            class,
            gpus: 1,
            contract: "15m".into(),
            submit_s,
            start_s,
            time_limit_s: None,
            restarts: 0,
            reason: String::new(),
        }
    }

    #[test]
    fn waits_are_observed_once_per_first_run_after_the_start() {
        let mut c = Counters::default();
        let jobs = vec![
            job(1, JobClass::Debug, 100, 125),
            job(2, JobClass::Debug, 100, 90),
            job(3, JobClass::Allocated, 0, 4000),
            job(4, JobClass::Debug, 100, 0),
        ];
        c.observe_starts(&jobs, 100);
        c.observe_starts(&jobs, 100);
        let d = &c.waits[&JobClass::Debug];
        // Job 1 waited 25 s (the 30 s bucket); job 2 started before the
        // exporter; job 4 waits still.
        assert_eq!((d.count, d.sum_s, d.buckets[1]), (1, 25.0, 1));
        assert_eq!(c.waits[&JobClass::Allocated].buckets[7], 0);
        assert_eq!(c.waits[&JobClass::Allocated].buckets[8], 1, "4000 s: the 2 h bucket");
        // A requeued run is not a first start.
        let mut again = job(1, JobClass::Debug, 100, 500);
        again.restarts = 1;
        c.observe_starts(&[again], 100);
        assert_eq!(c.waits[&JobClass::Debug].count, 1);
    }

    #[test]
    fn preemptions_are_counted_once_by_reason_and_broken_contracts_apart() {
        let mut notes = Notes::new();
        let why = |reason, lost, left| Some(Why { reason, lost_gpu_s: lost, contract_left_s: left });
        notes.note(Note { job_id: 1, run_start_s: 10, at_s: 20, why: why(Some(tally_allocator::PreemptReason::Unallocated), 80, 0) });
        notes.note(Note { job_id: 2, run_start_s: 10, at_s: 20, why: why(Some(tally_allocator::PreemptReason::Restore), 3600, 0) });
        notes.note(Note { job_id: 3, run_start_s: 10, at_s: 20, why: why(None, 10, 600) });
        notes.note(Note { job_id: 4, run_start_s: 10, at_s: 20, why: None });
        let mut c = Counters::default();
        c.observe_notes(&notes);
        c.observe_notes(&notes);
        assert_eq!(c.preemptions["unallocated"], (1, 80.0));
        assert_eq!(c.preemptions["restore"], (1, 3600.0));
        assert_eq!(c.preemptions["other"], (2, 10.0));
        assert_eq!(c.violations, 1);
    }
}
