//! docs/man/tally.toml.5 read as data, for the tests that hold the page
//! against the code (man_page.rs) and against docs/configuration.md
//! (configuration_doc.rs). The page's conventions are in its header
//! comment: `.SS "[table]"` opens a table (or `.SS "Removed keys"`), `.TP`
//! then `\fBkey\fR = \fItype\fR` opens a key, `Default: \fBvalue\fR.` or
//! `Default: words.` ends it.

// Each test file uses a part of this module.
#![allow(dead_code)]

pub const PAGE: &str = include_str!("../../../docs/man/tally.toml.5");
pub const PAGE_PATH: &str = "docs/man/tally.toml.5";

/// A default as written: a TOML value (`\fB...\fR` on the page), or words.
#[derive(Debug, Clone, PartialEq)]
pub enum DefaultIs {
    Value(String),
    Words(String),
}

/// One `.TP` key entry of the page.
#[derive(Debug)]
pub struct Entry {
    /// Dotted key, `*` for a name of the file's choosing.
    pub key: String,
    /// Under "Removed keys".
    pub removed: bool,
    /// The type as written (`duration`, `integer`, ...).
    pub ty: String,
    /// The `Default:` line, roff escapes undone.
    pub default: Option<DefaultIs>,
}

/// Roff to text: an italic word in capitals (`\fINAME\fR`) is a name of
/// the file's choosing, `*`; other font changes are dropped.
pub fn unroff(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("\\f") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        if let Some(italic) = after.strip_prefix('I') {
            let end = italic.find("\\f").unwrap_or(italic.len());
            let word = &italic[..end];
            if word.chars().all(|c| c.is_ascii_uppercase()) {
                out.push('*');
            } else {
                out.push_str(word);
            }
            rest = &italic[end..];
        } else {
            rest = after.get(1..).unwrap_or("");
        }
    }
    out.push_str(rest);
    out.replace("\\-", "-").replace("\\(dq", "\"").replace("\\e", "\\")
}

/// The key entries of the PARAMETERS section, in the page's order.
/// Panics, with the line, where the page breaks its conventions.
pub fn entries() -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    let mut in_parameters = false;
    let mut table: Option<String> = None;
    let mut removed = false;
    let lines: Vec<&str> = PAGE.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(title) = line.strip_prefix(".SH ") {
            in_parameters = title.trim_matches('"') == "PARAMETERS";
            table = None;
            continue;
        }
        if !in_parameters {
            continue;
        }
        if let Some(title) = line.strip_prefix(".SS ") {
            let title = unroff(title.trim_matches('"'));
            removed = title == "Removed keys";
            table = title.strip_prefix('[').and_then(|t| t.strip_suffix(']')).map(str::to_string);
            assert!(table.is_some() || removed, "{PAGE_PATH}:{}: `.SS {title}` is neither a [table] nor Removed keys", i + 1);
            continue;
        }
        if *line == ".TP" {
            let tag = lines.get(i + 1).copied().unwrap_or_default();
            let Some((name, ty)) = tag.split_once(" = ") else {
                panic!("{PAGE_PATH}:{}: a key entry reads `\\fBkey\\fR = \\fItype\\fR`, found `{tag}`", i + 2)
            };
            assert!(ty.starts_with("\\fI") && ty.ends_with("\\fR"), "{PAGE_PATH}:{}: type in italics: `{tag}`", i + 2);
            let name = unroff(name);
            let key = match &table {
                Some(t) => format!("{t}.{name}"),
                None => name,
            };
            entries.push(Entry { key, removed, ty: unroff(ty), default: None });
            continue;
        }
        if let Some(d) = line.strip_prefix("Default: ") {
            let entry = entries.last_mut().unwrap_or_else(|| panic!("{PAGE_PATH}:{}: a Default outside an entry", i + 1));
            assert!(entry.default.is_none(), "{PAGE_PATH}:{}: a second Default for {}", i + 1, entry.key);
            entry.default = Some(match d.strip_prefix("\\fB").and_then(|d| d.strip_suffix("\\fR.")) {
                Some(v) => DefaultIs::Value(unroff(v)),
                None => DefaultIs::Words(unroff(d).trim_end_matches('.').to_string()),
            });
        }
    }
    entries
}
