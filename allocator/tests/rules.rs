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
    let mut ledger = Ledger::new(HOUR_S, WEEK_S).unwrap();
    let cases = [
        (Job::new(1, "a", "u").gpus(4), false),                            // contract 0
        (Job::new(2, "nope", "u").gpus(4).contract(HOUR_S, false), false), // account not in tree
        (Job::new(3, "a", "u").gpus(4).contract(HOUR_S, false), true),
        (Job::new(4, "root", "u").gpus(4).contract(HOUR_S, false), false), // root is never a team
        (Job::new(5, "parent", "u").gpus(4).contract(HOUR_S, false), false), // no own budget
        (Job::new(6, "child", "u").gpus(4).contract(HOUR_S, false), true),
    ];
    for (job, charged) in cases {
        assert_eq!(job.charge(&funded, &mut ledger, 0, HOUR_S), charged, "job {}", job.id);
        // The entitlement and the ranking agree on who is funded.
        assert_eq!(job.is_allocated(&w.ent(&[])), charged, "job {}", job.id);
        assert_eq!(job.is_allocated(&w.fs()), charged, "job {}", job.id);
    }
    let u = ledger.usage(HOUR_S);
    assert_eq!(u.account_gpu_hours("a"), 4.0);
    assert_eq!(u.account_gpu_hours("nope"), 0.0);
}

// ---- Rule 7: job order ---------------------------------------------------

fn prio(fs: &FairShare, ent: &Entitlement, job: &Job, ahead: f64) -> Priority {
    job_priority(job, fs.standing(&job.account), TeamLoad::behind(ent, &job.account, ahead), &PriorityRules::default())
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
        running(1, "a", 12, HOUR_S, false, HOUR_S), // a above its rate (12 > 10)
        running(2, "b", 2, HOUR_S, false, HOUR_S),  // b at 0.2 of its rate
        running(3, "c", 6, HOUR_S, false, HOUR_S),  // c at 0.6
        Job::new(4, "a", "u").gpus(10).contract(HOUR_S, false),
        Job::new(5, "b", "u").gpus(10).contract(HOUR_S, false),
        Job::new(6, "c", "u").gpus(10).contract(HOUR_S, false),
    ];
    let ent = w.ent(&jobs);
    let p = |acct: &str, ahead: f64| prio(&fs, &ent, &Job::new(9, acct, "u").gpus(2).contract(HOUR_S, false), ahead);
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
    let ent = w.ent(&[running(1, "a", 10, HOUR_S, false, HOUR_S), running(2, "b", 10, HOUR_S, false, HOUR_S)]);
    let a = prio(&fs, &ent, &Job::new(3, "a", "u").contract(HOUR_S, false).within_team(100), 0.0);
    let b = prio(&fs, &ent, &Job::new(4, "b", "u").contract(HOUR_S, false).within_team(-100), 0.0);
    assert_eq!((a.need, b.need), (priority::NEED_NONE, priority::NEED_NONE));
    assert!(b.value > a.value, "nice never lifts a over b");
}

