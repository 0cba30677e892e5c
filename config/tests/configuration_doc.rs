//! docs/configuration.md against the code and docs/man/tally.toml.5: the
//! guide documents exactly the keys the parser accepts, with the types and
//! defaults the man page states, each default is what the code applies,
//! the ranges it states hold, and every section's example validates.
//!
//! The guide's conventions, which this test relies on:
//!
//! - A key section is a `## ` heading that is a table in backticks
//!   (`` ## `[ledger]` ``), or `## Removed keys`. Other `## ` sections
//!   (introduction, value types) hold no keys.
//! - In a key section, every table row but the header is one key:
//!   `` | `key` | type (unit) | default | allowed | meaning | ``; under
//!   Removed keys `` | `table.key` | instead | ``. A word in capitals
//!   (`NAME`, `TYPE`, `USER`) is a name of the file's choosing.
//! - A default in backticks alone (`` `"7d"` ``, `` `8` ``) is a TOML
//!   value; anything else ("none (no limit)") is not a value.
//! - The first clause of "allowed" (up to `;`) is checked when it has one
//!   of the forms of [`Range`]; other wording is read by people only.
//! - Each table's section has one ```` ```toml ```` example.

mod common;

use common::{DefaultIs, PAGE, PAGE_PATH};
use std::collections::{BTreeMap, BTreeSet};
use tally_allocator::{LongJobs, MissingContract};
use tally_config::{raw, Config, DROPPED_KEYS};
use toml::Value;

const DOC: &str = include_str!("../../docs/configuration.md");
const DOC_PATH: &str = "docs/configuration.md";

/// One key row of the guide.
#[derive(Debug)]
struct Row {
    /// Dotted key, `*` for a name of the file's choosing.
    key: String,
    /// 1-based line in the guide.
    line: usize,
    removed: bool,
    /// The type cell up to its unit: `duration`, `integer`, ...
    ty: String,
    default: Option<DefaultIs>,
    allowed: String,
    meaning: String,
}

/// One `## ` section of the guide that holds keys.
#[derive(Debug)]
struct Section {
    /// `cluster`, `accounts.*`, ...; `None` for Removed keys.
    table: Option<String>,
    line: usize,
    /// Each ```toml block, with its first line.
    examples: Vec<(usize, String)>,
}

/// `NAME` → `*`, segment by segment.
fn key_path(written: &str) -> String {
    written.split('.').map(|s| if !s.is_empty() && s.chars().all(|c| c.is_ascii_uppercase()) { "*" } else { s }).collect::<Vec<_>>().join(".")
}

/// The text between one pair of backticks that is the whole cell, if so.
fn code(cell: &str) -> Option<&str> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.contains('`')).then_some(inner)
}

