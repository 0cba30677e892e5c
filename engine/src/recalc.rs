//! priority/tally's two threads, host-free: the recalculation
//! ([`Recalc`]: reload, tick, drain, save) and the planner's round
//! ([`plan_round`]), over what they ask of slurmctld ([`Controller`]).
//!
//! The plugin implements [`Controller`] with `tally_ffi::host::Host`
//! (slurmctld's locks and job list); the tests here with a job list in
//! memory. Both threads publish to [`Boards`], which `priority_p_set` reads
//! under a mutex held for a clone: never waited on.
//!
//! One tick: the notes of preempt/tally and a held ledger read with no
//! lock; the jobs copied under the job *read* lock; charged, ranked and
//! walked with no slurmctld lock held (the engine's mutex is never taken
//! under slurmctld's); the priorities and begin times that changed written
//! under the *write* lock; a host drain's requeues; the ledger saved
//! atomically with no lock held.

use crate::engine::{changed_priorities, classify, drain_lines, long_at_submit, AtSubmit, Engine, PlanBoard, Ranking, SubmitHold};
use crate::follower::{self, initial_config, load_config, Start};
use crate::guard::lock;
use crate::planner::{replan, Placed};
use crate::preempted::{self, Notes};
use crate::statefile::{self, Loaded};
use crate::view::{gpu_inventory, JobView, NodeView};
use crate::worker::Wake;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tally_allocator::{format_duration, DrainPlan, Job, RunBook, Snapshot};
use tally_config::Config;

/// What the threads ask of slurmctld.
pub trait Controller {
    /// Every job, the node table and the running jobs on draining nodes,
    /// copied under the job *read* lock.
    fn copy_jobs_and_nodes(&self) -> Copied<JobView>;
    /// Every job with the nodes each running one holds, and the node
    /// table, under the job *read* lock.
    fn copy_placed(&self) -> Copied<Placed>;
    /// Set the priorities in `changes` (job id → priority) where the job is
    /// still pending, not held and not set by an admin, and the begin times
    /// in `begins` where it is still pending, under the job *write* lock.
    fn write_priorities(&self, changes: &HashMap<u32, u32>, begins: &HashMap<u32, u64>, now: u64) -> Written;
    /// Requeue each of `ids` still running; each one's return code (0: done).
    fn requeue(&self, ids: &[u32]) -> Vec<(u32, i32)>;
}

/// A copy of the job list ([`Controller::copy_jobs_and_nodes`]).
#[derive(Debug)]
pub struct Copied<T> {
    pub jobs: Vec<T>,
    /// The node table (when asked for).
    pub nodes: Vec<NodeView>,
    /// Running jobs on draining nodes: (job id, those nodes).
    pub on_draining: Vec<(u32, Vec<Arc<str>>)>,
    /// The job read lock: waited for, then held.
    pub waited: Duration,
    pub held: Duration,
}

impl<T> Default for Copied<T> {
    fn default() -> Copied<T> {
        Copied { jobs: Vec::new(), nodes: Vec::new(), on_draining: Vec::new(), waited: Duration::ZERO, held: Duration::ZERO }
    }
}

/// A write-back of priorities ([`Controller::write_priorities`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Written {
    /// The job write lock: waited for, then held.
    pub waited: Duration,
    pub held: Duration,
    /// Priorities and begin times written.
    pub count: usize,
}

/// What `priority_p_set` and sprio read: swapped by the threads, never
/// waited on.
#[derive(Debug, Default)]
pub struct Boards {
    /// The last ranking (`None`: no usable config yet).
    pub ranking: Mutex<Option<Arc<Ranking>>>,
    /// The planner's last committed step (`None`: no planner).
    pub plan: Mutex<Option<Arc<PlanBoard>>>,
    /// Long jobs `priority_p_set` held or let go since the last tick
    /// ([`Boards::long_at_submit`]; `None` until the first).
    submits: Mutex<Option<Submits>>,
}

/// What [`Boards::long_at_submit`] keeps between two ticks (hashed: at a
/// slurmctld's recovery `priority_p_set` sees every job in turn).
#[derive(Debug, Default)]
struct Submits {
    /// Budget units of each team's long jobs let go and still waiting: the
    /// last tick's ([`Engine::let_go`]) and, once a tick took them,
    /// `priority_p_set`'s before that tick.
    let_go: FxHashMap<Arc<str>, f64>,
    /// The long jobs the last tick let go: its to decide again.
    let_go_ids: FxHashSet<u32>,
    /// The same, by `priority_p_set` since the last tick took the lists.
    let_go_since: FxHashMap<Arc<str>, f64>,
    /// Budget units of each team's long jobs `priority_p_set` held or let
    /// go since the last tick took the lists (not in the ranking's demand).
    asked_since: FxHashMap<Arc<str>, f64>,
    /// The jobs `priority_p_set` decided since (a job updated again is not
    /// counted twice).
    seen_since: FxHashSet<u32>,
    /// Held by `priority_p_set` since.
    held_since: Vec<SubmitHold>,
}

