//! The improvement loop: local search on a decoded plan's order (and block
//! rule), accepting plans not worse than the current one, keeping the best.

use super::decode::{Buffers, Ctx, Decoded, Job, Mark, Rule, RULES};
use crate::rng::Rng;

/// The neighbourhood shuffle permutes at most this many positions (the
/// late job and five others).
const SHUFFLE_SIZE: usize = 6;

/// A swap exchanges a job with one at most this many positions after it.
const SWAP_REACH: usize = 4;

/// A changed order and rule to decode, and the first position that
/// changed (decoding resumes at the last mark before it).
struct Move {
    order: Vec<u32>,
    rule: Rule,
    changed: usize,
}

/// Improvement from `best` (whose marks are `marks`) until `limit`:
/// squeaky wheel, neighbourhood shuffles and swaps on its order; returns
/// the best plan seen.
pub(super) fn improve(ctx: &mut Ctx, buffers: &mut Buffers, marks: &mut [Mark], mut best: Decoded, limit: u64) -> Decoded {
    let job_count = ctx.jobs.len();
    // Deterministic: a fixed stream, and the work decides where it stops
    // (the clock only at the budget's time cap).
    let mut rng = Rng::new(1);
    let mut current = best.clone();
    let mut late = ctx.late_positions(&current);
    while !ctx.spent(limit) && job_count >= 2 {
        let Some(Move { order, rule, changed }) = propose(&ctx.jobs, &mut rng, &current, &late) else { continue };
        if changed >= job_count && rule == current.rule {
            continue; // the same plan
        }
        // Under the same rule the positions before `changed` decode as
        // they did: resume from the current plan's marks.
        let from = if rule == current.rule { Some((&current, &marks[..], changed)) } else { None };
        let candidate = ctx.decode(&mut buffers.scratch, &mut buffers.candidate_marks, buffers.every, from, current.layout, order, rule);
        if candidate.value >= current.value - 1e-12 * current.value.abs() {
            if candidate.value > best.value {
                best = candidate.clone();
            }
            // The marks after the resumed one are the new plan's.
            let resumed = if rule == current.rule { changed / buffers.every + 1 } else { 0 };
            for (mark, candidate_mark) in marks[resumed..].iter_mut().zip(&mut buffers.candidate_marks[resumed..]) {
                std::mem::swap(mark, candidate_mark);
            }
            current = candidate;
            late = ctx.late_positions(&current);
        }
    }

    best
}

/// One random move on `current` (`late`: the positions of its late jobs):
/// 55% one late job earlier, 10% a late job's window shuffled, 15% every
/// late job earlier (those three only when some job is late), 15% a swap
/// of nearby jobs, 5% (or the rest) another block rule. `None`: the move
/// drawn changes nothing.
fn propose(jobs: &[Job], rng: &mut Rng, current: &Decoded, late: &[usize]) -> Option<Move> {
    let mut order = current.order.clone();
    let mut rule = current.rule;
    let pick = rng.below(100);
    let changed = if pick < 55 && !late.is_empty() {
        move_late_job_earlier(rng, &mut order, late)?
    } else if pick < 65 && !late.is_empty() {
        shuffle_late_job_window(jobs, rng, current, &mut order, late)?
    } else if pick < 80 && !late.is_empty() {
        order = move_late_jobs_earlier(rng, &order, late);
        order.iter().zip(&current.order).position(|(a, b)| a != b).unwrap_or(order.len())
    } else if pick < 95 {
        swap_nearby_jobs(rng, &mut order)
    } else {
        rule = RULES[rng.below(RULES.len())];
        0
    };
    Some(Move { order, rule, changed })
}

/// Squeaky wheel: one late job moves to a random earlier place. Returns
/// that place (`None` when the job drawn is already first).
fn move_late_job_earlier(rng: &mut Rng, order: &mut [u32], late: &[usize]) -> Option<usize> {
    let from = late[rng.below(late.len())];
    if from == 0 {
        return None;
    }
    let to = rng.below(from);
    order[to..=from].rotate_right(1);
    Some(to)
}

/// Neighbourhood shuffle: a late job and the jobs placed in its window
/// (arrival to its last possible end) trade places at random, a chain of
/// moves none of which pays alone. At most `SHUFFLE_SIZE` positions, the
/// others drawn at random. Returns the first position changed (`None`
/// when no other job is in the window).
fn shuffle_late_job_window(jobs: &[Job], rng: &mut Rng, current: &Decoded, order: &mut [u32], late: &[usize]) -> Option<usize> {
    let late_pos = late[rng.below(late.len())];
    let late_job = &jobs[order[late_pos] as usize];
    let (window_start, window_end) = (late_job.arrival, late_job.last + late_job.dur);
    let overlaps = |pos: usize| {
        let job_index = order[pos] as usize;
        current.starts[job_index].is_some_and(|(start, _)| start < window_end && start + jobs[job_index].dur > window_start)
    };
    let mut positions: Vec<usize> = (0..order.len()).filter(|&pos| pos == late_pos || overlaps(pos)).collect();
    if positions.len() < 2 {
        return None;
    }
    if positions.len() > SHUFFLE_SIZE {
        // The late job and `SHUFFLE_SIZE - 1` others at random (a partial
        // Fisher-Yates draw after it), back in position order.
        let keep = positions.iter().position(|&pos| pos == late_pos).unwrap_or(0);
        positions.swap(0, keep);
        for i in 1..SHUFFLE_SIZE {
            let k = i + rng.below(positions.len() - i);
            positions.swap(i, k);
        }
        positions.truncate(SHUFFLE_SIZE);
        positions.sort_unstable();
    }
    let mut shuffled: Vec<u32> = positions.iter().map(|&pos| order[pos]).collect();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.below(i + 1));
    }
    for (&pos, &job_index) in positions.iter().zip(&shuffled) {
        order[pos] = job_index;
    }
    Some(positions[0])
}

/// Squeaky wheel for all: every late job moves earlier by a random
/// distance (the others keep their relative order). Returns the new order.
fn move_late_jobs_earlier(rng: &mut Rng, order: &[u32], late: &[usize]) -> Vec<u32> {
    // Sort keys: odd for the jobs staying, even for the late ones so a late
    // job lands just before the job whose place it takes.
    let mut keyed: Vec<(usize, u32)> = order.iter().enumerate().map(|(pos, &job_index)| (2 * pos + 1, job_index)).collect();
    for &pos in late {
        keyed[pos].0 = 2 * (pos - rng.below(pos + 1));
    }
    keyed.sort_by_key(|&(key, _)| key);
    keyed.into_iter().map(|(_, job_index)| job_index).collect()
}

/// A job swaps places with one up to `SWAP_REACH` positions after it.
/// Returns the first position changed.
fn swap_nearby_jobs(rng: &mut Rng, order: &mut [u32]) -> usize {
    let job_count = order.len();
    let first = rng.below(job_count - 1);
    let second = first + 1 + rng.below((job_count - first - 1).min(SWAP_REACH));
    order.swap(first, second);
    first
}
