//! Fast mode's decoder and search (see the module doc of `fast`): an order
//! of batch jobs and a block rule decode into a plan, the value of which is
//! summed as the plan is built; a counted work budget ([`Budget`]) bounds
//! the passes.
//!
//! Submodules, each using only those listed after it (but for `decode.rs`
//! and `place.rs`, which are the decoder together):
//!
//! - `search.rs`: `search`, the phases in order (layouts, seeded passes,
//!   improvement, elastic layouts, co-placement) and the plan they give;
//! - `tokens.rs`: the co-placement search (services and batch decoded in
//!   one order);
//! - `trade.rs`: realtime demand given up where a batch job is worth more;
//! - `improve.rs`: the improvement loop and its moves on an order;
//! - `orders.rs`: the seed orders;
//! - `decode.rs`: the decoder (`Ctx`): an order and a block rule into a
//!   plan and its value, with the job list and the work count;
//! - `place.rs`: the decoder's block search (`Ctx::find`): one job's
//!   earliest start and block under a block rule;
//! - `packer.rs`: occupancy, one step mask per aligned block;
//! - `deadline.rs`: the budget's wall-clock cap, the only place the search
//!   reads the clock.

mod deadline;
mod decode;
mod improve;
mod orders;
mod packer;
mod place;
mod search;
mod tokens;
mod trade;

// The co-placement search (`tokens.rs`) uses the decoder through these.
use decode::{Ctx, Rule};
use packer::{free_around, Packer};

pub(crate) use search::{search, Searched};

use std::time::Duration;

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
    /// reached does the plan depend on the machine). Read in one place,
    /// `pack/deadline.rs`.
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
        let factor = u64::from(effort.max(1));
        let default = Budget::default();
        Budget {
            passes: default.passes * factor,
            work_min: default.work_min * factor,
            work_max: default.work_max * factor,
            elastic_max: default.elastic_max * factor,
            tokens_passes: default.tokens_passes * factor,
            tokens_max: default.tokens_max * factor,
            time_cap: default.time_cap * effort.max(1),
            ..default
        }
    }
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
