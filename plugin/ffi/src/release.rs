//! What differs between the Slurm releases Tally supports (22.05.8,
//! 24.11.5, 25.11.7 and 26.05.3), in one place. slurm-sys picks the
//! bindings; everything here and in [`hooks`](crate::hooks) (the exports whose C
//! prototype differs) is `cfg(slurm = …)` (set by this crate's build.rs
//! from slurm-sys's), and no other file of the plugins names a release.
//!
//! | | 22.05 | 24.11 | 25.11 | 26.05 |
//! |---|---|---|---|---|
//! | `job_modify` | `(desc, job, uid)` | `(desc, job, uid, char **err_msg)` | as 24.11 | as 24.11 |
//! | `priority_p_get_priority_factors_list` | `(request, uid)`: the plugin filters by job, user and partition | `(uid)`: sprio filters on its side | as 24.11 | as 24.11 |
//! | `priority_factors_object_t` | the factors inline; `partition` not freed by Slurm (one interned copy per name) | the factors in an xmalloc'd `priority_factors_t` (`prio_factors`), freed with the object, `partition` too (an `xstrdup` copy) | as 24.11 | as 24.11, the job's id in a `slurm_step_id_t step_id` |
//! | priority plugin symbols | six | eight: also `priority_p_recover` and `priority_p_thread_start` | seven (`priority_p_calc_fs_factor` no longer asked; exported, unused) | as 25.11 |
//! | preempt plugin's answers | `preempt_p_get_data(job, kind, void *data)`: ENABLED, MODE, PRIO, GRACE_TIME | as 22.05 | `preempt_p_get_grace_time`, `preempt_p_get_mode`, `preempt_p_get_prio`, each `(job)` | as 25.11 |
//! | slurmctld's requeue (host drain) | `job_requeue(uid, job_id, msg, preempt, flags)` | as 22.05 | `job_requeue_internal(uid, job_ptr, preempt, flags)` | as 25.11 |
//! | `slurmctld_lock_t` | five locks | five | five | six (`select_node`; Tally leaves it unlocked) |
//! | `List`, `struct job_details`, `bit_test` | as named | `list_t *`, `job_details_t`, `slurm_bit_test` (slurm-sys aliases them) | as 24.11 | as 24.11 |
//! | `plugin_version` | `0x160508`, exactly | `0x180b05`, exactly | `0x190b07`, exactly | `0x1a0503`, exactly |
//! | a backup taking over (`run_backup`) | loads the priority plugin under the config write lock, its jobs then recovered | loads it (`init`) before it recovers its jobs, no lock held; `priority_p_thread_start` once they are: Tally's threads start there ([`THREADS_AT_THREAD_START`]) | as 24.11 | as 24.11 |
//! | `scontrol reconfigure` | reloads in place (no `fini`) | restarts slurmctld (`fini`, then a new process) | as 24.11 | as 24.11 |
//! | whole nodes (`job_details.whole_node`, [`whole_node`]) | a value: `1` = `WHOLE_NODE_REQUIRED` (`--exclusive`, or set by a partition's `OverSubscribe=EXCLUSIVE` when the job is scheduled), `2` user, `3` mcs | flags: the bit `WHOLE_NODE_REQUIRED` (`0x01`; user `0x02`, mcs `0x04`, topo `0x08`) | as 24.11 | as 24.11 |
//!
//! The job record's fields Tally reads keep their names and meaning; their
//! offsets differ and are asserted in slurm-sys.

/// The release the plugins are built for (`"22.05"`, `"24.11"`, `"25.11"`
/// or `"26.05"`).
pub const RELEASE: &str = slurm_sys::RELEASE;

/// Whether slurmctld calls `priority_p_thread_start` once it has recovered
/// its state (24.11 on): the priority plugin's threads start there. Before
/// (22.05) they start in `init`, which slurmctld calls with its jobs loaded
/// or under its config write lock (`read_slurm_conf`'s first
/// `priority_g_set` loads the plugin). From 24.11 a backup slurmctld taking
/// over calls `init` before it recovers the jobs, with no lock held
/// (`run_backup`): a thread started there can walk the empty `job_list`.
#[cfg(slurm = "22.05")]
pub const THREADS_AT_THREAD_START: bool = false;
#[cfg(not(slurm = "22.05"))]
pub const THREADS_AT_THREAD_START: bool = true;

/// Requeue one running job with slurmctld's requeue function (`f`, looked
/// up by [`slurm_sys::slurmctld_only::JOB_REQUEUE`]) as `scontrol requeue`
/// does: as SlurmUser `uid`, no message to answer, not a preemption. Until
/// 24.11 by job id, from 25.11 by record.
///
/// # Safety
/// Inside slurmctld, with the job and node write locks and the federation
/// read lock held; `job` is a live job record of `job_list`.
pub(crate) unsafe fn requeue(
    f: slurm_sys::slurmctld_only::JobRequeueFn,
    uid: slurm_sys::uid_t,
    job: *mut slurm_sys::job_record_t,
) -> std::ffi::c_int {
    #[cfg(any(slurm = "22.05", slurm = "24.11"))]
    // SAFETY: caller's contract; the id read from the live record.
    return unsafe { f(uid, (*job).job_id, std::ptr::null_mut(), false, 0) };
    #[cfg(not(any(slurm = "22.05", slurm = "24.11")))]
    // SAFETY: caller's contract.
    return unsafe { f(uid, job, false, 0) };
}

/// Does `details->whole_node` give the job whole nodes (and so every GPU
/// of each: Slurm's `gres_ctld_job_alloc_whole_node` (22.05),
/// `gres_stepmgr_job_alloc_whole_node` (24.11 and later))? Until 24.11 a
/// value, `WHOLE_NODE_MCS` being 3 (so not a bit test); from 24.11 flags,
/// tested by the bit as cons_tres tests it.
pub fn whole_node(word: u8) -> bool {
    #[cfg(slurm = "22.05")]
    return u32::from(word) == slurm_sys::WHOLE_NODE_REQUIRED;
    #[cfg(not(slurm = "22.05"))]
    return u32::from(word) & slurm_sys::WHOLE_NODE_REQUIRED != 0;
}
