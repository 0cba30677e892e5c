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

/// A package: its name, directory, and crate roots (library and binaries).
#[derive(Debug)]
struct Package {
    name: String,
    manifest: PathBuf,
    roots: Vec<PathBuf>,
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
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.trim_matches(|c| c == '[' || c == ']').trim().to_string();
                continue;
            }
            let Some((key, value)) = line.split_once('=') else { continue };
            // `key = "value"  # a comment`: the first quoted string.
            let value = value.split('"').nth(1).unwrap_or("");
            match (section.as_str(), key.trim()) {
                ("package", "name") => name = Some(value.to_string()),
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
        out.push(Package { name, manifest, roots: roots.into_iter().collect() });
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
        for (line, target) in link_targets(&text) {
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") || target.starts_with('/') {
                continue;
            }
            checked += 1;
            if !doc.parent().unwrap().join(target).exists() {
                offenders.push(format!("{name}:{}: link target ({target}) does not exist", line + 1));
            }
        }
    }
    assert!(checked > 50, "tidy: only {checked} paths found in the documents: the extraction is broken");
    fail_if_any("paths named in README.md, ARCHITECTURE.md and docs/*.md exist", &offenders);
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
