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

#[test]
fn users_rank_inside_their_account() {
    let fs = World::new(10).share("a", None, 100.0).used("a", "heavy", 50.0).used("a", "light", 5.0).fs();
    assert_eq!(fs.user_rank("a", "light"), Some((0, 0)));
    assert_eq!(fs.user_rank("a", "heavy"), Some((0, 1)));
    assert_eq!(fs.user_rank("a", "new"), Some((0, 0)));
    assert_eq!(fs.user_rank("nope", "x"), None);
}

// ---- Rules 2-3: the ledger charges allocated work only -------------------

#[test]
fn unallocated_jobs_are_never_charged() {
    let w = World::new(8).share("a", None, 100.0);
    let tree = w.tree();
    let mut ledger = Ledger::new(H, WEEK).unwrap();
    let cases = [
        (Job::new(1, "a", "u").gpus(4), false),                          // contract 0
        (Job::new(2, "nope", "u").gpus(4).contract(3600, false), false), // account not in tree
        (Job::new(3, "a", "u").gpus(4).contract(3600, false), true),
    ];
    for (job, charged) in cases {
        assert_eq!(job.charge(&tree, &mut ledger, 0, H), charged, "job {}", job.id);
    }
    let u = ledger.usage(H);
    assert_eq!(u.account_gpu_hours("a"), 4.0);
    assert_eq!(u.account_gpu_hours("nope"), 0.0);
}

// ---- Rule 7: job order ---------------------------------------------------

fn prio(fs: &FairShare, job: &Job) -> u32 {
    job_priority(job, fs, &PriorityRules::default(), NOW).value
}

#[test]
fn job_order_tiers_teams_nice_age() {
    // b is the under-used team.
    let fs = World::new(100).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", 800.0).fs();
    let c = 3600;
    let a_old_nice = Job::new(1, "a", "u").contract(c, false).submitted(NOW - 10 * H).within_team(500);
    let b_new = Job::new(2, "b", "u").contract(c, false).submitted(NOW);
    let b_unalloc = Job::new(3, "b", "u").submitted(NOW - 10 * H).within_team(500);
    let a_unalloc = Job::new(4, "a", "u").submitted(NOW - 10 * H);
    let b_old = Job::new(5, "b", "u").contract(c, false).submitted(NOW - 5 * 60);
    let b_high = Job::new(6, "b", "u").contract(c, false).submitted(NOW).within_team(10);
    let mut jobs = [a_old_nice, b_new, b_unalloc, a_unalloc, b_old, b_high];
    jobs.sort_by_key(|j| std::cmp::Reverse(prio(&fs, j)));
    let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
    // allocated b (priority 10 first, then older, then newer), allocated a,
    // then unallocated b before unallocated a.
    assert_eq!(ids, vec![6, 5, 2, 1, 3, 4]);
}

#[test]
fn priority_bit_layout() {
    let fs = World::new(100).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", 800.0).fs();
    let j = Job::new(1, "b", "u").contract(60, false).submitted(NOW - 125).within_team(-3);
    let p = job_priority(&j, &fs, &PriorityRules::default(), NOW);
    // b ranks first (rank 0): team = 1023 - 0
    assert_eq!(p.value, (1 << 31) | (1023 << 20) | ((512 - 3) << 10) | 2);
    assert_eq!(priority::decode(p.value), (true, false, 1023, -3, 2));
    // The planner's bit sits between the tier and the team: a job the plan
    // starts now outranks any team's job of its tier, never the other tier.
    let planned = p.planned(true);
    assert_eq!(planned.value, p.value | (1 << 30));
    assert_eq!(priority::decode(planned.value), (true, true, 1023, -3, 2));
    assert_eq!(planned.planned(false), p);
    let a = job_priority(&Job::new(4, "a", "u").contract(60, false).submitted(NOW), &fs, &PriorityRules::default(), NOW);
    assert!(a.planned(true).value > p.value, "a ranks below b, but the plan starts a now");
    let free = job_priority(&Job::new(5, "a", "u").submitted(NOW), &fs, &PriorityRules::default(), NOW);
    assert!(free.planned(true).value < a.value, "planned unallocated work stays below allocated work");
    // Unknown account: unallocated, lowest team value, never 0.
    let lost = Job::new(2, "nope", "u").within_team(i32::MIN).submitted(NOW);
    let p = job_priority(&lost, &fs, &PriorityRules::default(), NOW);
    assert!(!p.allocated);
    assert_eq!(p.rank, None);
    assert_eq!(p.value, 1);
    // Age saturates.
    let old = Job::new(3, "a", "u").submitted(0);
    assert_eq!(job_priority(&old, &fs, &PriorityRules::default(), NOW).age, 1023);
}

// ---- Rule 8: preemption --------------------------------------------------

