//! priority/tally's threads against a job list in memory ([`FakeSlurm`]):
//! one test per step of the tick, the reload and the planner's round.

use super::*;
use crate::fixtures::{job, running, T0, TWO_TEAMS};
use crate::view::{NodeState, RunState};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Two teams on two nodes of 8 GPUs.
const CONFIG: &str = TWO_TEAMS;

/// One write of priorities and begin times (job id → value).
type Write = (HashMap<u32, u32>, HashMap<u32, u64>);

/// slurmctld's job list and nodes, and what the threads did to them.
#[derive(Debug, Default)]
struct FakeSlurm {
    jobs: Mutex<Vec<JobView>>,
    on_draining: Vec<(u32, Vec<Arc<str>>)>,
    copies: AtomicUsize,
    written: Mutex<Vec<Write>>,
    requeued: Mutex<Vec<u32>>,
}

impl FakeSlurm {
    fn with(jobs: Vec<JobView>) -> FakeSlurm {
        FakeSlurm { jobs: Mutex::new(jobs), ..FakeSlurm::default() }
    }

    fn nodes() -> Vec<NodeView> {
        (0..2)
            .map(|i| NodeView {
                index: i,
                name: format!("n{i}").into(),
                gpus: vec![(None, 8)],
                state: NodeState::default(),
                reason: None,
                partitions: vec!["gpu".into()],
            })
            .collect()
    }

    fn last_priorities(&self) -> HashMap<u32, u32> {
        lock(&self.written).last().map(|w| w.0.clone()).unwrap_or_default()
    }
}

impl Controller for FakeSlurm {
    fn copy_jobs_and_nodes(&self) -> Copied<JobView> {
        self.copies.fetch_add(1, Ordering::SeqCst);
        Copied { jobs: lock(&self.jobs).clone(), nodes: FakeSlurm::nodes(), on_draining: self.on_draining.clone(), ..Copied::default() }
    }

    fn copy_placed(&self) -> Copied<Placed> {
        self.copies.fetch_add(1, Ordering::SeqCst);
        let jobs =
            lock(&self.jobs).iter().map(|v| Placed { view: v.clone(), nodes: if v.state == RunState::Running { vec![0] } else { vec![] } }).collect();
        Copied { jobs, nodes: FakeSlurm::nodes(), ..Copied::default() }
    }

    fn write_priorities(&self, changes: &HashMap<u32, u32>, begins: &HashMap<u32, u64>, _now: u64) -> Written {
        if changes.is_empty() && begins.is_empty() {
            return Written::default();
        }
        lock(&self.written).push((changes.clone(), begins.clone()));
        // As slurmctld's job list takes them.
        for v in lock(&self.jobs).iter_mut().filter(|v| v.state == RunState::Pending) {
            v.priority = changes.get(&v.job_id).copied().unwrap_or(v.priority);
            v.begin_s = begins.get(&v.job_id).copied().unwrap_or(v.begin_s);
        }
        Written { count: changes.len() + begins.len(), ..Written::default() }
    }

    fn requeue(&self, ids: &[u32]) -> Vec<(u32, i32)> {
        lock(&self.requeued).extend(ids);
        ids.iter().map(|&id| (id, 0)).collect()
    }
}

/// A directory with `tally.toml` (when `config` is given) and the ledger's
/// place in it.
struct Site {
    dir: PathBuf,
    config: PathBuf,
    ledger: PathBuf,
}

