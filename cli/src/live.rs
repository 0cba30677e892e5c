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

/// The largest slurm.conf read (for `StateSaveLocation` and `SlurmUser`):
/// 16 MiB. A slurm.conf with a line for each of 10,000 nodes is about 1 MiB.
pub const MAX_SLURM_CONF_BYTES: u64 = 16 << 20;

/// The largest ledger read: the plugin's own bound
/// ([`tally_engine::statefile::MAX_BYTES`], 256 MiB), so the reports read
/// every ledger the plugin reads, and nothing the plugin would refuse.
pub const MAX_LEDGER_BYTES: u64 = tally_engine::statefile::MAX_BYTES;

/// `StateSaveLocation=` of a slurm.conf (keys are case-insensitive).
pub fn state_save_location(conf: &Path) -> Result<PathBuf, String> {
    let text =
        tally_config::input::read_text(conf, "slurm.conf", MAX_SLURM_CONF_BYTES).map_err(|e| format!("{}: {e} (give --state)", conf.display()))?;
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
        None => Ok(state_save_location(&slurm_conf())?.join("tally").join(LEDGER_NAME)),
    }
}

/// The config a report reads: the one given (`--config`), else
/// `$TALLY_CONFIG`, else the config in force (the active copy priority/tally
/// keeps beside the `ledger`, when it exists and can be read), else
/// /etc/slurm/tally.toml. The exporter and the reports read the same one.
pub fn config_in_force(given: Option<PathBuf>, ledger: &Path) -> PathBuf {
    if let Some(c) = given.or_else(|| std::env::var_os("TALLY_CONFIG").map(PathBuf::from)) {
        return c;
    }
    let active = tally_engine::follower::active_path(ledger);
    if std::fs::File::open(&active).is_ok() {
        active
    } else {
        PathBuf::from(tally_config::DEFAULT_PATH)
    }
}

/// The wall clock, Unix seconds.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The ledger at `path` in the config's geometry; skipped lines are said on
/// stderr, a missing file is an empty ledger (said too). Only a regular
/// file of at most [`MAX_LEDGER_BYTES`] is read.
pub fn read_snapshot(path: &Path, config: &Config) -> Result<Snapshot, String> {
    use std::io::ErrorKind;
    match tally_config::input::read_text(path, "a ledger", MAX_LEDGER_BYTES) {
        Ok(text) => {
            let parsed = Snapshot::parse(&text, config.bucket_s, config.window_s).map_err(|e| format!("{}: {e}", path.display()))?;
            for (line, what) in &parsed.skipped {
                eprintln!("{}:{line}: skipped: {what}", path.display());
            }
            Ok(parsed.snapshot)
        }
        Err(e) if e.io_kind() == Some(ErrorKind::NotFound) => {
            eprintln!("{}: no ledger yet (slurmctld with priority/tally saves it every calc_period); showing zero usage", path.display());
            Ok(Snapshot::new(config.new_ledger()))
        }
        Err(e) if e.io_kind() == Some(ErrorKind::PermissionDenied) => {
            Err(format!("{}: {e} (the ledger is the slurm user's, mode 0600: run as root or SlurmUser, or ask your admin)", path.display()))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Who a report is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub uid: u32,
    /// Run by sudo for another user: the process holds privileges (root's
    /// or SlurmUser's) that the caller does not, so nothing the caller
    /// chose may decide what they see.
    pub through_sudo: bool,
}

/// Who runs the report. Under sudo (`SUDO_UID`, set by sudo, differs from
/// the process's real uid) the user sudo ran it for, else the process's
/// real user. A user who sets `SUDO_UID` by hand only narrows their own
/// view: the process still has nothing but their own rights.
pub fn caller() -> Caller {
    let ruid = real_uid();
    caller_from(ruid, std::env::var("SUDO_UID").ok().as_deref(), std::env::var("SUDO_USER").ok().as_deref(), || user_name(ruid))
}

/// [`caller`] from its inputs (pure, for the tests).
fn caller_from(ruid: u32, sudo_uid: Option<&str>, sudo_user: Option<&str>, own_name: impl FnOnce() -> String) -> Caller {
    match (sudo_uid.and_then(|u| u.trim().parse::<u32>().ok()), sudo_user) {
        (Some(uid), Some(name)) if uid != ruid && !name.is_empty() => Caller { name: name.to_string(), uid, through_sudo: true },
        _ => Caller { name: own_name(), uid: ruid, through_sudo: false },
    }
}

/// The process's real uid (`/proc/self/status`: `Uid: real effective ...`).
fn real_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().next()?.parse().ok()))
        .unwrap_or(u32::MAX)
}

