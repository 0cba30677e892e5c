//! What the engine keeps of each job from one tick to the next, so that a
//! tick converts and re-sorts only the jobs that changed ([`Kept`]).
//!
//! slurmctld hands every tick a fresh copy of all its jobs, nearly all of
//! them as they were a minute before. A job's conversion ([`Job`], by
//! [`Classifier::job`]) is a function of its view and the config alone
//! when it has no run record and is no heterogeneous job (whose class and
//! contract come from its other components): such a job, its view equal to
//! the last tick's, keeps its conversion, its team, its key in its team's
//! order ([`inside_key`]), what the walk reads of it ([`Traits`]) and what
//! it adds to its team's load ([`LoadShare`]). Everything that depends on
//! the moment is redone every tick for every job: where it counts now
//! ([`counted`]: the clock, its begin time, the preemption window), its
//! charge, its team's load, the walk of every team's queue (the fair share
//! and the entitlement move every tick), its priority.
//!
//! Each team's waiting jobs are kept sorted in their inside order between
//! ticks: a tick takes out the jobs that stopped waiting, changed or left
//! and merges in the ones that started waiting, then walks every team's
//! queue as [`tally_allocator::order_queue`] does (teams are walked
//! independently, each job behind its team's jobs before it). Kept state
//! is dropped whole when the config is not the one it was made under; a job
//! list with a job id twice is ranked from scratch ([`Engine::tick`]). The
//! tick from scratch is the oracle of `engine::equivalence`, which runs
//! both tick by tick over a generated changing job list.

use super::*;
use tally_allocator::entitlement::LoadShare;
use tally_allocator::inside_key;
use tally_allocator::priority::{InsideKey, Traits};

/// No index (a slot not seen in the last tick).
const NONE: u32 = u32::MAX;

#[derive(Debug, Default)]
pub(super) struct Kept {
    /// The config the slots were converted under (`None`: nothing kept).
    config: Option<Arc<Config>>,
    /// One slot per job id slurmctld has, reused once its job left: which
    /// job it is and where (`ident`: small, read to match the views), what
    /// the first pass reads (`hot`), the conversion (`cold`).
    ident: Vec<Ident>,
    hot: Vec<Hot>,
    cold: Vec<Cold>,
    by_id: FxHashMap<u32, u32>,
    free: Vec<u32>,
    /// This tick's views in order: each one's slot and what the passes
    /// after the first read of it.
    now: Vec<Now>,
    /// The slots of the last tick's views (`Engine::last_jobs`), in order.
    last: Vec<u32>,
    /// Per slot: its place in this tick's walk (waiting slots only).
    walk_at: Vec<u32>,
    /// The priority of each place of this tick's walk, in its order.
    walk_values: Vec<u32>,
    /// Every account a kept job had, by name.
    teams: Vec<Team>,
    team_of: FxHashMap<Arc<str>, u32>,
    tick: u32,
    /// The last queue entry handed out ([`Member::entry`]).
    entries: u64,
}

/// Which job a slot holds, and where it was.
#[derive(Debug, Clone, Copy)]
struct Ident {
    id: u32,
    /// The tick that last saw it (0: a free slot).
    seen: u32,
    /// Its index among this tick's views, and among the last tick's
    /// ([`NONE`]: not among them).
    view: u32,
    last_view: u32,
}

/// What the first pass of a tick reads of a slot.
#[derive(Debug, Clone, Copy)]
struct Hot {
    team: u32,
    share: LoadShare,
    /// It was converted with a run record ([`Cold::run`]).
    has_run: bool,
    /// Its job is a function of its view, its run record's
    /// [`RunInputs`] and the config alone: not a heterogeneous job.
    reusable: bool,
    /// Its contract is allocated.
    allocated: bool,
    /// A long job that cannot checkpoint (`ContractRules::is_long`).
    long: bool,
    /// In its team's queue, as entry `Cold::entry`.
    queued: bool,
}

