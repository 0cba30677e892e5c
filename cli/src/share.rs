//! `tally share`: the ledger's view, in sshare's idiom.
//!
//! Reads tally.toml and the ledger the plugin saves under
//! `StateSaveLocation/tally/ledger.state` ([`crate::live`]), ranks exactly
//! as the plugin does (`Config::fair_share`), measures what every team is
//! owed now with the plugin's rule (`Entitlement` over the load the plugin
//! saved with the ledger), and reads owed and delivered over the window
//! from the owed book the plugin records tick by tick (`OwedBook::owed`,
//! the simulator's rule per bucket).
//!
//! Like sshare: the tree indented one space per level, fields chosen with
//! `-o name%width` (a negative width aligns left; a longer value is cut and
//! ends in `+`), `-l` for more, `-n` without the header, `-p`/`-P` for
//! `|`-separated output, `-a` with every user, `-A`/`-u` to pick accounts
//! and users; `--json` for programs, `--svg` for the chart of delivered
//! against owed per team per day.

use crate::live;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use tally_allocator::text::clip;
use tally_allocator::{format_duration, Budget, Entitlement, FairShare, Load, Owed, Snapshot, Standing, DAY_S, HOUR};
use tally_config::Config;

/// What a row can show. Each is one of sshare's fields or one of Tally's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Account,
    User,
    Budget,
    Rate,
    Alloc7d,
    Used7d,
    Ratio,
    Rank,
    FairShare,
    Running,
    Waiting,
    ShortNow,
    FairNow,
    Owed,
    Delivered,
    DelivPct,
    DelivWinPct,
    Unalloc,
}

/// (field, header, default width: negative = left-aligned, what it is).
const FIELDS: [(Field, &str, i32, &str); 18] = [
    (Field::Account, "Account", -20, "account, indented one space per level of the tree"),
    (Field::User, "User", 10, "user (user rows: -a, -u)"),
    (Field::Budget, "Budget", 10, "budget as configured: % of the parent, or GPU-hours per window (h)"),
    (Field::Rate, "Rate", 8, "allocation rate, GPUs (budget ÷ window)"),
    (Field::Alloc7d, "Alloc7d", 10, "allocated GPU-hours over the window (subtree)"),
    (Field::Used7d, "Used7d", 10, "allocated GPU-hours used over the window (subtree; a user row: the user's)"),
    (Field::Ratio, "Ratio", 8, "Used7d ÷ Alloc7d: what the 7-day rank sorts by"),
    (Field::Rank, "Rank", 5, "7-day rank of the cluster's accounts, 0 = most under-served (the queue's team order)"),
    (Field::FairShare, "FairShare", 10, "(n − rank) ÷ n, sprio's FAIRSHARE"),
    (Field::Running, "Running", 8, "allocated GPUs running (at the ledger's save)"),
    (Field::Waiting, "Waiting", 8, "allocated GPUs waiting, eligible"),
    (Field::ShortNow, "ShortNow", 8, "GPUs below what is owed now, min(rate, running + waiting) − running: such a team's jobs go first"),
    (Field::FairNow, "FairNow", 8, "the water-filled fair share now, GPUs (an idle sibling's rate shared)"),
    (Field::Owed, "Owed", 10, "GPU-hours owed over the window: per hour, min(rate, what was asked)"),
    (Field::Delivered, "Delivered", 10, "allocated GPU-hours that ran over the window"),
    (Field::DelivPct, "Deliv%", 7, "delivered up to what was owed, hour by hour, ÷ owed (the strict figure)"),
    (
        Field::DelivWinPct,
        "DelivWin%",
        9,
        "delivered up to what was owed over the whole window, min(Delivered, Owed) ÷ Owed (a parent sums each account's below it)",
    ),
    (Field::Unalloc, "Unalloc", 10, "unallocated GPU-hours that ran (contract 0): never charged"),
];

const DEFAULT: &str = "Account,User,Budget,Used7d,Ratio,Rank,ShortNow,Owed,Delivered,Deliv%,DelivWin%";
const LONG: &str =
    "Account,User,Budget,Rate,Alloc7d,Used7d,Ratio,Rank,FairShare,Running,Waiting,ShortNow,FairNow,Owed,Delivered,Deliv%,DelivWin%,Unalloc";

/// A chosen field and its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Col {
    field: Field,
    name: &'static str,
    width: i32,
}

