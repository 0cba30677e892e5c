//! Planner scenarios (`tally plan --scenario FILE`): TOML, validated into
//! `tally_allocator::plan::Scenario`, every problem named by file, line and
//! key. Format documented in docs/planner.md.
//!
//! ```toml
//! [cluster]
//! gpus = 8
//! gpus_per_node = 8
//! [horizon]
//! steps = 24          # planning steps
//! step = "1h"
//! decay = 0.97        # per step, in (0, 1]
//! penalty = 8         # unmet realtime GPU-step cost, x weight (5-10)
//! [[jobs]]
//! id = 1
//! class = "training"  # training | batch_inference | quantization
//! gpus = 4            # a power of two
//! duration = "6h"     # rounded up to whole steps
//! priority = 5        # value per GPU-step, > 0
//! arrival = "0"       # when it may start (default 0)
//! running_since = "2h" # optional: already running for this long (pinned)
//! first_gpu = 0       # with running_since: where it runs
//! [[services]]
//! name = "chat"
//! swap_cap = 2        # GPUs added + removed between steps
//! weight = 10         # allocation weight
//! demand = [2, 2, 3, 4]   # GPUs per step (shorter: the rest repeats the last)
//! ```

use crate::{ConfigError, Problem};
use serde::Deserialize;
use tally_allocator::plan::{PlanJob, Scenario, Service};
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    cluster: RawCluster,
    horizon: RawHorizon,
    #[serde(default)]
    jobs: Vec<Spanned<RawJob>>,
    #[serde(default)]
    services: Vec<Spanned<RawService>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    gpus: u32,
    gpus_per_node: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHorizon {
    steps: usize,
    step: Option<crate::raw::Duration>,
    decay: Option<f64>,
    penalty: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    id: u64,
    class: Option<String>,
    gpus: u32,
    duration: crate::raw::Duration,
    priority: f64,
    arrival: Option<crate::raw::Duration>,
    running_since: Option<crate::raw::Duration>,
    first_gpu: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: String,
    swap_cap: u32,
    weight: Option<f64>,
    demand: Vec<u32>,
}

