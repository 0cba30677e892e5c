//! One test per transition of preempt/tally's state ([`Snapshot`],
//! [`NoteBook`]), on a copy built here as the plugin's thread builds it.

use super::*;
use crate::engine::allocation_at;
use crate::fixtures::{job, running, T0, TWO_TEAMS};
use crate::view::NodeState;
use std::cell::Cell;
use tally_allocator::{Contract, Inventory, RunRecord, Weight};

/// 16 GPUs on two nodes of 8; teams a and b with 8 GPUs each.
const CONFIG: &str = TWO_TEAMS;

fn node(index: u32) -> NodeView {
    NodeView {
        index,
        name: format!("n{index}").into(),
        gpus: vec![(None, 8)],
        state: NodeState::default(),
        reason: None,
        partitions: vec!["gpu".into()],
    }
}

/// Running for the last hour on `node`.
fn on(v: JobView, node: u32) -> Placed {
    Placed { view: running(v, T0 - 3600), nodes: vec![node] }
}

fn waiting(v: JobView) -> Placed {
    Placed { view: v, nodes: Vec::new() }
}

/// b runs 14 GPUs, 12 of them allocated (above its 8); a runs nothing and
/// waits with jobs 1 and 2 (4 GPUs each). Node 0 has 2 GPUs free.
///
/// - 10: b's unallocated job (2 GPUs, node 0)
/// - 11: b's job inside its 8 h contract (4 GPUs, node 1)
/// - 12, 13: b's resumable jobs past their contracts (4 GPUs, nodes 0, 1)
fn copy_at(t: u64, runs: &RunBook) -> Snapshot {
    let config = Arc::new(Config::parse(CONFIG, "test.toml").unwrap());
    let alloc = allocation_at(&config, &Inventory::default());
    Snapshot::from_copy(config, &alloc, runs, &JobsCopy::new(jobs(), vec![node(0), node(1)]), 0, t)
}

fn jobs() -> Vec<Placed> {
    vec![
        on(job(10, "b", "", 2), 0),
        on(job(11, "b", "contract=8h", 4), 1),
        on(job(12, "b", "contract=1m,resumable", 4), 0),
        on(job(13, "b", "contract=1m,resumable", 4), 1),
        waiting(job(1, "a", "contract=1h", 4)),
        waiting(job(2, "a", "contract=1h", 4)),
    ]
}

fn copy() -> Snapshot {
    copy_at(T0, &RunBook::new())
}

/// The record of a preemptor the copy has (never read on the call).
fn unread() -> Option<JobView> {
    panic!("the preemptor's record was read though the copy has it")
}

fn victims_of(s: &mut Snapshot, p: u32, t: u64) -> Vec<u32> {
    [10, 11, 12, 13].into_iter().filter(|&v| s.may_preempt(v, p, &|| Some(job(p, "a", "contract=1h", 4)), t)).collect()
}

#[test]
fn answer_computed_once_per_copy() {
    let mut s = copy();
    let reads = Cell::new(0);
    let record = || {
        reads.set(reads.get() + 1);
        Some(job(1, "a", "contract=1h", 4))
    };
    // a is owed 8 GPUs: b's unallocated job, and one resumable job past its
    // contract (b stays at its rate), never the one inside its contract.
    assert!(s.may_preempt(10, 1, &record, T0));
    assert!(s.may_preempt(13, 1, &record, T0));
    assert!(!s.may_preempt(11, 1, &record, T0), "never inside a contract");
    assert!(!s.may_preempt(12, 1, &record, T0), "b would fall below its rate");
    assert_eq!(s.answers[&1], vec![10, 13]);
    // The record was read once (for the victim order's GPUs), as the
    // preemptor asked last; never converted: the copy has it.
    assert_eq!(reads.get(), 1);
    assert_eq!(s.last_preemptor, Some((1, 4)));
}

