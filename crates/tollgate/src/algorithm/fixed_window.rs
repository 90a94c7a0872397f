//! Fixed windows aligned to the UNIX epoch: at most `limit` per window, as Envoy's rate-limit
//! service counts. The state is the window's index (`now / window`) and the count in it.

use std::time::Duration;

use crate::{CheckError, Decision, Nanos, Policy};

/// The state of one fixed-window counter. `Default` is a key never seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    /// `now / window` of the window counted.
    pub window: u64,
    /// Cost taken in that window.
    pub count: u64,
}

/// The result of evaluating one check, before anyone writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowOutcome {
    limit: u64,
    allowed: bool,
    state: FixedWindowState,
    cost: u64,
    /// Time until the counted window ends.
    until_end: Nanos,
}

/// Evaluates taking `cost` at `now`.
pub fn decide(
    policy: &Policy,
    state: FixedWindowState,
    now: Nanos,
    cost: u64,
) -> Result<FixedWindowOutcome, CheckError> {
    let limit = policy.capacity();
    if cost > limit {
        return Err(CheckError::CostExceedsCapacity {
            cost,
            capacity: limit,
        });
    }
    let width = policy.period().as_u64();
    let index = now.as_u64() / width;
    // A clock that stepped back into an earlier window keeps counting the later one.
    let state = if state.window >= index {
        state
    } else {
        FixedWindowState {
            window: index,
            count: 0,
        }
    };
    let end = Nanos::new(state.window.saturating_add(1).saturating_mul(width));
    Ok(FixedWindowOutcome {
        limit,
        allowed: cost == 0 || state.count + cost <= limit,
        state,
        cost,
        until_end: end - now,
    })
}

impl FixedWindowOutcome {
    /// Whether the window has room for the cost.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The state to store when the cost is taken.
    pub fn new_state(&self) -> FixedWindowState {
        FixedWindowState {
            count: self.state.count + self.cost,
            ..self.state
        }
    }

    /// The decision, with the cost `taken` or not.
    pub fn decision(&self, taken: bool) -> Decision {
        let count = if taken && self.allowed {
            self.new_state().count
        } else {
            self.state.count
        };
        let wait = Duration::from(self.until_end);
        Decision {
            allowed: self.allowed,
            limit: self.limit,
            remaining: self.limit.saturating_sub(count),
            retry_after: if self.allowed { Duration::ZERO } else { wait },
            reset_after: if count > 0 { wait } else { Duration::ZERO },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn counts_per_epoch_aligned_window() {
        let p = Policy::fixed_window(3, Duration::from_secs(1)).unwrap();
        let mut state = FixedWindowState::default();
        // (at ms, cost, allowed, remaining, retry ms, reset ms)
        let steps = [
            (10_500, 2, true, 1, 0, 500),
            (10_900, 1, true, 0, 0, 100),
            (10_999, 1, false, 0, 1, 1),
            (10_999, 0, true, 0, 0, 1),
            (11_000, 3, true, 0, 0, 1000),
            (12_250, 0, true, 3, 0, 0),
        ];
        for (at, cost, allowed, remaining, retry, reset) in steps {
            let o = decide(&p, state, Nanos::new(at * MS), cost).unwrap();
            let d = o.decision(true);
            assert_eq!(
                (d.allowed, d.remaining, d.retry_after, d.reset_after),
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
    }

    #[test]
    fn stepping_back_keeps_the_later_window() {
        let p = Policy::fixed_window(2, Duration::from_secs(1)).unwrap();
        let state = FixedWindowState {
            window: 20,
            count: 2,
        };
        let o = decide(&p, state, Nanos::new(19_500 * MS), 1).unwrap();
        assert!(!o.allowed());
        assert_eq!(o.decision(false).retry_after, Duration::from_millis(1500));
    }

    #[test]
    fn cost_over_limit_is_an_error() {
        let p = Policy::fixed_window(2, Duration::from_secs(1)).unwrap();
        assert!(decide(&p, FixedWindowState::default(), Nanos::ZERO, 3).is_err());
    }
}
