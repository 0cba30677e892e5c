//! Data-driven tests of the rules, one section per rule of docs/design.md.

mod common;
use common::*;
use tally_allocator::*;

// ---- Rule 5: fair share -------------------------------------------------

#[test]
fn under_used_siblings_rank_first() {
    // 100 GPUs, a and b 50% each: 8400 GPU-hours a week each.
    let fs = World::new(100).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", 840.0).used("b", "u", 420.0).fs();
    assert_eq!(ranking(&fs), vec!["b", "a", "root"]);
    let a = fs.standing("a").unwrap();
    assert!((a.key.ratio - 0.1).abs() < 1e-12);
    assert_eq!(fs.standing("b").unwrap().rank, 0);
    // factor = (n - rank) / n with n = 3
    assert!((fs.standing("a").unwrap().factor - 2.0 / 3.0).abs() < 1e-12);
    // Root hands everything down: its own part is unfunded and idle, so it
    // ranks after every funded account.
    assert_eq!(fs.standing("root").unwrap().key.class, FundingClass::UnfundedIdle);
}

#[test]
fn ranking_is_depth_first_by_level() {
    // Programme p1 is over-used as a whole although its team t1a is idle:
    // every team of p2 ranks before every team of p1 (Fair Tree semantics).
    // p1 and p2 hand everything down, so their own parts come after their
    // teams.
    let w = World::new(100)
        .share("p1", None, 50.0)
        .share("p2", None, 50.0)
        .share("t1a", Some("p1"), 50.0)
        .share("t1b", Some("p1"), 50.0)
        .share("t2a", Some("p2"), 50.0)
        .share("t2b", Some("p2"), 50.0)
        .used("t1b", "u", 8000.0)
        .used("t2a", "u", 1000.0)
        .used("t2b", "u", 2000.0);
    assert_eq!(ranking(&w.fs()), vec!["t2a", "t2b", "p2", "t1a", "t1b", "p1", "root"]);
}

#[test]
fn parent_keeps_what_it_does_not_hand_down() {
    // p keeps 50% of itself; jobs charged to p itself compete with its teams.
    let w = World::new(100).share("p", None, 100.0).share("t", Some("p"), 50.0).used("t", "u", 4200.0).used("p", "u", 100.0);
    // own(p) = 8400 GPU-hours, ratio 100/8400; t: 4200/8400 = 0.5
    assert_eq!(ranking(&w.fs()), vec!["p", "t", "root"]);
}

#[test]
fn zero_allocation_with_usage_ranks_last() {
    let w = World::new(100)
        .share("a", None, 50.0)
        .share("b", None, 50.0)
        .unfunded("ghost", None)
        .unfunded("idle", None)
        .used("a", "u", 50_000.0) // hugely over its allocation
        .used("ghost", "u", 1.0);
    // Funded accounts, however over-used, come before unfunded ones;
    // unfunded and idle before unfunded with usage. Root keeps nothing and
    // uses nothing: it is "unfunded idle" too and sorts by name.
    assert_eq!(ranking(&w.fs()), vec!["b", "a", "idle", "root", "ghost"]);
    assert_eq!(w.fs().standing("ghost").unwrap().key.class, FundingClass::UnfundedUsing);
}

#[test]
fn equal_ratios_tie_break_by_name() {
    for (ua, ub) in [(0.0, 0.0), (100.0, 100.0)] {
        let fs = World::new(10).share("zeta", None, 50.0).share("alpha", None, 50.0).used("zeta", "u", ua).used("alpha", "u", ub).fs();
        assert_eq!(ranking(&fs), vec!["alpha", "zeta", "root"], "usage {ua}");
    }
}

// ---- Rules 2-3: the ledger charges allocated work only -------------------

