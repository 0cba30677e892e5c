//! Job metadata from a job's comment: the one definition of the tokens
//! `class=<class>`, `model_params=<n>` and `method=<name>`.
//!
//! Comment grammar (as `allocator/src/contract.rs` documents for
//! `contract=` and `resumable`): the comment is split into tokens at `,`,
//! `;` and whitespace; a token `key=value` whose key is one of ours
//! (case-insensitively) is read, every other token is ignored (it may be
//! Tally's contract, or the user's own text). So
//! `sbatch --comment "contract=2h,resumable class=training model_params=7b method=lora"`
//! carries all of them.
//!
//! - `class=<class>`: the kind of work, lower-cased (`training`,
//!   `batch_inference`, …); this module does not know the list of classes
//!   (the simulator's `Class` does), it only reads the word.
//! - `model_params=<n>`: parameters of the model, a number with an optional
//!   suffix `k`, `m`, `b` (or `g`) or `t` (case-insensitive, ×10³ … ×10¹²):
//!   `7b`, `70B`, `1.5b`, `350m`, `125000000`.
//! - `method=<name>`: how the model is trained or served (`lora`, `full`,
//!   `qlora`, `gptq` …), lower-cased.
//!
//! Reading never fails: a bad value is left out of the [`CommentMeta`] and
//! reported as a [`MetaError`] beside it, so an importer can count the
//! comments it could not read instead of refusing a whole history. The
//! first of a repeated key wins (the others are reported).

use thiserror::Error;

/// What a comment says about its job. `None`: not given (or not readable).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommentMeta {
    /// `class=`, lower-cased.
    pub class: Option<String>,
    /// `model_params=`, in parameters (`7b` → 7e9).
    pub model_params: Option<f64>,
    /// `method=`, lower-cased.
    pub method: Option<String>,
}

/// A token of ours that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MetaError {
    #[error("`{key}=` has no value (write e.g. class=training, model_params=7b, method=lora)")]
    Empty { key: &'static str },
    #[error(
        "model_params=`{value}` is not a parameter count: expected a number > 0 with an optional suffix k, m, b or t (e.g. 7b, 70B, 1.5b, 350m)"
    )]
    ModelParams { value: String },
    #[error("`{key}=` is given twice (`{first}` and `{second}`); the first is used")]
    Duplicate { key: &'static str, first: String, second: String },
}

const KEYS: [&str; 3] = ["class", "model_params", "method"];

/// Parse a parameter count: `7b` → 7e9, `350m` → 3.5e8, `1.5B` → 1.5e9,
/// `125000000` → 1.25e8. A number > 0 (finite) with an optional suffix
/// `k`, `m`, `b`/`g` or `t`.
pub fn parse_model_params(value: &str) -> Result<f64, MetaError> {
    let bad = || MetaError::ModelParams { value: value.to_string() };
    let v = value.trim();
    let (number, scale) = match v.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&v[..v.len() - 1], 1e3),
        Some('m') => (&v[..v.len() - 1], 1e6),
        Some('b') | Some('g') => (&v[..v.len() - 1], 1e9),
        Some('t') => (&v[..v.len() - 1], 1e12),
        Some(_) => (v, 1.0),
        None => return Err(bad()),
    };
    // Digits and one dot only: no sign, exponent, `inf` or `nan`.
    let digits = number.chars().filter(|c| c.is_ascii_digit()).count();
    if digits == 0 || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let n: f64 = number.parse().map_err(|_| bad())?;
    let params = n * scale;
    if params.is_finite() && params > 0.0 {
        Ok(params)
    } else {
        Err(bad())
    }
}

/// The model-size bucket of a parameter count: half decades,
/// `floor(2 × log10(params))` (so 1-3.16B is 18, 3.16-10B is 19, 10-31.6B
/// is 20, 31.6-100B is 21): jobs of 7B and 8B models share a bucket, 7B and
/// 70B do not. `None` for a count that is not > 0.
pub fn model_bucket(params: f64) -> Option<i32> {
    (params.is_finite() && params > 0.0).then(|| (2.0 * params.log10()).floor() as i32)
}

