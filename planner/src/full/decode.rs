//! Full mode's decoder: a solution of the count model ([`Mip`]) turned into
//! GPU indices, every plan offered to the best valid plan so far ([`Best`]).
//!
//! ## Decoding (counts → GPU indices)
//!
//! Service targets are the least curve ≥ `min(d, h)` within the cap (never
//! above `h`: idle holdings only where the cap needs them).
//!
//! 1. Batch jobs at the solver's starts (jobs the hint plan — the best so
//!    far — had at the same start first, on its blocks), each on the legal
//!    block free over its run that reuses most GPUs batch held at `t − 1`
//!    (so services keep theirs), then best fits (fullest node), then lowest
//!    (or highest, for blocks of a node or less, in one style).
//! 2. Services, step by step: each keeps the GPUs it held that batch leaves
//!    it, drops down to its target those batch wants soonest, and adds the
//!    GPUs batch leaves alone longest, as far as its swap cap allows (served
//!    demand is reduced, never the cap broken). A batch job starting at `t`
//!    that takes a service's GPUs beyond what the cap lets it replace moves to
//!    the block losing least, and stays where services lose demand only if it
//!    is worth more than that demand (estimated until the service catches
//!    up); otherwise it waits for the fill pass. (In the other style services
//!    go first, on the highest GPUs pinned jobs leave, and batch around them.)
//! 3. A fill pass places every job left over (highest priority first) at its
//!    most valuable start where an aligned block is free of batch and services.
//!
//! Eight styles (services or batch first × start or size order × small
//! blocks low or high) are decoded, then the best again with the jobs it
//! missed placed first while that helps ("squeaky wheel"): a decoding takes
//! about 2 ms at 512 GPUs.

use super::super::grid::{demand, dilate, firsts, last_start, pinned_plan, value, Bits};
use super::super::{validate, Placed, Plan, Scenario, Score, Violation};
use super::api::{Formulation, FullError, FullResult, FullStatus};
use super::count::Mip;
use highs::Col;
use std::time::Instant;

/// A plan with its validated score, or the constraint it breaks.
pub(super) fn check(s: &Scenario, plan: Plan) -> Result<(Plan, Score), Violation> {
    validate(s, &plan).map(|score| (plan, score))
}

/// The best valid plan seen, or the last violation.
#[derive(Debug, Default)]
pub(super) struct Best {
    plan: Option<(Plan, Score)>,
    violation: Option<Violation>,
}

impl Best {
    pub(super) fn offer(&mut self, candidate: Result<(Plan, Score), Violation>) {
        match candidate {
            Ok((p, sc)) => {
                if self.plan.as_ref().is_none_or(|(_, b)| sc.value > b.value) {
                    self.plan = Some((p, sc));
                }
            }
            Err(v) => self.violation = Some(v),
        }
    }
    pub(super) fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref().map(|(p, _)| p)
    }
    /// The best plan's value (−∞ without one).
    pub(super) fn value(&self) -> f64 {
        self.plan.as_ref().map_or(f64::NEG_INFINITY, |(_, sc)| sc.value)
    }
    pub(super) fn finish(self, status: FullStatus, bound: f64, model: Formulation) -> Result<FullResult, FullError> {
        let Some((plan, score)) = self.plan else {
            return Err(self.violation.map_or(FullError::NoSolution("no plan decoded".into()), FullError::Invalid));
        };
        let objective = score.value;
        let gap = if bound.is_finite() { ((bound - objective) / bound.abs().max(1e-9)).max(0.0) } else { f64::INFINITY };
        Ok(FullResult { plan, objective, bound, gap, status, model })
    }
}

/// How [`Mip::decode`] breaks ties.
#[derive(Debug, Clone, Default)]
pub(super) struct Style {
    /// Services take their GPUs before batch (highest first), else batch first and services around it.
    pub(super) services_first: bool,
    /// Batch by size (biggest first) before start step, else by start step.
    pub(super) size_first: bool,
    /// Blocks of one node or less from the highest GPUs, else from the lowest.
    pub(super) small_high: bool,
    /// Jobs placed before all others, in this order.
    pub(super) urgent: Vec<usize>,
}

