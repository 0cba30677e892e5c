//! The live state the plugin leaves for the reports: where slurm.conf puts
//! the ledger (`StateSaveLocation/tally/ledger.state`) and how it is read.
//! `tally share` and `tally explain` read it the same way.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use tally_allocator::Snapshot;
use tally_config::Config;

/// slurm.conf as clients find it: `$SLURM_CONF` or /etc/slurm/slurm.conf.
pub fn slurm_conf() -> PathBuf {
    std::env::var_os("SLURM_CONF").map_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"), PathBuf::from)
}

/// `StateSaveLocation=` of a slurm.conf (keys are case-insensitive).
pub fn state_save_location(conf: &Path) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(conf).map_err(|e| format!("{}: cannot read: {e} (give --state)", conf.display()))?;
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("StateSaveLocation"))
        .map(|(_, v)| PathBuf::from(v.trim()))
        .ok_or_else(|| format!("{}: no StateSaveLocation (give --state)", conf.display()))
}

/// The ledger file: `state`, or the plugin's under slurm.conf's StateSaveLocation.
pub fn ledger_path(state: Option<PathBuf>) -> Result<PathBuf, String> {
    match state {
        Some(s) => Ok(s),
        None => Ok(state_save_location(&slurm_conf())?.join("tally").join("ledger.state")),
    }
}

/// The wall clock, Unix seconds.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The ledger at `path` in the config's geometry; skipped lines are said on
/// stderr, a missing file is an empty ledger (said too).
pub fn read_snapshot(path: &Path, config: &Config) -> Result<Snapshot, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let parsed = Snapshot::parse(&text, config.bucket_s, config.window_s).map_err(|e| format!("{}: {e}", path.display()))?;
            for (line, what) in &parsed.skipped {
                eprintln!("{}:{line}: skipped: {what}", path.display());
            }
            Ok(parsed.snapshot)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("{}: no ledger yet (slurmctld with priority/tally saves it every calc_period); showing zero usage", path.display());
            Ok(Snapshot::new(config.new_ledger()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
            "{}: cannot read: {e} (the ledger is the slurm user's, mode 0600: run as root or SlurmUser, or ask your admin)",
            path.display()
        )),
        Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
    }
}

/// Who runs the report: the user sudo ran it for, else the process's user.
pub fn caller() -> (String, u32) {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid());
    if let Ok(u) = std::env::var("SUDO_USER") {
        if uid == 0 && !u.is_empty() {
            return (u, u32::MAX);
        }
    }
    let name = std::process::Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    (name, uid)
}

/// `SlurmUser=` of slurm.conf (default `root`, as Slurm's).
pub fn slurm_user() -> String {
    std::fs::read_to_string(slurm_conf())
        .ok()
        .and_then(|text| {
            text.lines()
                .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
                .filter_map(|l| l.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
                .find(|(k, _)| k.eq_ignore_ascii_case("SlurmUser"))
                .map(|(_, v)| v)
        })
        .unwrap_or_else(|| "root".to_string())
}

/// The accounts a user belongs to: the `[users]` map, the ledger's usage,
/// and Slurm's associations when sacctmgr answers.
pub fn accounts_of(user: &str, config: &Config, snap: &Snapshot) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = config.users.get(user).into_iter().cloned().collect();
    out.extend(snap.ledger.entries().filter(|(_, k, _)| &*k.user == user).map(|(_, k, _)| k.account.to_string()));
    if let Ok(o) = std::process::Command::new("sacctmgr").args(["-nP", "show", "assoc", &format!("user={user}"), "format=account"]).output() {
        if o.status.success() {
            out.extend(String::from_utf8_lossy(&o.stdout).lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from));
        }
    }
    out
}

/// With `[reports] private` and a caller who is not an admin (root,
/// SlurmUser, `[reports] admins`): the caller, whose view is private.
pub fn private_view_for(config: &Config) -> Option<String> {
    let (me, uid) = caller();
    let admin = uid == 0 || me == slurm_user() || config.reports.admins.contains(&me);
    (config.reports.private && !admin).then_some(me)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_state_save_location() {
        let dir = std::env::temp_dir().join(format!("tally-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("slurm.conf");
        std::fs::write(&conf, "# StateSaveLocation=/nope\nClusterName=x\nstatesavelocation = /var/spool/x # here\n").unwrap();
        assert_eq!(state_save_location(&conf).unwrap(), PathBuf::from("/var/spool/x"));
        std::fs::write(&conf, "ClusterName=x\n").unwrap();
        assert!(state_save_location(&conf).unwrap_err().contains("no StateSaveLocation (give --state)"));
    }
}
