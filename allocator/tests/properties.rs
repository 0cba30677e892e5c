//! Property tests: the ranking is a total order of accounts, more usage never
//! improves a rank, and the priority order is exactly the documented
//! lexicographic order.

mod common;
use common::*;
use proptest::prelude::*;
use std::cmp::Ordering;
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
            let parent: Vec<Option<usize>> =
                (0..n).map(|i| if i == 0 { None } else { parents[i].index(i + 1).checked_sub(1) }).collect();
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

    #[test]
    fn priority_order_is_the_documented_lexicographic_order(
        w in arb_world(),
        jobs in proptest::collection::vec((any::<prop::sample::Index>(), any::<bool>(), -2000i32..2000, 0u64..200_000), 2..20),
    ) {
        let fs = w.fs();
        let mut accounts: Vec<String> = w.specs.iter().map(|s| s.name.clone()).collect();
        accounts.push("not-in-tree".to_string());
        let rules = PriorityRules::default();
        let jobs: Vec<Job> = jobs.iter().enumerate().map(|(i, (acct, alloc, within, age))| {
            let j = Job::new(i as u64, acct.get(&accounts).as_str(), "u").within_team(*within).submitted(NOW - age);
            if *alloc { j.contract(3600, false) } else { j }
        }).collect();
        let spec_key = |j: &Job| {
            let p = job_priority(j, &fs, &rules, NOW);
            let team_rank = fs.standing(&j.account).map_or(u32::MAX, |s| s.rank).min(1023);
            (j.is_allocated(&fs), std::cmp::Reverse(team_rank), j.within_team.clamp(-512, 511), ((NOW - j.submit_s) / 60).min(1023), p.value)
        };
        for a in &jobs {
            let pa = spec_key(a);
            prop_assert!(pa.4 >= 1, "priority 0 means held");
            for b in &jobs {
                let pb = spec_key(b);
                let by_value = pa.4.cmp(&pb.4);
                let by_spec = (pa.0, pa.1, pa.2, pa.3).cmp(&(pb.0, pb.1, pb.2, pb.3));
                prop_assert_eq!(by_value, by_spec, "jobs {} and {}", a.id, b.id);
                // Never across teams: different teams in one tier are ordered by rank alone.
                if a.account != b.account && pa.0 == pb.0 && pa.1 != pb.1 {
                    prop_assert_eq!(by_value, pa.1.cmp(&pb.1));
                }
                // Antisymmetry of the comparison used to sort the queue.
                let cmp = |x: &Job, y: &Job| spec_key(y).4.cmp(&spec_key(x).4).then(x.id.cmp(&y.id));
                prop_assert_eq!(cmp(a, b), cmp(b, a).reverse());
                if a.id != b.id { prop_assert_ne!(cmp(a, b), Ordering::Equal); }
            }
        }
    }

    #[test]
    fn preemption_never_inside_a_contract(
        contract in 1u64..28_800, ran in 0u64..40_000, resumable in any::<bool>(),
        ua in 0.0f64..5000.0, ub in 0.0f64..5000.0,
    ) {
        let fs = World::new(64).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", ua).used("b", "u", ub).fs();
        let p = Job::new(1, "b", "u").contract(3600, false);
        let v = Job::new(2, "a", "v").contract(contract, resumable).started(NOW - ran);
        let d = may_preempt(&p, &v, &fs, NOW);
        if ran < contract {
            prop_assert_eq!(d, Decision::No(Refusal::InsideContract(contract - ran)));
        } else {
            // b preempts a only if b is strictly less used (equal shares).
            prop_assert_eq!(d.allowed(), ub < ua);
        }
    }
}
