//! The budget tree as slurmdbd has it: `tally config import
//! --from-sacctmgr` writes a tally.toml from slurmdbd's associations, and
//! `tally config check --against-slurmdbd` compares a tally.toml with
//! slurmdbd (accounts, parents, the accounts jobs ran under, users'
//! default accounts).
//!
//! What sacctmgr, sacct and sinfo print is read by pure functions
//! ([`parse_associations`], [`parse_user_defaults`], [`count_job_accounts`],
//! [`parse_sinfo_gpus`]); [`import_toml`] and [`mismatches`] work on what
//! they read, so everything but running the commands is tested on
//! captured text. Every input is bounded: at most [`MAX_ASSOCIATIONS`]
//! lines from sacctmgr, [`MAX_OUTPUT_BYTES`] of its output,
//! [`MAX_SACCT_BYTES`] of sacct's (read as it arrives, one line at a time).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tally_allocator::{format_duration, tree::check_account_name, OrgTree, ROOT};
use tally_config::input::Bounded;
use tally_config::Config;

/// The most associations (lines of `sacctmgr show associations`, or of
/// `sacctmgr show user`) read: a site with hundreds of accounts and
/// thousands of users has some thousands; a tally.toml of 100,000
/// accounts is some 5 MB, a third of what the plugins read.
pub const MAX_ASSOCIATIONS: usize = 100_000;

/// The most bytes of sacctmgr's (and sinfo's) output read: 100,000
/// associations of 5 short fields are some 10 MB.
pub const MAX_OUTPUT_BYTES: u64 = 64 << 20;

/// The most bytes of sacct's output read (one account name per job, read
/// line by line: only the distinct accounts are kept): a million jobs are
/// some 20 MB.
pub const MAX_SACCT_BYTES: u64 = 1 << 30;

/// The longest user name kept from sacctmgr (Unix names are at most 32).
pub const MAX_USER_LEN: usize = 256;

/// The association fields asked of sacctmgr, in this order.
pub const ASSOC_FORMAT: &str = "format=Cluster,Account,ParentName,User,Fairshare";

/// An association's Fairshare as sacctmgr prints it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fairshare {
    /// A number of raw shares.
    Shares(u32),
    /// `parent`: the association uses its parent's fair share.
    Parent,
    /// An empty field.
    Missing,
}

/// One line of `sacctmgr -nP show associations format=Cluster,Account,ParentName,User,Fairshare`.
#[derive(Debug, Clone, PartialEq)]
pub struct Assoc {
    pub cluster: String,
    pub account: String,
    /// The parent account of an account's association; empty for root and
    /// for users' associations.
    pub parent: String,
    /// Empty for an account's association.
    pub user: String,
    pub fairshare: Fairshare,
    /// 1-based line in sacctmgr's output.
    pub line: usize,
}

/// Too many lines: the refusal, with the bound.
fn too_many(what: &str) -> String {
    format!("{what} lists more than {MAX_ASSOCIATIONS} lines: tally reads at most {MAX_ASSOCIATIONS}; give --cluster NAME to read one cluster")
}

/// The lines of `text` that hold something, numbered from 1, with their
/// `|`-separated fields; a line with another number of fields than `n`
/// is refused with its number.
fn fields<'a>(text: &'a str, n: usize, what: &str) -> Result<Vec<(usize, Vec<&'a str>)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        if out.len() >= MAX_ASSOCIATIONS {
            return Err(too_many(what));
        }
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        if f.len() != n {
            return Err(format!(
                "{what}, line {}: {} fields where {n} were asked for: `{}` (is this the output of `sacctmgr -nP ...`?)",
                i + 1,
                f.len(),
                tally_allocator::text::clip(line)
            ));
        }
        out.push((i + 1, f));
    }
    Ok(out)
}

/// `sacctmgr -nP show associations format=Cluster,Account,ParentName,User,Fairshare`.
pub fn parse_associations(text: &str) -> Result<Vec<Assoc>, String> {
    let what = "sacctmgr show associations";
    let mut out = Vec::new();
    for (line, f) in fields(text, 5, what)? {
        let fairshare = match f[4] {
            "" => Fairshare::Missing,
            "parent" => Fairshare::Parent,
            s => Fairshare::Shares(s.parse::<u32>().map_err(|_| {
                format!(
                    "{what}, line {line}: Fairshare `{}` is neither a whole number of shares (0 to 4294967295) nor `parent`",
                    tally_allocator::text::clip(s)
                )
            })?),
        };
        if f[1].is_empty() {
            return Err(format!("{what}, line {line}: an association without an account"));
        }
        out.push(Assoc { cluster: f[0].into(), account: f[1].into(), parent: f[2].into(), user: f[3].into(), fairshare, line });
    }
    Ok(out)
}

/// `sacctmgr -nP show user format=User,DefaultAccount`: (user, default
/// account), the account empty when the user has none.
pub fn parse_user_defaults(text: &str) -> Result<Vec<(String, String)>, String> {
    let what = "sacctmgr show user";
    let mut out = Vec::new();
    for (line, f) in fields(text, 2, what)? {
        if f[0].is_empty() {
            return Err(format!("{what}, line {line}: a user without a name"));
        }
        out.push((f[0].to_string(), f[1].to_string()));
    }
    Ok(out)
}

