//! The exposition: a [`Reading`] and the [`Counters`] as OpenMetrics text,
//! encoded by `prometheus-client` (names, `# TYPE`/`# HELP`/`# UNIT`,
//! label escaping, `_total`, cumulative histogram buckets, `# EOF`).
//!
//! Every series is named here and nowhere else ([`FAMILIES`]): `tally_`,
//! base units (seconds; GPU-hours as `gpu_seconds`), `_total` on
//! counters, labels `account` (with `parent` and `path` on
//! `tally_account_info`), `class`, `state`, `tier`, `reason` — never a job.
//! With `[reports] private = true` (and no `--show-accounts`) no series
//! carries an account.

use super::reading::{Counters, JobClass, Reading, WAIT_BUCKETS_S};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// The media type of the exposition (OpenMetrics 1.0.0).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// (name without unit and `_total`, type, unit, help). The served name is
/// `name` + `_` + unit (+ `_total` for a counter).
pub const FAMILIES: &[(&str, MetricType, Option<&str>, &str)] = &[
    ("tally_account_info", MetricType::Gauge, None, "The account tree: 1 per account, labelled with its parent and its path from the root."),
    ("tally_account_rate", MetricType::Gauge, Some("gpus"), "Allocation rate: the account's budget in GPUs (budget units with GPU types)."),
    ("tally_account_allocated", MetricType::Gauge, Some("gpu_seconds"), "GPU time allocated over the window (7 days), subtree."),
    ("tally_account_used", MetricType::Gauge, Some("gpu_seconds"), "Allocated GPU time used over the window, subtree."),
    ("tally_account_usage", MetricType::Gauge, Some("ratio"), "Used over allocated in the window: what the 7-day rank sorts by."),
    ("tally_account_rank", MetricType::Gauge, None, "7-day rank among the cluster's accounts, 0 = most under-served (the queue's team order)."),
    ("tally_account_fair_share", MetricType::Gauge, None, "(n - rank) / n: sprio's FAIRSHARE factor."),
    ("tally_account_running", MetricType::Gauge, Some("gpus"), "Allocated GPUs running at the ledger's save, subtree."),
    ("tally_account_waiting", MetricType::Gauge, Some("gpus"), "Allocated GPUs waiting (eligible) at the ledger's save, subtree."),
    (
        "tally_account_short",
        MetricType::Gauge,
        Some("gpus"),
        "GPUs below what is owed now, min(rate, running + waiting) - running: such a team's jobs go first.",
    ),
    ("tally_account_owed", MetricType::Gauge, Some("gpu_seconds"), "GPU time owed over the window: per hour, min(rate, what was asked)."),
    ("tally_account_delivered", MetricType::Gauge, Some("gpu_seconds"), "Allocated GPU time that ran over the window."),
    (
        "tally_account_delivered",
        MetricType::Gauge,
        Some("ratio"),
        "Delivered up to what was owed, hour by hour, over owed (absent when nothing was owed).",
    ),
    (
        "tally_account_delivered_window",
        MetricType::Gauge,
        Some("ratio"),
        "Delivered up to what was owed over the whole window, min(delivered, owed) over owed (absent when nothing was owed).",
    ),
    (
        "tally_account_unallocated",
        MetricType::Gauge,
        Some("gpu_seconds"),
        "Unallocated GPU time (contract 0) that ran over the window: never charged.",
    ),
    ("tally_account_owed_last_hour", MetricType::Gauge, Some("gpu_seconds"), "GPU time owed in the last whole hour."),
    ("tally_account_delivered_last_hour", MetricType::Gauge, Some("gpu_seconds"), "Allocated GPU time that ran in the last whole hour."),
    ("tally_cluster", MetricType::Gauge, Some("gpus"), "GPUs the ranking counts ([cluster] gpus, or the nodes')."),
    ("tally_cluster_running", MetricType::Gauge, Some("gpus"), "GPUs running now by tier (allocated, unallocated), from squeue."),
    ("tally_jobs", MetricType::Gauge, None, "Jobs now by state (running, pending) and class (debug, allocated, unallocated), from squeue."),
    (
        "tally_job_wait",
        MetricType::Histogram,
        Some("seconds"),
        "First start minus submit of the jobs seen starting since the exporter started, by class.",
    ),
    (
        "tally_preemptions",
        MetricType::Counter,
        None,
        "Runs preempted, by the rule that made each a victim (unallocated, restore, time_slice; other: not offered by preempt/tally).",
    ),
    (
        "tally_preemption_lost",
        MetricType::Counter,
        Some("gpu_seconds"),
        "GPU time preemptions threw away (runs of jobs that cannot checkpoint), by reason.",
    ),
    ("tally_contract_violations", MetricType::Counter, None, "Runs preempted inside their contract: should stay 0."),
    (
        "tally_recalculation_duration",
        MetricType::Gauge,
        Some("seconds"),
        "Wall time of priority/tally's last recalculation before the ledger was saved.",
    ),
    ("tally_ledger_age", MetricType::Gauge, Some("seconds"), "Time since priority/tally saved the ledger the figures come from."),
    ("tally_ledger_stale", MetricType::Gauge, None, "1 when the last refresh failed and the last good figures are served."),
    ("tally_exporter_read_errors", MetricType::Counter, None, "Refreshes that could not read the config or the ledger."),
    ("tally_exporter_last_read_timestamp", MetricType::Gauge, Some("seconds"), "When the figures served were read (Unix time)."),
];

