//! [`Report::json`]: the same facts as JSON (`tally explain --json`), one
//! function per member.

use super::text::{block_text, need_name};
use super::words::place_words;
use super::{Ahead, Block, ForecastFacts, JobFacts, Level, Outlook, Preemption, Report, TeamFacts, Victim, Yields};
use serde_json::{json, Value};
use tally_allocator::outlook::BackUnder;
use tally_allocator::priority::{Precedence, NEED_OWED};
use tally_sim::forecast::Estimate;

impl Report {
    /// The report as JSON: each section of the text as a member.
    pub fn json(&self) -> Value {
        json!({
            "now": self.now,
            "job": job(&self.job),
            "team": self.team.as_ref().map(team),
            "levels": self.levels.iter().map(level).collect::<Vec<_>>(),
            "outlook": self.outlook.as_ref().map(outlook),
            "ahead": self.ahead.as_ref().map(ahead),
            "blocks": self.blocks.iter().map(|b| block(b, self.now)).collect::<Vec<_>>(),
            "forecast": self.forecast.as_ref().map(forecast),
            "preemption": self.preemption.as_ref().map(preemption),
            "yields": self.yields.as_ref().map(yields),
        })
    }
}

fn job(j: &JobFacts) -> Value {
    let d = &j.decoded;
    let (contract, contract_error) = match &j.contract {
        Ok(c) => (json!({"min_runtime_s": c.min_runtime_s, "resumable": c.resumable}), Value::Null),
        Err(e) => (Value::Null, json!(e)),
    };
    json!({
        "id": j.id, "name": j.name, "user": j.user, "account": j.account, "gpus": j.gpus, "nodes": j.nodes,
        "partition": j.partition, "state": j.state, "reason": j.reason, "comment": j.comment,
        "contract": contract, "contract_error": contract_error,
        "allocated": j.allocated, "unallocated_because": j.unallocated_because,
        "priority": j.priority,
        "decoded": {"allocated": d.allocated, "planned": d.planned, "need": d.need, "need_name": need_name(d.need),
                    "level": d.level, "team": d.team, "team_rank": 1023 - d.team, "nice": -d.within_team, "quick": d.quick},
        "tally_priority_now": j.computed,
        "time_limit_s": j.time_limit_s, "submit_s": j.submit_s, "begin_s": j.begin_s, "start_s": j.start_s,
        "nodes_running_on": j.node_list, "contract_left_s": j.contract_left_s,
    })
}

fn team(t: &TeamFacts) -> Value {
    json!({
        "account": t.account, "rate_gpus": t.now.rate, "running_gpus": t.now.running,
        "waiting_gpus": t.now.demand - t.now.running, "owed_gpus": t.now.owed, "short_gpus": t.now.short(), "fair_gpus": t.now.fair,
        "job_in_team": t.place.as_ref().map(|p| json!({
            "place_in_team": p.place, "jobs_ahead_in_team": p.jobs_ahead, "gpus_ahead_in_team": p.gpus_ahead,
            "team_waiting_jobs": p.team_jobs, "waits_now": p.waits,
            "need": p.need, "need_name": need_name(p.need), "owed_now": p.need == NEED_OWED,
            "order": "nice, then quick jobs, then submit time, then job id",
            "words": place_words(&t.now, p),
        })),
    })
}

fn level(l: &Level) -> Value {
    json!({
        "account": l.account, "own_part": l.own, "rank": l.rank, "used_gpu_hours": l.used_gpu_hours, "allocated_gpu_hours": l.allocated_gpu_hours,
    })
}

fn outlook(o: &Outlook) -> Value {
    json!({
        "account": o.account, "used_gpu_hours": o.used_gpu_hours, "allocated_gpu_hours": o.allocated_gpu_hours,
        "already_under": o.back == BackUnder::Already,
        "back_under_at": match o.back { BackUnder::At(t) => Some(t), BackUnder::Already => None },
        "assumes": "nothing more is charged to the account from now",
    })
}

fn ahead(a: &Ahead) -> Value {
    json!({
        "count": a.count, "gpus": a.gpus,
        "first": a.first.iter().map(|x| json!({
            "job": x.name, "user": x.user, "account": x.account, "gpus": x.gpus, "priority": x.priority,
            "because": x.because.map(precedence_name), "its_team_gpus_ahead": x.team_gpus_ahead, "words": x.words,
        })).collect::<Vec<_>>(),
    })
}

fn forecast(f: &Result<ForecastFacts, String>) -> Value {
    match f {
        Err(why) => json!({"estimate": Value::Null, "why_none": why}),
        Ok(f) => json!({
            "starts_at": match f.estimate { Estimate::StartsAt(t) => Some(t), _ => None },
            "within_horizon": matches!(f.estimate, Estimate::StartsAt(_)),
            "never_fits": f.estimate == Estimate::NeverFits,
            "horizon_s": f.horizon_s, "jobs_replayed": f.jobs,
            "jobs_without_time_limit": f.defaulted, "default_duration_s": f.default_duration_s,
            "assumes": "every job runs to its time limit (jobs without one: default_duration_s, or to the end of their contract if later) and nothing new is submitted",
        }),
    }
}

fn preemption(p: &Preemption) -> Value {
    json!({
        "refused": p.refused,
        "may_preempt": p.refused.is_none() && !p.candidates.is_empty(),
        "candidate_gpus": p.candidate_gpus, "free_gpus": p.free_gpus,
        "candidates": p.candidates.iter().map(victim).collect::<Vec<_>>(),
        "protected": p.protected.iter().map(victim).collect::<Vec<_>>(),
        "protected_count": p.protected_count,
        "next_chance": p.next.as_ref().map(|n| json!({"at": n.at, "victims": n.victims})),
    })
}

fn yields(y: &Yields) -> Value {
    json!({
        "from": y.from, "count": y.count, "to": y.to.iter().map(victim).collect::<Vec<_>>(), "note": y.note, "loses_gpu_hours": y.loses_gpu_h,
    })
}

fn victim(v: &Victim) -> Value {
    json!({"job": v.id, "user": v.user, "account": v.account, "gpus": v.gpus, "why": v.why})
}

fn precedence_name(p: Precedence) -> &'static str {
    match p {
        Precedence::Tier => "tier",
        Precedence::Planned => "planned",
        Precedence::Need { .. } => "need",
        Precedence::Level { .. } => "level",
        Precedence::Team { .. } => "team_rank",
        Precedence::Nice { .. } => "nice",
        Precedence::Quick => "quick",
        Precedence::Equal => "equal",
    }
}

fn block(b: &Block, now: u64) -> Value {
    let kind = match b {
        Block::LongJob { .. } => "long_job_held",
        Block::Held(_) => "held",
        Block::Dependency(_) => "dependency",
        Block::BeginTime(_) => "begin_time",
        Block::Partition(_) => "partition",
        Block::Reservation(_) => "reservation",
        Block::NoFreeGpus { .. } => "no_free_gpus",
        Block::Fragmented { .. } => "fragmentation",
        Block::TooFewNodes { .. } => "too_few_nodes",
        Block::NeverFits { .. } => "never_fits",
        Block::Fits { .. } => "fits",
        Block::Slurm(_) => "slurm_reason",
    };
    json!({"kind": kind, "text": block_text(b, now)})
}
