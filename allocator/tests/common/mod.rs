//! Builder fixtures: a small world of accounts, usage and a clock.
#![allow(dead_code)]

use tally_allocator::*;

/// An arbitrary "now" far from 0 so windows are full.
pub const NOW: u64 = 100 * DAY_S;

#[derive(Debug, Clone)]
pub struct World {
    pub specs: Vec<AccountSpec>,
    pub gpus: u32,
    pub ledger: Ledger,
    pub now: u64,
    /// Budget units per GPU of the whole cluster (every GPU of one weight).
    pub unit: f64,
}

impl World {
    pub fn new(gpus: u32) -> World {
        World { specs: vec![], gpus, ledger: Ledger::new(HOUR_S, WEEK_S).unwrap(), now: NOW, unit: 1.0 }
    }
    /// An account with a share of its parent (percent).
    pub fn share(mut self, name: &str, parent: Option<&str>, pct: f64) -> World {
        self.specs.push(AccountSpec::new(name, parent, Some(Budget::Share(pct))));
        self
    }
    /// An account with no budget.
    pub fn unfunded(mut self, name: &str, parent: Option<&str>) -> World {
        self.specs.push(AccountSpec::new(name, parent, None));
        self
    }
    /// `gpu_hours` of usage by `account`/`user` in the hour before now.
    pub fn used(mut self, account: &str, user: &str, gpu_hours: f64) -> World {
        let b = self.now / HOUR_S - 1;
        self.ledger.add(b, &UsageKey::new(account, user), gpu_hours * HOUR);
        self
    }
    pub fn tree(&self) -> OrgTree {
        OrgTree::new(&self.specs).expect("valid tree")
    }
    pub fn alloc(&self) -> Allocation {
        Allocation::new(&self.tree(), Capacity::weighted(self.gpus, f64::from(self.gpus) * self.unit, WEEK_S)).expect("fits")
    }
    /// The same world on GPUs that all weigh `w` (a whole number): the
    /// capacity and every amount of usage × `w`.
    pub fn scaled(&self, w: u32) -> World {
        let mut ledger = Ledger::new(HOUR_S, WEEK_S).unwrap();
        for (b, key, gs) in self.ledger.whole_entries() {
            ledger.add_whole(b, key, gs * u64::from(w));
        }
        World { ledger, unit: self.unit * f64::from(w), ..self.clone() }
    }
    pub fn fs(&self) -> FairShare {
        FairShare::compute(&self.tree(), &self.alloc(), &self.ledger.usage(self.now))
    }
    /// The entitlement now with these jobs: started ones run, the others
    /// wait; only allocated jobs count.
    pub fn ent(&self, jobs: &[Job]) -> Entitlement {
        Entitlement::compute(&self.tree(), &self.alloc(), &self.load(jobs))
    }
    /// What [`World::ent`] counts: started jobs run, the others wait; only
    /// allocated jobs count.
    pub fn load(&self, jobs: &[Job]) -> Load {
        let tree = self.tree();
        let alloc = self.alloc();
        let mut load = Load::new(&tree);
        for j in jobs.iter().filter(|j| j.is_allocated(&Funded::new(&tree, &alloc))) {
            let id = tree.id(&j.account).expect("in tree");
            load.count(id, j, j.start_s.is_some(), &tally_allocator::PriorityRules::default());
        }
        load
    }
}

/// The cluster's default rules: the debug class and lane, contracts of at
/// most 8 h.
pub static RULES: PriorityRules = PriorityRules {
    quick_time_limit_s: priority::DEFAULT_QUICK_TIME_LIMIT_S,
    debug_max_gpus: priority::DEFAULT_DEBUG_MAX_GPUS,
    debug_max_contract_s: priority::DEFAULT_DEBUG_MAX_CONTRACT_S,
    debug_lane: true,
    debug_allowance_bp: priority::DEFAULT_DEBUG_ALLOWANCE_BP,
};
pub static CONTRACTS: ContractRules = ContractRules {
    max_s: contract::DEFAULT_MAX_CONTRACT_S,
    unallocated_below_s: 0,
    missing: MissingContract::Unallocated,
    long_jobs: LongJobs::Warn,
};

/// The preemption rule's moment at `NOW` under the default rules.
pub fn moment(ent: &Entitlement) -> Moment<'_> {
    Moment { ent, rules: &RULES, contracts: &CONTRACTS, now: NOW }
}

/// A running allocated job (`ran` seconds so far).
pub fn running(id: u64, account: &str, gpus: u32, contract_s: u64, resumable: bool, ran: u64) -> Job {
    Job::new(id, account, "v").gpus(gpus).contract(contract_s, resumable).submitted(NOW - ran - 10).started(NOW - ran)
}

/// Accounts from most to least under-served.
pub fn ranking(fs: &FairShare) -> Vec<String> {
    fs.ranked().map(|s| s.account.clone()).collect()
}
