//! `explain` on the test bed's captured queue and on small queues: the
//! facts, and the text and JSON that say them.

use super::*;
use tally_allocator::priority::{NEED_NONE, NEED_OWED};
use tally_engine::view::JobView;

/// The test bed's queue at 1796308676 (captured with sinfo at the same
/// moment): alice's pretrain jobs hold all 32 GPUs inside their 2 h
/// contracts; carol's 8-GPU climate job 17 waits for resources.
const SQUEUE: &str = include_str!("../../tests/data/squeue-22.05.json");
const SINFO: &str = include_str!("../../tests/data/sinfo-22.05.json");
const NOW: u64 = 1_796_308_676;

fn setup() -> (Arc<Config>, Snapshot, Vec<QueueJob>, Vec<NodeInfo>) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/tally.toml")).unwrap();
    let text = text.replace("gpus = 256", "gpus = 32");
    let config = Config::parse(&text, "tally.toml").unwrap();
    let snapshot = Snapshot::new(config.new_ledger());
    let queue = slurm_json::parse_squeue(SQUEUE, &mut Names::new()).unwrap();
    (Arc::new(config), snapshot, queue, slurm_json::parse_sinfo(SINFO).unwrap())
}

fn report(which: &str) -> Report {
    let (config, snapshot, queue, nodes) = setup();
    explain(&config, &snapshot, &queue, &nodes, which, NOW).unwrap()
}

#[test]
fn an_unallocated_job_waits_behind_every_allocated_one() {
    let r = report("19");
    assert!(!r.job.allocated);
    assert!(r.job.unallocated_because.as_deref().unwrap().starts_with("contract 0"));
    let a = r.ahead.unwrap();
    // 17, 20, 25 and the array 24 are considered; 22 (dependency),
    // 23 (begin time) and 21 (held) are not.
    assert_eq!(a.count, 4);
    assert_eq!(a.first.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["17", "20", "25", "24_[1-3]"]);
    assert!(a.first.iter().all(|x| x.because == Some(Precedence::Tier)));
    assert_eq!(r.blocks, vec![Block::NoFreeGpus { free: 0, asked: 4 }]);
    assert!(r.preemption.unwrap().refused.unwrap().contains("unallocated jobs never preempt"));
}

#[test]
fn every_running_job_is_inside_its_contract() {
    let r = report("17");
    assert!(r.job.allocated);
    assert_eq!(r.ahead.as_ref().unwrap().count, 0);
    let p = r.preemption.unwrap();
    assert!(p.candidates.is_empty() && p.refused.is_none());
    assert_eq!(p.protected.iter().map(|v| v.id).collect::<Vec<_>>(), [13, 14, 15, 16, 18]);
    assert!(p.protected.iter().all(|v| v.why.starts_with("contract until ")), "{:?}", p.protected);
    let team = r.team.unwrap();
    assert_eq!((team.account.as_str(), team.now.running, team.now.demand), ("climate", 0.0, 8.0));
    assert_eq!(r.levels.iter().map(|l| l.account.as_str()).collect::<Vec<_>>(), ["climate", "science", "root"]);
}

#[test]
fn when_it_may_preempt_next_and_what_a_running_job_yields_to() {
    // As captured: alice's jobs cannot checkpoint and have no time limit
    // (long jobs): nobody ever takes them, and a requeue would lose 2 h.
    let r = report("13");
    let y = r.yields.as_ref().unwrap();
    assert_eq!((y.from, y.count), (NOW + 116 * 60 + 35, 0));
    assert!(y.note.as_deref().unwrap().starts_with("cannot checkpoint and may run longer than the contract maximum: nobody takes it past its contract (a requeue would throw away its 2h run)"), "{y:?}");
    assert!(y.loses_gpu_h > 0.0, "{y:?}");
    assert!(r.text().contains("Yields: once its contract ends, 2026-12-03 16:34 UTC (in 1h56m35s), to nothing waiting now"), "{}", r.text());
    assert!(report("17").preemption.unwrap().next.is_none(), "long jobs: no chance, ever");
    // Had they been resumable: carol's job 17 (climate, owed GPUs) may
    // take them when their contracts end, and each says so.
    let (config, snapshot, mut queue, nodes) = setup();
    for q in queue.iter_mut().filter(|q| q.view.user.as_ref() == "alice") {
        q.view.comment =
            q.view.comment.as_deref().map(|c| c.replace("contract=2h", "contract=2h,resumable").replace("contract=1h", "contract=1h,resumable"));
    }
    let r = explain(&config, &snapshot, &queue, &nodes, "17", NOW).unwrap();
    let n = r.preemption.as_ref().unwrap().next.as_ref().expect("a next chance");
    assert_eq!(n.at, NOW + 116 * 60 + 35, "job 18's 4 GPUs at 15:34 are not enough; the others' at 16:34 are");
    // Climate is owed 2.4 GPUs: two of pretrain's 8-GPU jobs may go
    // (cumulatively: pretrain keeps a higher share), highest id first.
    assert_eq!(n.victims, [15, 14]);
    let r = explain(&config, &snapshot, &queue, &nodes, "13", NOW).unwrap();
    let y = r.yields.as_ref().unwrap();
    let carol = y.to.iter().find(|v| v.id == 17).expect("job 17 among them");
    assert_eq!(carol.why, "its team is owed GPUs (restoration)");
    assert_eq!(y.loses_gpu_h, 0.0, "resumable: nothing lost");
    assert!(r.text().contains("as the queue stands; it loses nothing (resumable)"), "{}", r.text());
    // Job 22 waits on a dependency (slurmctld has set no begin time):
    // it waits for nothing yet and takes nothing.
    assert_eq!(y.to.iter().map(|v| v.id).collect::<Vec<_>>(), [17, 20], "{y:?}");
}

