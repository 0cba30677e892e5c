//! `priority/tally`: Slurm's priority plugin interface over Tally's allocator.
//!
//! slurm.conf: `PriorityType=priority/tally`; config in
//! `/etc/slurm/tally.toml` (or `$TALLY_CONFIG` in slurmctld's environment).
//!
//! The ABI (22.05.8, `src/common/plugin.c`, `src/interfaces/priority.c`):
//! identity symbols `plugin_name`, `plugin_type` (NUL-terminated char arrays)
//! and `plugin_version` (`SLURM_VERSION_NUMBER`); `init`/`fini`; and all six
//! `priority_p_*` functions, each defined with `tally_ffi::export!` (behind the panic guard).
//!
//! Threading: slurmctld calls `priority_p_set` and `priority_p_job_end` with
//! its job write lock held; they touch only in-memory state (the last
//! [`Ranking`] behind a mutex held for a clone) and never do IO or wait on
//! the engine. The recalculation thread, started only inside slurmctld once
//! its jobs are recovered (in `init` on 22.05, in `priority_p_thread_start`
//! from 24.11: a backup slurmctld taking over calls `init` before it
//! recovers them) and joined in `fini`, copies the jobs under slurmctld's job
//! *read* lock, charges the ledger, re-ranks and walks the queue with no
//! slurmctld lock held, then takes the job write lock only to set the
//! priorities that changed (of jobs still pending, not held, not set by an
//! admin) and `last_job_update`, and saves the state file with no lock held.
//! The engine's mutex is never taken while holding slurmctld's lock.
//!
//! With `[planner] enabled = true`, a second thread re-plans every
//! `planner.interval`: it copies the jobs (and running jobs' nodes) under
//! the job *read* lock, plans with the lock released
//! (`tally_engine::planner::replan`, fast mode, milliseconds), publishes the
//! [`PlanBoard`] `priority_p_set` reads, then takes the write lock only to
//! set the changed priorities. Never inside `priority_p_set`.
//!
//! sprio columns (their sum is the job's priority, see docs/design.md) come
//! from `allocator::Priority::sprio`: SITE = 2³¹−1 for allocated jobs (0
//! otherwise), JOBSIZE = the missing 1, PARTITION = 2³⁰ for a job the
//! planner starts now, FAIRSHARE = the need, level and team fields, QOS =
//! the nice field's bias and the quick bit, NICE = −within_team.

// No unsafe code, and so no `#[no_mangle]` by hand: every export is
// defined through `tally_ffi::export!`, behind the panic guard, and every
// Slurm pointer is read through `tally_ffi`'s handles.
#![forbid(unsafe_code)]

use slurm_sys::slurmdb_assoc_rec_t;
use std::collections::HashMap;
use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tally_allocator::RunBook;
use tally_engine::engine::{changed_priorities, classify, priority_of, walked_priority, Engine, PlanBoard, Ranking};
use tally_engine::follower::{self, initial_config, load_config, Start};
use tally_engine::guard::lock;
use tally_engine::now;
use tally_engine::planner::replan;
use tally_engine::statefile::{self, Loaded};
use tally_engine::view::JobView;
use tally_engine::worker::{Wake, Worker};
use tally_ffi::abi::{conf, factors_list, Factors, JobArg, SUCCESS};
use tally_ffi::host::Host;
use tally_ffi::slurm_log::{self, SlurmLogger};

// ---- identity ------------------------------------------------------------

tally_ffi::plugin_identity!("Tally fair-share priority", "priority/tally");

static LOGGER: SlurmLogger = SlurmLogger { prefix: "priority/tally" };

// ---- state -----------------------------------------------------------------

#[derive(Debug)]
struct Shared {
    /// `None`: no usable config yet (Tally does nothing; see
    /// `tally_engine::follower`).
    engine: Mutex<Option<Engine>>,
    config_path: PathBuf,
    state_path: Option<PathBuf>,
    /// Why the ledger file must not be written now (it could not be read:
    /// saving would overwrite what it holds); retried every period.
    hold: Mutex<Option<String>>,
    /// The jobs a host drain waited for at the last tick (job id, contract
    /// end): logged again only when that changes.
    drain_waits: Mutex<Vec<(u64, u64)>>,
    /// The last problem reading preempt/tally's notes (said once).
    notes_problem: Mutex<Option<String>>,
}

#[derive(Debug)]
struct Running {
    worker: Option<Worker>,
    planner: Option<Worker>,
}

