//! Names the commit `tally --version` was built from.
//!
//! Sets two variables for the crate:
//!
//! * `TALLY_COMMIT`: the short commit and its date (`f2aba0a 2026-12-06`)
//!   when the workspace is a git checkout (a worktree too), or empty: no
//!   `git`, no `.git`, or the workspace inside some other repository (an
//!   unpacked source tarball). The build never fails for that.
//! * `TALLY_VERSION`: the workspace version, then the commit in parentheses
//!   when there is one (`0.2.0 (f2aba0a 2026-12-06)`, or `0.2.0`): what
//!   `--version` prints and the manual pages' source line carries.
//!
//! Reruns when HEAD moves: HEAD, the ref it points to (or, while that ref
//! is only packed, its directory) and packed-refs, each found through
//! `git rev-parse --git-path` (a worktree's HEAD is its own, its refs the
//! common ones). No file that does not exist is named: cargo would rerun
//! the script on every build. An uncommitted change is not marked: the
//! mark would be as old as the script's last run (a source edit rebuilds
//! the crate, not this), and watching the work tree would rerun it on
//! every edit.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let commit = commit(&manifest_dir).unwrap_or_default();
    let full = if commit.is_empty() { version } else { format!("{version} ({commit})") };
    println!("cargo:rustc-env=TALLY_COMMIT={commit}");
    println!("cargo:rustc-env=TALLY_VERSION={full}");
}

/// `git` run in `dir`: its trimmed standard output, or None if it could not
/// run, failed or printed nothing.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// The short commit and its date, with the git files that name it watched;
/// None outside a checkout of this workspace.
fn commit(manifest_dir: &Path) -> Option<String> {
    // The workspace is the checkout's top (not a tarball unpacked inside
    // another repository).
    let top = PathBuf::from(git(manifest_dir, &["rev-parse", "--show-toplevel"])?);
    let workspace = manifest_dir.parent()?;
    if top.canonicalize().ok()? != workspace.canonicalize().ok()? {
        return None;
    }
    let hash = git(manifest_dir, &["rev-parse", "--short=7", "HEAD"])?;
    let date = git(manifest_dir, &["log", "-1", "--format=%cs", "HEAD"])?;

    // Relative paths from `--git-path` are relative to the directory git ran in.
    let git_path = |name: &str| git(manifest_dir, &["rev-parse", "--git-path", name]).map(|p| manifest_dir.join(p));
    let mut watched: Vec<PathBuf> = [git_path("HEAD"), git_path("packed-refs")].into_iter().flatten().collect();
    // A branch checked out (not a detached HEAD): its loose ref, or, while
    // the ref is only packed, the nearest directory a commit would write it
    // into (under the refs directory: never the whole git directory).
    let refs = git_path("refs");
    if let (Some(loose), Some(refs)) = (git(manifest_dir, &["symbolic-ref", "-q", "HEAD"]).and_then(|branch| git_path(&branch)), refs) {
        watched.extend(loose.ancestors().take_while(|p| p.starts_with(&refs)).find(|p| p.exists()).map(Path::to_path_buf));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(format!("{hash} {date}"))
}