/// `-o` as sshare reads it: comma-separated names, each matched
/// case-insensitively by prefix (`acc` is Account), with an optional
/// `%width`.
fn columns(spec: &str) -> Result<Vec<Col>, String> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        // A field's whole name first (`Deliv%`), then `name%width` split at
        // the last `%` (`Deliv%%7`).
        let exact = FIELDS.iter().any(|(_, n, _, _)| n.eq_ignore_ascii_case(item));
        let (name, width) = match item.rsplit_once('%').filter(|_| !exact) {
            Some((n, w)) => {
                let w: i32 = w.trim().parse().ok().filter(|w: &i32| *w != 0 && w.abs() <= 1000).ok_or_else(|| {
                    format!("format `{}`: the width after % must be a whole number from 1 to 1000 (negative: aligned left)", clip(item))
                })?;
                (n.trim(), Some(w))
            }
            None => (item, None),
        };
        let found = FIELDS.iter().find(|(_, n, _, _)| n.len() >= name.len() && n[..name.len()].eq_ignore_ascii_case(name));
        let Some(&(field, n, w, _)) = found.filter(|_| !name.is_empty()) else {
            return Err(format!("invalid field requested: \"{}\"; valid fields: {}", clip(name), field_names()));
        };
        out.push(Col { field, name: n, width: width.unwrap_or(w) });
    }
    if out.is_empty() {
        return Err(format!("--format names no field; valid fields: {}", field_names()));
    }
    Ok(out)
}

fn field_names() -> String {
    FIELDS.iter().map(|f| f.1).collect::<Vec<_>>().join(", ")
}

/// `--helpformat`: every field and what it is (and, when `config` has
/// `[cluster.gpu_types]`, the unit of its figures).
pub fn help_format(config: Option<&Config>) -> String {
    let mut s = String::new();
    for (_, name, _, what) in FIELDS {
        s.push_str(&format!("{name:<10} {what}\n"));
    }
    if let Some(note) = config.and_then(units_note) {
        s.push_str(&format!("\n{note}\n"));
    }
    s
}

/// With `[cluster.gpu_types]`: what GPUs and GPU-hours mean in the report.
fn units_note(config: &Config) -> Option<String> {
    if config.cluster.gpu_types.is_empty() {
        return None;
    }
    let weights: Vec<String> = config.cluster.gpu_types.iter().map(|(t, ty)| format!("{t} {}", ty.weight)).collect();
    Some(format!(
        "GPU types ({} [cluster.gpu_types]: {}; untyped 1): every GPU and GPU-hour figure is in budget units, GPUs x the weight of their type",
        config.source,
        weights.join(", ")
    ))
}

/// One row's values; `None` prints as an empty cell (sshare's way).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Row {
    pub(crate) account: String,
    pub(crate) depth: usize,
    pub(crate) user: Option<String>,
    pub(crate) budget: Option<String>,
    pub(crate) rate: Option<f64>,
    pub(crate) alloc: Option<f64>,
    pub(crate) used: Option<f64>,
    pub(crate) ratio: Option<f64>,
    pub(crate) rank: Option<u32>,
    pub(crate) fair_share: Option<f64>,
    pub(crate) running: Option<f64>,
    pub(crate) waiting: Option<f64>,
    pub(crate) short: Option<f64>,
    pub(crate) fair_now: Option<f64>,
    pub(crate) owed: Option<Owed>,
    /// Σ over the subtree's accounts of min(delivered, owed) over the
    /// window (`Delivery::window_credited_gpu_hours`): an over-served
    /// account makes up its own starved hours, not a sibling's.
    pub(crate) window_credited: Option<f64>,
}

impl Row {
    /// Delivered up to what was owed over the whole window ÷ owed:
    /// `window_credited ÷ owed` (`None` when nothing was owed).
    pub(crate) fn window_fraction(&self) -> Option<f64> {
        let owed = self.owed?.delivery.owed_gpu_hours;
        (owed > 0.0).then(|| self.window_credited.unwrap_or(0.0) / owed)
    }

