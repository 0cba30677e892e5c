//! The file as written: serde types with unknown keys refused.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub cluster: Option<RawCluster>,
    pub ledger: Option<RawLedger>,
    pub contracts: Option<RawContracts>,
    pub priority: Option<RawPriority>,
    pub planner: Option<RawPlanner>,
    pub log: Option<RawLog>,
    pub reports: Option<RawReports>,
    #[serde(default)]
    pub accounts: BTreeMap<String, Spanned<RawAccount>>,
    #[serde(default)]
    pub users: BTreeMap<String, Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub name: Option<String>,
    pub gpus: Option<u32>,
    pub gpus_per_node: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLedger {
    pub window: Option<Duration>,
    pub bucket: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawContracts {
    pub max: Option<Duration>,
    pub missing: Option<String>,
    pub unallocated_below: Option<Spanned<Duration>>,
    pub require_funded_account: Option<bool>,
    pub power_of_two_gpus: Option<bool>,
    pub max_requeues: Option<u32>,
    pub long_jobs: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPriority {
    pub calc_period: Option<Duration>,
    pub age_unit: Option<Duration>,
    pub quick_time_limit: Option<Duration>,
    pub debug_lane: Option<bool>,
    pub debug_lane_gpus: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlanner {
    pub enabled: Option<bool>,
    pub interval: Option<Duration>,
    pub step: Option<Duration>,
    pub horizon: Option<Duration>,
    pub decay: Option<f64>,
    pub max_jobs: Option<usize>,
    pub default_duration: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub debug: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReports {
    pub private: Option<bool>,
    pub admins: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccount {
    pub parent: Option<String>,
    /// Percent of the parent.
    pub share: Option<f64>,
    /// GPU-hours per window.
    pub gpu_hours: Option<f64>,
}

/// A duration written as a string (`"7d"`, `"90m"`), in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Duration(pub u64);

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"7d\", \"8h\", \"90m\" or \"1h30m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                tally_allocator::parse_duration(v).map(Duration).map_err(|e| E::custom(e))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                if v == 0 {
                    Ok(Duration(0))
                } else {
                    Err(E::custom(format!("`{v}` has no unit: write it as a string such as \"{v}m\" or \"{v}h\"")))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Parse TOML into [`RawConfig`]; on failure (key path, line, message).
pub fn parse(text: &str) -> Result<RawConfig, (String, Option<usize>, String)> {
    parse_as(text)
}

/// Parse TOML into any raw type; on failure (key path, line, message).
pub fn parse_as<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, (String, Option<usize>, String)> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // Spanned<T> shows up as a private segment of the path: drop it.
        let path = e.path().to_string().replace(".$__serde_spanned_private_value", "");
        let inner = e.into_inner();
        let line = inner.span().map(|s| crate::lines::LineIndex::new(text).line(s.start));
        let key = if path == "." { String::new() } else { path };
        (key, line, inner.message().trim().to_string())
    })
}