#[test]
fn priority_bit_layout() {
    let w = World::new(100).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", 800.0);
    let fs = w.fs();
    let ent = w.ent(&[running(1, "b", 10, HOUR_S, false, HOUR_S)]);
    let j = Job::new(2, "b", "u").contract(HOUR_S, false).within_team(-3).time_limit(600);
    let p = prio(&fs, &ent, &j, 15.0);
    // b: rate 50, running 10 + 15 ahead → share 0.5 → level 1023 − 511;
    // rank 0 → team 1023; nice field −3 + 64; quick (a 10 min limit ≤ 30 min).
    let level = 1023 - 511;
    assert_eq!(p.value, (1 << 31) | (2 << 28) | (level << 18) | (1023 << 8) | ((64 - 3) << 1) | 1);
    let d = priority::decode(p.value);
    assert_eq!((d.allocated, d.planned, d.need, d.level, d.team, d.within_team, d.quick), (true, false, 2, level, 1023, -3, true));
    // The planner's bit sits between the tier and the need: a job the plan
    // starts now outranks any job of its tier, never the other tier.
    let planned = p.planned(true);
    assert_eq!(planned.value, p.value | (1 << 30));
    assert_eq!(planned.planned(false), p);
    let a = prio(&fs, &ent, &Job::new(4, "a", "u").contract(HOUR_S, false), 60.0);
    // The debug lane (on by default) lifts a debug job (2 GPUs at most, a
    // contract of 15 minutes at most, with or without a time limit) over
    // every other allocated job.
    let debug_a = Job::new(5, "a", "u").contract(15 * 60, false).gpus(2);
    let in_lane = prio(&fs, &ent, &debug_a, 60.0);
    assert_eq!((in_lane.need, in_lane.quick), (priority::NEED_LANE, true));
    assert!(in_lane.value > p.value);
    let off = PriorityRules { debug_lane: false, ..PriorityRules::default() };
    let no_lane = job_priority(&debug_a, fs.standing("a"), TeamLoad::behind(&ent, "a", 60.0), &off);
    assert_eq!((no_lane.need, no_lane.quick), (priority::NEED_NONE, true));
    // Wider, or a longer contract, or quick only by its time limit: not debug.
    for (id, gpus, contract, limit) in [(6, 4, 15 * 60, None), (8, 1, 16 * 60, None), (9, 1, HOUR_S, Some(600))] {
        let mut j = Job::new(id, "a", "u").contract(contract, false).gpus(gpus);
        j.time_limit_s = limit;
        assert_ne!(prio(&fs, &ent, &j, 60.0).need, priority::NEED_LANE, "job {id}");
    }
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

/// Restoration: a team below its rate takes back from one above it.
#[test]
fn preemption_rule_table() {
    // 32 GPUs, a and b 50% (rate 16). a runs 24, b runs 8 and waits.
    let w = World::new(32).share("a", None, 50.0).share("b", None, 50.0);

    let world = [
        running(20, "a", 8, HOUR_S, true, 2 * HOUR_S),
        running(21, "a", 8, HOUR_S, true, 2 * HOUR_S),
        running(22, "a", 8, HOUR_S, true, 2 * HOUR_S),
        running(23, "b", 8, HOUR_S, true, 2 * HOUR_S),
    ];
    let ent = w.ent(&world);
    let m = moment(&ent);
    let p_b = Job::new(100, "b", "u").gpus(8).contract(HOUR_S, false).submitted(NOW);
    let p_b16 = Job::new(103, "b", "u").gpus(16).contract(HOUR_S, false).submitted(NOW);
    let p_a = Job::new(101, "a", "u").gpus(8).contract(HOUR_S, false).submitted(NOW);
    let p_unalloc = Job::new(102, "b", "u").gpus(8).submitted(NOW);
    let v = |id, acct: &str, gpus, contract: u64, resumable: bool, ran: u64| running(id, acct, gpus, contract, resumable, ran);
    let no_reclaim = |r: ReclaimRefusal| Decision::No(Refusal::Reclaim(r));
    // A debug job (2 GPUs, a 10-minute contract) that cannot checkpoint.
    let debug_v = |id, ran: u64| running(id, "a", 2, 10 * 60, false, ran);
    let cases: Vec<(&str, &Job, Job, Decision)> = vec![
        ("unallocated victim", &p_b, v(1, "a", 8, 0, false, 10), Decision::Yes(VictimClass::Unallocated)),
        ("unallocated victim of own team", &p_b, v(2, "b", 8, 0, false, 10), Decision::Yes(VictimClass::Unallocated)),
        ("unallocated preemptor", &p_unalloc, v(3, "a", 8, 0, false, 10), Decision::No(Refusal::PreemptorUnallocated)),
        ("inside contract", &p_b, v(4, "a", 8, HOUR_S, false, HOUR_S - 1), Decision::No(Refusal::InsideContract(1))),
        ("contract ends exactly now", &p_b, v(5, "a", 8, HOUR_S, true, HOUR_S), Decision::Yes(VictimClass::PastContractResumable)),
        (
            "short team takes from the team above its rate",
            &p_b,
            v(6, "a", 8, HOUR_S, true, 2 * HOUR_S),
            Decision::Yes(VictimClass::PastContractResumable),
        ),
        (
            "a restoration never throws away the run of a job that cannot checkpoint",
            &p_b,
            v(7, "a", 8, HOUR_S, false, 2 * HOUR_S).time_limit(4 * HOUR_S),
            Decision::No(Refusal::NotResumable { ran_s: 2 * HOUR_S }),
        ),
        (
            "nor of a long one (no time limit), past the contract maximum",
            &p_b,
            v(8, "a", 8, HOUR_S, false, 9 * HOUR_S),
            Decision::No(Refusal::LongJob { ran_s: 9 * HOUR_S }),
        ),
        (
            "however often it was requeued before",
            &p_b,
            v(16, "a", 8, HOUR_S, false, 3 * HOUR_S).time_limit(8 * HOUR_S).restarts(3),
            Decision::No(Refusal::NotResumable { ran_s: 3 * HOUR_S }),
        ),
        (
            "a debug job that cannot checkpoint, past its contract: nothing shields it",
            &p_b,
            debug_v(17, HOUR_S),
            Decision::Yes(VictimClass::PastContract),
        ),
        ("not inside its contract", &p_b, debug_v(18, 5 * 60), Decision::No(Refusal::InsideContract(5 * 60))),
        (
            "resumable, requeued often: still a victim",
            &p_b,
            v(9, "a", 8, HOUR_S, true, 2 * HOUR_S).restarts(5),
            Decision::Yes(VictimClass::PastContractResumable),
        ),
        (
            "unallocated, long, never checkpoints: always a victim",
            &p_b,
            v(19, "a", 8, 0, false, 30 * HOUR_S),
            Decision::Yes(VictimClass::Unallocated),
        ),
        (
            "victim team would fall below its rate",
            &p_b,
            v(10, "a", 16, HOUR_S, true, 2 * HOUR_S),
            no_reclaim(ReclaimRefusal::VictimBelowRate { account: "a".into(), after: 8.0, rate: 16.0 }),
        ),
        (
            "team at its rate never restores",
            &p_a,
            v(11, "b", 8, HOUR_S, true, 2 * HOUR_S),
            no_reclaim(ReclaimRefusal::PreemptorNotShort { running: 24.0, rate: 16.0 }),
        ),
        ("same team, no debug job", &p_b, v(12, "b", 8, HOUR_S, true, 2 * HOUR_S), Decision::No(Refusal::TeamOrder)),
        (
            "preemptor would end above the victim's share",
            &p_b16,
            v(13, "a", 8, HOUR_S, true, 2 * HOUR_S),
            no_reclaim(ReclaimRefusal::ShareNotLower { preemptor_after: 1.5, victim_after: 1.0 }),
        ),
        ("pending victim", &p_b, Job::new(14, "a", "v"), Decision::No(Refusal::VictimNotRunning)),
        ("itself", &p_b, p_b.clone().started(NOW), Decision::No(Refusal::SameJob)),
        ("victim in unknown account", &p_b, v(15, "nope", 8, HOUR_S, false, 10), Decision::Yes(VictimClass::Unallocated)),
    ];
    for (name, p, v, want) in cases {
        assert_eq!(may_preempt(p, &v, &m), want, "{name}");
    }
}

/// Time-slicing: past its contract a job yields to a debug job of its own
/// team, and to one of another team only where that team stands worse
/// without it and stays at or above its rate; never inside a contract.
#[test]
fn debug_jobs_time_slice_by_the_victim_rule() {
    // 48 GPUs, a, b, c a third each (rate 16, and every team asks for more:
    // fair = rate). a runs at its rate, b 8 above it, c 8 below it.
    let w = World::new(48).share("a", None, 100.0 / 3.0).share("b", None, 100.0 / 3.0).share("c", None, 100.0 / 3.0);
    let small = |id: u64, acct: &str, resumable: bool, ran: u64| running(id, acct, 1, HOUR_S, resumable, ran).time_limit(4 * HOUR_S);
    let mut world = vec![
        running(1, "a", 8, HOUR_S, true, 2 * HOUR_S),
        running(2, "a", 8, 4 * HOUR_S, true, 2 * HOUR_S), // inside its contract
        running(3, "b", 8, HOUR_S, true, 2 * HOUR_S),
        running(4, "b", 8, HOUR_S, true, 2 * HOUR_S),
        running(5, "c", 8, HOUR_S, true, 2 * HOUR_S),
    ];
    world.extend((10..15).map(|id| small(id, "b", true, 2 * HOUR_S)));
    world.push(small(16, "b", false, 2 * HOUR_S)); // cannot checkpoint, a 4 h limit
    world.push(running(17, "b", 1, HOUR_S, false, 2 * HOUR_S)); // cannot checkpoint, no limit: a long job
    world.push(small(18, "b", true, HOUR_S / 2)); // inside its contract
    for (id, acct) in [(30, "a"), (31, "b"), (32, "c")] {
        world.push(Job::new(id, acct, "u").gpus(16).contract(HOUR_S, true)); // every team asks for more
    }
    let ent = w.ent(&world);
    assert_eq!(ent.team("a").map(|t| (t.running, t.rate, t.fair)), Some((16.0, 16.0, 16.0)));
    let m = moment(&ent);
    let debug = |id, acct: &str| Job::new(id, acct, "u").gpus(1).contract(10 * 60, false);
    let (d_a, d_c) = (debug(100, "a"), debug(101, "c"));
    let find = |id: u64| world.iter().find(|j| j.id == id).expect("in the world");
    let cases: Vec<(&str, &Job, u64, Decision)> = vec![
        ("debug takes its own team's job past its contract", &d_a, 1, Decision::Yes(VictimClass::PastContractResumable)),
        ("never inside a contract", &d_a, 2, Decision::No(Refusal::InsideContract(2 * HOUR_S))),
        (
            "another team's 8-GPU job: b without it (16/16) would keep less than a with the debug job (17/16)",
            &d_a,
            3,
            Decision::No(Refusal::Reclaim(ReclaimRefusal::Outranked { account: "b".into(), victim_after: 1.0, preemptor_after: 17.0 / 16.0 })),
        ),
        ("another team's 1-GPU job: b without it (23/16) keeps more", &d_a, 10, Decision::Yes(VictimClass::PastContractResumable)),
        (
            "one that cannot checkpoint is not time-sliced, within the contract maximum",
            &d_a,
            16,
            Decision::No(Refusal::NotResumable { ran_s: 2 * HOUR_S }),
        ),
        ("nor a long one", &d_a, 17, Decision::No(Refusal::LongJob { ran_s: 2 * HOUR_S })),
        ("never inside a contract, across teams", &d_a, 18, Decision::No(Refusal::InsideContract(HOUR_S / 2))),
        (
            "a team below its rate is never time-sliced",
            &d_a,
            5,
            Decision::No(Refusal::Reclaim(ReclaimRefusal::VictimBelowRate { account: "c".into(), after: 0.0, rate: 16.0 })),
        ),
        ("the short team's debug job restores from the team above its rate", &d_c, 3, Decision::Yes(VictimClass::PastContractResumable)),
    ];
    for (name, p, v, want) in cases {
        assert_eq!(may_preempt(p, find(v), &m), want, "{name}");
    }
    // A job that is neither debug nor quick takes nothing by time-slicing.
    let p = Job::new(102, "a", "u").gpus(1).contract(HOUR_S, false);
    assert_eq!(may_preempt(&p, find(1), &m), Decision::No(Refusal::TeamOrder));
    assert!(matches!(may_preempt(&p, find(10), &m), Decision::No(Refusal::Reclaim(ReclaimRefusal::PreemptorNotShort { .. }))));
    // Inside a team: a debug job never takes a debug job, nor a job that
    // comes before it by nice.
    let own_debug = debug(19, "a").started(NOW - HOUR_S).time_limit(30 * 60);
    let mut world_a = world.clone();
    world_a.push(own_debug.clone());
    let ent_a = w.ent(&world_a);
    let m_a = moment(&ent_a);
    assert_eq!(may_preempt(&d_a, &own_debug, &m_a), Decision::No(Refusal::TeamOrder));
    let urgent = running(20, "a", 8, HOUR_S, true, 2 * HOUR_S).within_team(5);
    assert_eq!(may_preempt(&d_a, &urgent, &m_a), Decision::No(Refusal::TeamOrder));
    assert!(may_preempt(&d_a.clone().within_team(5), &urgent, &m_a).allowed());
    // Nor of its own team one that cannot checkpoint (b's debug job on b's).
    let d_b = debug(103, "b");
    assert_eq!(may_preempt(&d_b, find(16), &m), Decision::No(Refusal::NotResumable { ran_s: 2 * HOUR_S }));
    assert_eq!(may_preempt(&d_b, find(17), &m), Decision::No(Refusal::LongJob { ran_s: 2 * HOUR_S }));
    assert_eq!(may_preempt(&d_b, find(10), &m), Decision::Yes(VictimClass::PastContractResumable));
    // A debug job that cannot checkpoint has no shield past its contract:
    // b's (1 GPU, a 10-minute contract, an hour in) is time-sliced by a's
    // debug job as b's resumable 1-GPU jobs are.
    let b_debug = debug(104, "b").started(NOW - HOUR_S);
    let world_b: Vec<Job> = world.iter().cloned().chain([b_debug.clone()]).collect();
    let ent_b = w.ent(&world_b);
    let m_b = moment(&ent_b);
    assert_eq!(may_preempt(&d_a, &b_debug, &m_b), Decision::Yes(VictimClass::PastContract));
    let pool = VictimPool::new(world_b.iter().map(|j| (j.id, j)), &m_b);
    assert!(pool.for_preemptor_why(&d_a, &m_b).contains(&(104, PreemptReason::TimeSlice)));
    // The victims a debug job may take, in its order: the closest in size first.
    let ids: Vec<u64> = eligible_victims(&d_a, &world, &m).iter().map(|j| j.id).collect();
    // b's 1-GPU resumable jobs (highest id first); b's 8-GPU jobs would
    // leave it below its rate with those gone; a's own 8-GPU job; never
    // the jobs that cannot checkpoint (16, 17).
    assert_eq!(ids, vec![14, 13, 12, 11, 10, 1]);
    // Why each: b's jobs by time-slicing across teams (b stays at or above
    // its rate), a's own job by the team's order.
    let pool = VictimPool::new(world.iter().map(|j| (j.id, j)), &m);
    let why: Vec<(u64, PreemptReason)> = pool.for_preemptor_why(&d_a, &m);
    assert_eq!(why.iter().map(|&(id, _)| id).collect::<Vec<_>>(), ids);
    assert!(why.iter().all(|&(_, r)| r == PreemptReason::TimeSlice), "{why:?}");
}

#[test]
fn eligible_victims_are_cumulative_and_ordered() {
    // 64 GPUs, a and b 50% (rate 32).
    let w = World::new(64).share("a", None, 50.0).share("b", None, 50.0);

    let victims = vec![
        running(1, "a", 8, HOUR_S, false, 10 * HOUR_S), // cannot checkpoint, past the 8 h maximum: never a victim
        running(2, "a", 4, HOUR_S, true, 5 * HOUR_S),   // resumable, 4 GPUs: nothing lost
        running(3, "a", 0, 0, false, 5 * HOUR_S),       // unallocated
        running(4, "a", 8, HOUR_S, true, 9 * HOUR_S),   // resumable, 540 minutes run
        running(5, "a", 8, 8 * HOUR_S, false, HOUR_S),  // inside contract
        running(6, "a", 8, HOUR_S, true, 11 * HOUR_S),  // 660 minutes run
        running(7, "a", 8, HOUR_S, true, 12 * HOUR_S),  // 720 minutes run
        running(8, "b", 8, HOUR_S, false, 4 * HOUR_S),  // the preemptor's own team
        running(9, "a", 8, HOUR_S, false, 5 * HOUR_S),  // cannot checkpoint, within the maximum: never a victim
    ];
    let ent = w.ent(&victims);
    // a runs 52 allocated GPUs (rate 32): at most 20 may go, in victim
    // order: job 2 (4 GPUs, the closest in size), then the shortest runs
    // 4 (8 GPUs), 6 (8 GPUs): 52 − 4 − 8 − 8 = 32. Job 3 is unallocated:
    // always eligible. Jobs 1 and 9 cannot checkpoint: never, however
    // long they ran.
    let p = Job::new(100, "b", "u").gpus(4).contract(HOUR_S, false);
    let ids: Vec<u64> = eligible_victims(&p, &victims, &moment(&ent)).iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![3, 2, 4, 6]);
    // Why: job 3 was unallocated work; a's others restore b's rate. What
    // each throws away: nothing for the resumable jobs; its run for one
    // that cannot checkpoint.
    let m = moment(&ent);
    let pool = VictimPool::new(victims.iter().map(|j| (j.id, j)), &m);
    let why: Vec<&str> = pool.for_preemptor_why(&p, &m).into_iter().map(|(_, r)| r.name()).collect();
    assert_eq!(why, vec!["unallocated", "restore", "restore", "restore"]);
    assert_eq!(PreemptReason::parse("time_slice"), Some(PreemptReason::TimeSlice));
    assert_eq!(PreemptReason::parse("slice"), None);
    assert_eq!(lost_gpu_seconds(&victims[1], NOW), 0.0, "resumable");
    assert_eq!(lost_gpu_seconds(&victims[0], NOW), (8 * 10 * HOUR_S) as f64, "8 GPUs for 10 h");
    // The victim rank: class, then the victim's team's share (the most
    // over-served first: a runs 52 of its 32, ⌊8 · 1.625⌋ = 13 → 63 − 13),
    // then the fit to the preemptor, then what the requeue costs.
    let m = moment(&ent);
    let r = |j: &Job, p: Option<u32>| victim_rank(j, p, &m);
    let side_a = (63 - 13) << 24;
    assert_eq!(r(&victims[2], None) >> 30, 0);
    assert_eq!(r(&victims[1], None), (1 << 30) | side_a | 300, "resumable: no requeue yet, 300 minutes run");
    assert_eq!(r(&victims[3], Some(4)), (1 << 30) | side_a | (4 << 18) | 540, "4 GPUs more than a 4-GPU preemptor needs");
    assert_eq!(r(&victims[3].clone().restarts(2), None), (1 << 30) | side_a | (2 << 12) | 540, "requeued twice: after those requeued less");
    assert_eq!(r(&victims[4], None) >> 30, 3, "inside its contract");
    assert_eq!(r(&victims[0], None) >> 30, 3, "cannot checkpoint, past its contract: not a victim");
    // A debug job that cannot checkpoint is one past its contract (class
    // 2), after the resumable ones: GPU-minutes lost (2 GPUs, 60 minutes).
    let debug = running(11, "a", 2, 10 * 60, false, HOUR_S);
    assert_eq!(r(&debug, None), (2 << 30) | side_a | (2 * 60));
    assert_eq!(r(&debug, Some(4)), (2 << 30) | side_a | (2 << 18) | (2 * 60));
    // A resumable job of b (8 of its 32: ⌊8 · 0.25⌋ = 2) goes after a's
    // of the same class: the most over-served team first.
    let b_job = running(10, "b", 4, HOUR_S, true, 5 * HOUR_S);
    assert_eq!(r(&b_job, None), (1 << 30) | ((63 - 2) << 24) | 300);
    assert!(r(&b_job, None) > r(&victims[1], None));
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
    let world = [
        running(1, "t1b", 14, HOUR_S, true, 2 * HOUR_S),
        running(2, "t2", 4, HOUR_S, true, 2 * HOUR_S),
        running(3, "t2", 22, HOUR_S, true, 2 * HOUR_S),
    ];
    let ent = w.ent(&world);
    let p = Job::new(100, "t1b", "u").gpus(4).contract(HOUR_S, false);
    assert!(may_preempt(&p, &world[1], &moment(&ent)).allowed());
    // …but not from its sibling-less programme once p1 reached its rate.
    let world = [
        running(1, "t1b", 20, HOUR_S, true, 2 * HOUR_S),
        running(2, "t2", 4, HOUR_S, true, 2 * HOUR_S),
        running(3, "t2", 22, HOUR_S, true, 2 * HOUR_S),
    ];
    let ent = w.ent(&world);
    assert!(!may_preempt(&p, &world[1], &moment(&ent)).allowed());
    // Inside p1, t1a (short) takes from t1b (above its rate).
    let a = Job::new(101, "t1a", "u").gpus(4).contract(HOUR_S, false);
    assert!(!may_preempt(&a, &world[0], &moment(&ent)).allowed(), "a 20-GPU victim would leave t1b at 0");
    let world = [
        running(1, "t1b", 16, HOUR_S, true, 2 * HOUR_S),
        running(4, "t1b", 4, HOUR_S, true, 2 * HOUR_S),
        running(3, "t2", 20, HOUR_S, true, 2 * HOUR_S),
    ];
    let ent = w.ent(&world);
    assert!(may_preempt(&a, &world[1], &moment(&ent)).allowed());
}
