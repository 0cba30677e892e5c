//! Tidy: checks that keep ARCHITECTURE.md and the documents true of the
//! tree (in the manner of rust-analyzer's `xtask/src/tidy.rs`). Plain Rust,
//! no network, no build: it reads the repository from
//! `env!("CARGO_MANIFEST_DIR")/..` and runs with `cargo test --workspace`.
//!
//! - [`unsafe_code_policy_is_the_documented_one`]: every crate's roots carry
//!   the `unsafe_code` attribute ARCHITECTURE.md's table says, and the table
//!   lists exactly the crates there are, with [`UNSAFE_EXCEPTIONS`].
//! - [`release_cfg_only_where_documented`]: `cfg(slurm …)` only in the files
//!   ARCHITECTURE.md names.
//! - [`doc_paths_exist`]: the repository paths README.md, ARCHITECTURE.md
//!   and docs/*.md name exist.
//! - [`docs_name_no_machine_path`]: no document names a path of somebody's
//!   machine (`/work/…`, `/home/<user>/…`, `/tmp/…`, an absolute
//!   `…/target/release/…`).
//! - [`crate_graph_is_the_cargo_one`]: ARCHITECTURE.md's crate graph states
//!   exactly each crate's normal dependencies on the repository's crates,
//!   as its `Cargo.toml` has them, with the short names of [`GRAPH_NAMES`].
//!
//! Each check reports every offender, with file:line, in one failure.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The crates that do not `#![forbid(unsafe_code)]`, and what they do
/// instead. ARCHITECTURE.md's table (between `<!-- tidy:unsafe-code -->`
/// markers) must say the same: change both together.
const UNSAFE_EXCEPTIONS: &[(&str, Policy)] = &[
    // The SIGPIPE reset in `main`, one `#[allow(unsafe_code)]`.
    ("tally-cli", Policy::Deny),
    // All of the plugins' pointer code: exports, handles, host, view.
    ("tally-ffi", Policy::Allowed),
    // bindgen output: `extern` declarations of Slurm's functions and globals.
    ("slurm-sys", Policy::Allowed),
    // A fake slurmctld for tests: `#[no_mangle]` globals, dlopen.
    ("tally-fakehost", Policy::Allowed),
    // The smoke's capped global allocator (`unsafe impl GlobalAlloc`).
    ("tally-fuzz", Policy::Allowed),
    // The bindings generator (its own workspace, run by
    // scripts/gen-bindings.sh): uses none, declares nothing.
    ("slurm-sys-gen", Policy::Allowed),
];

/// The short names ARCHITECTURE.md's crate graph (between
/// `<!-- tidy:crate-graph -->` markers) gives the packages: every package
/// has one, and the graph uses no other.
const GRAPH_NAMES: &[(&str, &str)] = &[
    ("allocator", "tally-allocator"),
    ("planner", "tally-planner"),
    ("config", "tally-config"),
    ("sim", "tally-sim"),
    ("engine", "tally-engine"),
    ("cli", "tally-cli"),
    ("slurm-sys", "slurm-sys"),
    ("ffi", "tally-ffi"),
    ("priority", "tally-priority"),
    ("job_submit", "tally-job-submit"),
    ("preempt", "tally-preempt"),
    ("fakehost", "tally-fakehost"),
    ("tests", "tally-tests"),
    ("fuzz", "tally-fuzz"),
    ("slurm-sys/gen", "slurm-sys-gen"),
];

/// Paths in the documents that need not exist in a checkout, by prefix.
const PATH_SKIPS: &[(&str, &str)] =
    &[("target/", "build output: exists only after a build"), ("testbed/run/", "the test bed's run files (gitignored), made by testbed/up.sh")];

