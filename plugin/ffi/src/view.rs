//! `job_record_t` and `job_desc_msg_t` → owned values
//! ([`JobView`], [`SubmitView`]). With [`crate::abi`] and [`crate::host`],
//! the only code that dereferences Slurm's pointers; everything after it
//! (`tally_engine`) works on owned values.

use slurm_sys::{
    job_desc_msg_t, job_record_t, node_record_t, part_record_t, List, INFINITE, JOB_PENDING, JOB_RUNNING, JOB_STATE_BASE, JOB_SUSPENDED, NICE_OFFSET,
    NODE_STATE_BASE, NODE_STATE_DOWN, NODE_STATE_FLAG_DRAIN, NODE_STATE_FLAG_FAIL, NODE_STATE_FLAG_MAINT, NODE_STATE_FLAG_NO_RESPOND,
    NODE_STATE_FLAG_POWERED_DOWN, NODE_STATE_FLAG_POWERING_DOWN, NODE_STATE_FLAG_REBOOT_ISSUED, NODE_STATE_FLAG_RES, NODE_STATE_FUTURE,
    NODE_STATE_UNKNOWN, NO_VAL,
};
use std::ffi::{c_char, CStr};
use std::sync::Arc;
use tally_allocator::MINUTE_S;
use tally_engine::submit::SubmitView;
use tally_engine::view::{gpu_count, gpu_type, GpuAsk, JobView, Names, NodeState, NodeView, RunState};

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

/// [`c_string`], shared through `names`: `None` for NULL or empty.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for this call.
pub unsafe fn c_name(names: &mut Names, p: *const c_char) -> Option<Arc<str>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    (!s.is_empty()).then(|| names.intern(&s))
}

/// The four TRES request strings (per job, node, task, socket), copied.
///
/// # Safety
/// Each is NULL or a NUL-terminated string valid for this call.
unsafe fn tres(fields: [*const c_char; 4]) -> [Option<String>; 4] {
    // SAFETY: the caller's contract.
    fields.map(|p| unsafe { c_string(p) })
}

fn secs(t: i64) -> u64 {
    u64::try_from(t).unwrap_or(0)
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
    let user = unsafe { assoc.and_then(|a| c_name(names, a.user)).or_else(|| c_name(names, j.user_name)) }
        .unwrap_or_else(|| names.intern(&j.user_id.to_string()));
    let nodes = details.map(|d| d.min_nodes).filter(|&n| n > 0 && n != NO_VAL).unwrap_or(1);
    // What it holds (or held) once it started: the allocated TRES, which
    // counts every way of asking (--gpus, per node, per task, per socket).
    // (`tres_fmt_alloc_str`, `gres/gpu=4,gres/gpu:h100=4`: the names; the
    // unformatted `tres_alloc_str` has TRES ids.)
    let alloc = if state != RunState::Pending && j.start_time > 0 { unsafe { c_string(j.tres_fmt_alloc_str) } } else { None };
    let tasks = details.map(|d| d.num_tasks).filter(|&n| n > 0 && n != NO_VAL);
    // SAFETY: fields of a live job.
    let asked = GpuAsk::new(unsafe { tres([j.tres_per_job, j.tres_per_node, j.tres_per_task, j.tres_per_socket]) }, nodes, tasks);
    let gpus = alloc.as_deref().and_then(gpu_count).or_else(|| asked.total().ok().flatten()).unwrap_or(0);
    // The type of its GPUs: allocated (with typed AccountingStorageTRES),
    // else asked for; `Host::copy` fills in a running job's nodes' type.
    let gpu_type = alloc.as_deref().and_then(gpu_type).or_else(|| asked.gpu_type()).map(|t| names.intern(t));
    let time_limit_s = match j.time_limit {
        NO_VAL | INFINITE => None,
        m => Some(u64::from(m) * MINUTE_S),
    };
    // Whole nodes (`--exclusive`, or a partition's OverSubscribe=EXCLUSIVE
    // once Slurm tried to schedule it): every GPU of its nodes.
    let exclusive = details.is_some_and(|d| crate::release::whole_node(d.whole_node));
    // An array's record of its pending tasks (`array_task_id` NO_VAL): how
    // many it still holds; a task split off it is a job of its own.
    // SAFETY: `array_recs` is NULL or owned by the job (same lock).
    let array_tasks = if j.array_task_id == NO_VAL { unsafe { j.array_recs.as_ref() }.map_or(1, |a| a.task_cnt.max(1)) } else { 1 };
    Some(JobView {
        job_id: j.job_id,
        state,
        account: unsafe { c_name(names, j.account) },
        user,
        user_id: j.user_id,
        comment: unsafe { c_string(j.comment) },
        partition: unsafe { c_name(names, j.partition) },
        gpus,
        gpu_type,
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
        nodes,
        exclusive,
        node_gpus: None,
        array_tasks,
    })
}