#[test]
fn why_the_others_are_ahead() {
    // The array's pretrain tasks: its team runs 8 GPUs above its rate,
    // posttrain's jobs are owed GPUs now.
    let r = report("24_2");
    let a = r.ahead.unwrap();
    let by = |n: &str| a.first.iter().find(|x| x.name == n).unwrap();
    assert_eq!(by("20").because, Some(Precedence::Need { first: NEED_OWED, second: NEED_NONE }));
    assert_eq!(
        by("20").words,
        "its team is owed GPUs now and yours is not: its team is short 2.9 GPUs (runs 0, rate 2.9) and it is first in its team's line for them; your team is not short (runs 32, rate 5.8)"
    );
    // Two posttrain jobs: the first of the team is ahead of the second.
    let r = report("25");
    let twenty = r.ahead.unwrap().first.into_iter().find(|x| x.name == "20").unwrap();
    assert!(twenty.words.starts_with("same team"), "{}", twenty.words);
}

#[test]
fn what_blocks_held_dependent_and_later_jobs() {
    assert!(matches!(report("21").blocks[0], Block::Held(ref r) if r == "JobHeldUser"));
    assert!(matches!(report("22").blocks[0], Block::Dependency(ref d) if d == "afterok:17(unfulfilled)"));
    assert!(matches!(report("23").blocks[0], Block::BeginTime(t) if t > NOW));
}

#[test]
fn fragmentation_and_whole_nodes() {
    let (config, snapshot, queue, mut nodes) = setup();
    // 4 GPUs free on each of two nodes: 8 in total, none with 8.
    nodes[0].gpus_used = 4;
    nodes[1].gpus_used = 4;
    let r = explain(&config, &snapshot, &queue, &nodes, "17", NOW).unwrap();
    assert_eq!(r.blocks, vec![Block::Fragmented { free: 8, largest: 4, asked: 8 }]);
    // Two whole nodes for job 25 (2 × 8): one is not enough.
    nodes[2].gpus_used = 0;
    let r = explain(&config, &snapshot, &queue, &nodes, "25", NOW).unwrap();
    assert_eq!(r.blocks, vec![Block::TooFewNodes { nodes: 2, per_node: 8, have: 1 }]);
    // A drained node gives nothing.
    nodes[2].flags.push("DRAIN".into());
    let r = explain(&config, &snapshot, &queue, &nodes, "17", NOW).unwrap();
    assert_eq!(r.blocks, vec![Block::Fragmented { free: 8, largest: 4, asked: 8 }]);
}

#[test]
fn the_start_estimate_replays_the_queue() {
    // Every running job has no time limit: each runs the default hour
    // from now or to the end of its contract, if later. The 8-GPU
    // pretrain jobs (13-15, a node each) started at 1_796_308_471 with
    // contract=2h: when the first node frees, 17 (climate, owed GPUs)
    // goes first.
    let f = report("17").forecast.unwrap().unwrap();
    assert_eq!(f.estimate, Estimate::StartsAt(1_796_308_471 + 2 * 3600));
    assert_eq!((f.default_duration_s, f.defaulted), (3600, 6));
    // Held and not-yet-eligible jobs get no estimate, and say why.
    assert!(report("21").forecast.unwrap().unwrap_err().starts_with("held"));
    assert!(report("23").forecast.unwrap().unwrap_err().starts_with("not eligible before"));
}