/// Absolute paths the documents may name under `/var/tmp` and `/tmp`,
/// by prefix: documented defaults, the same on every machine.
const MACHINE_PATH_ALLOWED: &[(&str, &str)] = &[
    ("/var/tmp/tally-", "the test beds' run dirs, chroot and load runs (testbed/*.sh defaults)"),
    ("/tmp/tally-fuzz/", "the scratch corpus docs/reliability.md's fuzzing recipe creates"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// `#![forbid(unsafe_code)]` at every root.
    Forbid,
    /// `#![deny(unsafe_code)]` at every root (and `#[allow]` where used).
    Deny,
    /// Neither attribute: the crate may use unsafe code.
    Allowed,
}

impl Policy {
    fn parse(word: &str) -> Option<Policy> {
        match word {
            "forbid" => Some(Policy::Forbid),
            "deny" => Some(Policy::Deny),
            "allowed" => Some(Policy::Allowed),
            _ => None,
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests crate is one level below the repository").to_path_buf()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("tidy: cannot read {}: {e}", path.display()))
}

fn rel(path: &Path) -> String {
    path.strip_prefix(repo()).unwrap_or(path).display().to_string()
}

/// Every file under `dir` whose name `keep` accepts, sorted; build output,
/// VCS and hidden directories and the test bed's run files skipped.
fn walk(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if name == "target" || name.starts_with('.') || p == repo().join("testbed/run") {
                    continue;
                }
                stack.push(p);
            } else if ft.is_file() && keep(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The text between `<!-- tidy:NAME -->` and `<!-- /tidy:NAME -->` in
/// ARCHITECTURE.md, with the line number of its first line.
fn architecture_block(name: &str) -> (usize, String) {
    let text = read(&repo().join("ARCHITECTURE.md"));
    let (open, close) = (format!("<!-- tidy:{name} -->"), format!("<!-- /tidy:{name} -->"));
    let start = text.find(&open).unwrap_or_else(|| panic!("tidy: ARCHITECTURE.md has no `{open}` marker"));
    let body = &text[start + open.len()..];
    let end = body.find(&close).unwrap_or_else(|| panic!("tidy: ARCHITECTURE.md has `{open}` but no `{close}` after it"));
    (text[..start].lines().count() + 1, body[..end].to_string())
}

fn fail_if_any(what: &str, offenders: &[String]) {
    assert!(offenders.is_empty(), "tidy: {what} ({} offender(s)):\n  {}\n", offenders.len(), offenders.join("\n  "));
}

// ---- 1. unsafe code -------------------------------------------------------------

/// A package: its name, directory, crate roots (library and binaries), and
/// normal dependencies on the repository's crates.
#[derive(Debug)]
struct Package {
    name: String,
    manifest: PathBuf,
    roots: Vec<PathBuf>,
    /// `[dependencies]` (also `[target.….dependencies]`) that are crates of
    /// the repository, `tally-*` or `slurm-sys`, in the manifest's order.
    deps: Vec<String>,
}

/// Whether a `Cargo.toml` section holds normal dependencies
/// (`dependencies`, `target.'cfg(…)'.dependencies`): `Some(None)` for such
/// a table, `Some(Some(name))` for a `[dependencies.NAME]` table.
fn dependency_section(section: &str) -> Option<Option<String>> {
    let s = match section.strip_prefix("target.") {
        Some(rest) => {
            // The target: a quoted `cfg(…)` (which may hold dots) or a triple.
            let after = match rest.chars().next() {
                Some(q @ ('\'' | '"')) => &rest[1..][rest[1..].find(q)? + 1..],
                _ => &rest[rest.find('.')?..],
            };
            after.strip_prefix('.')?
        }
        None => section,
    };
    if s == "dependencies" {
        return Some(None);
    }
    s.strip_prefix("dependencies.").map(|name| Some(name.trim_matches(['"', '\'']).to_string()))
}

/// The quoted value of `key = "…"` in an inline table (`{ a = "…", key = "…" }`).
fn inline_value<'a>(table: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = table;
    while let Some(i) = rest.find(key) {
        let before = rest[..i].trim_end();
        let after = rest[i + key.len()..].trim_start();
        if (before.ends_with('{') || before.ends_with(',')) && after.starts_with('=') {
            return after[1..].split('"').nth(1);
        }
        rest = &rest[i + key.len()..];
    }
    None
}

/// Whether a dependency is one of the repository's crates.
fn is_repo_crate(name: &str) -> bool {
    name.starts_with("tally-") || name == "slurm-sys"
}

/// Every `[package]` under the repository (workspace members, and the
/// crates with workspaces of their own: fuzz, slurm-sys/gen).
fn packages() -> Vec<Package> {
    let manifests = walk(&repo(), &|p| p.file_name().is_some_and(|n| n == "Cargo.toml"));
    let mut out = Vec::new();
    for manifest in manifests {
        let text = read(&manifest);
        let dir = manifest.parent().unwrap().to_path_buf();
        let mut section = String::new();
        let mut name = None;
        let mut roots = BTreeSet::new();
        let mut deps = Vec::new();
        let mut add_dep = |dep: &str| {
            if is_repo_crate(dep) && !deps.iter().any(|d| d == dep) {
                deps.push(dep.to_string());
            }
        };
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') {
                continue;
            }
            if line.starts_with('[') {
                section = line.trim_matches(|c| c == '[' || c == ']').trim().to_string();
                if let Some(Some(dep)) = dependency_section(&section) {
                    add_dep(&dep);
                }
                continue;
            }
            let Some((key, raw)) = line.split_once('=') else { continue };
            // `key = "value"  # a comment`: the first quoted string.
            let value = raw.split('"').nth(1).unwrap_or("");
            if dependency_section(&section) == Some(None) {
                // `x.workspace = true`, `x = { path = "…" }`, `y = { package = "x", … }`.
                let key = key.trim().split('.').next().unwrap_or("").trim_matches(['"', '\'']);
                add_dep(inline_value(raw, "package").unwrap_or(key));
                continue;
            }
            match (section.as_str(), key.trim()) {
                ("package", "name") => name = Some(value.to_string()),
                // `[dependencies.alias]` with `package = "x"`.
                (s, "package") if matches!(dependency_section(s), Some(Some(_))) => add_dep(value),
                ("lib" | "bin", "path") => {
                    roots.insert(dir.join(value));
                }
                _ => {}
            }
        }
        let Some(name) = name else { continue };
        // Cargo's default roots, there unless a `path` says otherwise.
        let src = dir.join("src");
        for default in [src.join("lib.rs"), src.join("main.rs")] {
            if default.is_file() {
                roots.insert(default);
            }
        }
        if let Ok(bins) = fs::read_dir(src.join("bin")) {
            for b in bins.flatten() {
                let p = b.path();
                if p.extension().is_some_and(|e| e == "rs") {
                    roots.insert(p);
                } else if p.join("main.rs").is_file() {
                    roots.insert(p.join("main.rs"));
                }
            }
        }
        out.push(Package { name, manifest, roots: roots.into_iter().collect(), deps });
    }
    out
}

/// Whether `text` has the inner attribute `#![LEVEL(… unsafe_code …)]` on
/// a line of its own (a doc comment quoting one does not count).
fn has_level(text: &str, level: &str) -> bool {
    let open = format!("#![{level}(");
    text.lines().any(|l| {
        let l = l.trim();
        l.starts_with(&open) && l[open.len()..].split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| w == "unsafe_code")
    })
}

/// ARCHITECTURE.md's table: crate → policy, with the line of each row.
fn documented_unsafe_policy() -> (BTreeMap<String, (Policy, usize)>, Vec<String>) {
    let (first_line, block) = architecture_block("unsafe-code");
    let mut table = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, line) in block.lines().enumerate() {
        let line_no = first_line + i;
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if !line.trim_start().starts_with('|') || cells.len() < 2 || cells[0].starts_with('-') || cells[0] == "crate" {
            continue;
        }
        let name = cells[0].trim_matches('`').to_string();
        let word = cells[1].trim_matches(|c| c == '`' || c == '*').split_whitespace().next().unwrap_or("");
        match Policy::parse(word) {
            Some(p) => {
                if table.insert(name.clone(), (p, line_no)).is_some() {
                    problems.push(format!("ARCHITECTURE.md:{line_no}: `{name}` is listed twice"));
                }
            }
            None => {
                problems.push(format!("ARCHITECTURE.md:{line_no}: `{name}`: the second column must start with forbid, deny or allowed, not {word:?}"))
            }
        }
    }
    (table, problems)
}