/// `sacct -a -X -n -P -o Account`, read line by line: jobs per account
/// (jobs without an account are not counted). At most
/// [`MAX_ASSOCIATIONS`] distinct accounts.
pub fn count_job_accounts(reader: impl BufRead) -> Result<BTreeMap<String, u64>, String> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for line in reader.lines() {
        let line = line.map_err(|e| format!("sacct: {e}"))?;
        let account = line.trim();
        if account.is_empty() {
            continue;
        }
        if account.contains('|') {
            return Err(format!("sacct: `{}` is not one account name (was -o Account asked for?)", tally_allocator::text::clip(account)));
        }
        if let Some(n) = out.get_mut(account) {
            *n += 1;
        } else if out.len() >= MAX_ASSOCIATIONS {
            return Err(format!("sacct lists more than {MAX_ASSOCIATIONS} distinct accounts: tally compares at most {MAX_ASSOCIATIONS}"));
        } else {
            out.insert(account.to_string(), 1);
        }
    }
    Ok(out)
}

/// `sinfo -h -N -o %N|%G`: the GPUs of the nodes (a node listed in several
/// partitions counted once), e.g. `n1|gpu:h100:8(S:0-1)`, `n2|gpu:4,shard:8`,
/// `n3|(null)`. With the number of nodes that have GPUs.
pub fn parse_sinfo_gpus(text: &str) -> Result<(u64, usize), String> {
    let what = "sinfo -N -o %N|%G";
    let mut nodes: BTreeMap<&str, u64> = BTreeMap::new();
    for (line, f) in fields(text, 2, what)? {
        let gpus = gres_gpus(f[1]).map_err(|e| format!("{what}, line {line}: {e}"))?;
        nodes.insert(f[0], gpus);
    }
    let with = nodes.values().filter(|&&g| g > 0).count();
    Ok((nodes.values().sum(), with))
}

/// The GPUs of one node's GRES (`gpu:h100:8(S:0-1),shard:8`, `gpu:4`, `(null)`).
fn gres_gpus(gres: &str) -> Result<u64, String> {
    let mut total = 0u64;
    let (mut depth, mut start) = (0i32, 0usize);
    let mut items = Vec::new();
    for (i, c) in gres.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&gres[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&gres[start..]);
    for item in items {
        let item = item.split('(').next().unwrap_or("").trim();
        let parts: Vec<&str> = item.split(':').collect();
        if parts[0] != "gpu" {
            continue;
        }
        let count = match parts.len() {
            2 | 3 => parts[parts.len() - 1],
            _ => return Err(format!("GRES `{}` is not gpu[:TYPE]:COUNT", tally_allocator::text::clip(item))),
        };
        let n = count.parse::<u64>().map_err(|_| format!("GRES `{}`: `{count}` is not a number of GPUs", tally_allocator::text::clip(item)))?;
        total = total.saturating_add(n);
    }
    Ok(total)
}

// ---- running the commands ----------------------------------------------------------------------

/// Run `cmd` and hand its standard output to `read` as it arrives (its
/// standard error gathered beside it, for the refusal). A command that is
/// missing or fails is the error, whatever `read` made of its output.
fn run_reading<T>(cmd: &[String], read: impl FnOnce(&mut dyn Read) -> Result<T, String>) -> Result<T, String> {
    let (tool, line) = (cmd[0].as_str(), cmd.join(" "));
    let mut child = Command::new(tool).args(&cmd[1..]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("{tool} not found on PATH: comparing with or importing from slurmdbd needs Slurm's client commands (run it where `{tool}` works, e.g. a login node)")
        } else {
            format!("{line}: cannot run: {e}")
        }
    })?;
    let said = child.stderr.take().map(|mut stderr| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = (&mut stderr).take(1 << 16).read_to_end(&mut text);
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
            String::from_utf8_lossy(&text).into_owned()
        })
    });
    let got = match child.stdout.take() {
        Some(mut out) => read(&mut out),
        None => Err(format!("{line}: no output pipe")),
    };
    let status = child.wait().map_err(|e| format!("{line}: {e}"))?;
    let err = said.and_then(|h| h.join().ok()).unwrap_or_default();
    if !status.success() {
        let err = err.trim();
        let err = if err.is_empty() { "no message" } else { err };
        return Err(format!("{line} failed ({status}): {err} (is slurmdbd up, and may this user read its accounts?)"));
    }
    got.map_err(|e| format!("{line}: {e}"))
}

/// Run `cmd` and return its standard output (at most [`MAX_OUTPUT_BYTES`], UTF-8).
fn run(cmd: &[String]) -> Result<String, String> {
    let what = format!("{}'s output", cmd[0]);
    run_reading(cmd, |out| {
        let mut bytes = Vec::new();
        Bounded::new(out, &what, MAX_OUTPUT_BYTES, true).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
        String::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))
    })
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// slurmdbd's associations (of `cluster` when given).
fn read_associations(cluster: Option<&str>) -> Result<Vec<Assoc>, String> {
    let mut cmd = words(&["sacctmgr", "-nP", "show", "associations", ASSOC_FORMAT]);
    if let Some(c) = cluster {
        cmd.push(format!("cluster={c}"));
    }
    parse_associations(&run(&cmd)?)
}

fn read_user_defaults() -> Result<Vec<(String, String)>, String> {
    parse_user_defaults(&run(&words(&["sacctmgr", "-nP", "show", "user", "format=User,DefaultAccount"]))?)
}

/// clap's parser of `--cluster`: a Slurm cluster name (1 to 64 of
/// `a-z A-Z 0-9 _ - .`), passed to sacctmgr and sacct as one word.
pub(crate) fn cluster_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("`{}` is not a cluster name (1 to 64 of a-z A-Z 0-9 _ - .)", tally_allocator::text::clip(s)))
    }
}

// ---- the tree slurmdbd has ----------------------------------------------------------------------

/// slurmdbd's account tree of one cluster: account → (parent, Fairshare),
/// root's parent empty; users' associations as (account, user, Fairshare).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DbdTree {
    pub cluster: String,
    pub accounts: BTreeMap<String, (String, Fairshare)>,
    pub users: Vec<(String, String, Fairshare)>,
}

