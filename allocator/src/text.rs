//! Input quoted back in messages, cut to a bounded length: a refusal says
//! what it refused without echoing a 20 MB field into a terminal or a log.

/// The most characters of one piece of input a message quotes.
pub const MAX_QUOTED_CHARS: usize = 64;

/// `s` whole when it is at most [`MAX_QUOTED_CHARS`] characters, else its
/// first [`MAX_QUOTED_CHARS`] and how long it was (`abc… (20000074 bytes)`).
pub fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_QUOTED_CHARS) {
        None => s.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes)", &s[..cut], s.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_cut_on_a_character_boundary() {
        assert_eq!(clip("2x"), "2x");
        let exact = "é".repeat(MAX_QUOTED_CHARS);
        assert_eq!(clip(&exact), exact);
        let long = "é".repeat(10_000);
        let c = clip(&long);
        assert!(c.starts_with(&"é".repeat(MAX_QUOTED_CHARS)) && c.ends_with("… (20000 bytes)"), "{c}");
        assert!(c.len() < 200);
    }
}
