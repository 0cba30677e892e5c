//! GPUs on nodes, and where a job fits.
//!
//! A job of `g ≤ gpus_per_node` GPUs takes `g` GPUs of one node (best fit:
//! the node with the fewest free GPUs that still fits, which keeps whole
//! nodes free for big jobs). A larger job takes `⌈g / gpus_per_node⌉` whole
//! free nodes, as Slurm's `-N n --gres=gpu:8` does; it uses `g` GPUs of them
//! and blocks the rest.
//!
//! With GPU types ([`Cluster::typed`]) every node holds GPUs of one type: a
//! job that asks for a type (`--gres=gpu:b200:8`) fits only on nodes of
//! that type; a job that does not takes any free GPUs by the same rule, of
//! whatever type (a multi-node one may span types), and is charged by the
//! GPUs it lands on ([`Cluster::weight_of`]).

use std::sync::Arc;
use tally_allocator::{GpuWeights, Weight};

/// Where a job runs: (node index, GPUs taken on it).
pub type Placement = Vec<(usize, u32)>;

/// GPUs of one type (`None`: untyped) and how many.
pub type GpuGroup = (Option<Arc<str>>, u32);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub gpus_per_node: u32,
    /// Free GPUs per node.
    pub free: Vec<u32>,
    /// GPUs of each node (the last may be smaller).
    pub size: Vec<u32>,
    /// The GPU type of each node (`None`: untyped).
    pub types: Vec<Option<Arc<str>>>,
    /// The nodes of the debug capacity (`[priority] debug_nodes`): only
    /// debug jobs and unallocated work run there.
    pub debug: Vec<bool>,
}

impl Cluster {
    /// `gpus` GPUs in nodes of `gpus_per_node` (the last node may be smaller).
    pub fn new(gpus: u32, gpus_per_node: u32) -> Cluster {
        Cluster::typed(&[(None, gpus)], gpus_per_node)
    }

    /// Groups of GPUs of one type each, in order, every group in nodes of
    /// `gpus_per_node` (a group's last node may be smaller).
    pub fn typed(groups: &[GpuGroup], gpus_per_node: u32) -> Cluster {
        let per = gpus_per_node.max(1);
        let (mut free, mut types) = (Vec::new(), Vec::new());
        for (t, gpus) in groups {
            let n = (gpus / per) as usize + usize::from(gpus % per != 0);
            free.extend(std::iter::repeat_n(per, (gpus / per) as usize));
            if gpus % per != 0 {
                free.push(gpus % per);
            }
            types.extend(std::iter::repeat_n(t.clone(), n));
        }
        let debug = vec![false; free.len()];
        Cluster { gpus_per_node: per, size: free.clone(), free, types, debug }
    }

    /// Make the last `n` nodes the debug capacity (at most all of them).
    pub fn with_debug_nodes(mut self, n: usize) -> Cluster {
        let len = self.debug.len();
        for d in self.debug.iter_mut().skip(len.saturating_sub(n)) {
            *d = true;
        }
        self
    }

    /// Can a job of `gpu_type` use node `n`? Any node for an untyped job.
    pub fn allows(&self, n: usize, gpu_type: Option<&str>) -> bool {
        gpu_type.is_none_or(|t| self.types.get(n).is_some_and(|nt| nt.as_deref() == Some(t)))
    }

    /// GPUs a job of `gpu_type` could ever use (all of them when untyped).
    pub fn gpus_for(&self, gpu_type: Option<&str>) -> u32 {
        (0..self.size.len()).filter(|&n| self.allows(n, gpu_type)).map(|n| self.size[n]).sum()
    }

