//! The objective's trade-off between realtime and batch, searched: unmet
//! realtime demand costs `penalty × weight` a GPU-step, so the services
//! give GPUs up where a batch job running earlier brings more than that.

use super::decode::{Buffers, Ctx, Decoded, Mark};
use super::improve::improve;
use crate::fast::layout::clip;
use crate::grid::demand;
use crate::Scenario;

/// A batch plan on a counts layout (the services kept free only as
/// per-step counts): the plan, the index of its layout in `Ctx::bases`,
/// and the services' curves that layout keeps free.
pub(super) struct CountsGuide {
    pub(super) plan: Decoded,
    pub(super) layout: usize,
    pub(super) curves: Vec<Vec<u32>>,
}

/// The trade worth most: one job earlier, the services' curves lowered
/// for it.
struct Trade {
    /// The job's value gain minus `cost`.
    net_gain: f64,
    job_index: usize,
    /// The services' curves after giving up what the job needs.
    lowered: Vec<Vec<u32>>,
    /// The unmet demand the lowered curves add.
    cost: f64,
}

/// When a batch job that started late or not at all in `guide` would
/// bring more by running earlier than the demand its run would leave
/// unmet, the services give those GPUs up. For each such job and start,
/// the GPUs its run lacks at each step (beyond what the curves leave
/// batch there) are taken from the services, the least weighted first,
/// each curve lowered there and kept within its swap cap (its ramps
/// lowered too, `layout::clip`); the start whose value gain most exceeds
/// the added cost is tried: the order decoded again with that job first
/// on the counts the lower curves leave. A plan worth more is kept (its
/// curves with it) and the next job is looked at; a job whose best trade
/// does not pay is not tried again. Returns the guide after the trades
/// that paid (`guide` itself if none did); `marks` are its marks.
/// `realtime` is kept in step with `ctx.bases` (an empty entry per counts
/// layout added).
pub(super) fn trade_realtime_for_batch(
    ctx: &mut Ctx,
    s: &Scenario,
    realtime: &mut Vec<Vec<Vec<Vec<u32>>>>,
    buffers: &mut Buffers,
    marks: &mut [Mark],
    mut guide: CountsGuide,
    limit: u64,
) -> CountsGuide {
    let steps = ctx.steps;
    let wanted: Vec<Vec<u32>> = (0..s.services.len()).map(|service| (0..steps).map(|t| demand(s, service, t)).collect()).collect();
    let mut by_weight: Vec<usize> = (0..s.services.len()).collect();
    by_weight.sort_by(|&a, &b| s.services[a].weight.total_cmp(&s.services[b].weight).then(a.cmp(&b)));
    let mut given_up = vec![false; ctx.jobs.len()];
    while !ctx.spent(limit) {
        let Some(trade) = best_trade(ctx, s, &guide, &wanted, &by_weight, &given_up) else { break };
        let job_index = trade.job_index;
        if !try_trade(ctx, realtime, buffers, marks, &mut guide, trade, limit) {
            given_up[job_index] = true;
        }
    }
    guide
}

/// The cost of the demand `served` leaves unmet for `service`
/// (`wanted`: its demand per step).
fn unmet_cost(s: &Scenario, service: usize, wanted: &[u32], served: &[u32]) -> f64 {
    let missing: u32 = served.iter().zip(wanted).map(|(&held, &want)| want.saturating_sub(held)).sum();
    s.penalty * s.services[service].weight * f64::from(missing)
}

