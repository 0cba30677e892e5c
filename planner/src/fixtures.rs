//! Builders shared by the planner's test modules.

use super::{PlanJob, Scenario, Service};
use crate::time::HOUR_S;

pub(crate) fn job(id: u64, gpus: u32, dur: usize, priority: f64, arrival: usize) -> PlanJob {
    PlanJob { id, gpus, duration_steps: dur, priority, arrival_step: arrival, pinned: None }
}

/// Nodes of 8 GPUs (or one node, if smaller), 1 h steps, decay 0.95, penalty 8.
pub(crate) fn scenario(gpus: u32, steps: usize, jobs: Vec<PlanJob>, services: Vec<Service>) -> Scenario {
    Scenario { gpus, gpus_per_node: 8.min(gpus), steps, step_s: HOUR_S, decay: 0.95, penalty: 8.0, must_finish: true, jobs, services }
}

/// A service of weight 10.
pub(crate) fn named_svc(name: &str, demand: Vec<u32>, cap: u32) -> Service {
    Service { name: name.into(), demand, swap_cap: cap, weight: 10.0 }
}

/// The service `chat`.
pub(crate) fn svc(demand: Vec<u32>, cap: u32) -> Service {
    named_svc("chat", demand, cap)
}
