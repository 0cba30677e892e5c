//! Slurm's JSON (`squeue --json`, `sinfo --json`, Slurm 22.05's
//! openapi/v0.0.38 layout; the `{set, infinite, number}` numbers and
//! state lists of later releases are read too) → the engine's owned
//! [`JobView`] and a node's GPUs. The same reading as the plugin's
//! `tally_ffi::view`: a job that started holds the GPUs of its allocated
//! TRES, a pending one asks for them through [`GpuAsk`] (the four TRES
//! request strings), `nice` without Slurm's offset, time limits in
//! seconds (`None` = no limit).
//!
//! What it will hold, as the plugin classes a job: an exclusive job is
//! squeue's `shared` of `none` (22.05: a string; 24.11 and later: a list of
//! flags), which Slurm prints for `--exclusive` and for a partition's
//! `OverSubscribe=EXCLUSIVE`; an array's pending record holds the tasks
//! of its `array_task_string` ([`task_count`]); a heterogeneous job's
//! components share their leader's `het_job_id` (the engine sums them).
//!
//! What squeue does not show is left at its neutral value and said here:
//! `direct_set_prio` (an admin's priority) is `false`, and
//! `preempt_start_s` (when a pending job started preempting) is 0 — the
//! JSON's `preempt_time` is the victim's side; `node_gpus` (what an
//! exclusive job's nodes have) is for the caller that read the nodes.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;
use tally_allocator::MINUTE_S;
use tally_engine::view::{gpu_count, gpu_type, GpuAsk, JobView, Names, NodeState, RunState};

/// One job of `squeue --json`: the engine's view and what Slurm says of it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueJob {
    pub view: JobView,
    /// Slurm's reason (`Priority`, `Resources`, `Dependency`, …; `None` when running).
    pub reason: String,
    /// The job state as Slurm spells it (`PENDING`, `RUNNING`, …).
    pub state: String,
    /// `afterok:17(unfulfilled)`, empty when none.
    pub dependency: String,
    /// The reservation it asked for, empty when none.
    pub reservation: String,
    /// Nodes asked for (at least 1).
    pub nodes_asked: u32,
    /// The nodes it runs on (`n[1-2]`), empty while pending.
    pub node_list: String,
    /// A job array's pending tasks not yet split off (`1-3`), empty otherwise.
    pub array_tasks: String,
    pub array_job_id: u32,
    pub array_task_id: Option<u32>,
}

impl QueueJob {
    /// How Slurm names it: `24_[1-3]` for an array's pending tasks, `24_2`
    /// for one task, else the job id.
    pub fn name(&self) -> String {
        match (self.array_job_id, self.array_task_id) {
            (0, _) => self.view.job_id.to_string(),
            (a, Some(t)) => format!("{a}_{t}"),
            (a, None) if !self.array_tasks.is_empty() => format!("{a}_[{}]", self.array_tasks),
            _ => self.view.job_id.to_string(),
        }
    }
}

/// One node of `sinfo --json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// `idle`, `mixed`, `allocated`, `down`, `drained`, … (lower case).
    pub state: String,
    /// `DRAIN`, `NOT_RESPONDING`, `MAINTENANCE`, … (upper case).
    pub flags: Vec<String>,
    pub partitions: Vec<String>,
    /// GPUs configured and in use.
    pub gpus: u32,
    pub gpus_used: u32,
    pub reason: String,
}

impl NodeInfo {
    /// Can new work start here? The engine's rule
    /// ([`NodeState::usable`]), on the states Slurm's JSON names.
    pub fn usable(&self) -> bool {
        NodeState::from_names(&self.state, self.flags.iter().map(String::as_str)).usable()
    }

    /// GPUs free for new work now.
    pub fn free(&self) -> u32 {
        if self.usable() {
            self.gpus.saturating_sub(self.gpus_used)
        } else {
            0
        }
    }

    pub fn in_partition(&self, partition: Option<&str>) -> bool {
        match partition {
            None => true,
            Some(p) => p.split(',').any(|p| self.partitions.iter().any(|q| q == p)),
        }
    }
}

/// The top-level array `key` of a Slurm JSON document from `what`.
fn document<'a>(v: &'a Value, key: &str, what: &str) -> Result<&'a [Value], String> {
    let said = v.get("errors").map(slurm_errors).unwrap_or_default();
    if !said.is_empty() {
        return Err(format!("{what}: Slurm reported errors: {}", said.join("; ")));
    }
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| format!("{what}: no `{key}` list in the JSON (is this Slurm 22.05 or later with the serializer/json plugin?)"))
}