impl Mip {
    /// Decode a solution in every [`Style`], then again with the jobs the
    /// best decoding missed placed first (while that helps and `until` is
    /// not past), offering each plan to `best`.
    pub(super) fn decode_into(&self, s: &Scenario, cols: &[f64], hint: Option<&Plan>, best: &mut Best, until: Instant) {
        let mut top: Option<(f64, Style, Vec<usize>)> = None;
        for k in 0..8u8 {
            let style = Style { services_first: k & 1 != 0, size_first: k & 2 != 0, small_high: k & 4 != 0, urgent: Vec::new() };
            let (plan, missed) = self.decode(s, cols, hint, &style);
            let candidate = check(s, plan);
            if let Ok((_, score)) = &candidate {
                if top.as_ref().is_none_or(|(v, _, _)| score.value > *v) {
                    top = Some((score.value, style, missed));
                }
            }
            best.offer(candidate);
        }
        // Squeaky wheel: what the best style missed goes first next time.
        let Some((mut value, mut style, mut missed)) = top else { return };
        for _ in 0..8 {
            let fresh: Vec<usize> = missed.iter().copied().filter(|ji| !style.urgent.contains(ji)).collect();
            if fresh.is_empty() || Instant::now() >= until {
                return;
            }
            let mut next = style.clone();
            next.urgent.extend(fresh);
            let (plan, m) = self.decode(s, cols, hint, &next);
            let candidate = check(s, plan);
            let improved = matches!(&candidate, Ok((_, score)) if score.value > value);
            if let Ok((_, score)) = &candidate {
                value = value.max(score.value);
            }
            best.offer(candidate);
            if !improved {
                return;
            }
            (style, missed) = (next, m);
        }
    }