#[test]
fn claim_a_second_preemptor_assumes_the_first_ones_victims_gone() {
    let mut s = copy();
    assert_eq!(victims_of(&mut s, 1, T0), vec![10, 13]);
    // 13 is claimed: b is at its rate (8 allocated), a runs job 1's 4 GPUs.
    assert!(s.claimed.contains(&13) && !s.claimed.contains(&10), "unallocated victims are never claimed");
    assert_eq!(victims_of(&mut s, 2, T0), vec![10], "taking 12 too would leave b 4 of its 8");
    // Asked alone, job 2 would have had 13.
    assert_eq!(victims_of(&mut copy(), 2, T0), vec![10, 13]);
}

#[test]
fn offer_remembered_for_the_note_across_copies() {
    let mut s = copy();
    assert!(s.may_preempt(13, 1, &unread_after_first(), T0));
    let victim = on(job(13, "b", "contract=1m,resumable", 4), 1).view;
    let why = s.why(&victim, T0 + 5);
    assert_eq!(why.reason, Some(PreemptReason::Restore));
    assert_eq!(why.contract_left_s, 0);
    assert_eq!(why.lost_gpu_s, 0, "a resumable job loses no work");
    // The next copies keep the offer for a minute, then forget it.
    let mut next = copy_at(T0 + 30, &RunBook::new());
    next.carry_offers(Some(s), T0 + 30);
    assert_eq!(next.why(&victim, T0 + 30).reason, Some(PreemptReason::Restore));
    let mut later = copy_at(T0 + OFFERED_KEEP_S, &RunBook::new());
    later.carry_offers(Some(next), T0 + OFFERED_KEEP_S);
    assert_eq!(later.why(&victim, T0 + OFFERED_KEEP_S).reason, None, "not offered lately: another preemption path");
    // A job outside the copy is converted for its note: inside its contract.
    let stranger = on(job(77, "b", "contract=8h", 2), 0).view;
    let w = later.why(&stranger, T0);
    assert_eq!(w.contract_left_s, 7 * 3600);
    assert_eq!(w.lost_gpu_s, 2 * 3600);
}

/// A record read at most once (the preemptor asked last).
fn unread_after_first() -> impl Fn() -> Option<JobView> {
    let first = Cell::new(true);
    move || {
        if first.replace(false) {
            Some(job(1, "a", "contract=1h", 4))
        } else {
            unread()
        }
    }
}

#[test]
fn stale_copy_answers_only_for_unallocated_victims() {
    let mut s = copy();
    let t = T0 + STALE_S + 1;
    let record = || Some(job(1, "a", "contract=1h", 4));
    assert!(!s.may_preempt(13, 1, &record, t), "the restorative rule needs a fresh count");
    assert!(s.may_preempt(10, 1, &record, t));
    assert_eq!(s.offered[&10], (PreemptReason::Unallocated, t));
    // Answers given while fresh are not reused once stale.
    let mut s = copy();
    assert!(s.may_preempt(13, 1, &record, T0));
    assert!(!s.may_preempt(13, 1, &record, t));
    // At STALE_S exactly, still fresh.
    assert!(copy().may_preempt(13, 1, &record, T0 + STALE_S));
    // An unallocated preemptor preempts nobody, stale or not.
    let free_rider = || Some(job(5, "a", "contract=0", 2));
    assert!(!copy().may_preempt(10, 5, &free_rider, t));
    assert!(!copy().may_preempt(10, 5, &free_rider, T0));
}

#[test]
fn a_job_submitted_after_the_copy_is_read_on_the_call() {
    let mut s = copy();
    let reads = Cell::new(0);
    let record = || {
        reads.set(reads.get() + 1);
        Some(job(99, "a", "contract=1h", 2))
    };
    assert!(s.may_preempt(10, 99, &record, T0));
    assert_eq!(reads.get(), 2, "once for its GPUs, once converted");
    assert_eq!(s.last_preemptor, Some((99, 2)));
    assert!(s.answers.contains_key(&99));
    // Gone from Slurm by the call: no record, no.
    assert!(!copy().may_preempt(10, 98, &|| None, T0));
}