static PLUGIN: Mutex<Option<Running>> = Mutex::new(None);
/// What `priority_p_set` reads: swapped by the thread, never waited on.
static RANKING: Mutex<Option<Arc<Ranking>>> = Mutex::new(None);
/// The planner's last committed step (None: no planner), swapped likewise.
static PLAN: Mutex<Option<Arc<PlanBoard>>> = Mutex::new(None);

fn current_ranking() -> Option<Arc<Ranking>> {
    lock(&RANKING).clone()
}

fn current_plan() -> Option<Arc<PlanBoard>> {
    lock(&PLAN).clone()
}

fn publish(engine: &Engine) {
    *lock(&RANKING) = Some(engine.ranking());
}

fn state_path() -> Option<PathBuf> {
    conf::state_save_location().map(|d| statefile::path_in(std::path::Path::new(&d)))
}

// ---- init / fini -------------------------------------------------------------

tally_ffi::export! {
    /// Load tally.toml and the ledger; inside slurmctld, start the threads.
    /// Never a failed init (slurmctld would not start): a bug here leaves
    /// Slurm's submit order, loudly.
    fn init() -> c_int;
    fallback || {
        slurm_log::error("priority/tally did not start (internal error above): every pending job keeps Slurm's submit order until slurmctld restarts");
        SUCCESS
    };
    {
        let config_path = tally_config::default_path();
        // The logger first, at info, so config errors are visible.
        slurm_log::init(&LOGGER);
        let t = now();
        let Some(host) = Host::lookup() else {
            // A client tool (sshare, …) loaded us: no thread, no state.
            if let Start::File(c) | Start::LastGood(c) = initial_config(&config_path, None) {
                *lock(&RANKING) = Some(Engine::new(c, None, t).ranking());
            }
            return SUCCESS;
        };
        let state_path = state_path();
        if state_path.is_none() {
            log::error!("StateSaveLocation is not set: usage will not survive a restart");
        }
        let config = match initial_config(&config_path, state_path.as_deref()) {
            Start::File(c) => {
                if let Some(p) = &state_path {
                    follower::write_active(p, &c.text);
                }
                Some(c)
            }
            Start::LastGood(c) => Some(c),
            Start::None => None,
        };
        let shared = Arc::new(Shared { engine: Mutex::new(None), config_path, state_path, hold: Mutex::new(None), drain_waits: Mutex::new(Vec::new()), notes_problem: Mutex::new(None) });
        if let Some(config) = config {
            start_engine(&shared, config, t);
        }
        if tally_ffi::release::THREADS_AT_THREAD_START {
            // slurmctld calls priority_p_thread_start once its jobs are
            // recovered: a backup taking over calls init before that.
            *lock(&DEFERRED) = Some((host, shared));
        } else {
            start_threads(host, shared);
        }
        SUCCESS
    }

    /// Stop and join the threads (the recalculation thread saves last).
    fn fini() -> c_int;
    fallback || SUCCESS;
    {
        *lock(&DEFERRED) = None;
        let running = lock(&PLUGIN).take();
        if let Some(r) = running {
            for w in [r.planner, r.worker].into_iter().flatten() {
                w.stop();
            }
        }
        *lock(&PLAN) = None;
        SUCCESS
    }
}

/// The threads' start, from `init` until slurmctld has recovered its jobs
/// (`priority_p_thread_start`, see `tally_ffi::release::THREADS_AT_THREAD_START`).
static DEFERRED: Mutex<Option<(Host, Arc<Shared>)>> = Mutex::new(None);

/// Start the recalculation and planner threads. The first tick charges
/// what every job in `job_list` ran since its mark and forgets the marks of
/// jobs not there: it must see slurmctld's recovered jobs, never the empty
/// list a backup has before it loads them (the runs of every job would be
/// charged again from their starts).
fn start_threads(host: Host, shared: Arc<Shared>) {
    let s2 = shared.clone();
    let worker = Worker::start("tally-recalc", "the recalculation thread", move |wake| recalc(&host, &s2, wake));
    let planner = Worker::start("tally-plan", "the planner thread", move |wake| plan_round(&host, wake));
    *lock(&PLUGIN) = Some(Running { worker, planner });
}

/// `priority_p_thread_start` (24.11 on): slurmctld is in control with its
/// jobs recovered.
fn thread_start() {
    let deferred = lock(&DEFERRED).take();
    if let Some((host, shared)) = deferred {
        start_threads(host, shared);
    }
}

