//! What every part of the tree is entitled to *now*: the instantaneous half
//! of Tally's fairness (the 7-day [`crate::fairshare`] ranking is the other,
//! time-aware half).
//!
//! Every account node has two *items*: its whole subtree, and its own part
//! (jobs charged to the account itself; for a team, that is the team). For
//! each item:
//!
//! ```text
//! rate      = allocated GPU-hours per window ÷ window hours          GPUs
//! running   = GPUs of its allocated jobs running now
//!             (all in budget units with GPU types: each job's GPUs × its
//!             type's weight, [`crate::gpu_types`])
//! demand    = running + GPUs of its allocated jobs waiting (eligible)
//! owed      = min(rate, demand)
//! fair      = hierarchical weighted water-fill of the cluster:
//!             fair(root) = min(cluster GPUs, demand(root)); at each node,
//!             fair(item) = min(demand(item), λ · rate(item)) with λ such
//!             that the items share exactly fair(node). What an idle item
//!             leaves goes to its siblings first, in proportion to their
//!             rates, then up the tree (Fair Tree's order). Items without a
//!             rate only get what funded siblings cannot use. fair ≥ owed.
//! share     = running / rate        (+∞ without a rate)
//! ```
//!
//! Two rules read it: the job order ([`crate::priority`]: a job whose team
//! would still be below its rate, or its fair share, when it starts comes
//! before every job that would not) and the preemption rule
//! ([`crate::preempt`], through [`Reclaim`]): an allocated job may take
//! GPUs from another side of the tree only where that side stays at or
//! above its rate and keeps a share (`running / rate`) at least as high as
//! the preemptor's side ends with — KAI's reclaim to deserved quota with
//! Kueue's "less than or equal to final share" — and, unless it is a debug
//! job (time-slicing), only to a side below its rate (restoration). Design
//! and the no-ping-pong argument: docs/design.md, "Restorative preemption"
//! and "Time-slicing".

use crate::tree::{Allocation, NodeId, OrgTree};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Item index of a node's whole subtree.
fn sub(id: NodeId) -> usize {
    2 * id
}
/// Item index of a node's own part.
fn own(id: NodeId) -> usize {
    2 * id + 1
}

/// Allocated GPUs running and waiting per account, the input of
/// [`Entitlement::compute`]. Only allocated jobs belong here; the caller
/// decides which waiting jobs are eligible (Slurm: not held, begin time
/// reached).
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    running: Vec<f64>,
    waiting: Vec<f64>,
    /// GPUs of allocated debug jobs ([`crate::PriorityRules::is_debug`])
    /// running and waiting, the debug allowance's count
    /// ([`Entitlement::debug_room`]).
    debug_running: Vec<f64>,
    debug_waiting: Vec<f64>,
}

impl Load {
    /// An empty load for the nodes of `tree`.
    pub fn new(tree: &OrgTree) -> Load {
        let zero = vec![0.0; tree.len()];
        Load { running: zero.clone(), waiting: zero.clone(), debug_running: zero.clone(), debug_waiting: zero }
    }
    /// Count an allocated job of node `id`, running or waiting: its budget
    /// units, and its GPUs against the debug allowance if it is a debug job
    /// (the one way the plugin and the reports count a job). A job array's
    /// record of pending tasks counts all of them: `tasks ×` its units and
    /// GPUs ([`crate::Job::tasks`]; 1 for every other job).
    pub fn count(&mut self, id: NodeId, job: &crate::Job, running: bool, rules: &crate::PriorityRules) {
        let tasks = f64::from(job.tasks.max(1));
        if running {
            self.run_units(id, job.units() * tasks);
        } else {
            self.wait_units(id, job.units() * tasks);
        }
        if rules.is_debug(job) {
            self.debug_gpus(id, f64::from(job.gpus) * tasks, running);
        }
    }
    /// Count GPUs of an allocated debug job, running or waiting (besides
    /// its units, [`Load::run_units`] or [`Load::wait_units`]).
    pub fn debug_gpus(&mut self, id: NodeId, gpus: f64, running: bool) {
        let v = if running { &mut self.debug_running } else { &mut self.debug_waiting };
        if let Some(d) = v.get_mut(id) {
            *d += gpus;
        }
    }
    /// Count a running allocated job of `gpus` GPUs charged to node `id`.
    pub fn run(&mut self, id: NodeId, gpus: u32) {
        self.run_units(id, f64::from(gpus));
    }
    /// Count a waiting allocated job.
    pub fn wait(&mut self, id: NodeId, gpus: u32) {
        self.wait_units(id, f64::from(gpus));
    }
    /// Count a running allocated job of `units` budget units ([`crate::Job::units`]).
    pub fn run_units(&mut self, id: NodeId, units: f64) {
        if let Some(r) = self.running.get_mut(id) {
            *r += units;
        }
    }
    /// Count a waiting allocated job of `units` budget units.
    pub fn wait_units(&mut self, id: NodeId, units: f64) {
        if let Some(w) = self.waiting.get_mut(id) {
            *w += units;
        }
    }
}