#[test]
fn victim_order_places_the_offered_first() {
    let mut s = copy();
    assert_eq!(victims_of(&mut s, 1, T0), vec![10, 13]);
    assert_eq!(s.victim_order(10, T0), 0);
    assert_eq!(s.victim_order(13, T0), 1);
    let (inside, behind) = (s.victim_order(11, T0), s.victim_order(12, T0));
    assert!(inside >= OFFERED_MAX && behind >= OFFERED_MAX, "not offered: after those offered ({inside}, {behind})");
    assert!(behind < inside, "a resumable job past its contract before one inside it");
    assert_eq!(s.victim_order(4242, T0), u32::MAX, "not in the copy: last");
    // Before any question: by victim rank alone.
    let fresh = copy();
    assert!(fresh.victim_order(10, T0) >= OFFERED_MAX);
    assert!(fresh.victim_order(10, T0) < fresh.victim_order(12, T0), "unallocated before resumable");
}

#[test]
fn notes_taken_on_the_call_and_written_by_the_thread() {
    let mut book = NoteBook::new(Notes::new(), Some(PathBuf::from("/nonexistent/preempted.state")));
    assert!(book.take_unsaved().is_none(), "nothing new: no write");
    let victim = on(job(13, "b", "contract=1m,resumable", 4), 1).view;
    book.note(&victim, None, T0);
    let (_, notes) = book.take_unsaved().expect("a new note is written");
    assert_eq!(notes.len(), 1);
    assert!(book.take_unsaved().is_none(), "written once");
    // A failed write leaves the book to write again; a note of the other
    // controller's file comes in.
    let mut theirs = Notes::new();
    theirs.note(Note { job_id: 40, run_start_s: T0 - 100, at_s: T0 - 50, why: None });
    let mut merged = notes.clone();
    merged.merge(&theirs);
    assert_eq!(book.written(&merged, false, T0), 1);
    assert_eq!(book.notes().len(), 2);
    assert!(book.take_unsaved().is_some(), "the failed write is retried");
    // Without a StateSaveLocation: noted, never written.
    let mut memory = NoteBook::new(Notes::new(), None);
    memory.note(&victim, None, T0);
    assert!(memory.take_unsaved().is_none());
    assert_eq!(memory.notes().len(), 1);
}

