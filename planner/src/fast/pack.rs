//! Fast mode's decoder and search (see the module doc of `fast`): an order
//! of batch jobs and a block rule decode into a plan, the value of which is
//! summed as the plan is built; a counted work budget bounds the passes.

use super::super::grid::{demand, dilate, firsts, last_start, pinned_bits, pinned_plan, placement_order, step_bits, Bits, Discounts, Rank};
use super::super::rng::Rng;
use super::super::{Placed, Plan, Scenario};
use super::elastic;
use super::layout::{clip, layouts, place_layout};
use std::time::{Duration, Instant};

mod tokens;

/// Horizons up to this many steps use the search (one `u64` per block
/// holds its step mask); longer ones the single greedy.
pub(crate) const MAX_STEPS: usize = 64;

/// How much fast mode may do, in work units: a candidate block examined
/// is one, a job decoded four. The units decide where every loop stops, so
/// the plan is the same on every machine; `time_cap` is a safety on top.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// Decodes wanted (the single greedy's work times this) …
    pub passes: u64,
    /// … but at least this much work (small instances: many passes) …
    pub work_min: u64,
    /// … and at most this much (big instances: few passes) …
    pub work_max: u64,
    /// … and always this many decodes (≥ 1: the single greedy).
    pub min_passes: u64,
    /// With realtime services, this percentage of that work again for the
    /// elastic layouts …
    pub elastic_percent: u64,
    /// … but at most this much.
    pub elastic_max: u64,
    /// With realtime services, the co-placement search (`pack/tokens.rs`): this
    /// many decodes' worth (the single greedy's work times this) …
    pub tokens_passes: u64,
    /// … but at most this much …
    pub tokens_max: u64,
    /// … and not at all when that is fewer decodes than this.
    pub tokens_min_passes: u64,
    /// Wall-clock time after which every loop stops as if its work were
    /// spent, the best plan so far kept: a safety for a slow machine or an
    /// unforeseen instance, far above what the work takes (only when it is
    /// reached does the plan depend on the machine).
    pub time_cap: Duration,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            passes: 60,
            work_min: 45_000,
            work_max: 4_000_000,
            min_passes: 4,
            elastic_percent: 80,
            elastic_max: 1_500_000,
            tokens_passes: 80_000,
            tokens_max: 40_000_000,
            tokens_min_passes: 1_000,
            time_cap: Duration::from_secs(10),
        }
    }
}

impl Budget {
    /// The default budget times `effort` (≥ 1): every work figure scaled,
    /// so the search runs about `effort` times as long, still counted work.
    pub(crate) fn with_effort(effort: u32) -> Budget {
        let k = u64::from(effort.max(1));
        let d = Budget::default();
        Budget {
            passes: d.passes * k,
            work_min: d.work_min * k,
            work_max: d.work_max * k,
            elastic_max: d.elastic_max * k,
            tokens_passes: d.tokens_passes * k,
            tokens_max: d.tokens_max * k,
            time_cap: d.time_cap * effort.max(1),
            ..d
        }
    }
}

/// Bit `t` set when bits `t..t + d` of `m` are all set.
fn runs(m: u64, d: usize) -> u64 {
    if d == 0 {
        return !0;
    }
    let (mut x, mut have) = (m, 1);
    while have < d {
        let s = have.min(d - have);
        x &= x >> s;
        have += s;
    }
    x
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

    fn clone_from(&mut self, o: &Packer) {
        self.bits.clone_from(&o.bits);
        self.at.clone_from(&o.at);
        self.gpus = o.gpus;
        self.cap.clone_from(&o.cap);
    }
}

impl Packer {
    fn from_grid(grid: &Bits, gpus: u32, steps: usize, top_level: usize) -> Packer {
        let beyond = !step_bits(0, steps);
        let mut bits: Vec<u64> = (0..gpus).map(|g| (0..steps).filter(|&t| grid.free(t, g, 1)).fold(beyond, |m, t| m | 1 << t)).collect();
        let mut at = vec![0, bits.len()];
        for k in 1..=top_level {
            let prev = at[k - 1];
            for b in 0..(gpus >> k) as usize {
                let m = bits[prev + 2 * b] & bits[prev + 2 * b + 1];
                bits.push(m);
            }
            at.push(bits.len());
        }
        Packer { bits, at, gpus, cap: Vec::new() }
    }

    /// Steps at which `g` more GPUs fit under the per-step limit (bits from
    /// the horizon on set).
    fn cap_mask(&self, g: u32) -> u64 {
        if self.cap.is_empty() {
            return !0;
        }
        self.cap.iter().enumerate().fold(!step_bits(0, self.cap.len()), |m, (t, &c)| if c >= g { m | 1 << t } else { m })
    }

    fn level(&self, k: usize) -> &[u64] {
        &self.bits[self.at[k]..self.at[k + 1]]
    }

