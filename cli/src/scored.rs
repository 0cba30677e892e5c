//! One replay's figures as JSON, and the policies' names: what `tally sim`
//! and `tally sim suite` print alike.

use serde_json::{json, Value};
use tally_sim::metrics::Scored;
use tally_sim::sim::Policy;

/// The policies `--compare` knows, for messages.
pub fn policy_names() -> String {
    Policy::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
}

pub fn waits_json(r: &Scored) -> Value {
    let mut m = serde_json::Map::new();
    let one = |w: &tally_sim::metrics::Waits| json!({ "jobs": w.n(), "p50_s": w.pct(50.0), "p90_s": w.pct(90.0), "p99_s": w.pct(99.0) });
    for (c, w) in &r.waits {
        m.insert(c.name().to_string(), one(w));
    }
    m.insert("all".to_string(), one(&r.all_waits()));
    Value::Object(m)
}

fn fairness_json(f: &tally_allocator::FairnessSummary) -> Value {
    json!({
        "delivered_over_owed": f.overall, "teams_owed": f.teams, "teams_at_95": f.teams_at_threshold,
        "worst_team": f.worst.as_ref().map(|(t, x)| json!({ "team": t, "ratio": x })),
    })
}

/// The figures of one replay (no timings: the same input gives the same
/// bytes). Shared by `tally sim` and `tally sim suite`.
pub fn scored_json(r: &Scored) -> Value {
    json!({
        "occupancy": r.occupancy,
        "goodput": r.goodput,
        "fairness": fairness_json(&r.fairness),
        "fairness_window": fairness_json(&r.fairness_window),
        "fairness_trace_demand": fairness_json(&r.fairness_trace),
        "drain": fairness_json(&r.drain),
        "teams": r.teams.iter().map(|t| json!({
            "team": t.team, "rate_gpus": t.rate_gpus,
            "owed_gpu_hours": t.delivery.owed_gpu_hours, "delivered_gpu_hours": t.delivery.delivered_gpu_hours,
            "credited_gpu_hours": t.delivery.credited_gpu_hours, "ratio": t.delivery.ratio(),
            "window_credited_gpu_hours": t.delivery.window_credited_gpu_hours(), "window_ratio": t.delivery.window_ratio(),
            "ratio_trace_demand": t.delivery_trace.ratio(),
            "drain_owed_gpu_hours": t.drain.owed_gpu_hours, "drain_credited_gpu_hours": t.drain.credited_gpu_hours,
            "useful_gpu_hours": t.useful_gpu_hours,
        })).collect::<Vec<_>>(),
        "waits": waits_json(r),
        "preemptions": r.preemptions,
        "max_requeues": { "allocated": r.max_requeues.allocated, "unallocated": r.max_requeues.unallocated, "resumable": r.max_requeues.resumable },
        "lost_gpu_hours": r.lost_gpu_hours,
        "lost_allocated_gpu_hours": r.lost_allocated_gpu_hours,
        "useful_gpu_hours": r.useful_gpu_hours,
        "priority_weighted_value": r.value,
        "makespan_s": r.makespan_s,
        "completed": r.completed,
    })
}
