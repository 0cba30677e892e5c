//! The fetcher of what `make test` needs from outside the repository
//! (`scripts/fetch.sh`: SchedMD's tarballs and the GPU traces, pinned in
//! `scripts/sources.lock`), against a local HTTP server: `scripts/fetch-test.sh`
//! serves a fake upstream on loopback and checks that a download with the
//! right pins is kept in the cache (repacked with the right top folder), that
//! a wrong checksum fails and leaves nothing, that a `../shared` with a changed
//! file is refused, and that without a network the one line says what is
//! missing and how to provide it. No root, no network; needs bash, python3,
//! and curl or wget.
//!
//! And the real manifest: every line parses and names what the fetcher
//! expects (the pins themselves are checked against `../shared` by
//! `bash scripts/fetch.sh check`, which `make test` runs first).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn fetch_against_a_local_server() {
    let out = Command::new("bash")
        .arg(root().join("scripts/fetch-test.sh"))
        .env_remove("TALLY_SLURM_SRC")
        .env_remove("TALLY_TRACES")
        .env_remove("TALLY_FETCH")
        .output()
        .expect("bash runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "scripts/fetch-test.sh failed:\n{text}");
    assert!(text.contains("fetch-test: all checks passed"), "{text}");
}

#[test]
fn manifest_pins_both_releases_and_the_traces() {
    let text = std::fs::read_to_string(root().join("scripts/sources.lock")).expect("scripts/sources.lock");
    let lines: Vec<Vec<&str>> =
        text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).map(|l| l.split_whitespace().collect()).collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let hex64 = |s: &str| hex(s, 64);
    let mut releases = Vec::new();
    let mut traces = Vec::new();
    for l in &lines {
        match l[0] {
            "slurm" => {
                assert_eq!(l.len(), 7, "{l:?}");
                let (release, version, commit, url) = (l[1], l[2], l[3], l[6]);
                assert!(version.starts_with(&format!("{release}.")), "{l:?}");
                assert!(hex(commit, 40), "{l:?}");
                assert!(hex64(l[4]) && hex64(l[5]), "{l:?}");
                assert_eq!(url, format!("https://github.com/SchedMD/slurm/archive/{commit}.tar.gz"));
                releases.push(release);
            }
            "traces-archive" => assert_eq!(l.len(), 2, "{l:?}"),
            "traces" => {
                assert!((3..=4).contains(&l.len()) && hex64(l[2]), "{l:?}");
                traces.push(l[1]);
            }
            other => panic!("scripts/sources.lock: unknown kind {other}"),
        }
    }
    assert_eq!(releases, ["25.11", "26.05"]);
    let csvs: Vec<String> = (1..=7).map(|i| format!("cluster0{i}.csv")).collect();
    for c in &csvs {
        assert!(traces.contains(&c.as_str()), "{c} is not pinned");
    }
    assert!(traces.contains(&"LICENSE"), "the traces' LICENSE is not pinned");
}