/// A slot's conversion.
#[derive(Debug)]
struct Cold {
    job: Job,
    /// What of its run record it was converted with (`None`: none).
    run: Option<RunInputs>,
    key: InsideKey,
    traits: Traits,
    entry: u64,
}

/// What a job's conversion reads of its run record ([`job_from`]).
#[derive(Debug)]
struct RunInputs {
    start_s: u64,
    earlier_s: u64,
    preempted_run_s: u64,
    charged_s: u64,
    account: Arc<str>,
    user: Arc<str>,
    gpus: u32,
    weight: tally_allocator::Weight,
    contract: Contract,
}

impl RunInputs {
    fn of(r: &RunRecord) -> RunInputs {
        RunInputs {
            start_s: r.start_s,
            earlier_s: r.earlier_s,
            preempted_run_s: r.preempted_run_s,
            charged_s: r.charged_s,
            account: r.account.clone(),
            user: r.user.clone(),
            gpus: r.gpus,
            weight: r.weight,
            contract: r.contract,
        }
    }

    /// Would [`job_from`] read the same of `r` as of the record these
    /// inputs came from, for the job's view `v` (the same view)? A job
    /// holding GPUs in the run the record holds takes the run's frozen
    /// facts; any other, the protection its runs used.
    fn same(&self, r: &RunRecord, v: &JobView) -> bool {
        if self.start_s != r.start_s || self.earlier_s != r.earlier_s {
            return false;
        }
        if v.holding() && r.start_s == v.start_s {
            self.account == r.account && self.user == r.user && self.gpus == r.gpus && self.weight == r.weight && self.contract == r.contract
        } else {
            self.preempted_run_s == r.preempted_run_s && self.charged_s == r.charged_s
        }
    }
}

/// A view of this tick.
#[derive(Debug, Clone, Copy)]
struct Now {
    slot: u32,
    job_id: u32,
    team: u32,
    /// The priority slurmctld has if Tally may set it (pending, not held,
    /// not set by an admin), else 0 (a held job's).
    settable: u32,
    counted: Counted,
    long: bool,
}

/// An account's waiting jobs, in their inside order.
#[derive(Debug)]
struct Team {
    account: Arc<str>,
    members: Vec<Member>,
    /// Entries that left the queue this tick, and the ones that joined it.
    removed: Vec<u64>,
    added: Vec<Member>,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    key: InsideKey,
    /// Tells apart two stays of one slot in the queue (its job changed, or
    /// the slot went to another job).
    entry: u64,
    slot: u32,
    traits: Traits,
}

/// What the first pass of a tick gave: every team's load, the charges,
/// how many jobs had a run record.
pub(super) struct Counts {
    pub load: Load,
    pub charged_gpu_s: f64,
    pub with_run: usize,
}

impl Kept {
    fn reset(&mut self, config: &Arc<Config>) {
        *self = Kept { config: Some(config.clone()), tick: self.tick, entries: self.entries, ..Kept::default() };
    }

    /// Forget everything (the next tick converts every job afresh).
    pub(super) fn clear(&mut self) {
        *self = Kept { tick: self.tick, entries: self.entries, ..Kept::default() };
    }

    /// The slot of each of `views` into `self.now`, new slots for new jobs;
    /// how many of the last tick's jobs are among them (`None` when a job
    /// id is there twice).
    fn match_views(&mut self, views: &[JobView]) -> Option<usize> {
        // Tick 0 marks a free slot.
        self.tick = self.tick.checked_add(1).unwrap_or(1);
        let (tick, last) = (self.tick, self.tick - 1);
        self.now.clear();
        self.now.reserve(views.len());
        let (mut k, mut kept) = (0, 0);
        for (i, v) in views.iter().enumerate() {
            let at = match self.last.get(k) {
                Some(&s) if self.ident[s as usize].seen != 0 && self.ident[s as usize].id == v.job_id => Some(s),
                _ => self.by_id.get(&v.job_id).copied(),
            };
            let s = match at {
                Some(s) => {
                    let ident = &mut self.ident[s as usize];
                    if ident.seen == tick {
                        return None;
                    }
                    ident.last_view = if ident.seen == last { ident.view } else { NONE };
                    if ident.last_view != NONE {
                        k = ident.last_view as usize + 1;
                        kept += 1;
                    }
                    s
                }
                None => self.open(v),
            };
            let ident = &mut self.ident[s as usize];
            ident.seen = tick;
            ident.view = i as u32;
            self.now.push(Now { slot: s, job_id: v.job_id, team: 0, settable: 0, counted: Counted::No, long: false });
        }
        Some(kept)
    }

