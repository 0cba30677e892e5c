//! GPU types and their budget weights: the one rule turning GPUs of
//! different kinds into one budget unit.
//!
//! A site with H100s and B200s does not want an hour on a B200 to cost
//! the same as an hour on an H100. `[cluster.gpu_types]` gives every GRES
//! type (as Slurm spells it: `gpu:h100:8` is type `h100`) a weight, as
//! Slurm's `TRESBillingWeights=GRES/gpu:h100=1.0,GRES/gpu:b200=2.2` bills
//! them:
//!
//! ```text
//! weight(type)   = the table's weight of `type`; 1 for an untyped GPU or a type not in the table
//! units(job)     = GPUs × weight(its type)                             budget units (weighted GPUs)
//! charge(run)    = round(units · t₁) − round(units · t₀)               over run seconds [t₀, t₁)
//! capacity       = Σ_typed count(t) × weight(t) + (GPUs − Σ_typed count(t)) × 1
//! count(t)       = the table's `gpus` of t, else the GPUs of type t on Slurm's nodes, else 0
//! ```
//!
//! Everything Tally measures in GPUs or GPU-hours — budgets, the ledger,
//! the 7-day ranking, the allocation rates, what a team runs and waits for
//! now, owed and delivered — is in these units: a GPU-hour of budget buys
//! an hour of a weight-1 GPU, or 1/2.2 of an hour of a B200. Without the
//! table every weight is 1 and every figure is a plain GPU count, exactly
//! as before. Charges are rounded to whole unit-seconds *cumulatively* over
//! a run (`round(units · t)` at each end), so the pieces of a run charged
//! tick by tick add up to the run's whole, with no drift.
//!
//! Slurm's own billing (`TRESBillingWeights`, the `billing` TRES, its
//! fair share) is neither read nor changed: the two are configured apart.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// The budget weight of one GPU (finite, > 0): 1 for an untyped GPU.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Weight(f64);

// Always finite ([`Weight::new`]), so equality is an equivalence.
impl Eq for Weight {}

impl Default for Weight {
    fn default() -> Self {
        Weight::ONE
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Weight {
    /// An untyped GPU, or a type without a weight.
    pub const ONE: Weight = Weight(1.0);

    /// `None` unless finite and > 0.
    pub fn new(w: f64) -> Option<Weight> {
        (w.is_finite() && w > 0.0).then_some(Weight(w))
    }

    pub fn get(self) -> f64 {
        self.0
    }

    pub fn is_one(self) -> bool {
        self.0 == 1.0
    }

    /// Budget units of `gpus` GPUs of this weight: `gpus × weight`.
    pub fn units(self, gpus: u32) -> f64 {
        f64::from(gpus) * self.0
    }

    /// Whole budget-unit-seconds that `gpus` GPUs of this weight accrue
    /// from run second `from` to run second `to` (seconds since any fixed
    /// origin, the run's start in practice):
    ///
    /// ```text
    /// round(units · to) − round(units · from)       units = gpus × weight
    /// ```
    ///
    /// so consecutive pieces of one run add up to the whole run. Weight 1:
    /// `gpus × (to − from)` exactly (saturating), as the ledger always charged.
    pub fn unit_seconds(self, gpus: u32, from: u64, to: u64) -> u64 {
        if to <= from || gpus == 0 {
            return 0;
        }
        if self.is_one() {
            return u64::from(gpus).saturating_mul(to - from);
        }
        let units = self.units(gpus);
        let at = |t: u64| (units * t as f64).round();
        // Far past any real run (2^53 unit-seconds): whole amounts, saturating.
        let (a, b) = (at(from), at(to));
        if b >= u64::MAX as f64 {
            return (units * (to - from) as f64).round().min(u64::MAX as f64) as u64;
        }
        (b - a).max(0.0) as u64
    }
}

/// GPUs per type as Slurm's nodes give them (`None`: GPUs without a
/// type): what the plugin counts on the nodes and hands the engine.
pub type Inventory = BTreeMap<Option<Arc<str>>, u32>;

/// One row of `[cluster.gpu_types]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuType {
    pub weight: Weight,
    /// GPUs of this type in the cluster, if the file says; otherwise the
    /// plugin counts them on Slurm's nodes.
    pub gpus: Option<u32>,
}

/// Why a `[cluster.gpu_types]` row was refused.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GpuTypeError {
    #[error("GPU type `{0}` is not a GRES type as Slurm spells it (1 to 64 letters, digits, `_`, `-` or `.`, starting with a letter or digit, as in gres.conf's Type=: e.g. h100, a100_80g)")]
    BadName(String),
    #[error("GPU type `{0}` is only digits: Slurm would read `gpu:{0}` as a count, not a type")]
    Digits(String),
    #[error("GPU types `{0}` and `{1}` differ only in case: Slurm matches types as written; keep one spelling")]
    CaseTwin(String, String),
    #[error(
        "weight {value} of GPU type `{name}` is not a finite number > 0 (one GPU-hour of it costs `weight` GPU-hours of budget; e.g. {name} = 2.2)"
    )]
    BadWeight { name: String, value: f64 },
    #[error("GPU type `{0}`: gpus = 0; give the number of GPUs of this type (at least 1), or leave it out to count Slurm's nodes")]
    NoGpus(String),
}

