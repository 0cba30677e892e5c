//! The budget's wall-clock cap (`Budget::time_cap`): the only place fast
//! mode's search reads the clock.
//!
//! Every loop of the search stops on counted work, so its plan is the same
//! on every machine. The cap is a safety on top of that (a slow machine,
//! an unforeseen instance): once it has passed, every loop stops as if its
//! work were spent and the best plan so far is kept. Only a search that
//! reaches it gives a plan that depends on the machine.

use std::time::{Duration, Instant};

/// The clock is read on every this-many-th question, so asking stays cheap
/// inside the search's innermost loops.
const READ_EVERY: u32 = 64;

/// The moment the search's loops stop whatever work they have left.
#[derive(Debug, Clone)]
pub(super) struct Deadline {
    /// The moment (`None`: no cap, or one too far away to represent).
    at: Option<Instant>,
    /// How many times `passed` was asked while it had not passed.
    asked: u32,
    /// Whether it has passed (once it has, the clock is not read again).
    passed: bool,
}

impl Deadline {
    /// No cap: the work alone decides (the decoder's state before `search`
    /// sets one, and in tests).
    pub(super) fn none() -> Deadline {
        Deadline { at: None, asked: 0, passed: false }
    }

    /// `cap` from now.
    pub(super) fn after(cap: Duration) -> Deadline {
        Deadline { at: Instant::now().checked_add(cap), ..Deadline::none() }
    }

    /// Whether the moment has passed, as of the last clock reading (the
    /// clock is read every `READ_EVERY`-th time this is asked).
    pub(super) fn passed(&mut self) -> bool {
        if self.passed {
            return true;
        }
        self.asked = self.asked.wrapping_add(1);
        if self.asked % READ_EVERY == 0 {
            self.passed = self.at.is_some_and(|at| Instant::now() >= at);
        }
        self.passed
    }
}