impl Submits {
    fn ahead(&self, account: &str) -> f64 {
        self.let_go.get(account).copied().unwrap_or(0.0) + self.let_go_since.get(account).copied().unwrap_or(0.0)
    }
}

impl Boards {
    pub const fn new() -> Boards {
        Boards { ranking: Mutex::new(None), plan: Mutex::new(None), submits: Mutex::new(None) }
    }

    /// `priority_p_set`'s part of the long-job rule ([`long_at_submit`] on
    /// the last ranking; `job` is `v` converted): the begin time to write
    /// when `v`, a long job that cannot checkpoint waiting now, is held
    /// from now until the next tick decides; a job let go counts ahead of
    /// its team's next ones until then (a burst of submissions is held as
    /// the tick would hold it). `r`: the ranking the caller read from this
    /// board. Memory only, under this board's mutex: never waits on the
    /// engine.
    pub fn long_at_submit(&self, r: &Ranking, v: &JobView, job: &Job, now: u64) -> Option<u64> {
        let mut guard = lock(&self.submits);
        let s = guard.get_or_insert_with(Submits::default);
        if s.seen_since.contains(&v.job_id) || s.let_go_ids.contains(&v.job_id) {
            return None;
        }
        let asked = s.asked_since.get(&job.account).copied().unwrap_or(0.0);
        let decided = long_at_submit(r, v, job, s.ahead(&job.account), asked, now)?;
        s.seen_since.insert(v.job_id);
        *s.asked_since.entry(job.account.clone()).or_insert(0.0) += job.units();
        match decided {
            AtSubmit::Held(h) => {
                s.held_since.push(h);
                Some(h.written_s)
            }
            AtSubmit::LetGo { account, units } => {
                *s.let_go_since.entry(account).or_insert(0.0) += units;
                None
            }
        }
    }

    /// The holds `priority_p_set` wrote since the last call, for the tick
    /// about to copy the jobs; what it let go joins the last tick's until
    /// [`Boards::publish`] replaces both with this tick's.
    fn take_submits(&self) -> Vec<SubmitHold> {
        let mut guard = lock(&self.submits);
        let Some(s) = guard.as_mut() else { return Vec::new() };
        for (a, u) in std::mem::take(&mut s.let_go_since) {
            *s.let_go.entry(a).or_insert(0.0) += u;
        }
        s.seen_since.clear();
        s.asked_since.clear();
        std::mem::take(&mut s.held_since)
    }

    pub fn ranking(&self) -> Option<Arc<Ranking>> {
        lock(&self.ranking).clone()
    }

    pub fn plan(&self) -> Option<Arc<PlanBoard>> {
        lock(&self.plan).clone()
    }

    fn publish(&self, engine: &Engine) {
        *lock(&self.ranking) = Some(engine.ranking());
        // Copied before the lock: priority_p_set waits only for the swap.
        let (let_go, ids) = (engine.let_go().clone(), engine.let_go_ids().clone());
        let mut guard = lock(&self.submits);
        let s = guard.get_or_insert_with(Submits::default);
        s.let_go = let_go;
        s.let_go_ids = ids;
    }
}

/// The recalculation thread's state: the engine and what it follows.
#[derive(Debug)]
pub struct Recalc {
    /// `None`: no usable config yet (Tally does nothing; see
    /// [`crate::follower`]).
    engine: Mutex<Option<Engine>>,
    config_path: PathBuf,
    state_path: Option<PathBuf>,
    /// slurmctld's uid (the ledger's expected owner) and `PreemptParameters`'
    /// window, read from Slurm's config by the plugin.
    euid: u32,
    preempt_window_s: u64,
    boards: &'static Boards,
    /// Why the ledger file must not be written now (it could not be read:
    /// saving would overwrite what it holds); retried every period.
    hold: Mutex<Option<String>>,
    /// The jobs a host drain waited for at the last tick (job id, contract
    /// end): logged again only when that changes.
    drain_waits: Mutex<Vec<(u64, u64)>>,
    /// The last problem reading preempt/tally's notes (said once).
    notes_problem: Mutex<Option<String>>,
}

