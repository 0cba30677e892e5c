//! [`Engine::tick`] against the oracle ([`Engine::tick_reference`]: every
//! job converted, charged and ranked from scratch) over many ticks of a
//! generated, changing job list: jobs arrive, start, are suspended, end,
//! are requeued and leave; their comments, accounts, users, GPUs, types,
//! nice, begin times and places in the list change; names are shared or
//! copied afresh; the config is reloaded (with the same text or another),
//! the GPU inventory changes, preemptions are noted, the clock moves
//! forward, stands or jumps. After every tick the two engines must agree
//! on everything: the report (priorities written, begin times, charges,
//! the retired views), the ranking (fair share, entitlement, every walked
//! place, what waits per team), the saved state (ledger, runs, owed book,
//! load), the holds, the warnings and what priority_p_set would answer.

use super::*;
use crate::preempted::{Note, Notes};
use crate::view::Names;

/// A fixed xorshift sequence.
struct Rng(u64);

impl Rng {
    fn below(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len() as u64) as usize]
    }
}

const T0: u64 = 1_796_083_200;

/// Three configs the run moves between: GPU types, a tree with a parent
/// and an account without a budget of its own, a users map; the second
/// changes shares, the users map, the debug rules and the contracts; the
/// third turns the debug lane off and has no GPU types.
fn config(k: usize) -> Config {
    let texts = [
        r#"
[cluster]
gpus = 64
gpus_per_node = 8
[cluster.gpu_types]
h100 = 1.0
b200 = { weight = 2.5, gpus = 16 }
[priority]
calc_period = "1m"
[contracts]
max = "8h"
[accounts.p]
share = 60
[accounts.a]
parent = "p"
share = 30
[accounts.b]
parent = "p"
share = 30
[accounts.c]
share = 30
[accounts.d]
gpu_hours = 500
[users]
alice = "a"
bob = "b"
erin = "c"
"#,
        r#"
[cluster]
gpus = 48
gpus_per_node = 4
[cluster.gpu_types]
h100 = 1.5
b200 = 2.0
[priority]
calc_period = "1m"
debug_max_gpus = 4
debug_max_contract = "30m"
debug_allowance = 20
quick_time_limit = "1h"
[contracts]
max = "4h"
missing = "1h"
unallocated_below = "5m"
[accounts.p]
share = 50
[accounts.a]
parent = "p"
share = 10
[accounts.b]
parent = "p"
share = 40
[accounts.c]
share = 30
[accounts.ghost]
share = 20
[users]
alice = "b"
carol = "c"
"#,
        r#"
[cluster]
gpus = 32
[priority]
calc_period = "2m"
debug_lane = false
[accounts.a]
share = 50
[accounts.b]
share = 25
[accounts.c]
share = 25
[users]
bob = "a"
"#,
    ];
    Config::parse(texts[k % texts.len()], "equivalence.toml").unwrap()
}

/// The slurmctld of the run: its jobs, in its list's order.
struct Cluster {
    jobs: Vec<JobView>,
    next_id: u32,
    rng: Rng,
    /// The start of each requeued job's last run (for notes that come
    /// after the requeue).
    requeued: BTreeMap<u32, u64>,
}

const ACCOUNTS: &[Option<&str>] = &[Some("a"), Some("b"), Some("c"), Some("d"), Some("p"), Some("ghost"), Some(""), None, None];
const USERS: &[&str] = &["alice", "bob", "carol", "dave", "erin"];
const COMMENTS: &[Option<&str>] = &[
    None,
    Some("contract=1h"),
    Some("contract=1h"),
    Some("contract=10m"),
    Some("contract=10m"),
    Some("contract=2h,resumable"),
    Some("contract=30m,resumable"),
    Some("contract=0"),
    Some("contract=99h"),
    Some("contract=3m"),
    Some("contract=8h lr=3e-4"),
    Some("contract=nonsense"),
];
const GPU_TYPES: &[Option<&str>] = &[None, None, Some("h100"), Some("b200"), Some("a100")];
const LIMITS: &[Option<u64>] = &[None, Some(600), Some(1800), Some(3600), Some(5 * 3600), Some(20 * 3600)];

impl Cluster {
    fn new(seed: u64) -> Cluster {
        Cluster { jobs: Vec::new(), next_id: 100, rng: Rng(seed), requeued: BTreeMap::new() }
    }