    /// The cell of `field`, as text (numbers as sshare writes them: fixed
    /// decimals, nothing for a missing value).
    fn cell(&self, field: Field, parsable: bool) -> String {
        let num = |v: Option<f64>, d: usize| v.map_or(String::new(), |v| format!("{v:.d$}"));
        // GPU-hours to a hundredth (36 GPU-seconds) in a table, to 3.6
        // GPU-seconds when parsed.
        let hours = if parsable { 3 } else { 2 };
        match field {
            Field::Account => {
                let indent = if self.user.is_some() { self.depth + 1 } else { self.depth };
                format!("{}{}", " ".repeat(indent), self.account)
            }
            Field::User => self.user.clone().unwrap_or_default(),
            Field::Budget => self.budget.clone().unwrap_or_default(),
            Field::Rate => num(self.rate, 2),
            Field::Alloc7d => num(self.alloc, 1),
            Field::Used7d => num(self.used, hours),
            Field::Ratio => num(self.ratio, 4),
            Field::Rank => self.rank.map_or(String::new(), |r| r.to_string()),
            Field::FairShare => num(self.fair_share, 6),
            Field::Running => num(self.running, 0),
            Field::Waiting => num(self.waiting, 0),
            Field::ShortNow => num(self.short, if parsable { 3 } else { 1 }),
            Field::FairNow => num(self.fair_now, 2),
            Field::Owed => num(self.owed.map(|o| o.delivery.owed_gpu_hours), hours),
            Field::Delivered => num(self.owed.map(|o| o.delivery.delivered_gpu_hours), hours),
            Field::DelivPct => num(self.owed.and_then(|o| o.delivery.ratio()).map(|r| 100.0 * r), 1),
            Field::DelivWinPct => num(self.window_fraction().map(|r| 100.0 * r), 1),
            Field::Unalloc => num(self.owed.map(|o| o.unallocated_gpu_hours), hours),
        }
    }

    pub(crate) fn json(&self) -> Value {
        let o = self.owed;
        json!({
            "account": self.account,
            "depth": self.depth,
            "user": self.user,
            "budget": self.budget,
            "rate_gpus": self.rate,
            "allocated_gpu_hours": self.alloc,
            "used_gpu_hours": self.used,
            "ratio": self.ratio,
            "rank": self.rank,
            "fair_share": self.fair_share,
            "running_gpus": self.running,
            "waiting_gpus": self.waiting,
            "short_now_gpus": self.short,
            "fair_now_gpus": self.fair_now,
            "owed_gpu_hours": o.map(|o| o.delivery.owed_gpu_hours),
            "delivered_gpu_hours": o.map(|o| o.delivery.delivered_gpu_hours),
            "credited_gpu_hours": o.map(|o| o.delivery.credited_gpu_hours),
            "delivered_fraction": o.and_then(|o| o.delivery.ratio()),
            "window_credited_gpu_hours": self.window_credited,
            "delivered_fraction_window": self.window_fraction(),
            "unallocated_gpu_hours": o.map(|o| o.unallocated_gpu_hours),
        })
    }
}

/// A budget as the file spells it.
fn budget(b: Option<&Budget>) -> Option<String> {
    match b? {
        Budget::Share(p) => Some(format!("{p}%")),
        Budget::GpuHours(h) => Some(format!("{h}h")),
    }
}

/// Output layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Table,
    /// `-p`: every field followed by `|`.
    Parsable,
    /// `-P`: fields separated by `|`.
    Parsable2,
    Json,
}

pub struct Args {
    pub config: Option<PathBuf>,
    pub state: Option<PathBuf>,
    pub all_users: bool,
    pub accounts: Option<String>,
    pub users: Option<String>,
    pub long: bool,
    pub format: Option<String>,
    pub noheader: bool,
    pub layout: Layout,
    pub svg: Option<PathBuf>,
}

/// Everything one report shows, computed from a config and a ledger at
/// `now` (pure: the golden tests build it from fixed ledgers).
pub(crate) struct Report {
    pub(crate) rows: Vec<Row>,
    /// Per leaf account: per day (Unix day), owed and delivered.
    pub(crate) days: Vec<(String, BTreeMap<u64, Owed>)>,
}

/// Which rows to show.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pick {
    /// Show user rows (all users unless `users` narrows them).
    user_rows: bool,
    users: Option<BTreeSet<String>>,
    /// Only these accounts and their subtrees.
    accounts: Option<BTreeSet<String>>,
    /// Only these accounts (and the path above them): a private view.
    visible: Option<BTreeSet<String>>,
}