    /// Steps at which GPUs `first..first + g` are all free (`first` and `g`
    /// multiples of a block size, as every candidate is).
    fn mask(&self, first: u32, g: u32) -> u64 {
        let levels = self.at.len() - 1;
        let size = g.trailing_zeros() as usize;
        if size < levels && first % g == 0 {
            return self.bits[self.at[size] + (first >> size) as usize];
        }
        let k = ((first | g).trailing_zeros() as usize).min(levels - 1);
        let (a, b) = ((first >> k) as usize, ((first + g) >> k) as usize);
        self.level(k)[a..b].iter().fold(!0, |m, &x| m & x)
    }

    pub(super) fn take(&mut self, first: u32, g: u32, from: usize, to: usize) {
        if !self.cap.is_empty() {
            for c in &mut self.cap[from..to] {
                *c -= g;
            }
        }
        let keep = !step_bits(from, to);
        for x in &mut self.bits[first as usize..(first + g) as usize] {
            *x &= keep;
        }
        for k in 1..self.at.len() - 1 {
            let (prev, cur) = (self.at[k - 1], self.at[k]);
            let lo = (first >> k) as usize;
            let hi = (((first + g - 1) >> k) as usize + 1).min(self.at[k + 1] - cur);
            for b in lo..hi {
                self.bits[cur + b] = self.bits[prev + 2 * b] & self.bits[prev + 2 * b + 1];
            }
        }
    }
}

/// The free steps around `from..to` in `m` (bit per step, set = free):
/// those just before it back to the last busy one or step 0, and just
/// after it up to the next busy one or the horizon's end. The best-fit-in-
/// time rules (the block rule Time and the co-placement search's GPU
/// choice) take the smallest.
pub(super) fn free_around(m: u64, from: usize, to: usize, steps: usize) -> usize {
    let before = if from == 0 {
        0
    } else {
        let busy = !m & step_bits(0, from);
        if busy == 0 {
            from
        } else {
            from - 1 - (63 - busy.leading_zeros() as usize)
        }
    };
    let after = if to >= steps { 0 } else { ((!m >> to).trailing_zeros() as usize).min(steps - to) };
    before + after
}

/// How a block is chosen among those free at the earliest start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    Lowest,
    Highest,
    /// The block whose buddies (the sibling block at each size up to the
    /// node) are busiest over the run, then the shortest free window.
    Buddy,
    /// The shortest free window around the run, then the busiest buddies.
    Time,
}

const RULES: [Rule; 4] = [Rule::Lowest, Rule::Buddy, Rule::Time, Rule::Highest];

/// A batch job as the decoder sees it.
#[derive(Debug, Clone)]
pub(super) struct Job {
    id: u64,
    pub(super) gpus: u32,
    /// log2 of `gpus`: the index of its candidate list.
    size: usize,
    /// Duration clipped to the horizon.
    pub(super) dur: usize,
    pub(super) arrival: usize,
    /// The last step it may start at (the horizon rule, `grid::last_start`).
    pub(super) last: usize,
    priority: f64,
    /// Its value when it starts at its arrival (the most it can bring).
    ideal: f64,
}

/// The state before every `every`-th position of a decoded order, and the
/// value so far.
type Mark = (Packer, f64);

/// Where a decoding resumes: the current plan, its marks, the first
/// position that changed.
type Resume<'a> = (&'a Decoded, &'a [Mark], usize);

/// A decoded order.
#[derive(Debug, Clone)]
struct Decoded {
    layout: usize,
    rule: Rule,
    order: Vec<u32>,
    /// Per job (index into `jobs`): start step and first GPU.
    starts: Vec<Option<(usize, u32)>>,
    value: f64,
}

pub(super) struct Ctx {
    pub(super) steps: usize,
    pub(super) per_node: u32,
    pub(super) jobs: Vec<Job>,
    /// Per size (log2): the first GPUs of the legal blocks.
    cands: Vec<Vec<u32>>,
    /// The discount's prefix sums.
    disc: Discounts,
    /// Per layout: the grid after pinned jobs and bands, and the constant
    /// part of the value (pinned batch value − unmet realtime cost).
    bases: Vec<(Packer, f64)>,
    /// The services kept as counts: the index in `bases` of that grid
    /// (batch decoded on it only guides where the services go) and their
    /// curves.
    elastic: Option<(usize, Vec<Vec<u32>>)>,
    pub(super) work: u64,
    /// The budget's wall-clock cap (`None`: none), …
    deadline: Option<Instant>,
    /// … how many times `spent` was asked (the clock is read every 64th
    /// time) …
    asked: u32,
    /// … and whether it has passed.
    late: bool,
}