#[test]
fn unknown_jobs_are_said() {
    let (config, snapshot, queue, nodes) = setup();
    let err = explain(&config, &snapshot, &queue, &nodes, "99", NOW).unwrap_err();
    assert!(err.starts_with("job 99 is not in Slurm's queue"), "{err}");
    let err = explain(&config, &snapshot, &queue, &nodes, "abc", NOW).unwrap_err();
    assert!(err.contains("is not a job id"), "{err}");
    // The array 24 holds tasks 1-3 pending (24_2 is explained above): 24_7 is none of them.
    let err = explain(&config, &snapshot, &queue, &nodes, "24_7", NOW).unwrap_err();
    assert_eq!(err, "job 24_7: array 24 has no task 7 in Slurm's queue (its pending tasks are 24_[1-3]; ended tasks are in `sacct -j 24_7`)");
}

#[test]
fn array_task_strings() {
    for (spec, yes, no) in [("1-3", &[1, 2, 3][..], &[0, 4][..]), ("1,3,5-7", &[1, 3, 5, 7], &[2, 4, 8]), ("0-15:4%2", &[0, 4, 12], &[1, 15, 16])] {
        assert!(yes.iter().all(|&t| task_in(spec, t) == Some(true)), "{spec}");
        assert!(no.iter().all(|&t| task_in(spec, t) == Some(false)), "{spec}");
    }
    assert_eq!(task_in("", 1), None);
    assert_eq!(task_in("1-x", 1), None);
}

/// Two teams of rate 4 on 8 GPUs, nothing running. Team a waits with
/// three 2-GPU jobs (1, 2, 3, in its order), team b with two (4, 5,
/// submitted last). The walk gives a's first two jobs the 4 GPUs a is
/// short: job 3, a's third, is not owed GPUs now although its team is,
/// and b's jobs (owed: b is short 4 and its first two jobs ask for 2
/// and 4) go before it. Slurm's priorities are the walk's.
fn small_queue() -> (Arc<Config>, Snapshot, Vec<QueueJob>, Vec<NodeInfo>) {
    let text = "[cluster]\ngpus = 8\n[accounts.a]\nshare = 50\n[accounts.b]\nshare = 50\n[users]\nalice = \"a\"\nbob = \"b\"\n";
    let config = Arc::new(Config::parse(text, "tally.toml").unwrap());
    let snapshot = Snapshot::new(config.new_ledger());
    let job = |id: u32, user: &str, gpus: u32| QueueJob {
        view: JobView {
            account: Some(if user == "alice" { "a" } else { "b" }.into()),
            comment: Some("contract=1h".to_string()),
            partition: Some("gpu".into()),
            gpus,
            submit_s: NOW - 600 + u64::from(id),
            begin_s: NOW - 600 + u64::from(id),
            ..JobView::pending(id, user.into())
        },
        reason: "Priority".to_string(),
        state: "PENDING".to_string(),
        dependency: String::new(),
        reservation: String::new(),
        nodes_asked: 1,
        node_list: String::new(),
        array_tasks: String::new(),
        array_job_id: 0,
        array_task_id: None,
    };
    let mut queue = vec![job(1, "alice", 2), job(2, "alice", 2), job(3, "alice", 2), job(4, "bob", 2), job(5, "bob", 4)];
    let views: Vec<_> = queue.iter().map(|q| q.view.clone()).collect();
    let jobs = classify(&config, &views, &snapshot.runs, NOW, DEFAULT_PREEMPT_WINDOW_S);
    let ranking = rank(&config, &snapshot, &jobs, NOW);
    for q in queue.iter_mut() {
        q.view.priority = ranking.walked.get(q.view.job_id).expect("every job waits").priority.value;
    }
    let node = NodeInfo {
        name: "n1".to_string(),
        state: "allocated".to_string(),
        flags: Vec::new(),
        partitions: vec!["gpu".to_string()],
        gpus: 8,
        gpus_used: 8,
        reason: String::new(),
    };
    (config, snapshot, queue, vec![node])
}

