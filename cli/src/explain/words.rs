//! The reasons in words: why one job is ahead of another ([`why_ahead`]),
//! a job's place in its team's line ([`place_words`]), what protects a
//! running job ([`refusal_words`]), and times ([`when`], [`utc`]).

use super::{walk_ahead, TeamPlace};
use crate::slurm_json::QueueJob;
use tally_allocator::preempt::Refusal;
use tally_allocator::priority::{decode, Precedence, NEED_FAIR, NEED_LANE, NEED_NONE, NEED_OWED};
use tally_allocator::{format_duration, ReclaimRefusal, TeamNow};
use tally_engine::engine::Ranking;

/// A team's need ([`tally_allocator::priority::Decoded::need`]), in words.
fn need_words(need: u32) -> &'static str {
    match need {
        NEED_LANE => "in the debug lane",
        NEED_OWED => "owed GPUs now",
        NEED_FAIR => "below its fair share now",
        _ => "neither owed GPUs nor below its fair share",
    }
}

/// The team's order, in words ([`tally_allocator::inside_order`]).
const TEAM_ORDER: &str = "the team's order (nice, then quick jobs, then submit time, then job id)";

/// GPUs in words: whole ones without decimals (`3`), else one (`2.6`).
fn gpus(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`, …
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What the team's need is measured against: its rate (owed GPUs now) or
/// its water-filled fair share (below its fair share now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Rate,
    Fair,
}

impl Limit {
    fn of(need: u32) -> Limit {
        if need == NEED_FAIR {
            Limit::Fair
        } else {
            Limit::Rate
        }
    }

    fn gpus(self, t: &TeamNow) -> f64 {
        match self {
            Limit::Rate => t.rate,
            Limit::Fair => t.fair,
        }
    }

    /// GPUs the team runs below it.
    fn short(self, t: &TeamNow) -> f64 {
        (self.gpus(t) - t.running).max(0.0)
    }

    /// `rate 2.6` or `fair share 4.0, rate 2.6`.
    fn text(self, t: &TeamNow) -> String {
        match self {
            Limit::Rate => format!("rate {:.1}", t.rate),
            Limit::Fair => format!("fair share {:.1}, rate {:.1}", t.fair, t.rate),
        }
    }

    /// What the team is short of, in words.
    fn short_of(self) -> &'static str {
        match self {
            Limit::Rate => "short",
            Limit::Fair => "below its fair share by",
        }
    }
}

/// Why the job ahead (`other`, of `account`) is as needy as its priority
/// says: its team is short of `limit`, and its team's jobs ahead of it ask
/// for fewer GPUs than that. `None` when the queue as it stands now says
/// otherwise (Slurm's priorities are the last re-ranking's).
fn other_claim(ranking: &Ranking, account: &str, other: &QueueJob, limit: Limit) -> Option<String> {
    let t = ranking.ent.team(account)?;
    let ahead = walk_ahead(ranking, other, account);
    let short = limit.short(&t);
    (ahead < short).then(|| {
        let line = if ahead <= 0.0 {
            "it is first in its team's line for them".to_string()
        } else {
            format!("its team's jobs ahead of it in {TEAM_ORDER} ask for only {} of them", gpus(ahead))
        };
        format!("its team is {} {} GPUs (runs {}, {}) and {line}", limit.short_of(), gpus(short), gpus(t.running), limit.text(&t))
    })
}

/// Why the job explained is not as needy at `limit`: its team is not short
/// of it, or the team's jobs ahead of it in the team's order claim what it
/// is short first. `None` when the queue as it stands now says otherwise.
fn own_shortfall(t: &TeamNow, place: Option<&TeamPlace>, limit: Limit) -> Option<String> {
    let short = limit.short(t);
    if short <= 0.0 {
        let not = match limit {
            Limit::Rate => "not short",
            Limit::Fair => "not below its fair share",
        };
        return Some(format!("your team is {not} (runs {}, {})", gpus(t.running), limit.text(t)));
    }
    let p = place?;
    (p.gpus_ahead >= short).then(|| {
        let what = if p.waits { "ahead of this one" } else { "that this one, once it waits, queues behind" };
        format!(
            "your team is {} {} GPUs too (runs {}, {}), but its {} {what} in {TEAM_ORDER} ask for {} GPUs and claim them first: this job is {} in its team",
            limit.short_of(),
            gpus(short),
            gpus(t.running),
            limit.text(t),
            plural(p.jobs_ahead, "waiting job", "waiting jobs"),
            gpus(p.gpus_ahead),
            ordinal(p.place)
        )
    })
}

/// Where a job's team would stand when it starts, as the level measures it
/// (`4 running + 2 ahead of it = 6 of its rate 8.0`).
fn standing(t: &TeamNow, ahead: f64, limit: Limit, whose: &str) -> String {
    let at = match limit {
        Limit::Rate => format!("its rate {:.1}", t.rate),
        Limit::Fair => format!("its fair share {:.1}", t.fair),
    };
    format!("{} running + {} ahead of {whose} = {} of {at}", gpus(t.running), gpus(ahead), gpus(t.running + ahead))
}

/// Why `other` is ahead of the job, in words. `mine`: the job's place in
/// its team's line.
pub(super) fn why_ahead(
    because: Option<Precedence>,
    ranking: &Ranking,
    other_account: &str,
    mine: &str,
    other: &QueueJob,
    target: &QueueJob,
    place: Option<&TeamPlace>,
) -> String {
    let same = other_account == mine;
    let earlier = if other.view.submit_s < target.view.submit_s {
        format!("submitted {} earlier", format_duration(target.view.submit_s - other.view.submit_s))
    } else {
        "lower job id".to_string()
    };
    let stale = |first: u32, second: u32| {
        format!(
            "at the last re-ranking its team was {} and yours was {} (Slurm holds the priorities Tally gave then; Tally re-ranks every calc_period and the queue has changed since)",
            need_words(first).trim_end_matches(" now"),
            if second == NEED_NONE { "not".to_string() } else { format!("only {}", need_words(second).trim_end_matches(" now")) }
        )
    };
    match because {
        None => "a higher priority set outside Tally's layout".to_string(),
        Some(Precedence::Tier) => "allocated tier vs unallocated (yours)".to_string(),
        Some(Precedence::Planned) => "planned to start now (the planner's committed step)".to_string(),
        Some(Precedence::Need { .. } | Precedence::Level { .. }) if same => {
            format!("same team, earlier in {TEAM_ORDER}: it claims the team's GPUs before yours")
        }
        Some(Precedence::Need { first: NEED_LANE, .. }) => {
            "a debug job in the debug lane (allocated debug jobs go before every other allocated job)".to_string()
        }
        Some(Precedence::Need { first, second }) => {
            let Some(mine_team) = ranking.ent.team(mine) else {
                return format!("its team is {} and yours is not in the tree", need_words(first));
            };
            let theirs = other_claim(ranking, other_account, other, Limit::of(first));
            // Yours falls short of what makes it as needy: the rate when it
            // is below its fair share only, else the level it lacks.
            let yours = own_shortfall(&mine_team, place, Limit::of(first));
            let head = if second == NEED_NONE {
                format!("its team is {} and yours is not", need_words(first))
            } else {
                format!("its team is {} and yours only {}", need_words(first), need_words(second))
            };
            match (theirs, yours) {
                (Some(theirs), Some(yours)) => format!("{head}: {theirs}; {yours}"),
                _ => stale(first, second),
            }
        }
        Some(Precedence::Level { first, second }) => {
            let need = decode(other.view.priority).need;
            let limit = Limit::of(need);
            match (ranking.ent.team(other_account), ranking.ent.team(mine), place) {
                (Some(t), Some(m), Some(p)) => format!(
                    "both teams are {}, its team further below when it starts (level {first} vs {second}: its team's GPUs then {}; yours {})",
                    need_words(need),
                    standing(&t, walk_ahead(ranking, other, other_account), limit, "it"),
                    standing(&m, p.gpus_ahead, limit, "yours"),
                ),
                _ => format!("both teams are {}, its team further below when it starts (level {first} vs {second})", need_words(need)),
            }
        }
        Some(Precedence::Team { .. }) => {
            let rank = |a: &str| ranking.fs.standing(a).map_or("-".to_string(), |s| s.rank.to_string());
            format!("higher team rank over 7 days ({} rank {} vs {mine} rank {})", other_account, rank(other_account), rank(mine))
        }
        Some(Precedence::Nice { first, second }) => {
            format!("same team standing, nicer (nice {} vs {})", -first, -second)
        }
        Some(Precedence::Quick) => "quick (a short time limit goes first among equals)".to_string(),
        Some(Precedence::Equal) if same => format!("same team, equal priority, {earlier}"),
        Some(Precedence::Equal) => format!("equal priority, {earlier}"),
    }
}

/// The job explained in its team's line, in words: its place, what the
/// team's jobs ahead of it ask for, and what that leaves it now.
pub(super) fn place_words(t: &TeamNow, p: &TeamPlace) -> String {
    let head = match (p.waits, p.team_jobs, p.jobs_ahead) {
        (true, 1, _) => format!("the team's only waiting job, first in {TEAM_ORDER}"),
        (true, n, _) => format!("{} of the team's {n} waiting jobs in {TEAM_ORDER}", ordinal(p.place)),
        (false, _, 0) => "not waiting now (held, a dependency or a later begin time): once it waits, it is first in the team's line".to_string(),
        (false, _, k) => format!(
            "not waiting now (held, a dependency or a later begin time): once it waits, it queues behind the team's {} ({} GPUs)",
            plural(k, "waiting job", "waiting jobs"),
            gpus(p.gpus_ahead)
        ),
    };
    let claim = if p.jobs_ahead == 1 { "claims" } else { "claim" };
    let ahead = match p.jobs_ahead {
        0 => "no job of the team is ahead of it".to_string(),
        1 => format!("the 1 job ahead of it asks for {} GPUs", gpus(p.gpus_ahead)),
        k => format!("the {k} jobs ahead of it ask for {} GPUs", gpus(p.gpus_ahead)),
    };
    let (short, fair) = (Limit::Rate.short(t), Limit::Fair.short(t));
    let verdict = match p.need {
        NEED_LANE => "a debug job: the debug lane puts it before every other allocated job".to_string(),
        NEED_OWED => format!("{ahead}, less than the {} GPUs the team is short: it is owed GPUs now", gpus(short)),
        NEED_FAIR if short > 0.0 => format!(
            "{ahead} and {claim} the {} GPUs the team is short first, but less than the {} it is below its fair share: it is below its fair share now",
            gpus(short),
            gpus(fair)
        ),
        NEED_FAIR => format!(
            "the team is not short (runs {}, rate {:.1}); {ahead}, less than the {} it is below its fair share: it is below its fair share now",
            gpus(t.running),
            t.rate,
            gpus(fair)
        ),
        _ if short > 0.0 => format!("{ahead} and {claim} the {} GPUs the team is short first: it is not owed GPUs now", gpus(short)),
        _ => format!("the team is not short (runs {}, rate {:.1}): no job of it is owed GPUs now", gpus(t.running), t.rate),
    };
    format!("{head}; {verdict}")
}

/// Why a preemption is refused ([`Refusal`]), in words.
pub(crate) fn refusal_words(r: &Refusal, now: u64) -> String {
    match r {
        Refusal::SameJob => "the same job".to_string(),
        Refusal::PreemptorUnallocated => "your job is unallocated: unallocated jobs never preempt".to_string(),
        Refusal::VictimNotRunning => "not running".to_string(),
        Refusal::InsideContract(left) => format!("contract until {} ({} left)", utc(now + left), format_duration(*left)),
        Refusal::NotResumable { ran_s } => format!(
            "cannot checkpoint: nobody takes it past its contract (a requeue would throw away its {} run); its time limit ends it",
            format_duration(*ran_s)
        ),
        Refusal::LongJob { ran_s } => format!(
            "cannot checkpoint and may run longer than the contract maximum: nobody takes it past its contract (a requeue would throw away its {} run); it started where no other team was owed its GPUs",
            format_duration(*ran_s)
        ),
        Refusal::TeamOrder => "same team, and it comes before your job in the team's order (priority, then debug and quick jobs)".to_string(),
        Refusal::Reclaim(ReclaimRefusal::SameTeam) => "same team".to_string(),
        Refusal::Reclaim(ReclaimRefusal::Unknown) => "an account outside the tree".to_string(),
        Refusal::Reclaim(ReclaimRefusal::PreemptorNotShort { running, rate }) => {
            format!("your side of the tree already runs {running:.0} GPUs, at or above its rate {rate:.1}")
        }
        Refusal::Reclaim(ReclaimRefusal::VictimBelowRate { account, after, rate }) => {
            format!("its team would fall below its rate ({account} would run {after:.0} of {rate:.1} GPUs)")
        }
        Refusal::Reclaim(ReclaimRefusal::ShareNotLower { preemptor_after, victim_after }) => {
            format!("your side would end with a higher share than its side keeps ({preemptor_after:.2} vs {victim_after:.2} of the rate)")
        }
        Refusal::Reclaim(ReclaimRefusal::Outranked { account, victim_after, preemptor_after }) => {
            format!("without it, {account} would keep a smaller share of its rate than your side with your job ({victim_after:.2} vs {preemptor_after:.2})")
        }
    }
}

/// `2026-12-03 14:40 UTC (in 1h20m)`.
pub(super) fn when(t: u64, now: u64) -> String {
    let rel = if t >= now { format!("in {}", format_duration(t - now)) } else { format!("{} ago", format_duration(now - t)) };
    format!("{} ({rel})", utc(t))
}

/// `YYYY-MM-DD HH:MM UTC`.
pub(super) fn utc(t: u64) -> String {
    let iso = tally_sim::trace::utc_iso(t);
    format!("{} {} UTC", &iso[..10], &iso[11..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111, 171].into_iter().map(ordinal).collect();
        assert_eq!(got, ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th", "171st"]);
        assert_eq!((gpus(3.0), gpus(2.6), gpus(2.96)), ("3".to_string(), "2.6".to_string(), "3".to_string()));
    }

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_796_308_676), "2026-12-03 14:37 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
    }
}