#[test]
fn unsafe_code_policy_is_the_documented_one() {
    let packages = packages();
    assert!(packages.len() >= 10, "tidy: found only {} packages under {}: the walk is broken", packages.len(), repo().display());
    let exceptions: BTreeMap<&str, Policy> = UNSAFE_EXCEPTIONS.iter().copied().collect();
    let (documented, mut offenders) = documented_unsafe_policy();
    let names: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();

    for name in exceptions.keys() {
        if !names.contains(name) {
            offenders.push(format!("tidy.rs: UNSAFE_EXCEPTIONS names `{name}`, which is no package here"));
        }
    }
    for (name, (_, line)) in &documented {
        if !names.contains(name.as_str()) {
            offenders.push(format!("ARCHITECTURE.md:{line}: the unsafe-code table lists `{name}`, which is no package here"));
        }
    }
    for p in &packages {
        let manifest = rel(&p.manifest);
        let expected = exceptions.get(p.name.as_str()).copied().unwrap_or(Policy::Forbid);
        match documented.get(&p.name) {
            None => offenders.push(format!("ARCHITECTURE.md: the unsafe-code table does not list `{}` ({manifest}); add it ({expected:?})", p.name)),
            Some((doc, line)) if *doc != expected => offenders
                .push(format!("ARCHITECTURE.md:{line}: `{}` is {doc:?} in the table but {expected:?} in tidy.rs's UNSAFE_EXCEPTIONS", p.name)),
            Some(_) => {}
        }
        if p.roots.is_empty() {
            offenders.push(format!("{manifest}: `{}` has no crate root (src/lib.rs, src/main.rs, a [[bin]] path)", p.name));
        }
        for root in &p.roots {
            let text = read(root);
            let (forbid, deny) = (has_level(&text, "forbid"), has_level(&text, "deny"));
            let root = rel(root);
            match expected {
                Policy::Forbid if !forbid => {
                    offenders.push(format!("{root}:1: `{}` must start with #![forbid(unsafe_code)]", p.name));
                }
                Policy::Deny if !deny || forbid => {
                    offenders.push(format!("{root}:1: `{}` must have #![deny(unsafe_code)] (and no forbid): it is Deny", p.name));
                }
                Policy::Allowed if forbid || deny => offenders.push(format!(
                    "{root}: `{}` forbids or denies unsafe code now: make it Forbid/Deny in UNSAFE_EXCEPTIONS and ARCHITECTURE.md",
                    p.name
                )),
                _ => {}
            }
        }
    }
    fail_if_any("each crate's unsafe code as ARCHITECTURE.md's table says", &offenders);
}

// ---- 2. release cfg ---------------------------------------------------------------

/// The code of a line: up to a `//` comment.
fn code_of(line: &str) -> &str {
    line.find("//").map_or(line, |i| &line[..i])
}

/// Whether a line of code uses the `slurm` release cfg: `cfg(slurm = "…")`,
/// `cfg!(…)`, `cfg_attr(…)`, inside `any`/`all`/`not`, a bare `cfg(slurm)`,
/// and build scripts' `rustc-cfg=slurm=…` and check-cfg.
fn uses_release_cfg(code: &str) -> bool {
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut from = 0;
    while let Some(i) = code[from..].find("slurm").map(|i| i + from) {
        from = i + "slurm".len();
        if (i > 0 && is_ident(bytes[i - 1])) || bytes.get(from).is_some_and(|&b| is_ident(b) || b == b'-') {
            continue;
        }
        let rest = code[from..].trim_start();
        let key_value = rest.starts_with('=') && !rest.starts_with("==") && {
            let v = rest[1..].trim_start();
            v.starts_with('"') || v.starts_with("\\\"")
        };
        let bare = (rest.starts_with(')') || rest.starts_with(',')) && code[..i].contains("cfg");
        if key_value || bare {
            return true;
        }
    }
    false
}

#[test]
fn release_cfg_only_where_documented() {
    let (first_line, block) = architecture_block("release-cfg");
    let allowed: BTreeSet<String> = inline_code_spans(&block).into_iter().map(|(_, s)| s).filter(|s| s.ends_with(".rs")).collect();
    let mut offenders = Vec::new();
    if allowed.is_empty() {
        offenders.push(format!("ARCHITECTURE.md:{first_line}: the release-cfg block names no .rs file"));
    }
    let mut seen = BTreeSet::new();
    for file in walk(&repo(), &|p| p.extension().is_some_and(|e| e == "rs")) {
        let path = rel(&file);
        for (n, line) in read(&file).lines().enumerate() {
            if !uses_release_cfg(code_of(line)) {
                continue;
            }
            if allowed.contains(&path) {
                seen.insert(path.clone());
            } else {
                offenders.push(format!("{path}:{}: release cfg outside the files ARCHITECTURE.md names: {}", n + 1, line.trim()));
            }
        }
    }
    for file in allowed.difference(&seen) {
        offenders.push(format!(
            "ARCHITECTURE.md:{first_line}: names `{file}` for the release cfg, which {} uses none: drop it from the list",
            if repo().join(file).is_file() { "exists but" } else { "does not exist and" }
        ));
    }
    fail_if_any("`cfg(slurm …)` only in the files ARCHITECTURE.md's release-cfg block names", &offenders);
}

#[test]
fn release_cfg_detection() {
    // `@` stands for the cfg's key, so that this file does not use it.
    let key = |s: &str| s.replace('@', "slurm");
    for yes in [
        r#"#[cfg(@ = "22.05")]"#,
        r#"#[cfg(not(@="24.11"))]"#,
        r#"#[cfg_attr(@ = "24.11", allow(dead_code))]"#,
        r#"if cfg!(@ = "22.05") {"#,
        r#"#[cfg(any(@ = "22.05", test))]"#,
        r#"#[cfg(@)]"#,
        r#"println!("cargo:rustc-cfg=@=\"{release}\"");"#,
        r#"println!("cargo::rustc-check-cfg=cfg(@, values(\"22.05\"))");"#,
    ] {
        assert!(uses_release_cfg(&key(yes)), "not detected: {}", key(yes));
    }
    for no in [
        r#"let x = @_sys::RELEASE;"#,
        r#"use @_sys::List;"#,
        r#"if @ == other {"#,
        r#"DEP_SLURM_RELEASE"#,
        r#"let tally_@ = "x";"#,
        r#"// #[cfg(@ = "22.05")] in a comment"#,
    ] {
        assert!(!uses_release_cfg(code_of(&key(no))), "detected wrongly: {}", key(no));
    }
}