/// Read and validate a scenario.
pub fn parse(text: &str, file: &str) -> Result<Scenario, ConfigError> {
    let raw: Raw = crate::raw::parse_as(text).map_err(|(key, line, message)| ConfigError::one(file, &key, line, message))?;
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let mut problems = Vec::new();
    let mut bad = |key: String, line: Option<usize>, message: String| problems.push(Problem { key, line, message });
    let c = &raw.cluster;
    let per_node = c.gpus_per_node.unwrap_or(8);
    if c.gpus == 0 || !per_node.is_power_of_two() || c.gpus % per_node != 0 {
        bad("cluster".into(), None, format!("need gpus >= 1 in whole nodes of a power-of-two gpus_per_node (got {} GPUs, {per_node} per node)", c.gpus));
    }
    let h = &raw.horizon;
    let step_s = h.step.map_or(3600, |d| d.0);
    if h.steps == 0 || h.steps > 10_000 || step_s == 0 {
        bad("horizon".into(), None, "need 1..=10000 steps of a duration > 0 (e.g. steps = 24, step = \"1h\")".into());
    }
    let decay = h.decay.unwrap_or(0.97);
    if !(decay > 0.0 && decay <= 1.0) {
        bad("horizon.decay".into(), None, format!("{decay} is not in (0, 1]"));
    }
    let penalty = h.penalty.unwrap_or(8.0);
    if !(5.0..=10.0).contains(&penalty) {
        bad("horizon.penalty".into(), None, format!("{penalty} is outside the allowed 5 to 10"));
    }
    let steps_of = |s: u64| (s.div_ceil(step_s.max(1))) as usize;
    let mut jobs = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for (i, j) in raw.jobs.iter().enumerate() {
        let line = Some(line_of(j.span().start));
        let key = format!("jobs[{i}]");
        let j = j.get_ref();
        if !ids.insert(j.id) {
            bad(format!("{key}.id"), line, format!("job id {} appears twice", j.id));
        }
        if !j.gpus.is_power_of_two() || j.gpus > c.gpus {
            bad(format!("{key}.gpus"), line, format!("{} is not a power of two of at most {} GPUs", j.gpus, c.gpus));
        }
        if let Some(class) = &j.class {
            if !["training", "batch_inference", "quantization"].contains(&class.as_str()) {
                bad(format!("{key}.class"), line, format!("`{class}` is not a batch class (training, batch_inference, quantization); realtime work goes under [[services]]"));
            }
        }
        if !(j.priority.is_finite() && j.priority > 0.0) {
            bad(format!("{key}.priority"), line, format!("{} is not a number > 0", j.priority));
        }
        if j.duration.0 == 0 {
            bad(format!("{key}.duration"), line, "must be longer than 0".into());
        }
        let mut duration_steps = steps_of(j.duration.0);
        let pinned = match (j.running_since, j.first_gpu) {
            (Some(ran), Some(first)) => {
                let done = (ran.0 / step_s.max(1)) as usize;
                duration_steps = duration_steps.saturating_sub(done).max(1);
                Some((0, first))
            }
            (None, None) => None,
            _ => {
                bad(key.clone(), line, "give both running_since and first_gpu for a running job, or neither".into());
                None
            }
        };
        jobs.push(PlanJob {
            id: j.id,
            gpus: j.gpus,
            duration_steps,
            priority: j.priority,
            arrival_step: j.arrival.map_or(0, |a| steps_of(a.0)),
            pinned,
        });
    }
    let mut services = Vec::new();
    for (i, sv) in raw.services.iter().enumerate() {
        let line = Some(line_of(sv.span().start));
        let sv = sv.get_ref();
        if sv.demand.is_empty() {
            bad(format!("services[{i}].demand"), line, "give at least one value (GPUs per step)".into());
        }
        let weight = sv.weight.unwrap_or(1.0);
        if !(weight.is_finite() && weight > 0.0) {
            bad(format!("services[{i}].weight"), line, format!("{weight} is not a number > 0"));
        }
        let mut demand = sv.demand.clone();
        let last = demand.last().copied().unwrap_or(0);
        demand.resize(h.steps, last);
        services.push(Service { name: sv.name.clone(), demand, swap_cap: sv.swap_cap, weight });
    }
    if !problems.is_empty() {
        return Err(ConfigError { file: file.to_string(), problems });
    }
    Ok(Scenario { gpus: c.gpus, gpus_per_node: per_node, steps: h.steps, step_s, decay, penalty, jobs, services })
}

/// Read a scenario file.
pub fn load(path: &std::path::Path) -> Result<Scenario, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::one(&file, "", None, format!("cannot read: {e}")))?;
    parse(&text, &file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_and_its_errors() {
        let ok = "[cluster]\ngpus = 8\n[horizon]\nsteps = 4\nstep = \"1h\"\n[[jobs]]\nid = 1\ngpus = 4\nduration = \"90m\"\npriority = 2\narrival = \"1h\"\n[[services]]\nname = \"chat\"\nswap_cap = 1\ndemand = [1, 2]\n";
        let s = parse(ok, "s.toml").unwrap();
        assert_eq!((s.jobs[0].duration_steps, s.jobs[0].arrival_step), (2, 1));
        assert_eq!(s.services[0].demand, vec![1, 2, 2, 2]);
        let bad = ok.replace("gpus = 4", "gpus = 6").replace("priority = 2", "priority = 0");
        let e = parse(&bad, "s.toml").unwrap_err().to_string();
        assert!(e.contains("s.toml:6: jobs[0].gpus: 6 is not a power of two of at most 8 GPUs"), "{e}");
        assert!(e.contains("s.toml:6: jobs[0].priority: 0 is not a number > 0"), "{e}");
        let e = parse(&ok.replace("[horizon]", "[horizon]\npenalty = 20"), "s.toml").unwrap_err().to_string();
        assert!(e.contains("horizon.penalty: 20 is outside the allowed 5 to 10"), "{e}");
        let e = parse(&ok.replace("swap_cap", "swapcap"), "s.toml").unwrap_err().to_string();
        assert!(e.contains("unknown field `swapcap`"), "{e}");
    }
}