/// The tree of one cluster from the associations: `cluster` when given,
/// else the only one they hold. Refuses an account listed with two
/// parents and a parent that is not listed.
pub fn dbd_tree(assocs: &[Assoc], cluster: Option<&str>) -> Result<DbdTree, String> {
    let clusters: BTreeSet<&str> = assocs.iter().map(|a| a.cluster.as_str()).collect();
    let cluster = match (cluster, clusters.len()) {
        (Some(c), _) if clusters.contains(c) => c.to_string(),
        (Some(c), 0) => return Err(format!("slurmdbd has no associations of cluster {c} (sacctmgr show associations cluster={c} lists none)")),
        (Some(c), _) => {
            return Err(format!("slurmdbd has no associations of cluster {c}; it has {}", clusters.into_iter().collect::<Vec<_>>().join(", ")))
        }
        (None, 0) => {
            return Err("slurmdbd has no associations (sacctmgr show associations lists none): add the cluster and its accounts first".into())
        }
        (None, 1) => clusters.iter().next().map(|c| c.to_string()).unwrap_or_default(),
        (None, _) => return Err(format!("slurmdbd holds clusters {}: give --cluster NAME", clusters.into_iter().collect::<Vec<_>>().join(", "))),
    };
    let mut tree = DbdTree { cluster: cluster.clone(), ..DbdTree::default() };
    for a in assocs.iter().filter(|a| a.cluster == cluster) {
        if !a.user.is_empty() {
            tree.users.push((a.account.clone(), a.user.clone(), a.fairshare));
            continue;
        }
        if a.account != ROOT && a.parent.is_empty() {
            return Err(format!("sacctmgr show associations, line {}: account {} has no parent (ParentName is empty)", a.line, a.account));
        }
        match tree.accounts.get(&a.account) {
            Some((p, _)) if *p != a.parent => {
                return Err(format!(
                    "sacctmgr show associations, line {}: account {} is listed under {} and under {}",
                    a.line, a.account, p, a.parent
                ));
            }
            Some(_) => {}
            None => {
                tree.accounts.insert(a.account.clone(), (a.parent.clone(), a.fairshare));
            }
        }
    }
    for (account, (parent, _)) in &tree.accounts {
        if account != ROOT && !tree.accounts.contains_key(parent) {
            return Err(format!("sacctmgr show associations: account {account}'s parent {parent} is not listed as an account of cluster {cluster}"));
        }
    }
    Ok(tree)
}

// ---- the import ---------------------------------------------------------------------------------

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut o = String::from('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if c.is_control() => o.push_str(&format!("\\u{:04X}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A TOML key: bare when it may be (no `.`: `my.team` would be a dotted key), else quoted.
fn toml_key(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')) {
        s.to_string()
    } else {
        toml_str(s)
    }
}

/// A share for tally.toml: rounded down to 3 decimals, so one parent's
/// children never add up to more than 100; a share that would round to 0
/// is written whole.
fn share_text(pct: f64) -> String {
    let floor = (pct * 1000.0).floor() / 1000.0;
    if floor > 0.0 {
        format!("{floor}")
    } else {
        format!("{pct}")
    }
}

/// What the import is given besides slurmdbd's tree.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportFacts {
    /// The cluster's GPUs, and where the number came from.
    pub gpus: u32,
    pub gpus_from: String,
    /// `sacctmgr show user`: (user, default account).
    pub defaults: Vec<(String, String)>,
}

/// An account's weight among its siblings.
fn weight(fs: Fairshare, mean: f64) -> f64 {
    match fs {
        Fairshare::Shares(n) => f64::from(n),
        Fairshare::Parent | Fairshare::Missing => mean,
    }
}