    fn fresh(&mut self, now: u64) -> JobView {
        let r = &mut self.rng;
        self.next_id += 1 + r.below(3) as u32;
        let array = r.chance(10);
        JobView {
            account: r.pick(ACCOUNTS).map(Arc::from),
            user_id: 1000,
            comment: r.pick(COMMENTS).map(str::to_string),
            partition: Some("gpu".into()),
            gpus: *r.pick(&[1, 1, 2, 4, 8, 16]),
            gpu_type: r.pick(GPU_TYPES).map(Arc::from),
            submit_s: now - r.below(7200),
            begin_s: match r.below(10) {
                0 => 0,
                1 => now + r.below(600),
                _ => now - r.below(600),
            },
            nice: *r.pick(&[0, 0, 0, -10, 10, 100, -100]),
            time_limit_s: *r.pick(LIMITS),
            priority: *r.pick(&[1, 1, 1, 0, 5]),
            direct_set_prio: r.chance(3),
            exclusive: r.chance(10),
            nodes: 1 + r.below(3) as u32,
            node_gpus: if r.chance(50) { Some(*r.pick(&[4, 8])) } else { None },
            array_tasks: if array { 2 + r.below(10) as u32 } else { 1 },
            ..JobView::pending(self.next_id, Arc::from(*r.pick(USERS)))
        }
    }

    /// A heterogeneous job: a leader and one or two components.
    fn het(&mut self, now: u64) -> Vec<JobView> {
        let leader = self.fresh(now);
        let id = leader.job_id;
        let mut out = vec![JobView { het_job_id: id, ..leader }];
        for k in 0..1 + self.rng.below(2) as u32 {
            let c = self.fresh(now);
            out.push(JobView { job_id: id + 1 + k, het_job_id: id, state: out[0].state, ..c });
        }
        self.next_id = id + 3;
        out
    }

    /// Slurm's moves between two ticks.
    fn step(&mut self, now: u64) {
        let arrivals = self.rng.below(6);
        for _ in 0..arrivals {
            if self.rng.chance(10) {
                let het = self.het(now);
                self.jobs.extend(het);
            } else {
                let v = self.fresh(now);
                if self.rng.chance(20) && !self.jobs.is_empty() {
                    let at = self.rng.below(self.jobs.len() as u64) as usize;
                    self.jobs.insert(at, v);
                } else {
                    self.jobs.push(v);
                }
            }
        }
        let n = self.jobs.len();
        for i in 0..n {
            if !self.rng.chance(12) {
                continue;
            }
            let r = &mut self.rng;
            let v = &mut self.jobs[i];
            match r.below(22) {
                0..=2 if v.state == RunState::Pending => {
                    v.state = RunState::Running;
                    v.start_s = now - r.below(60);
                    v.array_tasks = 1;
                }
                3 if v.state == RunState::Running => {
                    v.state = RunState::Done;
                    v.end_s = now - r.below(30);
                }
                4 if v.state == RunState::Running => {
                    // Requeued: start and end zeroed, submit time reset.
                    self.requeued.insert(v.job_id, v.start_s);
                    v.state = RunState::Pending;
                    v.start_s = 0;
                    v.end_s = 0;
                    v.restarts += 1;
                    v.submit_s = now - r.below(30);
                }
                5 if v.state == RunState::Running => {
                    v.state = RunState::Suspended;
                    v.pre_sus_s = now.saturating_sub(v.start_s);
                    v.suspend_s = now;
                }
                6 if v.state == RunState::Suspended => {
                    v.state = RunState::Running;
                    v.suspend_s = now;
                }
                7 => v.comment = r.pick(COMMENTS).map(str::to_string),
                8 => v.account = r.pick(ACCOUNTS).map(Arc::from),
                9 => v.user = Arc::from(*r.pick(USERS)),
                10 => v.gpus = *r.pick(&[1, 2, 4, 8]),
                11 => v.gpu_type = r.pick(GPU_TYPES).map(Arc::from),
                12 => v.nice = *r.pick(&[0, -5, 5, 70, -70]),
                13 => v.time_limit_s = *r.pick(LIMITS),
                14 => v.priority = *r.pick(&[0, 1, 7]),
                15 => v.begin_s = *r.pick(&[0, now - 10, now + 90]),
                16 if v.state == RunState::Pending => v.preempt_start_s = now - r.below(80),
                17 => v.direct_set_prio = !v.direct_set_prio,
                18 => v.exclusive = !v.exclusive,
                19 if v.state == RunState::Pending => v.array_tasks = 1 + r.below(5) as u32,
                20 => v.node_gpus = if r.chance(50) { None } else { Some(*r.pick(&[2, 8])) },
                _ => v.submit_s = v.submit_s.saturating_sub(r.below(100)),
            }
        }
        // Done jobs leave after a while; now and then any job is purged.
        let rng = &mut self.rng;
        self.jobs.retain(|v| (v.state != RunState::Done || !rng.chance(30)) && !rng.chance(1));
        // Slurm's list order moves a little.
        if self.rng.chance(20) && self.jobs.len() > 2 {
            let a = self.rng.below(self.jobs.len() as u64) as usize;
            let b = self.rng.below(self.jobs.len() as u64) as usize;
            self.jobs.swap(a, b);
        }
    }