    /// Turn a solution (`cols` empty: nothing decided) into GPU indices;
    /// also the jobs the solution starts that did not get their start.
    pub(super) fn decode(&self, s: &Scenario, cols: &[f64], hint: Option<&Plan>, style: &Style) -> (Plan, Vec<usize>) {
        let services_first = style.services_first;
        let steps = s.steps;
        let nsvc = s.services.len();
        let ngpu = s.gpus as usize;
        let per_node = s.gpus_per_node.max(1);
        let val = |c: Col| cols.get(c.index()).copied().unwrap_or(0.0);
        // The hint plan's (start, first GPU) per job and GPUs per service and step.
        let mut hint_batch = vec![None; s.jobs.len()];
        let mut hint_rt = vec![Bits::new(s.gpus, steps); nsvc];
        if let Some(w) = hint {
            for p in &w.batch {
                if let Some(ji) = s.jobs.iter().position(|j| j.id == p.job_id) {
                    hint_batch[ji] = Some((p.start_step, p.first_gpu));
                }
            }
            for (si, held) in w.realtime.iter().enumerate().take(nsvc) {
                for (t, gpus) in held.iter().enumerate().take(steps) {
                    for &gpu in gpus.iter().filter(|&&g| g < s.gpus) {
                        hint_rt[si].set(t, gpu, 1);
                    }
                }
            }
        }
        // Service targets: the least curve ≥ min(demand, h) within the cap.
        let targets: Vec<Vec<u32>> = (0..nsvc)
            .map(|si| {
                let mut v: Vec<u32> = (0..steps)
                    .map(|t| {
                        let h = self.h[si].get(t).map_or(0.0, |&c| val(c)).round().max(0.0) as u32;
                        h.min(demand(s, si, t))
                    })
                    .collect();
                dilate(&mut v, s.services[si].swap_cap);
                v
            })
            .collect();
        let mut by_weight: Vec<usize> = (0..nsvc).collect();
        by_weight.sort_by(|&a, &b| s.services[b].weight.total_cmp(&s.services[a].weight).then(a.cmp(&b)));
        let mut batch = self.pinned.clone();
        let mut rt = Bits::new(s.gpus, steps);
        let mut held: Vec<Vec<u32>> = vec![Vec::new(); nsvc];
        let mut realtime: Vec<Vec<Vec<u32>>> = vec![Vec::with_capacity(steps); nsvc];
        let mut record = |t: usize, held: &[Vec<u32>], rt: &mut Bits| {
            for si in 0..nsvc {
                for &gpu in &held[si] {
                    rt.set(t, gpu, 1);
                }
                realtime[si].push(held[si].clone());
            }
        };

        // 0. Services first: the highest GPUs pinned jobs leave.
        if services_first {
            for t in 0..steps {
                services_step(s, t, &targets, &mut held, &hint_rt, &by_weight, |gpu| self.pinned.get(t, gpu), u64::from);
                record(t, &held, &mut rt);
            }
        }

        // 1. Batch at the solver's starts: by start, bigger first, best fit.
        let mut order: Vec<(usize, usize)> = Vec::new();
        for (ji, x) in self.x.iter().enumerate() {
            if let Some((a, xs)) = x {
                if let Some(k) = xs.iter().position(|&c| val(c) > 0.5) {
                    order.push((a + k, ji));
                }
            }
        }
        // Jobs kept where the hint plan had them go first, on its blocks.
        let kept = |t: usize, ji: usize| hint_batch[ji].is_some_and(|(ht, _)| ht == t);
        order.sort_by(|&(ta, a), &(tb, b)| {
            let (ja, jb) = (&s.jobs[a], &s.jobs[b]);
            let urgent = |ji: usize| style.urgent.iter().position(|&u| u == ji).unwrap_or(usize::MAX);
            urgent(a)
                .cmp(&urgent(b))
                .then(kept(tb, b).cmp(&kept(ta, a)))
                .then(if style.size_first { jb.gpus.cmp(&ja.gpus) } else { std::cmp::Ordering::Equal })
                .then(ta.cmp(&tb))
                .then(jb.gpus.cmp(&ja.gpus))
                .then(jb.priority.total_cmp(&ja.priority))
                .then(ja.id.cmp(&jb.id))
        });
        let wanted = order.clone();
        // Per job: (start, first GPU) once placed.
        let mut at: Vec<Option<(usize, u32)>> = vec![None; s.jobs.len()];
        for (t, ji) in order {
            let j = &s.jobs[ji];
            let end = (t + j.duration_steps).min(steps);
            let free = |batch: &Bits, f: u32| (t..end).all(|u| batch.free(u, f, j.gpus) && rt.free(u, f, j.gpus));
            let mut best: Option<((i64, i64, bool, u32), u32)> = None;
            if let Some((_, f)) = hint_batch[ji].filter(|_| kept(t, ji)) {
                if f.checked_add(j.gpus).is_some_and(|e| e <= s.gpus) && free(&batch, f) {
                    best = Some(((i64::MIN, 0, false, 0), f));
                }
            }
            let candidates = if best.is_some() { Vec::new() } else { firsts(s.gpus, per_node, j.gpus).collect() };
            for first in candidates {
                if !free(&batch, first) {
                    continue;
                }
                let fit: i64 = if j.gpus <= per_node {
                    let node = first / per_node * per_node;
                    let n = per_node.min(s.gpus - node);
                    (t..end).map(|u| i64::from(batch.count(u, node, n))).sum()
                } else {
                    0
                };
                // GPUs batch frees at t − 1 first: services keep theirs.
                let reuse = if t > 0 { i64::from(batch.count(t - 1, first, j.gpus)) } else { 0 };
                let end_pref = if style.small_high && j.gpus <= per_node { u32::MAX - first } else { first };
                let key = (-reuse, -fit, first % j.gpus != 0, end_pref);
                if best.is_none_or(|(k, _)| key < k) {
                    best = Some((key, first));
                }
            }
            if let Some((_, first)) = best {
                batch.set_run(first, j.gpus, t, end);
                at[ji] = Some((t, first));
            }
        }

        // 2. Otherwise services now, step by step, around batch: `next[t][gpu]`
        // is the first step ≥ t at which batch takes the GPU.
        if !services_first {
            let mut next = vec![vec![0u32; ngpu]; steps];
            next_busy(&batch, &mut next, 0..s.gpus);
            for t in 0..steps {
                if t > 0 {
                    self.spare_services(s, t, &targets, &held, &mut batch, &mut at, &mut next);
                }
                let rank = |gpu: u32| u64::from(next[t][gpu as usize]) << 32 | u64::from(gpu);
                services_step(s, t, &targets, &mut held, &hint_rt, &by_weight, |gpu| batch.get(t, gpu), rank);
                record(t, &held, &mut rt);
            }
        }
        let mut plan = pinned_plan(s);
        let mut placed = vec![false; s.jobs.len()];
        for (ji, a) in at.iter().enumerate() {
            if let Some((t, first)) = *a {
                placed[ji] = true;
                plan.batch.push(Placed { job_id: s.jobs[ji].id, start_step: t, first_gpu: first });
            }
        }
        plan.realtime = realtime;

        // Fill: leftover jobs where batch and realtime leave aligned blocks free.
        let mut left: Vec<usize> = (0..s.jobs.len()).filter(|&ji| self.eligible[ji] && !placed[ji]).collect();
        left.sort_by(|&a, &b| {
            let (ja, jb) = (&s.jobs[a], &s.jobs[b]);
            jb.priority.total_cmp(&ja.priority).then(jb.gpus.cmp(&ja.gpus)).then(ja.id.cmp(&jb.id))
        });
        let words = (s.gpus as usize).div_ceil(64);
        for ji in left {
            let j = &s.jobs[ji];
            let candidates: Vec<u32> = firsts(s.gpus, per_node, j.gpus).collect();
            let mut best: Option<(f64, usize, u32)> = None;
            let Some(last) = last_start(s, j) else { continue };
            for t in j.arrival_step..=last {
                let end = (t + j.duration_steps).min(steps);
                let mut busy = vec![0u64; words];
                for u in t..end {
                    for (b, (x, y)) in busy.iter_mut().zip(batch.row(u).iter().zip(rt.row(u))) {
                        *b |= x | y;
                    }
                }
                if let Some(&first) = candidates.iter().find(|&&f| Bits::free_in(&busy, f, j.gpus)) {
                    let v = value(s, j, t);
                    if best.is_none_or(|(b, _, _)| v > b) {
                        best = Some((v, t, first));
                    }
                    if s.decay <= 1.0 {
                        break; // later starts are worth no more
                    }
                }
            }
            if let Some((_, t, first)) = best {
                batch.set_run(first, j.gpus, t, (t + j.duration_steps).min(steps));
                plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
            }
        }
        let missed = wanted.into_iter().filter(|&(t, ji)| at[ji].is_none_or(|(st, _)| st != t)).map(|(_, ji)| ji).collect();
        (plan, missed)
    }