/// One account's own part, now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TeamNow {
    /// GPUs (allocation ÷ window).
    pub rate: f64,
    pub running: f64,
    /// Running + waiting allocated GPUs.
    pub demand: f64,
    /// `min(rate, demand)`.
    pub owed: f64,
    /// The water-filled fair share (≥ `owed`).
    pub fair: f64,
    /// GPUs of its allocated debug jobs running now, and waiting.
    pub debug_running: f64,
    pub debug_waiting: f64,
}

impl TeamNow {
    /// GPUs it is below what it is owed now (0 when it is not).
    pub fn short(&self) -> f64 {
        (self.owed - self.running).max(0.0)
    }
}

/// Where a waiting job's team would stand when the job starts (after the
/// team's jobs ahead of it), the job order's `need` field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Need {
    /// Its team would still be below its rate: `share` = (running + ahead) ÷ rate ∈ [0, 1).
    Owed { share: f64 },
    /// Below its fair share now (an idle sibling's rate), at or above its
    /// own rate: `share` = (running + ahead) ÷ fair ∈ [0, 1).
    Fair { share: f64 },
    /// Neither: served by the 7-day ranking.
    Surplus,
}

/// Why an allocated victim may not give its GPUs to an allocated preemptor
/// of another account ([`Reclaim::take`], [`Reclaim::slice`]); the side
/// names are the two items where the paths of the two accounts part.
/// `A` is how an item is named: its account (`String`), or, inside the
/// checks, its index, named only for a caller that asks why
/// (`Refused`), so a scheduler asking yes or no of many victims builds
/// no text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReclaimRefusal<A = String> {
    /// Same account: the team's own order decides ([`crate::preempt`]).
    SameTeam,
    /// An account outside the tree.
    Unknown,
    /// The preemptor's side of the tree already runs at or above its rate.
    PreemptorNotShort { running: f64, rate: f64 },
    /// Taking the victim would leave an item on the victim's side (`account`
    /// is the subtree or own part concerned) below its rate.
    VictimBelowRate { account: A, after: f64, rate: f64 },
    /// The preemptor's side would end with a higher share than the victim's
    /// side keeps (`running / rate`, Kueue's final-share rule).
    ShareNotLower { preemptor_after: f64, victim_after: f64 },
    /// (A debug preemptor, [`Reclaim::slice`].) Without the victim, an item
    /// of the victim's side (`account`) would run a smaller share of its
    /// rate than the preemptor's side with the preemptor.
    Outranked { account: A, victim_after: f64, preemptor_after: f64 },
}

/// The entitlement of every item at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Entitlement {
    capacity_gpus: f64,
    rate: Vec<f64>,
    running: Vec<f64>,
    demand: Vec<f64>,
    fair: Vec<f64>,
    /// Per node: GPUs of its own allocated debug jobs running and waiting.
    debug_running: Vec<f64>,
    debug_waiting: Vec<f64>,
    /// Per node: the items from the top of the tree to its own part (each
    /// ancestor's subtree below root, its own subtree, then its own part).
    paths: Vec<Vec<usize>>,
    names: Vec<String>,
    /// The tree's shape: each node's parent.
    parents: Vec<Option<NodeId>>,
    has_children: Vec<bool>,
    index: FxHashMap<String, NodeId>,
}

impl Entitlement {
    /// ```text
    /// running, demand: summed bottom-up; fair: water-filled top-down
    /// ```
    pub fn compute(tree: &OrgTree, alloc: &Allocation, load: &Load) -> Entitlement {
        let n = tree.len();
        let mut paths = Vec::with_capacity(n);
        let mut names = Vec::with_capacity(n);
        let mut parents = Vec::with_capacity(n);
        let mut has_children = Vec::with_capacity(n);
        let mut index = FxHashMap::default();
        for id in 0..n {
            let mut chain = Vec::new();
            let mut cur = id;
            while let Some(p) = tree.node(cur).parent {
                chain.push(sub(cur));
                cur = p;
            }
            chain.reverse();
            chain.push(own(id));
            paths.push(chain);
            names.push(tree.node(id).name.clone());
            parents.push(tree.node(id).parent);
            has_children.push(!tree.node(id).children.is_empty());
            index.insert(tree.node(id).name.clone(), id);
        }
        let items = vec![0.0; 2 * n];
        let mut e = Entitlement {
            capacity_gpus: 0.0,
            rate: items.clone(),
            running: items.clone(),
            demand: items.clone(),
            fair: items,
            debug_running: vec![0.0; n],
            debug_waiting: vec![0.0; n],
            paths,
            names,
            parents,
            has_children,
            index,
        };
        e.measure(tree, alloc, load);
        e
    }