// ---- 3. paths named in the documents ----------------------------------------------------

/// The inline code spans of Markdown text (fenced blocks excluded by the
/// caller), each with the 0-based line it starts on. Spans may cross lines.
fn inline_code_spans(text: &str) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'`' => {
                let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
                let fence = "`".repeat(run);
                let start = i + run;
                // The closing run: exactly as long, in the same paragraph.
                let end = text[start..].find("\n\n").map_or(text.len(), |e| e + start);
                let mut j = start;
                let mut close = None;
                while let Some(k) = text[j..end].find(&fence).map(|k| k + j) {
                    let len = bytes[k..].iter().take_while(|&&b| b == b'`').count();
                    if len == run {
                        close = Some(k);
                        break;
                    }
                    j = k + len;
                }
                match close {
                    Some(k) => {
                        out.push((line, text[start..k].trim().to_string()));
                        line += text[start..k].matches('\n').count();
                        i = k + run;
                    }
                    None => i = start,
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// Markdown link targets (`[text](target)`, `[ref]: target`) with their
/// 0-based line.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            // `(target "title")`: the target only.
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push((n, target.trim_matches(|c| c == '<' || c == '>').to_string()));
            rest = &after[end..];
        }
        let t = line.trim_start();
        if let Some(def) = t.strip_prefix('[').and_then(|t| t.split_once("]:")) {
            out.push((n, def.1.split_whitespace().next().unwrap_or("").to_string()));
        }
    }
    out
}

/// `text` with the lines of fenced code blocks blanked (line numbers kept).
fn without_fences(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Words that stand for a name in a path (`fuzz/fuzz_targets/NAME.rs`).
const PLACEHOLDERS: &[&str] = &["NAME", "FILE", "DIR", "N", "PATH", "RELEASE", "X", "ID"];

const KNOWN_EXTENSIONS: &[&str] =
    &["rs", "md", "toml", "sh", "csv", "json", "svg", "h", "c", "lock", "txt", "5", "1", "yml", "yaml", "py", "swf", "conf"];

/// A repository path a word of a code span could be: `None` for what is
/// not one (flags, URLs, globs, placeholders, absolute paths, words whose
/// first component is not at the repository's top).
fn as_repo_path(word: &str, top: &BTreeSet<String>) -> Option<String> {
    let mut w = word.trim_start_matches(['"', '\'', '(']).trim_end_matches(['"', '\'', ')', ',', ';', '.', ':']);
    if let Some((_, v)) = w.rsplit_once('=') {
        w = v;
    }
    // file.rs:123, file.rs:123:4
    while let Some((head, tail)) = w.rsplit_once(':') {
        if tail.chars().all(|c| c.is_ascii_digit()) && !tail.is_empty() {
            w = head;
        } else {
            break;
        }
    }
    let w = w.strip_prefix("./").unwrap_or(w);
    if w.is_empty()
        || w.starts_with('/')
        || w.starts_with('-')
        || w.contains("://")
        || w.contains("::")
        || w.chars().any(|c| matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '<' | '>' | '$' | '~' | '…' | '|' | ':' | '\\'))
        || w.contains("...")
    {
        return None;
    }
    // examples/scenarios/NAME.toml, fuzz/artifacts/NAME/: a placeholder.
    if w.split('/').any(|c| PLACEHOLDERS.contains(&c.split('.').next().unwrap_or(""))) {
        return None;
    }
    let looks_like_path = w.contains('/') || w.rsplit_once('.').is_some_and(|(_, ext)| KNOWN_EXTENSIONS.contains(&ext));
    let first = w.split('/').next().unwrap_or("");
    (looks_like_path && top.contains(first)).then(|| w.to_string())
}

/// The documents whose paths are checked: README.md, ARCHITECTURE.md and
/// docs/**/*.md.
fn path_documents() -> Vec<PathBuf> {
    let root = repo();
    let mut docs = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    docs.extend(walk(&root.join("docs"), &|p| p.extension().is_some_and(|e| e == "md")));
    docs
}

#[test]
fn doc_paths_exist() {
    let root = repo();
    let top: BTreeSet<String> = fs::read_dir(&root)
        .expect("the repository's top")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".git")
        .collect();
    let mut offenders = Vec::new();
    let mut checked = 0;
    for doc in path_documents() {
        let name = rel(&doc);
        let text = without_fences(&read(&doc));
        for (line, span) in inline_code_spans(&text) {
            for word in span.split_whitespace() {
                let Some(path) = as_repo_path(word, &top) else { continue };
                if PATH_SKIPS.iter().any(|(prefix, _)| path.starts_with(prefix)) {
                    continue;
                }
                checked += 1;
                if !root.join(&path).exists() {
                    offenders.push(format!("{name}:{}: `{path}` does not exist", line + 1));
                }
            }
        }
        for (line, link) in link_targets(&text) {
            let (target, anchor) = link.split_once('#').unwrap_or((link.as_str(), ""));
            if target.contains("://") || target.starts_with("mailto:") || target.starts_with('/') {
                continue;
            }
            let file = if target.is_empty() { doc.clone() } else { doc.parent().unwrap().join(target) };
            if !target.is_empty() {
                checked += 1;
                if !file.exists() {
                    offenders.push(format!("{name}:{}: link target ({target}) does not exist", line + 1));
                    continue;
                }
            }
            if !anchor.is_empty() && file.extension().is_some_and(|e| e == "md") {
                checked += 1;
                if !heading_anchors(&read(&file)).contains(anchor) {
                    offenders.push(format!("{name}:{}: link ({link}): {} has no heading whose anchor is #{anchor}", line + 1, rel(&file)));
                }
            }
        }
    }
    assert!(checked > 50, "tidy: only {checked} paths found in the documents: the extraction is broken");
    fail_if_any("paths named in README.md, ARCHITECTURE.md and docs/*.md exist", &offenders);
}

