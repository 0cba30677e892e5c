//! `tally demo`: the rules at work on a config, without Slurm.
//!
//! A synthetic week: each team used a fixed multiple of its allocation
//! (listed below, deterministic), then a queue of jobs is ordered and a
//! debug job looks for victims.

use std::path::PathBuf;
use tally_allocator::*;

/// Usage in the past week as a multiple of each team's allocation, in team
/// order (cycled).
const USAGE_FACTORS: [f64; 7] = [1.35, 0.55, 1.0, 0.2, 0.85, 1.15, 0.0];
const H: u64 = 3600;
/// "Now": 2026-12-01 00:00 UTC, a bucket edge.
const NOW: u64 = 1_796_083_200;

pub fn run(config: Option<PathBuf>, gpus: Option<u32>) -> Result<(), String> {
    let (config, gpus) = crate::load(config, gpus)?;
    let alloc = config.allocation(gpus).map_err(|e| e.to_string())?;
    let tree = &config.tree;
    let mut ledger = config.new_ledger();

    // 1. A week of allocated usage, spread evenly over the window.
    let teams: Vec<usize> = tree.leaves().collect();
    let start = NOW - config.window_s;
    for (i, &id) in teams.iter().enumerate() {
        let gpu_hours = alloc.gpu_hours[id] * USAGE_FACTORS[i % USAGE_FACTORS.len()];
        let gpus_busy = (gpu_hours / alloc.capacity.window_hours()).round() as u32;
        let job = Job::new(i as u64, &tree.node(id).name, "demo").contract(H, false).gpus(gpus_busy);
        job.charge(tree, &mut ledger, start, NOW);
    }
    let fs = FairShare::compute(tree, &alloc, &ledger.usage(NOW));

    println!("== Fair share after a synthetic week on {gpus} GPUs ({}) ==", config.source);
    println!("usage/allocation ratio ascending, depth-first by level; rank 0 runs first\n");
    println!("{:>4}  {:<12} {:>10} {:>10} {:>7} {:>7}", "RANK", "ACCOUNT", "USED GPU-H", "ALLOC GPU-H", "RATIO", "FACTOR");
    for s in fs.ranked() {
        let ratio = match s.key.class {
            FundingClass::Funded => format!("{:.2}", s.key.ratio),
            _ => "-".to_string(),
        };
        println!(
            "{:>4}  {:<12} {:>10.0} {:>10.0} {:>7} {:>7.3}",
            s.rank, s.account, s.used_gpu_hours, s.allocated_gpu_hours, ratio, s.factor
        );
    }

    // 2. A queue: the most and least served teams, with and without contracts.
    let ranked: Vec<&Standing> = fs.ranked().filter(|s| tree.node(tree.id(&s.account).unwrap_or(0)).children.is_empty()).collect();
    let (best, worst) = match (ranked.first(), ranked.last()) {
        (Some(b), Some(w)) => (b.account.clone(), w.account.clone()),
        _ => return Err("the config has no teams".to_string()),
    };
    let rules = config.contracts;
    let queue = [
        (1, &worst, "contract=8h", 0, 3 * H),
        (2, &best, "contract=2h,resumable", 0, 10 * 60),
        (3, &best, "", 0, 5 * H),
        (4, &worst, "contract=30m", -100, 60),
        (5, &best, "contract=15m", 0, 30),
        (6, &worst, "", 0, 6 * H),
    ];
    let mut jobs = Vec::new();
    for (id, account, comment, nice, waited) in queue {
        let contract = rules.resolve(Some(comment)).map_err(|e| format!("demo job {id}: {e}"))?;
        let job = Job { contract, ..Job::new(id, account, "demo").submitted(NOW - waited).within_team(-nice) };
        jobs.push((job, comment));
    }
    jobs.sort_by_key(|(j, _)| std::cmp::Reverse(job_priority(j, &fs, &config.priority, NOW).value));
    println!("\n== Queue order (priority bits: tier | team | inside team | age) ==\n");
    println!("{:>3}  {:<12} {:<24} {:>5} {:>10}  {:<11} {:>4} {:>6} {:>4}", "JOB", "ACCOUNT", "COMMENT", "NICE", "PRIORITY", "TIER", "TEAM", "INSIDE", "AGE");
    for (j, comment) in &jobs {
        let p = job_priority(j, &fs, &config.priority, NOW);
        println!(
            "{:>3}  {:<12} {:<24} {:>5} {:>10}  {:<11} {:>4} {:>6} {:>4}",
            j.id,
            j.account,
            if comment.is_empty() { "(none)" } else { comment },
            -j.within_team,
            p.value,
            if p.allocated { "allocated" } else { "unallocated" },
            p.team,
            i64::from(p.inside) - 512,
            p.age
        );
    }

    // 3. A debug job of the most under-served team looks for GPUs.
    let debug = Job::new(100, &best, "demo").contract(15 * 60, false).gpus(2).submitted(NOW);
    let running = [
        Job::new(10, &worst, "demo").gpus(2).started(NOW - 3 * H),
        Job::new(11, &worst, "demo").contract(8 * H, false).gpus(2).started(NOW - H),
        Job::new(12, &worst, "demo").contract(H, true).gpus(2).started(NOW - 2 * H),
        Job::new(13, &worst, "demo").contract(H, false).gpus(2).started(NOW - 4 * H),
    ];
    println!("\n== Debug job {} of `{}` (2 GPUs, contract=15m) meets a full cluster ==\n", debug.id, best);
    for v in &running {
        let d = may_preempt(&debug, v, &fs, NOW);
        let why = match d {
            Decision::Yes(c) => format!("may preempt ({c:?})"),
            Decision::No(Refusal::InsideContract(left)) => format!("protected: {} of contract left", format_duration(left)),
            Decision::No(r) => format!("no ({r:?})"),
        };
        println!("  job {:>2} of {:<10} {:<24} -> {}", v.id, v.account, v.contract.canonical(), why);
    }
    let mut victims: Vec<Job> = running.iter().filter(|v| may_preempt(&debug, v, &fs, NOW).allowed()).cloned().collect();
    order_victims(&debug, &mut victims, &fs, NOW);
    println!("  victim order: {}", victims.iter().map(|v| v.id.to_string()).collect::<Vec<_>>().join(", "));
    Ok(())
}
