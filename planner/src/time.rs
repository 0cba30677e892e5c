//! Seconds in a minute, an hour, a day and a week. Mirrors the constants in
//! `tally_allocator` (`allocator/src/duration.rs`): the two crates share no
//! code, so each names them once. `HOUR` is the hour as f64.

pub const MINUTE_S: u64 = 60;
pub const HOUR_S: u64 = 3_600;
pub const DAY_S: u64 = 86_400;
pub const WEEK_S: u64 = 7 * DAY_S;
pub const HOUR: f64 = HOUR_S as f64;
