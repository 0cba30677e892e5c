//! Property tests of the debug class's favours and their bounds: the lane
//! and cross-team time-slicing never reach beyond a team's debug allowance,
//! a debug job past its contract has no shield, and the debug capacity's
//! own rule takes only debug jobs past their contracts, on its nodes, for a
//! debug job within its allowance (docs/design.md, "What a team can reach
//! by reshaping its work").

mod common;
use common::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use tally_allocator::*;

/// Teams `t0`..`t{n}` with equal shares of `gpus` GPUs.
fn world(teams: usize, gpus: u32) -> World {
    let mut w = World::new(gpus);
    for t in 0..teams {
        w = w.share(&format!("t{t}"), None, 100.0 / teams as f64);
    }
    w
}

/// A job: (team, GPUs, running?, debug-shaped?, resumable?, minutes run).
type Spec = (usize, u32, bool, bool, bool, u64);

fn arb_specs(teams: usize) -> impl Strategy<Value = Vec<Spec>> {
    proptest::collection::vec(
        (0..teams, prop_oneof![Just(1u32), Just(2), Just(4), Just(8)], any::<bool>(), any::<bool>(), any::<bool>(), 0u64..600),
        4..40,
    )
}

/// Debug-shaped jobs get 1-2 GPUs and a 10-minute contract; the others a
/// 1-hour one; running jobs ran `minutes`.
fn jobs_of(specs: &[Spec]) -> Vec<Job> {
    specs
        .iter()
        .enumerate()
        .map(|(i, &(team, gpus, run, debug, resumable, minutes))| {
            let (gpus, contract) = if debug { (gpus.min(2), 600) } else { (gpus.max(4), HOUR_S) };
            let j = Job::new(i as u64, &format!("t{team}"), "u").gpus(gpus).contract(contract, resumable).time_limit(4 * HOUR_S).submitted(i as u64);
            if run {
                j.started(NOW - minutes * 60)
            } else {
                j
            }
        })
        .collect()
}

