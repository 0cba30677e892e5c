//! Durations as people write them in slurm.conf-like files and job comments:
//! `0`, `45s`, `90m`, `2h`, `1h30m`, `7d`.
//!
//! One parser for contracts (`contract=2h`) and config keys (`window = "7d"`),
//! so both accept and reject exactly the same spellings.

use crate::text::clip;
use thiserror::Error;

/// Why a duration string was refused. Each variant names the problem; the
/// `Display` text says what is allowed. Input is quoted cut ([`clip`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    #[error("empty duration (write e.g. 90m, 2h or 1h30m)")]
    Empty,
    #[error("negative duration `{0}` (durations are >= 0)")]
    Negative(String),
    #[error("`{0}` has no unit (use d, h, m or s, e.g. 90m; only 0 may stand alone)")]
    MissingUnit(String),
    #[error("unknown unit `{unit}` in `{input}` (use d, h, m or s)")]
    UnknownUnit { input: String, unit: String },
    #[error("unit `{unit}` repeated or out of order in `{input}` (write largest first, each once: 1d2h30m)")]
    UnitOrder { input: String, unit: char },
    #[error("`{0}` is not a duration (write e.g. 90m, 2h or 1h30m)")]
    Malformed(String),
    #[error("`{0}` is too large")]
    Overflow(String),
}

const UNITS: [(char, u64); 4] = [('d', DAY_S), ('h', HOUR_S), ('m', MINUTE_S), ('s', 1)];

/// Seconds in a minute, an hour, a day and a week: the one place they are
/// named (the planner, which shares no code with this crate, has its own
/// `planner::time`). In seconds, as every time in Tally; `HOUR` is the
/// hour as f64, for GPU-seconds → GPU-hours.
pub const MINUTE_S: u64 = 60;
pub const HOUR_S: u64 = 3_600;
pub const DAY_S: u64 = 86_400;
pub const WEEK_S: u64 = 7 * DAY_S;
pub const HOUR: f64 = HOUR_S as f64;

/// Parse a duration into whole seconds.
///
/// Grammar: `0` | (`<digits><unit>`)+ with units `d h m s`, each at most once,
/// largest first. Surrounding ASCII whitespace is ignored; nothing else is.
pub fn parse_duration(input: &str) -> Result<u64, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(clip(s)));
    }
    if s.chars().all(|c| c.is_ascii_digit()) {
        // A bare number is only allowed for zero: `90` could mean minutes
        // (Slurm's --time) or seconds; we refuse to guess.
        return if s.bytes().all(|b| b == b'0') { Ok(0) } else { Err(DurationError::MissingUnit(clip(s))) };
    }
    let mut total: u64 = 0;
    let mut next_unit = 0usize; // index into UNITS: units must come in order
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if digits.is_empty() {
            return Err(DurationError::Malformed(clip(s)));
        }
        let lc = c.to_ascii_lowercase();
        let Some(pos) = UNITS.iter().position(|(u, _)| *u == lc) else {
            return Err(DurationError::UnknownUnit { input: clip(s), unit: c.to_string() });
        };
        if pos < next_unit {
            return Err(DurationError::UnitOrder { input: clip(s), unit: lc });
        }
        next_unit = pos + 1;
        let n: u64 = digits.parse().map_err(|_| DurationError::Overflow(clip(s)))?;
        let add = n.checked_mul(UNITS[pos].1).ok_or_else(|| DurationError::Overflow(clip(s)))?;
        total = total.checked_add(add).ok_or_else(|| DurationError::Overflow(clip(s)))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(DurationError::MissingUnit(clip(s)));
    }
    Ok(total)
}

/// Format seconds in the canonical spelling `parse_duration` reads back:
/// largest units first, zero parts left out, `0` for zero (`5400` → `1h30m`).
pub fn format_duration(mut secs: u64) -> String {
    if secs == 0 {
        return "0".to_string();
    }
    let mut out = String::new();
    for (unit, size) in UNITS {
        let n = secs / size;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push(unit);
            secs -= n * size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let ok: &[(&str, u64)] = &[
            ("0", 0),
            ("000", 0),
            ("0s", 0),
            ("45s", 45),
            ("90m", 5400),
            ("2h", 7200),
            ("1h30m", 5400),
            ("1H30M", 5400),
            ("7d", 604_800),
            ("1d2h3m4s", 93_784),
            (" 8h ", 28_800),
        ];
        for (s, want) in ok {
            assert_eq!(parse_duration(s), Ok(*want), "{s}");
        }
        type Case = (&'static str, fn(&DurationError) -> bool);
        let bad: &[Case] = &[
            ("", |e| matches!(e, DurationError::Empty)),
            ("   ", |e| matches!(e, DurationError::Empty)),
            ("-1h", |e| matches!(e, DurationError::Negative(_))),
            ("90", |e| matches!(e, DurationError::MissingUnit(_))),
            ("1h30", |e| matches!(e, DurationError::MissingUnit(_))),
            ("2x", |e| matches!(e, DurationError::UnknownUnit { .. })),
            ("2 h", |e| matches!(e, DurationError::UnknownUnit { .. })),
            ("30m1h", |e| matches!(e, DurationError::UnitOrder { .. })),
            ("1h1h", |e| matches!(e, DurationError::UnitOrder { .. })),
            ("h", |e| matches!(e, DurationError::Malformed(_))),
            ("1.5h", |e| matches!(e, DurationError::UnknownUnit { .. })),
            ("99999999999999999999h", |e| matches!(e, DurationError::Overflow(_))),
            ("9999999999999999d", |e| matches!(e, DurationError::Overflow(_))),
        ];
        for (s, pred) in bad {
            let err = parse_duration(s).expect_err(s);
            assert!(pred(&err), "{s}: {err:?}");
        }
    }

    #[test]
    fn format_round_trips() {
        for secs in [0, 1, 59, 60, 61, 3599, 3600, 5400, 86_399, 86_400, 604_800, 93_784] {
            let s = format_duration(secs);
            assert_eq!(parse_duration(&s), Ok(secs), "{s}");
        }
        assert_eq!(format_duration(5400), "1h30m");
        assert_eq!(format_duration(28_800), "8h");
    }
}
