//! Occupancy as the decoder sees it: per aligned block of every size, one
//! `u64` mask of the steps at which all its GPUs are free, so a block's
//! earliest free run is a few shifts.

use crate::grid::{step_bits, Bits};

/// Bit `t` set when bits `t..t + len` of `free` are all set: the steps at
/// which a run of `len` free steps starts.
pub(super) fn run_starts(free: u64, len: usize) -> u64 {
    if len == 0 {
        return !0;
    }
    // `starts` holds the starts of runs `have` long; doubling `have` (or
    // stretching it up to `len`) costs one shift and one AND.
    let (mut starts, mut have) = (free, 1);
    while have < len {
        let shift = have.min(len - have);
        starts &= starts >> shift;
        have += shift;
    }
    starts
}

/// Free steps per aligned block: level `k` holds, per block `b`, a mask
/// with bit `t` set when GPUs `b·2^k .. (b+1)·2^k` are all free at step `t`
/// (bits from the horizon on are always set). One flat vector, so a copy
/// is one `memcpy`.
#[derive(Debug, PartialEq)]
pub(super) struct Packer {
    pub(super) bits: Vec<u64>,
    /// Start of each level in `bits` (and, last, its length).
    pub(super) at: Vec<usize>,
    pub(super) gpus: u32,
    /// Elastic layout: per step, the GPUs batch may still take (the rest
    /// is kept for the services); empty: no such limit.
    pub(super) cap: Vec<u32>,
}

// By hand so `clone_from` reuses the buffers: the searches copy saved
// states back and forth on every move.
impl Clone for Packer {
    fn clone(&self) -> Packer {
        Packer { bits: self.bits.clone(), at: self.at.clone(), gpus: self.gpus, cap: self.cap.clone() }
    }

    fn clone_from(&mut self, other: &Packer) {
        self.bits.clone_from(&other.bits);
        self.at.clone_from(&other.at);
        self.gpus = other.gpus;
        self.cap.clone_from(&other.cap);
    }
}

impl Packer {
    /// The occupancy of `grid` (`gpus` GPUs, `steps` steps), with levels
    /// up to blocks of `2^top_level` GPUs.
    pub(super) fn from_grid(grid: &Bits, gpus: u32, steps: usize, top_level: usize) -> Packer {
        let beyond = !step_bits(0, steps);
        let mut bits: Vec<u64> = (0..gpus).map(|gpu| (0..steps).filter(|&t| grid.free(t, gpu, 1)).fold(beyond, |free, t| free | 1 << t)).collect();
        let mut at = vec![0, bits.len()];
        for level in 1..=top_level {
            let below = at[level - 1];
            for block in 0..(gpus >> level) as usize {
                let free = bits[below + 2 * block] & bits[below + 2 * block + 1];
                bits.push(free);
            }
            at.push(bits.len());
        }
        Packer { bits, at, gpus, cap: Vec::new() }
    }

    /// Steps at which `gpus` more GPUs fit under the per-step limit (bits
    /// from the horizon on set).
    pub(super) fn cap_mask(&self, gpus: u32) -> u64 {
        if self.cap.is_empty() {
            return !0;
        }
        self.cap.iter().enumerate().fold(!step_bits(0, self.cap.len()), |fits, (t, &room)| if room >= gpus { fits | 1 << t } else { fits })
    }

    fn level(&self, level: usize) -> &[u64] {
        &self.bits[self.at[level]..self.at[level + 1]]
    }

    /// Steps at which GPUs `first..first + gpus` are all free (`first` and
    /// `gpus` multiples of a block size, as every candidate is).
    pub(super) fn mask(&self, first: u32, gpus: u32) -> u64 {
        let levels = self.at.len() - 1;
        let size = gpus.trailing_zeros() as usize;
        if size < levels && first % gpus == 0 {
            return self.bits[self.at[size] + (first >> size) as usize];
        }
        // Not one block: the AND of the largest aligned blocks covering it.
        let level = ((first | gpus).trailing_zeros() as usize).min(levels - 1);
        let (lo, hi) = ((first >> level) as usize, ((first + gpus) >> level) as usize);
        self.level(level)[lo..hi].iter().fold(!0, |free, &block| free & block)
    }

    /// GPUs `first..first + gpus` taken over steps `from..to` (and the
    /// per-step limit, if any, lowered), every level above them updated.
    pub(super) fn take(&mut self, first: u32, gpus: u32, from: usize, to: usize) {
        if !self.cap.is_empty() {
            for room in &mut self.cap[from..to] {
                *room -= gpus;
            }
        }
        let keep = !step_bits(from, to);
        for free in &mut self.bits[first as usize..(first + gpus) as usize] {
            *free &= keep;
        }
        for level in 1..self.at.len() - 1 {
            let (below, here) = (self.at[level - 1], self.at[level]);
            let lo = (first >> level) as usize;
            let hi = (((first + gpus - 1) >> level) as usize + 1).min(self.at[level + 1] - here);
            for block in lo..hi {
                self.bits[here + block] = self.bits[below + 2 * block] & self.bits[below + 2 * block + 1];
            }
        }
    }
}

/// The free steps around `from..to` in `free` (bit per step, set = free):
/// those just before it back to the last busy one or step 0, and just
/// after it up to the next busy one or the horizon's end. The best-fit-in-
/// time rules (the block rule Time and the co-placement search's GPU
/// choice) take the smallest.
pub(super) fn free_around(free: u64, from: usize, to: usize, steps: usize) -> usize {
    let before = if from == 0 {
        0
    } else {
        let busy = !free & step_bits(0, from);
        if busy == 0 {
            from
        } else {
            from - 1 - (63 - busy.leading_zeros() as usize)
        }
    };
    let after = if to >= steps { 0 } else { ((!free >> to).trailing_zeros() as usize).min(steps - to) };
    before + after
}