proptest! {
    /// The lane holds, per team, at most its allowance with its debug jobs
    /// running: the walk admits a debug job only while its GPUs fit.
    #[test]
    fn the_lane_never_reaches_beyond_the_allowance(teams in 2usize..6, gpus in 8u32..256, specs in arb_specs(5), pct in 0u32..30) {
        let w = world(teams, gpus);
        let specs: Vec<Spec> = specs.into_iter().map(|s| (s.0 % teams, s.1, s.2, s.3, s.4, s.5)).collect();
        let jobs = jobs_of(&specs);
        let rules = PriorityRules { debug_allowance_bp: pct * 100, ..PriorityRules::default() };
        let fs = w.fs();
        let ent = w.ent(&jobs);
        let waiting: Vec<&Job> = jobs.iter().filter(|j| j.start_s.is_none()).collect();
        let order = order_queue(&waiting, &fs, &ent, &rules);
        let mut lane: BTreeMap<&str, f64> = BTreeMap::new();
        for (j, p) in waiting.iter().zip(&order.priorities) {
            if p.need == priority::NEED_LANE {
                prop_assert!(rules.is_debug(j), "job {} in the lane is not a debug job", j.id);
                *lane.entry(&j.account).or_default() += f64::from(j.gpus);
            }
        }
        for (team, gpus_in_lane) in lane {
            let t = ent.team(team).expect("in the tree");
            let allowance = rules.debug_allowance(t.rate);
            prop_assert!(t.debug_running + gpus_in_lane <= allowance + 1e-9,
                "{team}: {} running + {} in the lane > its allowance {}", t.debug_running, gpus_in_lane, allowance);
        }
    }

    /// Across teams a debug job time-slices only within its allowance, and
    /// past its contract a debug job is a victim whether it checkpoints or
    /// not (no shield); no preemption inside a contract.
    #[test]
    fn time_slicing_across_teams_stays_within_the_allowance(teams in 2usize..5, gpus in 16u32..128, specs in arb_specs(4)) {
        let w = world(teams, gpus);
        let specs: Vec<Spec> = specs.into_iter().map(|s| (s.0 % teams, s.1, s.2, s.3, s.4, s.5)).collect();
        let jobs = jobs_of(&specs);
        let ent = w.ent(&jobs);
        let m = moment(&ent);
        let running: Vec<&Job> = jobs.iter().filter(|j| j.start_s.is_some()).collect();
        let pool = VictimPool::new(running.iter().map(|j| (j.id, *j)), &m);
        for p in jobs.iter().filter(|j| j.start_s.is_none()) {
            let room = ent.id(&p.account).map_or(0.0, |id| ent.debug_room(id, &RULES));
            for (v, why) in pool.for_preemptor_why(p, &m) {
                let v = jobs.iter().find(|j| j.id == v).expect("a job");
                prop_assert_eq!(v.contract_left_s(NOW), 0, "job {} taken inside its contract", v.id);
                if why == PreemptReason::TimeSlice && v.account != p.account {
                    prop_assert!(RULES.is_debug(p) && f64::from(p.gpus) <= room + 1e-9,
                        "job {} ({} GPUs, room {}) time-sliced {} of another team", p.id, p.gpus, room, v.id);
                }
            }
        }
        // No shield: a debug job past its contract that cannot checkpoint
        // is a victim for someone, as a resumable one is.
        for v in running.iter().filter(|v| RULES.is_debug(v) && v.contract_left_s(NOW) == 0) {
            prop_assert!(victim_rank(v, None, &m) >> 30 < 3, "debug job {} past its contract is no victim", v.id);
        }
    }

    /// On the debug capacity's nodes a debug job within its allowance takes
    /// debug jobs past their contracts of any team (and unallocated work),
    /// never anything else by that rule; elsewhere, and for any other
    /// preemptor, the nodes change nothing.
    #[test]
    fn the_debug_capacity_takes_only_debug_jobs_past_their_contracts(
        teams in 2usize..5, specs in arb_specs(4), debug_node in proptest::collection::vec(any::<bool>(), 8),
    ) {
        let w = world(teams, 64);
        let specs: Vec<Spec> = specs.into_iter().map(|s| (s.0 % teams, s.1, s.2, s.3, s.4, s.5)).collect();
        let jobs = jobs_of(&specs);
        let ent = w.ent(&jobs);
        let m = moment(&ent);
        // Running jobs placed round-robin on 8 nodes of 8 GPUs (a node may
        // be over-full here: the rule reads placements, not capacity).
        let running: Vec<&Job> = jobs.iter().filter(|j| j.start_s.is_some()).collect();
        let at: Vec<Vec<(u32, u32)>> = running.iter().enumerate().map(|(k, j)| vec![((k % 8) as u32, j.gpus)]).collect();
        let nodes = Nodes { size: vec![8; 8], free: vec![0; 8], debug: debug_node.clone() };
        let placed = VictimPool::placed(running.iter().zip(&at).map(|(j, a)| (j.id, *j, &a[..])), nodes.clone(), &m);
        for p in jobs.iter().filter(|j| j.start_s.is_none()) {
            let owner = RULES.is_debug(p) && ent.id(&p.account).is_some_and(|id| f64::from(p.gpus) <= ent.debug_room(id, &RULES) + 1e-9);
            for (v, _) in placed.for_preemptor_why(p, &m) {
                let k = running.iter().position(|j| j.id == v).expect("running");
                let v = running[k];
                // A victim the rule without nodes refuses is one the
                // capacity's rule took: a debug job past its contract, on a
                // node of the capacity, for a preemptor that owns it.
                if !may_preempt(p, v, &m).allowed() {
                    prop_assert!(owner && debug_node[k % 8] && RULES.is_debug(v) && v.contract_left_s(NOW) == 0,
                        "job {} took {} by the debug capacity's rule", p.id, v.id);
                }
            }
        }
    }
}

