//! `tally share`: the ledger's view, in the manner of sshare.
//!
//! Reads tally.toml and the ledger the plugin saves under
//! `StateSaveLocation/tally/ledger.state` (StateSaveLocation from
//! slurm.conf), and ranks exactly as the plugin does (`Config::fair_share`).

use crate::table::{Column, Table};
use crate::live;
use std::path::PathBuf;
use tally_allocator::format_duration;

pub struct Args {
    pub config: Option<PathBuf>,
    pub state: Option<PathBuf>,
    pub parsable: bool,
    pub users: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    let (_, config) = crate::config_at(args.config)?;
    let state = live::ledger_path(args.state)?;
    let now = live::now();
    let snapshot = live::read_snapshot(&state, &config)?;
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