/// The tally.toml text of slurmdbd's tree: `[cluster]`, `[accounts]`
/// (each account's share: its Fairshare over its siblings' and its
/// parent's own users', in percent of the parent), `[users]` (each user's
/// default account, when the tree has it), with comments on what came
/// from where and what to review. Refuses names tally.toml cannot hold.
pub fn import_toml(tree: &DbdTree, facts: &ImportFacts) -> Result<String, String> {
    // Names first: every one that tally.toml cannot hold, and why.
    let mut bad: Vec<String> = Vec::new();
    for name in tree.accounts.keys().filter(|a| *a != ROOT) {
        if let Err(e) = check_account_name(name) {
            bad.push(format!("  account {}: {e}", tally_allocator::text::clip(name)));
        }
    }
    for (user, _) in &facts.defaults {
        if user.chars().count() > MAX_USER_LEN || user.chars().any(char::is_control) {
            bad.push(format!(
                "  user {}: a user name is 1 to {MAX_USER_LEN} characters, none of them a control character",
                tally_allocator::text::clip(user)
            ));
        }
    }
    if !bad.is_empty() {
        let n = bad.len();
        bad.truncate(20);
        return Err(format!(
            "slurmdbd's tree (cluster {}) has {n} name(s) tally.toml cannot hold; rename them in slurmdbd (sacctmgr) or write those accounts by hand:\n{}{}",
            tree.cluster,
            bad.join("\n"),
            if n > 20 { format!("\n  ... and {} more", n - 20) } else { String::new() }
        ));
    }

    // Children of each account, by name.
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, (parent, _)) in tree.accounts.iter().filter(|(a, _)| *a != ROOT) {
        children.entry(parent.as_str()).or_default().push(name.as_str());
    }
    let mut own_users: BTreeMap<&str, Vec<(&str, u32)>> = BTreeMap::new();
    for (account, user, fs) in &tree.users {
        if let (Fairshare::Shares(n), true) = (fs, account != ROOT) {
            if *n > 0 {
                own_users.entry(account.as_str()).or_default().push((user.as_str(), *n));
            }
        }
    }
    let n_accounts = tree.accounts.len().saturating_sub(usize::from(tree.accounts.contains_key(ROOT)));
    let users: Vec<&(String, String)> = facts.defaults.iter().filter(|(_, a)| a != ROOT && tree.accounts.contains_key(a)).collect();
    let skipped_users = facts.defaults.len() - users.len();

    let mut out = String::new();
    let w = |out: &mut String, s: &str| {
        out.push_str(s);
        out.push('\n');
    };
    w(&mut out, "# tally.toml imported from slurmdbd by `tally config import --from-sacctmgr`:");
    w(
        &mut out,
        &format!("# cluster {}, {n_accounts} accounts (sacctmgr show associations), {} users (sacctmgr show user).", tree.cluster, users.len()),
    );
    w(&mut out, "#");
    w(&mut out, "# Review before use:");
    w(&mut out, "# - [accounts]: the tree and parents are slurmdbd's; each share is the account's Fairshare over");
    w(&mut out, "#   the sum of its siblings' Fairshare (and of the parent's own users', whose jobs the parent");
    w(&mut out, "#   keeps), as a percentage of the parent (normalised: Slurm's Fairshare is relative, tally's");
    w(&mut out, "#   shares are percentages adding up to at most 100 per parent, rounded down to 3 decimals).");
    w(&mut out, "#   Fairshare=parent (or none) is an equal share: the mean Fairshare of the numbered siblings");
    w(&mut out, "#   (1 when none is numbered); Fairshare=0 is no budget (the account's jobs run unallocated).");
    w(&mut out, "#   A share here is a promise of GPU-hours over [ledger] window: check each one.");
    w(&mut out, &format!("# - [cluster] gpus = {}: {}.", facts.gpus, facts.gpus_from));
    w(&mut out, "# - [users]: each user's default account (read only for jobs without an account: with slurmdbd");
    w(&mut out, &format!("#   a job's own account decides); {skipped_users} user(s) whose default account is not in the tree left out."));
    w(&mut out, "# - Every other table is left out: Tally's defaults (window 7d, contracts up to 8h, missing");
    w(&mut out, "#   contract unallocated, ...; see docs/configuration.md or `man 5 tally.toml`).");
    w(&mut out, "# Check it with `tally config check FILE` and `tally config check FILE --against-slurmdbd`.");
    w(&mut out, "");
    w(&mut out, "[cluster]");
    w(&mut out, &format!("name = {}", toml_str(&tree.cluster)));
    w(&mut out, &format!("gpus = {}", facts.gpus));

    // Parents first, depth first, children by name.
    let mut stack: Vec<&str> = vec![ROOT];
    while let Some(parent) = stack.pop() {
        let Some(kids) = children.get(parent) else { continue };
        let numbered: Vec<f64> = kids
            .iter()
            .filter_map(|k| match tree.accounts.get(*k).map(|a| a.1) {
                Some(Fairshare::Shares(n)) if n > 0 => Some(f64::from(n)),
                _ => None,
            })
            .collect();
        let mean = if numbered.is_empty() { 1.0 } else { numbered.iter().sum::<f64>() / numbered.len() as f64 };
        let users_here = own_users.get(parent).cloned().unwrap_or_default();
        let users_fs: f64 = users_here.iter().map(|&(_, n)| f64::from(n)).sum();
        let total: f64 = kids.iter().map(|k| weight(tree.accounts.get(*k).map_or(Fairshare::Missing, |a| a.1), mean)).sum::<f64>() + users_fs;
        let terms: Vec<String> = kids
            .iter()
            .map(|k| match tree.accounts.get(*k).map(|a| a.1) {
                Some(Fairshare::Shares(n)) => format!("{k} {n}"),
                _ => format!("{k} parent={mean}"),
            })
            .collect();
        w(&mut out, "");
        let mut head = format!("# children of {parent}: Fairshare {}", terms.join(" + "));
        if !users_here.is_empty() {
            let names: Vec<&str> = users_here.iter().map(|u| u.0).collect();
            head.push_str(&format!(" + its own users {users_fs} ({})", tally_allocator::text::clip(&names.join(", "))));
        }
        head.push_str(&format!(" = {total}, as shares of 100%"));
        w(&mut out, &head);
        if !users_here.is_empty() && total > 0.0 {
            w(&mut out, &format!("# ({parent} keeps {}% for its own users' jobs)", share_text(100.0 * users_fs / total)));
        }
        for kid in kids {
            let fs = tree.accounts.get(*kid).map_or(Fairshare::Missing, |a| a.1);
            let wt = weight(fs, mean);
            w(&mut out, &format!("[accounts.{}]", toml_key(kid)));
            if parent != ROOT {
                w(&mut out, &format!("parent = {}", toml_str(parent)));
            }
            match fs {
                Fairshare::Parent => w(&mut out, "# Fairshare=parent in slurmdbd: an equal share (the siblings' mean Fairshare)"),
                Fairshare::Missing => w(&mut out, "# no Fairshare in slurmdbd: an equal share (the siblings' mean Fairshare)"),
                Fairshare::Shares(0) => w(&mut out, "# Fairshare=0 in slurmdbd: no budget (its jobs run unallocated)"),
                Fairshare::Shares(_) => {}
            }
            if wt > 0.0 && total > 0.0 {
                w(&mut out, &format!("share = {}", share_text(100.0 * wt / total)));
            }
        }
        // Depth first: the first child's subtree next.
        for kid in kids.iter().rev() {
            stack.push(kid);
        }
    }
    if !users.is_empty() {
        w(&mut out, "");
        w(&mut out, "[users]");
        for (user, account) in users {
            w(&mut out, &format!("{} = {}", toml_key(user), toml_str(account)));
        }
    }
    // What is written must load: check it as `tally config check` would.
    Config::parse(&out, "the imported tally.toml").map_err(|e| format!("the imported tree does not validate (a bug in tally's import):\n{e}"))?;
    Ok(out)
}

