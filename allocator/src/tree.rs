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
//! the tree × cluster capacity × window length.

use std::collections::BTreeMap;
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
    #[error("account name `{0}` is not valid (use letters, digits, `_`, `-` or `.`; Slurm lowercases account names)")]
    BadName(String),
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
    by_name: BTreeMap<String, NodeId>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

impl OrgTree {
    /// Validate declared accounts into a tree. Errors come in a fixed order
    /// (names, budgets, parents, cycles, sums) so the first one reported is
    /// stable.
    pub fn new(specs: &[AccountSpec]) -> Result<OrgTree, TreeError> {
        let mut by_name = BTreeMap::new();
        by_name.insert(ROOT.to_string(), 0);
        for (i, s) in specs.iter().enumerate() {
            if s.name == ROOT {
                return Err(TreeError::RootDeclared);
            }
            if !valid_name(&s.name) {
                return Err(TreeError::BadName(s.name.clone()));
            }
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
                Some(p) => *by_name
                    .get(p)
                    .ok_or_else(|| TreeError::UnknownParent { account: s.name.clone(), parent: p.clone() })?,
            };
            nodes.push(Node { name: s.name.clone(), parent: Some(parent), children: vec![], budget: s.budget });
        }
        // Cycles: walk up from each node; a walk longer than the tree loops.
        for start in 1..nodes.len() {
            let mut path = vec![start];
            let mut cur = start;
            while let Some(p) = nodes[cur].parent {
                if p == 0 {
                    break;
                }
                if let Some(pos) = path.iter().position(|&x| x == p) {
                    let mut names: Vec<String> = path[pos..].iter().map(|&i| nodes[i].name.clone()).collect();
                    names.push(nodes[p].name.clone());
                    // Report the cycle from its alphabetically first member
                    // so the message does not depend on declaration order.
                    let min = (0..names.len() - 1).min_by_key(|&i| names[i].clone()).unwrap_or(0);
                    let mut rotated: Vec<String> = names[min..names.len() - 1].to_vec();
                    rotated.extend_from_slice(&names[..min]);
                    rotated.push(rotated[0].clone());
                    return Err(TreeError::Cycle(rotated));
                }
                path.push(p);
                cur = p;
            }
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
}

impl Capacity {
    pub fn gpu_hours(&self) -> f64 {
        f64::from(self.gpus) * self.window_s as f64 / 3600.0
    }
    pub fn window_hours(&self) -> f64 {
        self.window_s as f64 / 3600.0
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
                return Err(TreeError::GpuHoursOverParent {
                    parent: node.name.clone(),
                    children: handed,
                    parent_gpu_hours: mine,
                });
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
        let tree = OrgTree::new(&[
            share("ai", None, 60.0),
            share("nlp", Some("ai"), 50.0),
            share("vision", Some("ai"), 25.0),
            share("ops", None, 40.0),
        ])
        .unwrap();
        let cap = Capacity { gpus: 100, window_s: 7 * 86_400 };
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
        let err = Allocation::new(&tree, Capacity { gpus: 8, window_s: 7 * 86_400 }).unwrap_err();
        assert!(matches!(err, TreeError::GpuHoursOverParent { ref parent, .. } if parent == "ai"), "{err}");
        // On 64 GPUs it does (1075.2 GPU-hours).
        let a = Allocation::new(&tree, Capacity { gpus: 64, window_s: 7 * 86_400 }).unwrap();
        assert!((a.gpu_hours[tree.id("cv").unwrap()] - 100.0).abs() < 1e-9);
    }

    #[test]
    fn validation_errors() {
        let cases: Vec<(Vec<AccountSpec>, TreeError)> = vec![
            (vec![share("a", None, 50.0), share("a", None, 10.0)], TreeError::Duplicate("a".into())),
            (vec![share("root", None, 50.0)], TreeError::RootDeclared),
            (vec![share("a b", None, 50.0)], TreeError::BadName("a b".into())),
            (
                vec![share("a", Some("nope"), 50.0)],
                TreeError::UnknownParent { account: "a".into(), parent: "nope".into() },
            ),
            (
                vec![share("b", Some("c"), 50.0), share("c", Some("a"), 50.0), share("a", Some("b"), 50.0)],
                TreeError::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()]),
            ),
            (vec![share("a", Some("a"), 50.0)], TreeError::Cycle(vec!["a".into(), "a".into()])),
            (vec![share("a", None, 0.0)], TreeError::BadShare { account: "a".into(), value: 0.0 }),
            (vec![share("a", None, -5.0)], TreeError::BadShare { account: "a".into(), value: -5.0 }),
            (vec![share("a", None, 100.5)], TreeError::BadShare { account: "a".into(), value: 100.5 }),
            (
                vec![AccountSpec::new("a", None, Some(Budget::GpuHours(-1.0)))],
                TreeError::BadGpuHours { account: "a".into(), value: -1.0 },
            ),
            (
                vec![share("a", None, 60.0), share("b", None, 50.0)],
                TreeError::SharesOverParent { parent: "root".into(), children: 110.0 },
            ),
        ];
        for (specs, want) in cases {
            assert_eq!(OrgTree::new(&specs), Err(want.clone()), "{want}");
        }
        let nan = OrgTree::new(&[share("a", None, f64::NAN)]).unwrap_err();
        assert!(matches!(nan, TreeError::BadShare { .. }));
        let inf = OrgTree::new(&[AccountSpec::new("a", None, Some(Budget::GpuHours(f64::INFINITY)))]).unwrap_err();
        assert!(matches!(inf, TreeError::BadGpuHours { .. }));
    }

    #[test]
    fn thirds_fit_despite_rounding() {
        let t = 100.0 / 3.0;
        let tree = OrgTree::new(&[share("a", None, t), share("b", None, t), share("c", None, t)]).unwrap();
        assert!(Allocation::new(&tree, Capacity { gpus: 3, window_s: 3600 }).is_ok());
    }
}
