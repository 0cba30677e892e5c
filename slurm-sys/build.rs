//! Picks the checked-in bindings (`src/bindings/v<major>_<minor>.rs`) that
//! match the Slurm installed here, and refuses any other. Generates nothing
//! and links nothing.
//!
//! * `$SLURM_INCLUDE_DIR/slurm/slurm_version.h` (default `/usr/include`, from
//!   libslurm-dev) exists: its `SLURM_VERSION_NUMBER` must equal the one of
//!   a file in `src/bindings/` (0x160508, Slurm 22.05.8; 0x180b05, Slurm
//!   24.11.5; 0x190b07, Slurm 25.11.7; 0x1a0503, Slurm 26.05.3), or the
//!   build fails with how to add a release. Slurm also
//!   refuses to load a plugin whose `plugin_version` differs.
//! * It does not exist: a warning, and the 22.05 bindings (pure-Rust tests
//!   must build on machines without the Slurm headers).
//!
//! Tells the crate, and (through `links = "slurm"`) the build scripts of
//! the crates that depend on it, which release: `cfg(slurm = "22.05")`, `"24.11"`,
//! `"25.11"` or `"26.05"` here, `DEP_SLURM_RELEASE` there (plugin/ffi turns
//! it into the same cfg). The header's number is passed as the env var
//! `SLURM_VERSION_NUMBER_HEADER` (see `slurm_sys::SLURM_VERSION_NUMBER_HEADER`).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const BINDINGS_DIR: &str = "src/bindings";
/// The release built when no header is found.
const DEFAULT_RELEASE: &str = "22.05";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={BINDINGS_DIR}");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo::rustc-check-cfg=cfg(slurm, values(\"22.05\", \"24.11\", \"25.11\", \"26.05\"))");

    let known = bindings_versions();
    let include_dir = env::var_os("SLURM_INCLUDE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/include"));
    let header = include_dir.join("slurm").join("slurm_version.h");

    // Rerun when the header appears, changes or goes away. Cargo reruns the
    // script (and rebuilds this crate and its dependents) on every build if a
    // watched path does not exist, so while the header is absent watch the
    // closest existing ancestor directory instead (Cargo scans it for the
    // newest mtime, which changes when slurm/slurm_version.h is installed).
    println!("cargo:rerun-if-changed={}", watch_path(&header).display());

    let release = match fs::read_to_string(&header) {
        Ok(text) => {
            let found = parse_version(&text).unwrap_or_else(|| panic!("slurm-sys: no `#define SLURM_VERSION_NUMBER 0x...` in {}", header.display()));
            let Some((release, _)) = known.iter().find(|(_, v)| *v == found) else {
                let list: Vec<String> = known.iter().map(|(r, v)| format!("{} ({r})", dotted(*v))).collect();
                panic!(
                    "slurm-sys: {} says SLURM_VERSION_NUMBER {found:#x} (Slurm {}), but Tally has bindings for \
                     Slurm {} only. Struct layouts differ between Slurm releases and Slurm refuses plugins \
                     built for another version. To add this one: a case in scripts/gen-bindings.sh (its \
                     Debian version and headers), run it, then add the release to slurm-sys/build.rs and \
                     slurm-sys/src/lib.rs (layout asserts) and its ABI differences to \
                     plugin/ffi/src/release.rs. Or point SLURM_INCLUDE_DIR at the headers of a supported \
                     release.",
                    header.display(),
                    dotted(found),
                    list.join(", "),
                );
            };
            println!("cargo:rustc-env=SLURM_VERSION_NUMBER_HEADER={found:#x}");
            release.clone()
        }
        Err(err) => {
            println!(
                "cargo:warning=slurm-sys: cannot read {} ({err}); building the Slurm {DEFAULT_RELEASE} \
                 bindings unchecked. Install libslurm-dev or set SLURM_INCLUDE_DIR to check them.",
                header.display(),
            );
            DEFAULT_RELEASE.to_string()
        }
    };
    println!("cargo:rustc-cfg=slurm=\"{release}\"");
    println!("cargo:release={release}");
}

/// (`"22.05"`, `SLURM_VERSION_NUMBER`) of each file in `src/bindings/`.
fn bindings_versions() -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let dir = fs::read_dir(BINDINGS_DIR).unwrap_or_else(|e| panic!("slurm-sys: cannot read {BINDINGS_DIR}: {e}"));
    for entry in dir.flatten() {
        let path = entry.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.strip_prefix('v')) else {
            continue;
        };
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("slurm-sys: cannot read {}: {e}", path.display()));
        let version = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("pub const SLURM_VERSION_NUMBER: u32 = "))
            .and_then(|v| v.trim_end_matches(';').trim().parse().ok())
            .unwrap_or_else(|| panic!("slurm-sys: no `pub const SLURM_VERSION_NUMBER: u32` in {}", path.display()));
        out.push((stem.replace('_', "."), version));
    }
    out.sort();
    out
}

/// Reads `#define SLURM_VERSION_NUMBER 0x160508` (hex or decimal).
fn parse_version(header: &str) -> Option<u32> {
    header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != "#define" || words.next()? != "SLURM_VERSION_NUMBER" {
            return None;
        }
        let value = words.next()?.trim_start_matches('(').trim_end_matches(')');
        match value.strip_prefix("0x").or_else(|| value.strip_prefix("0X")) {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => value.parse().ok(),
        }
    })
}

/// 0x160508 -> "22.05.8"
fn dotted(v: u32) -> String {
    format!("{}.{:02}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
}

fn watch_path(header: &Path) -> PathBuf {
    let mut path = header.to_path_buf();
    while !path.exists() {
        match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => path = parent.to_path_buf(),
            _ => break,
        }
    }
    path
}