impl Recalc {
    /// The recalculation of `config_path`'s config with the ledger at
    /// `state_path` (`None`: no StateSaveLocation, usage kept in memory),
    /// publishing to `boards`. Nothing is read until [`Recalc::begin`].
    pub fn new(config_path: PathBuf, state_path: Option<PathBuf>, euid: u32, preempt_window_s: u64, boards: &'static Boards) -> Recalc {
        Recalc {
            engine: Mutex::new(None),
            config_path,
            state_path,
            euid,
            preempt_window_s,
            boards,
            hold: Mutex::new(None),
            drain_waits: Mutex::new(Vec::new()),
            notes_problem: Mutex::new(None),
        }
    }

    /// Start at `t`: the config file if it validates (then written as the
    /// active copy job_submit and preempt follow), else the last good one
    /// beside the ledger; the engine on the ledger as loaded. Without
    /// either config, nothing runs until a reconfigure brings one.
    pub fn begin(&self, t: u64) {
        if self.state_path.is_none() {
            log::error!("StateSaveLocation is not set: usage will not survive a restart");
        }
        let config = match initial_config(&self.config_path, self.state_path.as_deref()) {
            Start::File(c) => {
                if let Some(p) = &self.state_path {
                    follower::write_active(p, &c.text);
                }
                Some(c)
            }
            Start::LastGood(c) => Some(c),
            Start::None => None,
        };
        if let Some(config) = config {
            self.start_engine(config, t);
        }
    }

    /// One run of the thread, woken by `wake`: reload on request, tick,
    /// save; the last run (the plugin's fini) only saves. Returns the
    /// period until the next tick.
    pub fn run(&self, host: &impl Controller, wake: Wake, t: u64) -> Duration {
        match wake {
            Wake::Stop => self.save(t),
            Wake::Reload => {
                self.reload_config(t);
                self.tick(host, t);
            }
            Wake::Tick => self.tick(host, t),
        }
        let period = lock(&self.engine).as_ref().map(|e| e.config().calc_period_s);
        Duration::from_secs(period.unwrap_or(60).max(1))
    }

    /// One tick at `t` (see the module's documentation).
    pub fn tick(&self, host: &impl Controller, t: u64) {
        let began = Instant::now();
        if lock(&self.engine).is_none() {
            log::error!("{}: no usable config: Tally does nothing until it is fixed and `scontrol reconfigure` is run", self.config_path.display());
            return;
        }
        self.retry_held_ledger(t);
        // 0. The runs preempt/tally preempted since (read with no lock held),
        //    and the long jobs priority_p_set held since: taken before the
        //    copy, so each is in it (a hold written after waits for the
        //    next tick, which counts the job as waiting only then).
        let notes = self.read_notes();
        let submit_holds = self.boards.take_submits();
        // 1. Copy the jobs (and the node table) under the job READ lock:
        //    slurmctld's readers (RPCs, sprio) go on meanwhile.
        let mut copied = host.copy_jobs_and_nodes();
        let views = std::mem::take(&mut copied.jobs);
        let on_draining = std::mem::take(&mut copied.on_draining);
        let ids: Vec<u32> = views.iter().map(|v| v.job_id).collect();
        // 2. Charge, rank and walk the queue with no slurmctld lock held.
        let plan = self.boards.plan();
        let (report, changes, begins, drain) = {
            let mut guard = lock(&self.engine);
            let Some(engine) = guard.as_mut() else { return };
            // With [cluster.gpu_types]: the capacity in budget units from the
            // nodes' typed GPUs (re-ranks only when it changed).
            if !copied.nodes.is_empty() && engine.set_gpu_inventory(gpu_inventory(&copied.nodes), t) {
                log::info!(
                    "GPU types: the cluster's capacity is now {:.1} budget units (from the nodes' GPUs)",
                    engine.ranking().ent.capacity_gpus()
                );
            }
            let fresh = notes.as_ref().map_or(0, |n| engine.note_preempted(n));
            if fresh > 0 {
                log::debug!("{fresh} runs preempted by preempt/tally: their jobs' next runs get their whole contracts");
            }
            engine.adopt_holds(submit_holds);
            let report = engine.tick(t, views, plan.as_deref());
            self.boards.publish(engine);
            let changes: HashMap<u32, u32> = report.priorities.iter().map(|&(i, p)| (ids[i], p)).collect();
            let begins: HashMap<u32, u64> = report.begins.iter().map(|&(i, b)| (ids[i], b)).collect();
            (report, changes, begins, engine.drain_plan(t, &on_draining))
        };
        drop(ids);
        // 3. Set the priorities that changed, and the begin times of the long
        //    jobs held or let go, under the job WRITE lock.
        let written = host.write_priorities(&changes, &begins, t);
        // 4. Host drain: requeue what is past its contract on draining nodes
        //    (job and node WRITE locks, only when there is something to do).
        self.drain_nodes(host, &drain, t);
        // The figures of docs/reliability.md's load test: slurmctld's job write
        // lock (waited for, then held), then the read lock of the copy.
        log::debug!(
            "tick: {} jobs, {:.0} GPU-s charged, {} priorities changed; lock waited {} us, held {} us; read lock waited {} us, held {} us",
            report.jobs_seen,
            report.charged_gpu_s,
            written.count,
            written.waited.as_micros(),
            written.held.as_micros(),
            copied.waited.as_micros(),
            copied.held.as_micros()
        );
        drop(report); // the previous views, freed with no lock held
        if let Some(e) = lock(&self.engine).as_mut() {
            e.set_tick_time(began.elapsed());
        }
        self.save(t);
    }

