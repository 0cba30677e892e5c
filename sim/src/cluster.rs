//! GPUs on nodes, and where a job fits.
//!
//! A job of `g ≤ gpus_per_node` GPUs takes `g` GPUs of one node (best fit:
//! the node with the fewest free GPUs that still fits, which keeps whole
//! nodes free for big jobs). A larger job takes `⌈g / gpus_per_node⌉` whole
//! free nodes, as Slurm's `-N n --gres=gpu:8` does; it uses `g` GPUs of them
//! and blocks the rest.

/// Where a job runs: (node index, GPUs taken on it).
pub type Placement = Vec<(usize, u32)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub gpus_per_node: u32,
    /// Free GPUs per node.
    pub free: Vec<u32>,
    /// GPUs of each node (the last may be smaller).
    pub size: Vec<u32>,
}

impl Cluster {
    /// `gpus` GPUs in nodes of `gpus_per_node` (the last node may be smaller).
    pub fn new(gpus: u32, gpus_per_node: u32) -> Cluster {
        let per = gpus_per_node.max(1);
        let mut free = vec![per; (gpus / per) as usize];
        if gpus % per != 0 {
            free.push(gpus % per);
        }
        Cluster { gpus_per_node: per, size: free.clone(), free }
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
        if gpus == 0 {
            return Some(Vec::new());
        }
        if gpus <= per_node {
            // Best fit; ties to the lowest index (deterministic).
            let mut best: Option<(u32, usize)> = None;
            for (i, &f) in free.iter().enumerate() {
                if f >= gpus && best.is_none_or(|(bf, _)| f < bf) {
                    best = Some((f, i));
                }
            }
            return best.map(|(_, i)| vec![(i, gpus)]);
        }
        let need = gpus.div_ceil(per_node) as usize;
        let whole: Vec<usize> = free.iter().enumerate().filter(|&(_, &f)| f == per_node).map(|(i, _)| i).take(need).collect();
        (whole.len() == need).then(|| whole.into_iter().map(|i| (i, per_node)).collect())
    }

    pub fn place(&self, gpus: u32) -> Option<Placement> {
        Cluster::fit(&self.free, gpus, self.gpus_per_node)
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
    fn a_smaller_last_node_counts_as_what_it_is() {
        let c = Cluster::new(12, 8);
        assert_eq!((c.total(), c.nodes(), c.size.clone()), (12, 2, vec![8, 4]));
        // Whole-node jobs only take full-size nodes.
        assert_eq!(c.place(16), None);
        assert_eq!(c.place(4).unwrap(), vec![(1, 4)]);
    }
}