    /// [`Entitlement::compute`] again, in place: what a scheduler does every
    /// pass without building the tree's paths and names anew.
    pub fn update(&mut self, tree: &OrgTree, alloc: &Allocation, load: &Load) {
        let same_tree = self.names.len() == tree.len()
            && (0..tree.len()).all(|id| self.parents[id] == tree.node(id).parent && self.names[id] == tree.node(id).name);
        if same_tree {
            self.measure(tree, alloc, load);
        } else {
            *self = Entitlement::compute(tree, alloc, load);
        }
    }

    /// Rates, running and demand of every item of `tree` (whose paths and
    /// names `self` holds), and the fair shares.
    fn measure(&mut self, tree: &OrgTree, alloc: &Allocation, load: &Load) {
        let n = tree.len();
        let hours = alloc.capacity.window_hours();
        let per_hour = |gh: f64| if hours > 0.0 { gh / hours } else { 0.0 };
        let Entitlement { rate, running, demand, fair, debug_running, debug_waiting, .. } = self;
        for v in [&mut *rate, &mut *running, &mut *demand, &mut *fair] {
            v.fill(0.0);
        }
        for (mine, given) in [(debug_running, &load.debug_running), (debug_waiting, &load.debug_waiting)] {
            mine.clear();
            mine.extend((0..n).map(|id| given.get(id).copied().unwrap_or(0.0)));
        }
        for id in 0..n {
            rate[sub(id)] = per_hour(alloc.gpu_hours[id]);
            rate[own(id)] = per_hour(alloc.own_gpu_hours[id]);
            running[own(id)] = load.running.get(id).copied().unwrap_or(0.0);
            demand[own(id)] = running[own(id)] + load.waiting.get(id).copied().unwrap_or(0.0);
        }
        let walk = tree.walk();
        for &(id, _) in walk.iter().rev() {
            running[sub(id)] += running[own(id)];
            demand[sub(id)] += demand[own(id)];
            if let Some(p) = tree.node(id).parent {
                running[sub(p)] += running[sub(id)];
                demand[sub(p)] += demand[sub(id)];
            }
        }
        self.capacity_gpus = alloc.capacity.units;
        fair[sub(tree.root())] = self.capacity_gpus.min(demand[sub(tree.root())]);
        for &(id, _) in &walk {
            let mut items: Vec<usize> = vec![own(id)];
            items.extend(tree.node(id).children.iter().map(|&c| sub(c)));
            let shares = water_fill(fair[sub(id)], &items.iter().map(|&i| (rate[i], demand[i])).collect::<Vec<_>>());
            for (&i, s) in items.iter().zip(shares) {
                fair[i] = s;
            }
        }
    }

    /// May an account's own part hold allocated work: a positive rate of
    /// its own, not the root (`Job::is_allocated`'s test, by node).
    pub fn funded_at(&self, id: NodeId) -> bool {
        id != 0 && self.rate.get(own(id)).is_some_and(|&r| r > 0.0)
    }

    /// Node of an account; `None` outside the tree.
    pub fn id(&self, account: &str) -> Option<NodeId> {
        self.index.get(account).copied()
    }

    /// GPUs of the cluster the rates were computed for (budget units with
    /// GPU types, [`crate::gpu_types`]).
    pub fn capacity_gpus(&self) -> f64 {
        self.capacity_gpus
    }

    /// An account's own part now; `None` outside the tree.
    pub fn team(&self, account: &str) -> Option<TeamNow> {
        self.id(account).map(|id| self.team_at(id))
    }

    /// [`Entitlement::team`] by node.
    pub fn team_at(&self, id: NodeId) -> TeamNow {
        let i = own(id);
        TeamNow {
            rate: self.rate[i],
            running: self.running[i],
            demand: self.demand[i],
            owed: self.rate[i].min(self.demand[i]),
            fair: self.fair[i],
            debug_running: self.debug_running[id],
            debug_waiting: self.debug_waiting[id],
        }
    }