    /// A slot for a job seen for the first time.
    fn open(&mut self, v: &JobView) -> u32 {
        let ident = Ident { id: v.job_id, seen: 0, view: NONE, last_view: NONE };
        let hot = Hot { team: 0, share: LoadShare::default(), has_run: false, reusable: false, allocated: false, long: false, queued: false };
        let cold = Cold {
            job: Job::named(u64::from(v.job_id), v.user.clone(), v.user.clone()),
            run: None,
            key: InsideKey::default(),
            traits: Traits::default(),
            entry: 0,
        };
        let s = match self.free.pop() {
            Some(s) => {
                self.ident[s as usize] = ident;
                self.hot[s as usize] = hot;
                self.cold[s as usize] = cold;
                s
            }
            None => {
                self.ident.push(ident);
                self.hot.push(hot);
                self.cold.push(cold);
                self.walk_at.push(0);
                u32::try_from(self.hot.len() - 1).expect("fewer than 2^32 jobs")
            }
        };
        self.by_id.insert(v.job_id, s);
        s
    }

    fn team(&mut self, account: &Arc<str>) -> u32 {
        if let Some(&t) = self.team_of.get(account) {
            return t;
        }
        let t = u32::try_from(self.teams.len()).expect("fewer than 2^32 accounts");
        self.teams.push(Team { account: account.clone(), members: Vec::new(), removed: Vec::new(), added: Vec::new() });
        self.team_of.insert(account.clone(), t);
        t
    }

    /// Take slot `s` out of its team's queue.
    fn dequeue(&mut self, s: u32) {
        let hot = &mut self.hot[s as usize];
        if hot.queued {
            hot.queued = false;
            self.teams[hot.team as usize].removed.push(self.cold[s as usize].entry);
        }
    }

    /// Put slot `s` in its team's queue.
    fn enqueue(&mut self, s: u32) {
        self.entries += 1;
        let (hot, cold) = (&mut self.hot[s as usize], &mut self.cold[s as usize]);
        hot.queued = true;
        cold.entry = self.entries;
        self.teams[hot.team as usize].added.push(Member { key: cold.key, entry: cold.entry, slot: s, traits: cold.traits });
    }

    /// Free the slots of jobs the last tick saw and this one did not
    /// (`kept`: how many of them this one saw).
    fn sweep(&mut self, kept: usize) {
        for k in 0..if kept < self.last.len() { self.last.len() } else { 0 } {
            let s = self.last[k];
            let seen = self.ident[s as usize].seen;
            if seen != self.tick && seen != 0 {
                self.dequeue(s);
                let ident = &mut self.ident[s as usize];
                ident.seen = 0;
                self.by_id.remove(&ident.id);
                self.free.push(s);
            }
        }
        self.last.clear();
        self.last.extend(self.now.iter().map(|n| n.slot));
    }

    /// Each team's queue with this tick's changes: the entries that left
    /// taken out, the ones that joined merged in at their keys.
    fn settle_queues(&mut self) {
        for team in &mut self.teams {
            if !team.removed.is_empty() {
                team.removed.sort_unstable();
                let removed = &team.removed;
                team.members.retain(|m| removed.binary_search(&m.entry).is_err());
                team.removed.clear();
            }
            if !team.added.is_empty() {
                team.added.sort_unstable_by_key(|m| m.key);
                if team.members.is_empty() {
                    std::mem::swap(&mut team.members, &mut team.added);
                } else {
                    let old = std::mem::take(&mut team.members);
                    let mut merged = Vec::with_capacity(old.len() + team.added.len());
                    let (mut a, mut b) = (old.into_iter().peekable(), team.added.drain(..).peekable());
                    loop {
                        let take_a = match (a.peek(), b.peek()) {
                            (Some(x), Some(y)) => x.key <= y.key,
                            (Some(_), None) => true,
                            (None, Some(_)) => false,
                            (None, None) => break,
                        };
                        merged.extend(if take_a { a.next() } else { b.next() });
                    }
                    team.members = merged;
                }
                team.added.clear();
            }
        }
    }