/// The user documents cite no issue of the project's tracker ("issue 15"):
/// history is the CHANGELOG's and the commits'.
#[test]
fn documents_cite_no_issue_numbers() {
    let mut offenders = Vec::new();
    for doc in path_documents() {
        for (n, line) in read(&doc).lines().enumerate() {
            let lower = line.to_lowercase();
            let mut rest = lower.as_str();
            while let Some(i) = rest.find("issue") {
                let after = rest[i + 5..].trim_start_matches([' ', '#']);
                if after.starts_with(|c: char| c.is_ascii_digit()) {
                    offenders.push(format!("{}:{}: {}", rel(&doc), n + 1, line.trim()));
                    break;
                }
                rest = &rest[i + 5..];
            }
        }
    }
    fail_if_any("no issue numbers in README.md, ARCHITECTURE.md and docs/*.md", &offenders);
}

/// The user documents carry no commit hash either (`039c39cdc7c0`): a run of
/// 7 to 40 lowercase hex digits with a letter and a digit, standing alone
/// (not `0x…`, not inside a word or a path). Pinned upstream sources are
/// named by `scripts/sources.lock`, not in prose.
#[test]
fn documents_carry_no_commit_hashes() {
    let mut offenders = Vec::new();
    for doc in path_documents() {
        for (n, line) in read(&doc).lines().enumerate() {
            if let Some(h) = commit_hashes(line).first() {
                offenders.push(format!("{}:{}: {h}", rel(&doc), n + 1));
            }
        }
    }
    fail_if_any("no commit hashes in README.md, ARCHITECTURE.md and docs/*.md", &offenders);
}

/// The words of `line` that look like commit hashes.
fn commit_hashes(line: &str) -> Vec<&str> {
    let joins = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    line.split(|c: char| !joins(c))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| {
            (7..=40).contains(&w.len())
                && w.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
                && w.chars().any(|c| c.is_ascii_digit())
                && w.chars().any(|c| c.is_ascii_alphabetic())
        })
        .collect()
}

#[test]
fn commit_hashes_are_seen() {
    assert_eq!(commit_hashes("Measured at commit 039c39cdc7c0 (with changes)."), vec!["039c39cdc7c0"]);
    assert_eq!(commit_hashes("at commit 277ed24."), vec!["277ed24"]);
    assert!(commit_hashes("0x160508, 22.05.8, sha256 of tally.toml, deadbeef, 1234567, e2e_10_a").is_empty());
    assert!(commit_hashes("see target/release/abc1234def/x and a-1234abcd").is_empty());
}

/// Slurm versions (`22.05.8`) in `text`, in order of appearance.
fn slurm_versions(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|w| w.trim_matches('.'))
        .filter(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() == 3
                && parts[0].len() == 2
                && parts[1].len() == 2
                && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
        .collect()
}

/// The release matrix is written once, in plugin/ffi/src/release.rs (the
/// releases named in its first lines): README's and docs/install.md's
/// tables list exactly those, each once, and docs/testbed.md names each.
#[test]
fn release_matrix_is_release_rs() {
    let root = repo();
    let head: String = read(&root.join("plugin/ffi/src/release.rs")).lines().take(3).collect::<Vec<_>>().join(" ");
    let releases: BTreeSet<String> = slurm_versions(&head).into_iter().collect();
    assert!(releases.len() >= 2, "tidy: release.rs names no releases in its first lines: {head}");
    let mut offenders = Vec::new();
    for doc in ["README.md", "docs/install.md"] {
        let rows: Vec<String> = read(&root.join(doc))
            .lines()
            .filter_map(|l| l.strip_prefix("| ")?.split(" |").next().map(str::trim).map(str::to_string))
            .filter(|cell| slurm_versions(cell).first().is_some_and(|v| v == cell))
            .collect();
        let listed: BTreeSet<String> = rows.iter().cloned().collect();
        if listed != releases || rows.len() != releases.len() {
            offenders.push(format!("{doc}: the release table lists {rows:?}, release.rs {releases:?}"));
        }
    }
    let testbed = read(&root.join("docs/testbed.md"));
    for r in &releases {
        if !slurm_versions(&testbed).contains(r) {
            offenders.push(format!("docs/testbed.md: does not name {r}"));
        }
    }
    fail_if_any("the release matrix is release.rs's", &offenders);
}

/// A code span that names Rust items: `a::b`, `A::b()`, `crate::x::Y`
/// (at least one `::`, only identifiers between).
fn rust_path(span: &str) -> Option<Vec<&str>> {
    let span = span.strip_suffix("()").unwrap_or(span);
    let parts: Vec<&str> = span.split("::").collect();
    let ident = |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !p.starts_with(|c: char| c.is_ascii_digit());
    (parts.len() >= 2 && parts.iter().all(ident)).then_some(parts)
}

/// Every item a document names as a Rust path (`engine::classify`,
/// `Entitlement::most_short_besides`) exists: each of its names is a word
/// of the repository's Rust sources (or of std, core, alloc).
#[test]
fn rust_paths_in_documents_exist() {
    let root = repo();
    let mut words: BTreeSet<String> = ["std", "core", "alloc", "crate", "self", "super"].iter().map(|s| s.to_string()).collect();
    for file in walk(&root, &|p| p.extension().is_some_and(|e| e == "rs")) {
        let text = read(&file);
        words.extend(text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).map(str::to_string));
    }
    let mut offenders = Vec::new();
    let mut checked = 0;
    for doc in path_documents() {
        let text = without_fences(&read(&doc));
        for (line, span) in inline_code_spans(&text) {
            let Some(parts) = rust_path(span.trim()) else { continue };
            // std's own paths (`std::fs::rename`) are std's business.
            if matches!(parts[0], "std" | "core" | "alloc") {
                continue;
            }
            checked += 1;
            if let Some(missing) = parts.iter().find(|p| !words.contains(**p)) {
                offenders.push(format!("{}:{}: `{}`: no `{missing}` in the Rust sources", rel(&doc), line + 1, span.trim()));
            }
        }
    }
    assert!(checked > 20, "tidy: only {checked} Rust paths found in the documents: the extraction is broken");
    fail_if_any("Rust items named in README.md, ARCHITECTURE.md and docs/*.md exist", &offenders);
}

