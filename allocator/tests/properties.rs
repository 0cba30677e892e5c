//! Property tests: the ranking is a total order of accounts, more usage never
//! improves a rank, the priority order is exactly the documented
//! lexicographic order, and preemption never happens inside a contract and
//! never ping-pongs.

mod common;
use common::*;
use proptest::prelude::*;
use tally_allocator::*;

/// A random tree: account i's parent is an earlier account or root; shares
/// are weights normalised so siblings use at most 100%.
fn arb_world() -> impl Strategy<Value = World> {
    (2usize..12)
        .prop_flat_map(|n| {
            (
                proptest::collection::vec(any::<prop::sample::Index>(), n),
                proptest::collection::vec(prop_oneof![4 => 1u32..100, 1 => Just(0u32)], n),
                proptest::collection::vec(prop_oneof![2 => 0.0f64..2000.0, 1 => Just(0.0)], n),
                1u32..512,
            )
        })
        .prop_map(|(parents, weights, usage, gpus)| {
            let n = parents.len();
            let parent: Vec<Option<usize>> = (0..n).map(|i| if i == 0 { None } else { parents[i].index(i + 1).checked_sub(1) }).collect();
            let mut sums = vec![0u32; n + 1];
            for i in 0..n {
                sums[parent[i].map_or(n, |p| p)] += weights[i];
            }
            let mut w = World::new(gpus);
            for i in 0..n {
                let name = format!("acct{i:02}");
                let pname = parent[i].map(|p| format!("acct{p:02}"));
                let total = sums[parent[i].map_or(n, |p| p)];
                w = if weights[i] == 0 {
                    w.unfunded(&name, pname.as_deref())
                } else {
                    // Siblings get at most 100% (a tenth kept back sometimes).
                    let pct = 100.0 * f64::from(weights[i]) / f64::from(total.max(1)) * if total % 3 == 0 { 0.9 } else { 1.0 };
                    w.share(&name, pname.as_deref(), pct.clamp(0.001, 100.0))
                };
                if usage[i] > 0.0 {
                    w = w.used(&name, "u", usage[i]);
                }
            }
            w
        })
}

/// Jobs of a world: (account index, GPUs, running?, allocated?, within_team).
type JobSpec = (prop::sample::Index, u32, bool, bool, i32);

fn arb_jobs() -> impl Strategy<Value = Vec<JobSpec>> {
    proptest::collection::vec(
        (any::<prop::sample::Index>(), prop_oneof![Just(1u32), Just(2), Just(4), Just(8)], any::<bool>(), any::<bool>(), -200i32..200),
        2..24,
    )
}

fn build_jobs(w: &World, specs: &[JobSpec]) -> Vec<Job> {
    let mut accounts: Vec<String> = w.specs.iter().map(|s| s.name.clone()).collect();
    accounts.push("not-in-tree".to_string());
    specs
        .iter()
        .enumerate()
        .map(|(i, (acct, gpus, run, alloc, within))| {
            let j = Job::new(i as u64, acct.get(&accounts).as_str(), "u").gpus(*gpus).within_team(*within);
            let j = if *alloc { j.contract(HOUR_S, false) } else { j };
            if *run {
                j.started(NOW - 2 * HOUR_S)
            } else {
                j
            }
        })
        .collect()
}

