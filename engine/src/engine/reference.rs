//! The test oracle: the recalculation as it was before the engine kept
//! anything between ticks ([`Engine::tick_reference`]): every job converted,
//! charged and ranked from scratch, by the code of that time (its own
//! copies of the classifier, the ranking, the comparison of priorities,
//! the long-job holds and what is owed), kept so that the incremental
//! [`Engine::tick`] is checked against it tick by tick
//! (`super::equivalence`).

use super::*;

struct Classifier<'a> {
    config: &'a Config,
    views: &'a [JobView],
    leaders: Option<BTreeMap<u32, Option<&'a str>>>,
    het_gpus: Option<FxHashMap<u32, u32>>,
    contracts: HashMap<Option<&'a str>, Result<Contract, tally_allocator::ContractError>>,
    last: Option<(Option<&'a str>, Result<Contract, tally_allocator::ContractError>)>,
    interned: FxHashMap<&'a str, Arc<str>>,
    now: u64,
    preempt_window_s: u64,
}

impl<'a> Classifier<'a> {
    fn new(config: &'a Config, views: &'a [JobView], now: u64, preempt_window_s: u64) -> Classifier<'a> {
        Classifier {
            config,
            views,
            leaders: None,
            het_gpus: None,
            contracts: HashMap::new(),
            last: None,
            interned: FxHashMap::default(),
            now,
            preempt_window_s,
        }
    }

    fn job(&mut self, v: &'a JobView, run: Option<&RunRecord>) -> (Counted, Job) {
        let comment = if v.het_component() {
            let views = self.views;
            let leaders = self.leaders.get_or_insert_with(|| het_comments(views));
            leaders.get(&v.het_job_id).copied().unwrap_or(v.comment.as_deref())
        } else {
            v.comment.as_deref()
        };
        let config = self.config;
        let contract = match &self.last {
            Some((c, contract)) if *c == comment => contract.clone(),
            _ => {
                let contract = self.contracts.entry(comment).or_insert_with(|| config.contracts.resolve(comment)).clone();
                self.last = Some((comment, contract.clone()));
                contract
            }
        };
        let account = match &v.account {
            Some(a) if !a.is_empty() => a.clone(),
            _ => {
                let a = config.account_for(None, &v.user).unwrap_or("");
                self.interned.entry(a).or_insert_with(|| Arc::from(a)).clone()
            }
        };
        let mut job = job_from(config, v, account, v.user.clone(), contract, run).0;
        if v.het_job_id != 0 {
            let views = self.views;
            let per_node = config.cluster.gpus_per_node;
            let het = self.het_gpus.get_or_insert_with(|| het_gpus(views, per_node));
            if let Some(&all) = het.get(&v.het_job_id) {
                job.holds_gpus = Some(all.max(job.holds_gpus.unwrap_or(0)));
            }
        }
        (counted(v, self.now, self.preempt_window_s), job)
    }
}

fn entitlement_of(config: &Config, alloc: &Allocation, jobs: &[(Counted, Job)]) -> Entitlement {
    let funded = Funded::new(&config.tree, alloc);
    let mut load = Load::new(&config.tree);
    let mut node_of = ByName::new();
    for (c, job) in jobs {
        if *c == Counted::No || !job.contract.is_allocated() {
            continue;
        }
        let node = node_of.get(&job.account, |name| config.tree.id(name).filter(|&id| funded.funded_at(id)));
        let Some(id) = node else { continue };
        load.count(id, job, *c == Counted::Running, &config.priority);
    }
    Entitlement::compute(&config.tree, alloc, &load)
}

