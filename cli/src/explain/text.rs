//! [`Report::text`]: the report for people, one function per section of
//! the output, in the order printed.

use super::words::{place_words, when};
use super::{Block, Report, Victim};
use crate::table::{Column, Table};
use std::fmt::{self, Write};
use tally_allocator::outlook::BackUnder;
use tally_allocator::priority::{NEED_FAIR, NEED_LANE, NEED_OWED};
use tally_allocator::{format_duration, Contract};
use tally_sim::forecast::Estimate;

/// One section of the text: it writes its lines (none where it does not apply).
type Section = fn(&mut String, &Report) -> fmt::Result;

impl Report {
    /// The job, its priority, its team and the tree above it, the outlook
    /// of its account, the jobs ahead of it, what blocks it, preemption,
    /// what it yields to and the start estimate, each where it applies.
    pub fn text(&self) -> String {
        const SECTIONS: [Section; 10] = [job, priority, team, levels, outlook, ahead, blocks, preemption, yields, forecast];
        let mut out = String::new();
        for section in SECTIONS {
            section(&mut out, self).expect("writing to a String does not fail");
        }
        out
    }
}

/// `Job 17  PENDING  user carol ...`: what it is, its state, its contract
/// and its tier.
fn job(out: &mut String, r: &Report) -> fmt::Result {
    let j = &r.job;
    writeln!(
        out,
        "Job {}  {}  user {}  account {}  {} GPUs{}  partition {}",
        j.name,
        j.state,
        j.user,
        if j.account.is_empty() { "-" } else { &j.account },
        j.gpus,
        if j.nodes > 1 { format!(" on {} nodes", j.nodes) } else { String::new() },
        j.partition.as_deref().unwrap_or("-")
    )?;
    if j.state == "PENDING" {
        writeln!(out, "  Slurm's reason: {}; submitted {}", j.reason, when(j.submit_s, r.now))?;
    } else if j.start_s > 0 {
        writeln!(out, "  running since {} on {}", when(j.start_s, r.now), j.node_list)?;
    }
    writeln!(
        out,
        "  contract: {}   time limit: {}",
        contract_text(&j.contract),
        j.time_limit_s.map_or("none (UNLIMITED)".to_string(), format_duration)
    )?;
    if j.contract_left_s > 0 {
        writeln!(out, "  protected by its contract until {}", when(r.now + j.contract_left_s, r.now))?;
    }
    match &j.unallocated_because {
        None => writeln!(out, "  tier: allocated (charged to its account, ordered before all unallocated work)"),
        Some(why) => writeln!(out, "  tier: unallocated: {why}"),
    }
}

/// Its priority, field by field, and Tally's value now when Slurm holds another.
fn priority(out: &mut String, r: &Report) -> fmt::Result {
    let j = &r.job;
    let d = &j.decoded;
    if j.priority == 0 {
        writeln!(out, "  priority: 0 (held)")?;
    } else {
        writeln!(
            out,
            "  priority {}: tier {}, plan {}, need {} ({}), level {}, team {} (7-day rank {}), nice {}, quick {}",
            j.priority,
            u8::from(d.allocated),
            u8::from(d.planned),
            d.need,
            need_name(d.need),
            d.level,
            d.team,
            1023 - d.team,
            -d.within_team,
            if d.quick { "yes" } else { "no" }
        )?;
    }
    if let Some(c) = j.computed {
        writeln!(out, "  (Tally computes {c} for it now; Slurm shows the last re-ranking's value, or an admin set it)")?;
    }
    Ok(())
}

/// `Team climate now`: the team's rate, use and need, and the job's place
/// in its line.
fn team(out: &mut String, r: &Report) -> fmt::Result {
    writeln!(out)?;
    match &r.team {
        Some(t) => {
            let n = &t.now;
            writeln!(out, "Team {} now", t.account)?;
            writeln!(
                out,
                "  rate {:.1} GPUs, running {:.0}, waiting {:.0}, owed {:.1}, short {:.1}, fair share {:.1}",
                n.rate,
                n.running,
                n.demand - n.running,
                n.owed,
                n.short(),
                n.fair
            )?;
            if let Some(p) = &t.place {
                writeln!(out, "  this job: {}", place_words(n, p))?;
            }
            Ok(())
        }
        None => {
            let account = if r.job.account.is_empty() { "-" } else { &r.job.account };
            writeln!(out, "Team {account}: not in the tree (its jobs run unallocated)")
        }
    }
}

/// The 7-day window of the account and each subtree above it, as a table.
fn levels(out: &mut String, r: &Report) -> fmt::Result {
    if r.levels.is_empty() {
        return Ok(());
    }
    let mut t = Table::new([Column::left(16), Column::right(10), Column::right(10), Column::right(10), Column::right(5)]).indent("  ");
    t.row(["7-day window", "UsedGPUh", "AllocGPUh", "Used/Alloc", "Rank"]);
    for l in &r.levels {
        let ratio = if l.allocated_gpu_hours > 0.0 { format!("{:.3}", l.used_gpu_hours / l.allocated_gpu_hours) } else { "-".to_string() };
        let name = if l.own { l.account.clone() } else { format!("{} (tree)", l.account) };
        // The root's own part holds no work: its rank says nothing.
        let rank = if l.account == tally_allocator::ROOT { "-".to_string() } else { l.rank.to_string() };
        t.row([name, format!("{:.1}", l.used_gpu_hours), format!("{:.1}", l.allocated_gpu_hours), ratio, rank]);
    }
    write!(out, "{t}")
}

