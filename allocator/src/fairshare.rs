//! Hierarchical fair share over the sliding window, ranked as Slurm's Fair
//! Tree ranks (depth-first, level by level).
//!
//! ```text
//! ratio(node) = used(node) / allocated(node)      over the window, GPU-hours
//! ```
//! `ratio < 1`: the node used less than it was promised; `> 1`: more. This is
//! the inverse of Fair Tree's level factor `LF = S / U`, so siblings sort by
//! ratio *ascending* where Fair Tree sorts LF descending.
//!
//! Walk: at each account, its children and its own part (the allocation it
//! kept and the usage of jobs charged to it directly) are sorted by
//! 1. funding class: funded (allocated > 0) < unfunded and idle < unfunded
//!    with usage (a node with zero allocation but usage ranks last; ordered
//!    by usage among themselves),
//! 2. ratio ascending (under-used first),
//! 3. name ascending (deterministic tie-break; an own part carries its
//!    account's name),
//!
//! then visited in that order, depth-first. The order in which own parts are
//! visited is the account ranking: rank 0 is the most under-served account.
//! `factor = (n − rank) / n` ∈ (0, 1], 1 for rank 0, as sprio shows it.
//!
//! Users rank inside their account by their own usage, ascending (equal shares
//! among an account's users), then by name.

use crate::ledger::WindowUsage;
use crate::tree::{Allocation, NodeId, OrgTree};
use rustc_hash::FxHashMap;
use std::cmp::Ordering;

/// Where an account stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    pub account: String,
    /// 0 = most under-served account of the cluster.
    pub rank: u32,
    /// `(n − rank) / n`.
    pub factor: f64,
    /// Own part: GPU-hours used by jobs charged to this account in the window.
    pub used_gpu_hours: f64,
    /// Own part: GPU-hours per window this account kept.
    pub allocated_gpu_hours: f64,
    /// Whole subtree.
    pub subtree_used_gpu_hours: f64,
    pub subtree_allocated_gpu_hours: f64,
    /// Sort key of the own part (see module docs).
    pub key: RankKey,
}

/// The sort key of one item among siblings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankKey {
    pub class: FundingClass,
    /// `used / allocated` when funded; GPU-hours used when unfunded.
    pub ratio: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FundingClass {
    Funded = 0,
    UnfundedIdle = 1,
    UnfundedUsing = 2,
}

impl RankKey {
    pub fn new(allocated_gpu_hours: f64, used_gpu_hours: f64) -> RankKey {
        if allocated_gpu_hours > 0.0 {
            RankKey { class: FundingClass::Funded, ratio: used_gpu_hours / allocated_gpu_hours }
        } else if used_gpu_hours > 0.0 {
            RankKey { class: FundingClass::UnfundedUsing, ratio: used_gpu_hours }
        } else {
            RankKey { class: FundingClass::UnfundedIdle, ratio: 0.0 }
        }
    }
    pub fn order(&self, other: &RankKey) -> Ordering {
        self.class.cmp(&other.class).then(self.ratio.total_cmp(&other.ratio))
    }
    /// Funded ratio, or infinity for unfunded accounts (for reports).
    pub fn display_ratio(&self) -> f64 {
        match self.class {
            FundingClass::Funded => self.ratio,
            _ => f64::INFINITY,
        }
    }
}

/// The ranking of every account of a tree at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct FairShare {
    /// Every account's standing, by node.
    standings: Vec<Standing>,
    /// Nodes by account name.
    index: FxHashMap<String, NodeId>,
    /// Nodes, rank 0 first.
    order: Vec<NodeId>,
}

enum Item {
    Own(NodeId),
    Child(NodeId),
}

