//! `cargo bench -p tally-planner --bench plan [--features highs]`: the
//! planner at the sizes — fast-mode time, value and utilisation,
//! side by side with FIFO with peak reservation (and, with `--features
//! highs`, full mode: time, value, proven bound, gap). Random scenarios from
//! a fixed seed; no assertions (speed is measured here, not in tests).

use std::time::Instant;
use tally_planner::time::HOUR_S;
use tally_planner::{fast, fifo, validate, PlanJob, Scenario, Service};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn scenario(gpus: u32, jobs: usize, steps: usize, seed: u64) -> Scenario {
    let mut r = Lcg(seed);
    let sizes = [1u32, 2, 4, 8, 8, 16];
    let jobs = (0..jobs)
        .map(|i| PlanJob {
            id: i as u64 + 1,
            gpus: sizes[r.pick(sizes.len() as u64) as usize].min(gpus),
            duration_steps: 1 + r.pick(steps as u64 / 2) as usize,
            priority: 1.0 + r.pick(10) as f64,
            arrival_step: r.pick(steps as u64 / 2) as usize,
            pinned: None,
        })
        .collect();
    let peak = gpus / 8;
    let demand: Vec<u32> = (0..steps)
        .map(|t| {
            let x = (t as f64 - steps as f64 / 2.0) / (steps as f64 / 6.0);
            (f64::from(peak) * (-x * x).exp()).round() as u32 + peak / 4
        })
        .collect();
    let services = vec![Service { name: "chat".into(), demand, swap_cap: (gpus / 32).max(1), weight: 10.0 }];
    Scenario { gpus, gpus_per_node: 8, steps, step_s: HOUR_S, decay: 0.97, penalty: 8.0, must_finish: true, jobs, services }
}

fn main() {
    println!(
        "{:<22} {:>12} {:>12} {:>10} {:>12} {:>10}",
        "size (GPUs/jobs/steps)", "fast (ms)", "fast value", "fast util", "fifo value", "fifo util"
    );
    for &(gpus, jobs, steps) in &[(64u32, 30usize, 24usize), (512, 300, 48), (1024, 1000, 48)] {
        let s = scenario(gpus, jobs, steps, 42);
        let runs = 20;
        let mut best = f64::MAX;
        let mut plan = None;
        for _ in 0..runs {
            let t = Instant::now();
            let p = fast::plan(&s);
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
            plan = Some(p);
        }
        let score = validate(&s, plan.as_ref().expect("planned")).expect("valid fast plan");
        let base = validate(&s, &fifo::plan(&s)).expect("valid fifo plan");
        println!(
            "{:<22} {:>12.3} {:>12.0} {:>9.1}% {:>12.0} {:>9.1}%",
            format!("{gpus}/{jobs}/{steps}"),
            best,
            score.value,
            100.0 * score.utilisation,
            base.value,
            100.0 * base.utilisation
        );
        if gpus == 64 {
            // Ten times the search (`tally plan --effort 10`).
            let mut best10 = f64::MAX;
            let mut p10 = None;
            for _ in 0..runs {
                let t = Instant::now();
                p10 = Some(fast::plan_with_effort(&s, 10));
                best10 = best10.min(t.elapsed().as_secs_f64() * 1e3);
            }
            let v10 = validate(&s, p10.as_ref().expect("planned")).expect("valid fast plan").value;
            println!("{:<22} fast at effort 10: {best10:.3} ms, value {v10:.0}", "");
        }
        #[cfg(feature = "highs")]
        {
            use tally_planner::full;
            let t = Instant::now();
            match full::plan(&s, plan.as_ref().expect("planned"), &full::FullOptions::default()) {
                Ok(r) => println!(
                    "{:<22} full: {:.0} ms, value {:.0}, bound {:.0}, gap {:.2}%, fast is {:.2}% below the bound",
                    "",
                    t.elapsed().as_secs_f64() * 1e3,
                    r.objective,
                    r.bound,
                    100.0 * r.gap,
                    100.0 * (r.bound - score.value) / r.bound.abs().max(1e-9)
                ),
                Err(e) => println!("{:<22} full: {e}", ""),
            }
        }
    }
}