/// Whether the account is within its allocation, else when it is back under.
fn outlook(out: &mut String, r: &Report) -> fmt::Result {
    let Some(o) = &r.outlook else { return Ok(()) };
    match o.back {
        BackUnder::Already => writeln!(
            out,
            "  {} is within its allocation over the window ({:.1} of {:.1} GPU-hours)",
            o.account, o.used_gpu_hours, o.allocated_gpu_hours
        ),
        BackUnder::At(t) => writeln!(
            out,
            "  {} is over its allocation ({:.1} of {:.1} GPU-hours); if it runs nothing more, it is back under at {}",
            o.account,
            o.used_gpu_hours,
            o.allocated_gpu_hours,
            when(t, r.now)
        ),
    }
}

/// `Ahead of it: ...`: the pending jobs Slurm considers first, the first
/// of them with why each is ahead.
fn ahead(out: &mut String, r: &Report) -> fmt::Result {
    let Some(a) = &r.ahead else { return Ok(()) };
    writeln!(out)?;
    writeln!(
        out,
        "Ahead of it: {} pending job{} ({} GPUs) that Slurm considers first in its partition (priority, then submit time, then job id)",
        a.count,
        if a.count == 1 { "" } else { "s" },
        a.gpus
    )?;
    if a.first.is_empty() {
        return Ok(());
    }
    let mut t = Table::new([Column::left(10), Column::left(8), Column::left(12), Column::right(4), Column::right(11), Column::left(0)]).indent("  ");
    t.row(["JOBID", "USER", "ACCOUNT", "GPUS", "PRIORITY", "AHEAD BECAUSE"]);
    for x in &a.first {
        t.row([x.name.clone(), x.user.clone(), x.account.clone(), x.gpus.to_string(), x.priority.to_string(), x.words.clone()]);
    }
    write!(out, "{t}")
}

/// `What blocks it now`, a line per block.
fn blocks(out: &mut String, r: &Report) -> fmt::Result {
    if r.blocks.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "What blocks it now")?;
    for b in &r.blocks {
        writeln!(out, "  - {}", block_text(b, r.now))?;
    }
    Ok(())
}

/// `Preemption: ...`: whom it may preempt, who is protected and why, and
/// its next chance.
fn preemption(out: &mut String, r: &Report) -> fmt::Result {
    let Some(p) = &r.preemption else { return Ok(()) };
    let asked = r.job.gpus;
    writeln!(out)?;
    match &p.refused {
        Some(why) => writeln!(out, "Preemption: it may not preempt: {why}")?,
        None if p.candidates.is_empty() => writeln!(out, "Preemption: no running job may be preempted for it now")?,
        None => writeln!(
            out,
            "Preemption: it may preempt {} running job{} ({} GPUs; with the {} free: {} of the {} it asks for){}",
            p.candidates.len(),
            if p.candidates.len() == 1 { "" } else { "s" },
            p.candidate_gpus,
            p.free_gpus,
            p.candidate_gpus + p.free_gpus,
            asked,
            if p.candidate_gpus + p.free_gpus >= asked { "; Slurm takes those on the nodes it picks" } else { ": not enough to start it" }
        )?,
    }
    let mut rows = Table::new([Column::left(10), Column::left(8), Column::left(12), Column::right(4), Column::left(0)]).indent("  ");
    if !p.candidates.is_empty() {
        victim_rows(&mut rows, ["candidate", "WHY IT MAY GO"], &p.candidates, p.candidates.len(), "");
    }
    if !p.protected.is_empty() {
        victim_rows(&mut rows, ["protected", "WHAT PROTECTS IT"], &p.protected, p.protected_count, " running jobs");
    }
    write!(out, "{rows}")?;
    if let Some(n) = &p.next {
        let ids: Vec<String> = n.victims.iter().map(u64::to_string).collect();
        writeln!(out, "  next chance: {}, when it may take {} (enough GPUs in count; nothing else changing)", when(n.at, r.now), ids.join(", "))?;
    }
    Ok(())
}