fn doc() -> (Vec<Section>, Vec<Row>) {
    let mut sections: Vec<Section> = Vec::new();
    let mut rows = Vec::new();
    // Inside a key section: its table (`None`: Removed keys).
    let mut current: Option<Option<String>> = None;
    // Inside a fenced block: whether it is TOML, its first line, its text.
    let mut fence: Option<(bool, usize, String)> = None;
    for (i, line) in DOC.lines().enumerate() {
        let n = i + 1;
        if let Some((toml, start, text)) = &mut fence {
            if line.trim() == "```" {
                if *toml && current.is_some() {
                    let block = (*start, std::mem::take(text));
                    sections.last_mut().expect("a section").examples.push(block);
                }
                fence = None;
            } else {
                text.push_str(line);
                text.push('\n');
            }
            continue;
        }
        if let Some(lang) = line.trim().strip_prefix("```") {
            fence = Some((lang == "toml", n + 1, String::new()));
            continue;
        }
        if let Some(title) = line.strip_prefix("## ") {
            let table = code(title).and_then(|t| t.strip_prefix('[')).and_then(|t| t.strip_suffix(']'));
            current = match (table, title) {
                (Some(t), _) => Some(Some(key_path(t))),
                (None, "Removed keys") => Some(None),
                _ => None,
            };
            if let Some(table) = &current {
                sections.push(Section { table: table.clone(), line: n, examples: Vec::new() });
            }
            continue;
        }
        let Some(table) = &current else { continue };
        let Some(inner) = line.strip_prefix('|').and_then(|l| l.strip_suffix('|')) else { continue };
        let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
        if cells[0] == "key" || cells[0].starts_with("---") {
            continue;
        }
        let written = code(cells[0]).unwrap_or_else(|| panic!("{DOC_PATH}:{n}: a key row starts with the key in backticks: {line}"));
        let row = match table {
            Some(table) => {
                assert_eq!(cells.len(), 5, "{DOC_PATH}:{n}: key | type (unit) | default | allowed | meaning: {line}");
                let default = match code(cells[2]) {
                    Some(v) => DefaultIs::Value(v.to_string()),
                    None => DefaultIs::Words(cells[2].to_string()),
                };
                let ty = cells[1].split(" (").next().unwrap_or_default().to_string();
                Row {
                    key: format!("{table}.{}", key_path(written)),
                    line: n,
                    removed: false,
                    ty,
                    default: Some(default),
                    allowed: cells[3].to_string(),
                    meaning: cells[4].to_string(),
                }
            }
            None => {
                assert_eq!(cells.len(), 2, "{DOC_PATH}:{n}: key | instead: {line}");
                let key = key_path(written);
                Row { key, line: n, removed: true, ty: String::new(), default: None, allowed: String::new(), meaning: cells[1].to_string() }
            }
        };
        for (what, cell) in [("type", &row.ty), ("allowed", &row.allowed)] {
            assert!(row.removed || !cell.is_empty(), "{DOC_PATH}:{n}: {} has no {what}", row.key);
        }
        assert!(!row.meaning.is_empty(), "{DOC_PATH}:{n}: {} says nothing about what it does", row.key);
        rows.push(row);
    }
    assert!(fence.is_none(), "{DOC_PATH}: a ``` block is not closed");
    (sections, rows)
}

/// The key entries of the man page (common::entries): key → (removed,
/// type, default).
fn page() -> BTreeMap<String, (bool, String, DefaultIs)> {
    common::entries().into_iter().map(|e| (e.key, (e.removed, e.ty, e.default.unwrap_or(DefaultIs::Words(String::new()))))).collect()
}

/// The keys of a `[cluster.gpu_types]` row's table form, as serde's derive
/// lists them when it refuses an unknown key (`expected `weight` or
/// `gpus``): `raw::accepted_keys` stops at `cluster.gpu_types`.
fn gpu_type_fields() -> Vec<String> {
    let (key, _, message) = raw::parse("[cluster.gpu_types.b200]\nnot_a_key_of_tally = 1\n").expect_err("an unknown key is refused");
    assert_eq!(key, "cluster.gpu_types.b200.not_a_key_of_tally");
    let expected = message.split_once("expected").map(|(_, e)| e).unwrap_or_else(|| panic!("serde's message changed: {message}"));
    let fields: Vec<String> = expected.split('`').skip(1).step_by(2).map(str::to_string).collect();
    assert!(fields.contains(&"weight".to_string()), "the fields of a GPU type's table, from `{message}`: {fields:?}");
    fields
}

/// Every key the parser accepts: [`raw::accepted_keys`], and the rows of
/// `[cluster.gpu_types]` (a type, and its table form's keys).
fn accepted() -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = raw::accepted_keys().into_iter().collect();
    keys.insert("cluster.gpu_types.*".to_string());
    keys.extend(gpu_type_fields().into_iter().map(|f| format!("cluster.gpu_types.*.{f}")));
    keys
}

/// Whether `key` is a row of `[cluster.gpu_types]` (the man page describes
/// them under `gpu_types` in `[cluster]`).
fn gpu_type_row(key: &str) -> bool {
    key.starts_with("cluster.gpu_types.")
}