impl Ctx {
    /// The decoder for `s`'s jobs that are not pinned and can finish
    /// inside the horizon, with no layouts yet.
    pub(super) fn new(s: &Scenario) -> Ctx {
        let steps = s.steps;
        let per_node = s.gpus_per_node.max(1);
        let jobs: Vec<Job> = s
            .jobs
            .iter()
            .filter(|j| j.pinned.is_none() && j.gpus > 0 && j.gpus.is_power_of_two() && j.gpus <= s.gpus)
            .filter_map(|j| last_start(s, j).map(|last| (j, last)))
            .map(|(j, last)| Job {
                id: j.id,
                gpus: j.gpus,
                size: j.gpus.trailing_zeros() as usize,
                dur: j.duration_steps.min(steps),
                arrival: j.arrival_step,
                last,
                priority: j.priority,
                ideal: 0.0,
            })
            .collect();
        let top_level = jobs.iter().map(|j| j.size).max().unwrap_or(0);
        let cands = (0..=top_level).map(|k| firsts(s.gpus, per_node, 1 << k).collect()).collect();
        let disc = Discounts::new(s.decay, steps);
        let mut ctx = Ctx { steps, per_node, jobs, cands, disc, bases: Vec::new(), elastic: None, work: 0, deadline: None, asked: 0, late: false };
        for i in 0..ctx.jobs.len() {
            ctx.jobs[i].ideal = ctx.value(&ctx.jobs[i], ctx.jobs[i].arrival);
        }
        ctx
    }

    /// Whether a loop bounded by `limit` work units is to stop: the work is
    /// spent, or the wall-clock cap has passed.
    pub(super) fn spent(&mut self, limit: u64) -> bool {
        if self.work >= limit || self.late {
            return true;
        }
        self.asked = self.asked.wrapping_add(1);
        if self.asked % 64 == 0 {
            self.late = self.deadline.is_some_and(|d| Instant::now() >= d);
        }
        self.late
    }

    /// Value of job `j` started at `t` (its steps inside the horizon).
    pub(super) fn value(&self, j: &Job, t: usize) -> f64 {
        let end = (t + j.dur).min(self.steps);
        self.disc.run(j.priority, j.gpus, t.min(end), end)
    }

    /// Steps at which `j` may start in a block free at the steps of `m`:
    /// its run fits, or (bits past step 63 being out of `m`) it runs free
    /// from there to the horizon's end.
    fn fits(&self, m: u64, j: &Job) -> u64 {
        let r = runs(m, j.dur);
        if self.steps + j.dur > 64 {
            let busy = !m & step_bits(0, self.steps);
            r | step_bits(64 - busy.leading_zeros() as usize, self.steps)
        } else {
            r
        }
    }

    /// Earliest start and block for job `j` under `rule`.
    pub(super) fn find(&mut self, p: &Packer, j: &Job, rule: Rule) -> Option<(usize, u32)> {
        if j.arrival > j.last || j.arrival >= self.steps {
            return None;
        }
        let allowed = step_bits(j.arrival, j.last + 1);
        let room = p.cap_mask(j.gpus);
        let cands = &self.cands[j.size];
        let mut best: Option<(usize, u64, u32)> = None;
        let mut seen = 0u64;
        match rule {
            Rule::Lowest | Rule::Highest => {
                let mut visit = |first: u32| {
                    seen += 1;
                    let r = self.fits(p.mask(first, j.gpus) & room, j) & allowed;
                    if r != 0 {
                        let t = r.trailing_zeros() as usize;
                        if best.is_none_or(|b| t < b.0) {
                            best = Some((t, 0, first));
                        }
                    }
                    best.is_some_and(|b| b.0 == j.arrival)
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
                    let m = p.mask(first, j.gpus) & room;
                    let r = self.fits(m, j) & allowed;
                    if r == 0 {
                        continue;
                    }
                    let t = r.trailing_zeros() as usize;
                    if best.is_some_and(|b| t > b.0) {
                        continue;
                    }
                    let gap = free_around(m, t, (t + j.dur).min(self.steps), self.steps) as u64;
                    // Rule Time: a longer free window loses whatever the
                    // buddies, so their (dearer) count is skipped.
                    if best.is_some_and(|b| rule == Rule::Time && t == b.0 && gap > b.1 >> 40) {
                        continue;
                    }
                    let bad = self.badness(p, first, j, t, gap, rule);
                    if best.is_none_or(|b| (t, bad) < (b.0, b.1)) {
                        best = Some((t, bad, first));
                    }
                }
            }
        }
        self.work += seen;
        best.map(|(t, _, first)| (t, first))
    }

    /// Lower is a better fit: sibling blocks busy over the run (nearest
    /// first) and `gap`, the free steps left around the run in this block
    /// (`free_around`, which the caller has already computed).
    fn badness(&self, p: &Packer, first: u32, j: &Job, t: usize, gap: u64, rule: Rule) -> u64 {
        let steps = self.steps;
        let end = (t + j.dur).min(steps);
        let w = step_bits(t, end);
        let full = (end - t) as u64;
        let gpus = p.gpus;
        let node = first / self.per_node;
        let (mut buddy, mut size, mut depth) = (0u64, j.gpus, 0);
        while size < self.per_node && depth < 6 {
            let sib = (first & !(size - 1)) ^ size;
            let busy = if sib + size > gpus || sib / self.per_node != node || (sib + size - 1) / self.per_node != node {
                full
            } else {
                u64::from((!p.mask(sib, size) & w).count_ones())
            };
            buddy = buddy * 65 + busy;
            size *= 2;
            depth += 1;
        }
        for _ in depth..6 {
            buddy *= 65;
        }
        const MAXB: u64 = 65u64.pow(6);
        match rule {
            Rule::Time => (gap << 40) | (MAXB - buddy),
            _ => ((MAXB - buddy) << 8) | gap.min(255),
        }
    }