    /// The fair share of `id`'s own part ([`TeamNow::fair`]) were its
    /// demand `extra` GPUs more (work submitted since these figures): the
    /// water-fill of [`Entitlement::compute`] redone along its path only,
    /// from the root down.
    pub fn fair_with_more(&self, id: NodeId, extra: f64) -> f64 {
        if extra <= 0.0 {
            return self.fair[own(id)];
        }
        let mut chain = vec![id];
        while let Some(p) = self.parents[*chain.last().unwrap_or(&id)] {
            chain.push(p);
        }
        chain.reverse();
        let mut fair = self.capacity_gpus.min(self.demand[sub(chain[0])] + extra);
        for (k, &node) in chain.iter().enumerate() {
            let next = chain.get(k + 1).map_or(own(id), |&c| sub(c));
            let mut items = vec![own(node)];
            items.extend((0..self.parents.len()).filter(|&c| self.parents[c] == Some(node)).map(sub));
            let asks: Vec<(f64, f64)> = items.iter().map(|&i| (self.rate[i], self.demand[i] + if i == next { extra } else { 0.0 })).collect();
            let shares = water_fill(fair, &asks);
            fair = items.iter().zip(shares).find(|&(&i, _)| i == next).map_or(0.0, |(_, s)| s);
        }
        fair
    }

    /// The account other than `id` furthest below what it is owed now, and
    /// by how many GPUs ([`TeamNow::short`]); `None` when no other is short.
    pub fn most_short_besides(&self, id: NodeId) -> Option<(NodeId, f64)> {
        (0..self.names.len())
            .filter(|&k| k != id && self.funded_at(k))
            .map(|k| (k, self.team_at(k).short()))
            .filter(|&(_, short)| short > 1e-9)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    /// An account's name by node.
    pub fn name_at(&self, id: NodeId) -> &str {
        &self.names[id]
    }

    /// GPUs the team of `id` may still put in the debug allowance now: its
    /// allowance ([`crate::PriorityRules::debug_allowance`] of its rate)
    /// less the GPUs of its debug jobs running (negative when over).
    pub fn debug_room(&self, id: NodeId, rules: &crate::PriorityRules) -> f64 {
        rules.debug_allowance(self.rate[own(id)]) - self.debug_running.get(id).copied().unwrap_or(0.0)
    }

    /// A debug job of `gpus` GPUs of the team of `id` started (`delta` > 0)
    /// or stopped: move its count (as [`Entitlement::add_running`] moves
    /// the units).
    pub fn add_debug_running(&mut self, id: NodeId, delta: f64) {
        if let Some(d) = self.debug_running.get_mut(id) {
            *d += delta;
        }
    }

    /// Where the team of `id` would stand when a job starts after
    /// `ahead_gpus` of its team's GPUs that wait before it:
    ///
    /// ```text
    /// x = running + ahead
    /// Owed(x / rate)   if x < rate
    /// Fair(x / fair)   else if x < fair
    /// Surplus          otherwise
    /// ```
    pub fn need(&self, id: NodeId, ahead_gpus: f64) -> Need {
        let t = self.team_at(id);
        let x = t.running + ahead_gpus.max(0.0);
        if x < t.rate {
            Need::Owed { share: x / t.rate }
        } else if x < t.fair {
            Need::Fair { share: x / t.fair }
        } else {
            Need::Surplus
        }
    }

    /// A job of account `id` with `gpus` GPUs started (`delta` > 0) or
    /// stopped (`delta` < 0): move `running` along its path. Fair shares
    /// stay as computed (they move with demand, at the next compute).
    pub fn add_running(&mut self, id: NodeId, delta: f64) {
        if let Some(path) = self.paths.get(id) {
            for &i in path {
                self.running[i] += delta;
            }
            self.running[sub(0)] += delta;
        }
    }

    /// The potential of the no-ping-pong argument (docs/design.md): per
    /// depth of the tree, deepest first, the GPUs by which items at that
    /// depth run below their rate, `Σ max(0, rate − running)`. Every
    /// restoration the rule allows makes it strictly smaller,
    /// lexicographically; a time-slice never raises it below the depth
    /// where the two sides part.
    pub fn potential(&self) -> Vec<f64> {
        let depth = |path: &Vec<usize>| path.len();
        let max_depth = self.paths.iter().map(depth).max().unwrap_or(0);
        let mut out = vec![0.0; max_depth];
        for path in &self.paths {
            // own part at depth |path|, its subtree one above (root's subtree excluded).
            let own_item = *path.last().expect("never empty");
            let d = depth(path);
            out[max_depth - d] += (self.rate[own_item] - self.running[own_item]).max(0.0);
            if d >= 2 {
                let sub_item = own_item - 1;
                out[max_depth - (d - 1)] += (self.rate[sub_item] - self.running[sub_item]).max(0.0);
            }
        }
        out
    }

    /// The cumulative preemption check for one preemptor.
    pub fn reclaim(&self) -> Reclaim<'_> {
        Reclaim { ent: self, taken: BTreeMap::new() }
    }

