//! Placing one job: its earliest start at or after its arrival at which a
//! legal block of its size is free for its whole run, and the block a
//! block rule (`Rule`) picks among those free then.

use super::decode::{Ctx, Job, Rule};
use super::packer::{free_around, run_starts, Packer};
use crate::grid::step_bits;

/// Sibling levels `badness` counts (the sibling block of each size up to
/// the node, at most this many).
const BUDDY_LEVELS: usize = 6;

impl Ctx {
    /// Steps at which `job` may start in a block free at the steps of
    /// `free`: its run fits, or (bits past step 63 being out of `free`) it
    /// runs free from there to the horizon's end.
    fn fits(&self, free: u64, job: &Job) -> u64 {
        let starts = run_starts(free, job.dur);
        if self.steps + job.dur > 64 {
            let busy = !free & step_bits(0, self.steps);
            starts | step_bits(64 - busy.leading_zeros() as usize, self.steps)
        } else {
            starts
        }
    }

    /// Earliest start and block (first GPU) for `job` on `packer` under
    /// `rule`; `None` when it fits nowhere. Each candidate block examined
    /// is a work unit.
    pub(super) fn find(&mut self, packer: &Packer, job: &Job, rule: Rule) -> Option<(usize, u32)> {
        if job.arrival > job.last || job.arrival >= self.steps {
            return None;
        }
        let allowed = step_bits(job.arrival, job.last + 1);
        let room = packer.cap_mask(job.gpus);
        let cands = &self.cands[job.size];
        // (start, badness, first GPU) of the best block so far.
        let mut best: Option<(usize, u64, u32)> = None;
        let mut seen = 0u64;
        match rule {
            Rule::Lowest | Rule::Highest => {
                // The first block at the earliest start in scan order; the
                // scan stops at a block free from the arrival on.
                let mut visit = |first: u32| {
                    seen += 1;
                    let starts = self.fits(packer.mask(first, job.gpus) & room, job) & allowed;
                    if starts != 0 {
                        let start = starts.trailing_zeros() as usize;
                        if best.is_none_or(|kept| start < kept.0) {
                            best = Some((start, 0, first));
                        }
                    }
                    best.is_some_and(|kept| kept.0 == job.arrival)
                };
                if rule == Rule::Lowest {
                    for &first in cands {
                        if visit(first) {
                            break;
                        }
                    }
                } else {
                    for &first in cands.iter().rev() {
                        if visit(first) {
                            break;
                        }
                    }
                }
            }
            Rule::Buddy | Rule::Time => {
                for &first in cands {
                    seen += 1;
                    let free = packer.mask(first, job.gpus) & room;
                    let starts = self.fits(free, job) & allowed;
                    if starts == 0 {
                        continue;
                    }
                    let start = starts.trailing_zeros() as usize;
                    if best.is_some_and(|kept| start > kept.0) {
                        continue;
                    }
                    let gap = free_around(free, start, (start + job.dur).min(self.steps), self.steps) as u64;
                    // Rule Time: a longer free window loses whatever the
                    // buddies, so their (dearer) count is skipped.
                    if best.is_some_and(|kept| rule == Rule::Time && start == kept.0 && gap > kept.1 >> 40) {
                        continue;
                    }
                    let badness = self.badness(packer, first, job, start, gap, rule);
                    if best.is_none_or(|kept| (start, badness) < (kept.0, kept.1)) {
                        best = Some((start, badness, first));
                    }
                }
            }
        }
        self.work += seen;
        best.map(|(start, _, first)| (start, first))
    }

    /// Lower is a better fit: sibling blocks busy over the run (nearest
    /// first) and `gap`, the free steps left around the run in this block
    /// (`free_around`, which the caller has already computed).
    fn badness(&self, packer: &Packer, first: u32, job: &Job, start: usize, gap: u64, rule: Rule) -> u64 {
        let steps = self.steps;
        let end = (start + job.dur).min(steps);
        let run = step_bits(start, end);
        let run_len = (end - start) as u64;
        let gpus = packer.gpus;
        let node = first / self.per_node;
        // Busy steps of each sibling, nearest first, as the digits of a
        // base-65 number (a sibling outside the node counts as all busy).
        let (mut buddy, mut size, mut depth) = (0u64, job.gpus, 0);
        while size < self.per_node && depth < BUDDY_LEVELS {
            let sibling = (first & !(size - 1)) ^ size;
            let busy = if sibling + size > gpus || sibling / self.per_node != node || (sibling + size - 1) / self.per_node != node {
                run_len
            } else {
                u64::from((!packer.mask(sibling, size) & run).count_ones())
            };
            buddy = buddy * 65 + busy;
            size *= 2;
            depth += 1;
        }
        for _ in depth..BUDDY_LEVELS {
            buddy *= 65;
        }
        const MAX_BUDDY: u64 = 65u64.pow(BUDDY_LEVELS as u32);
        match rule {
            Rule::Time => (gap << 40) | (MAX_BUDDY - buddy),
            _ => ((MAX_BUDDY - buddy) << 8) | gap.min(255),
        }
    }
}