#[test]
fn the_guide_documents_every_key_the_parser_accepts_and_no_other() {
    let (_, rows) = doc();
    let mut documented = BTreeSet::new();
    for r in &rows {
        assert!(documented.insert(r.key.clone()), "{DOC_PATH}:{}: {} is documented twice", r.line, r.key);
    }
    let accepted = accepted();
    let undocumented: Vec<&String> = accepted.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&accepted).collect();
    assert!(undocumented.is_empty(), "keys the parser (config/src/raw.rs) accepts that {DOC_PATH} does not document: {undocumented:?}");
    assert!(unknown.is_empty(), "keys {DOC_PATH} documents that the parser does not accept: {unknown:?}");
    let removed: BTreeSet<&str> = rows.iter().filter(|r| r.removed).map(|r| r.key.as_str()).collect();
    let dropped: BTreeSet<&str> = DROPPED_KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(removed, dropped, "{DOC_PATH}'s Removed keys are tally_config::DROPPED_KEYS");
    // The parser of this test saw the guide's tables.
    assert!(rows.len() >= 35, "{} rows read from {DOC_PATH}", rows.len());
}

#[test]
fn the_guide_and_the_man_page_agree_on_keys_types_and_defaults() {
    let (_, rows) = doc();
    let page = page();
    let in_guide: BTreeSet<&str> = rows.iter().map(|r| r.key.as_str()).filter(|k| !gpu_type_row(k)).collect();
    let in_page: BTreeSet<&str> = page.keys().map(String::as_str).collect();
    assert_eq!(in_guide, in_page, "the keys of {DOC_PATH} (but [cluster.gpu_types]'s rows) and of {PAGE_PATH}");
    let mut compared = 0;
    for r in rows.iter().filter(|r| !gpu_type_row(&r.key)) {
        let (removed, ty, default) = &page[&r.key];
        assert_eq!(r.removed, *removed, "{}: removed in one of {DOC_PATH} and {PAGE_PATH} only", r.key);
        if r.removed {
            continue;
        }
        assert_eq!(&r.ty, ty, "{DOC_PATH}:{}: the type of {}", r.line, r.key);
        assert_eq!(r.default.as_ref(), Some(default), "{DOC_PATH}:{}: the default of {} in {PAGE_PATH}", r.line, r.key);
        compared += 1;
    }
    assert!(compared >= 30, "{compared} defaults compared");
    // The man page describes the rows of [cluster.gpu_types] in the entry
    // of `gpu_types`: its text names each key of a row's table.
    let entry = PAGE.split("\\fBgpu_types\\fR = ").nth(1).and_then(|e| e.split("\n.TP\n").next()).expect("the entry of gpu_types");
    for f in gpu_type_fields() {
        assert!(entry.contains(&format!("{f} = ")), "{PAGE_PATH}: the entry of gpu_types does not name `{f}`");
    }
}

/// A file that sets `key` to `value` (`None`: leaves it out), with what
/// makes the key matter: the planner's keys count when it is enabled, and
/// the file has one account (as a real one does), first, so that its line
/// is the same with and without the key.
fn file(key: &str, value: Option<&str>) -> String {
    let set = |k: &str| value.map(|v| format!("{k} = {v}\n")).unwrap_or_default();
    let account = "[accounts.team]\nshare = 50\n";
    let (table, name) = key.rsplit_once('.').expect("a key in a table");
    match (table, name) {
        ("cluster.gpu_types", "*") => format!("{account}[cluster.gpu_types]\n{}", set("b200")),
        ("cluster.gpu_types.*", field) => format!("{account}[cluster.gpu_types.b200]\n{}", set(field)),
        ("accounts.*", field) => format!("[accounts.team]\n{}", set(field)),
        ("users", "*") => format!("{account}[users]\n{}", set("alice")),
        ("planner", "enabled") => format!("{account}[cluster]\ngpus = 8\n[planner]\n{}", set(name)),
        ("planner", _) => format!("{account}[cluster]\ngpus = 8\n[planner]\nenabled = true\n{}", set(name)),
        (table, name) => format!("{account}[{table}]\n{}", set(name)),
    }
}

