//! The real-Slurm replay driver (run as root; `tests/e2e/replay.sh` builds
//! and runs it, then tears the bed down):
//!
//! ```text
//! replay <multifactor|tally> <trace.csv> [--speedup K] [--gpus N] [--drain S]
//!        [--config tally.toml] [--run-dir DIR] [--repo DIR]
//! replay probe <multifactor|tally> <trace.csv> [same options]
//! ```
//! The first form replays the trace (see `tally_tests::replay`) and prints a
//! summary, the last line being the path of the sacct dump. `probe` brings a
//! bed up with the same settings and measures scheduling latencies instead.
//! Both leave the bed up. Defaults: K = 180, 48 GPUs, 600 s of drain,
//! tests/e2e/replay-tally.toml, /var/tmp/tally-testbed, and this workspace
//! as the repo (testbed/, target/release/tally, target/plugins).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use tally_tests::replay::{probe_latencies, replay, summary, Policy, ReplayOptions};

const USAGE: &str =
    "usage: replay [probe] <multifactor|tally> <trace.csv> [--speedup K] [--gpus N] [--drain S] [--config tally.toml] [--run-dir DIR] [--repo DIR]";

fn parse(args: &[String]) -> Result<(bool, ReplayOptions), String> {
    let mut args = args.iter();
    let mut first = args.next().ok_or(USAGE)?;
    let probe = first == "probe";
    if probe {
        first = args.next().ok_or(USAGE)?;
    }
    let policy = Policy::parse(first).ok_or_else(|| format!("unknown policy {first:?}\n{USAGE}"))?;
    let trace = args.next().ok_or(USAGE)?;
    let mut o = ReplayOptions::new(policy, trace);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = || format!("{flag}: bad value {value:?}");
        match flag.as_str() {
            "--speedup" => o.speedup = value.parse().map_err(|_| bad())?,
            "--gpus" => o.gpus = value.parse().map_err(|_| bad())?,
            "--drain" => o.drain_s = value.parse().map_err(|_| bad())?,
            "--config" => o.tally_config = PathBuf::from(value),
            "--run-dir" => o.run_dir = PathBuf::from(value),
            "--repo" => o.repo = PathBuf::from(value),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    Ok((probe, o))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (probe, opts) = match parse(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if probe {
        return match probe_latencies(&opts) {
            Ok(l) => {
                println!("policy                    {}", opts.policy.name());
                println!("sbatch (runuser) took     {:.3} s", l.sbatch_s);
                println!("submit -> RUNNING         {:.3} s (idle cluster)", l.submit_to_running_s);
                println!("--begin -> RUNNING        {:.3} s (idle cluster)", l.begin_to_running_s);
                println!("end -> next RUNNING       {:.3} s (top pending job)", l.end_to_next_start_s);
                println!("end -> backfilled RUNNING {:.3} s (job behind a blocked one)", l.end_to_backfill_start_s);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("probe failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match replay(&opts) {
        Ok(out) => {
            print!("{}", summary(&opts, &out));
            println!("{}", out.sacct_path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("replay failed: {e}");
            ExitCode::FAILURE
        }
    }
}