#[test]
fn preemption_rule_table() {
    // a is over-used (ranks below b).
    let fs = World::new(100).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", 800.0).fs();
    let now = NOW;
    let p_b = Job::new(100, "b", "u").contract(H, false).submitted(now);
    let p_a = Job::new(101, "a", "u").contract(H, false).submitted(now);
    let p_unalloc = Job::new(102, "b", "u").submitted(now);
    let running = |id, acct: &str, contract: u64, resumable: bool, ran: u64| {
        Job::new(id, acct, "v").contract(contract, resumable).submitted(now - ran - 10).started(now - ran)
    };
    let cases: Vec<(&str, &Job, Job, Decision)> = vec![
        ("unallocated victim", &p_b, running(1, "a", 0, false, 10), Decision::Yes(VictimClass::Unallocated)),
        ("unallocated victim of own team", &p_b, running(2, "b", 0, false, 10), Decision::Yes(VictimClass::Unallocated)),
        ("unallocated preemptor", &p_unalloc, running(3, "a", 0, false, 10), Decision::No(Refusal::PreemptorUnallocated)),
        ("inside contract", &p_b, running(4, "a", H, false, H - 1), Decision::No(Refusal::InsideContract(1))),
        ("contract ends exactly now", &p_b, running(5, "a", H, true, H), Decision::Yes(VictimClass::PastContractResumable)),
        ("past contract, lower team", &p_b, running(6, "a", H, false, 2 * H), Decision::Yes(VictimClass::PastContract)),
        ("past contract, higher team", &p_a, running(7, "b", H, false, 2 * H), Decision::No(Refusal::VictimTeamNotBelow)),
        ("past contract, same team", &p_a, running(8, "a", H, false, 2 * H), Decision::No(Refusal::VictimTeamNotBelow)),
        ("pending victim", &p_b, Job::new(9, "a", "v"), Decision::No(Refusal::VictimNotRunning)),
        ("itself", &p_b, p_b.clone().started(now), Decision::No(Refusal::SameJob)),
        ("victim in unknown account", &p_b, running(10, "nope", H, false, 10), Decision::Yes(VictimClass::Unallocated)),
    ];
    for (name, p, v, want) in cases {
        assert_eq!(may_preempt(p, &v, &fs, now), want, "{name}");
    }
}

#[test]
fn victim_order() {
    // c most over-used, then a; b is the preemptor's team.
    let fs = World::new(100)
        .share("a", None, 30.0)
        .share("b", None, 40.0)
        .share("c", None, 30.0)
        .used("a", "u", 600.0)
        .used("c", "u", 900.0)
        .fs();
    let now = NOW;
    let p = Job::new(100, "b", "u").contract(H, false);
    let run = |id, acct: &str, contract: u64, resumable: bool, started: u64| {
        Job::new(id, acct, "v").contract(contract, resumable).started(started)
    };
    let mut victims = vec![
        run(1, "a", H, false, now - 5 * H),  // past contract, non-resumable
        run(2, "a", H, true, now - 5 * H),   // past contract, resumable
        run(3, "a", 0, false, now - 5 * H),  // unallocated, older
        run(4, "a", 0, false, now - H),      // unallocated, younger
        run(5, "c", 0, false, now - 5 * H),  // unallocated, most over-used team
        run(6, "c", H, true, now - 2 * H),   // resumable, most over-used team
        run(7, "a", 8 * H, false, now - H),  // inside contract: not eligible
        run(8, "c", H, false, now - 3 * H),  // past contract, c
    ];
    let eligible: Vec<u64> = eligible_victims(&p, &victims, &fs, now).iter().map(|j| j.id).collect();
    order_victims(&p, &mut victims, &fs, now);
    let ids: Vec<u64> = victims.iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![5, 4, 3, 6, 2, 8, 1, 7]);
    // The batch form: the same order, without the ineligible job 7.
    assert_eq!(eligible, vec![5, 4, 3, 6, 2, 8, 1]);
}

#[test]
fn victim_rank_layout() {
    // c over-used the most, then a.
    let fs = World::new(100).share("a", None, 50.0).share("c", None, 50.0).used("a", "u", 100.0).used("c", "u", 900.0).fs();
    let now = NOW;
    let rank = |j: Job| victim_rank(&j, &fs, now);
    let unalloc_c = rank(Job::new(1, "c", "v").started(now - 120));
    let resumable_c = rank(Job::new(2, "c", "v").contract(60, true).started(now - 120));
    let past_c = rank(Job::new(3, "c", "v").contract(60, false).started(now - 120));
    let inside_c = rank(Job::new(4, "c", "v").contract(3600, false).started(now - 120));
    assert_eq!([unalloc_c >> 30, resumable_c >> 30, past_c >> 30, inside_c >> 30], [0, 1, 2, 3]);
    // Team field: c before a. (Root, unfunded and idle, sorts before both:
    // unfunded accounts count as the most over-allocated.)
    let past_a = rank(Job::new(5, "a", "v").contract(60, false).started(now - 120));
    assert_eq!(fs.over_allocation_position("root"), Some(0));
    assert_eq!((past_c >> 18) & 0xfff, 1);
    assert_eq!((past_a >> 18) & 0xfff, 2);
    assert!(past_c < past_a);
    // Age in minutes: the younger run first.
    let young = rank(Job::new(6, "c", "v").contract(60, false).started(now - 61));
    assert_eq!(past_c & 0x3ffff, 2);
    assert_eq!(young & 0x3ffff, 1);
    assert!(young < past_c);
}

#[test]
fn equal_standing_never_preempts() {
    // Equal ratios: a ranks before b by name only; neither outranks the other.
    let fs = World::new(100).share("a", None, 50.0).share("b", None, 50.0).used("a", "u", 100.0).used("b", "u", 100.0).fs();
    assert!(fs.standing("a").unwrap().rank < fs.standing("b").unwrap().rank);
    assert!(!fs.outranks("a", "b") && !fs.outranks("b", "a"));
    let p = Job::new(1, "a", "u").contract(H, false);
    let v = Job::new(2, "b", "v").contract(60, false).started(NOW - H);
    assert_eq!(may_preempt(&p, &v, &fs, NOW), Decision::No(Refusal::VictimTeamNotBelow));
    // Hierarchy: the decision is made where the paths part (programmes).
    let fs = World::new(100)
        .share("p1", None, 50.0)
        .share("p2", None, 50.0)
        .share("t1", Some("p1"), 100.0)
        .share("t2", Some("p2"), 100.0)
        .used("t1", "u", 500.0)
        .fs();
    assert!(fs.outranks("t2", "t1") && !fs.outranks("t1", "t2"));
    assert!(!fs.outranks("t1", "t1"));
    assert!(!fs.outranks("t2", "nope"));
}