    /// Decode `order` under `rule` on `layout`. With `from` (the current
    /// plan, same layout and rule, and its marks) the decoding resumes at the
    /// last mark at or before `changed`, the first position where `order`
    /// differs from it. `marks[i]` receives the state before position
    /// `i · every` (only the marks after the resumed one are written).
    #[allow(clippy::too_many_arguments)]
    fn decode(
        &mut self,
        scratch: &mut Packer,
        marks: &mut [Mark],
        every: usize,
        from: Option<Resume<'_>>,
        layout: usize,
        order: Vec<u32>,
        rule: Rule,
    ) -> Decoded {
        let (begin, mut value, mut starts) = match from {
            Some((cur, cur_marks, changed)) => {
                let m = changed / every;
                scratch.clone_from(&cur_marks[m].0);
                (m * every, cur_marks[m].1, cur.starts.clone())
            }
            None => {
                scratch.clone_from(&self.bases[layout].0);
                (0, self.bases[layout].1, vec![None; self.jobs.len()])
            }
        };
        for (pos, &ji) in order.iter().enumerate().skip(begin) {
            if pos % every == 0 && (pos > begin || from.is_none()) {
                let mark = &mut marks[pos / every];
                mark.0.clone_from(scratch);
                mark.1 = value;
            }
            let j = self.jobs[ji as usize].clone();
            self.work += 4;
            starts[ji as usize] = self.find(scratch, &j, rule);
            if let Some((t, first)) = starts[ji as usize] {
                scratch.take(first, j.gpus, t, (t + j.dur).min(self.steps));
                value += self.value(&j, t);
            }
        }
        Decoded { layout, rule, order, starts, value }
    }

    /// Positions in `d.order` of the jobs that started after their arrival
    /// or not at all.
    fn late(&self, d: &Decoded) -> Vec<usize> {
        d.order
            .iter()
            .enumerate()
            .filter(|&(_, &ji)| {
                let j = &self.jobs[ji as usize];
                j.ideal > 0.0 && d.starts[ji as usize].is_none_or(|(t, _)| t > j.arrival)
            })
            .map(|(pos, _)| pos)
            .collect()
    }
}

/// The orders tried, as sort keys over the jobs (the first is the old
/// single greedy's: priority, then bigger blocks, earlier arrival, id; the
/// second Dharma's placement order, the simple greedy's).
fn orders(jobs: &[Job], decay: f64) -> Vec<Vec<u32>> {
    let idx: Vec<u32> = (0..jobs.len() as u32).collect();
    let sorted = |cmp: &dyn Fn(&Job, &Job) -> std::cmp::Ordering| {
        let mut o = idx.clone();
        o.sort_by(|&a, &b| {
            let (x, y) = (&jobs[a as usize], &jobs[b as usize]);
            cmp(x, y).then(x.id.cmp(&y.id))
        });
        o
    };
    let by_prio = |x: &Job, y: &Job| y.priority.total_cmp(&x.priority);
    let rank = |j: &Job| Rank { priority: j.priority, arrival: j.arrival, gpus: j.gpus, id: j.id };
    vec![
        sorted(&|x, y| by_prio(x, y).then(y.gpus.cmp(&x.gpus)).then(x.arrival.cmp(&y.arrival))),
        sorted(&|x, y| placement_order(decay, rank(x), rank(y))),
        sorted(&|x, y| y.ideal.total_cmp(&x.ideal)),
        sorted(&|x, y| y.gpus.cmp(&x.gpus).then(by_prio(x, y)).then(x.arrival.cmp(&y.arrival))),
        sorted(&|x, y| x.arrival.cmp(&y.arrival).then(by_prio(x, y)).then(y.gpus.cmp(&x.gpus))),
        sorted(&|x, y| by_prio(x, y).then(x.dur.cmp(&y.dur)).then(y.gpus.cmp(&x.gpus))),
        sorted(&|x, y| by_prio(x, y).then((y.gpus as usize * y.dur).cmp(&(x.gpus as usize * x.dur)))),
        sorted(&|x, y| by_prio(x, y).then(x.gpus.cmp(&y.gpus)).then(x.arrival.cmp(&y.arrival))),
    ]
}