fn parse(text: &str, what: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| {
        let start: String = text.chars().take(80).collect();
        format!("{what}: not JSON ({e}); it began with: {start:?} (Slurm 22.05 or later with the serializer/json plugin is needed)")
    })
}

/// A number as Slurm writes it: a number, `null` (unset), or a later
/// release's `{"set": …, "infinite": …, "number": …}`. `Ok(None)` for
/// unset or infinite.
fn number(job: &Value, key: &str) -> Result<Option<u64>, String> {
    let bad = |v: &Value| format!("`{key}` is {v}, not a number");
    match job.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            n.as_u64().map(Some).or_else(|| n.as_i64().map(|i| Some(i.max(0) as u64))).ok_or_else(|| bad(&Value::Number(n.clone())))
        }
        Some(Value::Object(o)) => {
            let set = o.get("set").and_then(Value::as_bool).unwrap_or(true);
            let infinite = o.get("infinite").and_then(Value::as_bool).unwrap_or(false);
            if !set || infinite {
                return Ok(None);
            }
            o.get("number").and_then(Value::as_u64).map(Some).ok_or_else(|| bad(&Value::Object(o.clone())))
        }
        Some(v) => Err(bad(v)),
    }
}

/// A signed number (nice); unset is 0.
fn signed(job: &Value, key: &str) -> Result<i64, String> {
    match job.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| format!("`{key}` is {n}, not an integer")),
        Some(Value::Object(o)) => Ok(o.get("number").and_then(Value::as_i64).unwrap_or(0)),
        Some(v) => Err(format!("`{key}` is {v}, not a number")),
    }
}

fn text<'a>(job: &'a Value, key: &str) -> &'a str {
    job.get(key).and_then(Value::as_str).unwrap_or("")
}

fn opt_text(job: &Value, key: &str) -> Option<String> {
    Some(text(job, key)).filter(|s| !s.is_empty()).map(str::to_string)
}

fn u32_of(v: Option<u64>) -> u32 {
    v.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// The state word: a string (22.05) or the first of a list (later).
fn state_word(job: &Value) -> String {
    match job.get("job_state") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).next().unwrap_or("").to_string(),
        _ => String::new(),
    }
}

/// Slurm's state string → where the job is in its life. The flag states
/// (`job_state_string` prints a flag before the base state) map to the base
/// state they come with.
fn run_state(word: &str) -> Option<RunState> {
    Some(match word {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "SPECIAL_EXIT" | "RESV_DEL_HOLD" => RunState::Pending,
        "RUNNING" | "CONFIGURING" | "RESIZING" | "STOPPED" | "SIGNALING" => RunState::Running,
        "SUSPENDED" => RunState::Suspended,
        "COMPLETED" | "COMPLETING" | "CANCELLED" | "FAILED" | "TIMEOUT" | "NODE_FAIL" | "PREEMPTED" | "BOOT_FAIL" | "DEADLINE" | "OUT_OF_MEMORY"
        | "STAGE_OUT" | "REVOKED" | "UPDATE_DB" | "POWER_UP_NODE" => RunState::Done,
        _ => return None,
    })
}

/// squeue's `shared` says it gets whole nodes: `"none"` (22.05) or a list
/// of flags holding `"none"` (24.11 and later; `[]` when unset). Slurm
/// prints `none` for `--exclusive` and for a partition's
/// `OverSubscribe=EXCLUSIVE`.
fn exclusive(job: &Value) -> bool {
    match job.get("shared") {
        Some(Value::String(s)) => s.eq_ignore_ascii_case("none"),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).any(|s| s.eq_ignore_ascii_case("none")),
        _ => false,
    }
}

/// The ranges of Slurm's array task string (`0-3`, `1,3,5-7`, `0-15:4`,
/// a `%N` throttle left out) as `(first, last, step)`: `None` when a part
/// cannot be read. Slurm cuts a long one short (`…,7,...`: 64 characters,
/// `SLURM_BITSTR_LEN`); the parts it still shows are read.
pub fn task_ranges(spec: &str) -> Option<Vec<(u32, u32, u32)>> {
    let spec = spec.split('%').next()?.trim();
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty() && !p.starts_with("...")) {
        let part = part.trim_end_matches('.');
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.trim().parse::<u32>().ok().filter(|&s| s > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (lo.trim().parse::<u32>().ok()?, hi.trim().parse::<u32>().ok()?),
            None => {
                let n = range.trim().parse::<u32>().ok()?;
                (n, n)
            }
        };
        out.push((lo, hi, step));
    }
    Some(out)
}