/// The engine under a first usable config, on the ledger as loaded.
fn start_engine(shared: &Shared, config: tally_config::Config, t: u64) {
    tally_engine::set_debug(config.debug);
    log::info!(
        "{}: {} accounts, window {}, recalculation every {}",
        config.source,
        config.tree.len() - 1,
        tally_allocator::format_duration(config.window_s),
        tally_allocator::format_duration(config.calc_period_s)
    );
    let snapshot = shared.state_path.as_deref().and_then(|p| load_ledger(shared, p, &config, t));
    let mut engine = Engine::new(config, snapshot, t);
    engine.set_preempt_window(conf::preempt_window_s());
    publish(&engine);
    *lock(&shared.engine) = Some(engine);
}

/// Read the ledger file; a file that cannot be read now holds saving.
fn load_ledger(shared: &Shared, p: &std::path::Path, config: &tally_config::Config, t: u64) -> Option<tally_allocator::Snapshot> {
    match statefile::load(p, config.bucket_s, config.window_s, t, conf::euid()) {
        Loaded::Ok { snapshot, skipped, warnings } => {
            log::info!("loaded ledger {} (saved at {}, {} jobs' runs recorded)", p.display(), snapshot.saved_at, snapshot.runs.len());
            for (line, what) in skipped {
                log::warn!("ledger {}: line {line} skipped: {what}", p.display());
            }
            for w in warnings {
                log::warn!("ledger {}: {w}", p.display());
            }
            *lock(&shared.hold) = None;
            Some(*snapshot)
        }
        Loaded::Missing => {
            log::info!("no ledger at {} yet: starting empty", p.display());
            *lock(&shared.hold) = None;
            None
        }
        Loaded::SetAside { problem, moved_to } => {
            log::error!(
                "ledger {} is not a Tally state ({problem}); moved to {}; starting empty",
                p.display(),
                moved_to.map_or("nowhere (rename failed)".to_string(), |m| m.display().to_string())
            );
            *lock(&shared.hold) = None;
            None
        }
        Loaded::Held { problem } => {
            log::error!(
                "ledger {} cannot be read now ({problem}): left in place, not saved over; charging in memory and retrying every period",
                p.display()
            );
            *lock(&shared.hold) = Some(problem);
            None
        }
    }
}

// ---- the recalculation thread ---------------------------------------------------

/// One run of the recalculation thread: reload on request, tick, save; the
/// last run (fini) only saves. Returns the period until the next tick.
fn recalc(host: &Host, shared: &Shared, wake: Wake) -> Duration {
    match wake {
        Wake::Stop => save(shared),
        Wake::Reload => {
            reload_config(shared);
            tick(host, shared);
        }
        Wake::Tick => tick(host, shared),
    }
    let period = lock(&shared.engine).as_ref().map(|e| e.config().calc_period_s);
    Duration::from_secs(period.unwrap_or(60).max(1))
}

fn tick(host: &Host, shared: &Shared) {
    let began = std::time::Instant::now();
    let t = now();
    if lock(&shared.engine).is_none() {
        log::error!("{}: no usable config: Tally does nothing until it is fixed and `scontrol reconfigure` is run", shared.config_path.display());
        return;
    }
    retry_held_ledger(shared, t);
    // 0. The runs preempt/tally preempted since (read with no lock held).
    let notes = read_notes(shared);
    // 1. Copy the jobs (and the node table) under the job READ lock:
    //    slurmctld's readers (RPCs, sprio) go on meanwhile.
    let mut copied = host.copy_jobs_and_nodes();
    let views = std::mem::take(&mut copied.jobs);
    let on_draining = std::mem::take(&mut copied.on_draining);
    let ids: Vec<u32> = views.iter().map(|v| v.job_id).collect();
    // 2. Charge, rank and walk the queue with no slurmctld lock held (the
    //    engine's mutex is never taken on Slurm's call paths).
    let plan = current_plan();
    let (report, changes, drain) = {
        let mut guard = lock(&shared.engine);
        let Some(engine) = guard.as_mut() else { return };
        // With [cluster.gpu_types]: the capacity in budget units from the
        // nodes' typed GPUs (re-ranks only when it changed).
        if !copied.nodes.is_empty() && engine.set_gpu_inventory(tally_engine::view::gpu_inventory(&copied.nodes), t) {
            log::info!("GPU types: the cluster's capacity is now {:.1} budget units (from the nodes' GPUs)", engine.ranking().ent.capacity_gpus());
        }
        let fresh = notes.as_ref().map_or(0, |n| engine.note_preempted(n));
        if fresh > 0 {
            log::debug!("{fresh} runs preempted by preempt/tally: their jobs' next runs get their whole contracts");
        }
        let report = engine.tick(t, views, plan.as_deref());
        publish(engine);
        let changes: HashMap<u32, u32> = report.priorities.iter().map(|&(i, p)| (ids[i], p)).collect();
        let begins: HashMap<u32, u64> = report.begins.iter().map(|&(i, b)| (ids[i], b)).collect();
        (report, (changes, begins), engine.drain_plan(t, &on_draining))
    };
    drop(ids);
    // 3. Set the priorities that changed, and the begin times of the long
    //    jobs held or let go, under the job WRITE lock.
    let written = host.write_priorities(&changes.0, &changes.1, t);
    // 4. Host drain: requeue what is past its contract on draining nodes
    //    (job and node WRITE locks, only when there is something to do).
    drain_nodes(host, shared, &drain, t);
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
    if let Some(e) = lock(&shared.engine).as_mut() {
        e.set_tick_time(began.elapsed());
    }
    save(shared);
}

