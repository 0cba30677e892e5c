//! Shared names looked up once: a moment's jobs share their account names
//! (`Arc<str>`, a few hundred distinct among 100,000s of jobs), so a name's
//! address tells the distinct ones apart without hashing the text.

use rustc_hash::FxHashMap;
use std::marker::PhantomData;
use std::sync::Arc;

/// A memo from shared names to what was computed from each, keyed by the
/// name's address (the last one asked for kept aside: jobs come in runs of
/// the same account). The names are borrowed for the memo's life (`'a`), so
/// no address can be freed and reused by another name meanwhile.
#[derive(Debug)]
pub struct ByName<'a, T> {
    by_address: FxHashMap<*const u8, T>,
    last: Option<(*const u8, T)>,
    names: PhantomData<&'a Arc<str>>,
}

impl<T> Default for ByName<'_, T> {
    fn default() -> Self {
        ByName { by_address: FxHashMap::default(), last: None, names: PhantomData }
    }
}

impl<'a, T: Copy> ByName<'a, T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// What `compute` gave for this name, computed the first time the
    /// name (this shared copy of it) is seen.
    pub fn get(&mut self, name: &'a Arc<str>, compute: impl FnOnce(&'a str) -> T) -> T {
        let at = name.as_ptr();
        match self.last {
            Some((p, v)) if p == at => v,
            _ => {
                let v = *self.by_address.entry(at).or_insert_with(|| compute(name));
                self.last = Some((at, v));
                v
            }
        }
    }
}

impl<'a> ByName<'a, ()> {
    /// True the first time this shared name is seen.
    pub fn first(&mut self, name: &'a Arc<str>) -> bool {
        let mut first = false;
        self.get(name, |_| first = true);
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shared_name_is_computed_once() {
        let (a, b) = (Arc::<str>::from("nlp"), Arc::<str>::from("vision"));
        let a2 = a.clone();
        let mut calls = 0;
        let mut memo = ByName::new();
        for n in [&a, &b, &a2, &a] {
            memo.get(n, |s| {
                calls += 1;
                s.len()
            });
        }
        assert_eq!(calls, 2, "one computation per distinct shared name");
        assert_eq!(memo.get(&b, |_| 0), 6);
        let mut seen = ByName::new();
        assert!(seen.first(&a) && !seen.first(&a2) && seen.first(&b));
    }
}