/// The name of a uid, through NSS (`getent passwd`, so LDAP users too).
fn user_name(uid: u32) -> String {
    std::process::Command::new("getent")
        .args(["passwd", &uid.to_string()])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).split(':').next().map(str::to_string))
        .unwrap_or_default()
}

/// The files a live report reads and who it is for, decided before
/// anything the caller chose is read (docs/reports.md, "Who sees what").
#[derive(Debug)]
pub struct Live {
    pub config: Config,
    pub state: PathBuf,
    /// `Some(user)`: the view is private to that user's accounts.
    pub private_for: Option<String>,
}

/// What the caller asked for that names a file: the config, the ledger,
/// saved Slurm output, an output file, a time other than now. Each is
/// `(flag, given)`.
#[derive(Debug, Default)]
pub struct Chosen {
    pub config: Option<PathBuf>,
    pub state: Option<PathBuf>,
    /// Other flags that read or write files of the caller's choosing.
    pub others: Vec<&'static str>,
}

/// Where Slurm's commands find slurm.conf when `SLURM_CONF` is not set.
pub const SITE_SLURM_CONF: &str = "/etc/slurm/slurm.conf";

/// Open a live report for the caller.
///
/// Run directly, the process has the caller's own rights: their
/// `--config`, `--state`, `$TALLY_CONFIG` and `$SLURM_CONF` are used, and
/// the view is private unless they are an admin (root, SlurmUser, or in
/// `[reports] admins`). They can only read a ledger its mode lets them read.
///
/// Run by sudo for another user, the cluster's own files decide, whatever
/// the environment says: slurm.conf at [`SITE_SLURM_CONF`] (for
/// `SlurmUser` and `StateSaveLocation`), the config in force (priority/tally's
/// active copy, `StateSaveLocation/tally/tally.toml.active`; before
/// slurmctld first ran with Tally, /etc/slurm/tally.toml) and the ledger
/// beside it. An admin may then choose other files; anyone else is refused
/// with what they may do instead.
pub fn open(command: &str, chosen: Chosen) -> Result<Live, String> {
    let caller = caller();
    if !caller.through_sudo {
        let state = ledger_path(chosen.state)?;
        let (_, config) = crate::args::config_at(Some(config_in_force(chosen.config, &state)))?;
        let admin = is_admin(&caller, &slurm_user(&slurm_conf()), &config);
        let private_for = (config.reports.private && !admin).then(|| caller.name.clone());
        return Ok(Live { config, state, private_for });
    }
    // Under sudo: what the caller's environment says is not the cluster's.
    // (Edition 2021: single-threaded here, before any command is spawned,
    // so Slurm's commands run later find the site's slurm.conf too.)
    std::env::remove_var("SLURM_CONF");
    std::env::remove_var("TALLY_CONFIG");
    let conf = PathBuf::from(SITE_SLURM_CONF);
    let site = |e: String| format!("run through sudo, tally reads the cluster's own files and no others: {e}");
    let dir = state_save_location(&conf).map_err(|e| site(e.replace(" (give --state)", "")))?.join("tally");
    let site_state = dir.join(LEDGER_NAME);
    let (_, site_config) = crate::args::config_at(Some(config_in_force(None, &site_state))).map_err(site)?;
    let slurm_user = slurm_user(&conf);
    if is_admin(&caller, &slurm_user, &site_config) {
        let (config, state) = match chosen.config {
            Some(c) => (crate::args::config_at(Some(c))?.1, chosen.state.unwrap_or(site_state)),
            None => (site_config, chosen.state.unwrap_or(site_state)),
        };
        return Ok(Live { config, state, private_for: None });
    }
    let mut given: Vec<&str> = Vec::new();
    if chosen.config.is_some() {
        given.push("--config");
    }
    if chosen.state.is_some() {
        given.push("--state");
    }
    given.extend(chosen.others.iter().copied());
    if !given.is_empty() {
        return Err(format!(
            "{}: `tally {command}` runs through sudo for {}, who is not a Tally admin, so it reads the cluster's own config ({}) and ledger ({}); \
             {} may be given by admins only (root, SlurmUser {slurm_user}, or [reports] admins): leave {} out",
            given.join(", "),
            caller.name,
            site_config.source,
            site_state.display(),
            if given.len() == 1 { "it" } else { "these" },
            if given.len() == 1 { "it" } else { "them" },
        ));
    }
    let private_for = site_config.reports.private.then(|| caller.name.clone());
    Ok(Live { config: site_config, state: site_state, private_for })
}