    /// The first pass of a tick over `views` (`last`: the last tick's
    /// views): convert what changed, charge every run, count every team's
    /// load, and bring every team's queue up to date. `None` when a job id
    /// is there twice (nothing charged; nothing kept).
    pub(super) fn first_pass(
        &mut self,
        config: &Arc<Config>,
        snapshot: &mut Snapshot,
        views: &[JobView],
        last: &[JobView],
        now: u64,
        preempt_window_s: u64,
    ) -> Option<Counts> {
        if !self.config.as_ref().is_some_and(|c| Arc::ptr_eq(c, config)) {
            self.reset(config);
        }
        let Some(kept) = self.match_views(views) else {
            self.clear();
            return None;
        };
        let alloc = allocation_at(config, &snapshot.inventory);
        let funded = Funded::new(&config.tree, &alloc);
        let rules = &config.priority;
        let mut load = Load::new(&config.tree);
        // Per team, its funded node this tick (looked up at its first job).
        let mut funded_node: Vec<Option<Option<usize>>> = vec![None; self.teams.len()];
        let mut classifier = Classifier::new(config, views, now, preempt_window_s);
        let (mut charged_gpu_s, mut with_run) = (0.0, 0);
        for (i, v) in views.iter().enumerate() {
            let s = self.now[i].slot;
            let run = snapshot.runs.get(u64::from(v.job_id));
            with_run += usize::from(run.is_some());
            let (hot, last_view) = (&self.hot[s as usize], self.ident[s as usize].last_view);
            let same = hot.reusable
                && v.het_job_id == 0
                && last_view != NONE
                && last[last_view as usize] == *v
                && match (hot.has_run, run) {
                    (false, None) => true,
                    (true, Some(r)) => self.cold[s as usize].run.as_ref().is_some_and(|inputs| inputs.same(r, v)),
                    _ => false,
                };
            let counted = if same {
                counted(v, now, preempt_window_s)
            } else {
                let (c, job) = classifier.job(v, run);
                self.dequeue(s);
                let team = self.team(&job.account);
                let hot = &mut self.hot[s as usize];
                hot.reusable = v.het_job_id == 0;
                hot.has_run = run.is_some();
                hot.team = team;
                hot.share = LoadShare::of(&job, rules);
                hot.allocated = job.contract.is_allocated();
                hot.long = config.contracts.is_long(job.contract, job.time_limit_s);
                let cold = &mut self.cold[s as usize];
                cold.key = inside_key(&job, rules);
                cold.traits = Traits::of(&job, rules);
                cold.run = run.map(RunInputs::of);
                cold.job = job;
                c
            };
            let waiting = counted == Counted::Waiting;
            let hot = self.hot[s as usize];
            if hot.queued && !waiting {
                self.dequeue(s);
            } else if waiting && !hot.queued {
                self.enqueue(s);
            }
            let settable = if v.state == RunState::Pending && !v.direct_set_prio { v.priority } else { 0 };
            self.now[i] = Now { slot: s, job_id: v.job_id, team: hot.team, settable, counted, long: hot.long };
            let seen = seen(v, now);
            if seen != Seen::Waiting {
                charged_gpu_s += snapshot.runs.observe(&self.cold[s as usize].job, seen, &funded, &mut snapshot.ledger);
            }
            if counted != Counted::No && hot.allocated {
                let t = hot.team as usize;
                if t >= funded_node.len() {
                    funded_node.resize(t + 1, None);
                }
                let account = &self.teams[t].account;
                let node = *funded_node[t].get_or_insert_with(|| config.tree.id(account).filter(|&id| funded.funded_at(id)));
                if let Some(id) = node {
                    load.count_share(id, hot.share, counted == Counted::Running);
                }
            }
        }
        drop(classifier);
        self.sweep(kept);
        self.settle_queues();
        Some(Counts { load, charged_gpu_s, with_run })
    }

