//! Jobs that cannot checkpoint: never requeued past their contract (debug
//! and unallocated work aside), and a long one held at the start where it
//! would hold GPUs another team is owed ([`long_start`]). The table of
//! docs/design.md, "Jobs that cannot checkpoint".

mod common;
use common::*;
use tally_allocator::*;

/// Two teams of 16 GPUs each on 32.
fn world() -> World {
    World::new(32).share("a", None, 50.0).share("b", None, 50.0)
}

#[test]
fn who_may_take_a_job_that_cannot_checkpoint() {
    let w = world();
    // a runs 24 GPUs (8 above its rate of 16); b (owed 16) waits.
    let p_b = Job::new(100, "b", "u").gpus(8).contract(HOUR_S, false).submitted(NOW);
    let debug_b = Job::new(101, "b", "u").gpus(1).contract(10 * MINUTE_S, false).submitted(NOW);
    let quick_a = Job::new(102, "a", "u").gpus(1).contract(10 * MINUTE_S, false).submitted(NOW);
    let limited = |id, ran| running(id, "a", 8, HOUR_S, false, ran).time_limit(4 * HOUR_S);
    let cases: Vec<(&str, &Job, Job, Decision)> = vec![
        (
            "restoration: not a job that cannot checkpoint, however long it ran",
            &p_b,
            running(1, "a", 8, HOUR_S, false, 9 * HOUR_S),
            Decision::No(Refusal::LongJob { ran_s: 9 * HOUR_S }),
        ),
        ("nor one with a time limit within the maximum", &p_b, limited(2, 2 * HOUR_S), Decision::No(Refusal::NotResumable { ran_s: 2 * HOUR_S })),
        (
            "another team's debug job does not time-slice it",
            &debug_b,
            limited(3, 2 * HOUR_S),
            Decision::No(Refusal::NotResumable { ran_s: 2 * HOUR_S }),
        ),
        ("nor does its own team's", &quick_a, limited(4, 2 * HOUR_S), Decision::No(Refusal::NotResumable { ran_s: 2 * HOUR_S })),
        ("inside its contract: the contract says", &p_b, limited(5, HOUR_S - 60), Decision::No(Refusal::InsideContract(60))),
        (
            "resumable, past its contract: taken",
            &p_b,
            running(6, "a", 8, HOUR_S, true, 2 * HOUR_S),
            Decision::Yes(VictimClass::PastContractResumable),
        ),
        ("unallocated: taken, even if it cannot checkpoint", &p_b, running(7, "a", 8, 0, false, 2 * HOUR_S), Decision::Yes(VictimClass::Unallocated)),
        (
            "a debug job past its short contract: taken (it promised to be done)",
            &p_b,
            running(8, "a", 1, 10 * MINUTE_S, false, HOUR_S),
            Decision::Yes(VictimClass::PastContract),
        ),
    ];
    for (what, p, v, want) in cases {
        // a: 16 GPUs of resumable work inside its contract besides the victim.
        let others: Vec<Job> = (0..2).map(|k| running(50 + k, "a", 8, 8 * HOUR_S, true, 60)).collect();
        let mut jobs = others.clone();
        jobs.push(v.clone());
        jobs.push(p.clone());
        let ent = w.ent(&jobs);
        assert_eq!(may_preempt(p, &v, &moment(&ent)), want, "{what}");
        let pool = VictimPool::new(jobs.iter().enumerate(), &moment(&ent));
        let taken = pool.for_preemptor(p, &moment(&ent)).contains(&(jobs.len() - 2));
        assert_eq!(taken, want.allowed(), "{what}: the pool agrees");
    }
}

#[test]
fn a_long_job_that_cannot_checkpoint_starts_on_its_fair_share_or_on_gpus_nobody_asks_for() {
    let w = world();
    let long = |id, acct: &str| Job::new(id, acct, "u").gpus(4).contract(HOUR_S, false).submitted(NOW);
    // a runs `a_gpus` and waits with the job asked about; b waits for `b_waits`.
    let at = |job: &Job, a_gpus: u32, b_waits: u32| {
        let mut jobs: Vec<Job> = (0..a_gpus / 4).map(|k| running(10 + u64::from(k), "a", 4, HOUR_S, true, 60)).collect();
        jobs.push(job.clone());
        if b_waits > 0 {
            jobs.push(Job::new(90, "b", "u").gpus(b_waits).contract(HOUR_S, false).submitted(NOW));
        }
        long_start(job, &w.ent(&jobs), 0.0, &RULES, &CONTRACTS)
    };
    let held = |job: &Job, a_gpus, b_waits| matches!(at(job, a_gpus, b_waits), LongStart::Held { .. });
    let j = long(1, "a");
    // a below its rate (12 of 16): it starts, b waiting or not.
    assert!(!held(&j, 12, 16));
    // a at its rate, b idle: nobody asks for these GPUs.
    assert!(!held(&j, 16, 0));
    // a at its rate, b asks for 8 of its 16: 12 GPUs are free, the job
    // and b's both fit (a's fair share is all it asks, 20).
    assert!(!held(&j, 16, 8));
    // a at its fair share (24 running, b asks for 8): held, and it says who waits.
    match at(&j, 24, 8) {
        LongStart::Held { running, fair, short_team, short } => {
            assert_eq!((running, fair, short), (24.0, 24.0, 8.0));
            assert_eq!(w.ent(&[]).name_at(short_team), "b");
        }
        other => panic!("not held: {other:?}"),
    }
    // b asks for its whole rate: a's fair share is its rate.
    assert!(held(&j, 16, 16));
    // Its team's long jobs let go ahead of it count.
    let mut jobs: Vec<Job> = (0..3).map(|k| running(10 + k, "a", 4, HOUR_S, true, 60)).collect();
    jobs.push(j.clone());
    jobs.push(Job::new(90, "b", "u").gpus(16).contract(HOUR_S, false).submitted(NOW));
    let ent = w.ent(&jobs);
    assert!(matches!(long_start(&j, &ent, 0.0, &RULES, &CONTRACTS), LongStart::Free));
    assert!(matches!(long_start(&j, &ent, 4.0, &RULES, &CONTRACTS), LongStart::Held { .. }));
    // Not long (a time limit within the maximum), resumable, debug or
    // unallocated: never held; a time limit above the maximum is long.
    assert!(!held(&long(1, "a").time_limit(8 * HOUR_S), 24, 16));
    assert!(!held(&Job::new(2, "a", "u").gpus(4).contract(HOUR_S, true).submitted(NOW), 24, 16));
    assert!(!held(&Job::new(3, "a", "u").gpus(1).contract(10 * MINUTE_S, false).submitted(NOW), 24, 16));
    assert!(!held(&Job::new(4, "a", "u").gpus(4).submitted(NOW), 24, 16));
    assert!(held(&long(1, "a").time_limit(9 * HOUR_S), 24, 16));
}