#[test]
fn unallocated_jobs_are_never_charged() {
    // `parent` hands all of its share down: it has no budget of its own.
    let w = World::new(8).share("a", None, 50.0).share("parent", None, 50.0).share("child", Some("parent"), 100.0);
    let (tree, alloc) = (w.tree(), w.alloc());
    let funded = Funded::new(&tree, &alloc);
    let mut ledger = Ledger::new(H, WEEK).unwrap();
    let cases = [
        (Job::new(1, "a", "u").gpus(4), false),                          // contract 0
        (Job::new(2, "nope", "u").gpus(4).contract(3600, false), false), // account not in tree
        (Job::new(3, "a", "u").gpus(4).contract(3600, false), true),
        (Job::new(4, "root", "u").gpus(4).contract(3600, false), false), // root is never a team
        (Job::new(5, "parent", "u").gpus(4).contract(3600, false), false), // no own budget
        (Job::new(6, "child", "u").gpus(4).contract(3600, false), true),
    ];
    for (job, charged) in cases {
        assert_eq!(job.charge(&funded, &mut ledger, 0, H), charged, "job {}", job.id);
        // The entitlement and the ranking agree on who is funded.
        assert_eq!(job.is_allocated(&w.ent(&[])), charged, "job {}", job.id);
        assert_eq!(job.is_allocated(&w.fs()), charged, "job {}", job.id);
    }
    let u = ledger.usage(H);
    assert_eq!(u.account_gpu_hours("a"), 4.0);
    assert_eq!(u.account_gpu_hours("nope"), 0.0);
}

// ---- Rule 7: job order ---------------------------------------------------

fn prio(fs: &FairShare, ent: &Entitlement, job: &Job, ahead: f64) -> Priority {
    job_priority(job, fs.standing(&job.account), TeamLoad { ent, ahead_gpus: ahead }, &PriorityRules::default())
}

#[test]
fn teams_below_their_rate_come_first_least_served_first() {
    // 40 GPUs, a, b, c 25% each (rate 10), d 25% idle. a has the best 7-day
    // ratio (no usage); b and c used theirs.
    let w = World::new(40)
        .share("a", None, 25.0)
        .share("b", None, 25.0)
        .share("c", None, 25.0)
        .share("d", None, 25.0)
        .used("b", "u", 1000.0)
        .used("c", "u", 500.0);
    let fs = w.fs();
    let jobs = [
        running(1, "a", 12, H, false, H), // a above its rate (12 > 10)
        running(2, "b", 2, H, false, H),  // b at 0.2 of its rate
        running(3, "c", 6, H, false, H),  // c at 0.6
        Job::new(4, "a", "u").gpus(10).contract(H, false),
        Job::new(5, "b", "u").gpus(10).contract(H, false),
        Job::new(6, "c", "u").gpus(10).contract(H, false),
    ];
    let ent = w.ent(&jobs);
    let p = |acct: &str, ahead: f64| prio(&fs, &ent, &Job::new(9, acct, "u").gpus(2).contract(H, false), ahead);
    let (a, b, c) = (p("a", 0.0), p("b", 0.0), p("c", 0.0));
    assert_eq!((a.need, b.need, c.need), (priority::NEED_FAIR, priority::NEED_OWED, priority::NEED_OWED));
    // b (0.2) before c (0.6) before a, though a has the best 7-day ratio.
    assert!(b.value > c.value && c.value > a.value, "{b:?} {c:?} {a:?}");
    // b's job behind 6 of b's GPUs starts at (2 + 6)/10 = 0.8: after c's first.
    assert!(p("b", 6.0).value < c.value);
    // Behind 8: b would reach its rate; a fair-share job (d is idle: its 10
    // GPUs go to a, b and c) or surplus.
    assert_ne!(p("b", 8.0).need, priority::NEED_OWED);
    // Levels: 1023 − ⌊1023 × share⌋.
    assert_eq!(b.level, 1023 - 204);
    // An unallocated job of the least served team stays below every allocated one.
    let free = prio(&fs, &ent, &Job::new(10, "b", "u").gpus(1), 0.0);
    assert!(!free.allocated && free.value < a.value && free.need == priority::NEED_NONE);
}

