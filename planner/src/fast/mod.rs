//! Fast mode: a bounded search over greedy plans, each legal by
//! construction.
//!
//! 1. Pinned (running) jobs keep their blocks.
//! 2. Each realtime service gets a band holding, per step, the smallest
//!    curve that covers its demand and changes by at most its swap cap
//!    between steps: `r_t = max_u (d_u − cap·|t − u|)`, clipped to the
//!    contiguous GPUs the pinned jobs and the bands placed before leave.
//!    Bands sit at fixed offsets from an edge of the GPU range (so one
//!    service's changes never move another's GPUs). Unmet demand costs
//!    `penalty × weight` per GPU-step, which the shipped scenarios make
//!    dearer than any batch GPU-step, so realtime is served first. Up to
//!    three layouts are tried: all bands stacked at the top in the given
//!    order (below each other's peaks), the same in reverse order, and
//!    bands alternating between the top and the bottom edge.
//!    Then, with its own budget (80% of the bands' work, at most 1.5M
//!    units), *elastic* layouts (`fast/elastic.rs`): batch decoded with the
//!    services kept only as per-step counts (a short search of its own);
//!    the services' curves cut into tokens (one GPU from a rise of the
//!    curve to a fall), each token put on the GPU and end that collide
//!    least with that batch plan, so the services move around the batch
//!    blocks within their swap caps by construction; then batch decoded
//!    and improved again around them. The best plan of either kind wins,
//!    so the bands' plan is a floor.
//! 3. Batch jobs are decoded from an *order*: each in turn starts at the
//!    earliest step ≥ its arrival at which an aligned block of its size is
//!    free for its whole run inside the horizon; among the blocks free at
//!    that step a *block rule* picks one (lowest, highest, best fit by
//!    buddy — the block whose neighbours inside its node are busiest over
//!    the run — or best fit in time — the block whose free window around
//!    the run is shortest). A job that fits nowhere waits for the next plan.
//! 4. Passes: several orders (priority then bigger blocks — the old single
//!    greedy, decoded first, so fast mode is never worse than it —;
//!    decay-discounted priority; whole-run value; bigger blocks first;
//!    earliest arrival; shorter first) × the block rules × the layouts; the
//!    best by value is kept. Then a bounded improvement loop on the best
//!    order: squeaky wheel (a job that started late or not at all moves
//!    earlier in the order, alone or with all the late ones), a
//!    neighbourhood shuffle (a late job and up to five jobs placed in its
//!    window trade places at random: the chains of moves none of which
//!    pays alone) and small swaps, accepting plans that are not worse,
//!    keeping the best.
//! 5. With services (and budget for a thousand decodes), the co-placement
//!    search (`fast/pack/tokens.rs`): services cut into nested tokens and decoded
//!    in one order with the batch jobs, a token split around busy GPUs
//!    within its swap cap or given up, a job held back by a delay of its
//!    own, simulated annealing over that order and the delays. The best of
//!    it, the search above and the simple greedy is the plan.
//!
//! The value of a decoded plan is computed incrementally with the same
//! definition as [`validate()`](crate::validate()) (priority × decay^t per GPU-step minus
//! penalty × weight per unmet realtime GPU-step; a test checks they agree).
//! Occupancy is one `u64` step mask per aligned block of every size, so a
//! block's earliest free run is a few shifts. The improvement loop resumes
//! decoding at a saved state before the first changed position. The work
//! is counted (a candidate block examined is one unit, a job decoded four),
//! not timed, so the result is deterministic: 60 times the single
//! greedy's work, at least 45,000 units (small instances: hundreds of
//! decodes) and at most 4,000,000 (1024 GPUs / 1,000 jobs: about a dozen),
//! two thirds for the seeded passes; the co-placement search has its own
//! budget (`pack::Budget`). A wall-clock cap (10 s times the effort) stops
//! the loops only as a safety. `cargo bench -p tally-planner --bench plan`
//! (one service each): about 0.33 s at 64 GPUs / 30 jobs / 24 steps and
//! 0.32 s at 512 / 300 / 48, nearly all of it the co-placement search,
//! 43 ms at 1024 / 1,000 / 48, where the budget is too small for that
//! search to run. Horizons longer than 64 steps fall back to the single
//! greedy order.
//!
//! Modules (imports only go down): this one ([`plan`], the single
//! `greedy` plan and the choice between it and the search), `pack.rs`
//! and its children in `pack/` (the search's phases in `search.rs`, the
//! decoder in `decode.rs` and `place.rs`, the moves in `improve.rs`, the
//! realtime trade in `trade.rs`, the co-placement search in `tokens.rs`,
//! which uses the decoder), `elastic.rs` (elastic service
//! tokens),
//! `layout.rs` (the bands; FIFO lays its own with it too). Blocks, values,
//! dilation and occupancy bitsets come from `grid`.