#[test]
fn an_exclusive_job_is_classed_by_the_gpus_of_the_nodes_sinfo_shows() {
    // Team a's rate of 4 GPUs gives it a debug allowance of 4 GPUs; job 6
    // shows 2 GPUs and a 10-minute contract. (exclusive, GPUs of its
    // partition's nodes, in the debug lane?)
    for (exclusive, node_gpus, lane) in [(false, 8, true), (true, 8, false), (true, 2, true)] {
        let (config, snapshot, mut queue, mut nodes) = small_queue();
        let mut debug = queue[0].clone();
        debug.view = JobView { job_id: 6, comment: Some("contract=10m".into()), priority: 1, exclusive, ..debug.view };
        queue.push(debug);
        nodes[0].gpus = node_gpus;
        let r = explain(&config, &snapshot, &queue, &nodes, "6", NOW).unwrap();
        let need = tally_allocator::priority::decode(r.job.computed.unwrap_or(r.job.priority)).need;
        assert_eq!(need == tally_allocator::priority::NEED_LANE, lane, "exclusive {exclusive}, nodes of {node_gpus} GPUs");
    }
}

#[test]
fn a_team_owed_gpus_whose_earlier_jobs_claim_them() {
    let (config, snapshot, queue, nodes) = small_queue();
    let r = explain(&config, &snapshot, &queue, &nodes, "3", NOW).unwrap();
    let team = r.team.as_ref().unwrap();
    assert_eq!((team.now.rate, team.now.running, team.now.short()), (4.0, 0.0, 4.0));
    let place = team.place.as_ref().unwrap();
    assert_eq!(*place, TeamPlace { jobs_ahead: 2, gpus_ahead: 4.0, place: 3, team_jobs: 3, waits: true, need: NEED_NONE });
    assert_eq!(r.job.decoded.need, NEED_NONE);
    let text = r.text();
    assert!(
        text.contains(
            "  this job: 3rd of the team's 3 waiting jobs in the team's order (nice, then quick jobs, then submit time, then job id); \
             the 2 jobs ahead of it ask for 4 GPUs and claim the 4 GPUs the team is short first: it is not owed GPUs now\n"
        ),
        "{text}"
    );
    // Who is ahead and why: every owed job, a's and b's interleaved by
    // the share each would start at.
    let a = r.ahead.as_ref().unwrap();
    assert_eq!(a.first.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["1", "4", "2", "5"]);
    let by = |n: &str| a.first.iter().find(|x| x.name == n).unwrap();
    let yours = "your team is short 4 GPUs too (runs 0, rate 4.0), but its 2 waiting jobs ahead of this one in the team's order \
                 (nice, then quick jobs, then submit time, then job id) ask for 4 GPUs and claim them first: this job is 3rd in its team";
    assert_eq!(by("4").because, Some(Precedence::Need { first: NEED_OWED, second: NEED_NONE }));
    assert_eq!(
        by("4").words,
        format!("its team is owed GPUs now and yours is not: its team is short 4 GPUs (runs 0, rate 4.0) and it is first in its team's line for them; {yours}")
    );
    assert_eq!(
        by("5").words,
        format!(
            "its team is owed GPUs now and yours is not: its team is short 4 GPUs (runs 0, rate 4.0) and its team's jobs ahead of it \
             in the team's order (nice, then quick jobs, then submit time, then job id) ask for only 2 of them; {yours}"
        )
    );
    assert_eq!(by("5").team_gpus_ahead, Some(2.0));
    for x in [by("1"), by("2")] {
        assert!(x.words.starts_with("same team, earlier in the team's order"), "{}", x.words);
    }
    // Never "yours is not (runs 0, rate 4.0)" next to "short 4 GPUs: runs 0, rate 4.0".
    assert!(!text.contains("yours is not (runs"), "{text}");
    // The JSON says the same.
    let j = r.json();
    let p = &j["team"]["job_in_team"];
    assert_eq!((p["place_in_team"].as_u64(), p["jobs_ahead_in_team"].as_u64(), p["gpus_ahead_in_team"].as_f64()), (Some(3), Some(2), Some(4.0)));
    assert_eq!((p["owed_now"].as_bool(), p["team_waiting_jobs"].as_u64(), p["waits_now"].as_bool()), (Some(false), Some(3), Some(true)));
    assert_eq!(j["ahead"]["first"][1]["words"], by("4").words.as_str());
    assert_eq!(j["ahead"]["first"][3]["its_team_gpus_ahead"].as_f64(), Some(2.0));
}