impl CommentMeta {
    /// Read a comment's tokens (as Tally splits every comment:
    /// `tally_allocator::comment_tokens`; this crate shares no code with
    /// that one, so the caller splits): what they say, and the tokens of
    /// ours that could not be read (never fatal).
    pub fn from_tokens<'a>(tokens: impl IntoIterator<Item = &'a str>) -> (CommentMeta, Vec<MetaError>) {
        let mut meta = CommentMeta::default();
        let mut errors = Vec::new();
        // The first raw value of each key, for duplicates.
        let mut seen: [Option<&str>; 3] = [None; 3];
        for tok in tokens {
            let Some((key, value)) = tok.split_once('=') else { continue };
            let Some(k) = KEYS.iter().position(|name| key.eq_ignore_ascii_case(name)) else { continue };
            let key = KEYS[k];
            if let Some(first) = seen[k] {
                errors.push(MetaError::Duplicate { key, first: first.to_string(), second: value.to_string() });
                continue;
            }
            seen[k] = Some(value);
            if value.is_empty() {
                errors.push(MetaError::Empty { key });
                continue;
            }
            match k {
                0 => meta.class = Some(value.to_ascii_lowercase()),
                1 => match parse_model_params(value) {
                    Ok(p) => meta.model_params = Some(p),
                    Err(e) => errors.push(e),
                },
                _ => meta.method = Some(value.to_ascii_lowercase()),
            }
        }
        (meta, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_with_and_without_suffix() {
        let ok = [
            ("7b", 7e9),
            ("70B", 70e9),
            ("1.5b", 1.5e9),
            ("350m", 350e6),
            ("350M", 350e6),
            ("125k", 125e3),
            ("1t", 1e12),
            ("13g", 13e9),
            ("125000000", 1.25e8),
            (".5b", 0.5e9),
        ];
        for (raw, want) in ok {
            let got = parse_model_params(raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
            assert!((got - want).abs() <= want * 1e-12, "{raw}: {got} != {want}");
        }
        for raw in ["", "b", "7x", "-7b", "0", "0b", "7bb", "1e9", "inf", "nan", "7 b", "1.2.3b", "."] {
            assert_eq!(parse_model_params(raw), Err(MetaError::ModelParams { value: raw.to_string() }), "{raw:?}");
        }
        assert_eq!(
            parse_model_params("7x").unwrap_err().to_string(),
            "model_params=`7x` is not a parameter count: expected a number > 0 with an optional suffix k, m, b or t (e.g. 7b, 70B, 1.5b, 350m)"
        );
    }

    #[test]
    fn keys_among_other_tokens() {
        let (m, e) = CommentMeta::from_tokens(["contract=2h", "resumable", "class=Training", "model_params=7b", "method=LoRA", "my", "words"]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(m, CommentMeta { class: Some("training".into()), model_params: Some(7e9), method: Some("lora".into()) });
        // Keys case-insensitively; unknown keys and the user's text ignored.
        let (m, e) = CommentMeta::from_tokens(["CLASS=debug", "foo=bar", "Method=full", "x=1"]);
        assert!(e.is_empty());
        assert_eq!(m, CommentMeta { class: Some("debug".into()), model_params: None, method: Some("full".into()) });
        assert_eq!(CommentMeta::from_tokens([]), (CommentMeta::default(), vec![]));
        // `classes=x` or a bare `class` are not ours.
        assert_eq!(CommentMeta::from_tokens(["classes=x", "class"]), (CommentMeta::default(), vec![]));
    }

    #[test]
    fn bad_values_are_reported_not_fatal() {
        let (m, e) = CommentMeta::from_tokens(["class=training", "model_params=huge", "method=", "class=debug"]);
        assert_eq!(m, CommentMeta { class: Some("training".into()), model_params: None, method: None });
        assert_eq!(
            e,
            vec![
                MetaError::ModelParams { value: "huge".into() },
                MetaError::Empty { key: "method" },
                MetaError::Duplicate { key: "class", first: "training".into(), second: "debug".into() },
            ]
        );
        assert_eq!(e[2].to_string(), "`class=` is given twice (`training` and `debug`); the first is used");
    }

    #[test]
    fn buckets_are_half_decades() {
        assert_eq!(model_bucket(7e9), model_bucket(8e9));
        assert_ne!(model_bucket(7e9), model_bucket(70e9));
        assert_eq!(model_bucket(1e9), Some(18));
        assert_eq!(model_bucket(3.0e9), Some(18));
        assert_eq!(model_bucket(3.2e9), Some(19));
        assert_eq!(model_bucket(0.0), None);
        assert_eq!(model_bucket(f64::NAN), None);
    }
}
