//! Fixed windows aligned to the UNIX epoch: at most `limit` per window, as Envoy's rate-limit
//! service counts. The state is the window's index (`now / window`), the count in it, and the
//! width it was counted with.
//!
//! **A limit that changes.** A bucket is named by its policy's name, not its numbers, so an
//! operator may change them under it. A new limit applies to the count already taken in the
//! current window (lowered below it, the window denies until it ends). A new width: the window
//! counted under the old width keeps its count, under the new limit, until it ends; then
//! counting starts afresh in windows of the new width. So no count is forgotten before the
//! window it was taken in ends, none is held longer (a raised limit never lengthens a wait:
//! a denial waits at most until that end), and a retry it answers is exact.

use crate::{CheckError, Decision, Nanos, Policy};

/// The state of one fixed-window counter. `Default` is a key never seen. Opaque: its layout
/// is the stores' business, and may change without a major version.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{evaluate, BucketState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::fixed_window(2, Duration::from_secs(60))?;
/// let mut state = BucketState::new(&policy); // a `FixedWindowState`, as never seen
/// assert!(matches!(state, BucketState::FixedWindow(_)));
/// for _ in 0..2 {
///     evaluate(&policy, &state, Nanos::new(1), 1)?.apply(&mut state);
/// }
/// assert!(!evaluate(&policy, &state, Nanos::new(2), 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    /// `now / window` of the window counted.
    pub(crate) window: u64,
    /// Cost taken in that window.
    pub(crate) count: u64,
    /// The window's width, in the clock's unit, when the count was taken (0: never written).
    pub(crate) width: u64,
}

/// The result of evaluating one check, before anyone writes.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::fixed_window::{decide, FixedWindowState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::fixed_window(10, Duration::from_secs(1))?;
/// let outcome = decide(&policy, FixedWindowState::default(), Nanos::new(1_500_000_000), 4)?;
/// assert!(outcome.allowed());
/// let decision = outcome.decision(true);
/// assert_eq!(decision.remaining(), 6);
/// // The window ends on the next whole second of the clock.
/// assert_eq!(decision.reset_after(), Duration::from_millis(500));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowOutcome {
    limit: u64,
    allowed: bool,
    state: FixedWindowState,
    cost: u64,
    /// Time until the counted window ends.
    until_end: Nanos,
}

/// Evaluates taking `cost` at `now` (refused past [`MAX_NOW`](crate::algorithm::gcra::MAX_NOW)).
pub fn decide(
    policy: &Policy,
    state: FixedWindowState,
    now: Nanos,
    cost: u64,
) -> Result<FixedWindowOutcome, CheckError> {
    crate::algorithm::gcra::check_now(now)?;
    let limit = policy.capacity();
    if cost > limit {
        return Err(CheckError::CostExceedsCapacity {
            cost,
            capacity: limit,
        });
    }
    let width = policy.period_nanos().as_u64();
    let state = carry_over(state, width, now);
    // A clock that stepped back into an earlier window keeps counting the later one. (The
    // state's width is the policy's, or the old one while its window ends first.)
    let state = if state.window >= now.as_u64() / state.width {
        state
    } else {
        FixedWindowState {
            window: now.as_u64() / width,
            count: 0,
            width,
        }
    };
    let end = Nanos::new(state.window.saturating_add(1).saturating_mul(state.width));
    Ok(FixedWindowOutcome {
        limit,
        allowed: cost == 0 || state.count + cost <= limit,
        state,
        cost,
        until_end: end - now,
    })
}

