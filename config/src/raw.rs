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
    /// `[cluster.gpu_types]`: type → weight, or `{ weight, gpus }`.
    pub gpu_types: Option<BTreeMap<String, Spanned<RawGpuType>>>,
}

/// One row of `[cluster.gpu_types]`: `b200 = 2.2` (a weight) or
/// `b200 = { weight = 2.2, gpus = 32 }` (a weight and a count; the weight
/// defaults to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawGpuType {
    pub weight: f64,
    pub gpus: Option<i64>,
}

/// The table form's keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpuTypeTable {
    weight: Option<f64>,
    gpus: Option<i64>,
}

impl<'de> Deserialize<'de> for RawGpuType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawGpuType;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a weight (a number > 0, e.g. b200 = 2.2) or a table such as b200 = { weight = 2.2, gpus = 32 }")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawGpuType, E> {
                Ok(RawGpuType { weight: v, gpus: None })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawGpuType, E> {
                Ok(RawGpuType { weight: v as f64, gpus: None })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawGpuType, E> {
                Ok(RawGpuType { weight: v as f64, gpus: None })
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<RawGpuType, A::Error> {
                let t = RawGpuTypeTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawGpuType { weight: t.weight.unwrap_or(1.0), gpus: t.gpus })
            }
        }
        d.deserialize_any(V)
    }
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
    /// Dropped: warned about and ignored, whatever its value ([`crate::DROPPED_KEYS`]).
    pub max_requeues: Option<Spanned<serde::de::IgnoredAny>>,
    pub long_jobs: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPriority {
    pub calc_period: Option<Duration>,
    /// Dropped: warned about and ignored, whatever its value ([`crate::DROPPED_KEYS`]).
    pub age_unit: Option<Spanned<serde::de::IgnoredAny>>,
    pub quick_time_limit: Option<Duration>,
    pub debug_max_gpus: Option<u32>,
    pub debug_max_contract: Option<Duration>,
    pub debug_lane: Option<bool>,
    /// Percent of a team's rate.
    pub debug_allowance: Option<f64>,
    /// A Slurm hostlist.
    pub debug_nodes: Option<String>,
    /// Dropped: warned about and ignored, whatever its value.
    pub debug_lane_gpus: Option<Spanned<serde::de::IgnoredAny>>,
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

/// Every key tally.toml accepts, as dotted paths in file order of the raw
/// types: `cluster.gpus`, ... `accounts.*.share`, `users.*` (`*`: a name
/// of the file's choosing). Read from the field lists serde's derive passes
/// to the deserializer (the same lists `deny_unknown_fields` checks keys
/// against), so a field added to a raw struct is listed here without
/// anyone writing it down; the man page test compares them with
/// docs/man/tally.toml.5.
///
/// # Panics
///
/// When [`RawConfig`] has a table this function does not map to its raw
/// type (a new table must be added to the `match`).
pub fn accepted_keys() -> Vec<String> {
    let mut keys = Vec::new();
    for &table in fields_of::<RawConfig>() {
        let (prefix, fields) = match table {
            "cluster" => ("cluster", fields_of::<RawCluster>()),
            "ledger" => ("ledger", fields_of::<RawLedger>()),
            "contracts" => ("contracts", fields_of::<RawContracts>()),
            "priority" => ("priority", fields_of::<RawPriority>()),
            "planner" => ("planner", fields_of::<RawPlanner>()),
            "log" => ("log", fields_of::<RawLog>()),
            "reports" => ("reports", fields_of::<RawReports>()),
            "accounts" => ("accounts.*", fields_of::<RawAccount>()),
            // A map of user name to account name: no fields of its own.
            "users" => {
                keys.push("users.*".to_string());
                continue;
            }
            other => panic!("raw::accepted_keys: RawConfig's table `{other}` is not mapped to its raw type here"),
        };
        keys.extend(fields.iter().map(|f| format!("{prefix}.{f}")));
    }
    keys
}

/// The field names serde's derive gives `T` (`T` must be a struct).
fn fields_of<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    let mut fields = None;
    // Always an error: FieldNames only records the list and stops.
    let _ = T::deserialize(FieldNames(&mut fields));
    fields.unwrap_or_else(|| panic!("{} is not a struct with named fields", std::any::type_name::<T>()))
}

/// A deserializer that answers nothing: it records the field list of the
/// struct asked for and fails.
struct FieldNames<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_struct<V: Visitor<'de>>(self, _name: &'static str, fields: &'static [&'static str], _visitor: V) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(de::Error::custom("field names recorded"))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
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
