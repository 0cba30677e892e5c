//! Planner scenarios (`tally plan --scenario FILE`): TOML, validated into
//! `tally_planner::Scenario`, every problem named by file, line and
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
//! must_finish = true  # a batch job runs only if it ends inside the horizon (default)
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
//!
//! Limits, so that nothing sized by the file is allocated before it is
//! bounded: 1 to [`MAX_STEPS`] steps, GPUs × steps at most
//! [`MAX_GPU_STEPS`], at most [`MAX_SERVICES`] services each wanting at most
//! the cluster's GPUs per step, durations and arrivals of at most
//! [`MAX_JOB_STEPS`] steps, running jobs on aligned, disjoint blocks inside
//! the cluster, and files of at most [`crate::MAX_FILE_BYTES`].

use crate::lines::LineIndex;
use crate::{ConfigError, Problem};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use tally_allocator::{format_duration, HOUR_S};
use tally_planner::{validate::check_block, PlanJob, Scenario, Service};
use toml::Spanned;

/// Most steps in a horizon.
pub const MAX_STEPS: u64 = 10_000;
/// Most GPU-steps (`[cluster] gpus` × `[horizon] steps`): every planner
/// keeps a grid of them (bits in fast mode, a set per step in the
/// validator, a character per cell in `tally plan`'s grid and SVG), so 10
/// million cells stay within tens of MB; the largest shipped scenario has
/// 64 × 24.
pub const MAX_GPU_STEPS: u64 = 10_000_000;
/// Most `[[services]]`: each is a vector over every step, copied for every
/// layout fast mode tries.
pub const MAX_SERVICES: usize = 256;
/// Longest `duration` or `arrival`, in steps: 100 times the longest horizon.
/// Beyond the horizon neither changes the plan; the bound keeps `start +
/// duration` far from overflowing in the planners.
pub const MAX_JOB_STEPS: u64 = 100 * MAX_STEPS;

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
    gpus: Spanned<u32>,
    gpus_per_node: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHorizon {
    steps: Spanned<Steps>,
    step: Option<Spanned<crate::raw::Duration>>,
    decay: Option<f64>,
    penalty: Option<f64>,
    must_finish: Option<bool>,
}

/// `steps` as written: any TOML integer (the range is checked with its
/// line); a float is refused as such rather than as "expected usize".
#[derive(Debug, Clone, Copy)]
struct Steps(i128);

