//! `tally config check`: validate and print the effective allocation tree.

use crate::table::{Column, Table};
use std::path::PathBuf;
use tally_allocator::{format_duration, Budget, Inventory, MissingContract};
use tally_config::Config;

/// The capacity of `gpus` GPUs by type (`[cluster.gpu_types]`, with the
/// nodes' `inventory` for types without a count), e.g. `64 h100 x 1, 32
/// b200 x 2.2, 160 untyped x 1 = 390.4 budget units`.
pub(crate) fn typed_capacity(config: &Config, gpus: u32, inventory: &Inventory) -> String {
    let typed = config.cluster.gpu_types.typed_gpus(inventory);
    let n: u64 = typed.values().map(|&g| u64::from(g)).sum();
    let mut parts: Vec<String> = typed.iter().filter(|(_, &g)| g > 0).map(|(t, g)| format!("{g} {t} x {}", config.weight_of(Some(t)))).collect();
    let rest = u64::from(gpus).saturating_sub(n);
    if rest > 0 {
        parts.push(format!("{rest} untyped x 1"));
    }
    format!("{} = {:.1} budget units", parts.join(", "), config.capacity_with(gpus, inventory).units)
}

/// Types of `[cluster.gpu_types]` neither the file nor the nodes count.
pub(crate) fn uncounted_types(config: &Config, inventory: &Inventory) -> Vec<String> {
    let typed = config.cluster.gpu_types.typed_gpus(inventory);
    typed.iter().filter(|(_, &g)| g == 0).map(|(t, _)| t.to_string()).collect()
}

/// `slurmdbd`: also compare with slurmdbd (of that cluster, when named)
/// once the tree is printed ([`crate::sacctmgr::check_against`]).
pub fn run(file: Option<PathBuf>, gpus: Option<u32>, slurmdbd: Option<Option<String>>) -> Result<(), String> {
    let (config, gpus) = crate::args::load(file, gpus)?;
    let alloc = config.allocation(gpus).map_err(|e| e.to_string())?;
    let tree = &config.tree;
    let missing = match config.contracts.missing {
        MissingContract::Unallocated => "unallocated".to_string(),
        MissingContract::Reject => "rejected".to_string(),
        MissingContract::Default(c) => format!("default {}", c.canonical()),
    };
    println!("{}: OK ({} accounts, {} teams)", config.source, tree.len() - 1, tree.leaves().count());
    println!(
        "window {} in {} buckets; contracts 0..{}, missing contract: {}",
        format_duration(config.window_s),
        format_duration(config.bucket_s),
        format_duration(config.contracts.max_s),
        missing
    );
    if config.cluster.gpu_types.is_empty() {
        println!("cluster: {} GPUs x {:.0} h = {:.1} GPU-hours per window\n", gpus, alloc.capacity.window_hours(), alloc.capacity.gpu_hours());
    } else {
        let none = Inventory::new();
        println!(
            "cluster: {} GPUs ({}) x {:.0} h = {:.1} budget-unit-hours per window",
            gpus,
            typed_capacity(&config, gpus, &none),
            alloc.capacity.window_hours(),
            alloc.capacity.gpu_hours()
        );
        println!("GPU types ([cluster.gpu_types]): an hour on a GPU costs its type's weight in GPU-hours of budget; GPU-HOURS and GPUS below are budget units");
        for t in uncounted_types(&config, &none) {
            println!("  {t}: no count in the file: priority/tally counts Slurm's nodes (until then these GPUs weigh 1 here)");
        }
        println!();
    }
    let width = tree.walk().iter().map(|&(id, d)| 2 * d + tree.node(id).name.len()).max().unwrap_or(10).max(7);
    let (l, r) = (Column::left, Column::right);
    let mut table = Table::new([l(width), r(12), r(8), r(12), r(8), r(12)]).gap("  ");
    table.row(["ACCOUNT", "BUDGET", "CLUSTER", "GPU-HOURS", "GPUS", "KEPT GPU-H"]);
    for (id, depth) in tree.walk() {
        let node = tree.node(id);
        let budget = match node.budget {
            _ if id == tree.root() => "cluster".to_string(),
            Some(Budget::Share(p)) => format!("{p}%"),
            Some(Budget::GpuHours(h)) => format!("{h} GPU-h"),
            None => "none".to_string(),
        };
        let name = format!("{}{}", "  ".repeat(depth), node.name);
        let kept = if node.children.is_empty() { String::new() } else { format!("{:.1}", alloc.own_gpu_hours[id]) };
        let cluster = format!("{:.2}%", 100.0 * alloc.fraction(id));
        table.row([name, budget, cluster, format!("{:.1}", alloc.gpu_hours[id]), format!("{:.2}", alloc.rate_gpus(id)), kept]);
    }
    print!("{table}");
    match slurmdbd {
        Some(cluster) => crate::sacctmgr::check_against(&config, cluster.as_deref()),
        None => Ok(()),
    }
}

/// `tally config accounts`: the tree and users as the test bed's accounts
/// file (`account <name> <parent>`, `user <name> <account>`), parents first,
/// ready for `TALLY_ACCOUNTS=… testbed/up.sh` or as a plan for sacctmgr.
pub fn accounts(file: Option<PathBuf>) -> Result<(), String> {
    let (_, config) = crate::args::config_at(file)?;
    let tree = &config.tree;
    println!("# accounts and users of {}", config.source);
    for (id, _) in tree.walk().into_iter().skip(1) {
        let node = tree.node(id);
        let parent = node.parent.map_or(tally_allocator::ROOT, |p| tree.node(p).name.as_str());
        println!("account {} {}", node.name, parent);
    }
    for (user, account) in &config.users {
        println!("user {user} {account}");
    }
    Ok(())
}
