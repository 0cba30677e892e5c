//! docs/man/tally.toml.5 against the code: every key serde accepts is
//! documented, every documented key exists, every default written as a
//! value is the default, and the page's example validates.
//!
//! The page's conventions are stated in its header comment.

use tally_config::{raw, Config};

mod common;

use common::{entries, unroff, DefaultIs, Entry, PAGE, PAGE_PATH};

#[test]
fn every_accepted_key_is_documented_and_every_documented_key_exists() {
    let accepted = raw::accepted_keys();
    let entries = entries();
    let documented: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    let undocumented: Vec<&String> = accepted.iter().filter(|k| !documented.contains(&k.as_str())).collect();
    let unknown: Vec<&str> = documented.iter().copied().filter(|k| !accepted.iter().any(|a| a == k)).collect();
    assert!(undocumented.is_empty(), "keys config/src/raw.rs accepts but {PAGE_PATH} does not document: {undocumented:?}");
    assert!(unknown.is_empty(), "keys {PAGE_PATH} documents but config/src/raw.rs does not accept: {unknown:?}");
    let mut seen = std::collections::BTreeSet::new();
    for e in &entries {
        assert!(seen.insert(&e.key), "{PAGE_PATH} documents {} twice", e.key);
        assert!(e.default.is_some(), "{PAGE_PATH}: {} has no `Default:` line", e.key);
    }
    // The parser saw the page's tables (not an empty list that agrees with nothing).
    assert!(entries.len() >= 30, "{} entries", entries.len());
}

/// The file around `key = value` that makes its default visible in
/// [`Config`]: the planner's keys only matter when it is enabled.
fn context(key: &str) -> (&'static str, &'static [&'static str]) {
    match key {
        "planner.enabled" => ("[cluster]\ngpus = 8\n", &[]),
        k if k.starts_with("planner.") => ("[cluster]\ngpus = 8\n", &["enabled = true"]),
        _ => ("", &[]),
    }
}

#[test]
fn every_documented_default_is_the_default() {
    let mut checked = 0;
    for e in entries().iter().filter(|e| !e.removed) {
        let Some(DefaultIs::Value(value)) = &e.default else { continue };
        let (table, key) = e.key.rsplit_once('.').expect("a key in a table");
        assert!(!table.contains('*'), "{}: a key of the file's choosing has no default", e.key);
        let (preamble, lines) = context(&e.key);
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let base = if body.is_empty() { preamble.to_string() } else { format!("{preamble}[{table}]\n{body}") };
        let with = format!("{preamble}[{table}]\n{body}{key} = {value}\n");
        let parse = |text: &str| {
            let mut c = Config::parse(text, "t.toml").unwrap_or_else(|err| panic!("{}: {err}\n{text}", e.key));
            c.text.clear();
            c
        };
        assert_eq!(parse(&with), parse(&base), "{PAGE_PATH}: the default of {} is not {value}", e.key);
        checked += 1;
    }
    assert!(checked >= 20, "{checked} defaults checked");
}

#[test]
fn removed_keys_warn_and_are_ignored() {
    let removed: Vec<Entry> = entries().into_iter().filter(|e| e.removed).collect();
    assert_eq!(
        removed.iter().map(|e| e.key.as_str()).collect::<std::collections::BTreeSet<_>>(),
        tally_config::DROPPED_KEYS.iter().map(|(k, _)| *k).collect::<std::collections::BTreeSet<_>>(),
        "{PAGE_PATH}'s removed keys are the code's"
    );
    for e in removed {
        let (table, key) = e.key.rsplit_once('.').unwrap();
        let c = Config::parse(&format!("[{table}]\n{key} = \"1h\"\n"), "t.toml").unwrap();
        assert!(c.warning_lines().iter().any(|w| w.contains("no longer used and is ignored")), "{}: {:?}", e.key, c.warnings);
    }
}

#[test]
fn the_example_validates() {
    let example = PAGE.split("\n.SH EXAMPLE\n").nth(1).expect("an EXAMPLE section");
    let body = example.split("\n.EX\n").nth(1).and_then(|b| b.split("\n.EE\n").next()).expect(".EX ... .EE");
    let text = unroff(body);
    let c = Config::parse(&text, "example").unwrap_or_else(|e| panic!("{PAGE_PATH}'s example: {e}"));
    assert_eq!(c.cluster.gpus, Some(64));
    assert_eq!(c.tree.len(), 6, "root and the five accounts");
}

#[test]
fn examples_tally_toml_sets_only_documented_keys() {
    // The installed example (tally.toml.example) next to the page: it uses
    // no key the page does not describe, and it validates.
    let text = include_str!("../../examples/tally.toml");
    Config::parse(text, "examples/tally.toml").unwrap();
    let documented: Vec<String> = entries().into_iter().map(|e| e.key).collect();
    let value: toml::Table = text.parse().unwrap();
    for (table, v) in &value {
        let toml::Value::Table(t) = v else { panic!("{table} is not a table") };
        for (k, v) in t {
            let key = match (table.as_str(), v) {
                ("accounts", toml::Value::Table(inner)) => {
                    for k in inner.keys() {
                        assert!(documented.contains(&format!("accounts.*.{k}")), "accounts.{k}");
                    }
                    continue;
                }
                ("users", _) => "users.*".to_string(),
                _ => format!("{table}.{k}"),
            };
            assert!(documented.contains(&key), "examples/tally.toml sets {key}, which {PAGE_PATH} does not document");
        }
    }
}