/// Each way of reshaping work toward a favoured treatment, and what the
/// rules give it: a team `a` at its rate (4 equal teams of 16 GPUs on 64,
/// a rate of 16 each: a debug allowance of 4 GPUs, two debug jobs), `b`
/// over its rate.
#[test]
fn each_gaming_route_gets_no_more_than_the_rule_allows() {
    let w = world(4, 64);
    let rules = PriorityRules::default();
    let debug = |id: u64, team: &str| Job::new(id, team, "u").gpus(2).contract(15 * 60, false);
    let long8 = |id: u64, team: &str, ran_h: u64| running(id, team, 8, 2 * HOUR_S, false, ran_h * HOUR_S);
    // a runs 16 (its rate) in two 8-GPU jobs; b runs 24; c and d 8 each, waiting.
    let base =
        vec![long8(1, "t0", 3), long8(2, "t0", 3), long8(3, "t1", 3), long8(4, "t1", 3), long8(5, "t1", 3), long8(6, "t2", 3), long8(7, "t3", 3)];
    let fs = w.fs();
    let lane = |jobs: &[Job], waiting: &[&Job]| -> Vec<bool> {
        let ent = w.ent(jobs);
        order_queue(waiting, &fs, &ent, &rules).priorities.iter().map(|p| p.need == priority::NEED_LANE).collect()
    };

    // 1. The debug lane: two debug jobs of a fit its allowance, a third
    //    waiting beside them does not (it queues as a's ordinary work).
    let (d1, d2, d3) = (debug(10, "t0"), debug(11, "t0").submitted(1), debug(12, "t0").submitted(2));
    let mut jobs = base.clone();
    jobs.extend([d1.clone(), d2.clone(), d3.clone()]);
    assert_eq!(lane(&jobs, &[&d1, &d2, &d3]), vec![true, true, false], "the allowance holds two 2-GPU debug jobs");
    // 2. Many users of one team share its allowance.
    let d4 = Job::new(13, "t0", "someone-else").gpus(2).contract(15 * 60, false).submitted(3);
    let mut jobs = base.clone();
    jobs.extend([d1.clone(), d2.clone(), d4.clone()]);
    assert_eq!(lane(&jobs, &[&d1, &d2, &d4]), vec![true, true, false], "per team, not per user");
    // 3. Debug jobs of a running (in or past their contracts) fill the
    //    allowance: no lane for the next one, however they started.
    let mut jobs = base.clone();
    jobs.extend([running(14, "t0", 2, 15 * 60, false, HOUR_S), running(15, "t0", 2, 15 * 60, false, 60)]);
    jobs.push(d1.clone());
    assert_eq!(lane(&jobs, &[&d1]), vec![false], "a's debug jobs running fill its allowance");

    // 4. Past its contract a debug job has no shield: not resumable, no
    //    time limit, requeued often before — still a victim of c's owed job.
    let mut jobs = base.clone();
    let piece = running(16, "t1", 2, 15 * 60, false, HOUR_S).restarts(5);
    jobs.push(piece.clone());
    let ent = w.ent(&jobs);
    let m = Moment { ent: &ent, rules: &rules, contracts: &CONTRACTS, now: NOW };
    let owed = Job::new(20, "t2", "u").gpus(2).contract(HOUR_S, false);
    assert!(may_preempt(&owed, &piece, &m).allowed(), "{:?}", may_preempt(&owed, &piece, &m));
    // …while b's 8-GPU job that cannot checkpoint (no time limit: a long
    // one) is never taken past its contract, 3 h into its run or 30 h.
    assert_eq!(may_preempt(&owed, &jobs[2], &m), Decision::No(Refusal::LongJob { ran_s: 3 * HOUR_S }));
    let later = Moment { now: NOW + 27 * HOUR_S, ..m };
    assert_eq!(may_preempt(&owed, &jobs[2], &later), Decision::No(Refusal::LongJob { ran_s: 30 * HOUR_S }));

    // 5. Time-slicing across teams only within the allowance: a's debug
    //    job may slice b's resumable job past its contract (b stays at or
    //    above its rate and above a's final share); with a debug job of a
    //    already running, not.
    let b_res = running(17, "t1", 2, HOUR_S, true, 2 * HOUR_S);
    let mut jobs = base.clone();
    jobs.push(b_res.clone());
    let ent = w.ent(&jobs);
    let m = moment(&ent);
    let slicer = debug(18, "t0").gpus(1);
    assert!(may_preempt(&slicer, &b_res, &m).allowed(), "{:?}", may_preempt(&slicer, &b_res, &m));
    jobs.extend([running(19, "t0", 2, 15 * 60, false, 10 * 60), running(20, "t0", 2, 15 * 60, false, 5 * 60)]);
    let ent = w.ent(&jobs);
    let m = moment(&ent);
    assert!(!may_preempt(&slicer, &b_res, &m).allowed(), "beyond its allowance a debug job is ordinary work");

    // 6. A quick job (a 10-minute limit) only goes first inside its team:
    //    it takes nothing of another team that a job of its team would not.
    let quick = Job::new(21, "t0", "u").gpus(1).contract(HOUR_S, false).time_limit(600);
    let ordinary = Job::new(22, "t0", "u").gpus(1).contract(HOUR_S, false);
    let ent = w.ent(&base.iter().cloned().chain([b_res.clone()]).collect::<Vec<_>>());
    let m = moment(&ent);
    assert_eq!(may_preempt(&quick, &b_res, &m).allowed(), may_preempt(&ordinary, &b_res, &m).allowed());

    // 7. A requeue of its own (scontrol requeue) buys no fresh contract;
    //    only the scheduler's preemption does.
    assert_eq!(protection_after(600, 300, Requeue::Other), 900);
    assert_eq!(protection_after(600, 300, Requeue::Preempted), 0);
}
