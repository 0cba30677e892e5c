//! The org tree and its budgets.
//!
//! Accounts form a tree (programme → project → team …) that mirrors Slurm's
//! accounts under an implicit `root` that owns the whole cluster. Each account
//! has a budget: a share of its parent (percent) or a fixed number of
//! GPU-hours per window. What a parent does not hand down stays with the
//! parent (jobs charged to the parent account itself use it).
//!
//! ```text
//! allocated(root)  = gpus × window_hours
//! allocated(node)  = share% / 100 × allocated(parent)     (Budget::Share)
//!                  = gpu_hours                             (Budget::GpuHours)
//! own(node)        = allocated(node) − Σ allocated(children)   ≥ 0
//! ```
//! so for share budgets allocated(node) is the product of the shares down
//! the tree × cluster capacity × window length. With GPU types the
//! capacity is in budget units ([`Capacity::units`], [`crate::gpu_types`])
//! and so are the GPU-hours of every budget.

use crate::HOUR;
use rustc_hash::FxHashMap;
use thiserror::Error;

/// The name of the implicit top of the tree (Slurm's root account).
pub const ROOT: &str = "root";

/// Relative slack when checking that children fit inside their parent, so
/// that e.g. three shares of 33.333…% do not fail on rounding.
const FIT_EPSILON: f64 = 1e-9;

/// What an account is given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// Percent of the parent's allocation, in (0, 100].
    Share(f64),
    /// GPU-hours per window.
    GpuHours(f64),
}

/// One account as declared (before validation).
#[derive(Debug, Clone, PartialEq)]
pub struct AccountSpec {
    pub name: String,
    /// `None` = directly under root.
    pub parent: Option<String>,
    /// `None` = no budget: the account's allocated jobs rank after every
    /// funded account (see [`crate::fairshare`]).
    pub budget: Option<Budget>,
}

impl AccountSpec {
    pub fn new(name: &str, parent: Option<&str>, budget: Option<Budget>) -> Self {
        AccountSpec { name: name.to_string(), parent: parent.map(str::to_string), budget }
    }
}

/// Why a tree was refused. Each error names the account(s) concerned.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TreeError {
    #[error("account `{0}` is declared twice")]
    Duplicate(String),
    #[error("`root` is the implicit top of the tree and cannot be declared")]
    RootDeclared,
    #[error("account name `{0}` is not valid (use 1 to 64 lower-case letters, digits, `_`, `-` or `.`)")]
    BadName(String),
    #[error("account name `{name}` has upper-case letters: Slurm stores account names in lower case; write `{lower}`")]
    UpperCase { name: String, lower: String },
    #[error("account `{account}` has unknown parent `{parent}`")]
    UnknownParent { account: String, parent: String },
    #[error("cycle in the account tree: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error("account `{account}`: share {value} is not a percentage in (0, 100]")]
    BadShare { account: String, value: f64 },
    #[error("account `{account}`: gpu_hours {value} is not a finite number >= 0")]
    BadGpuHours { account: String, value: f64 },
    #[error("children of `{parent}` are given {children:.1}% of it, more than 100%")]
    SharesOverParent { parent: String, children: f64 },
    #[error("children of `{parent}` are given {children:.1} GPU-hours per window, more than its {parent_gpu_hours:.1}")]
    GpuHoursOverParent { parent: String, children: f64, parent_gpu_hours: f64 },
}

/// Index of an account in an [`OrgTree`]. Index 0 is root.
pub type NodeId = usize;

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub parent: Option<NodeId>,
    /// Children in name order (deterministic walks).
    pub children: Vec<NodeId>,
    pub budget: Option<Budget>,
}

/// A validated account tree: names unique, parents known, no cycles, shares
/// in range and summing to at most 100% per parent.
#[derive(Debug, Clone, PartialEq)]
pub struct OrgTree {
    nodes: Vec<Node>,
    by_name: FxHashMap<String, NodeId>,
}

/// Longest account name accepted.
pub const MAX_NAME_LEN: usize = 64;

/// The one rule for account names, for the tree's accounts and for every
/// reference to one (the config's `[users]`): 1 to [`MAX_NAME_LEN`] of
/// `a-z 0-9 _ - .`. Slurm stores account names in lower case, so `NLP`
/// would never match a job's account: a name that is valid once
/// lower-cased is refused with that spelling ([`TreeError::UpperCase`]),
/// any other with [`TreeError::BadName`].
pub fn check_account_name(name: &str) -> Result<(), TreeError> {
    let valid = |n: &str| {
        !n.is_empty() && n.len() <= MAX_NAME_LEN && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.'))
    };
    if valid(name) {
        return Ok(());
    }
    let lower = name.to_ascii_lowercase();
    if lower != name && valid(&lower) {
        return Err(TreeError::UpperCase { name: name.to_string(), lower });
    }
    Err(TreeError::BadName(crate::text::clip(name)))
}

