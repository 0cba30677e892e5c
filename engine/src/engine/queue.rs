//! Slurm's queue as Tally reads it, stated once: which pending jobs wait
//! for GPUs now ([`waiting`]: the engine's demand and walk, sprio's list,
//! `tally explain`'s jobs ahead) and the order in which Slurm's scheduler
//! considers them ([`slurm_order`]).
//!
//! `begin_s` is Slurm's `details->begin_time`: slurmctld sets it when it
//! first finds the job independent (`job_independent()`: no dependency
//! outstanding, not held, its `--begin` reached) and leaves it 0 until then.
//! Slurm's own priority/multifactor lists a job in sprio only when its begin
//! time is set and reached and it is not held; so does Tally.

use crate::view::{JobView, RunState};

/// A pending job Slurm will schedule once its begin time is reached: not
/// held (priority 0) and found independent by slurmctld (a begin time set:
/// no dependency outstanding). Its begin time may still be ahead.
pub fn queued(v: &JobView) -> bool {
    v.state == RunState::Pending && v.priority != 0 && v.begin_s != 0
}

/// The one rule for a job that waits for GPUs now: [`queued`] and its begin
/// time reached. Its allocated GPUs count in its team's demand and the
/// queue walk gives it its place (`engine::counted`: unless it is
/// preempting for its GPUs, when it counts as running); sprio lists it; it is
/// among the jobs `tally explain` counts ahead.
pub fn waiting(v: &JobView, now: u64) -> bool {
    queued(v) && v.begin_s <= now
}

/// Where a pending job stands in Slurm's queue, first = smallest
/// ([`slurm_order`]).
pub type SlurmKey = tally_allocator::SlurmKey<u32>;

/// Slurm's order of pending jobs ([`tally_allocator::slurm_key`]: priority
/// descending, then submit time, then job id, then array task id) at the
/// priority slurmctld holds. `task`: `Some((array_job_id, task_id))` for a
/// task split off an array, `None` for any other job.
pub fn slurm_order(v: &JobView, task: Option<(u32, u32)>) -> SlurmKey {
    slurm_order_at(v, v.priority, task)
}

/// [`slurm_order`] at another priority (the planner round's, before it is
/// written).
pub fn slurm_order_at(v: &JobView, priority: u32, task: Option<(u32, u32)>) -> SlurmKey {
    tally_allocator::slurm_key(priority, v.submit_s, u64::from(v.job_id), task.map(|(a, t)| (u64::from(a), t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_796_083_200;

    fn pending() -> JobView {
        JobView { submit_s: T0 - 60, begin_s: T0 - 60, priority: 100, ..JobView::pending(7, "alice".into()) }
    }

    #[test]
    fn what_waits_now() {
        let v = pending();
        assert!(queued(&v) && waiting(&v, T0));
        // Held: priority 0.
        let held = JobView { priority: 0, ..v.clone() };
        assert!(!queued(&held) && !waiting(&held, T0));
        // A dependency outstanding: slurmctld has not set its begin time.
        // The engine counts it nowhere (not in its team's demand, not walked).
        let dependent = JobView { begin_s: 0, ..v.clone() };
        assert!(!queued(&dependent) && !waiting(&dependent, T0));
        assert_eq!(super::super::counted(&dependent, T0, 40), super::super::Counted::No);
        assert_eq!(super::super::counted(&v, T0, 40), super::super::Counted::Waiting);
        // --begin later: queued, waiting from then on.
        let later = JobView { begin_s: T0 + 60, ..v.clone() };
        assert!(queued(&later) && !waiting(&later, T0) && waiting(&later, T0 + 60));
        // Running, suspended or done: not waiting.
        for state in [RunState::Running, RunState::Suspended, RunState::Done] {
            let other = JobView { state, ..v.clone() };
            assert!(!queued(&other) && !waiting(&other, T0), "{state:?}");
        }
    }

    #[test]
    fn slurms_order() {
        let at = |id: u32, priority: u32, submit_s: u64| JobView { job_id: id, priority, submit_s, ..pending() };
        // Priority first, then submit time, then job id.
        let mut jobs = [at(3, 10, T0), at(1, 10, T0 + 1), at(2, 20, T0 + 5), at(4, 10, T0)];
        jobs.sort_by_key(|v| slurm_order(v, None));
        assert_eq!(jobs.iter().map(|v| v.job_id).collect::<Vec<_>>(), [2, 3, 4, 1]);
        // A task split off array 5 (job id 9) goes by its array's id and its
        // task id: before job 6 of the same priority and submit time, and
        // after its array's earlier task.
        let (task, plain, earlier) = (at(9, 10, T0), at(6, 10, T0), at(8, 10, T0));
        assert!(slurm_order(&task, Some((5, 2))) < slurm_order(&plain, None));
        assert!(slurm_order(&earlier, Some((5, 1))) < slurm_order(&task, Some((5, 2))));
        // The array's record of pending tasks comes after its split tasks.
        let rest = at(5, 10, T0);
        assert!(slurm_order(&task, Some((5, 2))) < slurm_order(&rest, None));
    }
}