proptest! {
    #[test]
    fn ranks_are_a_permutation(w in arb_world()) {
        let fs = w.fs();
        let mut ranks: Vec<u32> = fs.ranked().map(|s| s.rank).collect();
        ranks.sort();
        prop_assert_eq!(ranks, (0..w.tree().len() as u32).collect::<Vec<_>>());
        for s in fs.ranked() {
            prop_assert!(s.factor > 0.0 && s.factor <= 1.0);
        }
    }

    #[test]
    fn more_usage_never_raises_rank(w in arb_world(), pick in any::<prop::sample::Index>(), extra in 0.001f64..5000.0) {
        let names: Vec<String> = w.specs.iter().map(|s| s.name.clone()).collect();
        let who = pick.get(&names).clone();
        let before = w.fs().standing(&who).unwrap().rank;
        let after = w.used(&who, "u", extra).fs().standing(&who).unwrap().rank;
        prop_assert!(after >= before, "{} went from rank {} to {}", who, before, after);
    }

    /// The value's order is (tier, need, level, team rank, inside), with
    /// need and level computed here from the entitlement's figures, and
    /// two teams are never ordered by anything below the team field.
    #[test]
    fn priority_order_is_the_documented_lexicographic_order(w in arb_world(), specs in arb_jobs(), aheads in proptest::collection::vec(0u32..40, 24)) {
        let fs = w.fs();
        let jobs = build_jobs(&w, &specs);
        let ent = w.ent(&jobs);
        let pending: Vec<(&Job, f64)> = jobs.iter().filter(|j| j.start_s.is_none()).zip(aheads.iter()).map(|(j, &a)| (j, f64::from(a))).collect();
        let spec_key = |j: &Job, ahead: f64| {
            let allocated = j.is_allocated(&fs);
            let (need, level) = match ent.team(&j.account).filter(|_| allocated) {
                Some(t) => {
                    let x = t.running + ahead;
                    let level = |s: f64| 1023 - (1023.0 * s).floor() as u32;
                    if x < t.rate { (2, level(x / t.rate)) } else if x < t.fair { (1, level(x / t.fair)) } else { (0, 0) }
                }
                None => (0, 0),
            };
            let team_rank = fs.standing(&j.account).map_or(u32::MAX, |s| s.rank).min(1023);
            (allocated, need, level, std::cmp::Reverse(team_rank), j.within_team.clamp(-64, 63))
        };
        for &(a, ahead_a) in &pending {
            let pa = job_priority(a, fs.standing(&a.account), TeamLoad::behind(&ent, &a.account, ahead_a), &PriorityRules::default());
            prop_assert!(pa.value >= 1, "priority 0 means held");
            prop_assert_eq!(pa.sprio().total(), f64::from(pa.value));
            let ka = spec_key(a, ahead_a);
            for &(b, ahead_b) in &pending {
                let pb = job_priority(b, fs.standing(&b.account), TeamLoad::behind(&ent, &b.account, ahead_b), &PriorityRules::default());
                let kb = spec_key(b, ahead_b);
                // The floor max(1, …) merges the lowest value with the one above (documented).
                if pa.value > 1 || pb.value > 1 {
                    prop_assert_eq!(pa.value.cmp(&pb.value), ka.cmp(&kb), "jobs {} and {}", a.id, b.id);
                }
                // Never across teams: equal down to the team field means one team.
                if a.account != b.account && (ka.0, ka.1, ka.2) == (kb.0, kb.1, kb.2) && ka.3 != kb.3 {
                    prop_assert_eq!(pa.value.cmp(&pb.value), ka.3.cmp(&kb.3));
                }
            }
        }
    }

    #[test]
    fn preemption_never_inside_a_contract(
        contract in 1u64..28_800, ran in 0u64..40_000, resumable in any::<bool>(), restarts in 0u32..3,
        a_gpus in 0u32..64, b_gpus in 0u32..64, limit in prop::option::of(600u64..DAY_S), kind in 0u8..3,
    ) {
        let w = World::new(64).share("a", None, 50.0).share("b", None, 50.0);
        let mut v = Job::new(2, "a", "v").gpus(8).contract(contract, resumable).started(NOW - ran).restarts(restarts);
        v.time_limit_s = limit;
        let mut jobs = vec![v.clone(), running(3, "a", a_gpus, HOUR_S, true, HOUR_S), running(4, "b", b_gpus, HOUR_S, true, HOUR_S)];
        // A 4-GPU job of b, a debug job of b, or a debug job of a.
        let p = match kind {
            0 => Job::new(1, "b", "u").gpus(4).contract(HOUR_S, false),
            1 => Job::new(1, "b", "u").gpus(1).contract(600, false),
            _ => Job::new(1, "a", "u").gpus(1).contract(600, false),
        };
        jobs.push(p.clone());
        let ent = w.ent(&jobs);
        let d = may_preempt(&p, &v, &moment(&ent));
        if ran < contract {
            prop_assert_eq!(d, Decision::No(Refusal::InsideContract(contract - ran)));
        } else if !resumable {
            // The victim (8 GPUs: never a debug job) cannot checkpoint:
            // past its contract nobody takes it, whoever asks and however
            // often it was requeued before; a long one is named as such.
            let long = limit.is_none_or(|l| l > 8 * HOUR_S);
            let want = if long { Refusal::LongJob { ran_s: ran } } else { Refusal::NotResumable { ran_s: ran } };
            prop_assert_eq!(d, Decision::No(want));
        } else if kind == 0 {
            // b (rate 32) restores from a only if b is short and a keeps its
            // rate.
            let (a_run, b_run) = (f64::from(a_gpus + 8), f64::from(b_gpus));
            let ok = b_run < 32.0 && a_run - 8.0 >= 32.0 && (b_run + 4.0) <= a_run - 8.0;
            prop_assert_eq!(d.allowed(), ok, "{:?}", d);
        } else {
            let quick = limit.is_some_and(|l| l <= 30 * 60);
            if kind == 2 {
                // Its own team: a debug job takes any resumable job past its
                // contract that is not quick.
                prop_assert_eq!(d.allowed(), !quick, "{:?}", d);
            } else if !d.allowed() {
                // Another team's: refused only by a rule it cannot pass (the
                // victim's side would fall below its rate or keep less than
                // the debug job's side).
                prop_assert!(
                    matches!(d, Decision::No(Refusal::Reclaim(ReclaimRefusal::VictimBelowRate { .. } | ReclaimRefusal::Outranked { .. }))),
                    "{:?}", d
                );
            }
        }
    }

    /// Preemption only (no job ends, none arrives), debug jobs among the
    /// preemptors: whatever subset of the eligible victims each preemptor
    /// takes, (1) no team that lost a job to another can take one back from
    /// it right after, nor a victim the job that took it; (2) no team is
    /// ever taken below its rate by another; (3) every restoration makes
    /// the potential of docs/design.md strictly smaller.
    #[test]
    fn preemption_never_ping_pongs(
        w in arb_world(), specs in arb_jobs(), picks in proptest::collection::vec(any::<prop::sample::Index>(), 64),
        subsets in proptest::collection::vec(any::<u64>(), 64), debug in proptest::collection::vec(any::<bool>(), 24),
    ) {
        let fs = w.fs();
        let mut jobs = build_jobs(&w, &specs);
        // Some waiting jobs are debug jobs (1 GPU, a 10-minute contract),
        // victims in turn once they run past their contracts; every job has
        // a time limit within the contract maximum (no long job).
        for (j, &d) in jobs.iter_mut().zip(debug.iter().cycle()) {
            j.time_limit_s = Some(4 * HOUR_S);
            if d && j.start_s.is_none() && j.contract.is_allocated() {
                j.gpus = 1;
                j.contract = Contract::new(600, false);
            }
        }
        let mut steps = 0;
        for (pick, mask) in picks.iter().zip(subsets.iter()) {
            let ent = w.ent(&jobs);
            let m = moment(&ent);
            let waiting: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].start_s.is_none() && jobs[i].is_allocated(&fs)).collect();
            if waiting.is_empty() { break; }
            let p = waiting[pick.index(waiting.len())];
            let running: Vec<Job> = jobs.iter().filter(|j| j.start_s.is_some()).cloned().collect();
            let eligible: Vec<u64> = eligible_victims(&jobs[p], &running, &m).iter().filter(|v| v.is_allocated(&fs)).map(|v| v.id).collect();
            // Any non-empty subset of the eligible victims.
            let taken: Vec<u64> = eligible.iter().enumerate().filter(|(k, _)| mask >> (k % 64) & 1 == 1).map(|(_, &id)| id).collect();
            if taken.is_empty() { continue; }
            let before = ent.potential();
            let winner = jobs[p].account.clone();
            let restoring = !RULES.is_debug(&jobs[p]);
            let mut losers = Vec::new();
            for j in jobs.iter_mut().filter(|j| taken.contains(&j.id)) {
                let ran = NOW - j.start_s.expect("running");
                j.start_s = None;
                j.restarts += 1;
                j.earlier_run_s = protection_after(j.earlier_run_s, ran, Requeue::Preempted);
                losers.push((j.id, j.account.clone()));
            }
            jobs[p].start_s = Some(NOW);
            steps += 1;
            let ent = w.ent(&jobs);
            // (2) nobody else's preemptor takes a team below its rate.
            for (_, loser) in losers.iter().filter(|(_, l)| *l != winner) {
                let t = ent.team(loser).expect("in the tree");
                prop_assert!(t.running >= t.rate - 1e-6, "{} took {} below its rate: {:?}", winner, loser, t);
            }
            // (3) a restoration across teams strictly lowers the potential,
            // lexicographically, deepest depth first.
            if restoring && losers.iter().any(|(_, l)| *l != winner) {
                let after = ent.potential();
                let cmp = after.iter().zip(before.iter()).find(|(a, b)| (*a - *b).abs() > 1e-6).map(|(a, b)| a < b);
                prop_assert_eq!(cmp, Some(true), "potential {:?} -> {:?}", before, after);
            }
            // (1) later (every contract over), no loser team's waiting job
            // takes a running job of the winner's team, nor a victim the
            // job that took it.
            let later = Moment { now: NOW + 8 * HOUR_S, ..moment(&ent) };
            for (id, loser) in &losers {
                let victim = jobs.iter().find(|q| q.id == *id).expect("a job");
                let d = may_preempt(victim, &jobs[p], &later);
                prop_assert!(!d.allowed(), "{} took {} from {}, then it could take it back: {:?}", jobs[p].id, id, loser, d);
                if *loser == winner { continue; }
                for q in jobs.iter().filter(|q| q.start_s.is_none() && &q.account == loser) {
                    for v in jobs.iter().filter(|v| v.start_s.is_some() && v.account == winner) {
                        let d = may_preempt(q, v, &later);
                        prop_assert!(!(d.allowed() && v.is_allocated(&fs)), "{} took from {}, then {} could take {} back: {:?}", winner, loser, q.id, v.id, d);
                    }
                }
            }
        }
        prop_assert!(steps <= 64);
    }

    /// Once a walk finds a team settled, it stays settled and every later
    /// job of the team gets its settled priority: what lets a caller that
    /// kept those priorities stop walking the team there.
    #[test]
    fn a_settled_team_gives_every_later_job_its_settled_priority(w in arb_world(), specs in arb_jobs()) {
        let fs = w.fs();
        let jobs = build_jobs(&w, &specs);
        let ent = w.ent(&jobs);
        let rules = PriorityRules::default();
        let mut waiting: Vec<&Job> = jobs.iter().filter(|j| j.start_s.is_none()).collect();
        waiting.sort_by(|a, b| a.account.cmp(&b.account).then_with(|| inside_order(a, b, &rules)));
        let mut walk = QueueWalk::new(&fs, &ent, &rules);
        let mut settled_team: Option<&str> = None;
        for j in waiting {
            walk.enter(&j.account);
            let settled = walk.settled();
            prop_assert!(settled || settled_team != Some(&*j.account), "{} was settled, then not", j.account);
            if settled {
                settled_team = Some(&j.account);
            }
            let p = walk.next(j);
            if settled {
                prop_assert_eq!(p, settled_priority(j, fs.standing(&j.account), &ent, &rules), "job {}", j.id);
            }
        }
    }

    /// The in-place forms compute what the constructors do: the ranking,
    /// the entitlement and the window's usage, for the same tree or
    /// another one.
    #[test]
    fn updating_in_place_is_computing_anew(w in arb_world(), other in arb_world(), specs in arb_jobs(), pick in any::<prop::sample::Index>(), extra in 0.001f64..5000.0) {
        let names: Vec<String> = w.specs.iter().map(|s| s.name.clone()).collect();
        let later = w.clone().used(pick.get(&names).as_str(), "u", extra);
        for next in [&later, &other] {
            let mut fs = w.fs();
            fs.update(&next.tree(), &next.alloc(), &next.ledger.usage(next.now));
            prop_assert_eq!(fs, next.fs());
        }
        let jobs = build_jobs(&w, &specs);
        let mut ent = w.ent(&[]);
        ent.update(&w.tree(), &w.alloc(), &w.load(&jobs));
        prop_assert_eq!(&ent, &w.ent(&jobs));
        ent.update(&other.tree(), &other.alloc(), &Load::new(&other.tree()));
        prop_assert_eq!(ent, other.ent(&[]));
        let mut usage = later.ledger.usage(NOW + 8 * DAY_S);
        for now in [NOW, NOW + DAY_S, NOW + 8 * DAY_S, NOW] {
            later.ledger.usage_into(now, &mut usage);
            prop_assert_eq!(&usage, &later.ledger.usage(now));
        }
    }
}

