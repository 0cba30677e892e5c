//! `tally man --out DIR`: the manual pages of the command line, rendered by
//! clap_mangen from the same clap definitions that parse it, so a page
//! cannot describe a flag the binary does not have.
//!
//! One page per visible command: `tally.1`, and `tally-SUB.1` (git's
//! naming) for every subcommand at every depth (`tally-config-check.1`).
//! Hidden commands (`man` itself) get none. `make install` and `make deb`
//! run this on the built binary; the config file's page, tally.toml(5), is
//! written by hand in docs/man/.

use clap::Command;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The manual the pages belong to (the `.TH` line's fifth field).
const MANUAL: &str = "Tally Manual";

/// Write every page into `out` (created if missing); the paths written,
/// `tally.1` first, then the subcommands depth first in definition order.
pub fn write_pages(cmd: Command, out: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("tally man: cannot create {}: {e}", out.display()))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    // Gives every subcommand its display name (`tally-config-check`).
    cmd.build();
    let version = cmd.get_version().unwrap_or_default().to_string();
    let mut pages = Vec::new();
    collect(&cmd, &mut pages);
    let mut written = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let name = page.get_display_name().unwrap_or_else(|| page.get_name()).to_string();
        let path = out.join(format!("{name}.1"));
        let mut text = Vec::new();
        clap_mangen::Man::new(page.clone())
            .source(format!("Tally {version}"))
            .manual(MANUAL)
            .render(&mut text)
            .map_err(|e| format!("tally man: rendering {name}: {e}"))?;
        let see_also: Vec<String> = if i == 0 {
            pages[1..].iter().map(|p| p.get_display_name().unwrap_or_default().to_string()).collect()
        } else {
            vec!["tally".to_string()]
        };
        write_extra(&mut text, i == 0, &see_also).map_err(|e| format!("tally man: rendering {name}: {e}"))?;
        std::fs::write(&path, text).map_err(|e| format!("tally man: cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The command and its visible subcommands, depth first.
fn collect(cmd: &Command, pages: &mut Vec<Command>) {
    pages.push(cmd.clone());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, pages);
    }
}

/// FILES and ENVIRONMENT on the top page, SEE ALSO on every page.
fn write_extra(w: &mut dyn Write, top: bool, pages: &[String]) -> std::io::Result<()> {
    if top {
        writeln!(w, ".SH FILES")?;
        writeln!(w, ".TP")?;
        writeln!(w, ".I {}", tally_config::DEFAULT_PATH)?;
        writeln!(w, "The configuration the subcommands read when none is named on the command line; see \\fBtally.toml\\fR(5).")?;
        writeln!(w, ".TP")?;
        writeln!(w, ".I StateSaveLocation/tally/ledger.state")?;
        writeln!(w, "The ledger \\fBpriority/tally\\fR keeps in slurmctld's state directory (mode 0600); read by \\fBtally share\\fR and \\fBtally explain\\fR.")?;
        writeln!(w, ".SH ENVIRONMENT")?;
        writeln!(w, ".TP")?;
        writeln!(w, ".B TALLY_CONFIG")?;
        writeln!(w, "The configuration file to read instead of \\fI{}\\fR.", tally_config::DEFAULT_PATH)?;
    }
    writeln!(w, ".SH \"SEE ALSO\"")?;
    let mut refs: Vec<String> = pages.iter().map(|p| format!(".BR {p} (1)")).collect();
    refs.push(".BR tally.toml (5)".to_string());
    if top {
        refs.extend(["slurm.conf (5)", "sprio (1)", "sshare (1)"].map(|r| format!(".BR {r}")));
    }
    let last = refs.len() - 1;
    for (i, r) in refs.iter().enumerate() {
        writeln!(w, "{r}{}", if i < last { " ," } else { "" })?;
    }
    Ok(())
}
