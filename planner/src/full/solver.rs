//! What both of full mode's MIPs share: the HiGHS calls (options, one MIP
//! run from a warm start), which jobs get columns, and the constant the
//! pinned jobs add to the bound. (Named `solver`, not `highs`, so that
//! `highs::…` always means the crate.)

use super::super::grid::{firsts, last_start, value};
use super::super::{Placed, Plan, PlanJob, Scenario};
use super::api::{FullError, FullOptions};
use highs::{HighsModelStatus, HighsSolutionStatus, Model, SolvedModel};

/// Time left for the MIP below which it is not started (it would not get past its root).
pub(super) const MIN_MIP_S: f64 = 0.05;

/// What a MIP run gave.
#[derive(Debug)]
pub(super) struct MipRun {
    /// The incumbent's columns, if any.
    pub(super) sol: Option<Vec<f64>>,
    /// Proven optimal (within `mip_rel_gap`).
    pub(super) optimal: bool,
    /// The dual bound (of the minimisation), if finite.
    pub(super) dual: Option<f64>,
}

/// Solve a MIP within `time_s` from an optional start (the count model's
/// and the exact model's).
pub(super) fn solve_mip(mut model: Model, time_s: f64, opts: &FullOptions, start: Option<&[f64]>) -> Result<MipRun, FullError> {
    set(&mut model, "solve_relaxation", false)?;
    set(&mut model, "time_limit", time_s.max(MIN_MIP_S))?;
    set(&mut model, "mip_rel_gap", opts.mip_rel_gap)?;
    if let Some(start) = start {
        // A start HiGHS finds infeasible is dropped by it; not fatal.
        let _ = model.try_set_solution(Some(start), None, None, None);
    }
    let solved = model.try_solve().map_err(|_| FullError::Solver("to solve the MIP"))?;
    let incumbent = has_solution(&solved);
    let optimal = match solved.status() {
        HighsModelStatus::Optimal => incumbent,
        HighsModelStatus::ReachedTimeLimit | HighsModelStatus::ReachedIterationLimit => false,
        HighsModelStatus::Infeasible => return Err(FullError::Infeasible),
        other => return Err(FullError::NoSolution(format!("{other:?}"))),
    };
    let dual = solved.double_info_value(c"mip_dual_bound").ok().filter(|b| b.is_finite());
    let sol = incumbent.then(|| solved.get_solution().columns().to_vec());
    Ok(MipRun { sol, optimal, dual })
}

pub(super) fn set<V: highs::HighsOptionValue>(model: &mut Model, name: &'static str, value: V) -> Result<(), FullError> {
    model.try_set_option(name, value).map_err(|_| FullError::Option(name))
}

pub(super) fn has_solution(m: &SolvedModel) -> bool {
    m.int_info_value(c"primal_solution_status").ok() == Some(HighsSolutionStatus::Feasible as i64)
}

/// Whether job `j` gets columns: not pinned, worth something, able to start
/// in the horizon under its rule (`grid::last_start`), with a legal block on
/// the cluster.
pub(super) fn eligible(s: &Scenario, j: &PlanJob) -> bool {
    j.pinned.is_none()
        && j.duration_steps > 0
        && j.priority > 0.0
        && last_start(s, j).is_some()
        && firsts(s.gpus, s.gpus_per_node, j.gpus).next().is_some()
}

/// The value of the pinned jobs over the horizon (a constant of the objective).
pub(super) fn pinned_value(s: &Scenario) -> f64 {
    let mut v = 0.0;
    for j in &s.jobs {
        if let Some((start, _)) = j.pinned {
            v += value(s, j, start);
        }
    }
    v
}

/// The placements of a plan a MIP decides (a warm start): each with its
/// job's index, leaving out pinned jobs and starts past the horizon; `None`
/// if the plan names a job the scenario does not have.
pub(super) fn decided<'a>(s: &Scenario, plan: &'a Plan) -> Option<Vec<(usize, &'a Placed)>> {
    let mut out = Vec::with_capacity(plan.batch.len());
    for p in &plan.batch {
        let ji = s.jobs.iter().position(|j| j.id == p.job_id)?;
        if s.jobs[ji].pinned.is_none() && p.start_step < s.steps {
            out.push((ji, p));
        }
    }
    Some(out)
}