/// Write `text` to `path` atomically (a temporary file beside it, synced,
/// then moved in place); an existing `path` is refused unless `force`.
pub fn write_atomically(path: &Path, text: &str, force: bool) -> Result<(), String> {
    if !force && std::fs::symlink_metadata(path).is_ok() {
        return Err(format!("{}: exists: give --force to replace it", path.display()));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).ok_or_else(|| format!("{}: not a file name", path.display()))?;
    let tmp = dir.join(format!(".{name}.tally-import.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if force {
            std::fs::rename(&tmp, path)
        } else {
            // A link fails if the path appeared meanwhile: never replaced without --force.
            std::fs::hard_link(&tmp, path).and_then(|()| std::fs::remove_file(&tmp))
        }
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!("{}: exists: give --force to replace it", path.display())
        } else {
            format!("{}: cannot write: {e}", path.display())
        }
    })
}

/// `tally config import --from-sacctmgr [--cluster NAME] [--gpus N] [--out FILE [--force]]`.
pub fn import(cluster: Option<String>, gpus: Option<u32>, out: Option<PathBuf>, force: bool) -> Result<(), String> {
    let assocs = read_associations(cluster.as_deref())?;
    let tree = dbd_tree(&assocs, cluster.as_deref())?;
    let (gpus, gpus_from) = match gpus {
        Some(g) => (g, "given with --gpus".to_string()),
        None => {
            let text = run(&words(&["sinfo", "-h", "-N", "-o", "%N|%G"])).map_err(|e| format!("{e}\n(give --gpus N: the cluster's GPUs)"))?;
            let (n, nodes) = parse_sinfo_gpus(&text)?;
            match u32::try_from(n) {
                Ok(0) => return Err("sinfo shows no GPUs on any node: give --gpus N (the cluster's GPUs)".into()),
                Ok(g) if g <= tally_config::MAX_CLUSTER_GPUS => (g, format!("counted by sinfo ({g} GPUs on {nodes} nodes)")),
                _ => return Err(format!("sinfo counts {n} GPUs: {}", tally_config::too_many_gpus(n))),
            }
        }
    };
    let facts = ImportFacts { gpus, gpus_from, defaults: read_user_defaults()? };
    let text = import_toml(&tree, &facts)?;
    match out {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(path) => {
            write_atomically(&path, &text, force)?;
            eprintln!("{}: {} accounts of cluster {} from slurmdbd", path.display(), tree.accounts.len().saturating_sub(1), tree.cluster);
            Ok(())
        }
    }
}

// ---- the comparison -----------------------------------------------------------------------------

/// What slurmdbd says, for [`mismatches`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slurmdbd {
    pub tree: DbdTree,
    /// (user, default account).
    pub defaults: Vec<(String, String)>,
    /// Jobs per account over the window (sacct).
    pub job_accounts: BTreeMap<String, u64>,
}

/// What [`mismatches`] finds: one line each.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    /// What is wrong and what to do.
    pub mismatches: Vec<String>,
    /// Said, not wrong: jobs of the window under accounts neither the
    /// tree nor slurmdbd has any more (deleted since).
    pub notes: Vec<String>,
}

/// Each mismatch between the config's tree and slurmdbd, one line each,
/// what is wrong and what to do: jobs under accounts the tree lacks (and
/// slurmdbd has), tree accounts slurmdbd lacks, accounts under another
/// parent, users whose default account the tree lacks. `window`: the
/// window sacct was asked about, as written (`7d`).
pub fn mismatches(config: &Config, dbd: &Slurmdbd, window: &str) -> Found {
    let tree: &OrgTree = &config.tree;
    let parent_of =
        |name: &str| -> String { tree.id(name).and_then(|id| tree.node(id).parent).map_or(ROOT.to_string(), |p| tree.node(p).name.clone()) };
    let mut out = Vec::new();
    let mut deleted: Vec<(&String, &u64)> = Vec::new();
    for (account, jobs) in &dbd.job_accounts {
        if tree.contains(account) {
            continue;
        }
        if !dbd.tree.accounts.contains_key(account) {
            deleted.push((account, jobs));
            continue;
        }
        let parent = dbd.tree.accounts.get(account).map(|a| a.0.as_str()).filter(|p| !p.is_empty() && *p != ROOT);
        let toml = match parent {
            Some(p) => format!("[accounts.{}] parent = {} share = N", toml_key(account), toml_str(p)),
            None => format!("[accounts.{}] share = N", toml_key(account)),
        };
        out.push(format!(
            "job account not in tree: {account}: {jobs} job(s) in the last {window} (sacct) ran under an account tally.toml does not have (they run unallocated); add {toml} to tally.toml"
        ));
    }
    for (id, _) in tree.walk().into_iter().skip(1) {
        let name = &tree.node(id).name;
        let parent = parent_of(name);
        match dbd.tree.accounts.get(name) {
            None => out.push(format!(
                "tree account not in slurmdbd: {name}: tally.toml has it, slurmdbd (cluster {}) does not, so no job can be charged to it; sacctmgr -i add account {name} parent={parent} cluster={}, or remove [accounts.{}]",
                dbd.tree.cluster,
                dbd.tree.cluster,
                toml_key(name)
            )),
            Some((p, _)) if *p != parent => out.push(format!(
                "parent differs: {name}: tally.toml puts it under {parent}, slurmdbd under {p}; sacctmgr -i modify account {name} where cluster={} set parent={parent}, or parent = {} in [accounts.{}]",
                dbd.tree.cluster,
                toml_str(p),
                toml_key(name)
            )),
            Some(_) => {}
        }
    }
    for (user, account) in &dbd.defaults {
        if account.is_empty() || tree.contains(account) {
            continue;
        }
        out.push(format!(
            "default account not in tree: user {user}: default account {account} is not in tally.toml (the user's jobs without --account run unallocated); sacctmgr -i modify user {user} set defaultaccount=ACCOUNT (one of the tree), or add [accounts.{}] to tally.toml",
            toml_key(account)
        ));
    }
    let mut notes = Vec::new();
    if !deleted.is_empty() {
        // One line, however many: the most jobs first, at most MAX_NOTED named.
        const MAX_NOTED: usize = 20;
        let n = deleted.len();
        deleted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut names: Vec<String> = deleted.iter().take(MAX_NOTED).map(|(a, j)| format!("{a} ({j})")).collect();
        if n > MAX_NOTED {
            names.push(format!("and {} more", n - MAX_NOTED));
        }
        notes.push(format!(
            "note: {n} account(s) with jobs in the last {window} (sacct) are in neither tally.toml nor slurmdbd (deleted since; nothing to do): {}",
            names.join(", ")
        ));
    }
    Found { mismatches: out, notes }
}