    /// The engine under a first usable config, on the ledger as loaded.
    fn start_engine(&self, config: Config, t: u64) {
        crate::set_debug(config.debug);
        log::info!(
            "{}: {} accounts, window {}, recalculation every {}",
            config.source,
            config.tree.len() - 1,
            format_duration(config.window_s),
            format_duration(config.calc_period_s)
        );
        let snapshot = self.state_path.as_deref().and_then(|p| self.load_ledger(p, &config, t));
        let mut engine = Engine::new(config, snapshot, t);
        engine.set_preempt_window(self.preempt_window_s);
        self.boards.publish(&engine);
        *lock(&self.engine) = Some(engine);
    }

    /// Read the ledger file; a file that cannot be read now holds saving.
    fn load_ledger(&self, p: &Path, config: &Config, t: u64) -> Option<Snapshot> {
        let (snapshot, hold) = match statefile::load(p, config.bucket_s, config.window_s, t, self.euid) {
            Loaded::Ok { snapshot, skipped, warnings } => {
                log::info!("loaded ledger {} (saved at {}, {} jobs' runs recorded)", p.display(), snapshot.saved_at, snapshot.runs.len());
                for (line, what) in skipped {
                    log::warn!("ledger {}: line {line} skipped: {what}", p.display());
                }
                for w in warnings {
                    log::warn!("ledger {}: {w}", p.display());
                }
                (Some(*snapshot), None)
            }
            Loaded::Missing => {
                log::info!("no ledger at {} yet: starting empty", p.display());
                (None, None)
            }
            Loaded::SetAside { problem, moved_to } => {
                log::error!(
                    "ledger {} is not a Tally state ({problem}); moved to {}; starting empty",
                    p.display(),
                    moved_to.map_or("nowhere (rename failed)".to_string(), |m| m.display().to_string())
                );
                (None, None)
            }
            Loaded::Held { problem } => {
                log::error!(
                    "ledger {} cannot be read now ({problem}): left in place, not saved over; charging in memory and retrying every period",
                    p.display()
                );
                (None, Some(problem))
            }
        };
        *lock(&self.hold) = hold;
        snapshot
    }

    /// A ledger that could not be read at start-up: try again, and take what
    /// it holds on top of what was charged since.
    fn retry_held_ledger(&self, t: u64) {
        if lock(&self.hold).is_none() {
            return;
        }
        let (Some(p), Some(config)) = (&self.state_path, lock(&self.engine).as_ref().map(|e| e.config().clone())) else { return };
        if let Some(snapshot) = self.load_ledger(p, &config, t) {
            if let Some(e) = lock(&self.engine).as_mut() {
                e.merge(snapshot);
                log::info!("ledger {} read at last and merged", p.display());
            }
        }
    }

    /// preempt/tally's notes of the runs it preempted (beside the ledger); a
    /// problem is logged once.
    fn read_notes(&self) -> Option<Notes> {
        let path = self.state_path.as_deref()?.with_file_name(preempted::FILE_NAME);
        let read = preempted::load(&path);
        let mut said = lock(&self.notes_problem);
        match read {
            Ok(n) => {
                *said = None;
                Some(n)
            }
            Err(problem) => {
                if said.as_deref() != Some(problem.as_str()) {
                    log::warn!("{problem}: jobs preempted meanwhile restart without a fresh contract");
                    *said = Some(problem);
                }
                None
            }
        }
    }

