//! `tally demo`: the rules at work on a config, without Slurm.
//!
//! A synthetic week: each team used a fixed multiple of its allocation
//! (listed below, deterministic), then a queue of jobs is ordered and a
//! debug job looks for victims.

use crate::table::{Column, Table};
use std::iter::once;
use std::path::PathBuf;
use tally_allocator::*;

/// Usage in the past week as a multiple of each team's allocation, in team
/// order (cycled).
const USAGE_FACTORS: [f64; 7] = [1.35, 0.55, 1.0, 0.2, 0.85, 1.15, 0.0];
/// "Now": 2026-12-01 00:00 UTC, a bucket edge.
const NOW: u64 = 1_796_083_200;

pub fn run(config: Option<PathBuf>, gpus: Option<u32>) -> Result<(), String> {
    let (config, gpus) = crate::args::load(config, gpus)?;
    let alloc = config.allocation(gpus).map_err(|e| e.to_string())?;
    let tree = &config.tree;
    let mut ledger = config.new_ledger();
    let (l, r) = (Column::left, Column::right);

    // 1. A week of allocated usage, spread evenly over the window.
    let teams: Vec<usize> = tree.leaves().collect();
    let start = NOW - config.window_s;
    for (i, &id) in teams.iter().enumerate() {
        let gpu_hours = alloc.gpu_hours[id] * USAGE_FACTORS[i % USAGE_FACTORS.len()];
        let gpus_busy = (gpu_hours / alloc.capacity.window_hours()).round() as u32;
        let job = Job::new(i as u64, &tree.node(id).name, "demo").contract(HOUR_S, false).gpus(gpus_busy);
        job.charge(&tally_allocator::Funded::new(tree, &alloc), &mut ledger, start, NOW);
    }
    let fs = FairShare::compute(tree, &alloc, &ledger.usage(NOW));

    println!("== Fair share after a synthetic week on {gpus} GPUs ({}) ==", config.source);
    println!("usage/allocation ratio ascending, depth-first by level; rank 0 runs first\n");
    let mut table = Table::new([r(4), l(12).after("  "), r(10), r(10), r(7), r(7)]);
    table.row(["RANK", "ACCOUNT", "USED GPU-H", "ALLOC GPU-H", "RATIO", "FACTOR"]);
    for s in fs.ranked() {
        let ratio = match s.key.class {
            FundingClass::Funded => format!("{:.2}", s.key.ratio),
            _ => "-".to_string(),
        };
        let used = format!("{:.0}", s.used_gpu_hours);
        let allocated = format!("{:.0}", s.allocated_gpu_hours);
        table.row([s.rank.to_string(), s.account.clone(), used, allocated, ratio, format!("{:.3}", s.factor)]);
    }
    print!("{table}");

    // 2. Now: each team runs its multiple of its rate (one running job,
    // resumable, past its contract), and every team waits with more.
    let mut running = Vec::new();
    let mut load = Load::new(tree);
    for (i, &id) in teams.iter().enumerate() {
        let gpus_busy = (alloc.rate_gpus(id) * USAGE_FACTORS[i % USAGE_FACTORS.len()]).round() as u32;
        if gpus_busy > 0 {
            let job = Job::new(10 + i as u64, &tree.node(id).name, "demo").contract(HOUR_S, true).gpus(gpus_busy).started(NOW - 2 * HOUR_S);
            load.run(id, gpus_busy);
            running.push(job);
        }
        load.wait(id, 8);
    }
    let ent = Entitlement::compute(tree, &alloc, &load);
    let now_of = |acct: &str| ent.team(acct).expect("a team of the tree");
    let ranked: Vec<&Standing> = fs.ranked().filter(|s| tree.node(tree.id(&s.account).unwrap_or(0)).children.is_empty()).collect();
    let by_share = |a: &&Standing| now_of(&a.account).running / now_of(&a.account).rate.max(1e-9);
    let short = ranked.iter().min_by(|a, b| by_share(a).total_cmp(&by_share(b)));
    let over = ranked.iter().max_by(|a, b| by_share(a).total_cmp(&by_share(b)));
    let (short, over) = match (short, over) {
        (Some(s), Some(o)) => (s.account.clone(), o.account.clone()),
        _ => return Err("the config has no teams".to_string()),
    };
    println!("\n== Now: what each team runs against its rate ==\n");
    let mut table = Table::new([l(12), r(8), r(8), r(8), r(8)]);
    table.row(["TEAM", "RATE", "FAIR", "RUNNING", "SHORT"]);
    for s in &ranked {
        let t = now_of(&s.account);
        let cells = [format!("{:.1}", t.rate), format!("{:.1}", t.fair), format!("{:.0}", t.running), format!("{:.1}", t.short())];
        table.row(once(s.account.clone()).chain(cells));
    }
    print!("{table}");

    // 3. A queue of the most short and the most over-served team.
    let rules = config.contracts;
    let queue = [
        (1, &over, "contract=8h", 0, 3 * HOUR_S),
        (2, &short, "contract=2h,resumable", 0, 10 * MINUTE_S),
        (3, &short, "", 0, 5 * HOUR_S),
        (4, &over, "contract=30m", -100, 60),
        (5, &short, "contract=15m", 0, 30),
        (6, &over, "", 0, 6 * HOUR_S),
    ];
    let mut jobs = Vec::new();
    for (id, account, comment, nice, waited) in queue {
        let contract = rules.resolve(Some(comment)).map_err(|e| format!("demo job {id}: {e}"))?;
        let job = Job { contract, ..Job::new(id, account, "demo").gpus(4).submitted(NOW - waited).within_team(-nice) };
        jobs.push((job, comment));
    }
    // The priority plugin's walk: each job behind its team's allocated jobs
    // before it in the inside-team order.
    let waiting: Vec<&Job> = jobs.iter().map(|(j, _)| j).collect();
    let order = order_queue(&waiting, &fs, &ent, &config.priority);
    let mut prios: Vec<(Priority, &Job, &str)> = order.priorities.into_iter().zip(&jobs).map(|(p, (j, comment))| (p, j, *comment)).collect();
    prios.sort_by_key(|(p, j, _)| (std::cmp::Reverse(p.value), j.submit_s));
    println!("\n== Queue order (priority fields: tier | need | level | 7-day team | nice | quick) ==\n");
    let mut table = Table::new([r(3), l(12).after("  "), l(24), r(5), r(10), l(11).after("  "), r(4), r(5), r(4), r(6)]);
    table.row(["JOB", "ACCOUNT", "COMMENT", "NICE", "PRIORITY", "TIER", "NEED", "LEVEL", "TEAM", "NICE"]);
    for (p, j, comment) in &prios {
        let need = match p.need {
            priority::NEED_LANE => "lane",
            priority::NEED_OWED => "owed",
            priority::NEED_FAIR => "fair",
            _ => "-",
        };
        table.row([
            j.id.to_string(),
            j.account.to_string(),
            if comment.is_empty() { "(none)" } else { comment }.to_string(),
            (-j.within_team).to_string(),
            p.value.to_string(),
            if p.allocated { "allocated" } else { "unallocated" }.to_string(),
            need.to_string(),
            p.level.to_string(),
            p.team.to_string(),
            (i64::from(p.nice) + i64::from(priority::INSIDE_MIN)).to_string(),
        ]);
    }
    print!("{table}");

    // 4. A debug job of the most short team meets a full cluster.
    let debug = Job::new(100, &short, "demo").contract(15 * MINUTE_S, false).gpus(2).submitted(NOW);
    running.extend([
        Job::new(90, &over, "demo").gpus(2).started(NOW - 3 * HOUR_S),
        Job::new(91, &over, "demo").contract(8 * HOUR_S, false).gpus(2).started(NOW - HOUR_S),
        Job::new(92, &over, "demo").contract(HOUR_S, true).gpus(2).started(NOW - 2 * HOUR_S),
    ]);
    let m = Moment { ent: &ent, rules: &config.priority, contracts: &rules, now: NOW };
    println!("\n== Debug job {} of `{}` (2 GPUs, contract=15m) meets a full cluster ==\n", debug.id, short);
    let mut table = Table::new([r(2).after("job "), l(10).after(" of "), r(3), l(22).after(" GPUs "), l(0).after(" -> ")]).indent("  ");
    for v in &running {
        let why = match may_preempt(&debug, v, &m) {
            Decision::Yes(c) => format!("may preempt ({c:?})"),
            Decision::No(Refusal::InsideContract(left)) => format!("protected: {} of contract left", format_duration(left)),
            Decision::No(r) => format!("no: {}", crate::explain::refusal_words(&r, NOW)),
        };
        table.row([v.id.to_string(), v.account.to_string(), v.gpus.to_string(), v.contract.canonical(), why]);
    }
    print!("{table}");
    let victims = eligible_victims(&debug, &running, &m);
    println!("  victim order (cumulative): {}", victims.iter().map(|v| v.id.to_string()).collect::<Vec<_>>().join(", "));
    Ok(())
}