fn load(text: &str) -> Result<Config, String> {
    Config::parse(text, "t.toml")
        .map(|mut c| {
            c.text.clear();
            c
        })
        .map_err(|e| e.to_string())
}

/// The value `key` has in `c`, in the guide's units (durations in
/// seconds); `None` inside: the key has no value. `None` outside: no
/// accessor (then the key must not have a default written as a value).
fn loaded(key: &str, c: &Config) -> Option<Option<Value>> {
    let int = |n: u64| Some(Value::Integer(i64::try_from(n).expect("fits")));
    let text = |s: &str| Some(Value::String(s.to_string()));
    let b = |x: bool| Some(Value::Boolean(x));
    let planner = || c.planner.as_ref().expect("enabled by file()");
    Some(match key {
        "cluster.name" => c.cluster.name.as_deref().and_then(text),
        "cluster.gpus" => c.cluster.gpus.and_then(|g| int(g.into())),
        "cluster.gpus_per_node" => int(c.cluster.gpus_per_node.into()),
        "cluster.gpu_types" => (!c.cluster.gpu_types.is_empty()).then(|| Value::String("a table".into())),
        "cluster.gpu_types.*.weight" => Some(Value::Float(c.weight_of(Some("b200")).get())),
        "cluster.gpu_types.*.gpus" => c.cluster.gpu_types.iter().find(|(t, _)| &***t == "b200").expect("b200").1.gpus.and_then(|g| int(g.into())),
        "ledger.window" => int(c.window_s),
        "ledger.bucket" => int(c.bucket_s),
        "contracts.max" => int(c.contracts.max_s),
        "contracts.missing" => match c.contracts.missing {
            MissingContract::Unallocated => text("unallocated"),
            MissingContract::Reject => text("reject"),
            MissingContract::Default(d) => text(&d.canonical()),
        },
        "contracts.unallocated_below" => int(c.contracts.unallocated_below_s),
        "contracts.require_funded_account" => b(c.submit.require_funded_account),
        "contracts.power_of_two_gpus" => b(c.submit.power_of_two_gpus),
        "contracts.long_jobs" => match c.contracts.long_jobs {
            LongJobs::Warn => text("warn"),
            LongJobs::Reject => text("reject"),
        },
        "priority.calc_period" => int(c.calc_period_s),
        "priority.debug_max_gpus" => int(c.priority.debug_max_gpus.into()),
        "priority.debug_max_contract" => int(c.priority.debug_max_contract_s),
        "priority.quick_time_limit" => int(c.priority.quick_time_limit_s),
        "priority.debug_lane" => b(c.priority.debug_lane),
        "priority.debug_allowance" => Some(Value::Float(f64::from(c.priority.debug_allowance_bp) / 100.0)),
        "planner.enabled" => b(c.planner.is_some()),
        "planner.interval" => int(planner().interval_s),
        "planner.step" => int(planner().rules.step_s),
        "planner.horizon" => int(planner().rules.step_s * planner().rules.steps as u64),
        "planner.decay" => Some(Value::Float(planner().rules.decay)),
        "planner.max_jobs" => int(planner().rules.max_jobs as u64),
        "planner.default_duration" => int(planner().rules.default_duration_s),
        "log.debug" => b(c.debug),
        "reports.private" => b(c.reports.private),
        "reports.admins" => Some(Value::Array(c.reports.admins.iter().map(|a| Value::String(a.clone())).collect())),
        "users.*" => (!c.users.is_empty()).then(|| Value::String("a map".into())),
        _ => return None,
    })
}

/// A default written as a value, as [`loaded`] gives it.
fn value_of(r: &Row, written: &str) -> Value {
    let table: toml::Table =
        format!("v = {written}").parse().unwrap_or_else(|e| panic!("{DOC_PATH}:{}: `{written}` is not a TOML value: {e}", r.line));
    match (r.ty.as_str(), &table["v"]) {
        ("duration", Value::String(s)) => Value::Integer(tally_allocator::parse_duration(s).expect("a duration") as i64),
        (_, v) => v.clone(),
    }
}