fn rank(config: &Arc<Config>, snapshot: &Snapshot, jobs: &[(Counted, Job)], now: u64) -> Ranking {
    let alloc = allocation_at(config, &snapshot.inventory);
    let fs = FairShare::compute(&config.tree, &alloc, &snapshot.ledger.usage(now));
    let ent = entitlement_of(config, &alloc, jobs);
    let refs: Vec<&Job> = jobs.iter().filter(|(c, _)| *c == Counted::Waiting).map(|(_, j)| j).collect();
    let mut order = order_queue(&refs, &fs, &ent, &config.priority);
    let places = refs.iter().zip(order.priorities.drain(..).zip(order.ahead.drain(..)));
    let walked =
        Walked::new(places.map(|(j, (priority, ahead_gpus))| (u32::try_from(j.id).unwrap_or(u32::MAX), Place { priority, ahead_gpus })).collect());
    Ranking { config: config.clone(), fs, ent, walked, order, computed_at: now }
}

fn priority_of_job(r: &Ranking, job: &Job, plan: Option<&PlanBoard>) -> Priority {
    let id = u32::try_from(job.id).unwrap_or(u32::MAX);
    let ahead = r.walked.ahead(id).unwrap_or_else(|| r.order.waiting_gpus.get(&*job.account).copied().unwrap_or(0.0));
    job_priority(job, r.fs.standing(&job.account), TeamLoad::behind(&r.ent, &job.account, ahead), &r.config.priority)
        .planned(PlanBoard::starts(plan, id))
}

fn walked_priority(r: &Ranking, v: &JobView, plan: Option<&PlanBoard>) -> Priority {
    match r.walked.get(v.job_id) {
        Some(place) => place.priority.planned(PlanBoard::starts(plan, v.job_id)),
        None => priority_of(r, v, plan),
    }
}

fn changed_priorities(r: &Ranking, views: &[JobView], jobs: &[(Counted, Job)], plan: Option<&PlanBoard>) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    for (i, (v, (_, job))) in views.iter().zip(jobs).enumerate() {
        if v.state != RunState::Pending || v.priority == 0 || v.direct_set_prio {
            continue;
        }
        let p = match r.walked.get(v.job_id) {
            Some(place) => place.priority.planned(PlanBoard::starts(plan, v.job_id)).value,
            None => priority_of_job(r, job, plan).value,
        };
        if p != v.priority {
            out.push((i, p));
        }
    }
    out
}

impl Engine {
    /// [`Engine::tick`] as it was: everything from scratch.
    pub(super) fn tick_reference(&mut self, now: u64, views: impl Into<Vec<JobView>>, plan: Option<&PlanBoard>) -> TickReport {
        let mut views: Vec<JobView> = views.into();
        self.see_holds(&mut views);
        let mut report = TickReport { jobs_seen: views.len(), ..TickReport::default() };
        let alloc = allocation_at(&self.config, &self.snapshot.inventory);
        let recorded = self.snapshot.runs.len();
        let config = self.config.clone();
        let mut classifier = Classifier::new(&config, &views, now, self.preempt_window_s);
        let mut jobs = Vec::with_capacity(views.len());
        let mut with_run = 0;
        for v in &views {
            let run = self.snapshot.runs.get(u64::from(v.job_id));
            with_run += usize::from(run.is_some());
            let (counted, job) = classifier.job(v, run);
            let seen = seen(v, now);
            if seen != Seen::Waiting {
                report.charged_gpu_s += self.snapshot.runs.observe(&job, seen, &Funded::new(&self.config.tree, &alloc), &mut self.snapshot.ledger);
            }
            jobs.push((counted, job));
        }
        drop(classifier);
        self.converted = jobs.clone();
        let recovering = views.is_empty() && !self.seen_jobs;
        self.seen_jobs |= !views.is_empty();
        if !recovering && (with_run < recorded || !self.snapshot.runs.legacy_is_empty()) {
            let live: FxHashSet<u64> = views.iter().map(|v| u64::from(v.job_id)).collect();
            self.snapshot.runs.retain(|id| live.contains(&id));
        }
        self.snapshot.ledger.prune(now);
        self.ranking = Arc::new(rank(&self.config, &self.snapshot, &jobs, now));
        self.record_owed_reference(now, &jobs);
        self.warn_unknown_reference(&views, &jobs);
        report.priorities = changed_priorities(&self.ranking, &views, &jobs, plan);
        report.begins = self.long_holds_reference(&views, &jobs, now);
        report.retired = std::mem::replace(&mut self.last_jobs, views);
        report
    }