impl<'de> Deserialize<'de> for Steps {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Steps;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a whole number of steps from 1 to {MAX_STEPS} (e.g. steps = 24)")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Steps, E> {
                Ok(Steps(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Steps, E> {
                Ok(Steps(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Steps, E> {
                Err(E::custom(format!("`{v:?}` is a floating-point number: steps is a whole number from 1 to {MAX_STEPS} (e.g. steps = 24)")))
            }
        }
        d.deserialize_any(V)
    }
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

/// A running job's block, for the overlap check.
struct Held {
    index: usize,
    id: u64,
    first: u32,
    gpus: u32,
    line: usize,
}

/// Read and validate a scenario. Everything sized by the input is bounded
/// before it is allocated: steps ([`MAX_STEPS`]), the grid
/// ([`MAX_GPU_STEPS`]), services ([`MAX_SERVICES`]), durations and arrivals
/// ([`MAX_JOB_STEPS`]); the file itself ([`crate::MAX_FILE_BYTES`]) in
/// [`load`]. Running jobs must sit on blocks of the cluster, disjoint.
pub fn parse(text: &str, file: &str) -> Result<Scenario, ConfigError> {
    let raw: Raw = crate::raw::parse_as(text).map_err(|(key, line, message)| ConfigError::one(file, &key, line, message))?;
    let lines = LineIndex::new(text);
    let line_of = |offset: usize| lines.line(offset);
    let mut problems = Vec::new();
    let mut bad = |key: String, line: Option<usize>, message: String| problems.push(Problem { key, line, message });
    let c = &raw.cluster;
    let gpus = *c.gpus.get_ref();
    let per_node = c.gpus_per_node.unwrap_or(8);
    let cluster_ok = gpus > 0 && per_node.is_power_of_two() && gpus % per_node == 0;
    if !cluster_ok {
        bad("cluster".into(), None, format!("need gpus >= 1 in whole nodes of a power-of-two gpus_per_node (got {gpus} GPUs, {per_node} per node)"));
    }
    let h = &raw.horizon;
    let steps_line = Some(line_of(h.steps.span().start));
    let steps_ok = (1..=i128::from(MAX_STEPS)).contains(&h.steps.get_ref().0);
    if !steps_ok {
        bad("horizon.steps".into(), steps_line, format!("{} steps: 1 to {MAX_STEPS} are allowed (e.g. steps = 24)", h.steps.get_ref().0));
    }
    let steps = if steps_ok { h.steps.get_ref().0 as usize } else { 0 };
    let step_s = h.step.as_ref().map_or(HOUR_S, |d| d.get_ref().0);
    if step_s == 0 {
        let line = h.step.as_ref().map(|d| line_of(d.span().start));
        bad("horizon.step".into(), line, "must be longer than 0 (e.g. step = \"1h\")".into());
    }
    let cells = u64::from(gpus) * steps as u64;
    if cluster_ok && cells > MAX_GPU_STEPS {
        bad(
            "cluster.gpus".into(),
            Some(line_of(c.gpus.span().start)),
            format!("{gpus} GPUs x {steps} steps is {cells} GPU-steps: at most {MAX_GPU_STEPS} are allowed (fewer GPUs or fewer steps)"),
        );
    }
    // Everything below allocates per step only when the grid is bounded.
    let grid_ok = cluster_ok && steps_ok && cells <= MAX_GPU_STEPS;
    let decay = h.decay.unwrap_or(0.97);
    if !(decay > 0.0 && decay <= 1.0) {
        bad("horizon.decay".into(), None, format!("{decay} is not in (0, 1]"));
    }
    let penalty = h.penalty.unwrap_or(8.0);
    if !(5.0..=10.0).contains(&penalty) {
        bad("horizon.penalty".into(), None, format!("{penalty} is outside the allowed 5 to 10"));
    }
    let steps_of = |s: u64| s.div_ceil(step_s.max(1));
    let mut jobs = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    let mut held = Vec::new();
    for (i, j) in raw.jobs.iter().enumerate() {
        let at = line_of(j.span().start);
        let line = Some(at);
        let key = format!("jobs[{i}]");
        let j = j.get_ref();
        if !ids.insert(j.id) {
            bad(format!("{key}.id"), line, format!("job id {} appears twice", j.id));
        }
        let gpus_ok = j.gpus.is_power_of_two() && j.gpus <= gpus;
        if !gpus_ok {
            bad(format!("{key}.gpus"), line, format!("{} is not a power of two of at most {gpus} GPUs", j.gpus));
        }
        if let Some(class) = &j.class {
            if !["training", "batch_inference", "quantization"].contains(&class.as_str()) {
                bad(
                    format!("{key}.class"),
                    line,
                    format!(
                        "`{}` is not a batch class (training, batch_inference, quantization); realtime work goes under [[services]]",
                        tally_allocator::text::clip(class)
                    ),
                );
            }
        }
        if !(j.priority.is_finite() && j.priority > 0.0) {
            bad(format!("{key}.priority"), line, format!("{} is not a number > 0", j.priority));
        }
        if j.duration.0 == 0 {
            bad(format!("{key}.duration"), line, "must be longer than 0".into());
        }
        let mut in_steps = |name: &str, d: u64| {
            let n = steps_of(d);
            if n > MAX_JOB_STEPS {
                bad(
                    format!("{key}.{name}"),
                    line,
                    format!(
                        "{} is {n} steps of {}: at most {MAX_JOB_STEPS} steps (100 times the longest horizon) are allowed",
                        format_duration(d),
                        format_duration(step_s)
                    ),
                );
            }
            n.min(MAX_JOB_STEPS) as usize
        };
        let mut duration_steps = in_steps("duration", j.duration.0);
        let arrival_step = j.arrival.map_or(0, |a| in_steps("arrival", a.0));
        let pinned = match (j.running_since, j.first_gpu) {
            (Some(ran), Some(first)) => {
                let done = (ran.0 / step_s.max(1)) as usize;
                duration_steps = duration_steps.saturating_sub(done).max(1);
                if cluster_ok && gpus_ok {
                    if check_block(gpus, per_node, j.id, first, j.gpus).is_err() {
                        let (align, why) = if j.gpus <= per_node {
                            (j.gpus, format!("a block is aligned to its size inside one node of {per_node} GPUs"))
                        } else {
                            (per_node, format!("a block larger than a node of {per_node} GPUs starts at a node boundary"))
                        };
                        let allowed = match gpus - j.gpus {
                            0 => "only 0 is allowed".to_string(),
                            last => format!("allowed are multiples of {align} from 0 to {last}"),
                        };
                        bad(
                            format!("{key}.first_gpu"),
                            line,
                            format!("{first} is not where a block of {} GPUs can start: {allowed} ({why})", j.gpus),
                        );
                    } else {
                        held.push(Held { index: i, id: j.id, first, gpus: j.gpus, line: at });
                    }
                }
                Some((0, first))
            }
            (None, None) => None,
            _ => {
                bad(key.clone(), line, "give both running_since and first_gpu for a running job, or neither".into());
                None
            }
        };
        jobs.push(PlanJob { id: j.id, gpus: j.gpus, duration_steps, priority: j.priority, arrival_step, pinned });
    }
    // Running jobs all hold their blocks at step 0: no two may share a GPU.
    // Blocks sorted by first GPU (larger first): one overlaps the block
    // reaching furthest among those before it, if it starts before its end.
    held.sort_by_key(|b| (b.first, std::cmp::Reverse(b.gpus), b.index));
    let mut reach: Option<&Held> = None;
    for b in &held {
        let end = |x: &Held| u64::from(x.first) + u64::from(x.gpus);
        match reach {
            Some(r) if u64::from(b.first) < end(r) => {
                let (blamed, other) = if b.index > r.index { (b, r) } else { (r, b) };
                bad(
                    format!("jobs[{}].first_gpu", blamed.index),
                    Some(blamed.line),
                    format!(
                        "GPUs {}-{} of running job {} are also held by running job {} (jobs[{}], GPUs {}-{}): running jobs hold disjoint blocks",
                        blamed.first,
                        blamed.first + (blamed.gpus - 1),
                        blamed.id,
                        other.id,
                        other.index,
                        other.first,
                        other.first + (other.gpus - 1)
                    ),
                );
                if end(b) > end(r) {
                    reach = Some(b);
                }
            }
            _ => reach = Some(b),
        }
    }
    if raw.services.len() > MAX_SERVICES {
        let line = Some(line_of(raw.services[MAX_SERVICES].span().start));
        bad("services".into(), line, format!("{} services: at most {MAX_SERVICES} are allowed", raw.services.len()));
    }
    let mut services = Vec::new();
    for (i, sv) in raw.services.iter().enumerate().take(MAX_SERVICES) {
        let line = Some(line_of(sv.span().start));
        let sv = sv.get_ref();
        if sv.demand.is_empty() {
            bad(format!("services[{i}].demand"), line, "give at least one value (GPUs per step)".into());
        }
        if let Some((t, d)) = sv.demand.iter().enumerate().find(|&(_, &d)| d > gpus) {
            bad(
                format!("services[{i}].demand"),
                line,
                format!("{d} GPUs at step {t} is more than the cluster's {gpus} (allowed: 0 to {gpus} per step)"),
            );
        }
        let weight = sv.weight.unwrap_or(1.0);
        if !(weight.is_finite() && weight > 0.0) {
            bad(format!("services[{i}].weight"), line, format!("{weight} is not a number > 0"));
        }
        if grid_ok {
            let mut demand = sv.demand.clone();
            let last = demand.last().copied().unwrap_or(0);
            demand.resize(steps, last);
            services.push(Service { name: sv.name.clone(), demand, swap_cap: sv.swap_cap, weight });
        }
    }
    if !problems.is_empty() {
        return Err(ConfigError { file: file.to_string(), problems });
    }
    let must_finish = h.must_finish.unwrap_or(true);
    Ok(Scenario { gpus, gpus_per_node: per_node, steps, step_s, decay, penalty, must_finish, jobs, services })
}

/// Read (at most [`crate::MAX_FILE_BYTES`]) and validate a scenario file.
pub fn load(path: &std::path::Path) -> Result<Scenario, ConfigError> {
    let file = path.display().to_string();
    let text = crate::read_capped(path, &file, "a scenario", "")?;
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

    const HEAD: &str = "[cluster]\ngpus = 16\n[horizon]\nsteps = 24\nstep = \"1h\"\n";

    /// A running job (`running_since`, `first_gpu`) of `gpus` GPUs.
    fn running(id: u64, gpus: u32, first: u32) -> String {
        format!("[[jobs]]\nid = {id}\ngpus = {gpus}\nduration = \"3h\"\npriority = 1\nrunning_since = \"1h\"\nfirst_gpu = {first}\n")
    }

    fn refused(text: &str) -> String {
        match parse(text, "s.toml") {
            Ok(s) => panic!("accepted:\n{text}\n{s:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_running_job_must_sit_on_a_block_of_the_cluster() {
        // Inside the cluster, aligned, disjoint: accepted and pinned.
        let s = parse(&format!("{HEAD}{}{}", running(1, 4, 4), running(2, 8, 8)), "s.toml").unwrap();
        assert_eq!((s.jobs[0].pinned, s.jobs[1].pinned), (Some((0, 4)), Some((0, 8))));
        // Past the last GPU (a panic in fast mode before), unaligned, or
        // straddling two nodes: the input is blamed, with its line.
        let allowed4 = "allowed are multiples of 4 from 0 to 12 (a block is aligned to its size inside one node of 8 GPUs)";
        for (first, shown) in [(100, "100"), (u32::MAX, "4294967295"), (2, "2"), (16, "16")] {
            assert_eq!(
                refused(&format!("{HEAD}{}", running(1, 4, first))),
                format!("s.toml:6: jobs[0].first_gpu: {shown} is not where a block of 4 GPUs can start: {allowed4}")
            );
        }
        assert_eq!(
            refused(&format!("{HEAD}{}", running(1, 16, 8))),
            "s.toml:6: jobs[0].first_gpu: 8 is not where a block of 16 GPUs can start: only 0 is allowed \
             (a block larger than a node of 8 GPUs starts at a node boundary)"
        );
        // Two running jobs on the same GPUs: the later one is blamed.
        assert_eq!(
            refused(&format!("{HEAD}{}{}", running(1, 8, 0), running(2, 2, 2))),
            "s.toml:13: jobs[1].first_gpu: GPUs 2-3 of running job 2 are also held by running job 1 (jobs[0], GPUs 0-7): \
             running jobs hold disjoint blocks"
        );
    }

    #[test]
    fn steps_must_be_a_whole_number_in_range_with_its_line() {
        let with = |steps: &str| format!("[cluster]\ngpus = 8\n[horizon]\nsteps = {steps}\n");
        assert_eq!(
            refused(&with("1e12")),
            "s.toml:4: horizon.steps: `1000000000000.0` is a floating-point number: steps is a whole number from 1 to 10000 (e.g. steps = 24)"
        );
        assert_eq!(refused(&with("1000000000000")), "s.toml:4: horizon.steps: 1000000000000 steps: 1 to 10000 are allowed (e.g. steps = 24)");
        // With a service, whose demand was stretched to the steps (4 TB) before the refusal.
        let svc = "[[services]]\nname = \"chat\"\nswap_cap = 1\ndemand = [1]\n";
        assert_eq!(
            refused(&format!("{}{svc}", with("1000000000000"))),
            "s.toml:4: horizon.steps: 1000000000000 steps: 1 to 10000 are allowed (e.g. steps = 24)"
        );
        assert_eq!(refused(&with("-3")), "s.toml:4: horizon.steps: -3 steps: 1 to 10000 are allowed (e.g. steps = 24)");
        assert_eq!(refused(&with("0")), "s.toml:4: horizon.steps: 0 steps: 1 to 10000 are allowed (e.g. steps = 24)");
        assert_eq!(parse(&with("10000"), "s.toml").unwrap().steps, 10_000);
    }

    #[test]
    fn durations_and_arrivals_are_bounded_in_steps() {
        let job = |key: &str, value: &str| {
            let duration = if key == "duration" { String::new() } else { "duration = \"1h\"\n".to_string() };
            format!("[cluster]\ngpus = 8\n[horizon]\nsteps = 24\nstep = \"1s\"\n[[jobs]]\nid = 1\ngpus = 4\n{duration}priority = 1\n{key} = \"{value}\"\n")
        };
        // u64::MAX seconds: `start + duration` overflowed in every planner.
        assert_eq!(
            refused(&job("duration", "18446744073709551615s")),
            "s.toml:6: jobs[0].duration: 213503982334601d7h15s is 18446744073709551615 steps of 1s: at most 1000000 steps \
             (100 times the longest horizon) are allowed"
        );
        assert_eq!(
            refused(&job("arrival", "999999999h")),
            "s.toml:6: jobs[0].arrival: 41666666d15h is 3599999996400 steps of 1s: at most 1000000 steps \
             (100 times the longest horizon) are allowed"
        );
        let s = parse(&job("arrival", "1000000s"), "s.toml").unwrap();
        assert_eq!(s.jobs[0].arrival_step, 1_000_000);
    }

    #[test]
    fn the_grid_and_the_services_are_bounded() {
        // GPUs × steps sizes every planner's grid.
        assert_eq!(
            refused("[cluster]\ngpus = 4194304\n[horizon]\nsteps = 10000\n"),
            "s.toml:2: cluster.gpus: 4194304 GPUs x 10000 steps is 41943040000 GPU-steps: at most 10000000 are allowed \
             (fewer GPUs or fewer steps)"
        );
        assert!(parse("[cluster]\ngpus = 1024\n[horizon]\nsteps = 9765\n", "s.toml").is_ok());
        // A service cannot want more GPUs than the cluster has.
        let svc =
            |demand: &str| format!("[cluster]\ngpus = 8\n[horizon]\nsteps = 4\n[[services]]\nname = \"chat\"\nswap_cap = 1\ndemand = {demand}\n");
        assert_eq!(
            refused(&svc("[1, 4000000000]")),
            "s.toml:5: services[0].demand: 4000000000 GPUs at step 1 is more than the cluster's 8 (allowed: 0 to 8 per step)"
        );
        // Services are few: each one is a vector of every step.
        let many: String = (0..257).map(|i| format!("[[services]]\nname = \"s{i}\"\nswap_cap = 1\ndemand = [0]\n")).collect();
        assert_eq!(
            refused(&format!("[cluster]\ngpus = 8\n[horizon]\nsteps = 4\n{many}")),
            "s.toml:1029: services: 257 services: at most 256 are allowed"
        );
    }

    #[test]
    fn a_scenario_over_the_size_cap_is_refused() {
        let dir = std::env::temp_dir().join(format!("tally-scenario-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.toml");
        let mut text = b"[cluster]\ngpus = 8\n[horizon]\nsteps = 4\n".to_vec();
        text.resize((16 << 20) + 1, b'\n');
        std::fs::write(&path, &text).unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert_eq!(err, format!("{}: the file is 16777217 bytes (16.0 MiB); a scenario may be at most 16777216 bytes (16 MiB)", path.display()));
        std::fs::remove_file(path).unwrap();
    }
}