/// `Yields: ...`: a running job, from when and to which waiting jobs.
fn yields(out: &mut String, r: &Report) -> fmt::Result {
    let Some(y) = &r.yields else { return Ok(()) };
    writeln!(out)?;
    let from = if y.from > r.now { format!("once its contract ends, {}", when(y.from, r.now)) } else { "now (past its contract)".to_string() };
    if y.count == 0 {
        return writeln!(out, "Yields: {from}, to nothing waiting now{}", y.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default());
    }
    let loses = if y.loses_gpu_h > 0.0 {
        format!("; a requeue then throws away its run, {:.1} GPU-hours", y.loses_gpu_h)
    } else {
        "; it loses nothing (resumable)".to_string()
    };
    writeln!(out, "Yields: {from}, to {} waiting job{} as the queue stands{loses}", y.count, if y.count == 1 { "" } else { "s" })?;
    let mut rows = Table::new([Column::left(10), Column::left(8), Column::left(12), Column::right(4), Column::left(0)]).indent("  ");
    victim_rows(&mut rows, ["JOBID", "WHY IT MAY TAKE THESE GPUS"], &y.to, y.count, "");
    write!(out, "{rows}")
}

/// `Start estimate: ...`, and what the replay assumed.
fn forecast(out: &mut String, r: &Report) -> fmt::Result {
    let Some(f) = &r.forecast else { return Ok(()) };
    writeln!(out)?;
    let f = match f {
        Err(why) => return writeln!(out, "Start estimate: {why}"),
        Ok(f) => f,
    };
    match f.estimate {
        Estimate::StartsAt(t) => writeln!(out, "Start estimate: {}", when(t, r.now))?,
        Estimate::NotWithin { .. } => writeln!(out, "Start estimate: not within {}", format_duration(f.horizon_s))?,
        Estimate::NeverFits => writeln!(out, "Start estimate: never (it asks for more GPUs than its partition's usable nodes have)")?,
    }
    let defaulted = if f.defaulted > 0 {
        format!(
            "; {} job{} without a time limit counted as running {} (or to the end of their contract, if later)",
            f.defaulted,
            if f.defaulted == 1 { "" } else { "s" },
            format_duration(f.default_duration_s)
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "  a replay of the {} jobs of its partition under Tally's rules, assuming every job runs to its time limit and nothing new is submitted{defaulted}",
        f.jobs
    )
}

/// A head row (`[first column, last column]`), a row per job, and how many
/// more there were (`count` in all, `more` names them).
fn victim_rows(rows: &mut Table, head: [&str; 2], listed: &[Victim], count: usize, more: &str) {
    rows.row([head[0], "USER", "ACCOUNT", "GPUS", head[1]]);
    for v in listed {
        rows.row([v.id.to_string(), v.user.clone(), v.account.clone(), v.gpus.to_string(), v.why.clone()]);
    }
    if count > listed.len() {
        rows.text(format!("  … and {} more{more}", count - listed.len()));
    }
}

/// A need ([`tally_allocator::priority::Decoded::need`]) by name.
pub(super) fn need_name(need: u32) -> &'static str {
    match need {
        NEED_LANE => "debug lane",
        NEED_OWED => "owed now",
        NEED_FAIR => "below fair share",
        _ => "none",
    }
}

/// The contract its comment gives, or why it is refused.
fn contract_text(c: &Result<Contract, String>) -> String {
    match c {
        Ok(c) if c.is_allocated() => c.canonical(),
        Ok(_) => "contract=0 (unallocated)".to_string(),
        Err(e) => format!("refused: {e}"),
    }
}

/// What blocks it, in words (the JSON says the same).
pub(super) fn block_text(b: &Block, now: u64) -> String {
    match b {
        Block::LongJob { running, fair, short_team, short } => format!(
            "held by Tally (Slurm shows Reason=BeginTime): it cannot checkpoint and may run past the contract maximum, so it starts only on its team's fair share of what is asked now, or on GPUs no other team asks for; its team runs {running:.0} GPUs of its fair share {fair:.1} and {short_team} is {short:.1} GPUs short. Add `resumable` to the comment if it checkpoints, or ask for a --time within the contract maximum"
        ),
        Block::Held(r) => format!("held ({r}): `scontrol release` by its owner (or an admin for JobHeldAdmin)"),
        Block::Dependency(d) => format!("waits for a dependency: {d}"),
        Block::BeginTime(t) => format!("not eligible before its begin time {}", when(*t, now)),
        Block::Partition(r) => format!("its partition does not take jobs now ({r})"),
        Block::Reservation(r) => format!("a reservation: {r}"),
        Block::NoFreeGpus { free, asked } => format!("no free GPUs: {free} free in its partition, it asks for {asked}"),
        Block::Fragmented { free, largest, asked } => {
            format!("fragmentation: {free} GPUs free in total but at most {largest} on one node, and it needs {asked} on one node")
        }
        Block::TooFewNodes { nodes, per_node, have } => {
            format!("needs {nodes} nodes with {per_node} free GPUs each; {have} have them now")
        }
        Block::NeverFits { asked, partition_gpus } => {
            format!("it asks for {asked} GPUs and its partition's usable nodes have {partition_gpus}: it cannot start until nodes come back")
        }
        Block::Fits { free } => {
            format!("{free} GPUs are free where it fits: it starts at Slurm's next scheduling pass unless a job ahead takes them")
        }
        Block::Slurm(r) => format!("Slurm's reason: {r}"),
    }
}
