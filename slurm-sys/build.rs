//! Checks that the Slurm installed here is the one the checked-in bindings were
//! generated for. Generates nothing and links nothing.
//!
//! * `$SLURM_INCLUDE_DIR/slurm/slurm_version.h` (default `/usr/include`, from
//!   libslurm-dev) exists: its `SLURM_VERSION_NUMBER` must equal the one in
//!   `src/bindings.rs` (0x160508, Slurm 22.05.8), or the build fails. Slurm
//!   also refuses to load a plugin whose `plugin_version` differs.
//! * It does not exist: a warning, and the build goes on (pure-Rust tests must
//!   build on machines without the Slurm headers).
//!
//! When found, the number is passed to the crate as the compile-time env var
//! `SLURM_VERSION_NUMBER_HEADER` (see `slurm_sys::SLURM_VERSION_NUMBER_HEADER`).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const BINDINGS: &str = "src/bindings.rs";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={BINDINGS}");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");

    let expected = bindings_version();
    let include_dir = env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let header = include_dir.join("slurm").join("slurm_version.h");

    // Rerun when the header appears, changes or goes away. Cargo reruns the
    // script (and rebuilds this crate and its dependents) on every build if a
    // watched path does not exist, so while the header is absent watch the
    // closest existing ancestor directory instead (Cargo scans it for the
    // newest mtime, which changes when slurm/slurm_version.h is installed).
    println!("cargo:rerun-if-changed={}", watch_path(&header).display());

    let text = match fs::read_to_string(&header) {
        Ok(text) => text,
        Err(err) => {
            println!(
                "cargo:warning=slurm-sys: cannot read {} ({err}); the Slurm version could not be \
                 checked against the bindings (generated for Slurm {}). Install libslurm-dev or \
                 set SLURM_INCLUDE_DIR to check it.",
                header.display(),
                dotted(expected),
            );
            return;
        }
    };
    let found = parse_version(&text).unwrap_or_else(|| {
        panic!(
            "slurm-sys: no `#define SLURM_VERSION_NUMBER 0x...` in {}",
            header.display()
        )
    });
    if found != expected {
        panic!(
            "slurm-sys: {} says SLURM_VERSION_NUMBER {found:#x} (Slurm {}), but the bindings in \
             slurm-sys/{BINDINGS} were generated for Slurm {} ({expected:#x}). Struct layouts \
             differ between Slurm releases and Slurm refuses plugins built for another version: \
             run `make bindings` (or `scripts/gen-bindings.sh`) against your version and re-check \
             the layout asserts in slurm-sys/src/lib.rs.",
            header.display(),
            dotted(found),
            dotted(expected),
        );
    }
    println!("cargo:rustc-env=SLURM_VERSION_NUMBER_HEADER={found:#x}");
}

/// `SLURM_VERSION_NUMBER` as generated into the checked-in bindings.
fn bindings_version() -> u32 {
    let text = fs::read_to_string(BINDINGS)
        .unwrap_or_else(|e| panic!("slurm-sys: cannot read {BINDINGS}: {e}"));
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("pub const SLURM_VERSION_NUMBER: u32 = ")
        })
        .and_then(|v| v.trim_end_matches(';').trim().parse().ok())
        .unwrap_or_else(|| {
            panic!("slurm-sys: no `pub const SLURM_VERSION_NUMBER: u32` in {BINDINGS}")
        })
}

/// Reads `#define SLURM_VERSION_NUMBER 0x160508` (hex or decimal).
fn parse_version(header: &str) -> Option<u32> {
    header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != "#define" || words.next()? != "SLURM_VERSION_NUMBER" {
            return None;
        }
        let value = words.next()?.trim_start_matches('(').trim_end_matches(')');
        match value
            .strip_prefix("0x")
            .or_else(|| value.strip_prefix("0X"))
        {
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