/// How many task ids an array's `array_task_string` names
/// ([`task_ranges`]): `None` when it names none or cannot be read.
pub fn task_count(spec: &str) -> Option<u32> {
    let count = task_ranges(spec)?.iter().filter(|(lo, hi, _)| hi >= lo).fold(0u32, |n, &(lo, hi, step)| n.saturating_add((hi - lo) / step + 1));
    (count > 0).then_some(count)
}

/// One job object of `squeue --json`.
fn job(j: &Value, names: &mut Names) -> Result<QueueJob, String> {
    let job_id = number(j, "job_id")?.filter(|&id| id > 0).ok_or("no `job_id`")?;
    let job_id = u32_of(Some(job_id));
    let word = state_word(j);
    let state = run_state(&word).ok_or_else(|| format!("job {job_id}: unknown job_state {}", j.get("job_state").unwrap_or(&Value::Null)))?;
    let at = |key: &str| number(j, key).map(|n| n.unwrap_or(0)).map_err(|e| format!("job {job_id}: {e}"));
    let user = match text(j, "user_name") {
        "" => names.intern(&at("user_id")?.to_string()),
        u => names.intern(u),
    };
    let nodes_asked = u32_of(number(j, "node_count").map_err(|e| format!("job {job_id}: {e}"))?).max(1);
    let tasks = number(j, "tasks").map_err(|e| format!("job {job_id}: {e}"))?.map(|t| u32::try_from(t).unwrap_or(u32::MAX)).filter(|&t| t > 0);
    let start_s = at("start_time")?;
    // What it holds once it started (every way of asking counted), else
    // what it asks for: as the plugin reads a job record.
    let alloc = (state != RunState::Pending && start_s > 0).then(|| opt_text(j, "tres_alloc_str")).flatten();
    let asked = GpuAsk::new(["tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket"].map(|k| opt_text(j, k)), nodes_asked, tasks);
    let gpus = alloc.as_deref().and_then(gpu_count).or_else(|| asked.total().ok().flatten()).unwrap_or(0);
    // The type it holds once it started, else the type it asks for.
    let typ = match &alloc {
        Some(a) => gpu_type(a),
        None => asked.gpu_type(),
    };
    let gpu_type = typ.map(|t| names.intern(t));
    let time_limit_s = number(j, "time_limit").map_err(|e| format!("job {job_id}: {e}"))?.map(|m| m * MINUTE_S);
    let array_task_id = number(j, "array_task_id").map_err(|e| format!("job {job_id}: {e}"))?.map(|t| u32_of(Some(t)));
    let array_job_id = u32_of(Some(at("array_job_id")?));
    let array_string = text(j, "array_task_string");
    // An array's record of its pending tasks (no task id of its own).
    let array_tasks = if array_job_id != 0 && array_task_id.is_none() { task_count(array_string).unwrap_or(1) } else { 1 };
    let view = JobView {
        job_id,
        state,
        account: Some(text(j, "account")).filter(|a| !a.is_empty()).map(|a| names.intern(a)),
        user,
        user_id: u32_of(Some(at("user_id")?)),
        comment: opt_text(j, "comment"),
        partition: Some(text(j, "partition")).filter(|p| !p.is_empty()).map(|p| names.intern(p)),
        gpus,
        gpu_type,
        submit_s: at("submit_time")?,
        begin_s: at("eligible_time")?,
        start_s,
        end_s: at("end_time")?,
        nice: signed(j, "nice").map_err(|e| format!("job {job_id}: {e}"))?,
        time_limit_s,
        priority: u32_of(Some(at("priority")?)),
        direct_set_prio: false,
        restarts: u16::try_from(at("restart_cnt")?).unwrap_or(u16::MAX),
        preempt_start_s: 0,
        pre_sus_s: at("pre_sus_time")?,
        suspend_s: at("suspend_time")?,
        het_job_id: u32_of(Some(at("het_job_id")?)),
        nodes: nodes_asked,
        exclusive: exclusive(j),
        node_gpus: None,
        array_tasks,
    };
    Ok(QueueJob {
        view,
        reason: text(j, "state_reason").to_string(),
        state: word,
        dependency: text(j, "dependency").to_string(),
        reservation: text(j, "resv_name").to_string(),
        nodes_asked,
        node_list: text(j, "nodes").to_string(),
        array_tasks: array_string.to_string(),
        array_job_id,
        array_task_id,
    })
}