    /// Batch jobs starting at `t` may take GPUs services held at `t − 1`
    /// only as far as each service can still reach its target within its
    /// swap cap (an evicted GPU costs a removal and an addition). A job that
    /// takes more moves to the block losing least; it stays where services
    /// lose demand only if it is worth more than the unmet demand (estimated
    /// until the service catches up), and otherwise waits for the fill pass.
    #[allow(clippy::too_many_arguments)]
    fn spare_services(
        &self,
        s: &Scenario,
        t: usize,
        targets: &[Vec<u32>],
        held: &[Vec<u32>],
        batch: &mut Bits,
        at: &mut [Option<(usize, u32)>],
        next: &mut [Vec<u32>],
    ) {
        let nsvc = s.services.len();
        let steps = s.steps;
        let hits = |si: usize, f: u32, g: u32| {
            let h = &held[si];
            (h.partition_point(|&x| x < f + g) - h.partition_point(|&x| x < f)) as u32
        };
        // Per service: (held, reachable target, evictions free of loss).
        let plan: Vec<(u32, u32, u32)> = (0..nsvc)
            .map(|si| {
                let (n, cap) = (held[si].len() as u32, s.services[si].swap_cap);
                let want = targets[si][t].clamp(n.saturating_sub(cap), n.saturating_add(cap));
                let natural = n.saturating_sub(want);
                (n, want, natural + (cap - want.abs_diff(n)) / 2)
            })
            .collect();
        // Unmet cost of `e` evictions from each service (u32::MAX evictions: over the cap).
        let loss = |e: &[u32]| -> Option<f64> {
            let mut cost = 0.0;
            for si in 0..nsvc {
                let (n, want, free) = plan[si];
                let cap = s.services[si].swap_cap;
                if e[si] > cap {
                    return None;
                }
                if e[si] <= free {
                    continue;
                }
                let natural = n.saturating_sub(want);
                let swaps = want.abs_diff(n) + 2 * e[si].saturating_sub(natural);
                let adds = (want + e[si]).saturating_sub(n);
                cost += deficit_cost(s, si, &targets[si], t, swaps.saturating_sub(cap).min(adds));
            }
            Some(cost)
        };
        let evictions = |batch: &Bits| -> Vec<u32> { (0..nsvc).map(|si| held[si].iter().filter(|&&gpu| batch.get(t, gpu)).count() as u32).collect() };
        let mut kept: Vec<usize> = Vec::new();
        loop {
            let e = evictions(batch);
            let over: Vec<bool> = (0..nsvc).map(|si| e[si] > plan[si].2).collect();
            let victim = (0..s.jobs.len())
                .filter(|ji| !kept.contains(ji))
                .filter_map(|ji| {
                    let (st, f) = at[ji]?;
                    let hit: u32 = (0..nsvc).filter(|&si| over[si]).map(|si| hits(si, f, s.jobs[ji].gpus)).sum();
                    (st == t && hit > 0).then_some((hit, std::cmp::Reverse(ji), f))
                })
                .max();
            let Some((_, std::cmp::Reverse(ji), first)) = victim else { break };
            let j = &s.jobs[ji];
            let (g, end) = (j.gpus, (t + j.duration_steps).min(steps));
            for u in t..end {
                batch.clear(u, first, g);
            }
            next_busy(batch, next, first..first + g);
            let e = evictions(batch);
            let base = loss(&e).unwrap_or(f64::INFINITY);
            let mut best: Option<(f64, u32, u32)> = None;
            for f in firsts(s.gpus, s.gpus_per_node, g) {
                if !(t..end).all(|u| batch.free(u, f, g)) {
                    continue;
                }
                let e2: Vec<u32> = (0..nsvc).map(|si| e[si] + hits(si, f, g)).collect();
                let Some(l) = loss(&e2) else { continue };
                let key = (l, e2.iter().sum::<u32>() - e.iter().sum::<u32>(), f);
                if best.is_none_or(|b| (key.0, key.1, key.2) < b) {
                    best = Some(key);
                }
            }
            match best {
                Some((l, _, f)) if l <= base || value(s, j, t) > l - base => {
                    batch.set_run(f, g, t, end);
                    at[ji] = Some((t, f));
                    next_busy(batch, next, f..f + g);
                    kept.push(ji);
                }
                _ => at[ji] = None,
            }
        }
    }
}