/// The fast plan and its value, for a horizon of 1 to [`MAX_STEPS`] steps.
pub(crate) fn search(s: &Scenario, budget: Budget) -> Searched {
    let steps = s.steps;
    let mut ctx = Ctx::new(s);
    ctx.deadline = Instant::now().checked_add(budget.time_cap);
    let top_level = ctx.cands.len() - 1;
    // Pinned jobs and, per layout, the bands.
    let grid = pinned_bits(s);
    let pinned = pinned_plan(s);
    let pinned_value: f64 = s
        .jobs
        .iter()
        .filter_map(|j| j.pinned.map(|(start, _)| (j, start)))
        .map(|(j, start)| ctx.disc.run(j.priority, j.gpus, start.min(steps), (start + j.duration_steps).min(steps)))
        .sum();
    let mut realtime = Vec::new();
    let mut bases = Vec::new();
    for layout in layouts(s.services.len()) {
        let mut g = grid.clone();
        let held = place_layout(s, &mut g, &layout);
        let unmet: f64 = s
            .services
            .iter()
            .zip(&held)
            .enumerate()
            .map(|(si, (svc, h))| {
                let missing: u32 = (0..steps).map(|t| demand(s, si, t).saturating_sub(h[t].len() as u32)).sum();
                s.penalty * svc.weight * f64::from(missing)
            })
            .sum();
        bases.push((Packer::from_grid(&g, s.gpus, steps, top_level), pinned_value - unmet));
        realtime.push(held);
    }
    // The elastic layout: services as counts kept free, their GPUs chosen
    // after the batch jobs.
    let mut elastic_layout = None;
    if !s.services.is_empty() {
        let mut room: Vec<u32> = (0..steps).map(|t| (0..s.gpus).filter(|&g| grid.free(t, g, 1)).count() as u32).collect();
        let mut curves = Vec::new();
        let mut unmet = 0.0;
        for svc in &s.services {
            let mut demand = svc.demand.clone();
            demand.resize(steps, 0);
            let mut r = demand.clone();
            dilate(&mut r, svc.swap_cap);
            clip(&mut r, &room, svc.swap_cap);
            for t in 0..steps {
                room[t] -= r[t];
                unmet += s.penalty * svc.weight * f64::from(demand[t].saturating_sub(r[t]));
            }
            curves.push(r);
        }
        let mut packer = Packer::from_grid(&grid, s.gpus, steps, top_level);
        packer.cap = room;
        elastic_layout = Some((bases.len(), curves));
        bases.push((packer, pinned_value - unmet));
        realtime.push(Vec::new());
    }
    ctx.bases = bases;
    ctx.elastic = elastic_layout;
    let orders = orders(&ctx.jobs, s.decay);
    let mut scratch = ctx.bases[0].0.clone();
    let n = ctx.jobs.len();
    // Marks every `every` positions let a changed order resume decoding.
    let every = n.div_ceil(16).max(1);
    let mut marks = vec![(scratch.clone(), 0.0); n / every + 1];
    let mut cand_marks = marks.clone();
    let mut e_marks = marks.clone();

    // The single greedy first: its cost sets the budget.
    let mut best = ctx.decode(&mut scratch, &mut marks, every, None, 0, orders[0].clone(), Rule::Lowest);
    let pass = ctx.work.max(1);
    let limit = (budget.passes * pass).max(budget.work_min).min(budget.work_max).max(budget.min_passes * pass);
    // Two thirds for the seeds, the rest (at least) for the improvement.
    let seed_limit = (limit / 3 * 2).max(budget.min_passes * pass);
    let bands = realtime.len() - usize::from(ctx.elastic.is_some());
    let mut seeds = Vec::new();
    for (oi, o) in orders.iter().enumerate() {
        for rule in RULES {
            for layout in 0..bands {
                if (oi, rule, layout) != (0, Rule::Lowest, 0) {
                    seeds.push((o, rule, layout));
                }
            }
        }
    }
    for (o, rule, layout) in seeds {
        if ctx.spent(seed_limit) {
            break;
        }
        let d = ctx.decode(&mut scratch, &mut cand_marks, every, None, layout, o.clone(), rule);
        if d.value > best.value {
            best = d;
            std::mem::swap(&mut marks, &mut cand_marks);
        }
    }
    best = improve(&mut ctx, &mut scratch, &mut marks, &mut cand_marks, every, best, limit);

    // Elastic services: the same again on layouts whose services follow
    // where a batch plan decoded with them as counts leaves room.
    if let Some((counts, curves)) = ctx.elastic.clone() {
        let extra = (limit * budget.elastic_percent / 100).min(budget.elastic_max);
        let (e_seed_limit, e_limit) = (ctx.work + extra / 3 * 2, ctx.work + extra);
        let trade_limit = ctx.work + extra / 2;
        let mut found: Option<Decoded> = None;
        // First a short search with the services as counts: the best such
        // plan guides the first layout.
        let mut guide = ctx.decode(&mut scratch, &mut e_marks, every, None, counts, orders[0].clone(), Rule::Lowest);
        let g_seed_limit = ctx.work + extra / 6;
        'g: for o in &orders {
            for rule in RULES {
                if ctx.spent(g_seed_limit) {
                    break 'g;
                }
                let d = ctx.decode(&mut scratch, &mut cand_marks, every, None, counts, o.clone(), rule);
                if d.value > guide.value {
                    guide = d;
                    std::mem::swap(&mut e_marks, &mut cand_marks);
                }
            }
        }
        let guide = improve(&mut ctx, &mut scratch, &mut e_marks, &mut cand_marks, every, guide, g_seed_limit + extra / 6);
        // Realtime demand given up where a batch job is worth more.
        let (guide, counts, curves) =
            trade(&mut ctx, s, &mut realtime, &mut scratch, &mut e_marks, &mut cand_marks, every, guide, counts, curves, trade_limit);
        let mut guides = vec![(guide.order.clone(), guide.rule, Some(guide))];
        for o in &orders {
            for rule in RULES {
                guides.push((o.clone(), rule, None));
            }
        }
        // Each guide: its services' tokens, a layout, its batch again.
        for (o, rule, g) in guides {
            if ctx.spent(e_seed_limit) {
                break;
            }
            match g {
                Some(g) => {
                    scratch.clone_from(&ctx.bases[counts].0);
                    for (j, st) in ctx.jobs.iter().zip(&g.starts) {
                        if let Some((t, first)) = *st {
                            scratch.take(first, j.gpus, t, (t + j.dur).min(steps));
                        }
                    }
                }
                None => {
                    ctx.decode(&mut scratch, &mut cand_marks, every, None, counts, o.clone(), rule);
                }
            }
            let soft = scratch.bits[..s.gpus as usize].to_vec();
            let hard = ctx.bases[counts].0.bits[..s.gpus as usize].to_vec();
            let Some(held) = elastic::place(&hard, &soft, steps, &curves, &mut ctx.work) else { continue };
            let layout = match realtime.iter().position(|r| *r == held) {
                Some(i) => i,
                None => {
                    let (mut base, value) = ctx.bases[counts].clone();
                    base.cap = Vec::new();
                    for h in &held {
                        for (t, at) in h.iter().enumerate() {
                            for &g in at {
                                base.take(g, 1, t, t + 1);
                            }
                        }
                    }
                    ctx.bases.push((base, value));
                    realtime.push(held);
                    realtime.len() - 1
                }
            };
            let d = ctx.decode(&mut scratch, &mut cand_marks, every, None, layout, o.clone(), rule);
            if found.as_ref().is_none_or(|f| d.value > f.value) {
                found = Some(d);
                std::mem::swap(&mut e_marks, &mut cand_marks);
            }
        }
        if let Some(f) = found {
            let f = improve(&mut ctx, &mut scratch, &mut e_marks, &mut cand_marks, every, f, e_limit);
            if f.value > best.value {
                best = f;
            }
        }
    }

    // Services and batch decoded together (`pack/tokens.rs`), where the budget
    // holds enough decodes for the annealing to be worth running.
    let tokens_work = (budget.tokens_passes * pass).min(budget.tokens_max);
    let co_placed = ctx.elastic.clone().filter(|_| tokens_work >= budget.tokens_min_passes * pass).and_then(|(_, curves)| {
        let base = Packer::from_grid(&grid, s.gpus, steps, top_level);
        let mut search = tokens::Search::new(&mut ctx, s, base, pinned_value, &curves);
        let found = search.run(&[orders[1].clone(), best.order.clone()], tokens_work)?;
        let mut plan = pinned.clone();
        plan.realtime = vec![vec![Vec::new(); steps]; s.services.len()];
        for (k, pieces) in search.tokens().iter().zip(&found.pieces) {
            for p in pieces {
                for h in &mut plan.realtime[k.service][p.from..p.to] {
                    h.push(p.gpu);
                }
            }
        }
        for h in plan.realtime.iter_mut().flatten() {
            h.sort_unstable();
        }
        for (j, at) in ctx.jobs.iter().zip(&found.at) {
            if let Some((t, first)) = *at {
                plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
            }
        }
        Some((plan, found.value))
    });

    let mut plan = pinned;
    plan.realtime = std::mem::take(&mut realtime[best.layout]);
    for (j, st) in ctx.jobs.iter().zip(&best.starts) {
        if let Some((t, first)) = *st {
            plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
        }
    }
    Searched { plan, value: best.value, co_placed }
}