/// Every job of `squeue --json`'s output, names shared through `names`.
#[cfg(test)]
pub fn parse_squeue(output: &str, names: &mut Names) -> Result<Vec<QueueJob>, String> {
    read_squeue(output.as_bytes(), names)
}

/// Every job of `squeue --json`'s output, read as the output arrives: each job is read into the
/// engine's view and its JSON dropped before the next (only the fields
/// [`job`] reads are kept), so a 10,000-job queue (some 50 MB of JSON) is
/// never held whole, as text or as a tree.
pub fn read_squeue(input: impl std::io::Read, names: &mut Names) -> Result<Vec<QueueJob>, String> {
    const WHAT: &str = "squeue --json";
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, input));
    let doc = Squeue { names }.deserialize(&mut de).and_then(|doc| de.end().map(|()| doc));
    let doc = doc.map_err(|e| match e.io_error_kind() {
        Some(_) => format!("{WHAT}: {e}"),
        None => format!("{WHAT}: not JSON ({e}) (Slurm 22.05 or later with the serializer/json plugin is needed)"),
    })?;
    if !doc.errors.is_empty() {
        return Err(format!("{WHAT}: Slurm reported errors: {}", doc.errors.join("; ")));
    }
    doc.jobs.ok_or_else(|| format!("{WHAT}: no `jobs` list in the JSON (is this Slurm 22.05 or later with the serializer/json plugin?)"))?
}

/// The fields of a job that [`job`] reads; the rest of squeue's hundred or
/// so are skipped unread.
const JOB_FIELDS: [&str; 33] = [
    "account",
    "array_job_id",
    "array_task_id",
    "array_task_string",
    "comment",
    "dependency",
    "eligible_time",
    "end_time",
    "het_job_id",
    "job_id",
    "job_state",
    "nice",
    "node_count",
    "nodes",
    "partition",
    "pre_sus_time",
    "priority",
    "restart_cnt",
    "resv_name",
    "shared",
    "start_time",
    "state_reason",
    "submit_time",
    "suspend_time",
    "tasks",
    "time_limit",
    "tres_alloc_str",
    "tres_per_job",
    "tres_per_node",
    "tres_per_socket",
    "tres_per_task",
    "user_id",
    "user_name",
];

/// `squeue --json`'s document: Slurm's `errors` (their descriptions) and
/// the jobs, or the first job that could not be read.
struct SqueueDoc {
    errors: Vec<String>,
    jobs: Option<Result<Vec<QueueJob>, String>>,
}

struct Squeue<'n> {
    names: &'n mut Names,
}

impl<'de> DeserializeSeed<'de> for Squeue<'_> {
    type Value = SqueueDoc;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<SqueueDoc, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Squeue<'_> {
    type Value = SqueueDoc;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object with a `jobs` list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SqueueDoc, A::Error> {
        let mut doc = SqueueDoc { errors: Vec::new(), jobs: None };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "errors" => doc.errors = slurm_errors(&map.next_value::<Value>()?),
                "jobs" => doc.jobs = Some(map.next_value_seed(Jobs { names: &mut *self.names })?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(doc)
    }
}

/// The descriptions of a Slurm JSON document's `errors`.
fn slurm_errors(errors: &Value) -> Vec<String> {
    let Some(errors) = errors.as_array() else { return Vec::new() };
    errors
        .iter()
        .map(|e| e.get("description").or_else(|| e.get("error")).and_then(Value::as_str).map_or_else(|| e.to_string(), str::to_string))
        .collect()
}

/// The `jobs` list, each read as it comes; after the first job that cannot
/// be read the rest are skipped (that job is the refusal).
struct Jobs<'n> {
    names: &'n mut Names,
}

