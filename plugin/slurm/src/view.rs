//! `job_record_t` → owned [`JobView`]. The only module that reads job
//! pointers; everything after it works on owned values.

use rustc_hash::FxHashSet;
use slurm_sys::{job_desc_msg_t, job_record_t, List, INFINITE, JOB_PENDING, JOB_RUNNING, JOB_STATE_BASE, JOB_SUSPENDED, NICE_OFFSET, NO_VAL};
use std::ffi::{c_char, CStr};
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
}

impl JobView {
    /// A pending job of `user` with no account, comment or partition, 1
    /// GPU, submitted and eligible at 0, priority 1 (not held), no time
    /// limit: the start of a test's or benchmark's job, finished with
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
}

/// Copy a C string; `None` for NULL or empty.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for this call.
pub unsafe fn c_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    (!s.is_empty()).then_some(s)
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
    pub fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(a) = self.0.get(name) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(name);
        self.0.insert(a.clone());
        a
    }

    /// [`c_string`], shared: `None` for NULL or empty.
    ///
    /// # Safety
    /// `p` is NULL or points to a NUL-terminated string valid for this call.
    pub unsafe fn c_name(&mut self, p: *const c_char) -> Option<Arc<str>> {
        if p.is_null() {
            return None;
        }
        // SAFETY: non-NULL and NUL-terminated by the caller's contract.
        let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
        (!s.is_empty()).then(|| self.intern(&s))
    }
}

fn secs(t: i64) -> u64 {
    u64::try_from(t).unwrap_or(0)
}

/// GPUs in a TRES/GRES string: `gres:gpu:2`, `gres/gpu:fake:2`,
/// `gres/gpu=4` (allocated TRES), several entries summed; `None` if no GPU
/// entry is present.
pub fn gpu_count(spec: &str) -> Option<u32> {
    let mut total: Option<u32> = None;
    for entry in spec.split(',') {
        let e = entry.trim();
        let rest = e.strip_prefix("gres:").or_else(|| e.strip_prefix("gres/")).unwrap_or(e);
        let Some(rest) = rest.strip_prefix("gpu") else { continue };
        // `gres/gpu:fake=2` in allocated TRES repeats `gres/gpu=2`: skip typed ones.
        if rest.starts_with(':') && rest.contains('=') {
            continue;
        }
        let count = match rest.chars().next() {
            None => Some(1),
            Some('=') => rest[1..].parse::<u32>().ok(),
            Some(':') => rest.rsplit(':').next().and_then(|c| c.parse::<u32>().ok()).or(Some(1)),
            _ => None, // e.g. `gpus` is not `gpu`
        };
        if let Some(c) = count {
            total = Some(total.unwrap_or(0).saturating_add(c));
        }
    }
    total
}

/// Read one job.
///
/// # Safety
/// `job` is NULL or a valid `job_record_t` of slurmctld, and slurmctld's job
/// lock (read or write) is held for the duration of the call.
pub unsafe fn read_job(job: *const job_record_t) -> Option<JobView> {
    // SAFETY: the caller's contract.
    unsafe { read_job_named(job, &mut Names::new()) }
}

/// [`read_job`], its names shared through `names` (one [`Names`] for a
/// whole copy of the job list).
///
/// # Safety
/// As [`read_job`].
pub unsafe fn read_job_named(job: *const job_record_t, names: &mut Names) -> Option<JobView> {
    // SAFETY: caller's contract.
    let j = unsafe { job.as_ref()? };
    // SAFETY: `details` is NULL or owned by the job (same lock).
    let details = unsafe { j.details.as_ref() };
    // SAFETY: `assoc_ptr` is NULL or a live association while the job lock is held.
    let assoc = unsafe { j.assoc_ptr.as_ref() };
    let state = match j.job_state & JOB_STATE_BASE {
        JOB_PENDING => RunState::Pending,
        JOB_RUNNING => RunState::Running,
        JOB_SUSPENDED => RunState::Suspended,
        _ => RunState::Done,
    };
    // SAFETY (all c_string calls): fields of a live job, NUL-terminated or NULL.
    let user = unsafe { assoc.and_then(|a| names.c_name(a.user)).or_else(|| names.c_name(j.user_name)) }
        .unwrap_or_else(|| names.intern(&j.user_id.to_string()));
    let nodes = details.map(|d| d.min_nodes).filter(|&n| n > 0 && n != NO_VAL).unwrap_or(1);
    // What it holds (or held) once it started: the allocated TRES, which
    // counts every way of asking (--gpus, per node, per task, per socket).
    let alloc = if state != RunState::Pending && j.start_time > 0 { unsafe { c_string(j.tres_alloc_str) } } else { None };
    let tasks = details.map(|d| d.num_tasks).filter(|&n| n > 0 && n != NO_VAL);
    let asked = GpuAsk {
        // SAFETY (c_string): fields of a live job.
        per_job: unsafe { c_string(j.tres_per_job) },
        per_node: unsafe { c_string(j.tres_per_node) },
        per_task: unsafe { c_string(j.tres_per_task) },
        per_socket: unsafe { c_string(j.tres_per_socket) },
        nodes,
        tasks,
    };
    let gpus = alloc.as_deref().and_then(gpu_count).or_else(|| asked.total().ok().flatten()).unwrap_or(0);
    let time_limit_s = match j.time_limit {
        NO_VAL | INFINITE => None,
        m => Some(u64::from(m) * 60),
    };
    Some(JobView {
        job_id: j.job_id,
        state,
        account: unsafe { names.c_name(j.account) },
        user,
        user_id: j.user_id,
        comment: unsafe { c_string(j.comment) },
        partition: unsafe { names.c_name(j.partition) },
        gpus,
        submit_s: details.map_or(0, |d| secs(d.submit_time)),
        begin_s: details.map_or(0, |d| secs(d.begin_time)),
        start_s: secs(j.start_time),
        end_s: secs(j.end_time),
        nice: details.map_or(0, |d| i64::from(d.nice) - i64::from(NICE_OFFSET)),
        time_limit_s,
        priority: j.priority,
        direct_set_prio: j.direct_set_prio != 0,
        restarts: j.restart_cnt,
        preempt_start_s: details.map_or(0, |d| secs(d.preempt_start_time)),
        pre_sus_s: secs(j.pre_sus_time),
        suspend_s: secs(j.suspend_time),
        het_job_id: j.het_job_id,
    })
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
}