/// What one scrape shows: the last good reading, whether it is stale, and
/// the counters.
#[derive(Debug)]
pub struct Exposition<'a> {
    pub reading: &'a Reading,
    pub counters: &'a Counters,
    pub stale: bool,
    /// Now, for the ledger's age.
    pub now: u64,
}

/// The OpenMetrics text of one scrape.
pub fn encode(e: &Exposition<'_>) -> String {
    let mut out = String::new();
    let collector = Collector(render(e));
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// One sample: its labels and value.
#[derive(Debug, Clone)]
enum Value {
    Gauge(f64),
    Counter(f64),
    /// Per-bucket counts (not cumulative) of [`WAIT_BUCKETS_S`] and +Inf, sum, count.
    Histogram(Vec<(f64, u64)>, f64, u64),
}

type Labels = Vec<(&'static str, String)>;

/// The samples of each family, in [`FAMILIES`] order (index into it).
#[derive(Debug, Clone, Default)]
struct Collector(Vec<(usize, Vec<(Labels, Value)>)>);

fn family(name: &str, unit: Option<&str>) -> usize {
    FAMILIES.iter().position(|f| f.0 == name && f.2 == unit).unwrap_or_else(|| panic!("no family {name} {unit:?}"))
}

fn render(e: &Exposition<'_>) -> Vec<(usize, Vec<(Labels, Value)>)> {
    let r = e.reading;
    let mut fams: Vec<Vec<(Labels, Value)>> = vec![Vec::new(); FAMILIES.len()];
    let mut put = |name: &str, unit: Option<&str>, labels: Labels, v: Value| fams[family(name, unit)].push((labels, v));
    if !r.private {
        for row in &r.accounts {
            let a = || vec![("account", row.account.clone())];
            if let Some(p) = r.places.get(&row.account) {
                put(
                    "tally_account_info",
                    None,
                    vec![("account", row.account.clone()), ("parent", p.parent.clone()), ("path", p.path.clone())],
                    Value::Gauge(1.0),
                );
            }
            let hours = |h: f64| Value::Gauge(h * 3600.0);
            let mut opt = |name: &str, unit: Option<&str>, v: Option<Value>| {
                if let Some(v) = v {
                    put(name, unit, a(), v);
                }
            };
            opt("tally_account_rate", Some("gpus"), row.rate.map(Value::Gauge));
            opt("tally_account_allocated", Some("gpu_seconds"), row.alloc.map(hours));
            opt("tally_account_used", Some("gpu_seconds"), row.used.map(hours));
            opt("tally_account_usage", Some("ratio"), row.ratio.map(Value::Gauge));
            opt("tally_account_rank", None, row.rank.map(|x| Value::Gauge(f64::from(x))));
            opt("tally_account_fair_share", None, row.fair_share.map(Value::Gauge));
            opt("tally_account_running", Some("gpus"), row.running.map(Value::Gauge));
            opt("tally_account_waiting", Some("gpus"), row.waiting.map(Value::Gauge));
            opt("tally_account_short", Some("gpus"), row.short.map(Value::Gauge));
            // As share: nothing for an account nothing was owed to nor ran in
            // the window.
            let o = row.owed;
            opt("tally_account_owed", Some("gpu_seconds"), o.map(|o| hours(o.delivery.owed_gpu_hours)));
            opt("tally_account_delivered", Some("gpu_seconds"), o.map(|o| hours(o.delivery.delivered_gpu_hours)));
            opt("tally_account_delivered", Some("ratio"), o.and_then(|o| o.delivery.ratio()).map(Value::Gauge));
            opt("tally_account_delivered_window", Some("ratio"), row.window_fraction().map(Value::Gauge));
            opt("tally_account_unallocated", Some("gpu_seconds"), o.map(|o| hours(o.unallocated_gpu_hours)));
            let h = r.last_hour.get(&row.account).copied().unwrap_or_default();
            opt("tally_account_owed_last_hour", Some("gpu_seconds"), Some(hours(h.delivery.owed_gpu_hours)));
            opt("tally_account_delivered_last_hour", Some("gpu_seconds"), Some(hours(h.delivery.delivered_gpu_hours)));
        }
    }
    put("tally_cluster", Some("gpus"), vec![], Value::Gauge(f64::from(r.gpus)));
    if let (Some((alloc, unalloc)), Some(jobs)) = (r.running_gpus(), &r.jobs) {
        put("tally_cluster_running", Some("gpus"), vec![("tier", "allocated".into())], Value::Gauge(alloc as f64));
        put("tally_cluster_running", Some("gpus"), vec![("tier", "unallocated".into())], Value::Gauge(unalloc as f64));
        for running in [true, false] {
            for class in JobClass::ALL {
                let n = jobs.iter().filter(|j| j.running == running && j.class == class).count();
                let state = if running { "running" } else { "pending" };
                put("tally_jobs", None, vec![("state", state.into()), ("class", class.name().into())], Value::Gauge(n as f64));
            }
        }
    }
    let c = e.counters;
    for class in JobClass::ALL {
        let w = c.waits.get(&class).cloned().unwrap_or_default();
        let mut buckets: Vec<(f64, u64)> = WAIT_BUCKETS_S.iter().copied().zip(w.buckets).collect();
        buckets.push((f64::INFINITY, w.count - w.buckets.iter().sum::<u64>()));
        put("tally_job_wait", Some("seconds"), vec![("class", class.name().into())], Value::Histogram(buckets, w.sum_s, w.count));
    }
    for reason in tally_allocator::PreemptReason::ALL.iter().map(|r| r.name()).chain([tally_engine::preempted::OTHER]) {
        let (n, lost) = c.preemptions.get(reason).copied().unwrap_or_default();
        put("tally_preemptions", None, vec![("reason", reason.into())], Value::Counter(n as f64));
        put("tally_preemption_lost", Some("gpu_seconds"), vec![("reason", reason.into())], Value::Counter(lost));
    }
    put("tally_contract_violations", None, vec![], Value::Counter(c.violations as f64));
    if r.tick_us > 0 {
        put("tally_recalculation_duration", Some("seconds"), vec![], Value::Gauge(r.tick_us as f64 / 1e6));
    }
    if r.saved_at > 0 {
        put("tally_ledger_age", Some("seconds"), vec![], Value::Gauge(e.now.saturating_sub(r.saved_at) as f64));
    }
    put("tally_ledger_stale", None, vec![], Value::Gauge(if e.stale { 1.0 } else { 0.0 }));
    put("tally_exporter_read_errors", None, vec![], Value::Counter(c.read_errors as f64));
    put("tally_exporter_last_read_timestamp", Some("seconds"), vec![], Value::Gauge(r.at as f64));
    fams.into_iter().enumerate().filter(|(_, s)| !s.is_empty()).collect()
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (i, samples) in &self.0 {
            let (name, kind, unit, help) = &FAMILIES[*i];
            // (The crate's `Unit::Ratios` says `ratios`; OpenMetrics and the
            // served names say `ratio`.)
            let unit = unit.map(|u| if u == "seconds" { Unit::Seconds } else { Unit::Other(u.to_string()) });
            let mut fam = encoder.encode_descriptor(name, help, unit.as_ref(), *kind)?;
            for (labels, v) in samples {
                let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut m = fam.encode_family(&labels)?;
                match v {
                    Value::Gauge(x) => m.encode_gauge(x)?,
                    Value::Counter(x) => m.encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(x, None)?,
                    Value::Histogram(b, sum, count) => m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(*sum, *count, b, None)?,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::exporter::reading::{LiveJob, Reading};
    use std::collections::BTreeSet;
    use tally_allocator::{Held, Snapshot, UsageKey, HOUR_S};
    use tally_config::Config;

    pub(crate) const NOW: u64 = 1_796_083_200 + 10 * HOUR_S;

    /// 16 GPUs: research 75% (nlp and vision half each), ops 336 GPU-h a
    /// week. nlp ran 8 GPUs for 6 h asking 12.
    pub(crate) fn fixture(private: bool) -> Reading {
        let text = "[cluster]\ngpus = 16\n[accounts.research]\nshare = 75\n[accounts.nlp]\nparent = \"research\"\nshare = 50\n\
                    [accounts.vision]\nparent = \"research\"\nshare = 50\n[accounts.ops]\ngpu_hours = 336\n";
        let config = Config::parse(text, "exporter.toml").unwrap();
        let mut snap = Snapshot::new(config.new_ledger());
        let alloc = config.allocation(16).unwrap();
        let rate = alloc.rate_gpus(config.tree.id("nlp").unwrap());
        snap.ledger.charge(&UsageKey::new("nlp", "alice"), 8, NOW - 6 * HOUR_S, NOW);
        snap.owed.record(&"nlp".into(), Held { rate_gpus: rate, demand_gpus: 12.0, unallocated_gpus: 0.0 }, NOW - 6 * HOUR_S, NOW);
        snap.load.insert("nlp".into(), (8.0, 4.0));
        snap.saved_at = NOW - 20;
        snap.tick_us = 18_250;
        let mut r = Reading::compute(&config, &snap, None, NOW, private).unwrap();
        let job = |id: u32, running: bool, class: JobClass, gpus: u32| LiveJob {
            id,
            name: id.to_string(),
            account: "nlp".into(),
            user: "alice".into(),
            running,
            class,
            gpus,
            contract: "2h".into(),
            submit_s: NOW - 100,
            start_s: if running { NOW - 40 } else { 0 },
            time_limit_s: None,
            restarts: 0,
            reason: String::new(),
        };
        r.jobs = Some(vec![
            job(1, true, JobClass::Allocated, 8),
            job(2, false, JobClass::Allocated, 4),
            job(3, true, JobClass::Debug, 1),
            job(4, true, JobClass::Unallocated, 2),
        ]);
        r
    }

    pub(crate) fn counters(r: &Reading) -> Counters {
        let mut c = Counters::default();
        c.observe_starts(r.jobs.as_deref().unwrap(), 0);
        let mut notes = tally_engine::preempted::Notes::new();
        let why = tally_engine::preempted::Why { reason: Some(tally_allocator::PreemptReason::Restore), lost_gpu_s: 7200, contract_left_s: 0 };
        notes.note(tally_engine::preempted::Note { job_id: 9, run_start_s: NOW - 3600, at_s: NOW - 60, why: Some(why) });
        c.observe_notes(&notes);
        c
    }

    /// The fixture's exposition.
    fn exposition(private: bool, stale: bool) -> String {
        let r = fixture(private);
        let c = counters(&r);
        encode(&Exposition { reading: &r, counters: &c, stale, now: NOW })
    }

    /// The sample names of an exposition (`name{...} value` and `name value`).
    pub(crate) fn sample_names(text: &str) -> BTreeSet<String> {
        text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(|l| l.split(['{', ' ']).next().unwrap().to_string()).collect()
    }

    /// The value of the sample whose line starts with `head` (name and labels).
    fn value(text: &str, head: &str) -> f64 {
        let line = text.lines().find(|l| l.starts_with(head)).unwrap_or_else(|| panic!("no {head} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn every_family_is_served_with_its_figures() {
        let text = exposition(false, false);
        assert!(text.ends_with("# EOF\n"), "{text}");
        // Every family of the catalogue is in the fixture's exposition.
        for (name, kind, unit, _) in FAMILIES {
            let full = format!("{name}{}", unit.map_or(String::new(), |u| format!("_{u}")));
            assert!(text.contains(&format!("# TYPE {full} ")), "{full} ({kind:?}) missing:\n{text}");
        }
        // The figures are share's: nlp used 48 GPU-h = 172800 GPU-s, owed
        // its rate (6) of the 12 asked for 6 h = 36 GPU-h.
        assert_eq!(value(&text, "tally_account_used_gpu_seconds{account=\"nlp\"}"), 48.0 * 3600.0);
        assert_eq!(value(&text, "tally_account_owed_gpu_seconds{account=\"nlp\"}"), 36.0 * 3600.0);
        assert_eq!(value(&text, "tally_account_delivered_ratio{account=\"nlp\"}"), 1.0);
        assert_eq!(value(&text, "tally_account_delivered_window_ratio{account=\"nlp\"}"), 1.0);
        assert_eq!(value(&text, "tally_account_rate_gpus{account=\"nlp\"}"), 6.0);
        assert_eq!(value(&text, "tally_account_running_gpus{account=\"research\"}"), 8.0);
        // The tree, for subtree panels.
        assert!(text.contains("tally_account_info{account=\"vision\",parent=\"research\",path=\"root/research/vision\"} 1"), "{text}");
        assert_eq!(value(&text, "tally_cluster_running_gpus{tier=\"allocated\"}"), 9.0);
        assert_eq!(value(&text, "tally_jobs{state=\"pending\",class=\"allocated\"}"), 1.0);
        // Two first starts seen, each 60 s after submit.
        assert_eq!(value(&text, "tally_job_wait_seconds_count{class=\"allocated\"}"), 1.0);
        assert_eq!(value(&text, "tally_job_wait_seconds_bucket{le=\"30.0\",class=\"debug\"}"), 0.0);
        assert_eq!(value(&text, "tally_job_wait_seconds_bucket{le=\"60.0\",class=\"debug\"}"), 1.0);
        assert_eq!(value(&text, "tally_job_wait_seconds_bucket{le=\"+Inf\",class=\"debug\"}"), 1.0);
        assert_eq!(value(&text, "tally_preemptions_total{reason=\"restore\"}"), 1.0);
        assert_eq!(value(&text, "tally_preemption_lost_gpu_seconds_total{reason=\"restore\"}"), 7200.0);
        assert_eq!(value(&text, "tally_contract_violations_total"), 0.0);
        assert_eq!(value(&text, "tally_ledger_age_seconds"), 20.0);
        assert_eq!(value(&text, "tally_recalculation_duration_seconds"), 0.01825);
        assert_eq!(value(&text, "tally_ledger_stale"), 0.0);
    }

    #[test]
    fn private_names_no_account() {
        let text = exposition(true, true);
        assert!(!text.contains("account"), "{text}");
        assert!(!text.contains("nlp"), "{text}");
        assert_eq!(value(&text, "tally_ledger_stale"), 1.0);
        assert_eq!(value(&text, "tally_cluster_gpus"), 16.0);
    }

    /// docs/reports.md names every series served, and no other.
    #[test]
    fn the_docs_list_every_series() {
        let text = exposition(false, false);
        let families: BTreeSet<String> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap().to_string()).collect();
        let served: BTreeSet<String> =
            families.iter().map(|f| if text.contains(&format!("# TYPE {f} counter")) { format!("{f}_total") } else { f.clone() }).collect();
        let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/reports.md")).unwrap();
        let section = &docs[docs.find("### The series").unwrap()..docs.find("### The Grafana dashboard").unwrap()];
        let named: BTreeSet<String> =
            section.split('`').skip(1).step_by(2).filter(|w| w.starts_with("tally_") && *w != "tally_").map(String::from).collect();
        assert_eq!(named, served, "docs/reports.md, \"The series\", against what the exporter serves");
    }

    /// The Grafana dashboard queries only series the exporter serves.
    #[test]
    fn the_dashboard_queries_only_served_series() {
        let served = sample_names(&exposition(false, false));
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/grafana/tally.json");
        let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut exprs = Vec::new();
        fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, x) in m {
                        match (k.as_str(), x) {
                            ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                            ("query", serde_json::Value::Object(q)) => {
                                if let Some(serde_json::Value::String(s)) = q.get("query") {
                                    out.push(s.clone());
                                }
                            }
                            _ => walk(x, out),
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        walk(&dashboard, &mut exprs);
        assert!(exprs.len() >= 10, "{exprs:?}");
        let mut names = BTreeSet::new();
        for e in &exprs {
            let bytes = e.as_bytes();
            let mut i = 0;
            while let Some(at) = e[i..].find("tally_") {
                let start = i + at;
                let end = start + e[start..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(e.len() - start);
                // A whole name, not the tail of another word.
                if start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                    names.insert(e[start..end].to_string());
                }
                i = end;
            }
        }
        let missing: Vec<&String> = names.iter().filter(|n| !served.contains(*n)).collect();
        assert!(missing.is_empty(), "the dashboard queries series the exporter does not serve: {missing:?}\nserved: {served:?}");
        assert!(names.len() >= 15, "{names:?}");
    }
}