    /// The ranking of this tick (after its charges): the fair share, the
    /// entitlement from `load`, and the walk of every team's queue, as
    /// [`rank`] makes it from scratch. `spent`: the buffers of a walk
    /// nobody reads any more.
    pub(super) fn rank(&mut self, config: &Arc<Config>, snapshot: &Snapshot, load: &Load, now: u64, spent: Option<Walked>) -> Ranking {
        let alloc = allocation_at(config, &snapshot.inventory);
        let fs = FairShare::compute(&config.tree, &alloc, &snapshot.ledger.usage(now));
        let ent = Entitlement::compute(&config.tree, &alloc, load);
        let (mut ids, mut at, mut places) = spent.map(Walked::into_buffers).unwrap_or_default();
        let mut walk = QueueWalk::new(&fs, &ent, &config.priority);
        self.walk_values.clear();
        for team in &self.teams {
            if team.members.is_empty() {
                continue;
            }
            walk.enter(&team.account);
            for m in &team.members {
                let (priority, ahead_gpus) = walk.step(m.traits);
                self.walk_at[m.slot as usize] = places.len() as u32;
                self.walk_values.push(priority.value);
                places.push(Place { priority, ahead_gpus });
            }
        }
        let order = walk.finish();
        for n in &self.now {
            if n.counted == Counted::Waiting {
                ids.push(n.job_id);
                at.push(self.walk_at[n.slot as usize]);
            }
        }
        Ranking { config: config.clone(), fs, ent, walked: Walked::from_parts(ids, at, places), order, computed_at: now }
    }

    /// Tests only: this tick's jobs as converted, in the views' order.
    #[cfg(test)]
    pub(super) fn converted(&self) -> Vec<(Counted, Job)> {
        self.now.iter().map(|n| (n.counted, self.cold[n.slot as usize].job.clone())).collect()
    }

    /// What the rest of a tick reads of its views under `r`, their
    /// ranking, in one pass over them: the new priorities
    /// ([`changed_priorities`]), the jobs counted as running, the long jobs
    /// that cannot checkpoint among the waiting ones (index into the views,
    /// job) and the first view of each account (index, job), each in the
    /// views' order.
    pub(super) fn outcome(&self, r: &Ranking, plan: Option<&PlanBoard>) -> Outcome<'_> {
        let mut out = Outcome { priorities: Vec::new(), running: Vec::new(), long: Vec::new(), firsts: Vec::new() };
        let mut seen = vec![false; self.teams.len()];
        for (i, n) in self.now.iter().enumerate() {
            if !std::mem::replace(&mut seen[n.team as usize], true) {
                out.firsts.push((i, &self.cold[n.slot as usize].job));
            }
            match n.counted {
                Counted::Running => out.running.push(&self.cold[n.slot as usize].job),
                Counted::Waiting if n.long => out.long.push((i, &self.cold[n.slot as usize].job)),
                _ => {}
            }
            if n.settable == 0 {
                continue;
            }
            let p = if n.counted == Counted::Waiting {
                let value = self.walk_values[self.walk_at[n.slot as usize] as usize];
                Priority { value, ..Priority::default() }.planned(PlanBoard::starts(plan, n.job_id)).value
            } else {
                priority_of_job(r, &self.cold[n.slot as usize].job, plan).value
            };
            if p != n.settable {
                out.priorities.push((i, p));
            }
        }
        out
    }
}

/// [`Kept::outcome`].
pub(super) struct Outcome<'a> {
    pub priorities: Vec<(usize, u32)>,
    pub running: Vec<&'a Job>,
    pub long: Vec<(usize, &'a Job)>,
    pub firsts: Vec<(usize, &'a Job)>,
}