impl<'de> DeserializeSeed<'de> for Jobs<'_> {
    type Value = Result<Vec<QueueJob>, String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Jobs<'_> {
    type Value = Result<Vec<QueueJob>, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of jobs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut jobs = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(JobFields(fields)) = seq.next_element()? {
            match job(&fields, self.names) {
                Ok(j) => jobs.push(j),
                Err(e) => {
                    let refusal = format!("squeue --json: job #{} of the list: {e}", jobs.len() + 1);
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    return Ok(Err(refusal));
                }
            }
        }
        Ok(Ok(jobs))
    }
}

/// One job object with only its [`JOB_FIELDS`], as a JSON object.
struct JobFields(Value);

impl<'de> Deserialize<'de> for JobFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JobFields, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = JobFields;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a job object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JobFields, A::Error> {
                let mut kept = serde_json::Map::new();
                while let Some(FieldName(name)) = map.next_key()? {
                    match name {
                        Some(name) => {
                            kept.insert(name.to_string(), map.next_value()?);
                        }
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(JobFields(Value::Object(kept)))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// A job object's key: one of [`JOB_FIELDS`], or `None` for the others
/// (read without allocating).
struct FieldName(Option<&'static str>);

impl<'de> Deserialize<'de> for FieldName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FieldName, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = FieldName;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FieldName, E> {
                Ok(FieldName(JOB_FIELDS.binary_search(&v).ok().map(|k| JOB_FIELDS[k])))
            }
        }
        d.deserialize_str(Name)
    }
}

/// Every node of `sinfo --json`'s output.
pub fn parse_sinfo(output: &str) -> Result<Vec<NodeInfo>, String> {
    let v = parse(output, "sinfo --json")?;
    let nodes = document(&v, "nodes", "sinfo --json")?;
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let name = text_field(n, "name").ok_or_else(|| format!("sinfo --json: node #{} of the list has no `name`", i + 1))?;
            let strings = |key: &str| -> Vec<String> {
                match n.get(key) {
                    Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
                    Some(Value::String(s)) if !s.is_empty() => s.split(',').map(str::to_string).collect(),
                    _ => Vec::new(),
                }
            };
            // 22.05: `state` a word and `state_flags` a list; later: `state` a list.
            let (state, mut flags) = match n.get("state") {
                Some(Value::Array(_)) => {
                    let all = strings("state");
                    let base = all.first().map(|s| s.to_lowercase()).unwrap_or_default();
                    (base, all.into_iter().skip(1).collect())
                }
                _ => (text(n, "state").to_lowercase(), Vec::new()),
            };
            flags.extend(strings("state_flags").into_iter().map(|f| f.to_uppercase()));
            // GPUs from the TRES strings (`gres/gpu=8`); `gres` (`gpu:fake:8`)
            // when a release leaves them out.
            let gpus = gpu_count(text(n, "tres")).or_else(|| gpu_count(text(n, "gres").split('(').next().unwrap_or(""))).unwrap_or(0);
            let gpus_used = gpu_count(text(n, "tres_used")).or_else(|| gpu_count(text(n, "gres_used").split('(').next().unwrap_or(""))).unwrap_or(0);
            Ok(NodeInfo { name, state, flags, partitions: strings("partitions"), gpus, gpus_used, reason: text(n, "reason").to_string() })
        })
        .collect()
}