pub(crate) fn report(config: &Config, snap: &Snapshot, now: u64, pick: &Pick) -> Result<Report, String> {
    let tree = &config.tree;
    // The capacity the plugin ranked with: with GPU types, the nodes' GPUs
    // per type it saved with the ledger.
    let alloc = config.allocation_with(config.ranking_gpus(), &snap.inventory).map_err(|e| e.to_string())?;
    let fs: FairShare = config.fair_share_with(&snap.ledger, now, &snap.inventory).map_err(|e| e.to_string())?;
    let typed = !config.cluster.gpu_types.is_empty();
    let mut load = Load::new(tree);
    for (account, &(running, waiting)) in &snap.load {
        if let Some(id) = tree.id(account) {
            if typed {
                // Budget units: weighted GPUs are not whole.
                load.run_units(id, running);
                load.wait_units(id, waiting);
            } else {
                load.run(id, running.round() as u32);
                load.wait(id, waiting.round() as u32);
            }
        }
    }
    let ent = Entitlement::compute(tree, &alloc, &load);
    let owed = snap.owed.owed(&snap.ledger, now);
    let users = snap.ledger.user_usage(now);

    // Subtree sums of the live columns, children before parents.
    let walk = tree.walk();
    let n = tree.len();
    let mut sub_owed = vec![Owed::default(); n];
    let mut sub_window = vec![0.0; n];
    let mut sub_now = vec![[0.0; 4]; n]; // running, waiting, short, fair
    for &(id, _) in walk.iter().rev() {
        let node = tree.node(id);
        if let Some(o) = owed.get(&node.name) {
            sub_owed[id].add(o);
            sub_window[id] += o.delivery.window_credited_gpu_hours();
        }
        let t = ent.team_at(id);
        for (x, v) in sub_now[id].iter_mut().zip([t.running, t.demand - t.running, t.short(), t.fair]) {
            *x += v;
        }
        if let Some(p) = node.parent {
            let (o, s) = (sub_owed[id], sub_now[id]);
            sub_owed[p].add(&o);
            sub_window[p] += sub_window[id];
            for (x, v) in sub_now[p].iter_mut().zip(s) {
                *x += v;
            }
        }
    }
    let in_subtree_of = |id: usize, set: &BTreeSet<String>| tree.path(id).iter().any(|n| set.contains(*n));
    let mut rows = Vec::new();
    for &(id, depth) in &walk {
        let node = tree.node(id);
        if let Some(a) = &pick.accounts {
            if !in_subtree_of(id, a) {
                continue;
            }
        }
        if let Some(v) = &pick.visible {
            // Your accounts, and the path above them for their place.
            let mine = v.contains(&node.name);
            let above = v.iter().filter_map(|a| tree.id(a)).any(|a| tree.path(a).contains(&node.name.as_str()));
            if !mine && !above {
                continue;
            }
        }
        let Some(s): Option<&Standing> = fs.standing(&node.name) else { continue };
        let [running, waiting, short, fair] = sub_now[id];
        let live = running > 0.0 || waiting > 0.0;
        let o = sub_owed[id];
        let touched = o != Owed::default();
        rows.push(Row {
            account: node.name.clone(),
            depth,
            user: None,
            budget: budget(node.budget.as_ref()),
            rate: Some(alloc.rate_gpus(id)),
            alloc: Some(s.subtree_allocated_gpu_hours),
            used: Some(s.subtree_used_gpu_hours),
            ratio: (s.subtree_allocated_gpu_hours > 0.0).then(|| s.subtree_used_gpu_hours / s.subtree_allocated_gpu_hours),
            rank: Some(s.rank),
            fair_share: Some(s.factor),
            running: Some(running),
            waiting: Some(waiting),
            short: Some(short),
            fair_now: live.then_some(fair),
            owed: touched.then_some(o),
            window_credited: touched.then_some(sub_window[id]),
        });
        if pick.user_rows || pick.users.is_some() {
            for (key, gs) in users.0.iter().filter(|(k, _)| *k.account == *node.name) {
                if pick.users.as_ref().is_some_and(|u| !u.contains(&*key.user)) {
                    continue;
                }
                rows.push(Row { account: node.name.clone(), depth, user: Some(key.user.to_string()), used: Some(gs / HOUR), ..Row::default() });
            }
        }
    }
    let shown: BTreeSet<&str> = rows.iter().map(|r| r.account.as_str()).collect();
    let by_day = snap.owed.owed_by(&snap.ledger, now, |t| t / DAY_S);
    let days = tree
        .leaves()
        .map(|id| tree.node(id).name.clone())
        .filter(|name| shown.contains(name.as_str()))
        .map(|name| {
            let per: BTreeMap<u64, Owed> = by_day.iter().filter_map(|(d, m)| m.get(&name).map(|o| (*d, *o))).collect();
            (name, per)
        })
        .filter(|(_, per)| per.values().any(|o| o.delivery.owed_gpu_hours > 0.0 || o.delivery.delivered_gpu_hours > 0.0))
        .collect();
    Ok(Report { rows, days })
}

