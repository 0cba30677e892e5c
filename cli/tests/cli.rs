//! The `tally` binary as a user runs it.

use std::process::Command;

fn tally(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .env_remove("TALLY_CONFIG")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run tally");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn temp_config(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tally-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn config_check_prints_the_allocation_tree() {
    let (ok, out, err) = tally(&["config", "check", "examples/tally.toml", "--gpus", "64"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("examples/tally.toml: OK (18 accounts, 15 teams)"), "{out}");
    assert!(out.contains("cluster: 64 GPUs x 168 h = 10752.0 GPU-hours per window"), "{out}");
    // pretrain = 45% x 40% of 10752 GPU-hours.
    let line = out.lines().find(|l| l.trim_start().starts_with("pretrain ")).expect("pretrain row");
    assert!(line.contains("1935.4"), "{line}");
    assert!(line.contains("18.00%"), "{line}");
}

#[test]
fn config_check_uses_the_file_size_without_gpus() {
    let (ok, out, _) = tally(&["config", "check", "examples/tally.toml"]);
    assert!(ok);
    assert!(out.contains("cluster: 256 GPUs"), "{out}");
}

#[test]
fn broken_config_prints_file_key_errors_and_fails() {
    let path = temp_config("broken.toml", "[accounts.a]\nshare = 60\n[accounts.b]\nparent = \"a\"\nshare = 101\n");
    let (ok, out, err) = tally(&["config", "check", &path]);
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.trim(), format!("{path}:3: accounts.b.share: account `b`: share 101 is not a percentage in (0, 100]"));
}

#[test]
fn budgets_that_do_not_fit_the_cluster_size_fail() {
    let path = temp_config("fit.toml", "[accounts.a]\ngpu_hours = 2000\n");
    let (ok, _, err) = tally(&["config", "check", &path, "--gpus", "8"]);
    assert!(!ok);
    assert!(err.contains("accounts: children of `root` are given 2000.0 GPU-hours per window, more than its 1344.0"), "{err}");
    let (ok, _, _) = tally(&["config", "check", &path, "--gpus", "16"]);
    assert!(ok);
}

#[test]
fn missing_cluster_size_is_explained() {
    let path = temp_config("nosize.toml", "[accounts.a]\nshare = 50\n");
    let (ok, _, err) = tally(&["config", "check", &path]);
    assert!(!ok);
    assert!(err.contains("no cluster size: give --gpus N or set [cluster] gpus in the file"), "{err}");
}

#[test]
fn demo_ranks_orders_and_protects_contracts() {
    let (ok, out, err) = tally(&["demo", "--config", "examples/tally.toml"]);
    assert!(ok, "{err}");
    // The least-used team (semantic, 0.2 of its allocation) ranks first.
    assert!(out.contains("   0  semantic"), "{out}");
    // The 8h contract that started an hour ago is protected.
    assert!(out.contains("protected: 7h of contract left"), "{out}");
    assert!(out.contains("victim order: 10, 12, 13"), "{out}");
}
