//! The search, phase by phase: the layouts, the single greedy (whose work
//! sets the budget), the seeded passes and the improvement on the bands'
//! layouts, the elastic layouts (services as counts, then as tokens placed
//! around a batch plan), the co-placement search, and the plan the best of
//! them gives.

use super::deadline::Deadline;
use super::decode::{Base, Buffers, Ctx, Decoded, Mark, Rule, RULES};
use super::improve::improve;
use super::orders::seed_orders;
use super::packer::Packer;
use super::tokens;
use super::trade::{trade_realtime_for_batch, CountsGuide};
use super::Budget;
use crate::fast::elastic;
use crate::fast::layout::{clip, layouts, place_layout};
use crate::grid::{demand, dilate, pinned_bits, pinned_plan, Bits};
use crate::{Placed, Plan, Scenario};

/// Per service, per step, the GPUs it holds (sorted).
type Held = Vec<Vec<Vec<u32>>>;

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
            Some((plan, value)) if value > self.value => (plan, value),
            _ => (self.plan, self.value),
        }
    }
}

/// The fast plan and its value, for a horizon of 1 to `MAX_STEPS` steps.
pub(crate) fn search(s: &Scenario, budget: Budget) -> Searched {
    let mut ctx = Ctx::new(s);
    ctx.deadline = Deadline::after(budget.time_cap);

    // The layouts: pinned jobs and, per layout, the bands; then the counts
    // layout (services kept free only as per-step counts).
    let top_level = ctx.cands.len() - 1;
    let pinned_grid = pinned_bits(s);
    let pinned_value = pinned_value(s, &ctx);
    let (mut bases, mut realtime) = band_layouts(s, &pinned_grid, top_level, pinned_value);
    let band_count = bases.len();
    if let Some((counts_base, curves)) = counts_layout(s, &pinned_grid, top_level, pinned_value) {
        ctx.elastic = Some((bases.len(), curves));
        bases.push(counts_base);
        realtime.push(Vec::new());
    }
    ctx.bases = bases;

    let orders = seed_orders(&ctx.jobs, s.decay);
    let buffers = Buffers::new(&ctx);
    let mut search = Search { s, ctx, buffers, orders, realtime };
    // The marks of the best plan so far, on the band layouts and on the
    // elastic ones.
    let mut marks = search.buffers.new_marks(search.ctx.jobs.len());
    let mut elastic_marks = search.buffers.new_marks(search.ctx.jobs.len());

    // The single greedy first: its cost (`pass`) sets the budget.
    let greedy = search.decode_into(&mut marks, 0, 0, Rule::Lowest);
    let pass = search.ctx.work.max(1);
    let limit = (budget.passes * pass).max(budget.work_min).min(budget.work_max).max(budget.min_passes * pass);
    // Two thirds for the seeds, the rest (at least) for the improvement.
    let seed_limit = (limit / 3 * 2).max(budget.min_passes * pass);
    let best = search.seed_passes(&mut marks, band_count, greedy, seed_limit);
    let mut best = improve(&mut search.ctx, &mut search.buffers, &mut marks, best, limit);

    // Elastic services: the same again on layouts whose services follow
    // where a batch plan decoded with them as counts leaves room.
    let elastic_work = (limit * budget.elastic_percent / 100).min(budget.elastic_max);
    if let Some(elastic_best) = search.elastic_layouts(&mut elastic_marks, elastic_work) {
        if elastic_best.value > best.value {
            best = elastic_best;
        }
    }

    // Services and batch decoded together (`pack/tokens.rs`), where the
    // budget holds enough decodes for the annealing to be worth running.
    let tokens_work = (budget.tokens_passes * pass).min(budget.tokens_max);
    let co_placed = if tokens_work >= budget.tokens_min_passes * pass {
        search.co_place(&pinned_grid, top_level, pinned_value, &best.order, tokens_work)
    } else {
        None
    };

    let plan = search.plan_of(best.starts, search.realtime[best.layout].clone());
    Searched { plan, value: best.value, co_placed }
}