/// A value in a column of `width` the way Slurm's print_fields does: cut to
/// the width with a `+` at its end, aligned right (left when negative).
fn fit(value: &str, width: i32) -> String {
    let w = width.unsigned_abs() as usize;
    let mut v: String = value.chars().take(w).collect();
    if value.chars().count() > w {
        v.pop();
        v.push('+');
    }
    if width < 0 {
        format!("{v:<w$}")
    } else {
        format!("{v:>w$}")
    }
}

/// The report as text, in `layout` with the chosen columns.
fn render(rows: &[Row], cols: &[Col], layout: Layout, header: bool) -> String {
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        match layout {
            Layout::Parsable => {
                for c in cells {
                    out.push_str(&c);
                    out.push('|');
                }
            }
            Layout::Parsable2 => out.push_str(&cells.join("|")),
            Layout::Table | Layout::Json => out.push_str(cells.join(" ").trim_end()),
        }
        out.push('\n');
    };
    let table = layout == Layout::Table;
    if header {
        // sshare right-aligns every header, dashes under each column.
        line(cols.iter().map(|c| if table { fit(c.name, c.width.abs()) } else { c.name.to_string() }).collect(), &mut out);
        if table {
            line(cols.iter().map(|c| "-".repeat(c.width.unsigned_abs() as usize)).collect(), &mut out);
        }
    }
    for r in rows {
        line(cols.iter().map(|c| if table { fit(&r.cell(c.field, false), c.width) } else { r.cell(c.field, true) }).collect(), &mut out);
    }
    out
}

fn list(s: &Option<String>) -> Option<BTreeSet<String>> {
    s.as_ref().map(|s| s.split(',').map(str::trim).filter(|x| !x.is_empty()).map(String::from).collect())
}