    /// The copy the plugin hands a tick: names shared in it (a fresh
    /// [`Names`] per copy, as the plugin's) or, now and then, the very
    /// same names as the last copy.
    fn copy(&mut self) -> Vec<JobView> {
        if self.rng.chance(50) {
            return self.jobs.clone();
        }
        let mut names = Names::new();
        self.jobs
            .iter()
            .map(|v| JobView {
                account: v.account.as_deref().map(|a| names.intern(a)),
                user: names.intern(&v.user),
                partition: v.partition.as_deref().map(|p| names.intern(p)),
                gpu_type: v.gpu_type.as_deref().map(|t| names.intern(t)),
                ..v.clone()
            })
            .collect()
    }

    /// What the tick wrote into slurmctld.
    fn write(&mut self, copy: &[JobView], r: &TickReport) {
        for &(i, p) in &r.priorities {
            if let Some(v) = self.jobs.iter_mut().find(|v| v.job_id == copy[i].job_id) {
                v.priority = p;
            }
        }
        for &(i, b) in &r.begins {
            if let Some(v) = self.jobs.iter_mut().find(|v| v.job_id == copy[i].job_id) {
                v.begin_s = b;
            }
        }
    }
}

fn same(new: &Engine, old: &Engine, a: &TickReport, b: &TickReport, views: &[JobView], plan: Option<&PlanBoard>, at: &str) {
    assert_eq!(new.converted, old.converted, "{at}: every job as converted (classified, with its run's frozen facts)");
    assert_eq!(a, b, "{at}: the tick's report");
    let (ra, rb) = (new.ranking(), old.ranking());
    assert_eq!(ra.walked, rb.walked, "{at}: walked places");
    assert_eq!(ra.order, rb.order, "{at}: queue order");
    assert_eq!(ra.fs, rb.fs, "{at}: fair share");
    assert_eq!(ra.ent, rb.ent, "{at}: entitlement");
    assert_eq!(ra.computed_at, rb.computed_at, "{at}");
    assert_eq!(new.snapshot.to_text(), old.snapshot.to_text(), "{at}: ledger, runs, owed book");
    assert_eq!(new.snapshot.runs, old.snapshot.runs, "{at}: run book");
    assert_eq!(new.snapshot.load, old.snapshot.load, "{at}: load");
    assert_eq!(new.holds, old.holds, "{at}: holds");
    assert_eq!(new.warned, old.warned, "{at}: warned");
    assert_eq!(format!("{:?}", new.held), format!("{:?}", old.held), "{at}: the stretch held");
    assert_eq!(new.last_jobs, old.last_jobs, "{at}: the views kept");
    assert_eq!(new.seen_jobs, old.seen_jobs, "{at}");
    for v in views.iter().step_by(7) {
        assert_eq!(walked_priority(&ra, v, plan), walked_priority(&rb, v, plan), "{at}: job {}", v.job_id);
        assert_eq!(priority_of(&ra, v, plan), priority_of(&rb, v, plan), "{at}: job {}", v.job_id);
    }
}

