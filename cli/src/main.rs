//! `tally`: the command-line face of Tally.
//!
//! Every subcommand works on the same allocator functions the plugins use.

// Unsafe code only where allowed by name (the SIGPIPE reset in `main`).
#![deny(unsafe_code)]

use args::{arguments_bounded, config_at, gpu_count};
use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod args;
mod budget;
mod check;
mod demo;
mod explain;
mod exporter;
mod live;
mod man;
mod plan;
mod plan_check;
mod plot;
mod predict;
mod sacctmgr;
mod scored;
mod share;
mod sim;
mod slurm_json;
mod suite;
mod table;
mod trace;

#[derive(Parser, Debug)]
#[command(name = "tally", version = env!("TALLY_VERSION"), about = "Fair-share GPU scheduling for Slurm: budgets, contracts, reports")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Work with tally.toml.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Fair share as the plugin sees it, like sshare: budget, 7-day usage,
    /// ratio and rank per account, what each team is short of now, and
    /// owed against delivered over the window, measured live.
    Share(ShareArgs),
    /// Canonical traces: import public ones, augment them with teams and contracts.
    Trace {
        #[command(subcommand)]
        command: trace::TraceCommand,
    },
    /// Your cluster's own history (sacct) as a trace, to replay under Tally;
    /// the demand predictors over a trace.
    History {
        #[command(subcommand)]
        command: trace::HistoryCommand,
    },
    /// Replay a trace through fifo, multifactor and tally, side by side
    /// (`tally sim suite`: the benchmark suite).
    Sim(Box<sim::SimCmd>),
    /// Plan a scenario's horizon (the rolling-horizon planner) against FIFO
    /// with peak reservation.
    Plan(plan::PlanArgs),
    /// What a proposed budget would have delivered: a trace (your cluster's
    /// history) replayed under the config in force and the proposed one,
    /// owed and delivered per team side by side.
    Budget(budget::BudgetArgs),
    /// Why a job waits: its contract and tier, its team now and over 7
    /// days, the jobs ahead of it and why, what blocks it, whom it may
    /// preempt (from squeue, sinfo and the ledger).
    Explain(explain::ExplainArgs),
    /// Serve Tally's figures: OpenMetrics for Prometheus at /metrics, and a
    /// read-only page per account at / (a daemon; never inside slurmctld).
    Exporter(exporter::ExporterArgs),
    /// Walk through the rules on a config: a week of usage, the fair-share
    /// ranking, the job order and a preemption decision (no Slurm needed).
    Demo {
        /// Config file (default: $TALLY_CONFIG or /etc/slurm/tally.toml).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Cluster size in GPUs, 1 to 4194304 (default: `[cluster] gpus` of the file).
        #[arg(long, value_name = "N", value_parser = gpu_count)]
        gpus: Option<u32>,
    },
    /// Write the manual pages (tally.1 and tally-SUBCOMMAND.1) into a
    /// directory and print their paths; `make install` and `make deb` call it.
    #[command(hide = true)]
    Man {
        /// Directory to write the pages into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct ShareArgs {
    /// Config file (default: $TALLY_CONFIG, else the config in force,
    /// StateSaveLocation/tally/tally.toml.active, else /etc/slurm/tally.toml).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Ledger file, a regular file of at most 256 MiB (default:
    /// StateSaveLocation/tally/ledger.state from slurm.conf).
    #[arg(long)]
    state: Option<PathBuf>,
    /// List every user under their accounts (as `sshare -a`).
    #[arg(long, short = 'a')]
    all: bool,
    /// Only these accounts and their subtrees (comma-separated).
    #[arg(long, short = 'A', value_name = "ACCOUNTS")]
    accounts: Option<String>,
    /// List these users under their accounts (comma-separated).
    #[arg(long, short = 'u', value_name = "USERS")]
    users: Option<String>,
    /// More fields (rate, allocation, fair share, running, waiting, fair now, unallocated).
    #[arg(long, short = 'l')]
    long: bool,
    /// Fields to show, comma-separated, each `name[%width]` (negative: aligned left); see --helpformat.
    #[arg(long, short = 'o', value_name = "FIELDS")]
    format: Option<String>,
    /// List the fields --format takes, and what each is.
    #[arg(long)]
    helpformat: bool,
    /// No header lines.
    #[arg(long, short = 'n')]
    noheader: bool,
    /// `|` after every field (as `sshare -p`).
    #[arg(long, short = 'p', conflicts_with_all = ["parsable2", "json"])]
    parsable: bool,
    /// `|` between fields (as `sshare -P`).
    #[arg(long, short = 'P', conflicts_with = "json")]
    parsable2: bool,
    /// Every row's figures as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the chart of delivered against owed per team per day (SVG;
    /// `-`: the chart alone, on stdout).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Validate a config and print the effective allocation tree
    /// (GPU-hours per account per window for a cluster size).
    Check {
        /// Config file (default: $TALLY_CONFIG or /etc/slurm/tally.toml).
        file: Option<PathBuf>,
        /// Cluster size in GPUs, 1 to 4194304 (default: `[cluster] gpus` of the file).
        #[arg(long, value_name = "N", value_parser = gpu_count)]
        gpus: Option<u32>,
        /// Also compare with slurmdbd (sacctmgr, sacct): accounts that ran
        /// jobs in the window but are not in the tree, tree accounts
        /// slurmdbd does not have or has under another parent, users whose
        /// default account is not in the tree; one line each, and a failure
        /// when there is one.
        #[arg(long)]
        against_slurmdbd: bool,
        /// The slurmdbd cluster to compare with (default: the only one it holds).
        #[arg(long, value_name = "NAME", requires = "against_slurmdbd", value_parser = sacctmgr::cluster_name)]
        cluster: Option<String>,
    },
    /// Write a tally.toml from slurmdbd's account tree (sacctmgr's
    /// associations: parents kept, Fairshare normalised into shares) and
    /// users' default accounts, with comments on what to review.
    Import {
        /// Read the tree from slurmdbd with sacctmgr (the one source there is).
        #[arg(long, required = true)]
        from_sacctmgr: bool,
        /// The slurmdbd cluster to import (default: the only one it holds).
        #[arg(long, value_name = "NAME", value_parser = sacctmgr::cluster_name)]
        cluster: Option<String>,
        /// Cluster size in GPUs, 1 to 4194304 (default: the nodes' GPUs as sinfo counts them).
        #[arg(long, value_name = "N", value_parser = gpu_count)]
        gpus: Option<u32>,
        /// Write the file here (default: standard output); an existing file
        /// is kept unless --force. Written atomically.
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Replace an existing --out file.
        #[arg(long, requires = "out")]
        force: bool,
    },
    /// Print the account tree and users as `account NAME PARENT` /
    /// `user NAME ACCOUNT` lines (the test bed's TALLY_ACCOUNTS format).
    Accounts {
        /// Config file (default: $TALLY_CONFIG or /etc/slurm/tally.toml).
        file: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`tally share | head`), as Unix tools do,
    // instead of panicking on the next print.
    // SAFETY: resetting a signal disposition to its default before any thread starts.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL)
    };
    if let Err(msg) = arguments_bounded(std::env::args_os()) {
        eprintln!("tally: {msg}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Config { command: ConfigCommand::Check { file, gpus, against_slurmdbd, cluster } } => {
            check::run(file, gpus, against_slurmdbd.then_some(cluster))
        }
        Command::Config { command: ConfigCommand::Import { from_sacctmgr: _, cluster, gpus, out, force } } => {
            sacctmgr::import(cluster, gpus, out, force)
        }
        Command::Config { command: ConfigCommand::Accounts { file } } => check::accounts(file),
        Command::Share(a) if a.helpformat => {
            // The fields; their unit too when the config (if it loads) has GPU types.
            let config = config_at(a.config.clone()).ok().map(|(_, c)| c);
            print!("{}", share::help_format(config.as_ref()));
            Ok(())
        }
        Command::Share(a) => share::run(share::Args {
            layout: match (a.parsable, a.parsable2, a.json) {
                (true, _, _) => share::Layout::Parsable,
                (_, true, _) => share::Layout::Parsable2,
                (_, _, true) => share::Layout::Json,
                _ => share::Layout::Table,
            },
            config: a.config,
            state: a.state,
            all_users: a.all,
            accounts: a.accounts,
            users: a.users,
            long: a.long,
            format: a.format,
            noheader: a.noheader,
            svg: a.svg,
        }),
        Command::Demo { config, gpus } => demo::run(config, gpus),
        Command::Trace { command } => trace::run(command),
        Command::History { command } => trace::run_history(command),
        Command::Sim(cmd) => match *cmd {
            sim::SimCmd { command: Some(sim::SimCommand::Suite(args)), .. } => suite::run_cmd(args),
            sim::SimCmd { args, .. } => sim::run_cmd(args),
        },
        Command::Plan(args) => plan::run_cmd(args),
        Command::Budget(args) => budget::run_cmd(args),
        Command::Explain(args) => explain::run_cmd(args),
        Command::Exporter(args) => exporter::run_cmd(args),
        Command::Man { out } => man::write_pages(Cli::command(), &out).map(|paths| {
            for p in paths {
                println!("{}", p.display());
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `--gpus` and `--gpus-per-node` says the bound in its help
    /// (they all parse with [`gpu_count`]; the CLI tests try each).
    #[test]
    fn every_gpu_count_has_the_cluster_bound() {
        fn walk(cmd: &clap::Command, path: &str, seen: &mut usize) {
            for arg in cmd.get_arguments() {
                let long = arg.get_long().unwrap_or_default();
                if long == "gpus" || long == "gpus-per-node" {
                    *seen += 1;
                    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                    let max = tally_config::MAX_CLUSTER_GPUS;
                    assert!(help.contains(&format!("1 to {max}")), "{path} --{long}: the help says the bound: {help}");
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), seen);
            }
        }
        let mut seen = 0;
        walk(&Cli::command(), "tally", &mut seen);
        // config check, config import, demo, sim (2), budget, trace augment.
        assert_eq!(seen, 7);
    }
}
