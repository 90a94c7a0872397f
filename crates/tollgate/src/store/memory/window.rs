//! [`Window`]: what a window's cell holds (and a named token bucket's), compactly.
//!
//! Every key of the windows table pays for the largest state it could hold, so the rare part of
//! a state is kept out of line: a sliding counter's counts carried from an earlier width (the
//! width changed under its name in the last two old widths) live in a box, allocated while they
//! slide out and freed at the first charge after. The inline part is a sliding counter's four
//! numbers or a sliding log's list, beside the policy last charged. Decisions see the
//! algorithm's [`BucketState`], taken out of the cell and put back.

use crate::algorithm::BucketState;
use crate::algorithm::fixed_window::FixedWindowState;
use crate::algorithm::sliding_counter::{Carried, SlidingCounterState};
use crate::algorithm::sliding_log::SlidingLogState;
use crate::{Nanos, Policy};

/// The state of a window bucket.
pub(crate) struct Window {
    state: Stored,
    /// The policy the state was last charged under; `None` when never charged.
    pub(crate) policy: Option<Policy>,
}

/// [`BucketState`] with a sliding counter's carried counts out of line.
enum Stored {
    TokenBucket(Nanos),
    FixedWindow(FixedWindowState),
    SlidingWindowLog(SlidingLogState),
    /// A sliding counter carrying nothing from an earlier width: the common case.
    SlidingWindowCounter(Counts),
    /// A sliding counter while counts of an earlier width slide out.
    Carrying(Box<SlidingCounterState>),
}

/// A sliding counter's numbers, without carried counts.
#[derive(Clone, Copy)]
struct Counts {
    window: u64,
    previous: u64,
    current: u64,
    width: u64,
}

impl Window {
    /// A key never seen: any state of another algorithm reads as a fresh one (see
    /// `algorithm::evaluate`).
    pub(crate) fn fresh() -> Window {
        Window {
            state: Stored::TokenBucket(Nanos::ZERO),
            policy: None,
        }
    }

    /// A copy of the state.
    pub(crate) fn state(&self) -> BucketState {
        match &self.state {
            Stored::TokenBucket(tat) => BucketState::TokenBucket(*tat),
            Stored::FixedWindow(s) => BucketState::FixedWindow(*s),
            Stored::SlidingWindowLog(log) => BucketState::SlidingWindowLog(log.clone()),
            Stored::SlidingWindowCounter(c) => BucketState::SlidingWindowCounter(c.state()),
            Stored::Carrying(s) => BucketState::SlidingWindowCounter(**s),
        }
    }

    /// Replaces the state. A carrying counter's box is reused while it still carries, and
    /// freed once it carries nothing.
    pub(crate) fn set(&mut self, state: BucketState) {
        self.state = match state {
            BucketState::TokenBucket(tat) => Stored::TokenBucket(tat),
            BucketState::FixedWindow(s) => Stored::FixedWindow(s),
            BucketState::SlidingWindowLog(log) => Stored::SlidingWindowLog(log),
            BucketState::SlidingWindowCounter(s) if s.carried == Carried::default() => {
                Stored::SlidingWindowCounter(Counts::of(&s))
            }
            BucketState::SlidingWindowCounter(s) => match &mut self.state {
                Stored::Carrying(boxed) => {
                    **boxed = s;
                    return;
                }
                _ => Stored::Carrying(Box::new(s)),
            },
        };
    }

    /// Runs `f` on the state and the policy it was last charged under, which it may change.
    /// A sliding log's list is moved out and back, never copied.
    pub(crate) fn with_state<R>(
        &mut self,
        f: impl FnOnce(&mut BucketState, &mut Option<Policy>) -> R,
    ) -> R {
        let mut state = match &mut self.state {
            Stored::SlidingWindowLog(log) => BucketState::SlidingWindowLog(std::mem::take(log)),
            _ => self.state(),
        };
        let result = f(&mut state, &mut self.policy);
        self.set(state);
        result
    }

    /// The bytes the state holds outside the cell: a sliding log's entries, a counter's carried
    /// counts while it has some.
    pub(crate) fn heap_bytes(&self) -> usize {
        match &self.state {
            Stored::SlidingWindowLog(log) => log.heap_bytes(),
            Stored::Carrying(_) => std::mem::size_of::<SlidingCounterState>(),
            _ => 0,
        }
    }
}

impl Counts {
    fn of(state: &SlidingCounterState) -> Counts {
        Counts {
            window: state.window,
            previous: state.previous,
            current: state.current,
            width: state.width,
        }
    }

    fn state(self) -> SlidingCounterState {
        SlidingCounterState {
            window: self.window,
            previous: self.previous,
            current: self.current,
            width: self.width,
            carried: Carried::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Stored, Window};
    use crate::algorithm::{BucketState, evaluate};
    use crate::{Nanos, Policy};

    const MS: u64 = 1_000_000;

    /// A change of width boxes the carried counts; once they have slid out, the next write
    /// frees the box, and every state read back is the one written.
    #[test]
    fn carried_counts_are_boxed_while_they_slide_out() {
        let second = Policy::sliding_window_counter(10, Duration::from_secs(1)).unwrap();
        let minute = Policy::sliding_window_counter(10, Duration::from_secs(60)).unwrap();
        let mut window = Window::fresh();
        let charge = |window: &mut Window, policy: &Policy, at: u64| {
            window.with_state(|state, last| {
                let outcome = evaluate(policy, state, Nanos::new(at * MS), 1).unwrap();
                assert!(outcome.allowed());
                outcome.apply(state);
                *last = Some(*policy);
            });
            window.state()
        };
        let written = charge(&mut window, &second, 5_000);
        assert!(matches!(window.state, Stored::SlidingWindowCounter(_)));
        assert_eq!(window.heap_bytes(), 0);
        // At 5.5 s under the minute: the second's count is carried, in a box.
        let carrying = charge(&mut window, &minute, 5_500);
        assert_ne!(carrying, written);
        assert!(matches!(window.state, Stored::Carrying(_)));
        assert_eq!(window.heap_bytes(), 64);
        // Still sliding out at 6.5 s: the box stays, with the new counts.
        let again = charge(&mut window, &minute, 6_500);
        assert_ne!(again, carrying);
        assert!(matches!(window.state, Stored::Carrying(_)));
        // Gone at 7 s: the first write after frees the box.
        let after = charge(&mut window, &minute, 7_000);
        let BucketState::SlidingWindowCounter(state) = after else {
            panic!("a counter's state: {after:?}");
        };
        assert_eq!(state.current, 3);
        assert!(matches!(window.state, Stored::SlidingWindowCounter(_)));
        assert_eq!(window.heap_bytes(), 0);
    }
}