/// The anchors GitHub gives a Markdown file's headings: the heading's text
/// without its Markdown (code ticks, emphasis, a link's target), lower
/// case, only letters, digits, `-`, `_` and spaces, spaces as `-`; a
/// repeated one gets `-1`, `-2`, …
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in without_fences(text).lines() {
        let Some(title) = line.strip_prefix('#').map(|t| t.trim_start_matches('#')) else { continue };
        if !title.starts_with(' ') {
            continue;
        }
        // A link's text without its target: `[text](target)` → `text`.
        let mut plain = String::new();
        let mut rest = title.trim();
        while let Some(i) = rest.find("](") {
            plain.push_str(&rest[..i]);
            rest = rest[i + 2..].split_once(')').map_or("", |(_, after)| after);
        }
        plain.push_str(rest);
        let slug: String = plain
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

#[test]
fn heading_anchors_are_githubs() {
    let doc = "# Tally\n## `tally exporter`: Prometheus, Grafana, and a page per account\n### Who can scrape it\n```\n# not a heading\n```\n## [docs/x.md](docs/x.md) and *more*\n## Who can scrape it\n";
    let a = heading_anchors(doc);
    for want in ["tally", "tally-exporter-prometheus-grafana-and-a-page-per-account", "who-can-scrape-it", "docsxmd-and-more", "who-can-scrape-it-1"]
    {
        assert!(a.contains(want), "{want} in {a:?}");
    }
    assert!(!a.contains("not-a-heading"), "{a:?}");
}

#[test]
fn repo_path_recognition() {
    let top: BTreeSet<String> = ["plugin", "docs", "README.md", "target", "tests"].iter().map(|s| s.to_string()).collect();
    for (word, want) in [
        ("plugin/ffi/src/release.rs", Some("plugin/ffi/src/release.rs")),
        ("plugin/ffi/src/release.rs:12", Some("plugin/ffi/src/release.rs")),
        ("./plugin/ffi/build.rs,", Some("plugin/ffi/build.rs")),
        ("--config=tests/e2e/tally.toml", Some("tests/e2e/tally.toml")),
        ("README.md", Some("README.md")),
        ("docs/", Some("docs/")),
        ("/etc/slurm/slurm.conf", None),
        ("StateSaveLocation/tally/ledger.state", None),
        ("https://example.invalid/docs/x.md", None),
        ("plugin/*/tests/fake_host.rs", None),
        ("docs/<name>.md", None),
        ("fuzz/fuzz_targets/NAME.rs", None),
        ("tally.toml", None),
        ("priority/tally", None),
        ("tally_engine::engine", None),
    ] {
        assert_eq!(as_repo_path(word, &top).as_deref(), want, "{word}");
    }
}

// ---- 4. no machine paths ---------------------------------------------------------------

/// The documents checked for machine paths: README.md, ARCHITECTURE.md,
/// CHANGELOG.md, docs/**/*.md and docs/man/*.
fn all_documents() -> Vec<PathBuf> {
    let root = repo();
    let mut docs = vec![root.join("README.md"), root.join("ARCHITECTURE.md"), root.join("CHANGELOG.md")];
    docs.extend(walk(&root.join("docs"), &|p| p.extension().is_some_and(|e| e == "md") || p.parent().is_some_and(|d| d.ends_with("docs/man"))));
    docs.retain(|p| p.is_file());
    docs
}

/// The absolute paths in `line` that belong to one machine: under a home
/// or work directory, `/tmp`, `/var/tmp` (but [`MACHINE_PATH_ALLOWED`]), or
/// any absolute path through a cargo `target/` directory.
fn machine_paths(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let ends = |c: char| c.is_whitespace() || matches!(c, '`' | '\'' | '"' | '(' | ')' | '[' | ']' | '<' | '>' | ',' | ';' | '|' | '*');
    let mut out = Vec::new();
    for (i, _) in line.match_indices('/') {
        // The start of an absolute path: not inside a word or another path.
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || matches!(bytes[i - 1], b'/' | b'.' | b'_' | b'-' | b'~' | b'$' | b'}' | b'\\')) {
            continue;
        }
        let path: String = line[i..].chars().take_while(|&c| !ends(c)).collect();
        // The end of a sentence is not part of the path.
        let path = path.trim_end_matches(['.', ':']).to_string();
        if path.starts_with("//") || MACHINE_PATH_ALLOWED.iter().any(|(prefix, _)| path.starts_with(prefix)) {
            continue;
        }
        let personal =
            ["/work/", "/root/", "/home/", "/Users/", "/tmp/", "/var/tmp/", "/private/", "/mnt/", "/scratch/"].iter().any(|p| path.starts_with(p));
        let build_output = path.contains("/target/release/") || path.contains("/target/debug/") || path.ends_with("/target");
        if personal || build_output {
            out.push(path);
        }
    }
    out
}

#[test]
fn docs_name_no_machine_path() {
    let docs = all_documents();
    assert!(docs.len() >= 5, "tidy: found only {} documents: the walk is broken", docs.len());
    let mut offenders = Vec::new();
    for doc in docs {
        let name = rel(&doc);
        for (n, line) in read(&doc).lines().enumerate() {
            for path in machine_paths(line) {
                offenders.push(format!("{name}:{}: {path}", n + 1));
            }
        }
    }
    fail_if_any(
        "documents name paths of one machine (write them repo-relative, or as the documented defaults: /var/tmp/tally-testbed, …)",
        &offenders,
    );
}

