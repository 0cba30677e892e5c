//! What every subcommand reads the same way: the config (and its
//! warnings), a file the user named, a GPU count, and the bound on every
//! command-line argument.

use std::path::{Path, PathBuf};

/// The longest command-line argument taken, in bytes: a path's limit on
/// Linux (PATH_MAX). Nothing longer is parsed, so nothing longer is ever
/// quoted back.
pub const MAX_ARG_BYTES: usize = 4096;

/// Every argument at most [`MAX_ARG_BYTES`]; a longer one is refused with
/// its position and its first characters.
pub fn arguments_bounded(args: impl Iterator<Item = std::ffi::OsString>) -> Result<(), String> {
    for (i, a) in args.enumerate().skip(1) {
        if a.len() > MAX_ARG_BYTES {
            return Err(format!(
                "argument {i} (`{}`) is too long: each argument is at most {MAX_ARG_BYTES} bytes",
                tally_allocator::text::clip(&a.to_string_lossy())
            ));
        }
    }
    Ok(())
}

/// The config at `file`, or at the default path ($TALLY_CONFIG or
/// /etc/slurm/tally.toml) when `None`: every subcommand's way to load one.
pub fn config_at(file: Option<PathBuf>) -> Result<(PathBuf, tally_config::Config), String> {
    let path = file.unwrap_or_else(tally_config::default_path);
    let config = tally_config::Config::load(&path).map_err(|e| e.to_string())?;
    for w in config.warning_lines() {
        eprintln!("warning: {w}");
    }
    Ok((path, config))
}

/// A file the user named, as [`tally_config::input::read_text`] reads it:
/// a regular file (not a FIFO, a device or a directory) of at most
/// `max_bytes`, UTF-8. `what` names the kind of file in refusals ("a
/// trace"); every error starts with the path.
pub fn read_file(path: &Path, what: &str, max_bytes: u64) -> Result<String, String> {
    tally_config::input::read_text(path, what, max_bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// clap's parser of a GPU count (`--gpus`, `--gpus-per-node`): a whole
/// number from 1 to [`tally_config::MAX_CLUSTER_GPUS`], the bound tally.toml
/// has too. The help texts say the bound in words.
pub fn gpu_count(s: &str) -> Result<u32, String> {
    let max = tally_config::MAX_CLUSTER_GPUS;
    match s.trim().parse::<u64>() {
        Ok(0) => Err(format!("at least 1 GPU (1 to {max})")),
        Ok(n) if n > u64::from(max) => Err(tally_config::too_many_gpus(n)),
        Ok(n) => Ok(n as u32),
        Err(_) => Err(format!("`{s}` is not a whole number of GPUs (1 to {max})")),
    }
}

/// Load a config (default path when `None`) and pick the cluster size.
pub fn load(file: Option<PathBuf>, gpus: Option<u32>) -> Result<(tally_config::Config, u32), String> {
    let (path, config) = config_at(file)?;
    let gpus = match gpus.or(config.cluster.gpus) {
        Some(0) => return Err("--gpus must be at least 1".to_string()),
        Some(g) => g,
        None => return Err(format!("{}: no cluster size: give --gpus N or set [cluster] gpus in the file", path.display())),
    };
    Ok((config, gpus))
}

/// The largest trace read (a file of `tally sim`, `tally budget`, `tally
/// sim suite`, `tally history predict|profile`, or the input of `tally
/// trace import|augment`, standard input too): 1 GiB. A year of a large
/// cluster's sacct history is a few million jobs, some hundreds of MB;
/// the largest public traces (the Parallel Workloads Archive's SWF logs,
/// ElasticFlow's CSVs) are smaller. A parsed job takes about 6 times the
/// bytes of its CSV row (docs/reliability.md, "Input bounds"), so the bound
/// keeps a replay's memory to some GB where /dev/zero or a log file named
/// by mistake grew until the kernel killed it.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// A trace file the user named: a regular file of at most
/// [`MAX_TRACE_BYTES`], UTF-8 (errors start with the path).
pub fn read_trace(path: &Path) -> Result<String, String> {
    read_file(path, "a trace", MAX_TRACE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_counts_say_what_is_allowed() {
        assert_eq!(gpu_count("64"), Ok(64));
        assert_eq!(gpu_count("0"), Err("at least 1 GPU (1 to 4194304)".to_string()));
        assert!(gpu_count("4294967296").unwrap_err().contains("at most 4194304"));
        assert_eq!(gpu_count("lots"), Err("`lots` is not a whole number of GPUs (1 to 4194304)".to_string()));
    }

    #[test]
    fn a_long_argument_is_refused_with_its_start_only() {
        let args = |v: &[String]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>().into_iter();
        let fine = ["tally".to_string(), "share".into(), "-A".into(), "a".repeat(MAX_ARG_BYTES)];
        assert_eq!(arguments_bounded(args(&fine)), Ok(()));
        let long = ["tally".to_string(), "share".into(), "-A".into(), "a".repeat(100_000)];
        let err = arguments_bounded(args(&long)).unwrap_err();
        assert!(err.starts_with("argument 3 (`aaaa") && err.contains("(100000 bytes)") && err.contains("at most 4096 bytes"), "{err}");
        assert!(err.len() < 300, "{err}");
    }
}