    /// The weight of the GPUs a placement holds: each node's GPUs at its
    /// type's weight, averaged over the job's GPUs (1 without types).
    pub fn weight_of(&self, p: &Placement, weights: &GpuWeights) -> Weight {
        let gpus: u32 = p.iter().map(|&(_, g)| g).sum();
        if weights.is_empty() || gpus == 0 {
            return Weight::ONE;
        }
        let units: f64 = p.iter().map(|&(n, g)| weights.units(g, self.types.get(n).and_then(|t| t.as_deref()))).sum();
        // All of one weight: that weight, exactly.
        let first = weights.of(p.first().and_then(|&(n, _)| self.types.get(n)).and_then(|t| t.as_deref()));
        if p.iter().all(|&(n, _)| weights.of(self.types.get(n).and_then(|t| t.as_deref())) == first) {
            return first;
        }
        Weight::new(units / f64::from(gpus)).unwrap_or(Weight::ONE)
    }

    /// GPUs of the cluster (a smaller last node counts as what it is).
    pub fn total(&self) -> u32 {
        self.size.iter().sum()
    }

    pub fn nodes(&self) -> usize {
        self.free.len()
    }

    pub fn free_total(&self) -> u32 {
        self.free.iter().sum()
    }

    /// GPUs a placement blocks (whole nodes for multi-node jobs).
    pub fn blocked(p: &Placement) -> u32 {
        p.iter().map(|&(_, g)| g).sum()
    }

    /// Where `gpus` would fit on `free`, or `None`.
    pub fn fit(free: &[u32], gpus: u32, per_node: u32) -> Option<Placement> {
        Cluster::fit_where(free, gpus, per_node, |_| true)
    }

    /// [`Cluster::fit`] on the nodes `allowed` says a job may use.
    pub fn fit_where(free: &[u32], gpus: u32, per_node: u32, allowed: impl Fn(usize) -> bool) -> Option<Placement> {
        if gpus == 0 {
            return Some(Vec::new());
        }
        if gpus <= per_node {
            // Best fit; ties to the lowest index (deterministic).
            let mut best: Option<(u32, usize)> = None;
            for (i, &f) in free.iter().enumerate() {
                if f >= gpus && allowed(i) && best.is_none_or(|(bf, _)| f < bf) {
                    best = Some((f, i));
                }
            }
            return best.map(|(_, i)| vec![(i, gpus)]);
        }
        let need = gpus.div_ceil(per_node) as usize;
        let whole = || free.iter().enumerate().filter(|&(i, &f)| f == per_node && allowed(i)).map(|(i, _)| (i, per_node)).take(need);
        (whole().count() == need).then(|| whole().collect())
    }

    /// [`Cluster::fit_where`] on `free` for a job of `gpu_type`, on the
    /// debug capacity's nodes too when `debug_ok`.
    pub fn fit_for(&self, free: &[u32], gpus: u32, gpu_type: Option<&str>, debug_ok: bool) -> Option<Placement> {
        Cluster::fit_where(free, gpus, self.gpus_per_node, |n| self.allows(n, gpu_type) && (debug_ok || !self.debug[n]))
    }

    pub fn place(&self, gpus: u32) -> Option<Placement> {
        Cluster::fit(&self.free, gpus, self.gpus_per_node)
    }

    /// Where a job of `gpus` GPUs of `gpu_type` fits now ([`Cluster::fit_for`]).
    pub fn place_for(&self, gpus: u32, gpu_type: Option<&str>, debug_ok: bool) -> Option<Placement> {
        self.fit_for(&self.free, gpus, gpu_type, debug_ok)
    }

    /// Take a placement. Panics on over-commit (an invariant of the simulator).
    pub fn take(&mut self, p: &Placement) {
        for &(n, g) in p {
            assert!(self.free[n] >= g, "node {n}: taking {g} GPUs with {} free", self.free[n]);
            self.free[n] -= g;
        }
    }