/// Longest GPU type name accepted.
pub const MAX_TYPE_LEN: usize = 64;

/// The one rule for GPU type names: GRES types as Slurm spells them
/// (`gres.conf`'s `Type=`, `--gres=gpu:TYPE:N`): 1 to [`MAX_TYPE_LEN`] of
/// `A-Z a-z 0-9 _ - .`, starting with a letter or digit, and not only
/// digits (`gpu:8` is a count). Matched as written (Slurm's type ids are
/// case-sensitive).
pub fn check_gpu_type_name(name: &str) -> Result<(), GpuTypeError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TYPE_LEN
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !ok {
        return Err(GpuTypeError::BadName(crate::text::clip(name)));
    }
    if name.chars().all(|c| c.is_ascii_digit()) {
        return Err(GpuTypeError::Digits(name.to_string()));
    }
    Ok(())
}

/// `[cluster.gpu_types]`, validated: every type's weight and, where the
/// file says, its GPUs. Empty (the default): every GPU weighs 1 and
/// nothing in Tally differs from a cluster without types.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuWeights {
    types: BTreeMap<Arc<str>, GpuType>,
}

impl GpuWeights {
    /// Validate a table (name, weight, GPUs). Errors come in the table's
    /// order: the first bad row.
    pub fn new<'a>(rows: impl IntoIterator<Item = (&'a str, f64, Option<u32>)>) -> Result<GpuWeights, GpuTypeError> {
        let mut types: BTreeMap<Arc<str>, GpuType> = BTreeMap::new();
        for (name, w, gpus) in rows {
            check_gpu_type_name(name)?;
            let weight = Weight::new(w).ok_or_else(|| GpuTypeError::BadWeight { name: name.to_string(), value: w })?;
            if gpus == Some(0) {
                return Err(GpuTypeError::NoGpus(name.to_string()));
            }
            if let Some(twin) = types.keys().find(|t| t.eq_ignore_ascii_case(name)) {
                return Err(GpuTypeError::CaseTwin(twin.to_string(), name.to_string()));
            }
            types.insert(name.into(), GpuType { weight, gpus });
        }
        Ok(GpuWeights { types })
    }

    /// No table: every GPU weighs 1.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// The rows, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &GpuType)> + '_ {
        self.types.iter()
    }

    /// The weight of a GPU of `gpu_type`: the table's, or 1 for an untyped
    /// GPU (`None`) and for a type the table does not name.
    pub fn weight(&self, gpu_type: Option<&str>) -> f64 {
        self.of(gpu_type).get()
    }

    /// [`GpuWeights::weight`] as a [`Weight`].
    pub fn of(&self, gpu_type: Option<&str>) -> Weight {
        gpu_type.and_then(|t| self.types.get(t)).map_or(Weight::ONE, |t| t.weight)
    }

    /// Budget units of `gpus` GPUs of `gpu_type` (`gpus × weight`).
    pub fn units(&self, gpus: u32, gpu_type: Option<&str>) -> f64 {
        self.of(gpu_type).units(gpus)
    }

    /// GPUs of each type of the table: the file's count, else the nodes'
    /// (`inventory`), else 0.
    pub fn typed_gpus(&self, inventory: &Inventory) -> BTreeMap<Arc<str>, u32> {
        self.types
            .iter()
            .map(|(name, t)| {
                let nodes = || inventory.get(&Some(name.clone())).copied().unwrap_or(0);
                (name.clone(), t.gpus.unwrap_or_else(nodes))
            })
            .collect()
    }

    /// The same weights without any count (every type's GPUs then come
    /// from the nodes).
    pub fn without_counts(&self) -> GpuWeights {
        GpuWeights { types: self.types.iter().map(|(n, t)| (n.clone(), GpuType { gpus: None, ..*t })).collect() }
    }

    /// GPUs the file gives a count for, summed (saturating).
    pub fn counted_gpus(&self) -> u32 {
        self.types.values().filter_map(|t| t.gpus).fold(0u32, u32::saturating_add)
    }

    /// The cluster's capacity in budget units (per second) for `total_gpus`
    /// GPUs:
    ///
    /// ```text
    /// Σ_typed count(t) × weight(t) + max(0, total − Σ_typed count(t)) × 1
    /// ```
    ///
    /// with `count(t)` from [`GpuWeights::typed_gpus`]: the GPUs of the
    /// table's types at their weights, the rest (untyped, or of a type the
    /// table does not name) at 1. Without a table: `total_gpus`.
    pub fn capacity_units(&self, total_gpus: u32, inventory: &Inventory) -> f64 {
        if self.is_empty() {
            return f64::from(total_gpus);
        }
        let typed = self.typed_gpus(inventory);
        let n: u64 = typed.values().map(|&g| u64::from(g)).sum();
        let weighted: f64 = typed.iter().map(|(t, &g)| self.units(g, Some(t))).sum();
        weighted + u64::from(total_gpus).saturating_sub(n) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HOUR_S;

    fn table() -> GpuWeights {
        GpuWeights::new([("h100", 1.0, Some(64)), ("b200", 2.2, None)]).unwrap()
    }

    #[test]
    fn a_type_not_in_the_table_and_an_untyped_gpu_weigh_one() {
        let w = table();
        assert_eq!(w.weight(Some("b200")), 2.2);
        assert_eq!(w.weight(Some("h100")), 1.0);
        assert_eq!(w.weight(Some("a100")), 1.0);
        assert_eq!(w.weight(Some("B200")), 1.0, "matched as written");
        assert_eq!(w.weight(None), 1.0);
        assert_eq!(GpuWeights::default().weight(Some("b200")), 1.0);
        assert_eq!(w.units(8, Some("b200")), 8.0 * 2.2);
    }

    #[test]
    fn capacity_counts_typed_gpus_at_their_weight_and_the_rest_at_one() {
        let w = table();
        let nodes: Inventory = [(Some("b200".into()), 32), (Some("h100".into()), 8), (None, 8)].into_iter().collect();
        // h100: the file's 64 (the nodes' 8 do not count); b200: the nodes' 32.
        assert_eq!(w.typed_gpus(&nodes).into_iter().collect::<Vec<_>>(), vec![("b200".into(), 32), ("h100".into(), 64)]);
        assert!((w.capacity_units(104, &nodes) - (64.0 + 32.0 * 2.2 + 8.0)).abs() < 1e-9);
        // Without the nodes: b200 unknown, so the 40 GPUs beyond the h100s weigh 1.
        assert_eq!(w.capacity_units(104, &Inventory::new()), 104.0);
        // More typed GPUs than the total: no negative remainder.
        assert!((w.capacity_units(64, &nodes) - (64.0 + 70.4)).abs() < 1e-9);
        assert_eq!(GpuWeights::default().capacity_units(96, &nodes), 96.0);
    }

    #[test]
    fn charges_add_up_over_a_run_without_drift() {
        let w = Weight::new(1.37).unwrap();
        // A 1-GPU run charged a minute at a time for a day: the pieces are
        // the whole, rounded once.
        let pieces: u64 = (0..1440).map(|m| w.unit_seconds(1, m * 60, (m + 1) * 60)).sum();
        assert_eq!(pieces, w.unit_seconds(1, 0, 86_400));
        assert_eq!(pieces, (1.37f64 * 86_400.0).round() as u64);
        // Weight 1: GPUs × seconds, exactly.
        assert_eq!(Weight::ONE.unit_seconds(8, 100, 3700), 8 * HOUR_S);
        assert_eq!(Weight::ONE.unit_seconds(u32::MAX, 0, u64::MAX), u64::MAX);
        assert_eq!(Weight::new(2.2).unwrap().unit_seconds(8, 0, 3600), 63_360);
        assert_eq!(Weight::new(2.2).unwrap().unit_seconds(8, 5, 5), 0);
        assert_eq!(Weight::new(1e300).unwrap().unit_seconds(8, 0, 10), u64::MAX);
    }

    #[test]
    fn bad_rows_say_what_is_wrong_and_what_is_allowed() {
        let err = |rows: &[(&str, f64, Option<u32>)]| GpuWeights::new(rows.iter().copied()).unwrap_err().to_string();
        assert_eq!(
            err(&[("h 100", 1.0, None)]),
            "GPU type `h 100` is not a GRES type as Slurm spells it (1 to 64 letters, digits, `_`, `-` or `.`, starting with a letter or digit, as in gres.conf's Type=: e.g. h100, a100_80g)"
        );
        assert!(err(&[("gpu:h100", 1.0, None)]).starts_with("GPU type `gpu:h100` is not a GRES type"));
        assert!(err(&[("_x", 1.0, None)]).starts_with("GPU type `_x` is not"));
        assert_eq!(err(&[("100", 1.0, None)]), "GPU type `100` is only digits: Slurm would read `gpu:100` as a count, not a type");
        assert_eq!(
            err(&[("b200", 0.0, None)]),
            "weight 0 of GPU type `b200` is not a finite number > 0 (one GPU-hour of it costs `weight` GPU-hours of budget; e.g. b200 = 2.2)"
        );
        assert!(err(&[("b200", f64::NAN, None)]).starts_with("weight NaN of GPU type `b200`"));
        assert!(err(&[("b200", f64::INFINITY, None)]).starts_with("weight inf of GPU type `b200`"));
        assert!(err(&[("b200", -1.0, None)]).starts_with("weight -1 of GPU type `b200`"));
        assert_eq!(
            err(&[("b200", 2.0, Some(0))]),
            "GPU type `b200`: gpus = 0; give the number of GPUs of this type (at least 1), or leave it out to count Slurm's nodes"
        );
        assert_eq!(
            err(&[("H100", 1.0, None), ("h100", 1.0, None)]),
            "GPU types `H100` and `h100` differ only in case: Slurm matches types as written; keep one spelling"
        );
        assert!(check_gpu_type_name("nvidia_h100-80GB.hbm3").is_ok());
        assert!(check_gpu_type_name(&"a".repeat(65)).is_err());
    }
}