impl FairShare {
    pub fn compute(tree: &OrgTree, alloc: &Allocation, usage: &WindowUsage) -> FairShare {
        let standings: Vec<Standing> = (0..tree.len())
            .map(|id| Standing {
                account: tree.node(id).name.clone(),
                rank: 0,
                factor: 0.0,
                used_gpu_hours: 0.0,
                allocated_gpu_hours: 0.0,
                subtree_used_gpu_hours: 0.0,
                subtree_allocated_gpu_hours: 0.0,
                key: RankKey::new(0.0, 0.0),
            })
            .collect();
        let index = standings.iter().enumerate().map(|(id, s)| (s.account.clone(), id)).collect();
        let mut fs = FairShare { standings, index, order: Vec::with_capacity(tree.len()) };
        fs.rank(tree, alloc, usage);
        fs
    }

    /// [`FairShare::compute`] again, in place: what a recalculation of the
    /// same tree does every period without building its names anew.
    pub fn update(&mut self, tree: &OrgTree, alloc: &Allocation, usage: &WindowUsage) {
        let same_tree = self.standings.len() == tree.len() && (0..tree.len()).all(|id| self.standings[id].account == tree.node(id).name);
        if same_tree {
            self.rank(tree, alloc, usage);
        } else {
            *self = FairShare::compute(tree, alloc, usage);
        }
    }

    /// Rank the accounts of `tree`, whose standings `self` holds by node.
    fn rank(&mut self, tree: &OrgTree, alloc: &Allocation, usage: &WindowUsage) {
        let n = tree.len();
        // Own usage per node, and subtree sums bottom-up.
        let own_used: Vec<f64> = (0..n).map(|id| usage.account_gpu_hours(&tree.node(id).name)).collect();
        let mut sub_used = own_used.clone();
        let walk = tree.walk();
        for &(id, _) in walk.iter().rev() {
            if let Some(p) = tree.node(id).parent {
                sub_used[p] += sub_used[id];
            }
        }
        let own_key = |id: NodeId| RankKey::new(alloc.own_gpu_hours[id], own_used[id]);
        let sub_key = |id: NodeId| RankKey::new(alloc.gpu_hours[id], sub_used[id]);

        let order = &mut self.order;
        order.clear();
        // Depth-first with an explicit stack of items still to visit.
        let mut stack = vec![Item::Child(tree.root())];
        let mut items: Vec<(RankKey, &str, Item)> = Vec::new();
        while let Some(item) = stack.pop() {
            match item {
                Item::Own(id) => order.push(id),
                Item::Child(id) => {
                    items.push((own_key(id), tree.node(id).name.as_str(), Item::Own(id)));
                    for &c in &tree.node(id).children {
                        items.push((sub_key(c), tree.node(c).name.as_str(), Item::Child(c)));
                    }
                    // 1–2: class, ratio; 3: name; own part before a child of
                    // the same name (cannot happen: names are unique).
                    items.sort_by(|a, b| a.0.order(&b.0).then_with(|| a.1.cmp(b.1)));
                    stack.extend(items.drain(..).rev().map(|(_, _, it)| it));
                }
            }
        }
        let total = order.len() as f64;
        for (rank, &id) in order.iter().enumerate() {
            let s = &mut self.standings[id];
            s.rank = rank as u32;
            s.factor = (total - rank as f64) / total;
            s.used_gpu_hours = own_used[id];
            s.allocated_gpu_hours = alloc.own_gpu_hours[id];
            s.subtree_used_gpu_hours = sub_used[id];
            s.subtree_allocated_gpu_hours = alloc.gpu_hours[id];
            s.key = own_key(id);
        }
    }

    /// `None` for an account that is not in the tree.
    pub fn standing(&self, account: &str) -> Option<&Standing> {
        self.index.get(account).map(|&id| &self.standings[id])
    }

    /// Accounts from rank 0 (most under-served) down.
    pub fn ranked(&self) -> impl Iterator<Item = &Standing> + '_ {
        self.order.iter().map(|&id| &self.standings[id])
    }

    /// Number of ranked accounts (including root).
    pub fn len(&self) -> usize {
        self.order.len()
    }
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}
