//! The exact sliding window: a log of allowed requests. At most `limit` in any window of
//! length `window`: a request at `ts` counts while `now < ts + window`.
//!
//! Memory is one entry per allowed request still in the window, so the limit is bounded by
//! [`MAX_LOG_LIMIT`](crate::policy::MAX_LOG_LIMIT).

use std::collections::VecDeque;

use crate::{CheckError, Decision, Nanos, Policy};

/// The log of one key: `(time, cost)` of allowed requests, oldest first. `Default` is a key never
/// seen.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::sliding_log::{decide, SlidingLogState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::sliding_window_log(2, Duration::from_secs(1))?;
/// // Two requests in the last second: full until the first leaves the window.
/// let log = SlidingLogState::from_entries([(Nanos::new(100), 1), (Nanos::new(200), 1)]);
/// let outcome = decide(&policy, &log, Nanos::new(300), 1)?;
/// assert!(!outcome.allowed());
/// assert_eq!(outcome.decision(false).retry_after(), Duration::from_nanos(1_000_000_000 - 200));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    entries: VecDeque<(Nanos, u64)>,
}

impl SlidingLogState {
    /// Whether nothing in the log still counts at `now` (the key can be forgotten).
    pub fn is_idle(&self, window: Nanos, now: Nanos) -> bool {
        self.entries
            .back()
            .is_none_or(|&(ts, _)| ts + window <= now)
    }

    /// A log of `(time, cost)` entries, oldest first (as a store read them back).
    pub fn from_entries(entries: impl IntoIterator<Item = (Nanos, u64)>) -> SlidingLogState {
        SlidingLogState {
            entries: entries.into_iter().collect(),
        }
    }

    /// The bytes its entries hold on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<(Nanos, u64)>()
    }
}

/// The result of evaluating one check, before anyone writes.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::sliding_log::{decide, SlidingLogState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::sliding_window_log(5, Duration::from_secs(1))?;
/// let mut log = SlidingLogState::default();
/// let outcome = decide(&policy, &log, Nanos::new(1), 2)?;
/// outcome.apply(&mut log); // the request's entry is logged
/// assert!(log.is_idle(Nanos::new(1_000_000_000), Nanos::new(2_000_000_000)));
/// assert_eq!(outcome.decision(true).remaining(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLogOutcome {
    limit: u64,
    window: Nanos,
    now: Nanos,
    cost: u64,
    allowed: bool,
    /// Cost of the entries still in the window.
    used: u64,
    retry_after: Nanos,
    /// When the newest counted entry leaves the window.
    last_expiry: Nanos,
}

/// Evaluates taking `cost` at `now` (refused past [`MAX_NOW`](crate::algorithm::gcra::MAX_NOW)).
pub fn decide(
    policy: &Policy,
    state: &SlidingLogState,
    now: Nanos,
    cost: u64,
) -> Result<SlidingLogOutcome, CheckError> {
    crate::algorithm::gcra::check_now(now)?;
    let limit = policy.capacity();
    if cost > limit {
        return Err(CheckError::CostExceedsCapacity {
            cost,
            capacity: limit,
        });
    }
    let window = policy.period_nanos();
    let live = || state.entries.iter().filter(|&&(ts, _)| ts + window > now);
    let used: u64 = live().map(|&(_, c)| c).sum();
    let allowed = cost == 0 || used + cost <= limit;
    // A peek (cost 0) is allowed, and says when a cost of 1 would be.
    let probe = cost.max(1);
    let mut retry_after = Nanos::ZERO;
    if used + probe > limit {
        // Wait until enough of the oldest entries have left the window.
        let mut need = used + probe - limit;
        for &(ts, c) in live() {
            retry_after = ts + window - now;
            need = need.saturating_sub(c);
            if need == 0 {
                break;
            }
        }
    }
    let last_expiry = live()
        .next_back()
        .map_or(Nanos::ZERO, |&(ts, _)| ts + window);
    Ok(SlidingLogOutcome {
        limit,
        window,
        now,
        cost,
        allowed,
        used,
        retry_after,
        last_expiry,
    })
}

impl SlidingLogOutcome {
    /// Whether the window has room for the cost.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// Drops what left the window and logs the cost.
    pub fn apply(&self, state: &mut SlidingLogState) {
        while state
            .entries
            .front()
            .is_some_and(|&(ts, _)| ts + self.window <= self.now)
        {
            state.entries.pop_front();
        }
        if self.cost > 0 {
            // After a clock step back, log at the newest time so the log stays sorted; the entry
            // then counts a little longer, never shorter.
            let at = state
                .entries
                .back()
                .map_or(self.now, |&(ts, _)| ts.max(self.now));
            state.entries.push_back((at, self.cost));
        }
    }

    /// The decision, with the cost `taken` or not.
    pub fn decision(&self, taken: bool) -> Decision {
        let taken = taken && self.allowed && self.cost > 0;
        let used = self.used + if taken { self.cost } else { 0 };
        let reset_at = if taken {
            self.last_expiry.max(self.now + self.window)
        } else {
            self.last_expiry
        };
        Decision::exact(
            self.allowed,
            self.limit,
            self.limit.saturating_sub(used),
            self.retry_after,
            reset_at - self.now,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn exact_over_any_window() {
        let p = Policy::sliding_window_log(3, Duration::from_secs(1)).unwrap();
        let mut state = SlidingLogState::default();
        // (at ms, cost, allowed, remaining, retry ms, reset ms)
        let steps = [
            (0, 1, true, 2, 0, 1000),
            (400, 2, true, 0, 0, 1000),
            // Full: the peek is allowed and says when one token comes back.
            (500, 0, true, 0, 500, 900),
            (999, 1, false, 0, 1, 401),
            (1000, 2, false, 1, 400, 400),
            (1000, 1, true, 0, 0, 1000),
            (1400, 2, true, 0, 0, 1000),
            (2400, 0, true, 3, 0, 0),
        ];
        for (at, cost, allowed, remaining, retry, reset) in steps {
            let o = decide(&p, &state, Nanos::new(at * MS), cost).unwrap();
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
                o.apply(&mut state);
            }
        }
        assert!(state.is_idle(p.period_nanos(), Nanos::new(2400 * MS)));
    }

    #[test]
    fn pruning_keeps_memory_bounded() {
        let p = Policy::sliding_window_log(2, Duration::from_millis(10)).unwrap();
        let mut state = SlidingLogState::default();
        for i in 0..1000 {
            let o = decide(&p, &state, Nanos::new(i * 5 * MS), 1).unwrap();
            assert!(o.allowed());
            o.apply(&mut state);
            assert!(state.entries.len() <= 2);
        }
    }
}