pub fn run(args: Args) -> Result<(), String> {
    let svg_file = args.svg.as_ref().filter(|p| p.as_os_str() != "-");
    let chosen = live::Chosen {
        config: args.config.clone(),
        state: args.state.clone(),
        others: if svg_file.is_some() { vec!["--svg FILE (--svg - writes to stdout)"] } else { vec![] },
    };
    let live::Live { config, state, private_for, .. } = live::open("share", chosen)?;
    let cols = columns(args.format.as_deref().unwrap_or(if args.long { LONG } else { DEFAULT }))?;
    let now = live::now();
    let snapshot = live::read_snapshot(&state, &config)?;
    let mut pick = Pick { user_rows: args.all_users, users: list(&args.users), accounts: list(&args.accounts), visible: None };
    if let Some(a) = &pick.accounts {
        if let Some(bad) = a.iter().find(|a| !config.tree.contains(a)) {
            return Err(format!("-A: no account `{}` in {}", clip(bad), config.source));
        }
    }
    if let Some(me) = private_for {
        let mine = live::accounts_of(&me, &config, &snapshot);
        eprintln!("showing the accounts of {me} only ([reports] private = true; an admin sees all)");
        pick.visible = Some(mine);
        // User rows, when asked for, are the caller's only.
        if args.all_users || args.users.is_some() {
            pick.users = Some(BTreeSet::from([me]));
        }
    }
    let rep = report(&config, &snapshot, now, &pick)?;
    if let Some(path) = &args.svg {
        let svg = crate::plot::owed_days(&format!("Delivered vs owed per team per day ({})", config.source), &rep.days);
        if svg_file.is_some() {
            std::fs::write(path, svg).map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
            eprintln!("wrote {} ({} teams)", path.display(), rep.days.len());
        } else {
            // The chart alone on stdout, for a redirect or a pipe.
            print!("{svg}");
            return Ok(());
        }
    }
    match args.layout {
        Layout::Json => {
            let mut out = json!({
                "now": now,
                "saved_at": snapshot.saved_at,
                "window_s": config.window_s,
                "gpus": config.ranking_gpus(),
                "ledger": state.display().to_string(),
                "rows": rep.rows.iter().map(Row::json).collect::<Vec<_>>(),
            });
            if let (Some(note), Value::Object(m)) = (units_note(&config), &mut out) {
                let gpus = config.ranking_gpus();
                let typed = config.cluster.gpu_types.typed_gpus(&snapshot.inventory);
                let types: BTreeMap<String, Value> =
                    typed.iter().map(|(t, n)| (t.to_string(), json!({ "gpus": n, "weight": config.weight_of(Some(t)).get() }))).collect();
                m.insert("gpu_types".into(), json!(types));
                m.insert("capacity_units".into(), json!(config.capacity_with(gpus, &snapshot.inventory).units));
                m.insert("units".into(), json!(note));
            }
            println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
        }
        layout => {
            if layout == Layout::Table && !args.noheader {
                println!(
                    "Window {} ending now; ledger saved {} ago ({}); {} GPUs",
                    format_duration(config.window_s),
                    format_duration(now.saturating_sub(snapshot.saved_at)),
                    state.display(),
                    config.ranking_gpus()
                );
                if let Some(note) = units_note(&config) {
                    println!("{}: {note}", crate::check::typed_capacity(&config, config.ranking_gpus(), &snapshot.inventory));
                }
                println!();
            }
            print!("{}", render(&rep.rows, &cols, layout, !args.noheader));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_allocator::{Held, UsageKey, HOUR_S};

    const NOW: u64 = 1_796_083_200 + 10 * HOUR_S; // 10 h after a day's start

    const CONFIG: &str = r#"
[cluster]
gpus = 16
[accounts.research]
share = 75
[accounts.nlp]
parent = "research"
share = 50
[accounts.vision-and-robotics-long-name]
parent = "research"
share = 50
[accounts.ops]
gpu_hours = 336
"#;

    /// A fixed ledger on 16 GPUs: research 75% (12 GPUs), nlp and vision
    /// half of it each (6), ops 336 GPU-h a week (2). nlp asked 12 GPUs
    /// and ran 8 for 6 h (owed its rate, 6, each hour: 36 of 48 delivered
    /// count); vision asked 2 for 2 h and ran nothing the first hour (beside
    /// 4 unallocated GPUs) and 4 the second: 2 of its 4 owed credited hour
    /// by hour, all 4 over the window; ops nothing. Saved with a load: nlp 8
    /// running and 4 waiting, vision 2 running.
    fn fixture() -> (Config, Snapshot) {
        let config = Config::parse(CONFIG, "share.toml").unwrap();
        let mut snap = Snapshot::new(config.new_ledger());
        let alloc = config.allocation(16).unwrap();
        let rate = |a: &str| alloc.rate_gpus(config.tree.id(a).unwrap());
        snap.ledger.charge(&UsageKey::new("nlp", "alice"), 6, NOW - 6 * HOUR_S, NOW);
        snap.ledger.charge(&UsageKey::new("nlp", "bob"), 2, NOW - 6 * HOUR_S, NOW);
        snap.ledger.charge(&UsageKey::new("vision-and-robotics-long-name", "carol"), 4, NOW - HOUR_S, NOW);
        let held = |r, d, u| Held { rate_gpus: r, demand_gpus: d, unallocated_gpus: u };
        snap.owed.record(&"nlp".into(), held(rate("nlp"), 12.0, 0.0), NOW - 6 * HOUR_S, NOW);
        snap.owed.record(
            &"vision-and-robotics-long-name".into(),
            held(rate("vision-and-robotics-long-name"), 2.0, 4.0),
            NOW - 2 * HOUR_S,
            NOW - HOUR_S,
        );
        snap.owed.record(&"vision-and-robotics-long-name".into(), held(rate("vision-and-robotics-long-name"), 2.0, 0.0), NOW - HOUR_S, NOW);
        snap.owed.record(&"ops".into(), held(rate("ops"), 0.0, 0.0), NOW - 6 * HOUR_S, NOW);
        snap.load.insert("nlp".into(), (8.0, 4.0));
        snap.load.insert("vision-and-robotics-long-name".into(), (2.0, 0.0));
        snap.saved_at = NOW;
        (config, snap)
    }

    fn text(pick: &Pick, format: &str, layout: Layout) -> String {
        let (config, snap) = fixture();
        let rep = report(&config, &snap, NOW, pick).unwrap();
        render(&rep.rows, &columns(format).unwrap(), layout, true)
    }

    #[test]
    fn default_layout_is_golden() {
        let got = text(&Pick::default(), DEFAULT, Layout::Table);
        let want = "             Account       User     Budget     Used7d    Ratio  Rank ShortNow       Owed  Delivered  Deliv% DelivWin%
-------------------- ---------- ---------- ---------- -------- ----- -------- ---------- ---------- ------- ---------
root                                            52.00   0.0193     1      0.0      40.00      52.00    95.0     100.0
 ops                                  336h       0.00   0.0000     0      0.0
 research                              75%      52.00   0.0258     4      0.0      40.00      52.00    95.0     100.0
  nlp                                  50%      48.00   0.0476     3      0.0      36.00      48.00   100.0     100.0
  vision-and-roboti+                   50%       4.00   0.0040     2      0.0       4.00       4.00    50.0     100.0
";
        assert_eq!(got, want, "\n{got}");
    }

    #[test]
    fn long_parsable_with_users_is_golden() {
        let pick = Pick { user_rows: true, ..Pick::default() };
        let got = text(&pick, LONG, Layout::Parsable2);
        let want = "\
Account|User|Budget|Rate|Alloc7d|Used7d|Ratio|Rank|FairShare|Running|Waiting|ShortNow|FairNow|Owed|Delivered|Deliv%|DelivWin%|Unalloc
root|||16.00|2688.0|52.000|0.0193|1|0.800000|10|4|0.000|14.00|40.000|52.000|95.0|100.0|4.000
 ops||336h|2.00|336.0|0.000|0.0000|0|1.000000|0|0|0.000||||||
 research||75%|12.00|2016.0|52.000|0.0258|4|0.200000|10|4|0.000|14.00|40.000|52.000|95.0|100.0|4.000
  nlp||50%|6.00|1008.0|48.000|0.0476|3|0.400000|8|4|0.000|12.00|36.000|48.000|100.0|100.0|0.000
   nlp|alice||||36.000||||||||||||
   nlp|bob||||12.000||||||||||||
  vision-and-robotics-long-name||50%|6.00|1008.0|4.000|0.0040|2|0.600000|2|0|0.000|2.00|4.000|4.000|50.0|100.0|4.000
   vision-and-robotics-long-name|carol||||4.000||||||||||||
";
        assert_eq!(got, want, "\n{got}");
    }

    #[test]
    fn with_gpu_types_the_figures_are_budget_units() {
        // The fixture's cluster with 4 of its 16 GPUs B200s weighing 2.5:
        // 12 + 4 × 2.5 = 22 budget units (research 75% of them, ops its
        // fixed 336 GPU-hours = 2); nlp ran its 8 GPUs on B200s: 2.5 times
        // the units.
        let text = format!("{CONFIG}[cluster.gpu_types]\nb200 = 2.5\nh100 = 1\n");
        let config = Config::parse(&text, "share.toml").unwrap();
        let (_, plain) = fixture();
        let mut snap = Snapshot::new(config.new_ledger());
        snap.inventory.insert(Some("b200".into()), 4);
        snap.inventory.insert(Some("h100".into()), 12);
        for (b, key, gs) in plain.ledger.whole_entries() {
            snap.ledger.add_whole(b, key, if &*key.account == "nlp" { gs * 5 / 2 } else { gs });
        }
        snap.load.insert("nlp".into(), (8.0 * 2.5, 4.0));
        snap.saved_at = NOW;
        let rep = report(&config, &snap, NOW, &Pick::default()).unwrap();
        let got = render(&rep.rows, &columns("Account,Rate,Alloc7d,Used7d,Ratio,Rank,Running,Waiting").unwrap(), Layout::Parsable2, true);
        let want = "\
Account|Rate|Alloc7d|Used7d|Ratio|Rank|Running|Waiting
root|22.00|3696.0|124.000|0.0335|1|20|4
 ops|2.00|336.0|0.000|0.0000|0|0|0
 research|16.50|2772.0|124.000|0.0447|4|20|4
  nlp|8.25|1386.0|120.000|0.0866|3|20|4
  vision-and-robotics-long-name|8.25|1386.0|4.000|0.0029|2|0|0
";
        assert_eq!(got, want, "\n{got}");
        assert_eq!(
            units_note(&config).unwrap(),
            "GPU types (share.toml [cluster.gpu_types]: b200 2.5, h100 1; untyped 1): every GPU and GPU-hour figure is in budget units, GPUs x the weight of their type"
        );
        assert_eq!(crate::check::typed_capacity(&config, 16, &snap.inventory), "4 b200 x 2.5, 12 h100 x 1 = 22.0 budget units");
        assert!(help_format(Some(&config)).ends_with("GPUs x the weight of their type\n"));
        // Without the table: no note, the help as it always was.
        let (plain_config, _) = fixture();
        assert_eq!(units_note(&plain_config), None);
        assert_eq!(help_format(Some(&plain_config)), help_format(None));
    }

    #[test]
    fn fields_are_picked_like_sshare() {
        let cols = columns("acc%-8,user,deliv%%7,ShortN,deliv%").unwrap();
        assert_eq!(
            cols.iter().map(|c| (c.name, c.width)).collect::<Vec<_>>(),
            vec![("Account", -8), ("User", 10), ("Deliv%", 7), ("ShortNow", 8), ("Deliv%", 7)]
        );
        // The window figure by a prefix of its name, and with a width.
        let cols = columns("delivw,DelivWin%%12").unwrap();
        assert_eq!(cols.iter().map(|c| (c.name, c.width)).collect::<Vec<_>>(), vec![("DelivWin%", 9), ("DelivWin%", 12)]);
        assert!(columns("nope").unwrap_err().starts_with("invalid field requested: \"nope\"; valid fields: Account, User,"));
        assert!(columns("Owed%x").unwrap_err().contains("width after % must be a whole number"));
        assert!(columns(",").unwrap_err().contains("names no field"));
        // A value longer than its column is cut with `+`, like sshare's.
        assert_eq!(fit("vision-and-robotics", -8), "vision-+");
        assert_eq!(fit("42", 5), "   42");
        assert_eq!(fit("42", -5), "42   ");
    }

    #[test]
    fn picks_accounts_users_and_the_private_view() {
        let pick = Pick { accounts: Some(BTreeSet::from(["research".into()])), users: Some(BTreeSet::from(["bob".into()])), ..Pick::default() };
        let got = text(&pick, "Account,User,Used7d", Layout::Parsable);
        assert_eq!(got, "Account|User|Used7d|\n research||52.000|\n  nlp||48.000|\n   nlp|bob|12.000|\n  vision-and-robotics-long-name||4.000|\n");
        // A private view: your accounts and the path above them, nothing else.
        let pick = Pick { visible: Some(BTreeSet::from(["nlp".into()])), ..Pick::default() };
        let got = text(&pick, "Account", Layout::Parsable2);
        assert_eq!(got, "Account\nroot\n research\n  nlp\n");
    }

    #[test]
    fn json_round_trips_the_rows() {
        let (config, snap) = fixture();
        let rep = report(&config, &snap, NOW, &Pick::default()).unwrap();
        let v: Value = serde_json::from_str(&serde_json::to_string(&rep.rows.iter().map(Row::json).collect::<Vec<_>>()).unwrap()).unwrap();
        let nlp = v.as_array().unwrap().iter().find(|r| r["account"] == "nlp").unwrap();
        assert_eq!(nlp["owed_gpu_hours"], 36.0);
        assert_eq!(nlp["delivered_gpu_hours"], 48.0);
        assert_eq!(nlp["delivered_fraction"], 1.0);
        assert_eq!(nlp["delivered_fraction_window"], 1.0);
        // vision: starved the first hour, made up the second: half hour by
        // hour, all of it over the window; its parent sums its accounts'.
        let row = |a: &str| v.as_array().unwrap().iter().find(|r| r["account"] == a).unwrap().clone();
        let vision = row("vision-and-robotics-long-name");
        assert_eq!((vision["delivered_fraction"].as_f64(), vision["delivered_fraction_window"].as_f64()), (Some(0.5), Some(1.0)));
        let research = row("research");
        assert_eq!(research["credited_gpu_hours"], 38.0);
        assert_eq!(research["window_credited_gpu_hours"], 40.0);
        assert_eq!(row("ops")["delivered_fraction_window"], Value::Null);
        assert_eq!(nlp["running_gpus"], 8.0);
        // The parsable table says the same.
        let p = render(&rep.rows, &columns("Account,Owed,Delivered").unwrap(), Layout::Parsable2, false);
        assert!(p.lines().any(|l| l == "  nlp|36.000|48.000"), "{p}");
        // The chart's days: one day, nlp and vision.
        assert_eq!(rep.days.iter().map(|(n, d)| (n.as_str(), d.len())).collect::<Vec<_>>(), vec![("nlp", 1), ("vision-and-robotics-long-name", 1)]);
    }
}