/// The first cycle among the parent links, named from its alphabetically
/// first member and closed (`[a, b, c, a]`), or `None`.
///
/// Colouring, O(n) in all: from each account in declaration order, walk up
/// the parents marking the accounts *on the walk*, until root or an account
/// already known to reach root (*done*), then mark the walk done. Meeting
/// an account on the current walk closes a cycle: the walk from that
/// account on. Every account is walked once (where walking up from every
/// account and searching the walk so far was O(n · depth²): seconds for a
/// 4,000-deep chain, days for 100,000). No recursion, so no depth limit.
/// The cycle found is the one the first account declared in or under a
/// cycle leads to, as before.
fn first_cycle(nodes: &[Node]) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnWalk,
        Done,
    }
    let mut mark = vec![Mark::New; nodes.len()];
    mark[0] = Mark::Done;
    let mut walk: Vec<NodeId> = Vec::new();
    for start in 1..nodes.len() {
        walk.clear();
        let mut cur = start;
        loop {
            match mark[cur] {
                Mark::Done => break,
                Mark::OnWalk => {
                    let pos = walk.iter().position(|&x| x == cur).unwrap_or(0);
                    let names: Vec<&str> = walk[pos..].iter().map(|&i| nodes[i].name.as_str()).collect();
                    // Report the cycle from its alphabetically first member
                    // so the message does not depend on declaration order.
                    let min = (0..names.len()).min_by_key(|&i| names[i]).unwrap_or(0);
                    let mut cycle: Vec<String> = names[min..].iter().chain(&names[..min]).map(|n| n.to_string()).collect();
                    cycle.push(cycle[0].clone());
                    return Some(cycle);
                }
                Mark::New => {
                    mark[cur] = Mark::OnWalk;
                    walk.push(cur);
                    match nodes[cur].parent {
                        Some(p) => cur = p,
                        None => break, // only root has none
                    }
                }
            }
        }
        for &i in &walk {
            mark[i] = Mark::Done;
        }
    }
    None
}

impl OrgTree {
    /// Validate declared accounts into a tree. Errors come in a fixed order
    /// (names, budgets, parents, cycles, sums) so the first one reported is
    /// stable.
    pub fn new(specs: &[AccountSpec]) -> Result<OrgTree, TreeError> {
        let mut by_name = FxHashMap::default();
        by_name.insert(ROOT.to_string(), 0);
        for (i, s) in specs.iter().enumerate() {
            if s.name == ROOT {
                return Err(TreeError::RootDeclared);
            }
            check_account_name(&s.name)?;
            if by_name.insert(s.name.clone(), i + 1).is_some() {
                return Err(TreeError::Duplicate(s.name.clone()));
            }
            match s.budget {
                Some(Budget::Share(v)) if !(v.is_finite() && v > 0.0 && v <= 100.0) => {
                    return Err(TreeError::BadShare { account: s.name.clone(), value: v })
                }
                Some(Budget::GpuHours(v)) if !(v.is_finite() && v >= 0.0) => {
                    return Err(TreeError::BadGpuHours { account: s.name.clone(), value: v })
                }
                _ => {}
            }
        }
        let mut nodes = vec![Node { name: ROOT.to_string(), parent: None, children: vec![], budget: None }];
        for s in specs {
            let parent = match &s.parent {
                None => 0,
                Some(p) => *by_name.get(p).ok_or_else(|| TreeError::UnknownParent { account: s.name.clone(), parent: p.clone() })?,
            };
            nodes.push(Node { name: s.name.clone(), parent: Some(parent), children: vec![], budget: s.budget });
        }
        if let Some(cycle) = first_cycle(&nodes) {
            return Err(TreeError::Cycle(cycle));
        }
        for i in 1..nodes.len() {
            if let Some(p) = nodes[i].parent {
                nodes[p].children.push(i);
            }
        }
        for i in 0..nodes.len() {
            let mut kids = std::mem::take(&mut nodes[i].children);
            kids.sort_by(|a, b| nodes[*a].name.cmp(&nodes[*b].name));
            nodes[i].children = kids;
        }
        let tree = OrgTree { nodes, by_name };
        for node in &tree.nodes {
            let total: f64 = node
                .children
                .iter()
                .filter_map(|&c| match tree.nodes[c].budget {
                    Some(Budget::Share(v)) => Some(v),
                    _ => None,
                })
                .sum();
            if total > 100.0 * (1.0 + FIT_EPSILON) {
                return Err(TreeError::SharesOverParent { parent: node.name.clone(), children: total });
            }
        }
        Ok(tree)
    }