/// The search's plans: the best of the bands and elastic layouts, and the
/// co-placement search's (with realtime services and budget for it).
pub(crate) struct Searched {
    pub plan: Plan,
    pub value: f64,
    pub co_placed: Option<(Plan, f64)>,
}

impl Searched {
    /// The better of the two.
    pub(crate) fn best(self) -> (Plan, f64) {
        match self.co_placed {
            Some((p, v)) if v > self.value => (p, v),
            _ => (self.plan, self.value),
        }
    }
}

/// The objective's trade-off between realtime and batch, searched: unmet
/// realtime demand costs `penalty × weight` a GPU-step, so when a batch job
/// that started late or not at all in `guide` (a plan on the counts layout
/// `counts`, the services' `curves` kept free) would bring more by running
/// earlier than the demand its run would leave unmet, the services give
/// those GPUs up. For each such job and start, the GPUs its run lacks at
/// each step (beyond what the curves leave batch there) are taken from the
/// services, the least weighted first, each curve lowered there and kept
/// within its swap cap (its ramps lowered too, `layout::clip`); the start
/// whose value gain most exceeds the added cost is tried: the order decoded
/// again with that job first on the counts the lower curves leave. A plan
/// worth more is kept (its curves with it) and the next job is looked at;
/// a job whose best trade does not pay is not tried again. Returns the
/// guide, its counts layout and curves (the ones given, if no trade paid).
#[allow(clippy::too_many_arguments)]
fn trade(
    ctx: &mut Ctx,
    s: &Scenario,
    realtime: &mut Vec<Vec<Vec<Vec<u32>>>>,
    scratch: &mut Packer,
    marks: &mut [Mark],
    cand_marks: &mut [Mark],
    every: usize,
    mut guide: Decoded,
    mut counts: usize,
    mut curves: Vec<Vec<u32>>,
    limit: u64,
) -> (Decoded, usize, Vec<Vec<u32>>) {
    let steps = ctx.steps;
    let wanted: Vec<Vec<u32>> = (0..s.services.len()).map(|si| (0..steps).map(|t| demand(s, si, t)).collect()).collect();
    let unmet = |si: usize, r: &[u32]| -> f64 {
        let missing: u32 = r.iter().zip(&wanted[si]).map(|(&r, &d)| d.saturating_sub(r)).sum();
        s.penalty * s.services[si].weight * f64::from(missing)
    };
    let mut by_weight: Vec<usize> = (0..s.services.len()).collect();
    by_weight.sort_by(|&a, &b| s.services[a].weight.total_cmp(&s.services[b].weight).then(a.cmp(&b)));
    let mut given_up = vec![false; ctx.jobs.len()];
    while !ctx.spent(limit) {
        // The room the curves leave batch.
        let room = ctx.bases[counts].0.cap.clone();
        let mut best: Option<(f64, usize, Vec<Vec<u32>>, f64)> = None;
        for (ji, j) in ctx.jobs.iter().enumerate() {
            let now = guide.starts[ji].map_or(0.0, |(t, _)| ctx.value(j, t));
            if given_up[ji] || j.ideal <= now {
                continue;
            }
            for t in j.arrival..=j.last {
                let gain = ctx.value(j, t) - now;
                if gain <= 0.0 {
                    break; // later starts are worth no more
                }
                ctx.work += (j.dur * s.services.len()) as u64;
                // What the services must give for the job to fit beside
                // them (other batch jobs make way when it is decoded first).
                let mut need: Vec<u32> = (0..steps).map(|u| if (t..t + j.dur).contains(&u) { j.gpus.saturating_sub(room[u]) } else { 0 }).collect();
                if need.iter().all(|&n| n == 0) {
                    continue; // room enough: blocks, not the services, keep it out
                }
                let mut lower = curves.clone();
                for &si in &by_weight {
                    let mut cut = lower[si].clone();
                    for (c, n) in cut.iter_mut().zip(&mut need) {
                        let take = (*n).min(*c);
                        *c -= take;
                        *n -= take;
                    }
                    clip(&mut lower[si], &cut, s.services[si].swap_cap);
                }
                if need.iter().any(|&n| n > 0) {
                    continue; // the services do not hold enough there
                }
                let cost: f64 = (0..lower.len()).map(|si| unmet(si, &lower[si]) - unmet(si, &curves[si])).sum();
                if gain > cost && best.as_ref().is_none_or(|b| gain - cost > b.0) {
                    best = Some((gain - cost, ji, lower, cost));
                }
            }
        }
        let Some((_, ji, lower, cost)) = best else { break };
        // The counts the lower curves leave, and the order with the job first.
        let (mut base, value) = ctx.bases[counts].clone();
        for (t, c) in base.cap.iter_mut().enumerate() {
            *c += curves.iter().zip(&lower).map(|(a, b)| a[t] - b[t]).sum::<u32>();
        }
        // A counts layout: no GPUs of its own (`realtime` kept in step with `bases`).
        ctx.bases.push((base, value - cost));
        realtime.push(Vec::new());
        let layout = ctx.bases.len() - 1;
        let mut order = guide.order.clone();
        let pos = order.iter().position(|&x| x as usize == ji).expect("every job is in the order");
        order[..=pos].rotate_right(1);
        let before = ctx.work;
        let d = ctx.decode(scratch, cand_marks, every, None, layout, order, guide.rule);
        // A short improvement of its own (ten decodes' worth): the jobs the
        // traded one pushed aside find their places again.
        let per_try = (ctx.work - before) * 10;
        let mut trial_marks = cand_marks.to_vec();
        let d = improve(ctx, scratch, &mut trial_marks, cand_marks, every, d, (ctx.work + per_try).min(limit.max(ctx.work + 1)));
        if d.value > guide.value + 1e-9 * guide.value.abs() {
            // `improve` leaves its best plan's marks in `trial_marks` only
            // when that plan was the last accepted one; decode it again to
            // be sure the marks are its own.
            let d = ctx.decode(scratch, cand_marks, every, None, layout, d.order, d.rule);
            guide = d;
            marks.swap_with_slice(cand_marks);
            counts = layout;
            curves = lower;
        } else {
            ctx.bases.pop();
            realtime.pop();
            given_up[ji] = true;
        }
    }
    (guide, counts, curves)
}