#[test]
fn machine_path_recognition() {
    for (line, want) in [
        ("$ /work/main/target/release/tally share", vec!["/work/main/target/release/tally"]),
        ("see /home/alice/tally/README.md.", vec!["/home/alice/tally/README.md"]),
        ("wrote `/tmp/tmp.x1/plot.svg`", vec!["/tmp/tmp.x1/plot.svg"]),
        ("(/opt/build/target/release/tally)", vec!["/opt/build/target/release/tally"]),
        ("/var/tmp/scratch/x", vec!["/var/tmp/scratch/x"]),
        ("the run dir /var/tmp/tally-testbed/state", vec![]),
        ("cargo build && ./target/release/tally plan", vec![]),
        ("/etc/slurm/slurm.conf and /usr/lib/x86_64-linux-gnu/slurm-wlm", vec![]),
        ("https://example.invalid/home/x and ~/.cargo/bin and $HOME/tmp/x", vec![]),
        ("StateSaveLocation/tally/ledger.state", vec![]),
    ] {
        assert_eq!(machine_paths(line), want, "{line}");
    }
}

// ---- 5. the crate graph -----------------------------------------------------------

const ARROW: &str = "──►";

/// An entry of ARCHITECTURE.md's crate graph: the crates it names (short
/// names), whether it has an arrow, the crates they depend on, its line.
#[derive(Debug, PartialEq)]
struct GraphEntry {
    crates: Vec<String>,
    arrow: bool,
    deps: Vec<String>,
    line: usize,
}

/// The comma-separated names at the start of `text` (`a, b, c`: words of
/// letters, digits, `_`, `-`, `/`), and the rest, what follows the last.
fn graph_names(text: &str) -> (Vec<String>, &str) {
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/');
    let mut names = Vec::new();
    let mut rest = text;
    loop {
        let next = if names.is_empty() { Some(rest) } else { rest.strip_prefix(',').map(|r| r.trim_start_matches(' ')) };
        let Some(next) = next else { break };
        let end = next.find(|c| !is_name(c)).unwrap_or(next.len());
        if end == 0 {
            break;
        }
        names.push(next[..end].to_string());
        rest = &next[end..];
    }
    (names, rest.trim_start())
}

/// ARCHITECTURE.md's crate graph, from the block between its markers. An
/// entry starts on a line with no indent: `NAMES`, or `NAMES ──► DEPS`,
/// where NAMES and DEPS are comma-separated short names (`a, b`), and a
/// description may follow (the first word not after a comma ends the
/// names). The `──► DEPS` may instead start the next line, indented. Other
/// indented lines continue the description; fences and blank lines are
/// skipped.
fn parse_crate_graph(first_line: usize, block: &str) -> (Vec<GraphEntry>, Vec<String>) {
    let known: BTreeSet<&str> = GRAPH_NAMES.iter().map(|&(short, _)| short).collect();
    let mut entries: Vec<GraphEntry> = Vec::new();
    let mut problems = Vec::new();
    // Whether the previous line was an entry's first: a `──►` line may follow.
    let mut after_head = false;
    for (i, line) in block.lines().enumerate() {
        let line_no = first_line + i;
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with("```") {
            after_head = false;
            continue;
        }
        let rest = if line.starts_with(char::is_whitespace) {
            let was_after_head = std::mem::replace(&mut after_head, false);
            if !trimmed.starts_with(ARROW) {
                continue; // the description goes on
            }
            match entries.last_mut() {
                Some(e) if was_after_head && !e.arrow => {
                    e.arrow = true;
                    trimmed
                }
                _ => {
                    problems.push(format!("ARCHITECTURE.md:{line_no}: a `{ARROW}` line that follows no entry's first line (or a second arrow)"));
                    continue;
                }
            }
        } else {
            let (crates, rest) = graph_names(line);
            after_head = true;
            entries.push(GraphEntry { crates, arrow: false, deps: Vec::new(), line: line_no });
            match rest.strip_prefix(ARROW) {
                Some(_) => {
                    entries.last_mut().unwrap().arrow = true;
                    rest
                }
                None => continue,
            }
        };
        let (deps, _) = graph_names(rest[ARROW.len()..].trim_start());
        let e = entries.last_mut().unwrap();
        if deps.is_empty() {
            problems.push(format!("ARCHITECTURE.md:{line_no}: `{ARROW}` names no crate (leave the arrow out of a crate that depends on none)"));
        }
        e.deps = deps;
    }
    for e in &entries {
        if e.crates.is_empty() {
            problems.push(format!("ARCHITECTURE.md:{}: an entry that names no crate", e.line));
        }
        for name in e.crates.iter().chain(&e.deps) {
            if !known.contains(name.as_str()) {
                problems.push(format!("ARCHITECTURE.md:{}: `{name}` is no short name of tidy.rs's GRAPH_NAMES", e.line));
            }
        }
    }
    (entries, problems)
}