#[test]
fn save_notes_merges_with_the_file() {
    let dir = std::env::temp_dir().join(format!("tally-arbiter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(preempted::FILE_NAME);
    // The other controller's note on disk.
    let mut theirs = Notes::new();
    theirs.note(Note { job_id: 40, run_start_s: T0 - 100, at_s: T0 - 50, why: None });
    preempted::save(&path, &theirs).unwrap();
    let book = Mutex::new(Some(NoteBook::new(Notes::new(), Some(path.clone()))));
    save_notes(&book, T0);
    assert_eq!(preempted::load(&path).unwrap().len(), 1, "nothing new: the file is not written");
    lock(&book).as_mut().unwrap().note(&on(job(13, "b", "", 4), 1).view, None, T0);
    save_notes(&book, T0);
    let on_disk = preempted::load(&path).unwrap();
    assert_eq!(on_disk.len(), 2, "ours and theirs");
    assert_eq!(lock(&book).as_ref().unwrap().notes(), &on_disk);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn runs_with_notes_protect_the_next_run() {
    let mut runs = RunBook::new();
    runs.insert(
        13,
        RunRecord {
            start_s: T0 - 3600,
            charged_s: 3600,
            seen_s: T0,
            active: true,
            account: "b".into(),
            user: "user-b".into(),
            gpus: 4,
            weight: Weight::ONE,
            contract: Contract::new(60, true),
            earlier_s: 0,
            prev_start_s: 0,
            preempted_run_s: 0,
        },
    );
    let runs = Arc::new(runs);
    let note = Note { job_id: 13, run_start_s: T0 - 3600, at_s: T0, why: None };
    let with = with_notes(runs.clone(), &[note]);
    assert_eq!(with.get(13).unwrap().preempted_run_s, T0 - 3600);
    // Already taken in: the same book, not a copy.
    assert!(Arc::ptr_eq(&with_notes(with.clone(), &[note]), &with));
    // A note of a job without a record changes nothing.
    let other = Note { job_id: 14, ..note };
    assert!(Arc::ptr_eq(&with_notes(runs.clone(), &[other]), &runs));
}

#[test]
fn copy_clock_copies_again_only_when_a_job_changed_or_the_copy_aged() {
    let t = T0 as i64;
    let mut clock = CopyClock::default();
    assert!(clock.due(t - 100, T0), "no copy yet");
    clock.copied(t - 100, T0);
    assert!(!clock.due(t - 100, T0 + 1), "nothing changed since");
    assert!(clock.due(t + 1, T0 + 1), "a job changed after the copy");
    assert!(clock.due(t - 100, T0 + MAX_COPY_AGE_S), "the copy aged");
    assert!(!clock.due(t - 100, T0 + MAX_COPY_AGE_S - 1));
    // A change in the very second of the copy: another one later in that
    // second would leave last_job_update as it was, so copy again.
    clock.copied(t, T0);
    assert!(clock.due(t, T0 + 1));
    // A clock stepped back is no reason to stop copying for long.
    clock.copied(t - 100, T0);
    assert!(!clock.due(t - 100, T0 - 5));
}

#[test]
fn a_reused_copy_is_judged_at_the_time_of_the_rebuild() {
    // The copy of the jobs at T0, rebuilt a second later: the claims of the
    // first second are gone, the answers computed again.
    let config = Arc::new(Config::parse(CONFIG, "test.toml").unwrap());
    let alloc = allocation_at(&config, &Inventory::default());
    // Job 2 becomes eligible at T0 + 5 (its begin time): it counts as
    // waiting only from then.
    let mut jobs = jobs();
    jobs[5].view.begin_s = T0 + 5;
    let copy = JobsCopy::new(jobs, vec![node(0), node(1)]);
    let mut first = Snapshot::from_copy(config.clone(), &alloc, &RunBook::new(), &copy, 0, T0);
    assert!(first.may_preempt(13, 1, &unread_after_first(), T0));
    assert!(first.claimed.contains(&13));
    let again = Snapshot::from_copy(config.clone(), &alloc, &RunBook::new(), &copy, 0, T0 + 10);
    assert!(again.claimed.is_empty() && again.answers.is_empty(), "a rebuild starts its claims afresh");
    assert_eq!(first.ent.team("a").unwrap().demand, 4.0);
    assert_eq!(again.ent.team("a").unwrap().demand, 8.0, "job 2's begin time was reached: a waits for more");
}

/// The basis of [`copy_at`]'s snapshots with `copy` the copy's number.
fn basis(config: &Arc<Config>, alloc: &Arc<Allocation>, runs: &Arc<RunBook>, copy: u64) -> Basis {
    Basis { config: config.clone(), alloc: alloc.clone(), runs: runs.clone(), notes: Vec::new(), preempt_window_s: 0, copy }
}

#[test]
fn a_renewed_snapshot_answers_as_one_built_anew() {
    let config = Arc::new(Config::parse(CONFIG, "test.toml").unwrap());
    let alloc = Arc::new(allocation_at(&config, &Inventory::default()));
    let runs = Arc::new(RunBook::new());
    let copy = JobsCopy::new(jobs(), vec![node(0), node(1)]);
    let b = basis(&config, &alloc, &runs, 1);
    let mut kept = Snapshot::from_copy(config.clone(), &alloc, &runs, &copy, 0, T0).with_basis(b.clone());
    assert_eq!(victims_of(&mut kept, 1, T0), vec![10, 13]);
    assert!(kept.claimed.contains(&13));
    // A second later, nothing it was built from changed: renewed, it is the
    // snapshot a rebuild would give (claims, answers, entitlement).
    assert!(kept.reusable(&b, T0 + 1));
    kept.renew(T0 + 1);
    let mut anew = Snapshot::from_copy(config.clone(), &alloc, &runs, &copy, 0, T0 + 1);
    anew.carry_offers(None, T0 + 1);
    assert!(kept.claimed.is_empty() && kept.answers.is_empty() && kept.last_preemptor.is_none());
    assert_eq!(kept.ent, anew.ent, "the claims of the last second are undone");
    assert_eq!(kept.taken_at, anew.taken_at);
    assert_eq!(victims_of(&mut kept, 2, T0 + 1), victims_of(&mut anew, 2, T0 + 1));
    assert_eq!(kept.ent, anew.ent);
    // The offer of the first second is still remembered, for a minute.
    assert_eq!(kept.offered.get(&13).map(|&(r, _)| r), Some(PreemptReason::Restore));
    kept.renew(T0 + OFFERED_KEEP_S);
    assert!(!kept.offered.contains_key(&13) || kept.offered[&13].1 > T0, "offers older than a minute are forgotten");
}

#[test]
fn a_snapshot_is_reused_only_on_its_basis_and_before_a_standing_changes() {
    let config = Arc::new(Config::parse(CONFIG, "test.toml").unwrap());
    let alloc = Arc::new(allocation_at(&config, &Inventory::default()));
    let runs = Arc::new(RunBook::new());
    // Job 2 waits from T0 + 5 (its begin time).
    let mut jobs = jobs();
    jobs[5].view.begin_s = T0 + 5;
    let copy = JobsCopy::new(jobs, vec![node(0), node(1)]);
    let b = basis(&config, &alloc, &runs, 7);
    let kept = Snapshot::from_copy(config.clone(), &alloc, &runs, &copy, 0, T0).with_basis(b.clone());
    assert_eq!(kept.valid_until(), T0 + 5);
    assert!(kept.reusable(&b, T0 + 4));
    assert!(!kept.reusable(&b, T0 + 5), "job 2's begin time is reached: a waits for more");
    assert!(!kept.reusable(&b, T0 - 1), "a clock stepped back");
    assert!(!kept.reusable(&basis(&config, &alloc, &runs, 8), T0 + 1), "another copy");
    let same_text = Arc::new(Config::parse(CONFIG, "test.toml").unwrap());
    assert!(!kept.reusable(&basis(&same_text, &alloc, &runs, 7), T0 + 1), "a config reloaded");
    assert!(!kept.reusable(&basis(&config, &Arc::new(allocation_at(&config, &Inventory::default())), &runs, 7), T0 + 1), "another allocation");
    assert!(!kept.reusable(&basis(&config, &alloc, &Arc::new(RunBook::new()), 7), T0 + 1), "the ledger read again");
    let note = Note { job_id: 12, run_start_s: T0 - 3600, at_s: T0, why: None };
    assert!(!kept.reusable(&Basis { notes: vec![note], ..b.clone() }, T0 + 1), "a run noted as preempted");
    assert!(!kept.reusable(&Basis { preempt_window_s: 60, ..b.clone() }, T0 + 1), "another preemption window");
    // A snapshot built without a basis is never reused.
    assert!(!Snapshot::from_copy(config.clone(), &alloc, &runs, &copy, 0, T0).reusable(&b, T0 + 1));
}

/// [`standing_changes_after`] against the rule it stands for: until then,
/// `counted` says of every job what it says at `t`.
#[test]
fn standing_changes_after_is_when_counted_changes() {
    use crate::engine::counted;
    let window = 30;
    let mut views = Vec::new();
    for (i, (begin, preempt)) in [(0, 0), (5, 0), (12, 0), (0, 3), (0, 20), (7, 9)].into_iter().enumerate() {
        let mut v = job(100 + i as u32, "a", "", 1);
        v.begin_s = T0 + begin;
        v.preempt_start_s = if preempt > 0 { T0 - window + preempt } else { 0 };
        views.push(v);
    }
    views.push(running(job(200, "b", "", 1), T0 - 60));
    for t in T0..T0 + 25 {
        let until = standing_changes_after(&views, t, window);
        let at_t: Vec<_> = views.iter().map(|v| counted(v, t, window)).collect();
        for t2 in t..until.min(T0 + 40) {
            let at_t2: Vec<_> = views.iter().map(|v| counted(v, t2, window)).collect();
            assert_eq!(at_t, at_t2, "counted changed at {} before {until} (from {})", t2 - T0, t - T0);
        }
    }
    // Not every second: the next begin time or window end, then never.
    assert_eq!(standing_changes_after(&views, T0, window), T0 + 3);
    assert_eq!(standing_changes_after(&views, T0 + 12, window), T0 + 20);
    assert_eq!(standing_changes_after(&views, T0 + 20, window), u64::MAX);
}