pub(crate) mod elastic;
pub(crate) mod layout;
mod pack;

use super::grid::{pinned_bits, pinned_plan, placement_order, Rank};
use super::{Placed, Plan, Scenario};
use layout::{layouts, place_layout};

/// The simple greedy (Dharma's placement rule, and the floor fast mode is
/// held to): realtime bands stacked at the top (each service's demand
/// raised to its swap cap), then batch jobs in Dharma's placement order
/// (`grid::placement_order`), each at its earliest legal fit under the
/// horizon rule, lowest block. Also fast mode's plan for horizons over 64
/// steps.
pub fn greedy(s: &Scenario) -> Plan {
    let mut grid = pinned_bits(s);
    let mut plan = pinned_plan(s);
    plan.realtime = place_layout(s, &mut grid, &layouts(s.services.len())[0]);
    let mut order: Vec<&super::PlanJob> = s.jobs.iter().filter(|j| j.pinned.is_none()).collect();
    let rank = |j: &super::PlanJob| Rank { priority: j.priority, arrival: j.arrival_step, gpus: j.gpus, id: j.id };
    order.sort_by(|a, b| placement_order(s.decay, rank(a), rank(b)));
    for j in order {
        if let Some((t, first)) = grid.earliest_for(s, j, j.arrival_step) {
            grid.set_run(first, j.gpus, t, (t + j.duration_steps).min(s.steps));
            plan.batch.push(Placed { job_id: j.id, start_step: t, first_gpu: first });
        }
    }
    plan
}

/// The fast plan.
pub fn plan(s: &Scenario) -> Plan {
    plan_scored(s, 1).0
}

/// The fast plan with `effort` times the default search budget (1 is
/// [`plan`]; the budget is counted work, so the plan is as deterministic,
/// and the time grows about linearly: `tally plan --effort`).
pub fn plan_with_effort(s: &Scenario, effort: u32) -> Plan {
    plan_scored(s, effort).0
}

/// Fast mode's candidates and its choice, for measuring the floor and the
/// co-placement search (`tally plan --instances`) without searching twice.
#[derive(Debug, Clone)]
pub struct Parts {
    /// The simple [`greedy`].
    pub greedy: Plan,
    /// The search alone, without the greedy's floor under it (the greedy
    /// for horizons over 64 steps).
    pub search: Plan,
    /// The co-placement search's own plan (services and batch decoded in
    /// one order), when it ran: with realtime services, horizons up to 64
    /// steps and budget for a thousand decodes. `search` is the better of
    /// it and the layouts' search.
    pub co_placed: Option<Plan>,
    /// The better of the greedy and the search: [`plan_with_effort`]'s plan.
    pub fast: Plan,
}

/// [`Parts`] at `effort`.
pub fn parts(s: &Scenario, effort: u32) -> Parts {
    let (g, searched) = candidates(s, effort);
    let co_placed = searched.as_ref().and_then(|x| x.co_placed.as_ref().map(|c| c.0.clone()));
    let search = searched.map_or_else(|| g.clone(), |x| x.best());
    let fast = pick(g.clone(), search.clone()).0;
    Parts { greedy: g.0, search: search.0, co_placed, fast }
}

/// The fast plan and its value (equal to `validate(s, &plan).value`): the
/// search's plan, or the simple [`greedy`]'s when that is worth more (so
/// fast mode is never below it).
pub(crate) fn plan_scored(s: &Scenario, effort: u32) -> (Plan, f64) {
    let (g, searched) = candidates(s, effort);
    match searched {
        Some(x) => pick(g, x.best()),
        None => g,
    }
}

/// The floor: the greedy's plan only when it is worth more than the search's.
fn pick(greedy: (Plan, f64), search: (Plan, f64)) -> (Plan, f64) {
    if greedy.1 > search.1 {
        greedy
    } else {
        search
    }
}

/// The greedy with its value, and the search (`None` for horizons over 64
/// steps, where the greedy is the plan).
fn candidates(s: &Scenario, effort: u32) -> ((Plan, f64), Option<pack::Searched>) {
    let g = greedy(s);
    let gv = super::validate(s, &g).map(|sc| sc.value).unwrap_or(f64::NEG_INFINITY);
    if s.steps > pack::MAX_STEPS || s.steps == 0 {
        return ((g, gv), None);
    }
    ((g, gv), Some(pack::search(s, pack::Budget::with_effort(effort))))
}