/// GPU types (`allocator::gpu_types`): a table whose weights are all 1 is
/// no table, and GPUs that all weigh the same `w` (capacity and every
/// charge × `w`) change no rank, no priority and no preemption: the unit
/// is a scale, only the *relative* weights of types matter.
mod gpu_types {
    use super::*;

    fn weighted(jobs: &[Job], weights: &GpuWeights, types: &[Option<&str>]) -> Vec<Job> {
        jobs.iter().zip(types.iter().cycle()).map(|(j, t)| j.clone().weight(weights.of(*t))).collect()
    }

    /// (rank order, every waiting job's priority, every waiting job's victims).
    type Outcome = (Vec<(String, u32)>, Vec<u32>, Vec<Vec<u64>>);

    fn outcome(w: &World, jobs: &[Job]) -> Outcome {
        let fs = w.fs();
        let ent = w.ent(jobs);
        let ranks = fs.ranked().map(|s| (s.account.clone(), s.rank)).collect();
        let waiting: Vec<&Job> = jobs.iter().filter(|j| j.start_s.is_none()).collect();
        let order = order_queue(&waiting, &fs, &ent, &PriorityRules::default());
        let running: Vec<Job> = jobs.iter().filter(|j| j.start_s.is_some()).cloned().collect();
        let m = moment(&ent);
        let victims = waiting.iter().map(|p| eligible_victims(p, &running, &m).iter().map(|v| v.id).collect()).collect();
        (ranks, order.priorities.iter().map(|p| p.value).collect(), victims)
    }