/// How many jobs ahead [`read_jobs`] asks the memory for a record, and
/// (half as far) for what the record points to.
const AHEAD: usize = 16;

/// Ask the memory for the cache line at `p` (a hint: never faults, no
/// effect on what any read returns).
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address (SSE is
    // baseline on x86_64).
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Every 64-byte line of `*p`'s first `len` bytes.
#[inline(always)]
fn prefetch_lines(p: *const u8, len: usize) {
    for off in (0..len).step_by(64) {
        prefetch(p.wrapping_add(off));
    }
}

/// What [`read_job_named`] reads that a job record points to: its details,
/// association and strings.
///
/// # Safety
/// As [`read_job`] (the record itself is read, not what it points to).
#[inline(always)]
unsafe fn prefetch_referenced(job: *const job_record_t) {
    // SAFETY: the caller's contract.
    let Some(j) = (unsafe { job.as_ref() }) else { return };
    if !j.details.is_null() {
        use slurm_sys::job_details as D;
        use std::mem::offset_of;
        let d = j.details.cast::<u8>();
        for off in [
            offset_of!(D, begin_time),
            offset_of!(D, min_nodes),
            offset_of!(D, num_tasks),
            offset_of!(D, submit_time),
            offset_of!(D, preempt_start_time),
            offset_of!(D, whole_node),
        ] {
            prefetch(d.wrapping_add(off));
        }
    }
    if !j.assoc_ptr.is_null() {
        // SAFETY: in bounds of a live association (only the address is formed).
        prefetch(unsafe { std::ptr::addr_of!((*j.assoc_ptr).user) });
    }
    for s in [j.account, j.comment, j.partition, j.user_name, j.tres_per_job, j.tres_per_node, j.tres_per_task, j.tres_per_socket] {
        prefetch(s);
    }
}

/// [`read_job_named`] of every job in `jobs`, in order, each given to
/// `each` with its record: the same views, read with the memory asked for
/// ahead (a record `AHEAD` jobs ahead, what it points to half as far), as
/// slurmctld's records and strings lie anywhere in its heap and a copy
/// otherwise waits on every one of them in turn.
///
/// # Safety
/// Every pointer is NULL or a valid `job_record_t` of slurmctld, and the job
/// lock is held for the duration of the call.
pub unsafe fn read_jobs(jobs: &[*mut job_record_t], names: &mut Names, mut each: impl FnMut(*mut job_record_t, JobView)) {
    let size = std::mem::size_of::<job_record_t>();
    for &p in jobs.iter().take(AHEAD) {
        prefetch_lines(p.cast::<u8>(), size);
    }
    for (i, &p) in jobs.iter().enumerate() {
        if let Some(&far) = jobs.get(i + AHEAD) {
            prefetch_lines(far.cast::<u8>(), size);
        }
        if let Some(&near) = jobs.get(i + AHEAD / 2) {
            // SAFETY: the caller's contract.
            unsafe { prefetch_referenced(near) };
        }
        // SAFETY: the caller's contract.
        if let Some(view) = unsafe { read_job_named(p, names) } {
            each(p, view);
        }
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

/// A node state word (`node_state`: a base state ORed with flags) in the
/// terms Tally acts on.
pub fn node_state(word: u32) -> NodeState {
    let base = word & NODE_STATE_BASE;
    NodeState {
        down: base == NODE_STATE_DOWN || base == NODE_STATE_FUTURE || base == NODE_STATE_UNKNOWN,
        drain: word & (NODE_STATE_FLAG_DRAIN | NODE_STATE_FLAG_FAIL) != 0,
        reserved: word & NODE_STATE_FLAG_RES != 0,
        unavailable: word
            & (NODE_STATE_FLAG_POWERED_DOWN
                | NODE_STATE_FLAG_POWERING_DOWN
                | NODE_STATE_FLAG_NO_RESPOND
                | NODE_STATE_FLAG_MAINT
                | NODE_STATE_FLAG_REBOOT_ISSUED)
            != 0,
    }
}

/// Every node of slurmctld's node table (holes and defunct slots skipped).
///
/// # Safety
/// `table` is NULL or slurmctld's `node_record_table_ptr` with `count`
/// slots, and the node lock (read or write) and partition read lock are
/// held for the duration of the call.
pub unsafe fn read_nodes(table: *const *mut node_record_t, count: i32, names: &mut Names) -> Vec<NodeView> {
    let mut out = Vec::new();
    if table.is_null() {
        return out;
    }
    for i in 0..count.max(0) as usize {
        // SAFETY: `count` slots, each NULL or a live node under the lock.
        let Some(n) = (unsafe { (*table.add(i)).as_ref() }) else { continue };
        // SAFETY (c_name/c_string): the node's strings, NUL-terminated or NULL.
        let Some(name) = (unsafe { c_name(names, n.name) }) else { continue };
        // The configured GRES (the node's own `gres` is for state save only).
        // SAFETY: `config_ptr` is NULL or the node's config record.
        let gres = unsafe { n.config_ptr.as_ref() }.and_then(|c| unsafe { c_string(c.gres) });
        let gpus = gres
            .as_deref()
            .map(|g| tally_allocator::tres::gpu_types(g).into_iter().map(|(t, c)| (t.map(|t| names.intern(t)), c)).collect())
            .unwrap_or_default();
        let mut partitions = Vec::new();
        if !n.part_pptr.is_null() {
            for k in 0..usize::from(n.part_cnt) {
                // SAFETY: `part_cnt` pointers to live partitions (partition read lock).
                let part = unsafe { (*n.part_pptr.add(k)).cast::<part_record_t>().as_ref() };
                if let Some(p) = part.and_then(|p| unsafe { c_name(names, p.name) }) {
                    partitions.push(p);
                }
            }
        }
        out.push(NodeView { index: i as u32, name, gpus, state: node_state(n.node_state), reason: unsafe { c_string(n.reason) }, partitions });
    }
    out
}

/// Read a submission or update request.
///
/// # Safety
/// `desc` is NULL or a valid `job_desc_msg_t` for the duration of the call.
pub unsafe fn read_job_desc(desc: *const job_desc_msg_t) -> Option<SubmitView> {
    // SAFETY: caller's contract.
    let d = unsafe { desc.as_ref()? };
    let nodes = if d.min_nodes == 0 || d.min_nodes == NO_VAL { 1 } else { d.min_nodes };
    let tasks = Some(d.num_tasks).filter(|&n| n > 0 && n != NO_VAL);
    // SAFETY: fields of the request, NUL-terminated or NULL.
    let gpus = GpuAsk::new(unsafe { tres([d.tres_per_job, d.tres_per_node, d.tres_per_task, d.tres_per_socket]) }, nodes, tasks);
    // An empty comment is a comment (`scontrol update job … Comment=`):
    // NULL only when the request does not touch it.
    let comment = if d.comment.is_null() {
        None
    } else {
        // SAFETY: non-NULL, NUL-terminated string of the request.
        Some(unsafe { CStr::from_ptr(d.comment) }.to_string_lossy().into_owned())
    };
    Some(SubmitView {
        comment,
        account: unsafe { c_string(d.account) },
        time_limit_s: match d.time_limit {
            NO_VAL | INFINITE => None,
            m => Some(u64::from(m) * MINUTE_S),
        },
        gpus: gpus.total(),
        // `--exclusive` sets `shared` to JOB_SHARED_NONE (0); NO_VAL16 when not asked.
        exclusive: d.shared == 0,
        nodes,
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
    fn the_state_word_and_the_names_agree() {
        use slurm_sys::{NODE_STATE_ALLOCATED, NODE_STATE_IDLE, NODE_STATE_MIXED};
        let cases: [(u32, &str, &[&str]); 9] = [
            (NODE_STATE_IDLE, "idle", &[]),
            (NODE_STATE_MIXED, "mixed", &[]),
            (NODE_STATE_ALLOCATED, "allocated", &[]),
            (NODE_STATE_DOWN, "down", &[]),
            (NODE_STATE_FUTURE, "future", &[]),
            (NODE_STATE_IDLE | NODE_STATE_FLAG_DRAIN, "idle", &["DRAIN"]),
            (NODE_STATE_MIXED | NODE_STATE_FLAG_RES, "mixed", &["RESERVED"]),
            (NODE_STATE_IDLE | NODE_STATE_FLAG_NO_RESPOND, "idle", &["NOT_RESPONDING"]),
            (NODE_STATE_IDLE | NODE_STATE_FLAG_REBOOT_ISSUED, "idle", &["REBOOT_ISSUED"]),
        ];
        for (word, state, flags) in cases {
            assert_eq!(node_state(word), NodeState::from_names(state, flags.iter().copied()), "{state} {flags:?}");
        }
    }

    #[test]
    fn reading_ahead_gives_the_same_views() {
        use std::ffi::CString;
        // Records with and without details, association, strings; and a NULL.
        let text = |t: &str| CString::new(t).unwrap().into_raw();
        let mut recs: Vec<*mut job_record_t> = (0..40u32)
            .map(|i| {
                // SAFETY: plain C records; all-zero is what xmalloc gives slurmctld.
                let mut j: Box<job_record_t> = Box::new(unsafe { std::mem::zeroed() });
                j.job_id = i + 1;
                if i % 3 != 0 {
                    // SAFETY: as above.
                    let mut d: Box<slurm_sys::job_details> = Box::new(unsafe { std::mem::zeroed() });
                    d.submit_time = 1_000 + i64::from(i);
                    d.nice = NICE_OFFSET;
                    d.min_nodes = 1 + i % 2;
                    j.details = Box::into_raw(d);
                }
                if i % 4 != 1 {
                    j.account = text(&format!("team{}", i % 5));
                    j.comment = text(&format!("contract={}h", i % 3));
                    j.tres_per_node = text(&format!("gres:gpu:{}", 1 + i % 8));
                }
                j.user_name = text(&format!("user{}", i % 7));
                if i % 5 == 0 {
                    j.job_state = JOB_RUNNING;
                    j.start_time = 2_000;
                    j.tres_fmt_alloc_str = text("cpu=2,gres/gpu:h100=4");
                }
                Box::into_raw(j)
            })
            .collect();
        recs.insert(7, std::ptr::null_mut());
        let mut names = Names::new();
        // SAFETY: live records built above (or NULL), nothing else touches them.
        let one_by_one: Vec<JobView> = recs.iter().filter_map(|&p| unsafe { read_job_named(p, &mut names) }).collect();
        let mut ahead = Vec::new();
        // SAFETY: as above.
        unsafe { read_jobs(&recs, &mut Names::new(), |p, v| ahead.push((p, v))) };
        assert_eq!(ahead.len(), 40);
        assert_eq!(ahead.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), one_by_one);
        assert!(ahead.iter().all(|(p, v)| unsafe { (**p).job_id } == v.job_id), "each view with its own record");
    }

    #[test]
    fn what_a_job_will_hold_is_read_off_its_record() {
        // SAFETY: plain C records; all-zero is what xmalloc gives slurmctld.
        let mut d: Box<slurm_sys::job_details> = Box::new(unsafe { std::mem::zeroed() });
        d.min_nodes = 2;
        d.whole_node = slurm_sys::WHOLE_NODE_REQUIRED as u8;
        // SAFETY: as above.
        let mut recs: Box<slurm_sys::job_array_struct_t> = Box::new(unsafe { std::mem::zeroed() });
        recs.task_cnt = 200;
        // SAFETY: as above.
        let mut j: Box<job_record_t> = Box::new(unsafe { std::mem::zeroed() });
        j.job_id = 7;
        j.details = Box::into_raw(d);
        j.array_task_id = NO_VAL;
        j.array_recs = Box::into_raw(recs);
        j.het_job_id = 6;
        // SAFETY: a live record built above, nothing else touches it.
        let v = unsafe { read_job(&*j) }.unwrap();
        assert_eq!((v.exclusive, v.nodes, v.array_tasks, v.het_job_id), (true, 2, 200, 6));
        // A task split off the array is one job; --exclusive=user is not whole nodes.
        j.array_task_id = 3;
        // SAFETY: the details built above, ours alone.
        unsafe { (*j.details).whole_node = 2 };
        // SAFETY: as above.
        let v = unsafe { read_job(&*j) }.unwrap();
        assert_eq!((v.exclusive, v.array_tasks), (false, 1));
        // SAFETY: the records built above, freed once, not read since.
        unsafe { drop((Box::from_raw(j.details), Box::from_raw(j.array_recs))) };
    }

    #[test]
    fn c_names_are_shared() {
        let (mut names, s) = (Names::new(), std::ffi::CString::new("nlp").unwrap());
        let a = names.intern("nlp");
        // SAFETY: a NUL-terminated string, alive for the calls.
        assert!(Arc::ptr_eq(&a, &unsafe { c_name(&mut names, s.as_ptr()) }.unwrap()));
        let empty = std::ffi::CString::new("").unwrap();
        // SAFETY: as above; NULL is allowed.
        assert_eq!(unsafe { c_name(&mut names, empty.as_ptr()) }, None);
        assert_eq!(unsafe { c_name(&mut names, std::ptr::null()) }, None);
    }
}