    /// Requeue the jobs a drain lets go, and say what it waits for (again only
    /// when that changes).
    fn drain_nodes(&self, host: &impl Controller, plan: &DrainPlan, t: u64) {
        let waits: Vec<(u64, u64)> = plan.waiting.iter().map(|w| (w.job_id, w.until_s)).collect();
        let changed = {
            let mut last = lock(&self.drain_waits);
            let changed = *last != waits;
            *last = waits;
            changed
        };
        let lines = drain_lines(plan, t);
        let (requeues, waits) = lines.split_at(plan.requeue.len());
        for l in requeues {
            log::info!("{l}");
        }
        if changed {
            for l in waits {
                log::info!("{l}");
            }
        }
        let ids: Vec<u32> = plan.requeue.iter().filter_map(|&(id, _)| u32::try_from(id).ok()).collect();
        for (id, rc) in host.requeue(&ids) {
            if rc != 0 {
                log::error!("host drain: Slurm refused to requeue job {id} (error {rc}): it runs on; `scontrol requeue {id}` says why");
            }
        }
    }

    /// Write the ledger at `t` (outside slurmctld's lock), unless saving is
    /// held.
    pub fn save(&self, t: u64) {
        let Some(path) = &self.state_path else { return };
        if let Some(why) = lock(&self.hold).as_ref() {
            log::warn!("ledger {} not saved: {why}", path.display());
            return;
        }
        let Some(text) = lock(&self.engine).as_mut().map(|e| e.state_text(t)) else { return };
        if let Err(e) = statefile::save_atomic(path, &text) {
            log::error!("cannot save the ledger to {}: {e}", path.display());
        }
    }

    /// `scontrol reconfigure`: a config that validates replaces the one in
    /// force (and becomes the active copy job_submit and preempt follow); a
    /// broken one changes nothing.
    fn reload_config(&self, t: u64) {
        let Some(c) = load_config(&self.config_path) else {
            log::error!("{}: not reloaded; the config in force stays", self.config_path.display());
            return;
        };
        crate::set_debug(c.debug);
        log::info!("reloaded {}", self.config_path.display());
        if let Some(p) = &self.state_path {
            follower::write_active(p, &c.text);
        }
        let mut guard = lock(&self.engine);
        match guard.as_mut() {
            Some(engine) => {
                engine.set_config(c, t);
                self.boards.publish(engine);
            }
            None => {
                drop(guard);
                self.start_engine(c, t);
            }
        }
    }
}

/// How often a disabled planner looks whether a reconfigure enabled it.
pub const PLANNER_IDLE: Duration = Duration::from_secs(5);

/// One round of the planner thread at `t`: re-plan if `[planner]` is
/// enabled in the config in force (and the cluster's GPUs are known), else
/// clear the board. Returns the time to the next round.
pub fn plan_round(host: &impl Controller, boards: &Boards, wake: Wake, t: u64) -> Duration {
    if wake == Wake::Stop {
        return PLANNER_IDLE;
    }
    let Some(r) = boards.ranking() else { return PLANNER_IDLE };
    let Some(interval) = r.config.planner.filter(|_| r.config.cluster.gpus.is_some()).map(|p| p.interval_s) else {
        if lock(&boards.plan).take().is_some() {
            log::info!("planner disabled: the plan bit is cleared at the next recalculation");
        }
        return PLANNER_IDLE;
    };
    let began = Instant::now();
    // 1. Copy the jobs out under the read lock.
    let copied = host.copy_placed();
    let (jobs, nodes) = (copied.jobs, copied.nodes);
    // 2. Plan with no lock held.
    let Some(re) = replan(&r, &jobs, &nodes, t) else { return PLANNER_IDLE };
    let board = Arc::new(re.board);
    *lock(&boards.plan) = Some(board.clone());
    // 3. The priorities the plan changes, from the copy with no lock held
    //    (pending jobs only: no run record needed), set under the write
    //    lock where the job is still pending, not held and not set by an admin.
    let views: Vec<JobView> = jobs.into_iter().map(|p| p.view).collect();
    let classified = classify(&r.config, &views, &RunBook::new(), t, 0);
    let changes: HashMap<u32, u32> =
        changed_priorities(&r, &views, &classified, Some(&board)).into_iter().map(|(i, p)| (views[i].job_id, p)).collect();
    let changed = host.write_priorities(&changes, &HashMap::new(), t).count;
    log::info!(
        "plan: {} running, {} waiting ({} considered, {} planned within the horizon); starts now: {:?}; {} priorities changed; {} ms",
        re.running,
        re.waiting,
        re.plan.considered,
        re.plan.start_step.len(),
        board.starts_now,
        changed,
        began.elapsed().as_millis()
    );
    Duration::from_secs(interval.max(1))
}

#[cfg(test)]
mod tests;