#[test]
fn surplus_is_shared_by_the_seven_day_ranking() {
    // Both teams at their rate: the 7-day ratio decides (b used less).
    let w = World::new(20).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", 800.0).used("b", "u", 100.0);
    let fs = w.fs();
    let ent = w.ent(&[running(1, "a", 10, H, false, H), running(2, "b", 10, H, false, H)]);
    let a = prio(&fs, &ent, &Job::new(3, "a", "u").contract(H, false).within_team(100), 0.0);
    let b = prio(&fs, &ent, &Job::new(4, "b", "u").contract(H, false).within_team(-100), 0.0);
    assert_eq!((a.need, b.need), (priority::NEED_NONE, priority::NEED_NONE));
    assert!(b.value > a.value, "nice never lifts a over b");
}

#[test]
fn priority_bit_layout() {
    let w = World::new(100).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", 800.0);
    let fs = w.fs();
    let ent = w.ent(&[running(1, "b", 10, H, false, H)]);
    let j = Job::new(2, "b", "u").contract(60, false).within_team(-3).time_limit(600);
    let p = prio(&fs, &ent, &j, 15.0);
    // b: rate 50, running 10 + 15 ahead → share 0.5 → level 1023 − 511;
    // rank 0 → team 1023; nice field −3 + 64; quick (10 min ≤ 30 min).
    let level = 1023 - 511;
    assert_eq!(p.value, (1 << 31) | (2 << 28) | (level << 18) | (1023 << 8) | ((64 - 3) << 1) | 1);
    let d = priority::decode(p.value);
    assert_eq!((d.allocated, d.planned, d.need, d.level, d.team, d.within_team, d.quick), (true, false, 2, level, 1023, -3, true));
    // The planner's bit sits between the tier and the need: a job the plan
    // starts now outranks any job of its tier, never the other tier.
    let planned = p.planned(true);
    assert_eq!(planned.value, p.value | (1 << 30));
    assert_eq!(planned.planned(false), p);
    let a = prio(&fs, &ent, &Job::new(4, "a", "u").contract(60, false), 60.0);
    // The debug lane lifts a quick allocated job of few GPUs over every
    // other allocated job; off by default.
    let lane = PriorityRules { debug_lane_max_gpus: Some(2), ..PriorityRules::default() };
    let quick_a = Job::new(5, "a", "u").contract(60, false).time_limit(600).gpus(2);
    let in_lane = job_priority(&quick_a, fs.standing("a"), TeamLoad { ent: &ent, ahead_gpus: 60.0 }, &lane);
    assert_eq!(in_lane.need, priority::NEED_LANE);
    assert!(in_lane.value > p.value);
    assert_eq!(prio(&fs, &ent, &quick_a, 60.0).need, priority::NEED_NONE);
    let wide = Job::new(6, "a", "u").contract(60, false).time_limit(600).gpus(4);
    assert_ne!(job_priority(&wide, fs.standing("a"), TeamLoad { ent: &ent, ahead_gpus: 60.0 }, &lane).need, priority::NEED_LANE);
    assert!(a.planned(true).value > p.value, "the plan starts a now");
    let free = prio(&fs, &ent, &Job::new(7, "a", "u"), 0.0);
    assert!(free.planned(true).value < a.value, "planned unallocated work stays below allocated work");
    // sprio's columns add up to the priority.
    for q in [p, planned, a, free, in_lane] {
        assert_eq!(q.sprio().total(), f64::from(q.value), "{q:?}");
    }
    // Unknown account: unallocated, lowest team value, never 0.
    let lost = Job::new(6, "nope", "u").within_team(i32::MIN);
    let p = prio(&fs, &ent, &lost, 0.0);
    assert!(!p.allocated);
    assert_eq!(p.rank, None);
    assert_eq!(p.value, 1);
}

// ---- Rule 8: preemption --------------------------------------------------