    pub fn release(&mut self, p: &Placement) {
        for &(n, g) in p {
            self.free[n] += g;
            assert!(self.free[n] <= self.size[n], "node {n}: more GPUs free than it has");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_and_whole_nodes() {
        let mut c = Cluster::new(24, 8);
        let a = c.place(6).unwrap();
        assert_eq!(a, vec![(0, 6)]);
        c.take(&a);
        // 2 GPUs go to node 0 (fewest free that fits), not a whole node.
        assert_eq!(c.place(2).unwrap(), vec![(0, 2)]);
        // 16 GPUs take the two whole free nodes.
        assert_eq!(c.place(16).unwrap(), vec![(1, 8), (2, 8)]);
        // 12 GPUs need two whole nodes: blocks 16.
        let p = c.place(12).unwrap();
        assert_eq!(Cluster::blocked(&p), 16);
        c.take(&p);
        assert_eq!(c.place(3), None);
        assert_eq!(c.place(2).unwrap(), vec![(0, 2)]);
        c.release(&p);
        assert_eq!(c.free_total(), 18);
    }

    #[test]
    fn typed_jobs_fit_their_type_and_untyped_jobs_any() {
        let c = Cluster::typed(&[(Some("b200".into()), 12), (Some("h100".into()), 8), (None, 8)], 8);
        assert_eq!((c.size.clone(), c.nodes()), (vec![8, 4, 8, 8], 4));
        assert_eq!((c.gpus_for(Some("b200")), c.gpus_for(Some("h100")), c.gpus_for(None), c.gpus_for(Some("a100"))), (12, 8, 28, 0));
        // Best fit among its type: the 4-GPU B200 node.
        assert_eq!(c.place_for(4, Some("b200"), true), Some(vec![(1, 4)]));
        assert_eq!(c.place_for(8, Some("h100"), true), Some(vec![(2, 8)]));
        assert_eq!(c.place_for(16, Some("b200"), true), None, "one whole B200 node only");
        assert_eq!(c.place_for(1, Some("a100"), true), None);
        // Untyped: any node, by the same rule.
        assert_eq!(c.place_for(4, None, true), Some(vec![(1, 4)]));
        assert_eq!(c.place_for(16, None, true), Some(vec![(0, 8), (2, 8)]));
        // Charged by where it lands.
        let w = GpuWeights::new([("b200", 2.0, None), ("h100", 1.0, None)]).unwrap();
        assert_eq!(c.weight_of(&vec![(0, 8)], &w).get(), 2.0);
        assert_eq!(c.weight_of(&vec![(0, 8), (2, 8)], &w).get(), 1.5);
        assert_eq!(c.weight_of(&vec![(3, 8)], &w), Weight::ONE);
        assert_eq!(c.weight_of(&vec![(0, 8)], &GpuWeights::default()), Weight::ONE);
        assert_eq!(Cluster::new(12, 8), Cluster::typed(&[(None, 12)], 8));
    }

    #[test]
    fn only_jobs_allowed_there_use_the_debug_capacity() {
        // Three nodes of 8, the last the debug capacity.
        let c = Cluster::new(24, 8).with_debug_nodes(1);
        assert_eq!(c.debug, vec![false, false, true]);
        let mut busy = c.clone();
        busy.take(&vec![(0, 8), (1, 6)]);
        // A job of 4 fits only on the debug node: an ordinary job waits,
        // a debug job (or unallocated work) takes it.
        assert_eq!(busy.place_for(4, None, false), None);
        assert_eq!(busy.place_for(4, None, true), Some(vec![(2, 4)]));
        // Best fit prefers the ordinary node's 2 GPUs for a 2-GPU debug job.
        assert_eq!(busy.place_for(2, None, true), Some(vec![(1, 2)]));
        // Multi-node jobs too: two whole nodes only with the debug one.
        assert_eq!(c.place_for(16, None, false), Some(vec![(0, 8), (1, 8)]));
        assert_eq!(c.clone().with_debug_nodes(2).place_for(16, None, false), None);
    }

    #[test]
    fn a_smaller_last_node_counts_as_what_it_is() {
        let c = Cluster::new(12, 8);
        assert_eq!((c.total(), c.nodes(), c.size.clone()), (12, 2, vec![8, 4]));
        // Whole-node jobs only take full-size nodes.
        assert_eq!(c.place(16), None);
        assert_eq!(c.place(4).unwrap(), vec![(1, 4)]);
    }
}