    pub fn root(&self) -> NodeId {
        0
    }
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_empty(&self) -> bool {
        false // root always exists
    }
    pub fn id(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
    /// All nodes, root first, then depth-first in name order.
    pub fn walk(&self) -> Vec<(NodeId, usize)> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack = vec![(0, 0)];
        while let Some((id, depth)) = stack.pop() {
            out.push((id, depth));
            for &c in self.nodes[id].children.iter().rev() {
                stack.push((c, depth + 1));
            }
        }
        out
    }
    /// Names from root down to `id`, e.g. `["root", "ai", "nlp"]`.
    pub fn path(&self, id: NodeId) -> Vec<&str> {
        let mut out = vec![self.nodes[id].name.as_str()];
        let mut cur = id;
        while let Some(p) = self.nodes[cur].parent {
            out.push(self.nodes[p].name.as_str());
            cur = p;
        }
        out.reverse();
        out
    }
    /// Nodes with no children: the teams.
    pub fn leaves(&self) -> impl Iterator<Item = NodeId> + '_ {
        (1..self.nodes.len()).filter(|&i| self.nodes[i].children.is_empty())
    }
}

/// What the cluster can give in one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    pub gpus: u32,
    pub window_s: u64,
    /// Budget units the GPUs give per second: each GPU weighted by its
    /// type ([`crate::gpu_types`]); `gpus` without GPU types.
    pub units: f64,
}

impl Capacity {
    /// `gpus` GPUs of weight 1 over a window.
    pub fn new(gpus: u32, window_s: u64) -> Capacity {
        Capacity { gpus, window_s, units: f64::from(gpus) }
    }

    /// `gpus` GPUs giving `units` budget units per second
    /// ([`crate::GpuWeights::capacity_units`]).
    pub fn weighted(gpus: u32, units: f64, window_s: u64) -> Capacity {
        Capacity { gpus, window_s, units }
    }

    /// Budget units per window (GPU-hours when every GPU weighs 1).
    pub fn gpu_hours(&self) -> f64 {
        self.units * self.window_s as f64 / HOUR
    }
    pub fn window_hours(&self) -> f64 {
        self.window_s as f64 / HOUR
    }
}

/// Effective allocation of every node for one capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub capacity: Capacity,
    /// GPU-hours per window of the node's whole subtree.
    pub gpu_hours: Vec<f64>,
    /// GPU-hours per window kept by the node itself (not handed down).
    pub own_gpu_hours: Vec<f64>,
}

impl Allocation {
    /// ```text
    /// allocated(root) = capacity; children: share × parent, or fixed GPU-hours
    /// Σ allocated(children) ≤ allocated(parent), else GpuHoursOverParent
    /// ```
    pub fn new(tree: &OrgTree, capacity: Capacity) -> Result<Allocation, TreeError> {
        let n = tree.len();
        let mut gpu_hours = vec![0.0; n];
        let mut own = vec![0.0; n];
        gpu_hours[0] = capacity.gpu_hours();
        for (id, _) in tree.walk() {
            let node = tree.node(id);
            let mine = gpu_hours[id];
            let mut handed = 0.0;
            for &c in &node.children {
                let g = match tree.node(c).budget {
                    Some(Budget::Share(p)) => mine * p / 100.0,
                    Some(Budget::GpuHours(h)) => h,
                    None => 0.0,
                };
                gpu_hours[c] = g;
                handed += g;
            }
            if handed > mine * (1.0 + FIT_EPSILON) + FIT_EPSILON {
                return Err(TreeError::GpuHoursOverParent { parent: node.name.clone(), children: handed, parent_gpu_hours: mine });
            }
            own[id] = (mine - handed).max(0.0);
        }
        Ok(Allocation { capacity, gpu_hours, own_gpu_hours: own })
    }