/// One run of `ticks` ticks from `seed`.
fn run(seed: u64, ticks: u32) {
    let mut cluster = Cluster::new(seed);
    let mut cfg = 0;
    let mut new = Engine::new(config(cfg), None, T0);
    let mut old = Engine::new(config(cfg), None, T0);
    let mut now = T0;
    let mut notes = Notes::new();
    for k in 0..ticks {
        let at = format!("seed {seed}, tick {k}");
        cluster.step(now);
        let r = &mut cluster.rng;
        now = match r.below(20) {
            0 => now,
            1 => now + 3600 + r.below(7200),
            2 => now.saturating_sub(30),
            _ => now + 60,
        };
        match r.below(40) {
            0 => {
                cfg = (cfg + 1 + r.below(2) as usize) % 3;
                new.set_config(config(cfg), now);
                old.set_config(config(cfg), now);
            }
            1 => {
                // The same file reloaded.
                new.set_config(config(cfg), now);
                old.set_config(config(cfg), now);
            }
            2 => {
                let counts: BTreeMap<Option<Arc<str>>, u32> =
                    [(Some("h100".into()), 8 * (1 + r.below(4) as u32)), (Some("b200".into()), 8 * r.below(3) as u32), (None, 4)].into();
                assert_eq!(new.set_gpu_inventory(counts.clone(), now), old.set_gpu_inventory(counts, now), "{at}");
            }
            3 => {
                let w = *r.pick(&[0, 40, 120]);
                new.set_preempt_window(w);
                old.set_preempt_window(w);
            }
            _ => {}
        }
        if r.chance(10) {
            // preempt/tally preempted a running job.
            if let Some(v) = cluster.jobs.iter().find(|v| v.state == RunState::Running && v.start_s % 3 == 0) {
                notes.note(Note { job_id: v.job_id, run_start_s: v.start_s, at_s: now, why: None });
            }
            // A run preempted before the last look, noted only now.
            let late = cluster.jobs.iter().filter(|v| v.restarts > 0).find_map(|v| cluster.requeued.get(&v.job_id).map(|&s| (v.job_id, s)));
            if let Some((job_id, run_start_s)) = late {
                cluster.requeued.remove(&job_id);
                notes.note(Note { job_id, run_start_s, at_s: now, why: None });
            }
            assert_eq!(new.note_preempted(&notes), old.note_preempted(&notes), "{at}: notes taken");
        }
        let plan = cluster
            .rng
            .chance(30)
            .then(|| PlanBoard { starts_now: cluster.jobs.iter().filter(|v| v.job_id % 5 == 0).map(|v| v.job_id).collect(), planned_at: now });
        let copy = cluster.copy();
        let a = new.tick(now, copy.clone(), plan.as_ref());
        let b = old.tick_reference(now, copy.clone(), plan.as_ref());
        same(&new, &old, &a, &b, &copy, plan.as_ref(), &at);
        let draining: Vec<(u32, Vec<Arc<str>>)> =
            copy.iter().filter(|v| v.state == RunState::Running && v.job_id % 4 == 0).map(|v| (v.job_id, vec![Arc::from("n1")])).collect();
        assert_eq!(new.drain_plan(now, &draining), old.drain_plan(now, &draining), "{at}: drain plan");
        cluster.write(&copy, &a);
    }
}

#[test]
fn the_incremental_tick_decides_what_the_tick_from_scratch_decides() {
    for seed in [0x9e37_79b9_7f4a_7c15, 7, 0xdead_beef, 12345] {
        run(seed, 400);
    }
}

/// The copy handed over twice in a row, unchanged, and an empty list in
/// between: nothing kept from before may leak into a tick.
#[test]
fn unchanged_copies_an_empty_list_and_a_list_in_another_order() {
    let mut cluster = Cluster::new(99);
    let mut new = Engine::new(config(0), None, T0);
    let mut old = Engine::new(config(0), None, T0);
    let mut now = T0;
    for k in 0..60 {
        cluster.step(now);
        now += 60;
        let mut copy = cluster.copy();
        match k % 6 {
            3 => copy.clear(),
            4 => copy.reverse(),
            _ => {}
        }
        for again in 0..2 {
            let a = new.tick(now + again, copy.clone(), None);
            let b = old.tick_reference(now + again, copy.clone(), None);
            same(&new, &old, &a, &b, &copy, None, &format!("tick {k}.{again}"));
            if again == 0 {
                cluster.write(&copy, &a);
            }
        }
    }
}
