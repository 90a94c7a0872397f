//! The sliding-window counter: the weighted two-window approximation.
//!
//! Windows are aligned to the UNIX epoch. At `elapsed` into the current window the estimate is
//! `previous × (window - elapsed) / window + current`, compared in integers
//! (`previous × (window - elapsed) + current × window <= limit × window`). It assumes the
//! previous window's requests were spread evenly: when they were bunched at its end, up to
//! nearly twice the limit can pass in one sliding window; when at its start, fewer than the limit.
//! Use [`sliding_log`](super::sliding_log) when that matters.
//!
//! **A limit that changes.** A new limit applies to the counts already taken. A new width
//! (the state remembers the width it counted with): the estimate under the old width at `now`,
//! rounded up and capped at the new limit, becomes the count of the new width's current window,
//! and slides out from there. No count is forgotten sooner than the estimate would forget it,
//! beyond the cap: an estimate above the new limit already denies the whole window.

use crate::{CheckError, Decision, Nanos, Policy};

/// The counts of one key. `Default` is a key never seen. Opaque: its layout is the stores'
/// business, and may change without a major version.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::sliding_counter::{decide, SlidingCounterState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::sliding_window_counter(2, Duration::from_secs(1))?;
/// let mut state = SlidingCounterState::default();
/// for now in [100, 200] {
///     let outcome = decide(&policy, state, Nanos::new(now), 1)?;
///     assert!(outcome.allowed());
///     state = outcome.new_state();
/// }
/// assert!(!decide(&policy, state, Nanos::new(300), 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingCounterState {
    /// `now / window` of the current window.
    pub(crate) window: u64,
    /// Cost taken in the window before it.
    pub(crate) previous: u64,
    /// Cost taken in it.
    pub(crate) current: u64,
    /// The window's width, in the clock's unit, when the counts were taken (0: never written).
    pub(crate) width: u64,
}

/// The result of evaluating one check, before anyone writes.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::sliding_counter::{decide, SlidingCounterState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::sliding_window_counter(100, Duration::from_secs(60))?;
/// let outcome = decide(&policy, SlidingCounterState::default(), Nanos::new(1), 30)?;
/// assert!(outcome.allowed());
/// assert_eq!(outcome.decision(true).remaining(), 70);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCounterOutcome {
    limit: u64,
    width: u64,
    elapsed: u64,
    state: SlidingCounterState,
    cost: u64,
    allowed: bool,
}

/// Evaluates taking `cost` at `now` (refused past [`MAX_NOW`](crate::algorithm::gcra::MAX_NOW)).
pub fn decide(
    policy: &Policy,
    state: SlidingCounterState,
    now: Nanos,
    cost: u64,
) -> Result<SlidingCounterOutcome, CheckError> {
    crate::algorithm::gcra::check_now(now)?;
    let limit = policy.capacity();
    if cost > limit {
        return Err(CheckError::CostExceedsCapacity {
            cost,
            capacity: limit,
        });
    }
    let width = policy.period_nanos().as_u64();
    let index = now.as_u64() / width;
    let state = carry_over(state, width, limit, now);
    let (state, elapsed) = if index < state.window {
        // The clock stepped back: weigh the previous window fully (the most conservative view).
        (state, 0)
    } else {
        let rolled = match index - state.window {
            0 => state,
            1 => SlidingCounterState {
                window: index,
                previous: state.current,
                current: 0,
                width,
            },
            _ => SlidingCounterState {
                window: index,
                previous: 0,
                current: 0,
                width,
            },
        };
        (rolled, now.as_u64() - index * width)
    };
    let outcome = SlidingCounterOutcome {
        limit,
        width,
        elapsed,
        state,
        cost,
        allowed: true,
    };
    Ok(SlidingCounterOutcome {
        allowed: cost == 0 || outcome.weighted(state.current + cost) <= wide(limit) * wide(width),
        ..outcome
    })
}

/// The state under a new width: the old estimate at `now`, rounded up and capped at `limit`,
/// as the count of the new current window.
fn carry_over(
    state: SlidingCounterState,
    width: u64,
    limit: u64,
    now: Nanos,
) -> SlidingCounterState {
    if state.width == width || state.width == 0 {
        return SlidingCounterState { width, ..state };
    }
    let old = state.width;
    let index = now.as_u64() / old;
    // The estimate scaled by the old width: previous × (old - elapsed) + current × old.
    let scaled = if index < state.window {
        (wide(state.previous) + wide(state.current)) * wide(old)
    } else {
        let elapsed = wide(now.as_u64() - index * old);
        match index - state.window {
            0 => wide(state.previous) * (wide(old) - elapsed) + wide(state.current) * wide(old),
            1 => wide(state.current) * (wide(old) - elapsed),
            _ => 0,
        }
    };
    SlidingCounterState {
        window: now.as_u64() / width,
        previous: 0,
        current: narrow(scaled.div_ceil(wide(old))).min(limit),
        width,
    }
}

fn wide(n: u64) -> u128 {
    u128::from(n)
}