/// `tally config check --against-slurmdbd`: read slurmdbd (associations,
/// users, the jobs of the config's window) and print each mismatch; an
/// error when there is one.
pub fn check_against(config: &Config, cluster: Option<&str>) -> Result<(), String> {
    let assocs = read_associations(cluster)?;
    let tree = dbd_tree(&assocs, cluster)?;
    let defaults = read_user_defaults()?;
    let window = format_duration(config.window_s);
    let mut cmd = words(&["sacct", "-a", "-X", "-n", "-P", "-o", "Account", "-E", "now"]);
    cmd.extend(["-S".to_string(), format!("now-{}", config.window_s)]);
    cmd.extend(["-M".to_string(), tree.cluster.clone()]);
    let job_accounts = run_reading(&cmd, |out| count_job_accounts(BufReader::new(Bounded::new(out, "sacct's output", MAX_SACCT_BYTES, true))))?;
    let dbd = Slurmdbd { tree, defaults, job_accounts };
    let found = mismatches(config, &dbd, &window);
    println!();
    println!(
        "slurmdbd (cluster {}): {} accounts, {} users, jobs under {} accounts in the last {window}",
        dbd.tree.cluster,
        dbd.tree.accounts.len().saturating_sub(1),
        dbd.defaults.len(),
        dbd.job_accounts.len()
    );
    for line in found.notes.iter().chain(&found.mismatches) {
        println!("{line}");
    }
    let found = found.mismatches;
    if found.is_empty() {
        println!("slurmdbd: OK (no mismatch)");
        Ok(())
    } else {
        Err(format!("{}: {} mismatch(es) with slurmdbd (above)", config.source, found.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_allocator::Budget;

    /// What the test bed's slurmdbd prints (Slurm 22.05), with a subtree of
    /// other Fairshare values.
    const ASSOCS: &str = "\
tally|root|||1
tally|root||root|1
tally|llm|root||40
tally|pretrain|llm||3
tally|evals|llm||parent
tally|evals||alice|1
tally|llm||carol|1
tally|llm||dave|parent
tally|vision|root||10
tally|vision||bob|1
tally|idle|root||0
";

    const USERS: &str = "alice|evals\nbob|vision\ncarol|llm\ndave|llm\nroot|root\nzed|gone\n";

    fn facts() -> ImportFacts {
        ImportFacts { gpus: 64, gpus_from: "given with --gpus".into(), defaults: parse_user_defaults(USERS).unwrap() }
    }

    #[test]
    fn associations_parse_and_bad_lines_are_named() {
        let a = parse_associations(ASSOCS).unwrap();
        assert_eq!(a.len(), 11);
        assert_eq!(
            a[2],
            Assoc {
                cluster: "tally".into(),
                account: "llm".into(),
                parent: "root".into(),
                user: "".into(),
                fairshare: Fairshare::Shares(40),
                line: 3
            }
        );
        assert_eq!(a[4].fairshare, Fairshare::Parent);
        assert_eq!(parse_associations("tally|a|root||\n").unwrap()[0].fairshare, Fairshare::Missing);
        let e = parse_associations("tally|root|||1\ntally|a|root|1\n").unwrap_err();
        assert!(e.contains("line 2: 4 fields where 5 were asked for"), "{e}");
        let e = parse_associations("tally|a|root||lots\n").unwrap_err();
        assert!(e.contains("line 1: Fairshare `lots` is neither"), "{e}");
        assert!(parse_associations("tally|a|root||4294967296\n").unwrap_err().contains("Fairshare"));
        assert!(parse_associations("tally||root||1\n").unwrap_err().contains("without an account"));
        assert_eq!(parse_associations("\n\n").unwrap(), vec![]);
    }

    #[test]
    fn too_many_associations_are_refused_with_the_bound() {
        let text = "tally|a|root||1\n".repeat(MAX_ASSOCIATIONS + 1);
        let e = parse_associations(&text).unwrap_err();
        assert!(e.contains("more than 100000 lines"), "{e}");
        assert!(parse_associations(&"tally|a|root||1\n".repeat(MAX_ASSOCIATIONS)).is_ok());
    }

    #[test]
    fn user_defaults_and_job_accounts_parse() {
        assert_eq!(parse_user_defaults("alice|evals\nnew|\n").unwrap(), vec![("alice".into(), "evals".into()), ("new".into(), "".into())]);
        assert!(parse_user_defaults("alice\n").unwrap_err().contains("1 fields where 2"));
        assert!(parse_user_defaults("|a\n").unwrap_err().contains("without a name"));
        let jobs = count_job_accounts("llm\nllm\n\nvision\n  \n".as_bytes()).unwrap();
        assert_eq!(jobs, BTreeMap::from([("llm".into(), 2), ("vision".into(), 1)]));
        assert!(count_job_accounts("llm|x\n".as_bytes()).unwrap_err().contains("not one account name"));
        let many: String = (0..=MAX_ASSOCIATIONS).map(|i| format!("a{i}\n")).collect();
        assert!(count_job_accounts(many.as_bytes()).unwrap_err().contains("more than 100000 distinct accounts"));
        // Bytes that are not UTF-8: an error, not a panic.
        assert!(count_job_accounts(&b"\xff\n"[..]).is_err());
    }

    #[test]
    fn sinfo_counts_each_nodes_gpus_once() {
        let text = "n1|gpu:h100:8(S:0-1)\nn2|gpu:b200:8\nn1|gpu:h100:8(S:0-1)\nn3|(null)\nn4|gpu:4,shard:8\nn5|gpu:a:2(S:0),gpu:b:2(S:1)\n";
        assert_eq!(parse_sinfo_gpus(text).unwrap(), (8 + 8 + 4 + 4, 4));
        assert!(parse_sinfo_gpus("n1|gpu:h100:x\n").unwrap_err().contains("line 1: GRES `gpu:h100:x`: `x` is not a number"));
        assert!(parse_sinfo_gpus("n1|gpu\n").unwrap_err().contains("is not gpu[:TYPE]:COUNT"));
        assert_eq!(parse_sinfo_gpus("").unwrap(), (0, 0));
    }

    #[test]
    fn one_cluster_is_chosen_or_asked_for() {
        let two = format!("{ASSOCS}other|root|||1\nother|x|root||1\n");
        let a = parse_associations(&two).unwrap();
        assert!(dbd_tree(&a, None).unwrap_err().contains("holds clusters other, tally: give --cluster NAME"));
        assert_eq!(dbd_tree(&a, Some("other")).unwrap().accounts.len(), 2);
        assert!(dbd_tree(&a, Some("nope")).unwrap_err().contains("no associations of cluster nope; it has other, tally"));
        assert!(dbd_tree(&[], None).unwrap_err().contains("no associations"));
        let orphan = parse_associations("c|root|||1\nc|a|b||1\n").unwrap();
        assert!(dbd_tree(&orphan, None).unwrap_err().contains("account a's parent b is not listed"));
        let twice = parse_associations("c|root|||1\nc|a|root||1\nc|b|root||1\nc|a|b||1\n").unwrap();
        assert!(dbd_tree(&twice, None).unwrap_err().contains("line 4: account a is listed under root and under b"));
        assert!(dbd_tree(&parse_associations("c|a|||1\n").unwrap(), None).unwrap_err().contains("account a has no parent"));
    }

    #[test]
    fn the_import_normalises_fairshare_into_shares_that_load() {
        let tree = dbd_tree(&parse_associations(ASSOCS).unwrap(), None).unwrap();
        let text = import_toml(&tree, &facts()).unwrap();
        let config = Config::parse(&text, "imported").unwrap();
        let t = &config.tree;
        let share = |n: &str| t.id(n).and_then(|id| t.node(id).budget);
        // root: llm 40 + vision 10 + idle 0 = 50.
        assert_eq!(share("llm"), Some(Budget::Share(80.0)));
        assert_eq!(share("vision"), Some(Budget::Share(20.0)));
        assert_eq!(share("idle"), None, "Fairshare=0: no budget\n{text}");
        // llm: pretrain 3 + evals parent (the mean: 3) + carol 1 = 7; dave (parent) does not count.
        assert_eq!(share("pretrain"), Some(Budget::Share(42.857)));
        assert_eq!(share("evals"), Some(Budget::Share(42.857)));
        assert_eq!(t.node(t.id("evals").unwrap()).parent, t.id("llm"));
        assert!(text.contains("# Fairshare=parent in slurmdbd: an equal share"), "{text}");
        assert!(text.contains("# children of llm: Fairshare evals parent=3 + pretrain 3 + its own users 1 (carol) = 7, as shares of 100%"), "{text}");
        assert!(text.contains("# (llm keeps 14.285% for its own users' jobs)"), "{text}");
        assert!(text.contains("# Fairshare=0 in slurmdbd: no budget"), "{text}");
        // Users: default accounts in the tree; root's and zed's (gone) left out.
        assert_eq!(config.users.get("alice").map(String::as_str), Some("evals"));
        assert_eq!(config.users.len(), 4, "{text}");
        assert!(text.contains("2 user(s) whose default account is not in the tree left out"), "{text}");
        assert_eq!(config.cluster.gpus, Some(64));
        assert_eq!(config.cluster.name.as_deref(), Some("tally"));
        // One block per parent, parents first.
        let at = |s: &str| text.find(s).unwrap();
        assert!(at("[accounts.llm]") < at("# children of llm") && at("[accounts.vision]") < at("[accounts.evals]"), "{text}");
    }

    #[test]
    fn thirds_and_tiny_shares_never_add_past_100() {
        let mut text = String::from("c|root|||1\nc|a|root||1\nc|b|root||1\nc|x|root||1\nc|tiny|root||1\nc|big|root||4000000000\n");
        text.push_str("c|dotted.name|root||1\n");
        let tree = dbd_tree(&parse_associations(&text).unwrap(), None).unwrap();
        let out = import_toml(&tree, &ImportFacts { defaults: vec![("weird user".into(), "a".into())], ..facts() }).unwrap();
        assert!(out.contains("[accounts.\"dotted.name\"]"), "{out}");
        assert!(out.contains("\"weird user\" = \"a\""), "{out}");
        let config = Config::parse(&out, "imported").unwrap();
        let t = &config.tree;
        assert!(matches!(t.node(t.id("tiny").unwrap()).budget, Some(Budget::Share(s)) if s > 0.0 && s < 0.001), "{out}");
        let equal = "c|root|||1\nc|a|root||1\nc|b|root||1\nc|x|root||1\n";
        let out = import_toml(&dbd_tree(&parse_associations(equal).unwrap(), None).unwrap(), &facts()).unwrap();
        assert_eq!(out.matches("share = 33.333\n").count(), 3, "{out}");
    }

    #[test]
    fn names_tally_cannot_hold_are_refused_each_with_why() {
        let text = "c|root|||1\nc|Team A|root||1\nc|ok|root||1\nc|we@b|ok||1\n";
        let tree = dbd_tree(&parse_associations(text).unwrap(), None).unwrap();
        let e = import_toml(&tree, &ImportFacts { defaults: vec![("bad\u{7}user".into(), "ok".into())], ..facts() }).unwrap_err();
        assert!(e.contains("has 3 name(s) tally.toml cannot hold"), "{e}");
        assert!(e.contains("account Team A: account name `Team A` is not valid"), "{e}");
        assert!(e.contains("account we@b:"), "{e}");
        assert!(e.contains("a user name is 1 to 256 characters"), "{e}");
        let upper = dbd_tree(&parse_associations("c|root|||1\nc|NLP|root||1\n").unwrap(), None).unwrap();
        assert!(import_toml(&upper, &facts()).unwrap_err().contains("write `nlp`"));
    }

    fn config(text: &str) -> Config {
        Config::parse(text, "tally.toml").unwrap()
    }

    #[test]
    fn each_kind_of_mismatch_has_its_line() {
        let tree = dbd_tree(&parse_associations(ASSOCS).unwrap(), None).unwrap();
        let imported = config(&import_toml(&tree, &facts()).unwrap());
        let job_accounts = BTreeMap::from([("llm".to_string(), 3u64), ("vision".to_string(), 1)]);
        let dbd = Slurmdbd { tree: tree.clone(), defaults: parse_user_defaults("alice|evals\nbob|vision\n").unwrap(), job_accounts };
        assert_eq!(mismatches(&imported, &dbd, "7d"), Found::default(), "the imported tree agrees with slurmdbd");

        let mut dbd = dbd;
        dbd.job_accounts.insert("x_orphan".into(), 2);
        dbd.tree.accounts.insert("x_orphan".into(), ("llm".into(), Fairshare::Shares(1)));
        dbd.defaults.push(("zed".into(), "x_orphan".into()));
        dbd.tree.accounts.insert("vision".into(), ("llm".into(), Fairshare::Shares(1)));
        let cfg = config("[cluster]\ngpus = 8\n[accounts.llm]\nshare = 50\n[accounts.pretrain]\nparent = \"llm\"\nshare = 50\n[accounts.evals]\nparent = \"llm\"\n[accounts.vision]\nshare = 10\n[accounts.idle]\n[accounts.ghost]\nparent = \"llm\"\n");
        dbd.job_accounts.insert("deleted".into(), 5);
        dbd.job_accounts.insert("old".into(), 9);
        let Found { mismatches: found, notes } = mismatches(&cfg, &dbd, "7d");
        assert_eq!(
            notes,
            vec!["note: 2 account(s) with jobs in the last 7d (sacct) are in neither tally.toml nor slurmdbd (deleted since; nothing to do): old (9), deleted (5)".to_string()]
        );
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(found[0].starts_with("job account not in tree: x_orphan: 2 job(s) in the last 7d (sacct)"), "{found:#?}");
        assert!(found[0].ends_with("add [accounts.x_orphan] parent = \"llm\" share = N to tally.toml"), "{found:#?}");
        assert!(found.contains(&"tree account not in slurmdbd: ghost: tally.toml has it, slurmdbd (cluster tally) does not, so no job can be charged to it; sacctmgr -i add account ghost parent=llm cluster=tally, or remove [accounts.ghost]".to_string()), "{found:#?}");
        assert!(found.iter().any(|l| l.starts_with("parent differs: vision: tally.toml puts it under root, slurmdbd under llm; sacctmgr -i modify account vision where cluster=tally set parent=root")), "{found:#?}");
        assert!(
            found.iter().any(|l| l.starts_with("default account not in tree: user zed: default account x_orphan is not in tally.toml")),
            "{found:#?}"
        );
    }

    #[test]
    fn an_existing_file_is_kept_unless_forced() {
        let dir = std::env::temp_dir().join(format!("tally-import-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tally.toml");
        write_atomically(&path, "a = 1\n", false).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a = 1\n");
        let e = write_atomically(&path, "b = 2\n", false).unwrap_err();
        assert!(e.ends_with("tally.toml: exists: give --force to replace it"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a = 1\n");
        write_atomically(&path, "b = 2\n", true).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "b = 2\n");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
        assert!(write_atomically(&dir.join("no/such/dir/x.toml"), "", false).unwrap_err().contains("cannot write"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_and_failing_commands_are_errors_not_panics() {
        let e = run(&words(&["tally-no-such-sacctmgr", "-nP"])).unwrap_err();
        assert!(e.starts_with("tally-no-such-sacctmgr not found on PATH"), "{e}");
        let e = run(&words(&["sh", "-c", "echo 'sacctmgr: error: Problem talking to the database' >&2; exit 1"])).unwrap_err();
        assert!(e.contains("failed (exit status: 1): sacctmgr: error: Problem talking to the database"), "{e}");
        assert_eq!(run(&words(&["echo", "tally|root|||1"])).unwrap(), "tally|root|||1\n");
    }

    #[test]
    fn cluster_names_are_one_word() {
        assert_eq!(cluster_name("tally"), Ok("tally".into()));
        assert!(cluster_name("a b").is_err());
        assert!(cluster_name("a,b").is_err());
        assert!(cluster_name("").is_err());
    }
}