    fn item_name(&self, item: usize) -> String {
        let name = &self.names[item / 2];
        if item % 2 == 1 || !self.has_children[item / 2] {
            name.clone()
        } else {
            format!("{name} (subtree)")
        }
    }
}

/// Weighted max-min fair division of `total` among items `(weight, cap)`:
/// `x_i = min(cap_i, λ · weight_i)` with `Σ x_i = min(total, Σ cap_i)`;
/// what items with a weight cannot use goes to the weightless ones, equally
/// (capped likewise).
fn water_fill(total: f64, items: &[(f64, f64)]) -> Vec<f64> {
    let mut out = vec![0.0; items.len()];
    let mut left = total.max(0.0);
    for weighted in [true, false] {
        let mut idx: Vec<usize> = (0..items.len()).filter(|&i| (items[i].0 > 0.0) == weighted && items[i].1 > 0.0).collect();
        let weight = |i: usize| if weighted { items[i].0 } else { 1.0 };
        idx.sort_by(|&a, &b| (items[a].1 / weight(a)).total_cmp(&(items[b].1 / weight(b))));
        let mut w_left: f64 = idx.iter().map(|&i| weight(i)).sum();
        for (k, &i) in idx.iter().enumerate() {
            if left <= 0.0 || w_left <= 0.0 {
                break;
            }
            let level = left / w_left;
            if items[i].1 <= level * weight(i) {
                out[i] = items[i].1;
                left -= items[i].1;
                w_left -= weight(i);
            } else {
                for &j in &idx[k..] {
                    out[j] = level * weight(j);
                }
                left = 0.0;
                break;
            }
        }
    }
    out
}

/// The preemption checks between allocated jobs of two accounts,
/// cumulative over the victims already taken for one preemptor (so a
/// preemptor that needs several victims never takes more than the rules
/// allow in total).
///
/// ```text
/// L = where the paths of the preemptor's account P and the victim's V part;
/// X = P's item under L, Y = V's item under L, Y..own(V) = V's path from Y;
/// after(i) = running(i) − taken(i) − g_V.
///
/// take  ⇔ running(X) < rate(X)                                    P's side is short
///       ∧ ∀ i ∈ Y..own(V): after(i) ≥ rate(i)                     V's side stays at or above its rate
///       ∧ (running(X) + g_P) ÷ rate(X) ≤ after(Y) ÷ rate(Y)        no higher final share
///
/// slice ⇔ ∀ i ∈ Y..own(V): after(i) ≥ rate(i)                     V's side stays at or above its rate
///       ∧ ∀ i ∈ Y..own(V): (running(X) + g_P) ÷ rate(X) ≤ after(i) ÷ rate(i)
///                                                                 and keeps no lower a share
/// ```
/// `take` restores what a side is owed (KAI's reclaim to deserved quota
/// with Kueue's final share): any allocated job may. `slice` is Ai2's
/// time-slicing across teams, for debug jobs only: `take` without "P's
/// side is short", the final share checked at every item of the victim's
/// path. Both compare shares of the rate, so neither can undo the other
/// (docs/design.md).
#[derive(Debug, Clone)]
pub struct Reclaim<'a> {
    ent: &'a Entitlement,
    /// GPUs already taken per item.
    taken: BTreeMap<usize, f64>,
}

