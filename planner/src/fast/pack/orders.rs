//! The orders the seeded passes decode.

use super::decode::Job;
use crate::grid::{placement_order, Rank};
use std::cmp::Ordering;

/// The orders tried, as sort keys over the jobs (the first is the old
/// single greedy's: priority, then bigger blocks, earlier arrival, id; the
/// second Dharma's placement order, the simple greedy's). Ties go to the
/// lower job id.
pub(super) fn seed_orders(jobs: &[Job], decay: f64) -> Vec<Vec<u32>> {
    let indices: Vec<u32> = (0..jobs.len() as u32).collect();
    let sorted = |cmp: &dyn Fn(&Job, &Job) -> Ordering| {
        let mut order = indices.clone();
        order.sort_by(|&a, &b| {
            let (x, y) = (&jobs[a as usize], &jobs[b as usize]);
            cmp(x, y).then(x.id.cmp(&y.id))
        });
        order
    };
    let by_prio = |x: &Job, y: &Job| y.priority.total_cmp(&x.priority);
    let rank = |job: &Job| Rank { priority: job.priority, arrival: job.arrival, gpus: job.gpus, id: job.id };
    vec![
        sorted(&|x, y| by_prio(x, y).then(y.gpus.cmp(&x.gpus)).then(x.arrival.cmp(&y.arrival))),
        sorted(&|x, y| placement_order(decay, rank(x), rank(y))),
        sorted(&|x, y| y.ideal.total_cmp(&x.ideal)),
        sorted(&|x, y| y.gpus.cmp(&x.gpus).then(by_prio(x, y)).then(x.arrival.cmp(&y.arrival))),
        sorted(&|x, y| x.arrival.cmp(&y.arrival).then(by_prio(x, y)).then(y.gpus.cmp(&x.gpus))),
        sorted(&|x, y| by_prio(x, y).then(x.dur.cmp(&y.dur)).then(y.gpus.cmp(&x.gpus))),
        sorted(&|x, y| by_prio(x, y).then((y.gpus as usize * y.dur).cmp(&(x.gpus as usize * x.dur)))),
        sorted(&|x, y| by_prio(x, y).then(x.gpus.cmp(&y.gpus)).then(x.arrival.cmp(&y.arrival))),
    ]
}