impl Site {
    fn new(name: &str, config: Option<&str>) -> Site {
        let dir = std::env::temp_dir().join(format!("tally-recalc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let site = Site { config: dir.join("tally.toml"), ledger: statefile::path_in(&dir), dir };
        std::fs::create_dir_all(site.ledger.parent().unwrap()).unwrap();
        if let Some(text) = config {
            std::fs::write(&site.config, text).unwrap();
        }
        site
    }

    fn recalc(&self) -> (Recalc, &'static Boards) {
        let boards: &'static Boards = Box::leak(Box::new(Boards::new()));
        let euid = std::fs::metadata(&self.dir).map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap();
        (Recalc::new(self.config.clone(), Some(self.ledger.clone()), euid, 0, boards), boards)
    }

    /// GPU-hours charged per account in the ledger on disk at `t`.
    fn charged(&self, t: u64) -> HashMap<String, f64> {
        let Loaded::Ok { snapshot, .. } = statefile::load(&self.ledger, 3600, tally_allocator::WEEK_S, t, 0) else { panic!("no ledger") };
        snapshot.ledger.usage(t).by_account.into_iter().map(|(a, s)| (a, s / 3600.0)).collect()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_tick_charges_ranks_writes_and_saves() {
    let site = Site::new("tick", Some(CONFIG));
    let (recalc, boards) = site.recalc();
    recalc.begin(T0);
    assert!(boards.ranking().is_some(), "the ranking is published at start");
    assert_eq!(std::fs::read_to_string(follower::active_path(&site.ledger)).unwrap(), CONFIG, "the active copy for the other plugins");
    let slurm = FakeSlurm::with(vec![running(job(1, "a", "contract=1h", 4), T0), job(2, "a", "contract=1h", 2), job(3, "b", "contract=1h", 2)]);
    recalc.tick(&slurm, T0 + 600);
    let prio = slurm.last_priorities();
    assert!(prio[&3] > prio[&2], "b ran nothing: its job before a's ({prio:?})");
    assert!(!prio.contains_key(&1), "a running job's priority is not written");
    let charged = site.charged(T0 + 600);
    assert!((charged["a"] - 4.0 * 600.0 / 3600.0).abs() < 1e-9, "{charged:?}");
    // The same queue at the same moment: no priority changed, nothing written.
    let writes = lock(&slurm.written).len();
    recalc.tick(&slurm, T0 + 600);
    let after = lock(&slurm.written).clone();
    assert_eq!(after.len(), writes, "{after:?}");
    assert_eq!(recalc.run(&slurm, Wake::Tick, T0 + 720), Duration::from_secs(60), "the next tick after calc_period");
}

#[test]
fn without_a_config_nothing_is_copied_or_saved() {
    let site = Site::new("none", None);
    let (recalc, boards) = site.recalc();
    recalc.begin(T0);
    let slurm = FakeSlurm::with(vec![running(job(1, "a", "contract=1h", 4), T0)]);
    assert_eq!(recalc.run(&slurm, Wake::Tick, T0 + 60), Duration::from_secs(60));
    assert!(boards.ranking().is_none());
    assert_eq!(slurm.copies.load(Ordering::SeqCst), 0, "slurmctld's lock is not even taken");
    assert!(!site.ledger.exists());
    // A reconfigure that brings a config starts the engine.
    std::fs::write(&site.config, CONFIG).unwrap();
    recalc.run(&slurm, Wake::Reload, T0 + 120);
    assert!(boards.ranking().is_some());
    assert!(site.ledger.exists());
}

#[test]
fn a_broken_config_on_reload_changes_nothing() {
    let site = Site::new("reload", Some(CONFIG));
    let (recalc, boards) = site.recalc();
    recalc.begin(T0);
    let slurm = FakeSlurm::default();
    std::fs::write(&site.config, "[accounts.a]\nshare = -3\n").unwrap();
    recalc.run(&slurm, Wake::Reload, T0 + 60);
    assert!(boards.ranking().unwrap().config.tree.id("b").is_some(), "the config in force stays");
    assert_eq!(std::fs::read_to_string(follower::active_path(&site.ledger)).unwrap(), CONFIG);
    let with_c = CONFIG.replace("share = 50", "share = 40") + "[accounts.c]\nshare = 20\n";
    std::fs::write(&site.config, &with_c).unwrap();
    recalc.run(&slurm, Wake::Reload, T0 + 120);
    assert!(boards.ranking().unwrap().config.tree.id("c").is_some(), "a valid one replaces it");
    assert_eq!(std::fs::read_to_string(follower::active_path(&site.ledger)).unwrap(), with_c);
}

#[test]
fn a_ledger_that_cannot_be_read_is_not_saved_over_then_merged() {
    let site = Site::new("held", Some(CONFIG));
    // What b was charged before, in a ledger written by a newer Tally.
    let mut before = Engine::new(Config::parse(CONFIG, "t.toml").unwrap(), None, T0);
    before.tick(T0 + 3600, vec![running(job(9, "b", "contract=1h", 8), T0)], None);
    let good = before.state_text(T0 + 3600);
    let newer = good.replacen("tally-state 3", "tally-state 99", 1);
    std::fs::write(&site.ledger, &newer).unwrap();
    let (recalc, _) = site.recalc();
    recalc.begin(T0 + 3600);
    let slurm = FakeSlurm::with(vec![running(job(1, "a", "contract=1h", 4), T0 + 3600)]);
    recalc.tick(&slurm, T0 + 4200);
    assert_eq!(std::fs::read_to_string(&site.ledger).unwrap(), newer, "held: not saved over");
    recalc.run(&slurm, Wake::Stop, T0 + 4200);
    assert_eq!(std::fs::read_to_string(&site.ledger).unwrap(), newer, "nor at fini");
    // Readable again (the newer Tally's ledger replaced by one this reads):
    // merged with what was charged meanwhile, then saved.
    std::fs::write(&site.ledger, &good).unwrap();
    recalc.tick(&slurm, T0 + 4800);
    let charged = site.charged(T0 + 4800);
    assert!((charged["b"] - 8.0).abs() < 1e-9, "{charged:?}");
    assert!((charged["a"] - 4.0 * 1200.0 / 3600.0).abs() < 1e-9, "{charged:?}");
}

#[test]
fn a_drain_requeues_past_contract_work_and_waits_for_contracts() {
    let site = Site::new("drain", Some(CONFIG));
    let (recalc, _) = site.recalc();
    recalc.begin(T0);
    let n0: Arc<str> = "n0".into();
    let slurm = FakeSlurm {
        on_draining: vec![(1, vec![n0.clone()]), (2, vec![n0.clone()]), (3, vec![n0])],
        ..FakeSlurm::with(vec![
            running(job(1, "a", "contract=10m,resumable", 2), T0),
            running(job(2, "a", "contract=8h", 2), T0),
            running(job(3, "b", "contract=0", 2), T0),
        ])
    };
    // A drain is judged on the jobs the previous tick saw.
    recalc.tick(&slurm, T0 + 3600);
    recalc.tick(&slurm, T0 + 3660);
    let mut requeued = lock(&slurm.requeued).clone();
    requeued.sort_unstable();
    requeued.dedup();
    assert_eq!(requeued, vec![1, 3], "past its contract and unallocated go; inside its contract stays");
    assert_eq!(*lock(&recalc.drain_waits), vec![(2, T0 + 8 * 3600)]);
}

#[test]
fn notes_beside_the_ledger_give_the_next_run_its_whole_contract() {
    let site = Site::new("notes", Some(CONFIG));
    let (recalc, _) = site.recalc();
    recalc.begin(T0);
    let slurm = FakeSlurm::with(vec![running(job(1, "a", "contract=1h", 4), T0)]);
    recalc.tick(&slurm, T0 + 600);
    let mut notes = Notes::new();
    notes.note(preempted::Note { job_id: 1, run_start_s: T0, at_s: T0 + 650, why: None });
    preempted::save(&site.ledger.with_file_name(preempted::FILE_NAME), &notes).unwrap();
    recalc.tick(&slurm, T0 + 700);
    let Loaded::Ok { snapshot, .. } = statefile::load(&site.ledger, 3600, tally_allocator::WEEK_S, T0 + 700, 0) else { panic!() };
    assert_eq!(snapshot.runs.get(1).unwrap().preempted_run_s, T0);
    // Notes that cannot be read are said once and change nothing.
    std::fs::write(site.ledger.with_file_name(preempted::FILE_NAME), "not notes\n").unwrap();
    recalc.tick(&slurm, T0 + 760);
    assert!(lock(&recalc.notes_problem).is_some());
}

#[test]
fn the_planner_round_publishes_a_board_or_clears_it() {
    let site = Site::new("plan", Some(&format!("{CONFIG}[planner]\nenabled = true\ninterval = \"10m\"\n")));
    let (recalc, boards) = site.recalc();
    recalc.begin(T0);
    let slurm = FakeSlurm::with(vec![running(job(1, "a", "contract=1h", 4), T0), job(2, "b", "contract=1h", 8), job(3, "a", "contract=1h", 2)]);
    assert_eq!(plan_round(&slurm, boards, Wake::Tick, T0 + 60), Duration::from_secs(600));
    let board = boards.plan().expect("a plan board");
    assert!(!board.starts_now.is_empty(), "12 GPUs are free: the plan starts work now");
    assert!(!slurm.last_priorities().is_empty(), "the plan's priorities are written");
    // Disabled by a reconfigure: the board goes.
    std::fs::write(&site.config, CONFIG).unwrap();
    recalc.run(&slurm, Wake::Reload, T0 + 120);
    assert_eq!(plan_round(&slurm, boards, Wake::Tick, T0 + 180), PLANNER_IDLE);
    assert!(boards.plan().is_none());
    assert_eq!(plan_round(&slurm, boards, Wake::Stop, T0 + 240), PLANNER_IDLE);
}

/// `v` as `priority_p_set` decides it at `now`, and the begin time written
/// into the fake job list as the plugin writes it.
fn submit(boards: &Boards, slurm: &FakeSlurm, v: JobView, now: u64) -> Option<u64> {
    let r = boards.ranking().unwrap();
    let until = boards.long_at_submit(&r, &v, &crate::engine::job_seen_alone(&r.config, &v), now);
    let mut v = v;
    v.begin_s = until.unwrap_or(v.begin_s);
    lock(&slurm.jobs).push(v);
    until
}

/// A job of `account` with `comment` submitted at `t` (eligible then; no time limit).
fn submitted(id: u32, account: &str, comment: &str, gpus: u32, t: u64) -> JobView {
    JobView { submit_s: t, begin_s: t, ..job(id, account, comment, gpus) }
}

/// a runs `a_gpus` (rate 8), b waits for 8 (owed), seen by a tick at
/// `T0 + 60`.
fn b_owed(name: &str, a_gpus: u32) -> (Site, Recalc, &'static Boards, FakeSlurm) {
    let site = Site::new(name, Some(CONFIG));
    let (recalc, boards) = site.recalc();
    recalc.begin(T0);
    let slurm = FakeSlurm::with(vec![running(job(1, "a", "contract=1h", a_gpus), T0), job(2, "b", "contract=1h", 8)]);
    recalc.tick(&slurm, T0 + 60);
    (site, recalc, boards, slurm)
}

/// The begin times of the last write.
fn last_begins(slurm: &FakeSlurm) -> HashMap<u32, u64> {
    lock(&slurm.written).last().map(|w| w.1.clone()).unwrap_or_default()
}

#[test]
fn a_long_job_is_held_from_its_submission_and_the_tick_takes_the_hold_over() {
    // a runs 8 GPUs (its fair share).
    let (_site, recalc, boards, slurm) = b_owed("submit-hold", 8);
    let at = T0 + 70;
    // a's long job is held from its submission; the same job resumable is not.
    let until = submit(boards, &slurm, submitted(3, "a", "contract=1h", 4, at), at);
    assert_eq!(until, Some(crate::engine::hold_until(&boards.ranking().unwrap().config, at)));
    assert_eq!(submit(boards, &slurm, submitted(4, "a", "contract=1h,resumable", 4, at), at), None);
    // An update of the held job: decided once.
    let again = lock(&slurm.jobs).iter().find(|v| v.job_id == 3).cloned().unwrap();
    assert_eq!(submit(boards, &slurm, JobView { begin_s: at, ..again }, at), None);
    lock(&slurm.jobs).retain(|v| !(v.job_id == 3 && v.begin_s == at));
    // The tick takes it over: counted as waiting (in a's demand), held on.
    recalc.tick(&slurm, T0 + 120);
    let begins = last_begins(&slurm);
    assert_eq!(begins.get(&3), Some(&crate::engine::hold_until(&boards.ranking().unwrap().config, T0 + 120)), "{begins:?}");
    assert_eq!(boards.ranking().unwrap().ent.team("a").unwrap().demand, 16.0, "the held job is in its team's demand");
    // Its owner sets its begin time back (`scontrol update StartTime=now`:
    // Slurm calls priority_p_set after an update): held again at once.
    let now = T0 + 130;
    let mut released = lock(&slurm.jobs).iter().find(|v| v.job_id == 3).cloned().unwrap();
    released.begin_s = now;
    lock(&slurm.jobs).retain(|v| v.job_id != 3);
    let again = submit(boards, &slurm, released, now);
    assert_eq!(again, Some(crate::engine::hold_until(&boards.ranking().unwrap().config, now)));
    recalc.tick(&slurm, T0 + 150);
    let begins = last_begins(&slurm);
    assert_eq!(begins.get(&3), Some(&crate::engine::hold_until(&boards.ranking().unwrap().config, T0 + 150)), "{begins:?}");
    // b's job leaves: the hold goes, back to the begin time the job had
    // (the one its owner set).
    lock(&slurm.jobs).retain(|v| v.job_id != 2);
    recalc.tick(&slurm, T0 + 180);
    let begins = last_begins(&slurm);
    assert_eq!(begins.get(&3), Some(&now), "{begins:?}");
}

#[test]
fn a_burst_of_long_jobs_is_let_go_as_the_tick_would() {
    // a runs 4 of its 8 GPUs.
    let (_site, recalc, boards, slurm) = b_owed("submit-burst", 4);
    // Three long 4-GPU jobs in one second: the first fits a's share, the
    // next two would take b's.
    let at = T0 + 70;
    let held: Vec<bool> = (3..6).map(|id| submit(boards, &slurm, submitted(id, "a", "contract=1h", 4, at), at).is_some()).collect();
    assert_eq!(held, [false, true, true]);
    // The tick agrees: nothing to release, the two held moved on.
    recalc.tick(&slurm, T0 + 120);
    let begins = last_begins(&slurm);
    let mut ids: Vec<u32> = begins.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, [4, 5], "{begins:?}");
    // The job the tick walked (let go) is the tick's: an update does not hold it.
    let first = lock(&slurm.jobs).iter().find(|v| v.job_id == 3).cloned().unwrap();
    let r = boards.ranking().unwrap();
    assert_eq!(boards.long_at_submit(&r, &first, &crate::engine::job_seen_alone(&r.config, &first), T0 + 130), None);
    // Let go by the last tick and still waiting, it counts ahead of a's next one.
    assert!(submit(boards, &slurm, submitted(6, "a", "contract=1h", 4, T0 + 130), T0 + 130).is_some());
}