impl Reclaim<'_> {
    /// May a job of `p` needing `p_gpus` take a running job of `v` holding
    /// `v_gpus`, after the victims taken so far? On yes the victim counts as
    /// taken.
    pub fn take(&mut self, p: &str, p_gpus: u32, v: &str, v_gpus: u32) -> Result<(), ReclaimRefusal> {
        self.take_units(p, f64::from(p_gpus), v, f64::from(v_gpus))
    }

    /// [`Reclaim::take`] in budget units ([`crate::Job::units`]): what the
    /// rule compares with the rates.
    pub fn take_units(&mut self, p: &str, p_units: f64, v: &str, v_units: f64) -> Result<(), ReclaimRefusal> {
        let e = self.ent;
        self.take_at(e.id(p), p_units, e.id(v), v_units).map_err(|r| r.named(e))
    }

    /// [`Reclaim::take_units`] by node (`None`: an account outside the tree).
    #[inline]
    pub(crate) fn take_at(&mut self, p: Option<NodeId>, p_units: f64, v: Option<NodeId>, v_units: f64) -> Result<(), Refused> {
        let e = self.ent;
        let (x, path) = parting(e, p, v)?;
        let y = path[0];
        if e.running[x] >= e.rate[x] {
            return Err(Refused::PreemptorNotShort { running: e.running[x], rate: e.rate[x] });
        }
        self.keeps_rates(path, v_units)?;
        let preemptor_after = share(e.running[x] + p_units, e.rate[x]);
        let victim_after = share(self.after(y, v_units), e.rate[y]);
        if preemptor_after > victim_after + 1e-12 {
            return Err(Refused::ShareNotLower { preemptor_after, victim_after });
        }
        self.commit(path, v_units);
        Ok(())
    }

    /// The debug job's check ([`Reclaim`]'s `slice`), in budget units; on
    /// yes the victim counts as taken.
    pub fn slice(&mut self, p: &str, p_units: f64, v: &str, v_units: f64) -> Result<(), ReclaimRefusal> {
        let e = self.ent;
        self.slice_at(e.id(p), p_units, e.id(v), v_units).map_err(|r| r.named(e))
    }

    /// [`Reclaim::slice`] by node (`None`: an account outside the tree).
    #[inline]
    pub(crate) fn slice_at(&mut self, p: Option<NodeId>, p_units: f64, v: Option<NodeId>, v_units: f64) -> Result<(), Refused> {
        let e = self.ent;
        let (x, path) = parting(e, p, v)?;
        self.keeps_rates(path, v_units)?;
        let preemptor_after = share(e.running[x] + p_units, e.rate[x]);
        for &i in path {
            let victim_after = share(self.after(i, v_units), e.rate[i]);
            if preemptor_after > victim_after + 1e-12 {
                return Err(Refused::Outranked { account: i, victim_after, preemptor_after });
            }
        }
        self.commit(path, v_units);
        Ok(())
    }

    /// What item `i` runs without the victims taken so far and one more of `g`.
    fn after(&self, i: usize, g: f64) -> f64 {
        self.ent.running[i] - self.taken.get(&i).copied().unwrap_or(0.0) - g
    }

    /// Every item of the victim's path stays at or above its rate.
    fn keeps_rates(&self, path: &[usize], g: f64) -> Result<(), Refused> {
        let e = self.ent;
        for &i in path {
            // Tolerance: rates are fractions of GPUs, runs are whole GPUs.
            if self.after(i, g) < e.rate[i] - 1e-9 {
                return Err(Refused::VictimBelowRate { account: i, after: self.after(i, g), rate: e.rate[i] });
            }
        }
        Ok(())
    }

    fn commit(&mut self, path: &[usize], g: f64) {
        for &i in path {
            *self.taken.entry(i).or_insert(0.0) += g;
        }
    }
}

/// A [`ReclaimRefusal`] with its items not yet named.
pub(crate) type Refused = ReclaimRefusal<usize>;

impl Refused {
    /// The refusal with its items named.
    pub(crate) fn named(self, e: &Entitlement) -> ReclaimRefusal {
        match self {
            Refused::SameTeam => ReclaimRefusal::SameTeam,
            Refused::Unknown => ReclaimRefusal::Unknown,
            Refused::PreemptorNotShort { running, rate } => ReclaimRefusal::PreemptorNotShort { running, rate },
            Refused::VictimBelowRate { account, after, rate } => ReclaimRefusal::VictimBelowRate { account: e.item_name(account), after, rate },
            Refused::ShareNotLower { preemptor_after, victim_after } => ReclaimRefusal::ShareNotLower { preemptor_after, victim_after },
            Refused::Outranked { account, victim_after, preemptor_after } => {
                ReclaimRefusal::Outranked { account: e.item_name(account), victim_after, preemptor_after }
            }
        }
    }
}

/// Where the paths of the accounts of nodes `p` and `v` part: X (p's item
/// there), and v's path from Y down.
#[inline]
fn parting(e: &Entitlement, p: Option<NodeId>, v: Option<NodeId>) -> Result<(usize, &[usize]), Refused> {
    let (Some(pi), Some(vi)) = (p, v) else { return Err(Refused::Unknown) };
    if pi == vi {
        return Err(Refused::SameTeam);
    }
    let (pp, vp) = (&e.paths[pi], &e.paths[vi]);
    let k = pp.iter().zip(vp.iter()).take_while(|(a, b)| a == b).count();
    Ok((pp[k], &vp[k..]))
}