/// Equal, numbers compared as numbers (`1` and `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    let num = |v: &Value| match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    };
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

#[test]
fn every_documented_default_is_the_value_the_code_loads() {
    let (_, rows) = doc();
    let mut checked = 0;
    for r in rows.iter().filter(|r| !r.removed) {
        let c = load(&file(&r.key, None)).unwrap_or_else(|e| panic!("{}: {e}", r.key));
        let got = loaded(&r.key, &c);
        match (r.default.as_ref().expect("a default"), got) {
            (DefaultIs::Value(v), None) => panic!("{DOC_PATH}:{}: {} has a default ({v}) this test cannot read: add it to `loaded`", r.line, r.key),
            (DefaultIs::Value(v), Some(got)) => {
                let want = value_of(r, v);
                let got = got.unwrap_or_else(|| panic!("{DOC_PATH}:{}: {} defaults to {v}, but the code leaves it without a value", r.line, r.key));
                assert!(same(&want, &got), "{DOC_PATH}:{}: {} defaults to {v} ({want}), but the code loads {got}", r.line, r.key);
            }
            (DefaultIs::Words(w), Some(Some(got))) => {
                panic!("{DOC_PATH}:{}: {} defaults to \"{w}\", but the code loads {got}: write the default as a value", r.line, r.key)
            }
            (DefaultIs::Words(w), _) => {
                assert!(w.starts_with("none"), "{DOC_PATH}:{}: {}: a default that is not a value is \"none ...\", found \"{w}\"", r.line, r.key);
                continue;
            }
        }
        checked += 1;
    }
    assert!(checked >= 25, "{checked} defaults checked");
}