/// Improvement from `best` (whose marks are `marks`) until `limit`:
/// squeaky wheel, neighbourhood shuffles and swaps on its order; returns
/// the best plan seen.
fn improve(ctx: &mut Ctx, scratch: &mut Packer, marks: &mut [Mark], cand_marks: &mut [Mark], every: usize, mut best: Decoded, limit: u64) -> Decoded {
    let n = ctx.jobs.len();
    // Deterministic: a fixed stream, and the work decides where it stops
    // (the clock only at the budget's time cap).
    let mut rng = Rng::new(1);
    let mut cur = best.clone();
    let mut late = ctx.late(&cur);
    while !ctx.spent(limit) && n >= 2 {
        let mut order = cur.order.clone();
        let mut rule = cur.rule;
        let r = rng.below(100);
        let changed;
        if r < 55 && !late.is_empty() {
            // One late job moves to a random earlier place.
            let p = late[rng.below(late.len())];
            if p == 0 {
                continue;
            }
            let q = rng.below(p);
            order[q..=p].rotate_right(1);
            changed = q;
        } else if r < 65 && !late.is_empty() {
            // A late job and the jobs placed in its window (arrival to its
            // last possible end) trade places at random: a chain of moves
            // none of which pays alone.
            let p = late[rng.below(late.len())];
            let j = &ctx.jobs[order[p] as usize];
            let (lo, hi) = (j.arrival, j.last + j.dur);
            let mut pos: Vec<usize> = (0..n)
                .filter(|&q| q == p || cur.starts[order[q] as usize].is_some_and(|(t, _)| t < hi && t + ctx.jobs[order[q] as usize].dur > lo))
                .collect();
            if pos.len() < 2 {
                continue;
            }
            if pos.len() > 6 {
                // p and five others at random.
                let keep = pos.iter().position(|&q| q == p).unwrap_or(0);
                pos.swap(0, keep);
                for i in 1..6 {
                    let k = i + rng.below(pos.len() - i);
                    pos.swap(i, k);
                }
                pos.truncate(6);
                pos.sort_unstable();
            }
            let mut jobs: Vec<u32> = pos.iter().map(|&q| order[q]).collect();
            for i in (1..jobs.len()).rev() {
                jobs.swap(i, rng.below(i + 1));
            }
            for (&q, &ji) in pos.iter().zip(&jobs) {
                order[q] = ji;
            }
            changed = pos[0];
        } else if r < 80 && !late.is_empty() {
            // Every late job moves earlier by a random distance.
            let mut key: Vec<(usize, u32)> = (0..n).map(|pos| (2 * pos + 1, order[pos])).collect();
            for &p in &late {
                key[p].0 = 2 * (p - rng.below(p + 1));
            }
            key.sort_by_key(|&(k, _)| k);
            order = key.into_iter().map(|(_, ji)| ji).collect();
            changed = order.iter().zip(&cur.order).position(|(a, b)| a != b).unwrap_or(n);
        } else if r < 95 {
            let i = rng.below(n - 1);
            let k = i + 1 + rng.below((n - i - 1).min(4));
            order.swap(i, k);
            changed = i;
        } else {
            rule = RULES[rng.below(RULES.len())];
            changed = 0;
        }
        if changed >= n && rule == cur.rule {
            continue;
        }
        let from = if rule == cur.rule { Some((&cur, &marks[..], changed)) } else { None };
        let d = ctx.decode(scratch, cand_marks, every, from, cur.layout, order, rule);
        if d.value >= cur.value - 1e-12 * cur.value.abs() {
            if d.value > best.value {
                best = d.clone();
            }
            // The marks after the resumed one are the new plan's.
            let resumed = if rule == cur.rule { changed / every + 1 } else { 0 };
            for i in resumed..marks.len() {
                std::mem::swap(&mut marks[i], &mut cand_marks[i]);
            }
            cur = d;
            late = ctx.late(&cur);
        }
    }

    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{instance, Family};
    use crate::validate;

    #[test]
    fn a_spent_time_cap_stops_the_search_with_a_legal_plan() {
        // No time at all: every loop stops at its first look at the clock,
        // and what the search has by then is a legal plan, scored as the
        // validator scores it.
        let s = instance(Family::Scale64, 1);
        let capped = search(&s, Budget { time_cap: Duration::ZERO, ..Budget::default() });
        let score = validate(&s, &capped.plan).expect("legal plan");
        assert!((score.value - capped.value).abs() < 1e-6 * score.value.abs(), "{} vs {}", score.value, capped.value);
        let (plan, value) = capped.best();
        let score = validate(&s, &plan).expect("legal plan");
        assert!((score.value - value).abs() < 1e-6 * score.value.abs(), "{} vs {value}", score.value);
    }
}