    fn long_holds_reference(&mut self, views: &[JobView], jobs: &[(Counted, Job)], now: u64) -> Vec<(usize, u64)> {
        let config = &self.config;
        let r = &self.ranking;
        let mut long: Vec<(queue::SlurmKey, usize)> = jobs
            .iter()
            .enumerate()
            .filter(|(_, (c, j))| *c == Counted::Waiting && config.contracts.is_long(j.contract, j.time_limit_s))
            .map(|(i, _)| (queue::slurm_order_at(&views[i], walked_priority(r, &views[i], None).value, None), i))
            .collect();
        long.sort_unstable();
        let mut old = std::mem::take(&mut self.holds);
        let mut out = Vec::new();
        let mut ahead: FxHashMap<Arc<str>, f64> = FxHashMap::default();
        let until = now + (HOLD_PERIODS * config.calc_period_s).max(MIN_HOLD_S);
        for (_, i) in long {
            let (v, job) = (&views[i], &jobs[i].1);
            let had = old.remove(&v.job_id);
            let before = ahead.get(&job.account).copied().unwrap_or(0.0);
            match tally_allocator::long_start(job, &r.ent, before, &config.priority, &config.contracts) {
                tally_allocator::LongStart::Held { .. } => {
                    let begin_s = had.map_or(v.begin_s, |h| h.begin_s);
                    self.holds.insert(v.job_id, Hold { begin_s, written_s: until });
                    out.push((i, until));
                }
                tally_allocator::LongStart::Free => {
                    *ahead.entry(job.account.clone()).or_insert(0.0) += job.units();
                    if let Some(h) = had {
                        out.push((i, h.begin_s));
                    }
                }
            }
        }
        if !old.is_empty() {
            out.extend(views.iter().enumerate().filter_map(|(i, v)| old.get(&v.job_id).map(|h| (i, h.begin_s))));
        }
        out
    }

    fn record_owed_reference(&mut self, now: u64, jobs: &[(Counted, Job)]) {
        if let Some(Stretch { since, accounts }) = self.held.take() {
            let longest = self.config.calc_period_s.max(1).saturating_mul(3).max(60);
            if now > since && now - since <= longest {
                for (account, h) in &accounts {
                    self.snapshot.owed.record(account, *h, since, now);
                }
            }
        }
        self.snapshot.owed.prune(now);
        let tree = &self.config.tree;
        self.snapshot.owed.retain_accounts(|a| tree.contains(a));
        let ent = &self.ranking.ent;
        let mut unallocated = vec![0.0; tree.len()];
        let mut node_of = ByName::new();
        for (c, job) in jobs {
            if *c != Counted::Running {
                continue;
            }
            let Some(id) = node_of.get(&job.account, |name| tree.id(name)) else { continue };
            if !job.contract.is_allocated() || !ent.funded_at(id) {
                unallocated[id] += job.units();
            }
        }
        let mut held = Vec::new();
        self.snapshot.load.clear();
        for (id, u) in unallocated.into_iter().enumerate() {
            let t = ent.team_at(id);
            if t.rate > 0.0 || t.demand > 0.0 || u > 0.0 {
                let name = &tree.node(id).name;
                held.push((Arc::from(name.as_str()), Held { rate_gpus: t.rate, demand_gpus: t.demand, unallocated_gpus: u }));
            }
            if t.demand > 0.0 {
                self.snapshot.load.insert(tree.node(id).name.clone(), (t.running, t.demand - t.running));
            }
        }
        self.held = Some(Stretch { since: now, accounts: held });
    }

    fn warn_unknown_reference(&mut self, views: &[JobView], jobs: &[(Counted, Job)]) {
        let mut seen = ByName::new();
        for (_, (_, job)) in views.iter().zip(jobs) {
            if seen.first(&job.account) && !self.warned.contains(&*job.account) && !self.config.tree.contains(&job.account) {
                self.warned.insert(job.account.to_string());
            }
        }
    }
}