fn moment(ent: &Entitlement) -> Moment<'_> {
    Moment { ent, max_requeues: 1, now: NOW }
}

#[test]
fn preemption_rule_table() {
    // 32 GPUs, a and b 50% (rate 16). a runs 24, b runs 8 and waits.
    let w = World::new(32).share("a", None, 50.0).share("b", None, 50.0);

    let world = [
        running(20, "a", 8, H, false, 2 * H),
        running(21, "a", 8, H, false, 2 * H),
        running(22, "a", 8, H, false, 2 * H),
        running(23, "b", 8, H, false, 2 * H),
    ];
    let ent = w.ent(&world);
    let m = moment(&ent);
    let p_b = Job::new(100, "b", "u").gpus(8).contract(H, false).submitted(NOW);
    let p_b16 = Job::new(103, "b", "u").gpus(16).contract(H, false).submitted(NOW);
    let p_a = Job::new(101, "a", "u").gpus(8).contract(H, false).submitted(NOW);
    let p_unalloc = Job::new(102, "b", "u").gpus(8).submitted(NOW);
    let v = |id, acct: &str, gpus, contract: u64, resumable: bool, ran: u64| running(id, acct, gpus, contract, resumable, ran);
    let no_reclaim = |r: ReclaimRefusal| Decision::No(Refusal::Reclaim(r));
    let cases: Vec<(&str, &Job, Job, Decision)> = vec![
        ("unallocated victim", &p_b, v(1, "a", 8, 0, false, 10), Decision::Yes(VictimClass::Unallocated)),
        ("unallocated victim of own team", &p_b, v(2, "b", 8, 0, false, 10), Decision::Yes(VictimClass::Unallocated)),
        ("unallocated preemptor", &p_unalloc, v(3, "a", 8, 0, false, 10), Decision::No(Refusal::PreemptorUnallocated)),
        ("inside contract", &p_b, v(4, "a", 8, H, false, H - 1), Decision::No(Refusal::InsideContract(1))),
        ("contract ends exactly now", &p_b, v(5, "a", 8, H, true, H), Decision::Yes(VictimClass::PastContractResumable)),
        ("short team takes from the team above its rate", &p_b, v(6, "a", 8, H, false, 2 * H), Decision::Yes(VictimClass::PastContract)),
        ("requeue budget spent", &p_b, v(7, "a", 8, H, false, 2 * H).restarts(1), Decision::No(Refusal::RequeuesSpent(1))),
        ("resumable: no requeue budget", &p_b, v(8, "a", 8, H, true, 2 * H).restarts(5), Decision::Yes(VictimClass::PastContractResumable)),
        (
            "victim team would fall below its rate",
            &p_b,
            v(9, "a", 16, H, false, 2 * H),
            no_reclaim(ReclaimRefusal::VictimBelowRate { account: "a".into(), after: 8.0, rate: 16.0 }),
        ),
        (
            "team at its rate never preempts",
            &p_a,
            v(10, "b", 8, H, false, 2 * H),
            no_reclaim(ReclaimRefusal::PreemptorNotShort { running: 24.0, rate: 16.0 }),
        ),
        ("same team", &p_b, v(11, "b", 8, H, false, 2 * H), no_reclaim(ReclaimRefusal::SameTeam)),
        (
            "preemptor would end above the victim's share",
            &p_b16,
            v(12, "a", 8, H, false, 2 * H),
            no_reclaim(ReclaimRefusal::ShareNotLower { preemptor_after: 1.5, victim_after: 1.0 }),
        ),
        ("pending victim", &p_b, Job::new(13, "a", "v"), Decision::No(Refusal::VictimNotRunning)),
        ("itself", &p_b, p_b.clone().started(NOW), Decision::No(Refusal::SameJob)),
        ("victim in unknown account", &p_b, v(14, "nope", 8, H, false, 10), Decision::Yes(VictimClass::Unallocated)),
    ];
    for (name, p, v, want) in cases {
        assert_eq!(may_preempt(p, &v, &m), want, "{name}");
    }
}