/// `a, b, c`, or `none`.
fn listing(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

#[test]
fn crate_graph_is_the_cargo_one() {
    let packages = packages();
    assert!(packages.len() >= 10, "tidy: found only {} packages under {}: the walk is broken", packages.len(), repo().display());
    let (first_line, block) = architecture_block("crate-graph");
    let (entries, mut offenders) = parse_crate_graph(first_line, &block);
    let short_of: BTreeMap<&str, &str> = GRAPH_NAMES.iter().map(|&(short, package)| (package, short)).collect();
    let names: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    for (short, package) in GRAPH_NAMES {
        if !names.contains(package) {
            offenders.push(format!("tidy.rs: GRAPH_NAMES gives `{package}` the short name `{short}`, but it is no package here"));
        }
    }

    // Each crate's stated dependencies; and "each crate depends only on
    // crates above it".
    let mut stated: BTreeMap<&str, &GraphEntry> = BTreeMap::new();
    let mut above: BTreeSet<&str> = BTreeSet::new();
    for e in &entries {
        for dep in &e.deps {
            if !above.contains(dep.as_str()) {
                offenders.push(format!("ARCHITECTURE.md:{}: {} ──► {dep}, which is not above it in the graph", e.line, e.crates.join(", ")));
            }
        }
        for c in &e.crates {
            if let Some(earlier) = stated.insert(c, e) {
                offenders.push(format!("ARCHITECTURE.md:{}: `{c}` is in the graph twice (also line {})", e.line, earlier.line));
            }
        }
        above.extend(e.crates.iter().map(String::as_str));
    }

    for p in &packages {
        let manifest = rel(&p.manifest);
        let actual: Vec<&str> = p.deps.iter().map(|d| short_of.get(d.as_str()).copied().unwrap_or(d)).collect();
        let Some(&short) = short_of.get(p.name.as_str()) else {
            offenders.push(format!(
                "{manifest}: `{}` has no short name in tidy.rs's GRAPH_NAMES: give it one, and add it to ARCHITECTURE.md's crate graph",
                p.name
            ));
            continue;
        };
        let Some(e) = stated.get(short) else {
            offenders.push(format!("ARCHITECTURE.md: the crate graph does not list `{short}` ({manifest}): add it, ──► {}", listing(&actual)));
            continue;
        };
        let claimed: Vec<&str> = e.deps.iter().map(String::as_str).collect();
        let (claimed_set, actual_set): (BTreeSet<&str>, BTreeSet<&str>) = (claimed.iter().copied().collect(), actual.iter().copied().collect());
        if claimed_set != actual_set {
            let false_claims: Vec<&str> = claimed_set.difference(&actual_set).copied().collect();
            let omitted: Vec<&str> = actual_set.difference(&claimed_set).copied().collect();
            let mut why = Vec::new();
            if !false_claims.is_empty() {
                why.push(format!("no dependency: {}", listing(&false_claims)));
            }
            if !omitted.is_empty() {
                why.push(format!("not stated: {}", listing(&omitted)));
            }
            offenders.push(format!(
                "ARCHITECTURE.md:{}: {short}: stated {}; {manifest} says {} ({})",
                e.line,
                listing(&claimed),
                listing(&actual),
                why.join("; "),
            ));
        }
    }
    fail_if_any(
        "ARCHITECTURE.md's crate graph (<!-- tidy:crate-graph -->) states each crate's normal dependencies on the repository's crates",
        &offenders,
    );
}

#[test]
fn crate_graph_parsing() {
    let block = "\n```text\n\
        allocator, planner      the rules\n\
        config      ──► allocator, planner     the config,\n\
        \x20                                       read  ──► here is prose\n\
        slurm-sys bindings only, the first word not after a comma ends the names\n\
        priority, job_submit\n\
        \x20           ──► config, slurm-sys\n\
        \x20                                      cdylibs\n\
        ```\n";
    let (entries, problems) = parse_crate_graph(10, block);
    assert_eq!(problems, Vec::<String>::new());
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        entries,
        vec![
            GraphEntry { crates: strings(&["allocator", "planner"]), arrow: false, deps: vec![], line: 12 },
            GraphEntry { crates: strings(&["config"]), arrow: true, deps: strings(&["allocator", "planner"]), line: 13 },
            GraphEntry { crates: strings(&["slurm-sys"]), arrow: false, deps: vec![], line: 15 },
            GraphEntry { crates: strings(&["priority", "job_submit"]), arrow: true, deps: strings(&["config", "slurm-sys"]), line: 16 },
        ]
    );
    for bad in ["cfg ──► allocator\n", "config ──►\n", "config\n\n    ──► allocator\n", "config ──► allocator\n    ──► planner\n"]
    {
        assert!(!parse_crate_graph(1, bad).1.is_empty(), "not a problem: {bad:?}");
    }

    for (section, want) in [
        ("dependencies", Some(None)),
        ("target.'cfg(fuzzing)'.dependencies", Some(None)),
        ("target.'cfg(target_os = \"linux\")'.dependencies", Some(None)),
        ("target.x86_64-unknown-linux-gnu.dependencies", Some(None)),
        ("dependencies.tally-config", Some(Some("tally-config".to_string()))),
        ("dev-dependencies", None),
        ("build-dependencies", None),
        ("target.'cfg(unix)'.dev-dependencies", None),
        ("workspace.dependencies", None),
    ] {
        assert_eq!(dependency_section(section), want, "{section}");
    }
    assert_eq!(inline_value(r#"{ path = "../package", package = "tally-x" }"#, "package"), Some("tally-x"));
    assert_eq!(inline_value(r#"{ path = "../package" }"#, "package"), None);
}

/// docs/reliability.md's load tables are written by `testbed/load.sh`
/// between its markers (one pair per queue size), each starting with the
/// line that names the command which made it: a hand-made table there, or
/// markers the script no longer writes, fail here.
#[test]
fn load_tables_are_written_by_load_sh() {
    let doc = read(&repo().join("docs/reliability.md"));
    let script = read(&repo().join("testbed/load.sh"));
    assert!(
        script.contains("<!-- testbed/load.sh TALLY_LOAD_JOBS={jobs}: begin -->"),
        "tidy: testbed/load.sh no longer writes the markers this test looks for"
    );
    let mut offenders = Vec::new();
    for jobs in ["10000", "100000"] {
        let (open, close) =
            (format!("<!-- testbed/load.sh TALLY_LOAD_JOBS={jobs}: begin -->"), format!("<!-- testbed/load.sh TALLY_LOAD_JOBS={jobs}: end -->"));
        let (Some(a), Some(b)) = (doc.find(&open), doc.find(&close)) else {
            offenders.push(format!("docs/reliability.md: no `{open}` … `{close}` block"));
            continue;
        };
        let block = doc[a + open.len()..b.max(a + open.len())].trim();
        let first = block.lines().next().unwrap_or("");
        let command = if jobs == "10000" { "bash testbed/load.sh`".to_string() } else { format!("TALLY_LOAD_JOBS={jobs} ") };
        if !first.starts_with('`') || !first.contains(&command) || !block.contains("| client probe p99, ms |") {
            offenders.push(format!("docs/reliability.md: the TALLY_LOAD_JOBS={jobs} block is not load.sh's (first line: {first:?})"));
        }
    }
    fail_if_any("the load tables of docs/reliability.md come from testbed/load.sh", &offenders);
}