fn narrow(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl SlidingCounterOutcome {
    /// `previous × (window - elapsed) + current × window`: the estimate scaled by `window`.
    fn weighted(&self, current: u64) -> u128 {
        wide(self.state.previous) * wide(self.width - self.elapsed)
            + wide(current) * wide(self.width)
    }

    /// Whether the estimate has room for the cost.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The state to store when the cost is taken.
    pub fn new_state(&self) -> SlidingCounterState {
        SlidingCounterState {
            current: self.state.current + self.cost,
            ..self.state
        }
    }

    /// The shortest wait until the estimate has room for the cost, or for one token when the
    /// check is a peek (cost 0); zero when it has room now.
    fn wait(&self) -> u64 {
        let probe = self.cost.max(1);
        let (limit, w, e) = (wide(self.limit), wide(self.width), wide(self.elapsed));
        let (p, c, cost) = (
            wide(self.state.previous),
            wide(self.state.current),
            wide(probe),
        );
        if self.weighted(self.state.current.saturating_add(probe)) <= limit * w {
            0
        } else if c + cost <= limit {
            // Within this window, once enough of `previous` has slid out:
            // p × (w - e') <= (limit - c - cost) × w (p > 0, or the cost would fit).
            let at = w - ((limit - c - cost) * w / p).min(w);
            narrow(at - e)
        } else {
            // In the next window, where `current` becomes `previous` (non-zero here).
            let at = w - ((limit - cost) * w / c).min(w);
            narrow(w - e + at)
        }
    }

    /// The decision, with the cost `taken` or not.
    pub fn decision(&self, taken: bool) -> Decision {
        let current = if taken && self.allowed {
            self.new_state().current
        } else {
            self.state.current
        };
        let room = (wide(self.limit) * wide(self.width)).saturating_sub(self.weighted(current));
        let reset_after = if current > 0 {
            2 * self.width - self.elapsed
        } else if self.state.previous > 0 {
            self.width - self.elapsed
        } else {
            0
        };
        Decision::exact(
            self.allowed,
            self.limit,
            narrow(room / wide(self.width)),
            // A peek (cost 0) is allowed, and says when a cost of 1 would be.
            Nanos::new(self.wait()),
            Nanos::new(reset_after),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn weighs_the_previous_window() {
        let p = Policy::sliding_window_counter(10, Duration::from_secs(1)).unwrap();
        let mut state = SlidingCounterState::default();
        // (at ms, cost, allowed, remaining, retry ms, reset ms)
        let steps = [
            (5_000, 10, true, 0, 0, 2000),
            // Next window, 25% in: estimate 10 × 0.75 = 7.5, room for 2.
            (6_250, 2, true, 0, 0, 1750),
            // 9.5 used; one more needs previous weight <= 7: at 300 ms.
            (6_250, 1, false, 0, 50, 1750),
            (6_250, 0, true, 0, 50, 1750),
            (6_300, 1, true, 0, 0, 1700),
        ];
        for (at, cost, allowed, remaining, retry, reset) in steps {
            let o = decide(&p, state, Nanos::new(at * MS), cost).unwrap();
            let d = o.decision(true);
            assert_eq!(
                (d.allowed(), d.remaining(), d.retry_after(), d.reset_after()),
                (
                    allowed,
                    remaining,
                    Duration::from_millis(retry),
                    Duration::from_millis(reset)
                ),
                "at {at}"
            );
            if o.allowed() {
                state = o.new_state();
            }
        }
        // Over the current window's own room (3 + 8 > 10): wait into the next window, where
        // 3 × (1 s - e) <= 2 × 1 s once e >= 333_333_334 ns.
        let o = decide(&p, state, Nanos::new(6_300 * MS), 8).unwrap();
        assert_eq!(
            o.decision(false).retry_after(),
            Duration::from_nanos(700 * MS + 333_333_334)
        );
    }

    #[test]
    fn a_new_width_carries_the_estimate() {
        let second = Policy::sliding_window_counter(10, Duration::from_secs(1)).unwrap();
        let minute = Policy::sliding_window_counter(10, Duration::from_secs(60)).unwrap();
        let spent = decide(
            &second,
            SlidingCounterState::default(),
            Nanos::new(5_000 * MS),
            8,
        )
        .unwrap()
        .new_state();
        // At 6.5 s the estimate under 1 s windows is 8 × 0.5 = 4: it becomes the count of the
        // minute [0, 60 s).
        let o = decide(&minute, spent, Nanos::new(6_500 * MS), 7).unwrap();
        assert!(!o.allowed());
        assert_eq!(o.decision(false).remaining(), 6);
        let peek = decide(&minute, spent, Nanos::new(6_500 * MS), 0).unwrap();
        assert_eq!(peek.new_state().current, 4);
        // Capped at the new limit.
        let three = Policy::sliding_window_counter(3, Duration::from_secs(60)).unwrap();
        let o = decide(&three, spent, Nanos::new(5_000 * MS), 0).unwrap();
        assert_eq!(o.new_state().current, 3);
    }

    #[test]
    fn retry_after_is_enough_and_not_too_much() {
        let p = Policy::sliding_window_counter(7, Duration::from_millis(300)).unwrap();
        let mut state = SlidingCounterState::default();
        let mut now = Nanos::new(1_000 * MS + 17);
        for cost in [3, 5, 7, 1, 2, 6, 4, 7, 7, 1] {
            let o = decide(&p, state, now, cost).unwrap();
            if !o.allowed() {
                let wait = Nanos::from(o.decision(false).retry_after());
                let before = decide(&p, state, now + wait - Nanos::new(1), cost).unwrap();
                assert!(!before.allowed(), "allowed 1 ns before retry_after");
                now = now + wait;
            }
            let o = decide(&p, state, now, cost).unwrap();
            assert!(o.allowed(), "denied after retry_after");
            state = o.new_state();
        }
    }
}