#[test]
fn eligible_victims_are_cumulative_and_ordered() {
    // 64 GPUs, a and b 50% (rate 32).
    let w = World::new(64).share("a", None, 50.0).share("b", None, 50.0);

    let victims = vec![
        running(1, "a", 8, H, false, 5 * H), // past contract, non-resumable, 40 GPU-h
        running(2, "a", 4, H, true, 5 * H),  // resumable: nothing lost
        running(3, "a", 0, 0, false, 5 * H), // unallocated
        running(4, "a", 8, H, false, 2 * H), // past contract, 16 GPU-h lost
        running(5, "a", 8, 8 * H, false, H), // inside contract
        running(6, "a", 8, H, false, 3 * H), // 24 GPU-h lost
        running(7, "a", 8, H, false, 4 * H), // 32 GPU-h lost
        running(8, "b", 8, H, false, 4 * H), // the preemptor's own team
    ];
    let ent = w.ent(&victims);
    // a runs 44 allocated GPUs (rate 32): at most 12 may go, in victim
    // order: job 2 (4 GPUs, resumable), then the cheapest losses 4 (8 GPUs):
    // 44 − 4 − 8 = 32. Job 3 is unallocated: always eligible.
    let p = Job::new(100, "b", "u").gpus(4).contract(H, false);
    let ids: Vec<u64> = eligible_victims(&p, &victims, &moment(&ent)).iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![3, 2, 4]);
    // The victim rank: class, then GPU-minutes lost.
    let m = moment(&ent);
    let r = |j: &Job| victim_rank(j, &m);
    assert_eq!(r(&victims[2]) >> 30, 0);
    assert_eq!(r(&victims[1]), (1 << 30) | 300, "resumable: no requeue yet, 300 minutes run");
    assert_eq!(r(&victims[3]), (2 << 30) | (8 * 120));
    assert_eq!(r(&victims[4]) >> 30, 3);
}

#[test]
fn hierarchy_decides_where_the_paths_part() {
    // p1 = {t1a, t1b}, p2 = {t2}; 40 GPUs, 50/50, teams 50% of p1.
    let w = World::new(40).share("p1", None, 50.0).share("p2", None, 50.0).share("t1a", Some("p1"), 50.0).share("t1b", Some("p1"), 50.0).share(
        "t2",
        Some("p2"),
        100.0,
    );

    // t1a idle: t1b runs 14 (above its own 10) but p1 runs 14 < 20: t1b may
    // take from t2 (26 → 22 ≥ 20).
    let world = [running(1, "t1b", 14, H, false, 2 * H), running(2, "t2", 4, H, false, 2 * H), running(3, "t2", 22, H, false, 2 * H)];
    let ent = w.ent(&world);
    let p = Job::new(100, "t1b", "u").gpus(4).contract(H, false);
    assert!(may_preempt(&p, &world[1], &moment(&ent)).allowed());
    // …but not from its sibling-less programme once p1 reached its rate.
    let world = [running(1, "t1b", 20, H, false, 2 * H), running(2, "t2", 4, H, false, 2 * H), running(3, "t2", 22, H, false, 2 * H)];
    let ent = w.ent(&world);
    assert!(!may_preempt(&p, &world[1], &moment(&ent)).allowed());
    // Inside p1, t1a (short) takes from t1b (above its rate).
    let a = Job::new(101, "t1a", "u").gpus(4).contract(H, false);
    assert!(!may_preempt(&a, &world[0], &moment(&ent)).allowed(), "a 20-GPU victim would leave t1b at 0");
    let world = [running(1, "t1b", 16, H, false, 2 * H), running(4, "t1b", 4, H, false, 2 * H), running(3, "t2", 20, H, false, 2 * H)];
    let ent = w.ent(&world);
    assert!(may_preempt(&a, &world[1], &moment(&ent)).allowed());
}