fn text_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_allocator::HOUR_S;

    /// Captured on the test bed (Slurm 22.05.8, 4 nodes × 8 fake GPUs),
    /// trimmed to the fields read.
    const SQUEUE: &str = include_str!("../tests/data/squeue-22.05.json");
    const SINFO: &str = include_str!("../tests/data/sinfo-22.05.json");

    fn jobs() -> Vec<QueueJob> {
        parse_squeue(SQUEUE, &mut Names::new()).unwrap()
    }

    fn by_id(jobs: &[QueueJob], id: u32) -> &QueueJob {
        jobs.iter().find(|j| j.view.job_id == id).unwrap()
    }

    #[test]
    fn a_running_job_holds_its_allocated_gpus() {
        let jobs = jobs();
        let j = by_id(&jobs, 18);
        assert_eq!(j.view.state, RunState::Running);
        assert_eq!(j.view.gpus, 4);
        assert_eq!(j.view.account.as_deref(), Some("pretrain"));
        assert_eq!(&*j.view.user, "alice");
        assert_eq!(j.view.comment.as_deref(), Some("contract=1h"));
        assert_eq!(j.view.time_limit_s, None, "time_limit null = UNLIMITED");
        assert_eq!(j.view.priority, 3221483136);
        assert_eq!(j.node_list, "n4");
        assert!(j.view.start_s > 0);
    }

    #[test]
    fn pending_jobs_as_slurm_shows_them() {
        let jobs = jobs();
        let j = by_id(&jobs, 17);
        assert_eq!((j.view.state, j.view.gpus, j.reason.as_str()), (RunState::Pending, 8, "Resources"));
        let dave = by_id(&jobs, 19);
        assert_eq!((dave.view.nice, dave.view.time_limit_s, dave.view.comment.clone()), (10, Some(3 * HOUR_S), None));
        let held = by_id(&jobs, 21);
        assert_eq!((held.view.priority, held.reason.as_str()), (0, "JobHeldUser"));
        let dep = by_id(&jobs, 22);
        assert_eq!((dep.reason.as_str(), dep.dependency.as_str()), ("Dependency", "afterok:17(unfulfilled)"));
        let begin = by_id(&jobs, 23);
        assert!(begin.view.begin_s > begin.view.submit_s + 3000, "--begin=now+1hour");
        // An array's pending tasks, asked with --gpus=1 (tres_per_job).
        let array = by_id(&jobs, 24);
        assert_eq!((array.view.gpus, array.name()), (1, "24_[1-3]".to_string()));
        // Two nodes of 8 GPUs each (--gpus-per-node=8 -N2).
        let two = by_id(&jobs, 25);
        assert_eq!((two.view.gpus, two.nodes_asked), (16, 2));
        // Nice as the user gave it: unset is 0.
        assert_eq!(j.view.nice, 0);
    }

    #[test]
    fn nodes_and_their_gpus() {
        let nodes = parse_sinfo(SINFO).unwrap();
        assert_eq!(nodes.len(), 4);
        assert!(nodes.iter().all(|n| n.gpus == 8 && n.gpus_used == 8 && n.usable() && n.free() == 0));
        assert!(nodes[0].in_partition(Some("gpu")) && !nodes[0].in_partition(Some("cpu")));
        let drained = NodeInfo { flags: vec!["DRAIN".into()], gpus_used: 0, ..nodes[0].clone() };
        assert_eq!(drained.free(), 0);
    }

    #[test]
    fn slurm_24_11_nodes_from_scontrol() {
        // `scontrol show nodes --json` of the 24.11 test bed (trimmed):
        // what `tally explain` reads when sinfo --json groups nodes.
        let text = r#"{"nodes": [
            {"name": "n1", "state": ["MIXED", "DRAIN"], "gres": "gpu:fake:8", "gres_used": "gpu:fake:8(IDX:0-7)", "partitions": ["gpu"],
             "reason": "e2e: failing GPU", "tres": "cpu=64,mem=500G,billing=8,gres/gpu=8", "tres_used": "cpu=2,gres/gpu=8"},
            {"name": "n2", "state": ["IDLE"], "gres": "gpu:fake:8", "gres_used": "gpu:fake:0(IDX:N/A)", "partitions": ["gpu", "debug"],
             "reason": "", "tres": "cpu=64,mem=500G,billing=8,gres/gpu=8", "tres_used": ""}],
            "last_update": {"set": true, "infinite": false, "number": 1796320600}, "meta": {}, "errors": [], "warnings": []}"#;
        let nodes = parse_sinfo(text).unwrap();
        assert_eq!((nodes[0].gpus, nodes[0].gpus_used, nodes[0].usable(), nodes[0].reason.as_str()), (8, 8, false, "e2e: failing GPU"));
        assert_eq!((nodes[1].gpus, nodes[1].gpus_used, nodes[1].free()), (8, 0, 8));
        assert!(nodes[1].in_partition(Some("debug")) && !nodes[0].in_partition(Some("debug")));
    }

    #[test]
    fn later_releases_numbers_and_states() {
        let text = r#"{"jobs": [{"job_id": 7, "job_state": ["PENDING"], "user_name": "u", "time_limit": {"set": true, "infinite": false, "number": 90},
            "priority": {"set": true, "infinite": false, "number": 5}, "nice": {"set": true, "number": -3}, "tres_per_node": "gres/gpu:2", "node_count": {"set": true, "number": 2}}]}"#;
        let j = &parse_squeue(text, &mut Names::new()).unwrap()[0];
        assert_eq!((j.view.time_limit_s, j.view.priority, j.view.nice, j.view.gpus), (Some(5400), 5, -3, 4));
        let inf = r#"{"jobs": [{"job_id": 8, "job_state": "RUNNING", "time_limit": {"set": true, "infinite": true, "number": 0}}]}"#;
        assert_eq!(parse_squeue(inf, &mut Names::new()).unwrap()[0].view.time_limit_s, None);
    }

    #[test]
    fn array_task_strings_count_their_tasks() {
        let cases: [(&str, Option<u32>); 9] = [
            ("1-3", Some(3)),
            ("0-199", Some(200)),
            ("0-199%2", Some(200)),
            ("0-15:4", Some(4)),
            ("1,3,5-7", Some(5)),
            ("7", Some(1)),
            // Cut short by Slurm (SLURM_BITSTR_LEN): what it still shows.
            ("1,3,5,7,...", Some(4)),
            ("", None),
            ("x-y", None),
        ];
        for (spec, want) in cases {
            assert_eq!(task_count(spec), want, "{spec:?}");
        }
    }

    /// What the plugin classes by what a job will hold, as squeue shows it
    /// (22.05: `shared` a string, numbers plain; 24.11 and later: `shared` a
    /// list of flags, numbers `{set, number}`).
    #[test]
    fn what_a_job_will_hold_as_squeue_shows_it() {
        let v22 = r#"{"jobs": [
            {"job_id": 30, "job_state": "PENDING", "user_name": "u", "account": "a", "comment": "contract=10m", "tres_per_node": "gres:gpu:2", "shared": "none"},
            {"job_id": 31, "job_state": "PENDING", "user_name": "u", "account": "a", "comment": "contract=10m", "tres_per_job": "gres:gpu:1",
             "array_job_id": 31, "array_task_id": null, "array_task_string": "0-199%4"},
            {"job_id": 32, "job_state": "PENDING", "user_name": "u", "account": "a", "comment": "contract=10m", "tres_per_node": "gres:gpu:2", "het_job_id": 32},
            {"job_id": 33, "job_state": "PENDING", "user_name": "u", "account": "a", "tres_per_node": "gres:gpu:8", "het_job_id": 32},
            {"job_id": 34, "job_state": "PENDING", "user_name": "u", "account": "a", "comment": "contract=10m", "tres_per_node": "gres:gpu:2", "shared": null},
            {"job_id": 35, "job_state": "RUNNING", "user_name": "u", "account": "a", "comment": "contract=10m", "start_time": 1796000000,
             "tres_alloc_str": "cpu=1,gres/gpu=1", "array_job_id": 31, "array_task_id": 7, "array_task_string": ""}]}"#;
        let v24 = r#"{"jobs": [
            {"job_id": 30, "job_state": ["PENDING"], "user_name": "u", "account": "a", "comment": "contract=10m", "tres_per_node": "gres/gpu:2", "shared": ["none"]},
            {"job_id": 31, "job_state": ["PENDING"], "user_name": "u", "account": "a", "comment": "contract=10m", "tres_per_job": "gres/gpu:1",
             "array_job_id": {"set": true, "number": 31}, "array_task_id": {"set": false, "number": 0}, "array_task_string": "0-199%4"},
            {"job_id": 32, "job_state": ["PENDING"], "user_name": "u", "account": "a", "comment": "contract=10m", "tres_per_node": "gres/gpu:2",
             "het_job_id": {"set": true, "number": 32}},
            {"job_id": 33, "job_state": ["PENDING"], "user_name": "u", "account": "a", "tres_per_node": "gres/gpu:8", "het_job_id": {"set": true, "number": 32}},
            {"job_id": 34, "job_state": ["PENDING"], "user_name": "u", "account": "a", "comment": "contract=10m", "tres_per_node": "gres/gpu:2", "shared": []},
            {"job_id": 35, "job_state": ["RUNNING"], "user_name": "u", "account": "a", "comment": "contract=10m", "start_time": {"set": true, "number": 1796000000},
             "tres_alloc_str": "cpu=1,gres/gpu=1", "array_job_id": {"set": true, "number": 31}, "array_task_id": {"set": true, "number": 7}}]}"#;
        let config = tally_config::Config::parse("[cluster]\ngpus = 64\ngpus_per_node = 8\n[accounts.a]\nshare = 100\n", "t.toml").unwrap();
        for (release, text) in [("22.05", v22), ("24.11", v24)] {
            let queue = parse_squeue(text, &mut Names::new()).unwrap();
            let seen: Vec<(bool, u32, u32)> = queue.iter().map(|q| (q.view.exclusive, q.view.array_tasks, q.view.het_job_id)).collect();
            assert_eq!(seen, [(true, 1, 0), (false, 200, 0), (false, 1, 32), (false, 1, 32), (false, 1, 0), (false, 1, 0)], "{release}");
            let views: Vec<JobView> = queue.iter().map(|q| q.view.clone()).collect();
            let jobs = tally_engine::engine::classify(&config, &views, &tally_allocator::RunBook::new(), 1_796_000_100, 0);
            let classes: Vec<(bool, u32, u32)> = jobs.iter().map(|(_, j)| (config.priority.is_debug(j), j.class_gpus(), j.tasks)).collect();
            // The exclusive job holds a node; the record is 200 debug tasks;
            // the het job holds 10; a plain 2-GPU job and a running task are debug.
            assert_eq!(classes, [(false, 8, 1), (true, 1, 200), (false, 10, 1), (false, 10, 1), (true, 2, 1), (true, 1, 1)], "{release}");
        }
    }

    #[test]
    fn bad_input_says_what_is_wrong() {
        let err = |t: &str| parse_squeue(t, &mut Names::new()).unwrap_err();
        assert!(err("squeue: error: unrecognized option '--json'").contains("not JSON"));
        assert!(err(r#"{"meta": {}}"#).contains("no `jobs` list"));
        assert!(err(r#"{"jobs": [{"job_state": "PENDING"}]}"#).contains("job #1 of the list: no `job_id`"));
        assert!(err(r#"{"jobs": [{"job_id": 3, "job_state": "WEIRD"}]}"#).contains("job 3: unknown job_state"));
        assert!(err(r#"{"jobs": [{"job_id": 3, "job_state": "PENDING", "priority": "high"}]}"#).contains("`priority` is \"high\""));
        assert!(err(r#"{"errors": [{"description": "Invalid user"}], "jobs": []}"#).contains("Slurm reported errors: Invalid user"));
        assert!(parse_sinfo(r#"{"nodes": [{"state": "idle"}]}"#).unwrap_err().contains("no `name`"));
    }

    #[test]
    fn the_streamed_read_keeps_every_field_a_job_view_reads() {
        // The whole tree, job by job, as [`job`] reads it: the streamed
        // read must find the same in every job of the captured queue.
        let tree: Value = serde_json::from_str(SQUEUE).unwrap();
        let mut names = Names::new();
        let whole: Vec<QueueJob> = tree["jobs"].as_array().unwrap().iter().map(|j| job(j, &mut names).unwrap()).collect();
        assert_eq!(jobs(), whole);
        assert!(JOB_FIELDS.is_sorted(), "JOB_FIELDS is searched by bisection");
        // Fields nobody reads, nested or not, are skipped; so is the rest
        // of the document, wherever `errors` comes.
        let padded = r#"{"jobs": [{"job_id": 7, "extra": {"a": [1, {"b": null}]}, "job_state": "PENDING", "many": [1,2,3], "user_name": "u"}],
            "meta": {"plugin": {"type": "openapi"}}, "errors": [], "warnings": [{"description": "x"}]}"#;
        let j = &parse_squeue(padded, &mut Names::new()).unwrap()[0];
        assert_eq!((j.view.job_id, &*j.view.user, j.state.as_str()), (7, "u", "PENDING"));
    }

    #[test]
    fn a_job_that_cannot_be_read_is_the_refusal_whatever_follows() {
        let text = r#"{"jobs": [{"job_id": 1, "job_state": "PENDING"}, {"job_id": 2, "job_state": "ODD"}, {"job_id": 3, "job_state": "PENDING"}], "errors": []}"#;
        assert_eq!(parse_squeue(text, &mut Names::new()).unwrap_err(), "squeue --json: job #2 of the list: job 2: unknown job_state \"ODD\"");
        // Slurm's own errors come first, even after the jobs.
        let text = r#"{"jobs": [{"job_id": 2, "job_state": "ODD"}], "errors": [{"error": "Unable to contact slurm controller"}]}"#;
        assert_eq!(parse_squeue(text, &mut Names::new()).unwrap_err(), "squeue --json: Slurm reported errors: Unable to contact slurm controller");
        assert!(parse_squeue(r#"{"jobs": []} trailing"#, &mut Names::new()).unwrap_err().contains("not JSON"));
    }
}
