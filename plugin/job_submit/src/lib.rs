//! `job_submit/tally`: contracts checked at the door.
//!
//! slurm.conf: `JobSubmitPlugins=tally`. On submit (`job_submit`) and update
//! (`job_modify`) the request's comment, time limit, account and GPU count go
//! through `tally_engine::submit::check`: a bad contract is refused with a
//! message sbatch prints (`sbatch: error: tally: contract=9h exceeds the 8h
//! maximum …`) and nothing is created; an accepted comment is rewritten in
//! its one spelling, and a warning (a job that cannot checkpoint, longer
//! than any contract, with `long_jobs = "warn"`) reaches sbatch with the
//! success (`job_submit_user_msg`). The config is followed from disk by a
//! thread (`Follower`), never read on the submit path.
//!
//! Error codes: a bad or missing contract → `ESLURM_INVALID_TIME_VALUE`,
//! longer than the time limit, or not resumable and longer than the
//! contract maximum with `long_jobs = "reject"` → `ESLURM_INVALID_TIME_LIMIT`, allocated in an
//! account without budget → `ESLURM_INVALID_ACCOUNT`, GPUs not a power of
//! two → `ESLURM_INVALID_GRES`. `job_modify` has no message channel in 22.05:
//! the message goes to slurmctld's log and scontrol prints the code's text.

// No unsafe code, and so no `#[no_mangle]` by hand: every export is
// defined through `tally_ffi::export!`, behind the panic guard.
#![forbid(unsafe_code)]

use std::ffi::c_int;
use std::sync::{Arc, Mutex};
use tally_allocator::{Allocation, Funded};
use tally_config::Config;
use tally_engine::follower::{self, Follower};
use tally_engine::guard::lock;
use tally_engine::statefile;
use tally_engine::submit::{check, check_update, never_ran, Refusal, SubmitView, UpdateView};
use tally_ffi::abi::{conf, DescArg, ErrMsgArg, SUCCESS};
use tally_ffi::host::Host;
use tally_ffi::slurm_log::{self, SlurmLogger};

tally_ffi::plugin_identity!("Tally contract checks", "job_submit/tally");

static LOGGER: SlurmLogger = SlurmLogger { prefix: "job_submit/tally" };
static FOLLOWER: Mutex<Option<Follower>> = Mutex::new(None);

fn code(r: Refusal) -> c_int {
    (match r {
        Refusal::Contract => slurm_sys::ESLURM_INVALID_TIME_VALUE,
        Refusal::TimeLimit => slurm_sys::ESLURM_INVALID_TIME_LIMIT,
        Refusal::Account => slurm_sys::ESLURM_INVALID_ACCOUNT,
        Refusal::Gpus => slurm_sys::ESLURM_INVALID_GRES,
        Refusal::Started => slurm_sys::ESLURM_ACCESS_DENIED,
    }) as c_int
}

/// A submission or update let in after a panic (fail-open), said loudly.
fn unchecked(what: &str) -> c_int {
    log::error!("{what}");
    SUCCESS
}

/// The config in force; without one, `None` and a log line saying the
/// request (`what`) goes in unchecked (fail-open).
fn config_or(what: impl FnOnce() -> String) -> Option<(Arc<Config>, Arc<Allocation>)> {
    let config = lock(&FOLLOWER).as_ref().and_then(|f| f.allocated());
    if config.is_none() {
        log::error!("no usable config: {} accepted unchecked", what());
    }
    config
}

tally_ffi::export! {
    /// Follow the config in force: priority/tally's active copy, the last
    /// good config (a thread inside slurmctld only), as preempt/tally does.
    fn init() -> c_int;
    fallback || SUCCESS;
    {
        slurm_log::init(&LOGGER);
        let state = conf::state_save_location().map(|d| statefile::path_in(std::path::Path::new(&d)));
        follower::install(&FOLLOWER, state, false, Host::lookup().is_some());
        SUCCESS
    }

    fn fini() -> c_int;
    fallback || SUCCESS;
    {
        follower::uninstall(&FOLLOWER);
        SUCCESS
    }

    /// A submission. On refusal sbatch gets the message through `err_msg`.
    /// A bug of ours, or no usable config, must not stop users from
    /// submitting: accept and log (fail-open; the guard logs a panic).
    fn job_submit(job_desc: DescArg<'_>, submit_uid: u32, err_msg: ErrMsgArg<'_>) -> c_int;
    fallback || unchecked(&format!("job of uid {submit_uid} accepted UNCHECKED (internal error above): its contract was not verified"));
    {
        let Some((f, alloc)) = config_or(|| format!("job of uid {submit_uid}")) else { return SUCCESS };
        let Some(view) = job_desc.view() else { return SUCCESS };
        match check(&f, &Funded::new(&f.tree, &alloc), &view) {
            Ok(accepted) => {
                if let Some(comment) = &accepted.comment {
                    job_desc.set_comment(comment);
                }
                if let Some(nodes) = &accepted.exclude_nodes {
                    // The debug capacity: not for this job.
                    job_desc.exclude_nodes(nodes, None);
                }
                if let Some(w) = accepted.warning {
                    // Slurm hands a message set on success to sbatch, which
                    // prints it (`job_submit_user_msg`).
                    err_msg.set(&w);
                }
                SUCCESS
            }
            Err(r) => {
                log::info!("refused a job of uid {submit_uid}: {}", r.message);
                err_msg.set(&r.message);
                code(r.refusal)
            }
        }
    }
}

tally_ffi::export_job_modify! {
    /// An update (`scontrol update job …`): see `submit::check_update` (a
    /// started job's contract is fixed; a pending job's new comment, time
    /// limit or GPUs are judged like a submission).
    fn job_modify(job_desc, job_ptr, submit_uid, err_msg);
    fallback || unchecked(&format!("update by uid {submit_uid} accepted UNCHECKED (internal error above)"));
    {
        let Some((config, alloc)) = config_or(|| format!("update by uid {submit_uid}")) else { return SUCCESS };
        let (Some(req), Some(job)) = (job_desc.view(), job_ptr.view()) else {
            return SUCCESS;
        };
        let pending = never_ran(&job);
        let u = UpdateView {
            req,
            new_limit: job_desc.sets_time_limit(),
            job: SubmitView {
                comment: job.comment.clone(),
                account: job.account.as_deref().map(str::to_string),
                time_limit_s: job.time_limit_s,
                gpus: Ok(Some(job.gpus)),
                exclusive: job.exclusive,
                nodes: job.nodes,
            },
            pending,
        };
        match check_update(&config, &Funded::new(&config.tree, &alloc), &u) {
            Ok(accepted) => {
                if let (Some(comment), Some(_)) = (&accepted.comment, &u.req.comment) {
                    job_desc.set_comment(comment);
                }
                if let (Some(nodes), true) = (&accepted.exclude_nodes, pending) {
                    job_desc.exclude_nodes(nodes, job_ptr.excluded_nodes().as_deref());
                }
                if let Some(w) = accepted.warning {
                    log::info!("job update by uid {submit_uid}: {w}");
                }
                SUCCESS
            }
            Err(r) => {
                log::info!("refused an update of job {} by uid {submit_uid}: {}", job.job_id, r.message);
                err_msg.set(&r.message);
                code(r.refusal)
            }
        }
    }
}