/// `share = running / rate`, +∞ without a rate.
fn share(running: f64, rate: f64) -> f64 {
    if rate > 0.0 {
        running / rate
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{AccountSpec, Budget, Capacity};
    use crate::WEEK_S;

    fn tree(specs: &[(&str, Option<&str>, f64)]) -> OrgTree {
        let s: Vec<AccountSpec> = specs.iter().map(|&(n, p, pct)| AccountSpec::new(n, p, Some(Budget::Share(pct)))).collect();
        OrgTree::new(&s).unwrap()
    }

    fn ent(t: &OrgTree, gpus: u32, loads: &[(&str, u32, u32)]) -> Entitlement {
        let alloc = Allocation::new(t, Capacity::new(gpus, WEEK_S)).unwrap();
        let mut l = Load::new(t);
        for &(a, run, wait) in loads {
            let id = t.id(a).unwrap();
            l.run(id, run);
            l.wait(id, wait);
        }
        Entitlement::compute(t, &alloc, &l)
    }

    #[test]
    fn fair_with_more_is_the_fill_with_that_demand() {
        // Nested and flat teams, idle and busy, on 40 GPUs: each team's fair
        // share with x GPUs more asked is what a whole computation gives.
        let t = tree(&[("p", None, 50.0), ("a", Some("p"), 50.0), ("b", Some("p"), 50.0), ("q", None, 30.0), ("r", None, 20.0)]);
        let loads = [("a", 4, 0), ("b", 12, 8), ("q", 20, 10), ("r", 0, 0)];
        let e = ent(&t, 40, &loads);
        for team in ["a", "b", "q", "r", "p"] {
            for x in [0, 1, 4, 8, 30] {
                let more: Vec<(&str, u32, u32)> = loads
                    .iter()
                    .map(|&(n, run, wait)| (n, run, if n == team { wait + x } else { wait }))
                    .chain((team == "p").then_some(("p", 0, x)))
                    .collect();
                let want = ent(&t, 40, &more).team(team).unwrap().fair;
                let got = e.fair_with_more(t.id(team).unwrap(), f64::from(x));
                assert!((got - want).abs() < 1e-9, "{team} +{x}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn water_fill_caps_and_redistributes() {
        // 10 among weights 1, 1, 2 with caps 1, 10, 10: λ = 3 → 1, 3, 6.
        let x = water_fill(10.0, &[(1.0, 1.0), (1.0, 10.0), (2.0, 10.0)]);
        assert_eq!(x, vec![1.0, 3.0, 6.0]);
        // Everyone capped: leftovers go to the weightless item.
        let x = water_fill(10.0, &[(1.0, 2.0), (0.0, 5.0)]);
        assert_eq!(x, vec![2.0, 5.0]);
    }

    #[test]
    fn idle_sibling_share_goes_to_siblings_first() {
        // p (50%) = {a 50%, b 50%}, q (50%): 40 GPUs. a idle; b and q busy.
        let t = tree(&[("p", None, 50.0), ("a", Some("p"), 50.0), ("b", Some("p"), 50.0), ("q", None, 50.0)]);
        let e = ent(&t, 40, &[("b", 10, 100), ("q", 20, 100)]);
        let b = e.team("b").unwrap();
        assert!((b.rate - 10.0).abs() < 1e-9 && (b.owed - 10.0).abs() < 1e-9);
        // b takes a's 10 (its sibling), not q.
        assert!((b.fair - 20.0).abs() < 1e-9, "{b:?}");
        assert!((e.team("q").unwrap().fair - 20.0).abs() < 1e-9);
        assert_eq!(e.need(t.id("b").unwrap(), 0.0), Need::Fair { share: 0.5 });
        assert_eq!(e.need(t.id("q").unwrap(), 5.0), Need::Surplus);
        assert_eq!(e.need(t.id("q").unwrap(), -3.0), Need::Surplus);
    }

    #[test]
    fn reclaim_only_from_above_rate_and_keeps_it() {
        // a, b 50% of 32 GPUs: rate 16 each.
        let t = tree(&[("a", None, 50.0), ("b", None, 50.0)]);
        let e = ent(&t, 32, &[("a", 8, 8), ("b", 24, 8)]);
        let mut r = e.reclaim();
        // a short (8 < 16); b at 24 → 16 after one 8-GPU victim: ok, and
        // a's share after (16/16) ≤ b's (16/16).
        assert_eq!(r.take("a", 8, "b", 8), Ok(()));
        // A second victim would leave b at 8 < 16.
        assert!(matches!(r.take("a", 8, "b", 8), Err(ReclaimRefusal::VictimBelowRate { .. })));
        // b never preempts a back: b's side is not short.
        assert!(matches!(e.reclaim().take("b", 8, "a", 8), Err(ReclaimRefusal::PreemptorNotShort { .. })));
        // A 16-GPU preemptor would end above b's final share.
        assert!(matches!(e.reclaim().take("a", 16, "b", 8), Err(ReclaimRefusal::ShareNotLower { .. })));
        assert_eq!(e.reclaim().take("a", 8, "a", 8), Err(ReclaimRefusal::SameTeam));
    }

    #[test]
    fn a_slice_goes_only_to_a_side_that_stands_at_least_as_well() {
        // a, b 50% of 32 GPUs: rate 16.
        let t = tree(&[("a", None, 50.0), ("b", None, 50.0)]);
        // a at its rate with a 1-GPU debug job waiting (17/16 with it); b
        // at 28 (20/16 without an 8-GPU job, 27/16 without a 1-GPU one).
        let e = ent(&t, 32, &[("a", 16, 9), ("b", 28, 8)]);
        assert_eq!(e.reclaim().slice("a", 1.0, "b", 8.0), Ok(()));
        // Cumulative: a second 8-GPU job would leave b at 12, below its rate.
        let mut r = e.reclaim();
        assert_eq!(r.slice("a", 1.0, "b", 8.0), Ok(()));
        assert!(matches!(r.slice("a", 1.0, "b", 8.0), Err(ReclaimRefusal::VictimBelowRate { .. })));
        // b at 24: without 8 it keeps 16/16, less than a's 17/16.
        let e = ent(&t, 32, &[("a", 16, 9), ("b", 24, 8)]);
        let Err(ReclaimRefusal::Outranked { victim_after, preemptor_after, .. }) = e.reclaim().slice("a", 1.0, "b", 8.0) else { panic!() };
        assert_eq!((preemptor_after, victim_after), (17.0 / 16.0, 1.0));
        assert_eq!(e.reclaim().slice("a", 1.0, "b", 1.0), Ok(()), "b at 23/16 stands worse");
        // Never back: b's debug job cannot take a's GPUs once a stands
        // at 17/16 and b at 23/16.
        let e = ent(&t, 32, &[("a", 17, 8), ("b", 23, 9)]);
        assert!(e.reclaim().slice("b", 1.0, "a", 1.0).is_err());
    }

    #[test]
    fn reclaim_is_decided_where_the_paths_part() {
        // p = {a, b}, q. a idle: p short as a whole although b is above its
        // own rate, so b may take from q (over its rate); inside p, a team
        // below its rate is protected from q's and from b's preemptors.
        let t = tree(&[("p", None, 50.0), ("a", Some("p"), 50.0), ("b", Some("p"), 50.0), ("q", None, 50.0)]);
        let e = ent(&t, 40, &[("b", 12, 8), ("q", 28, 0)]);
        assert_eq!(e.reclaim().take("b", 4, "q", 4), Ok(()));
        let e = ent(&t, 40, &[("a", 2, 8), ("b", 14, 0), ("q", 24, 0)]);
        // p runs 16 < 20: short; q 24 → 20 stays at its rate.
        assert_eq!(e.reclaim().take("a", 4, "q", 4), Ok(()));
        // Inside p: a (2 < 10) takes from b (14 → 10).
        assert_eq!(e.reclaim().take("a", 4, "b", 4), Ok(()));
        // From b, 8 GPUs would leave it at 6 < 10.
        assert!(matches!(e.reclaim().take("a", 8, "b", 8), Err(ReclaimRefusal::VictimBelowRate { .. })));
        // A slice checks the victim's whole path: q = {c, d} runs over its
        // rate, but c would fall to 6 of 10.
        let t = tree(&[("p", None, 50.0), ("a", Some("p"), 50.0), ("q", None, 50.0), ("c", Some("q"), 50.0), ("d", Some("q"), 50.0)]);
        let e = ent(&t, 40, &[("a", 14, 8), ("c", 10, 0), ("d", 20, 0)]);
        assert!(matches!(e.reclaim().slice("a", 4.0, "c", 4.0), Err(ReclaimRefusal::VictimBelowRate { account, .. }) if account == "c"));
        assert_eq!(e.reclaim().slice("a", 4.0, "d", 4.0), Ok(()));
    }
}
