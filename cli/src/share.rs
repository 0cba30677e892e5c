//! `tally share`: the ledger's view, in the manner of sshare.
//!
//! Reads tally.toml and the ledger the plugin saves under
//! `StateSaveLocation/tally/ledger.state` (StateSaveLocation from
//! slurm.conf), and ranks exactly as the plugin does (`Config::fair_share`).

use crate::table::{Column, Table};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use tally_allocator::{format_duration, Snapshot};

/// slurm.conf as clients find it: `$SLURM_CONF` or /etc/slurm/slurm.conf.
fn slurm_conf() -> PathBuf {
    std::env::var_os("SLURM_CONF").map_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"), PathBuf::from)
}

/// `StateSaveLocation=` of a slurm.conf (keys are case-insensitive).
fn state_save_location(conf: &Path) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(conf).map_err(|e| format!("{}: cannot read: {e} (give --state)", conf.display()))?;
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("StateSaveLocation"))
        .map(|(_, v)| PathBuf::from(v.trim()))
        .ok_or_else(|| format!("{}: no StateSaveLocation (give --state)", conf.display()))
}

pub struct Args {
    pub config: Option<PathBuf>,
    pub state: Option<PathBuf>,
    pub parsable: bool,
    pub users: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    let (_, config) = crate::config_at(args.config)?;
    let state = match args.state {
        Some(s) => s,
        None => state_save_location(&slurm_conf())?.join("tally").join("ledger.state"),
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let snapshot = match std::fs::read_to_string(&state) {
        Ok(text) => {
            let parsed = Snapshot::parse(&text, config.bucket_s, config.window_s).map_err(|e| format!("{}: {e}", state.display()))?;
            for (line, what) in &parsed.skipped {
                eprintln!("{}:{line}: skipped: {what}", state.display());
            }
            parsed.snapshot
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("{}: no ledger yet (slurmctld with priority/tally saves it every calc_period); showing zero usage", state.display());
            Snapshot::new(config.new_ledger())
        }
        Err(e) => return Err(format!("{}: cannot read: {e}", state.display())),
    };
    let fs = config.fair_share(&snapshot.ledger, now).map_err(|e| e.to_string())?;
    let users = snapshot.ledger.user_usage(now);
    let tree = &config.tree;

    if !args.parsable {
        println!(
            "Window {} ending now; ledger saved {} ago ({}); {} GPUs",
            format_duration(config.window_s),
            format_duration(now.saturating_sub(snapshot.saved_at)),
            state.display(),
            config.ranking_gpus()
        );
        println!();
    }
    let header = ["Account", "User", "AllocGPUh", "UsedGPUh", "Used/Alloc", "Rank", "FairShare"];
    let width = tree.walk().iter().map(|&(id, d)| d + tree.node(id).name.len()).max().unwrap_or(7).max(7) + 1;
    let mut rows: Vec<[String; 7]> = Vec::new();
    for (id, depth) in tree.walk() {
        let node = tree.node(id);
        let Some(s) = fs.standing(&node.name) else { continue };
        let ratio = if s.subtree_allocated_gpu_hours > 0.0 {
            format!("{:.4}", s.subtree_used_gpu_hours / s.subtree_allocated_gpu_hours)
        } else {
            "-".to_string()
        };
        let indent = if args.parsable { String::new() } else { " ".repeat(depth) };
        rows.push([
            format!("{indent}{}", node.name),
            String::new(),
            format!("{:.1}", s.subtree_allocated_gpu_hours),
            format!("{:.3}", s.subtree_used_gpu_hours),
            ratio,
            s.rank.to_string(),
            format!("{:.3}", s.factor),
        ]);
        if args.users {
            for (key, gs) in users.0.iter().filter(|(k, _)| *k.account == *node.name) {
                let place = users.place(&key.account, &key.user);
                rows.push([
                    format!("{indent} {}", node.name),
                    key.user.to_string(),
                    String::new(),
                    format!("{:.3}", gs / 3600.0),
                    String::new(),
                    format!("{}.{}", s.rank, place),
                    String::new(),
                ]);
            }
        }
    }
    if args.parsable {
        println!("{}", header.join("|"));
        for cols in rows {
            println!("{}", cols.join("|"));
        }
    } else {
        let (l, r) = (Column::left, Column::right);
        let mut table = Table::new([l(width), l(10), r(10), r(10), r(10), r(5), r(9)]);
        table.row(header);
        table.text("-".repeat(width + 62));
        rows.into_iter().for_each(|cols| table.row(cols));
        print!("{table}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_state_save_location() {
        let dir = std::env::temp_dir().join(format!("tally-share-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("slurm.conf");
        std::fs::write(&conf, "# StateSaveLocation=/nope\nClusterName=x\nstatesavelocation = /var/spool/x # here\n").unwrap();
        assert_eq!(state_save_location(&conf).unwrap(), PathBuf::from("/var/spool/x"));
        std::fs::write(&conf, "ClusterName=x\n").unwrap();
        assert!(state_save_location(&conf).unwrap_err().contains("no StateSaveLocation (give --state)"));
    }
}