#[test]
fn the_first_jobs_of_a_short_team_are_owed() {
    let (config, snapshot, queue, nodes) = small_queue();
    let r = explain(&config, &snapshot, &queue, &nodes, "2", NOW).unwrap();
    let place = r.team.as_ref().unwrap().place.clone().unwrap();
    assert_eq!(place, TeamPlace { jobs_ahead: 1, gpus_ahead: 2.0, place: 2, team_jobs: 3, waits: true, need: NEED_OWED });
    assert!(
        r.text().contains(
            "  this job: 2nd of the team's 3 waiting jobs in the team's order (nice, then quick jobs, then submit time, then job id); \
             the 1 job ahead of it asks for 2 GPUs, less than the 4 GPUs the team is short: it is owed GPUs now\n"
        ),
        "{}",
        r.text()
    );
    // A nicer job of a's comes first in a's order: job 3 at nice -10
    // takes a's shortfall before 1 and 2.
    let (config, snapshot, mut queue, nodes) = small_queue();
    queue[2].view.nice = -10;
    let r = explain(&config, &snapshot, &queue, &nodes, "3", NOW).unwrap();
    let place = r.team.unwrap().place.unwrap();
    assert_eq!((place.place, place.jobs_ahead, place.need), (1, 0, NEED_OWED));
    let r = explain(&config, &snapshot, &queue, &nodes, "2", NOW).unwrap();
    let place = r.team.unwrap().place.unwrap();
    assert_eq!((place.place, place.gpus_ahead, place.need), (3, 4.0, NEED_NONE));
}

#[test]
fn priorities_of_the_last_re_ranking_are_said_as_such() {
    // Since the re-ranking, a 4-GPU job of b's started: b is no longer
    // short, though its waiting jobs' priorities still say it is owed.
    let (config, snapshot, mut queue, nodes) = small_queue();
    let mut started = queue[4].clone();
    started.view = JobView { job_id: 6, state: RunState::Running, start_s: NOW - 60, ..started.view };
    started.state = "RUNNING".to_string();
    queue.push(started);
    let r = explain(&config, &snapshot, &queue, &nodes, "3", NOW).unwrap();
    let four = r.ahead.unwrap().first.into_iter().find(|x| x.name == "4").unwrap();
    assert_eq!(
        four.words,
        "at the last re-ranking its team was owed GPUs and yours was not (Slurm holds the priorities Tally gave then; \
         Tally re-ranks every calc_period and the queue has changed since)"
    );
}

#[test]
fn a_command_that_fails_is_the_refusal_with_what_it_said() {
    let err =
        run_reading(&["sh", "-c", "echo '{\"jobs\": []}'; echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1"], |out| {
            slurm_json::read_squeue(out, &mut Names::new())
        })
        .unwrap_err();
    assert!(err.starts_with("sh -c"), "{err}");
    assert!(err.contains("failed (exit status: 1): slurm_load_jobs error: Unable to contact slurm controller"), "{err}");
}

#[test]
fn output_left_unread_ends_the_command_instead_of_blocking() {
    // `yes` never ends: the reader stops at the first line, and the closed
    // pipe ends the command; the reader's refusal is what is said.
    let err = run_reading(&["yes", "not json"], |out| slurm_json::read_squeue(out, &mut Names::new())).unwrap_err();
    assert!(err.starts_with("squeue --json: not JSON"), "{err}");
    let ok = run_reading(&["printf", "{\"jobs\": []}"], |out| slurm_json::read_squeue(out, &mut Names::new())).unwrap();
    assert!(ok.is_empty());
}
#[test]
fn a_long_job_that_cannot_checkpoint_says_why_tally_holds_it() {
    // The array's pretrain task 24_2 (its team 8 GPUs above its rate,
    // posttrain owed), made a job that cannot checkpoint with no time limit.
    let (config, snapshot, mut queue, nodes) = setup();
    let at = queue.iter().position(|q| std::ptr::eq(q, find(&queue, "24_2").unwrap())).unwrap();
    queue[at].view.comment = Some("contract=1h".into());
    queue[at].view.time_limit_s = None;
    let r = explain(&config, &snapshot, &queue, &nodes, "24_2", NOW).unwrap();
    match &r.blocks[0] {
        Block::LongJob { running, fair, short_team, short } => {
            assert!(running >= fair && *short > 0.0, "{:?}", r.blocks[0]);
            assert_eq!(short_team, "posttrain");
        }
        other => panic!("not held: {other:?}"),
    }
    assert!(r.text().contains("held by Tally (Slurm shows Reason=BeginTime)"), "{}", r.text());
    // Resumable, the same job is not held.
    queue[at].view.comment = Some("contract=1h,resumable".into());
    let r = explain(&config, &snapshot, &queue, &nodes, "24_2", NOW).unwrap();
    assert!(!r.blocks.iter().any(|b| matches!(b, Block::LongJob { .. })), "{:?}", r.blocks);
}