    /// Allocation rate of a node in GPUs (GPU-hours per window ÷ window hours).
    pub fn rate_gpus(&self, id: NodeId) -> f64 {
        self.gpu_hours[id] / self.capacity.window_hours()
    }
    /// Fraction of the cluster.
    pub fn fraction(&self, id: NodeId) -> f64 {
        let total = self.capacity.gpu_hours();
        if total > 0.0 {
            self.gpu_hours[id] / total
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(name: &str, parent: Option<&str>, pct: f64) -> AccountSpec {
        AccountSpec::new(name, parent, Some(Budget::Share(pct)))
    }

    #[test]
    fn allocation_is_product_of_shares() {
        let tree =
            OrgTree::new(&[share("ai", None, 60.0), share("nlp", Some("ai"), 50.0), share("vision", Some("ai"), 25.0), share("ops", None, 40.0)])
                .unwrap();
        let cap = Capacity::new(100, crate::WEEK_S);
        let a = Allocation::new(&tree, cap).unwrap();
        let nlp = tree.id("nlp").unwrap();
        assert!((a.gpu_hours[nlp] - 0.6 * 0.5 * 100.0 * 168.0).abs() < 1e-9);
        assert!((a.rate_gpus(nlp) - 30.0).abs() < 1e-9);
        // 25% of ai stays with ai itself.
        let ai = tree.id("ai").unwrap();
        assert!((a.own_gpu_hours[ai] - 0.6 * 0.25 * 100.0 * 168.0).abs() < 1e-9);
        assert_eq!(a.own_gpu_hours[0], 0.0);
        assert_eq!(tree.path(nlp), vec!["root", "ai", "nlp"]);
    }

    #[test]
    fn gpu_hour_budgets_must_fit() {
        let specs = [
            share("ai", None, 10.0),
            AccountSpec::new("nlp", Some("ai"), Some(Budget::GpuHours(100.0))),
            AccountSpec::new("cv", Some("ai"), Some(Budget::GpuHours(100.0))),
        ];
        let tree = OrgTree::new(&specs).unwrap();
        // ai has 10% of 8 GPUs × 168 h = 134.4 GPU-hours: 200 does not fit.
        let err = Allocation::new(&tree, Capacity::new(8, crate::WEEK_S)).unwrap_err();
        assert!(matches!(err, TreeError::GpuHoursOverParent { ref parent, .. } if parent == "ai"), "{err}");
        // On 64 GPUs it does (1075.2 GPU-hours).
        let a = Allocation::new(&tree, Capacity::new(64, crate::WEEK_S)).unwrap();
        assert!((a.gpu_hours[tree.id("cv").unwrap()] - 100.0).abs() < 1e-9);
    }

    #[test]
    fn validation_errors() {
        let cases: Vec<(Vec<AccountSpec>, TreeError)> = vec![
            (vec![share("a", None, 50.0), share("a", None, 10.0)], TreeError::Duplicate("a".into())),
            (vec![share("root", None, 50.0)], TreeError::RootDeclared),
            (vec![share("a b", None, 50.0)], TreeError::BadName("a b".into())),
            (vec![share("a", Some("nope"), 50.0)], TreeError::UnknownParent { account: "a".into(), parent: "nope".into() }),
            (
                vec![share("b", Some("c"), 50.0), share("c", Some("a"), 50.0), share("a", Some("b"), 50.0)],
                TreeError::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()]),
            ),
            (vec![share("a", Some("a"), 50.0)], TreeError::Cycle(vec!["a".into(), "a".into()])),
            (vec![share("a", None, 0.0)], TreeError::BadShare { account: "a".into(), value: 0.0 }),
            (vec![share("a", None, -5.0)], TreeError::BadShare { account: "a".into(), value: -5.0 }),
            (vec![share("a", None, 100.5)], TreeError::BadShare { account: "a".into(), value: 100.5 }),
            (vec![AccountSpec::new("a", None, Some(Budget::GpuHours(-1.0)))], TreeError::BadGpuHours { account: "a".into(), value: -1.0 }),
            (vec![share("a", None, 60.0), share("b", None, 50.0)], TreeError::SharesOverParent { parent: "root".into(), children: 110.0 }),
        ];
        for (specs, want) in cases {
            assert_eq!(OrgTree::new(&specs), Err(want.clone()), "{want}");
        }
        let nan = OrgTree::new(&[share("a", None, f64::NAN)]).unwrap_err();
        assert!(matches!(nan, TreeError::BadShare { .. }));
        let inf = OrgTree::new(&[AccountSpec::new("a", None, Some(Budget::GpuHours(f64::INFINITY)))]).unwrap_err();
        assert!(matches!(inf, TreeError::BadGpuHours { .. }));
    }