    proptest! {
        #[test]
        fn weights_of_one_are_no_types(w in arb_world(), specs in arb_jobs()) {
            let jobs = build_jobs(&w, &specs);
            let ones = GpuWeights::new([("h100", 1.0, None), ("b200", 1.0, Some(8))]).unwrap();
            let typed = weighted(&jobs, &ones, &[Some("h100"), None, Some("b200"), Some("a100")]);
            prop_assert_eq!(outcome(&w, &jobs), outcome(&w, &typed));
        }

        #[test]
        fn one_weight_for_every_gpu_is_only_a_scale(w in arb_world(), specs in arb_jobs(), k in 1u32..4) {
            let jobs = build_jobs(&w, &specs);
            let scale = 1u32 << k; // exact in floating point
            let weights = GpuWeights::new([("b200", f64::from(scale), None)]).unwrap();
            let typed = weighted(&jobs, &weights, &[Some("b200")]);
            prop_assert_eq!(outcome(&w, &jobs), outcome(&w.scaled(scale), &typed));
        }
    }

    #[test]
    fn a_team_on_b200s_ranks_behind_a_team_that_ran_as_long_on_h100s() {
        // Two teams of 50% of 16 H100s and 8 B200s (16 + 8 × 2.2 units); each
        // ran an 8-GPU job for 10 h, alpha on B200s, beta on H100s.
        let weights = GpuWeights::new([("h100", 1.0, Some(16)), ("b200", 2.2, Some(8))]).unwrap();
        let mut w = World::new(24).share("alpha", None, 50.0).share("beta", None, 50.0);
        w.unit = weights.capacity_units(24, &Inventory::new()) / 24.0;
        let tree = w.tree();
        let alloc = w.alloc();
        let funded = Funded::new(&tree, &alloc);
        let a = Job::new(1, "alpha", "u").gpus(8).contract(HOUR_S, false).weight(weights.of(Some("b200")));
        let b = Job::new(2, "beta", "u").gpus(8).contract(HOUR_S, false).weight(weights.of(Some("h100")));
        assert!(a.charge(&funded, &mut w.ledger, NOW - 10 * HOUR_S, NOW));
        assert!(b.charge(&funded, &mut w.ledger, NOW - 10 * HOUR_S, NOW));
        let usage = w.ledger.usage(NOW);
        assert_eq!(usage.account_gpu_hours("alpha"), 8.0 * 10.0 * 2.2);
        assert_eq!(usage.account_gpu_hours("beta"), 8.0 * 10.0);
        assert_eq!(ranking(&w.fs()), vec!["beta", "alpha", "root"]);
        // Untyped, the same GPU-hours tie and the name decides: alpha first.
        let plain = b.clone().weight(Weight::ONE);
        let mut u = World::new(24).share("alpha", None, 50.0).share("beta", None, 50.0);
        let ualloc = u.alloc();
        let ufunded = Funded::new(&tree, &ualloc);
        a.clone().weight(Weight::ONE).charge(&ufunded, &mut u.ledger, NOW - 10 * HOUR_S, NOW);
        plain.charge(&ufunded, &mut u.ledger, NOW - 10 * HOUR_S, NOW);
        assert_eq!(ranking(&u.fs()), vec!["alpha", "beta", "root"]);
        // Now: alpha runs 4 B200s (8.8 units of a 20.8-unit rate), beta
        // 8 H100s: alpha is further below its rate, so its next job goes first.
        let ent = w.ent(&[
            Job::new(3, "alpha", "u").gpus(4).contract(HOUR_S, false).weight(weights.of(Some("b200"))).started(NOW),
            running(4, "beta", 8, HOUR_S, false, HOUR_S),
        ]);
        let rate = ent.team("alpha").unwrap().rate;
        assert!((rate - (16.0 + 8.0 * 2.2) / 2.0).abs() < 1e-9, "{rate}");
        assert!((ent.team("alpha").unwrap().running - 8.8).abs() < 1e-9);
        assert_eq!(ent.team("beta").unwrap().running, 8.0);
    }
}