/// The state under a new width: a window that has not ended keeps its count, in its own window
/// and width, until it ends (so a count is held neither longer nor shorter than without the
/// change, and a retry it answers is exact); an ended one is forgotten.
fn carry_over(state: FixedWindowState, width: u64, now: Nanos) -> FixedWindowState {
    if state.width == width || state.width == 0 {
        return FixedWindowState { width, ..state };
    }
    let old_end = state.window.saturating_add(1).saturating_mul(state.width);
    if now.as_u64() < old_end {
        return state;
    }
    FixedWindowState {
        window: now.as_u64() / width,
        count: 0,
        width,
    }
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
        let wait = self.until_end;
        // A peek (cost 0) is allowed, and says when a cost of 1 would be: at the window's end
        // when it is full.
        let blocked = self.state.count.saturating_add(self.cost.max(1)) > self.limit;
        Decision::exact(
            self.allowed,
            self.limit,
            self.limit.saturating_sub(count),
            if blocked { wait } else { Nanos::ZERO },
            if count > 0 { wait } else { Nanos::ZERO },
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
            (10_999, 0, true, 0, 1, 1),
            (11_000, 3, true, 0, 0, 1000),
            (12_250, 0, true, 3, 0, 0),
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
    }

    #[test]
    fn stepping_back_keeps_the_later_window() {
        let p = Policy::fixed_window(2, Duration::from_secs(1)).unwrap();
        let state = FixedWindowState {
            window: 20,
            count: 2,
            width: 1_000 * MS,
        };
        let o = decide(&p, state, Nanos::new(19_500 * MS), 1).unwrap();
        assert!(!o.allowed());
        assert_eq!(o.decision(false).retry_after(), Duration::from_millis(1500));
    }

    /// A faster pace in narrower windows that do not line up with the old one: the count of
    /// the old window ends with it, never with a later window of the new width (which would
    /// lengthen the wait of a raised limit: it once waited until 14 s here, not 10 s).
    #[test]
    fn a_raised_limit_in_narrower_windows_never_lengthens_a_wait() {
        let ten = Policy::fixed_window(10, Duration::from_secs(10)).unwrap();
        let seven = Policy::fixed_window(10, Duration::from_secs(7)).unwrap();
        let at = |s: u64| Nanos::new(s * 1000 * MS);
        let spent = decide(&ten, FixedWindowState::default(), at(1), 6)
            .unwrap()
            .new_state();
        let before = decide(&ten, spent, at(9), 5).unwrap().decision(false);
        let one = decide(&seven, spent, at(8), 1).unwrap();
        assert!(one.allowed());
        let denied = decide(&seven, one.new_state(), at(9), 5).unwrap();
        assert!(!denied.allowed());
        let wait = denied.decision(false).retry_after();
        assert!(wait <= before.retry_after(), "{wait:?}");
        assert_eq!(wait, Duration::from_secs(1));
        // Then windows of 7 s, afresh.
        assert!(
            decide(&seven, one.new_state(), at(10), 10)
                .unwrap()
                .allowed()
        );
    }

    #[test]
    fn a_new_width_carries_the_count_of_a_window_that_has_not_ended() {
        let minute = Policy::fixed_window(10, Duration::from_secs(60)).unwrap();
        let second = Policy::fixed_window(10, Duration::from_secs(1)).unwrap();
        // 10 taken in the minute [60 s, 120 s), at 61 s.
        let spent = decide(
            &minute,
            FixedWindowState::default(),
            Nanos::new(61_000 * MS),
            10,
        )
        .unwrap()
        .new_state();
        // At 90 s under 10 per second: the minute keeps its count until it ends, at 120 s, and
        // the retry says so (it once said 1 s, and a client that waited it was denied again).
        let o = decide(&second, spent, Nanos::new(90_000 * MS), 1).unwrap();
        assert!(!o.allowed());
        assert_eq!(o.decision(false).retry_after(), Duration::from_secs(30));
        // The count stands until the minute it was counted in ends.
        assert!(
            !decide(&second, spent, Nanos::new(119_999 * MS), 1)
                .unwrap()
                .allowed()
        );
        // Once the minute has ended, nothing carries over.
        assert!(
            decide(&second, spent, Nanos::new(120_000 * MS), 10)
                .unwrap()
                .allowed()
        );
        // A lower limit applies to the count already taken.
        let five = Policy::fixed_window(5, Duration::from_secs(60)).unwrap();
        let half = decide(
            &minute,
            FixedWindowState::default(),
            Nanos::new(61_000 * MS),
            5,
        )
        .unwrap()
        .new_state();
        let o = decide(&five, half, Nanos::new(62_000 * MS), 1).unwrap();
        assert!(!o.allowed());
        assert_eq!(o.decision(false).remaining(), 0);
    }

    #[test]
    fn cost_over_limit_is_an_error() {
        let p = Policy::fixed_window(2, Duration::from_secs(1)).unwrap();
        assert!(decide(&p, FixedWindowState::default(), Nanos::ZERO, 3).is_err());
    }
}