    /// `n` accounts in one chain under root: c0 ← c1 ← … (each the only
    /// child of the one before).
    fn chain(n: usize) -> Vec<AccountSpec> {
        let names: Vec<String> = (0..n).map(|i| format!("c{i:06}")).collect();
        (0..n).map(|i| share(&names[i], i.checked_sub(1).map(|p| names[p].as_str()), 100.0)).collect()
    }

    #[test]
    fn a_chain_100k_deep_builds() {
        // Walking up from every node and searching the path walked so far
        // was O(n · depth²): a 4,000-deep chain took seconds, this one would
        // take days. The check is linear now, and iterative (no recursion to
        // overflow).
        let n = 100_000;
        let tree = OrgTree::new(&chain(n)).unwrap();
        assert_eq!(tree.len(), n + 1);
        let deepest = tree.id("c099999").unwrap();
        assert_eq!(tree.walk().last(), Some(&(deepest, n)));
        let a = Allocation::new(&tree, Capacity::new(8, 3600)).unwrap();
        assert!((a.gpu_hours[deepest] - 8.0).abs() < 1e-9);
    }

    #[test]
    fn a_cycle_below_a_deep_chain_is_reported_from_its_first_member() {
        // c0 … c49999 hang from root; x's parent is z, z's y, y's x (a
        // loop), and a second chain of 50,000 hangs from the loop. Whatever
        // the order of the declarations, the loop is reported from `x`,
        // following parents, as before.
        let mut specs = chain(50_000);
        specs.push(share("z", Some("y"), 50.0));
        specs.push(share("y", Some("x"), 50.0));
        specs.push(share("x", Some("z"), 50.0));
        let names: Vec<String> = (0..50_000).map(|i| format!("d{i:06}")).collect();
        for i in 0..names.len() {
            let parent = if i == 0 { "z" } else { names[i - 1].as_str() };
            specs.push(share(&names[i], Some(parent), 100.0));
        }
        let want = Err(TreeError::Cycle(vec!["x".into(), "z".into(), "y".into(), "x".into()]));
        assert_eq!(OrgTree::new(&specs), want);
        specs.reverse();
        assert_eq!(OrgTree::new(&specs), want);
    }

    #[test]
    fn of_two_cycles_the_one_reached_first_is_reported() {
        // Declaration order decides which loop is found (as it always did):
        // the one reached from the first account declared that is in or
        // under a loop.
        let specs = [
            share("ok", None, 10.0),
            share("q", Some("p"), 10.0),
            share("p", Some("q"), 10.0),
            share("b", Some("a"), 10.0),
            share("a", Some("b"), 10.0),
        ];
        assert_eq!(OrgTree::new(&specs), Err(TreeError::Cycle(vec!["p".into(), "q".into(), "p".into()])));
        let mut specs = specs.to_vec();
        specs.swap(1, 3);
        assert_eq!(OrgTree::new(&specs), Err(TreeError::Cycle(vec!["a".into(), "b".into(), "a".into()])));
    }

    #[test]
    fn account_names_are_lower_case() {
        let want = |name: &str, lower: &str| TreeError::UpperCase { name: name.into(), lower: lower.into() };
        assert_eq!(OrgTree::new(&[share("NLP", None, 50.0)]), Err(want("NLP", "nlp")));
        assert_eq!(OrgTree::new(&[share("ai.Vision-2", None, 50.0)]), Err(want("ai.Vision-2", "ai.vision-2")));
        assert_eq!(
            want("NLP", "nlp").to_string(),
            "account name `NLP` has upper-case letters: Slurm stores account names in lower case; write `nlp`"
        );
        // Not fixable by lower-casing: the general rule.
        assert_eq!(OrgTree::new(&[share("A B", None, 50.0)]), Err(TreeError::BadName("A B".into())));
        assert_eq!(
            TreeError::BadName("a b".into()).to_string(),
            "account name `a b` is not valid (use 1 to 64 lower-case letters, digits, `_`, `-` or `.`)"
        );
        assert_eq!(check_account_name("nlp-2.x_y"), Ok(()));
        assert_eq!(check_account_name("Nlp"), Err(want("Nlp", "nlp")));
        assert_eq!(check_account_name(&"a".repeat(65)), Err(TreeError::BadName(crate::text::clip(&"a".repeat(65)))));
    }

    #[test]
    fn thirds_fit_despite_rounding() {
        let t = 100.0 / 3.0;
        let tree = OrgTree::new(&[share("a", None, t), share("b", None, t), share("c", None, t)]).unwrap();
        assert!(Allocation::new(&tree, Capacity::new(3, 3600)).is_ok());
    }
}
