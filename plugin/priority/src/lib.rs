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
//! `Ranking` behind a mutex held for a clone, the long jobs held or let go
//! since the last tick behind another) and never do IO or wait on the
//! engine. `priority_p_set` also holds a long job that cannot checkpoint
//! by its begin time when the tick's rule would (`Boards::long_at_submit`). The recalculation thread, started only inside slurmctld once
//! its jobs are recovered (in `init` on 22.05, in `priority_p_thread_start`
//! from 24.11: a backup slurmctld taking over calls `init` before it
//! recovers them) and joined in `fini`, copies the jobs under slurmctld's job
//! *read* lock, charges the ledger, re-ranks and walks the queue with no
//! slurmctld lock held, then takes the job write lock only to set the
//! priorities that changed (of jobs still pending, not held, not set by an
//! admin) and `last_job_update`, and saves the state file with no lock held.
//! The engine's mutex is never taken while holding slurmctld's lock. The
//! threads' work is `tally_engine::recalc` (`Recalc`, `plan_round`),
//! tested there against a job list in memory: this crate is the exports
//! and their wiring to `tally_ffi::host::Host`.
//!
//! With `[planner] enabled = true`, a second thread re-plans every
//! `planner.interval`: it copies the jobs (and running jobs' nodes) under
//! the job *read* lock, plans with the lock released
//! (`tally_engine::planner::replan`, fast mode, milliseconds), publishes the
//! `PlanBoard` `priority_p_set` reads, then takes the write lock only to
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
use std::ffi::c_int;
use std::sync::{Arc, Mutex};
use tally_engine::engine::{job_seen_alone, priority_of_job, walked_priority, Engine};
use tally_engine::follower::{initial_config, Start};
use tally_engine::guard::lock;
use tally_engine::now;
use tally_engine::recalc::{plan_round, Boards, Recalc};
use tally_engine::statefile;
use tally_engine::view::JobView;
use tally_engine::worker::Worker;
use tally_ffi::abi::{conf, Factors, JobArg, SUCCESS};
use tally_ffi::hooks::factors_list;
use tally_ffi::host::Host;
use tally_ffi::slurm_log::{self, SlurmLogger};

// ---- identity ------------------------------------------------------------

tally_ffi::plugin_identity!("Tally fair-share priority", "priority/tally");

static LOGGER: SlurmLogger = SlurmLogger { prefix: "priority/tally" };

// ---- state -----------------------------------------------------------------

/// The threads, once started.
#[derive(Debug)]
struct Running {
    worker: Option<Worker>,
    planner: Option<Worker>,
}

static PLUGIN: Mutex<Option<Running>> = Mutex::new(None);
/// The last ranking and plan board, which `priority_p_set` and sprio read:
/// swapped by the threads, never waited on.
static BOARDS: Boards = Boards::new();
/// The threads' start, from `init` until slurmctld has recovered its jobs
/// (`priority_p_thread_start`, see `tally_ffi::release::THREADS_AT_THREAD_START`).
static DEFERRED: Mutex<Option<(Host, Arc<Recalc>)>> = Mutex::new(None);

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
                *lock(&BOARDS.ranking) = Some(Engine::new(c, None, t).ranking());
            }
            return SUCCESS;
        };
        let state_path = conf::state_save_location().map(|d| statefile::path_in(std::path::Path::new(&d)));
        let recalc = Arc::new(Recalc::new(config_path, state_path, conf::euid(), conf::preempt_window_s(), &BOARDS));
        recalc.begin(t);
        if tally_ffi::release::THREADS_AT_THREAD_START {
            // slurmctld calls priority_p_thread_start once its jobs are
            // recovered: a backup taking over calls init before that.
            *lock(&DEFERRED) = Some((host, recalc));
        } else {
            start_threads(host, recalc);
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
        *lock(&BOARDS.plan) = None;
        SUCCESS
    }
}

/// Start the recalculation and planner threads. The first tick charges
/// what every job in `job_list` ran since its mark and forgets the marks of
/// jobs not there: it must see slurmctld's recovered jobs, never the empty
/// list a backup has before it loads them (the runs of every job would be
/// charged again from their starts).
fn start_threads(host: Host, recalc: Arc<Recalc>) {
    let worker = Worker::start("tally-recalc", "the recalculation thread", move |wake| recalc.run(&host, wake, now()));
    let planner = Worker::start("tally-plan", "the planner thread", move |wake| plan_round(&host, &BOARDS, wake, now()));
    *lock(&PLUGIN) = Some(Running { worker, planner });
}

/// `priority_p_thread_start` (24.11 on): slurmctld is in control with its
/// jobs recovered.
fn thread_start() {
    let deferred = lock(&DEFERRED).take();
    if let Some((host, recalc)) = deferred {
        start_threads(host, recalc);
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
        let Some(r) = BOARDS.ranking() else { return 1 };
        let j = job_seen_alone(&r.config, &v);
        let p = priority_of_job(&r, &j, BOARDS.plan().as_deref());
        // A long job that cannot checkpoint, waiting now: held from now
        // if the tick's rule holds it (backfill would start it first).
        if let Some(until) = BOARDS.long_at_submit(&r, &v, &j, now()) {
            if job.hold_until(until) && r.config.debug {
                log::debug!("job {} held until {until} (a long job while another team is owed)", v.job_id);
            }
        }
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
        let Some(r) = BOARDS.ranking() else { return std::ptr::null_mut() };
        let plan = BOARDS.plan();
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