#[test]
fn writing_a_documented_default_changes_nothing() {
    let (_, rows) = doc();
    let mut checked = 0;
    for r in rows.iter().filter(|r| !r.removed) {
        let Some(DefaultIs::Value(v)) = &r.default else { continue };
        let without = file(&r.key, None);
        let with = file(&r.key, Some(v));
        let parse = |text: &str| load(text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", r.key));
        assert_eq!(parse(&with), parse(&without), "{DOC_PATH}:{}: writing the default {} = {v} changes the configuration", r.line, r.key);
        checked += 1;
    }
    assert!(checked >= 25, "{checked} defaults checked");
}

/// The forms of "allowed" this test checks (the first clause, up to `;`).
#[derive(Debug)]
enum Range {
    /// `A to B`, integers.
    Integers(i64, i64),
    /// `longer than 0`, a duration.
    PositiveDuration,
    /// `greater than 0, at most M`.
    PositiveAtMost(f64),
    /// `greater than 0, finite`.
    PositiveFinite,
    /// `0 or more, finite`.
    NonNegativeFinite,
    /// `` `true` or `false` ``, or strings: `` `"a"` or `"b"` ``.
    OneOf(Vec<String>),
}

fn range(r: &Row) -> Option<Range> {
    let clause = r.allowed.split(';').next().unwrap_or_default().trim();
    if let Some((a, b)) = clause.split_once(" to ") {
        if r.ty == "integer" {
            return Some(Range::Integers(a.parse().ok()?, b.parse().ok()?));
        }
    }
    if clause.starts_with("longer than 0") && r.ty == "duration" {
        return Some(Range::PositiveDuration);
    }
    if let Some(m) = clause.strip_prefix("greater than 0, at most ") {
        return Some(Range::PositiveAtMost(m.parse().ok()?));
    }
    match clause {
        "greater than 0, finite" => return Some(Range::PositiveFinite),
        "0 or more, finite" => return Some(Range::NonNegativeFinite),
        _ => {}
    }
    // Values in backticks, separated by `,` and `or` only.
    let parts: Vec<&str> = clause.split('`').collect();
    let values: Vec<String> = parts.iter().skip(1).step_by(2).map(|s| s.to_string()).collect();
    let between_ok = parts.iter().step_by(2).all(|s| s.split([',', ' ']).all(|w| w.is_empty() || w == "or"));
    (between_ok && values.len() >= 2).then_some(Range::OneOf(values))
}

#[test]
fn the_documented_ranges_hold() {
    let (_, rows) = doc();
    let mut checked = 0;
    for r in rows.iter().filter(|r| !r.removed) {
        let Some(range) = range(r) else { continue };
        let (good, bad): (Vec<String>, Vec<String>) = match &range {
            Range::Integers(a, b) => {
                let mut bad = vec![(b + 1).to_string()];
                if *a > 0 {
                    bad.push((a - 1).to_string());
                }
                (vec![a.to_string(), b.to_string()], bad)
            }
            Range::PositiveDuration => (vec![], vec!["\"0\"".into(), "0".into()]),
            Range::PositiveAtMost(m) => {
                (vec![format!("{m:?}"), format!("{:?}", m / 2.0)], vec!["0.0".into(), format!("{:?}", m * 1.000001), "-1.0".into()])
            }
            Range::PositiveFinite => (vec!["0.001".into(), "1000.0".into()], vec!["0.0".into(), "-1.0".into(), "inf".into(), "nan".into()]),
            Range::NonNegativeFinite => (vec!["0.0".into(), "1.5".into()], vec!["-0.5".into(), "inf".into(), "nan".into()]),
            Range::OneOf(values) => {
                let other = if r.ty == "boolean" { "\"yes\"" } else { "\"not-one-of-them\"" };
                (values.clone(), vec![other.into()])
            }
        };
        for v in &good {
            let text = file(&r.key, Some(v));
            if let Err(e) = load(&text) {
                panic!("{DOC_PATH}:{}: {} allows {} ({range:?}), but {} = {v} is refused: {e}\n{text}", r.line, r.key, r.allowed, r.key);
            }
        }
        for v in &bad {
            let text = file(&r.key, Some(v));
            assert!(
                load(&text).is_err(),
                "{DOC_PATH}:{}: {} allows {} ({range:?}), but {} = {v} is accepted\n{text}",
                r.line,
                r.key,
                r.allowed,
                r.key
            );
        }
        checked += 1;
    }
    assert!(checked >= 20, "{checked} ranges checked");
}

#[test]
fn every_table_has_one_example_and_it_validates() {
    let (sections, rows) = doc();
    let documented: BTreeSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    for s in &sections {
        let Some(table) = &s.table else {
            assert!(s.examples.is_empty(), "{DOC_PATH}:{}: Removed keys has no example", s.line);
            continue;
        };
        assert_eq!(s.examples.len(), 1, "{DOC_PATH}:{}: [{table}] has one ```toml example", s.line);
        let (line, text) = &s.examples[0];
        let c = Config::parse(text, "example").unwrap_or_else(|e| panic!("{DOC_PATH}:{line}: the example of [{table}]: {e}"));
        assert!(c.warnings.is_empty(), "{DOC_PATH}:{line}: the example of [{table}] sets a removed key");
        // Each key it sets is documented, and one at least is the section's.
        let mut set = Vec::new();
        leaves(&text.parse::<toml::Table>().expect("TOML"), "", &mut set);
        for key in &set {
            assert!(documented.contains(key.as_str()), "{DOC_PATH}:{line}: the example sets {key}, which is not documented");
        }
        let own = |k: &String| k.rsplit_once('.').is_some_and(|(t, _)| t == table) || (table == "cluster.gpu_types" && gpu_type_row(k));
        assert!(set.iter().any(own), "{DOC_PATH}:{line}: the example of [{table}] sets none of its keys: {set:?}");
    }
    assert!(sections.len() >= 11, "{} key sections", sections.len());
}

/// The dotted keys a file sets, names of the file's choosing as `*`.
fn leaves(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in t {
        let k = match prefix {
            "accounts" | "users" | "cluster.gpu_types" => "*",
            _ => k.as_str(),
        };
        let path = if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
        match v {
            Value::Table(inner) => leaves(inner, &path, out),
            _ => out.push(path),
        }
    }
}