/// The value of the pinned jobs' runs inside the horizon.
fn pinned_value(s: &Scenario, ctx: &Ctx) -> f64 {
    let steps = s.steps;
    s.jobs
        .iter()
        .filter_map(|job| job.pinned.map(|(start, _)| (job, start)))
        .map(|(job, start)| ctx.disc.run(job.priority, job.gpus, start.min(steps), (start + job.duration_steps).min(steps)))
        .sum()
}

/// Per band layout (`layout::layouts`): the grid after the pinned jobs and
/// the bands with the constant part of the value (pinned value − unmet
/// realtime cost), and the GPUs the bands hold.
fn band_layouts(s: &Scenario, pinned_grid: &Bits, top_level: usize, pinned_value: f64) -> (Vec<Base>, Vec<Held>) {
    let steps = s.steps;
    let mut bases = Vec::new();
    let mut realtime = Vec::new();
    for layout in layouts(s.services.len()) {
        let mut grid = pinned_grid.clone();
        let held = place_layout(s, &mut grid, &layout);
        let unmet: f64 = s
            .services
            .iter()
            .zip(&held)
            .enumerate()
            .map(|(service, (svc, service_held))| {
                let missing: u32 = (0..steps).map(|t| demand(s, service, t).saturating_sub(service_held[t].len() as u32)).sum();
                s.penalty * svc.weight * f64::from(missing)
            })
            .sum();
        bases.push((Packer::from_grid(&grid, s.gpus, steps, top_level), pinned_value - unmet));
        realtime.push(held);
    }
    (bases, realtime)
}

/// The counts layout, with services: each service's demand dilated to its
/// swap cap and clipped to the GPUs the pinned jobs and the services
/// before it leave, kept free as per-step counts (`Packer::cap`), their
/// GPUs chosen after the batch jobs. Its base (with the value's constant
/// part) and the services' curves.
fn counts_layout(s: &Scenario, pinned_grid: &Bits, top_level: usize, pinned_value: f64) -> Option<(Base, Vec<Vec<u32>>)> {
    if s.services.is_empty() {
        return None;
    }
    let steps = s.steps;
    let mut room: Vec<u32> = (0..steps).map(|t| (0..s.gpus).filter(|&gpu| pinned_grid.free(t, gpu, 1)).count() as u32).collect();
    let mut curves = Vec::new();
    let mut unmet = 0.0;
    for svc in &s.services {
        let mut wanted = svc.demand.clone();
        wanted.resize(steps, 0);
        let mut curve = wanted.clone();
        dilate(&mut curve, svc.swap_cap);
        clip(&mut curve, &room, svc.swap_cap);
        for t in 0..steps {
            room[t] -= curve[t];
            unmet += s.penalty * svc.weight * f64::from(wanted[t].saturating_sub(curve[t]));
        }
        curves.push(curve);
    }
    let mut packer = Packer::from_grid(pinned_grid, s.gpus, steps, top_level);
    packer.cap = room;
    Some(((packer, pinned_value - unmet), curves))
}

/// The search's state across its phases.
struct Search<'a> {
    s: &'a Scenario,
    ctx: Ctx,
    buffers: Buffers,
    /// The seed orders (`orders::seed_orders`).
    orders: Vec<Vec<u32>>,
    /// Per layout (index into `ctx.bases`): the GPUs the services hold
    /// (empty for counts layouts).
    realtime: Vec<Held>,
}