/// preempt/tally's notes of the runs it preempted (beside the ledger); a
/// problem is logged once.
fn read_notes(shared: &Shared) -> Option<tally_engine::preempted::Notes> {
    let path = shared.state_path.as_deref()?.with_file_name(tally_engine::preempted::FILE_NAME);
    let read = tally_engine::preempted::load(&path);
    let mut said = lock(&shared.notes_problem);
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
fn drain_nodes(host: &Host, shared: &Shared, plan: &tally_allocator::DrainPlan, t: u64) {
    let waits: Vec<(u64, u64)> = plan.waiting.iter().map(|w| (w.job_id, w.until_s)).collect();
    let changed = {
        let mut last = lock(&shared.drain_waits);
        let changed = *last != waits;
        *last = waits;
        changed
    };
    let lines = tally_engine::engine::drain_lines(plan, t);
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

/// A ledger that could not be read at start-up: try again, and take what
/// it holds on top of what was charged since.
fn retry_held_ledger(shared: &Shared, t: u64) {
    if lock(&shared.hold).is_none() {
        return;
    }
    let (Some(p), Some(config)) = (&shared.state_path, lock(&shared.engine).as_ref().map(|e| e.config().clone())) else { return };
    if let Some(snapshot) = load_ledger(shared, p, &config, t) {
        if let Some(e) = lock(&shared.engine).as_mut() {
            e.merge(snapshot);
            log::info!("ledger {} read at last and merged", p.display());
        }
    }
}

// ---- the planner thread -----------------------------------------------------------

/// One round of the planner thread: re-plan if `[planner]` is enabled in the
/// config in force, else clear the board. Returns the time to the next round.
fn plan_round(host: &Host, wake: Wake) -> Duration {
    /// How often a disabled planner looks whether a reconfigure enabled it.
    const IDLE: Duration = Duration::from_secs(5);
    if wake == Wake::Stop {
        return IDLE;
    }
    let Some(r) = current_ranking() else { return IDLE };
    let Some(interval) = r.config.planner.filter(|_| r.config.cluster.gpus.is_some()).map(|p| p.interval_s) else {
        if lock(&PLAN).take().is_some() {
            log::info!("planner disabled: the plan bit is cleared at the next recalculation");
        }
        return IDLE;
    };
    let began = std::time::Instant::now();
    let t = now();
    // 1. Copy the jobs out under the read lock.
    let copied = host.copy_placed();
    let (jobs, nodes) = (copied.jobs, copied.nodes);
    // 2. Plan with no lock held.
    let Some(re) = replan(&r, &jobs, &nodes, t) else { return IDLE };
    let board = Arc::new(re.board);
    *lock(&PLAN) = Some(board.clone());
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

/// Write the ledger (outside slurmctld's lock), unless saving is held.
fn save(shared: &Shared) {
    let Some(path) = &shared.state_path else { return };
    if let Some(why) = lock(&shared.hold).as_ref() {
        log::warn!("ledger {} not saved: {why}", path.display());
        return;
    }
    let Some(text) = lock(&shared.engine).as_mut().map(|e| e.state_text(now())) else { return };
    if let Err(e) = statefile::save_atomic(path, &text) {
        log::error!("cannot save the ledger to {}: {e}", path.display());
    }
}

/// `scontrol reconfigure`: a config that validates replaces the one in
/// force (and becomes the active copy job_submit and preempt follow); a
/// broken one changes nothing.
fn reload_config(shared: &Shared) {
    match load_config(&shared.config_path) {
        Some(c) => {
            tally_engine::set_debug(c.debug);
            log::info!("reloaded {}", shared.config_path.display());
            if let Some(p) = &shared.state_path {
                follower::write_active(p, &c.text);
            }
            let mut guard = lock(&shared.engine);
            match guard.as_mut() {
                Some(engine) => {
                    engine.set_config(c, now());
                    publish(engine);
                }
                None => {
                    drop(guard);
                    start_engine(shared, c, now());
                }
            }
        }
        None => log::error!("{}: not reloaded; the config in force stays", shared.config_path.display()),
    }
}

// ---- priority_p_* --------------------------------------------------------------

tally_ffi::export! {
    /// Called at submit, update, requeue, recovery and reconfigure, with the
    /// job write lock held. Reads the last ranking; no IO. On a panic: the
    /// job's current priority (at least 1).
    fn priority_p_set(last_prio: u32, job: JobArg<'_>) -> u32;
    fallback || job.priority().map_or(1, |p| p.max(1));
    {
        let _ = last_prio;
        let Some(v) = job.view() else { return 1 };
        if v.direct_set_prio {
            return v.priority;
        }
        let Some(r) = current_ranking() else { return 1 };
        let p = priority_of(&r, &v, current_plan().as_deref());
        if p.need == tally_allocator::priority::NEED_LANE {
            // A new debug job's lane is judged by this one record; Slurm
            // sets a heterogeneous job's id and an array's tasks only after
            // this call, so the recalculation, which sees them, runs now
            // (at most once a second) and corrects what it must. Slurm
            // starts neither kind at submission, only in a later pass.
            if let Some(w) = lock(&PLUGIN).as_ref().and_then(|r| r.worker.as_ref()) {
                w.poke();
            }
        }
        if r.config.debug {
            log::debug!(
                "job {} ({:?}/{}) priority {} (allocated={}, need={}, level={}, rank={:?})",
                v.job_id,
                v.account,
                v.user,
                p.value,
                p.allocated,
                p.need,
                p.level,
                p.rank
            );
        }
        p.value
    }

    /// `scontrol reconfigure`: the thread reloads tally.toml (IO off this path).
    fn priority_p_reconfig(assoc_clear: bool);
    fallback || ();
    {
        let _ = assoc_clear;
        if let Some(w) = lock(&PLUGIN).as_ref().and_then(|r| r.worker.as_ref()) {
            w.reload();
        }
    }

    /// Slurm's association usage is not Tally's ledger: nothing to do.
    fn priority_p_set_assoc_usage(assoc: *mut slurmdb_assoc_rec_t);
    fallback || ();
    {
        let _ = assoc;
    }

    /// `double priority_p_calc_fs_factor(long double usage_efctv, long double
    /// shares_norm)`: Rust has no `long double`; on x86-64 SysV those arguments
    /// are passed in memory, so a declaration without parameters is
    /// ABI-compatible. Tally's fair share is a ranking, not this formula: 0.
    fn priority_p_calc_fs_factor() -> f64;
    fallback || 0.0;
    {
        0.0
    }

    /// A job ended: poke the recalculation thread (at most one extra run a
    /// second), which charges the run to its end and re-ranks, so the GPUs it
    /// freed go by the fresh order. Called with the job write lock held: it
    /// only signals (the engine's mutex is never waited on here).
    fn priority_p_job_end(job: JobArg<'_>);
    fallback || ();
    {
        let _ = job;
        if let Some(w) = lock(&PLUGIN).as_ref().and_then(|r| r.worker.as_ref()) {
            w.poke();
        }
    }
}

tally_ffi::export_factors_list! {
    /// sprio: one line per pending job (eligible, not held), filtered as
    /// asked and by `PrivateData=jobs`; an empty list on a panic.
    fn priority_p_get_priority_factors_list(want, uid);
    fallback std::ptr::null_mut;
    {
        let Some(host) = Host::lookup() else { return std::ptr::null_mut() };
        let Some(r) = current_ranking() else { return std::ptr::null_mut() };
        let plan = current_plan();
        let t = now();
        let private = conf::private_jobs();
        let shown = |v: &JobView| {
            tally_engine::engine::queue::waiting(v, t)
                && (!private || v.user_id == uid || uid == 0)
                && want.job_ids.as_ref().is_none_or(|w| w.contains(&v.job_id))
                && want.uids.as_ref().is_none_or(|w| w.contains(&v.user_id))
                && match (&want.partitions, &v.partition) {
                    (Some(parts), Some(jp)) => jp.split(',').any(|x| parts.iter().any(|p| p == x)),
                    _ => true,
                }
        };
        let jobs = host.copy_jobs().jobs;
        factors_list(jobs.iter().filter(|v| shown(v)).map(|v| Factors {
            job_id: v.job_id,
            user_id: v.user_id,
            partition: v.partition.clone(),
            columns: walked_priority(&r, v, plan.as_deref()).sprio(),
        }))
    }
}

tally_ffi::export_priority_release_hooks!(thread_start: thread_start);