/// The node indices (bits of `node_bitmap`, the order of slurmctld's node
/// table) a job runs on; empty when it holds none.
///
/// # Safety
/// `job` is NULL or a valid `job_record_t` of slurmctld, and slurmctld's job
/// lock (read or write) is held for the duration of the call.
pub unsafe fn job_nodes(job: *const job_record_t) -> Vec<u32> {
    // SAFETY: caller's contract.
    let Some(j) = (unsafe { job.as_ref() }) else { return Vec::new() };
    let bits = j.node_bitmap;
    if bits.is_null() {
        return Vec::new();
    }
    // SAFETY: a live bitmap of the job (same lock); bit_size/bit_test only read it.
    let n = unsafe { slurm_sys::bit_size(bits) }.max(0);
    (0..n).filter(|&i| unsafe { slurm_sys::bit_test(bits, i) } != 0).map(|i| i as u32).collect()
}

/// Read a submission or update request.
///
/// # Safety
/// `desc` is NULL or a valid `job_desc_msg_t` for the duration of the call.
pub unsafe fn read_job_desc(desc: *const job_desc_msg_t) -> Option<crate::submit::SubmitView> {
    // SAFETY: caller's contract.
    let d = unsafe { desc.as_ref()? };
    let nodes = if d.min_nodes == 0 || d.min_nodes == NO_VAL { 1 } else { d.min_nodes };
    // SAFETY (c_string): fields of the request, NUL-terminated or NULL.
    let gpus = GpuAsk {
        per_job: unsafe { c_string(d.tres_per_job) },
        per_node: unsafe { c_string(d.tres_per_node) },
        per_task: unsafe { c_string(d.tres_per_task) },
        per_socket: unsafe { c_string(d.tres_per_socket) },
        nodes,
        tasks: Some(d.num_tasks).filter(|&n| n > 0 && n != NO_VAL),
    };
    // An empty comment is a comment (`scontrol update job … Comment=`):
    // NULL only when the request does not touch it.
    let comment = if d.comment.is_null() {
        None
    } else {
        // SAFETY: non-NULL, NUL-terminated string of the request.
        Some(unsafe { CStr::from_ptr(d.comment) }.to_string_lossy().into_owned())
    };
    Some(crate::submit::SubmitView {
        comment,
        account: unsafe { c_string(d.account) },
        time_limit_s: match d.time_limit {
            NO_VAL | INFINITE => None,
            m => Some(u64::from(m) * 60),
        },
        gpus: gpus.total(),
    })
}

/// Every job record of a slurmctld `List`.
///
/// # Safety
/// `list` is NULL or a `List` of `job_record_t` (slurmctld's `job_list`),
/// and the job lock is held until the returned pointers are no longer used.
pub unsafe fn job_pointers(list: List) -> Vec<*mut job_record_t> {
    let mut out = Vec::new();
    if list.is_null() {
        return out;
    }
    // SAFETY: a valid List; the iterator is destroyed before returning.
    unsafe {
        let it = slurm_sys::list_iterator_create(list);
        if it.is_null() {
            return out;
        }
        loop {
            let p = slurm_sys::list_next(it);
            if p.is_null() {
                break;
            }
            out.push(p.cast::<job_record_t>());
        }
        slurm_sys::list_iterator_destroy(it);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_shared() {
        let mut names = Names::new();
        let a = names.intern("nlp");
        let b = names.intern(&String::from("nlp"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &names.intern("vision")));
        let s = std::ffi::CString::new("nlp").unwrap();
        // SAFETY: a NUL-terminated string, alive for the calls.
        assert!(Arc::ptr_eq(&a, &unsafe { names.c_name(s.as_ptr()) }.unwrap()));
        let empty = std::ffi::CString::new("").unwrap();
        // SAFETY: as above; NULL is allowed.
        assert_eq!(unsafe { names.c_name(empty.as_ptr()) }, None);
        assert_eq!(unsafe { names.c_name(std::ptr::null()) }, None);
    }

    #[test]
    fn gpu_strings() {
        let cases: &[(&str, Option<u32>)] = &[
            ("gres:gpu:2", Some(2)),
            ("gres/gpu:2", Some(2)),
            ("gres:gpu:fake:4", Some(4)),
            ("gres:gpu", Some(1)),
            ("gres:gpu:a100:2,gres:gpu:v100:1", Some(3)),
            ("cpu=2,mem=100M,node=1,billing=2,gres/gpu=2,gres/gpu:fake=2", Some(2)),
            ("gres:mps:100", None),
            ("cpu=4,mem=1G", None),
            ("", None),
        ];
        for (s, want) in cases {
            assert_eq!(gpu_count(s), *want, "{s}");
        }
    }
}