/// The trade whose value gain most exceeds its cost, over every job not
/// given up that could bring more and every start of it worth more than
/// its start in the guide; `None` when no trade pays. Each start examined
/// counts its run's steps times the services as work.
fn best_trade(ctx: &mut Ctx, s: &Scenario, guide: &CountsGuide, wanted: &[Vec<u32>], by_weight: &[usize], given_up: &[bool]) -> Option<Trade> {
    let steps = ctx.steps;
    let curves = &guide.curves;
    // The room the curves leave batch.
    let room = ctx.bases[guide.layout].0.cap.clone();
    let mut best: Option<Trade> = None;
    for (job_index, job) in ctx.jobs.iter().enumerate() {
        let now = guide.plan.starts[job_index].map_or(0.0, |(start, _)| ctx.value(job, start));
        if given_up[job_index] || job.ideal <= now {
            continue;
        }
        for start in job.arrival..=job.last {
            let gain = ctx.value(job, start) - now;
            if gain <= 0.0 {
                break; // later starts are worth no more
            }
            ctx.work += (job.dur * s.services.len()) as u64;
            // What the services must give for the job to fit beside
            // them (other batch jobs make way when it is decoded first).
            let run = start..start + job.dur;
            let mut need: Vec<u32> = (0..steps).map(|t| if run.contains(&t) { job.gpus.saturating_sub(room[t]) } else { 0 }).collect();
            if need.iter().all(|&gpus| gpus == 0) {
                continue; // room enough: blocks, not the services, keep it out
            }
            let mut lowered = curves.clone();
            for &service in by_weight {
                let mut cut = lowered[service].clone();
                for (held, needed) in cut.iter_mut().zip(&mut need) {
                    let take = (*needed).min(*held);
                    *held -= take;
                    *needed -= take;
                }
                clip(&mut lowered[service], &cut, s.services[service].swap_cap);
            }
            if need.iter().any(|&gpus| gpus > 0) {
                continue; // the services do not hold enough there
            }
            let cost: f64 = (0..lowered.len())
                .map(|service| {
                    unmet_cost(s, service, &wanted[service], &lowered[service]) - unmet_cost(s, service, &wanted[service], &curves[service])
                })
                .sum();
            if gain > cost && best.as_ref().is_none_or(|kept| gain - cost > kept.net_gain) {
                best = Some(Trade { net_gain: gain - cost, job_index, lowered, cost });
            }
        }
    }
    best
}

/// `trade` tried: a counts layout with the lowered curves, the guide's
/// order decoded on it with the job first and improved briefly. When that
/// is worth more than the guide it becomes the guide (`marks` its marks)
/// and this returns true; otherwise the layout is dropped again.
fn try_trade(
    ctx: &mut Ctx,
    realtime: &mut Vec<Vec<Vec<Vec<u32>>>>,
    buffers: &mut Buffers,
    marks: &mut [Mark],
    guide: &mut CountsGuide,
    trade: Trade,
    limit: u64,
) -> bool {
    // The counts the lower curves leave, and the order with the job first.
    let (mut base, value) = ctx.bases[guide.layout].clone();
    for (t, room) in base.cap.iter_mut().enumerate() {
        *room += guide.curves.iter().zip(&trade.lowered).map(|(before, after)| before[t] - after[t]).sum::<u32>();
    }
    // A counts layout: no GPUs of its own (`realtime` kept in step with `bases`).
    ctx.bases.push((base, value - trade.cost));
    realtime.push(Vec::new());
    let layout = ctx.bases.len() - 1;
    let mut order = guide.plan.order.clone();
    let pos = order.iter().position(|&job_index| job_index as usize == trade.job_index).expect("every job is in the order");
    order[..=pos].rotate_right(1);
    let before = ctx.work;
    let traded = ctx.decode(&mut buffers.scratch, &mut buffers.candidate_marks, buffers.every, None, layout, order, guide.plan.rule);
    // A short improvement of its own (ten decodes' worth): the jobs the
    // traded one pushed aside find their places again.
    let per_try = (ctx.work - before) * 10;
    let mut trial_marks = buffers.candidate_marks.to_vec();
    let traded = improve(ctx, buffers, &mut trial_marks, traded, (ctx.work + per_try).min(limit.max(ctx.work + 1)));
    let guide_value = guide.plan.value;
    if traded.value > guide_value + 1e-9 * guide_value.abs() {
        // `improve` leaves its best plan's marks in `trial_marks` only
        // when that plan was the last accepted one; decode it again to
        // be sure the marks are its own.
        let traded = ctx.decode(&mut buffers.scratch, &mut buffers.candidate_marks, buffers.every, None, layout, traded.order, traded.rule);
        marks.swap_with_slice(&mut buffers.candidate_marks);
        *guide = CountsGuide { plan: traded, layout, curves: trade.lowered };
        true
    } else {
        ctx.bases.pop();
        realtime.pop();
        false
    }
}