/// One step of the services: each keeps the GPUs it held that are not
/// `busy`, drops down to its target (GPUs the hint plan does not hold now,
/// then lowest `rank`, first), and adds up to it from the free GPUs (the
/// hint's first, then highest `rank`), within its swap cap.
#[allow(clippy::too_many_arguments)]
fn services_step(
    s: &Scenario,
    t: usize,
    targets: &[Vec<u32>],
    held: &mut [Vec<u32>],
    hint: &[Bits],
    by_weight: &[usize],
    busy: impl Fn(u32) -> bool,
    rank: impl Fn(u32) -> u64,
) {
    let nsvc = s.services.len();
    let mut taken = vec![false; s.gpus as usize];
    let mut room = vec![u32::MAX; nsvc];
    for si in 0..nsvc {
        let before = held[si].len() as u32;
        held[si].retain(|&gpu| !busy(gpu));
        let cap = s.services[si].swap_cap;
        let keep = if t == 0 { targets[si][t] } else { targets[si][t].max(before.saturating_sub(cap)) };
        if held[si].len() > keep as usize {
            held[si].sort_by_key(|&gpu| (hint[si].get(t, gpu), rank(gpu)));
            let n = held[si].len() - keep as usize;
            held[si].drain(..n);
        }
        if t > 0 {
            room[si] = cap.saturating_sub(before - held[si].len() as u32);
        }
        for &gpu in &held[si] {
            taken[gpu as usize] = true;
        }
    }
    let mut pool: Vec<u32> = (0..s.gpus).filter(|&gpu| !taken[gpu as usize] && !busy(gpu)).collect();
    pool.sort_by_key(|&gpu| std::cmp::Reverse(rank(gpu)));
    for &si in by_weight {
        let want = targets[si][t].saturating_sub(held[si].len() as u32).min(room[si]) as usize;
        let mut add: Vec<u32> = pool.iter().copied().filter(|&gpu| hint[si].get(t, gpu)).take(want).collect();
        if add.len() < want {
            let more: Vec<u32> = pool.iter().copied().filter(|&gpu| !hint[si].get(t, gpu)).take(want - add.len()).collect();
            add.extend(more);
        }
        pool.retain(|gpu| !add.contains(gpu));
        held[si].extend(add);
        held[si].sort_unstable();
    }
}

/// `next[t][gpu]`: the first step ≥ t at which batch holds the GPU (`steps` if none).
fn next_busy(batch: &Bits, next: &mut [Vec<u32>], gpus: std::ops::Range<u32>) {
    let steps = batch.steps();
    for gpu in gpus {
        let mut n = steps as u32;
        for t in (0..steps).rev() {
            if batch.get(t, gpu) {
                n = t as u32;
            }
            next[t][gpu as usize] = n;
        }
    }
}

/// Unmet cost of a service missing `d` GPUs at step `t`, catching up as its
/// cap allows beyond the target's own changes.
fn deficit_cost(s: &Scenario, si: usize, targets: &[u32], t: usize, mut d: u32) -> f64 {
    let svc = &s.services[si];
    let mut cost = 0.0;
    let mut u = t;
    while d > 0 && u < s.steps {
        let short = d.saturating_sub(targets[u].saturating_sub(demand(s, si, u)));
        cost += s.penalty * svc.weight * f64::from(short);
        u += 1;
        if u < s.steps {
            let delta = i64::from(targets[u]) - i64::from(targets[u - 1]);
            d = (i64::from(d) - i64::from(svc.swap_cap) + delta).max(0) as u32;
        }
    }
    cost
}