impl Search<'_> {
    /// Seed order `order` decoded from scratch under `rule` on `layout`,
    /// its marks into `marks`.
    fn decode_into(&mut self, marks: &mut [Mark], order: usize, layout: usize, rule: Rule) -> Decoded {
        let order = self.orders[order].clone();
        self.ctx.decode(&mut self.buffers.scratch, marks, self.buffers.every, None, layout, order, rule)
    }

    /// Seed order `order` decoded from scratch under `rule` on `layout`
    /// into the candidate marks; when it is worth more than `best` it
    /// becomes `best`, its marks swapped into `best_marks`.
    fn try_seed(&mut self, best: &mut Decoded, best_marks: &mut Vec<Mark>, order: usize, layout: usize, rule: Rule) {
        let order = self.orders[order].clone();
        let candidate = self.ctx.decode(&mut self.buffers.scratch, &mut self.buffers.candidate_marks, self.buffers.every, None, layout, order, rule);
        if candidate.value > best.value {
            *best = candidate;
            std::mem::swap(best_marks, &mut self.buffers.candidate_marks);
        }
    }

    /// The seeded passes on the band layouts: every seed order × block
    /// rule × band layout (but the greedy's, `best` already) until
    /// `limit`; the best of them.
    fn seed_passes(&mut self, marks: &mut Vec<Mark>, band_count: usize, mut best: Decoded, limit: u64) -> Decoded {
        let mut seeds = Vec::new();
        for order in 0..self.orders.len() {
            for rule in RULES {
                for layout in 0..band_count {
                    if (order, rule, layout) != (0, Rule::Lowest, 0) {
                        seeds.push((order, rule, layout));
                    }
                }
            }
        }
        for (order, rule, layout) in seeds {
            if self.ctx.spent(limit) {
                break;
            }
            self.try_seed(&mut best, marks, order, layout, rule);
        }
        best
    }

    /// The elastic layouts' search with `work` units, when there are
    /// services: a guide decoded on the counts layout, realtime traded for
    /// batch on it, the services placed as tokens around each guide, and
    /// the best plan on those layouts improved (its marks into `marks`).
    fn elastic_layouts(&mut self, marks: &mut Vec<Mark>, work: u64) -> Option<Decoded> {
        let (counts, curves) = self.ctx.elastic.clone()?;
        let (seed_limit, limit) = (self.ctx.work + work / 3 * 2, self.ctx.work + work);
        let trade_limit = self.ctx.work + work / 2;
        let guide = self.counts_guide(marks, counts, work);
        // Realtime demand given up where a batch job is worth more.
        let guide = CountsGuide { plan: guide, layout: counts, curves };
        let guide = trade_realtime_for_batch(&mut self.ctx, self.s, &mut self.realtime, &mut self.buffers, marks, guide, trade_limit);
        let found = self.guided_layouts(marks, guide, seed_limit)?;
        Some(improve(&mut self.ctx, &mut self.buffers, marks, found, limit))
    }

    /// A short search with the services as counts (a sixth of `work` for
    /// the seeds, a sixth for the improvement): the best such plan guides
    /// the first elastic layout.
    fn counts_guide(&mut self, marks: &mut Vec<Mark>, counts: usize, work: u64) -> Decoded {
        let mut guide = self.decode_into(marks, 0, counts, Rule::Lowest);
        let seed_limit = self.ctx.work + work / 6;
        'seeds: for order in 0..self.orders.len() {
            for rule in RULES {
                if self.ctx.spent(seed_limit) {
                    break 'seeds;
                }
                self.try_seed(&mut guide, marks, order, counts, rule);
            }
        }
        improve(&mut self.ctx, &mut self.buffers, marks, guide, seed_limit + work / 6)
    }

    /// Each guide (the counts plan `guide`, then every seed order × block
    /// rule decoded on its counts layout) until `limit`: the services'
    /// tokens placed around its batch jobs (`elastic::place`) make a
    /// layout, on which its order is decoded again. The best plan (its
    /// marks into `marks`), `None` when no guide's tokens found GPUs.
    fn guided_layouts(&mut self, marks: &mut Vec<Mark>, guide: CountsGuide, limit: u64) -> Option<Decoded> {
        let CountsGuide { plan: guide, layout: counts, curves } = guide;
        let gpus = self.s.gpus as usize;
        let mut guides = vec![(guide.order.clone(), guide.rule, Some(guide))];
        for order in &self.orders {
            for rule in RULES {
                guides.push((order.clone(), rule, None));
            }
        }
        let mut found: Option<Decoded> = None;
        for (order, rule, plan) in guides {
            if self.ctx.spent(limit) {
                break;
            }
            // The guide's batch jobs on the counts layout, in `scratch`.
            let scratch = &mut self.buffers.scratch;
            match plan {
                Some(plan) => {
                    scratch.clone_from(&self.ctx.bases[counts].0);
                    for (job, start) in self.ctx.jobs.iter().zip(&plan.starts) {
                        if let Some((start, first)) = *start {
                            scratch.take(first, job.gpus, start, (start + job.dur).min(self.ctx.steps));
                        }
                    }
                }
                None => {
                    self.ctx.decode(scratch, &mut self.buffers.candidate_marks, self.buffers.every, None, counts, order.clone(), rule);
                }
            }
            let soft = self.buffers.scratch.bits[..gpus].to_vec();
            let hard = self.ctx.bases[counts].0.bits[..gpus].to_vec();
            let Some(held) = elastic::place(&hard, &soft, self.ctx.steps, &curves, &mut self.ctx.work) else { continue };
            let layout = self.tokens_layout(counts, held);
            let candidate =
                self.ctx.decode(&mut self.buffers.scratch, &mut self.buffers.candidate_marks, self.buffers.every, None, layout, order, rule);
            if found.as_ref().is_none_or(|best| candidate.value > best.value) {
                found = Some(candidate);
                std::mem::swap(marks, &mut self.buffers.candidate_marks);
            }
        }
        found
    }

    /// The layout whose services hold `held`: an existing one, or a new one
    /// (the counts layout's grid, no per-step limit, `held` taken).
    fn tokens_layout(&mut self, counts: usize, held: Held) -> usize {
        if let Some(layout) = self.realtime.iter().position(|known| *known == held) {
            return layout;
        }
        let (mut base, value) = self.ctx.bases[counts].clone();
        base.cap = Vec::new();
        for service_held in &held {
            for (t, gpus) in service_held.iter().enumerate() {
                for &gpu in gpus {
                    base.take(gpu, 1, t, t + 1);
                }
            }
        }
        self.ctx.bases.push((base, value));
        self.realtime.push(held);
        self.realtime.len() - 1
    }

    /// The co-placement search (`tokens.rs`) with `work` units, seeded
    /// with the decay-discounted order and `best_order`; its plan and
    /// value (`None`: no services, or it found nothing).
    fn co_place(&mut self, pinned_grid: &Bits, top_level: usize, pinned_value: f64, best_order: &[u32], work: u64) -> Option<(Plan, f64)> {
        let s = self.s;
        let (_, curves) = self.ctx.elastic.clone()?;
        let base = Packer::from_grid(pinned_grid, s.gpus, s.steps, top_level);
        let mut search = tokens::Search::new(&mut self.ctx, s, base, pinned_value, &curves);
        let found = search.run(&[self.orders[1].clone(), best_order.to_vec()], work)?;
        let mut realtime: Held = vec![vec![Vec::new(); s.steps]; s.services.len()];
        for (token, pieces) in search.tokens().iter().zip(&found.pieces) {
            for piece in pieces {
                for gpus in &mut realtime[token.service][piece.from..piece.to] {
                    gpus.push(piece.gpu);
                }
            }
        }
        for gpus in realtime.iter_mut().flatten() {
            gpus.sort_unstable();
        }
        Some((self.plan_of(found.at, realtime), found.value))
    }

    /// The plan: the pinned jobs, the services holding `realtime`, and the
    /// batch jobs at `starts` (per job: start step and first GPU).
    fn plan_of(&self, starts: Vec<Option<(usize, u32)>>, realtime: Held) -> Plan {
        let mut plan = pinned_plan(self.s);
        plan.realtime = realtime;
        for (job, start) in self.ctx.jobs.iter().zip(&starts) {
            if let Some((start, first)) = *start {
                plan.batch.push(Placed { job_id: job.id, start_step: start, first_gpu: first });
            }
        }
        plan
    }
}