/// The file name of the ledger in `StateSaveLocation/tally`.
pub const LEDGER_NAME: &str = "ledger.state";

/// Root, SlurmUser, or a name in `[reports] admins`.
fn is_admin(caller: &Caller, slurm_user: &str, config: &Config) -> bool {
    caller.uid == 0 || caller.name == slurm_user || config.reports.admins.contains(&caller.name)
}

/// `SlurmUser=` of a slurm.conf (default `root`, as Slurm's).
pub fn slurm_user(conf: &Path) -> String {
    tally_config::input::read_text(conf, "slurm.conf", MAX_SLURM_CONF_BYTES)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sudo_names_the_caller_whatever_user_it_runs_as() {
        let me = || "slurm".to_string();
        // sudo -u slurm (SlurmUser, not root) for dave: dave, through sudo.
        let c = caller_from(64030, Some("1001"), Some("dave"), me);
        assert_eq!(c, Caller { name: "dave".into(), uid: 1001, through_sudo: true });
        // sudo -u root for dave: the same.
        assert_eq!(caller_from(0, Some("1001"), Some("dave"), me), c);
        // SlurmUser or root on its own (no sudo, or sudo to oneself): itself.
        assert_eq!(caller_from(64030, None, None, me), Caller { name: "slurm".into(), uid: 64030, through_sudo: false });
        assert!(!caller_from(64030, Some("64030"), Some("slurm"), me).through_sudo);
        // SUDO_USER alone is not sudo (sudo sets both).
        assert_eq!(caller_from(0, None, Some("dave"), || "root".into()), Caller { name: "root".into(), uid: 0, through_sudo: false });
        assert_eq!(caller_from(0, Some("x"), Some("dave"), || "root".into()).uid, 0);
    }

    #[test]
    fn finds_state_save_location() {
        let dir = std::env::temp_dir().join(format!("tally-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("slurm.conf");
        std::fs::write(&conf, "# StateSaveLocation=/nope\nClusterName=x\nstatesavelocation = /var/spool/x # here\n").unwrap();
        assert_eq!(state_save_location(&conf).unwrap(), PathBuf::from("/var/spool/x"));
        std::fs::write(&conf, "ClusterName=x\n").unwrap();
        assert!(state_save_location(&conf).unwrap_err().contains("no StateSaveLocation (give --state)"));
        // Not a regular file: refused by what it is; SlurmUser then defaults.
        assert_eq!(
            state_save_location(&dir).unwrap_err(),
            format!("{}: is a directory, not a regular file: slurm.conf is read from a regular file (give --state)", dir.display())
        );
        assert_eq!(slurm_user(Path::new("/dev/zero")), "root");
    }
}
