//! Line numbers of byte offsets, for messages.

use std::cell::Cell;

/// 1-based line numbers of byte offsets in one text.
///
/// ```text
/// starts       = 0 and the offset after every '\n'      (one pass over the text)
/// line(offset) = #{ s ∈ starts : s ≤ offset }            (binary search)
/// ```
///
/// So `n` lookups in a text of `L` lines cost `L + n·⌈log₂(L + 1)⌉`, where
/// counting the newlines before each offset cost up to `n · text length`:
/// a tally.toml of 25,000 accounts in 4 MB took minutes to load. Offsets
/// past the end count as the end. The comparisons are counted
/// ([`LineIndex::probes`]) so tests can bound the work without a clock.
#[derive(Debug)]
pub struct LineIndex {
    starts: Vec<usize>,
    len: usize,
    probes: Cell<u64>,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let starts = std::iter::once(0).chain(text.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i + 1)).collect();
        LineIndex { starts, len: text.len(), probes: Cell::new(0) }
    }

    /// The 1-based line holding byte `offset` (a `'\n'` ends its line).
    pub fn line(&self, offset: usize) -> usize {
        let offset = offset.min(self.len);
        let (mut lo, mut hi) = (0, self.starts.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            self.probes.set(self.probes.get() + 1);
            if self.starts[mid] <= offset {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Lines in the text (a final `'\n'` opens an empty last line).
    pub fn lines(&self) -> usize {
        self.starts.len()
    }

    /// Comparisons made by [`LineIndex::line`] so far.
    pub fn probes(&self) -> u64 {
        self.probes.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every line number used to be: the newlines before the offset, plus one.
    fn by_counting(text: &str, offset: usize) -> usize {
        text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
    }

    #[test]
    fn lines_agree_with_counting_newlines() {
        for text in ["", "\n", "a", "a\n", "\n\n", "ab\ncd\n\nef", "[a]\r\nx = 1\r\n", "é\nü\n"] {
            let index = LineIndex::new(text);
            for offset in 0..=text.len() + 2 {
                assert_eq!(index.line(offset), by_counting(text, offset), "{text:?} at {offset}");
            }
        }
        assert_eq!(LineIndex::new("ab\ncd\n").lines(), 3);
    }

    #[test]
    fn each_lookup_is_a_binary_search() {
        // 20,000 tables of 3 lines: looking up every table's line costs at
        // most ⌈log₂(lines + 1)⌉ comparisons each (16 here), where counting
        // newlines read on average half the text (~1 MB) per lookup.
        let tables = 20_000;
        let text: String = (0..tables).map(|i| format!("[accounts.a{i:05}]\ngpu_hours = 1\n\n")).collect();
        let offsets: Vec<usize> = text.match_indices("[accounts.").map(|(o, _)| o).collect();
        let index = LineIndex::new(&text);
        assert_eq!(index.lines(), 3 * tables + 1);
        for (i, &offset) in offsets.iter().enumerate() {
            assert_eq!(index.line(offset), 3 * i + 1);
        }
        let per_lookup = (index.lines() as f64 + 1.0).log2().ceil() as u64;
        assert_eq!(per_lookup, 16);
        assert!(index.probes() <= tables as u64 * per_lookup, "{} comparisons", index.probes());
        assert!(index.probes() >= tables as u64 * (per_lookup - 1), "{} comparisons", index.probes());
    }
}
