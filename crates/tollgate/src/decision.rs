//! [`Decision`] and [`Verdict`]: what a check answers. Being limited is data, not an error.

use std::time::Duration;

/// The answer for one bucket.
///
/// Its fields are read through accessors, so that a later version can add one without breaking
/// a caller.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{MemoryStore, Policy};
///
/// let policy = Policy::token_bucket(2, 1, Duration::from_secs(1))?;
/// let store = MemoryStore::new();
/// store.check(&policy, b"alice", 2)?;
/// let denied = store.check(&policy, b"alice", 1)?;
/// assert!(!denied.allowed());
/// assert_eq!((denied.limit(), denied.remaining()), (2, 0));
/// // The next token is at most a second away (the clock ran since the bucket was spent).
/// assert!(denied.retry_after() <= Duration::from_secs(1));
/// assert_eq!(denied.retry_after_secs(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) retry_after: Duration,
    pub(crate) reset_after: Duration,
}

impl Decision {
    /// A decision, as a [`Store`](crate::Store) of your own answers it: see the accessors
    /// for what each number means.
    pub fn new(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after: Duration,
        reset_after: Duration,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after,
        }
    }

    /// Whether the cost was (or, for a policy checked beside others, could be) taken.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The policy's capacity.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whole tokens left after this decision.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The shortest wait after which the same cost is allowed, if nobody else takes tokens
    /// meanwhile: zero when allowed. A peek (cost 0) is always allowed, and says the wait for a
    /// cost of 1 instead: zero when a token is there, else when the next one comes (an empty
    /// bucket, one in debt, a full window). Never rounded down.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// The wait until the bucket is full again.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// `retry_after` in whole milliseconds, rounded up.
    pub fn retry_after_ms(&self) -> u64 {
        ceil_div(self.retry_after, 1_000_000)
    }

    /// `retry_after` in whole seconds, rounded up; a denial never says 0
    /// (HTTP `Retry-After`, `CL.THROTTLE`).
    pub fn retry_after_secs(&self) -> u64 {
        let secs = ceil_div(self.retry_after, 1_000_000_000);
        if self.allowed { secs } else { secs.max(1) }
    }

    /// `reset_after` in whole milliseconds, rounded up.
    pub fn reset_after_ms(&self) -> u64 {
        ceil_div(self.reset_after, 1_000_000)
    }

    /// `reset_after` in whole seconds, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        ceil_div(self.reset_after, 1_000_000_000)
    }
}

fn ceil_div(d: Duration, unit: u128) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(unit)).unwrap_or(u64::MAX)
}

/// The answer for a set of checks decided together: allowed only if every one allows, and then
/// every bucket paid; if any denies, none paid.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Check, MemoryStore, Policy};
///
/// let second = Policy::token_bucket(10, 10, Duration::from_secs(1))?;
/// let hour = Policy::token_bucket(1, 1, Duration::from_secs(3600))?;
/// let store = MemoryStore::new();
/// let checks = [Check::new(second, b"alice", 1), Check::new(hour, b"alice", 1)];
/// assert!(store.decide_sync(&checks)?.allowed());
/// let verdict = store.decide_sync(&checks)?;
/// // The hourly bucket denies, so the per-second one was not charged either.
/// assert!(!verdict.allowed());
/// assert_eq!(verdict.decisions()[0].remaining(), 9);
/// assert!(verdict.retry_after() > Duration::from_secs(3599));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub(crate) decisions: Vec<Decision>,
    pub(crate) by_fail_policy: bool,
}

impl Verdict {
    /// The store's answer: `decisions`, one per check.
    pub fn new(decisions: Vec<Decision>) -> Verdict {
        Verdict {
            decisions,
            by_fail_policy: false,
        }
    }

    /// The same answer, given by a fail policy rather than the store (see
    /// [`by_fail_policy`](Verdict::by_fail_policy)).
    pub fn from_fail_policy(mut self) -> Verdict {
        self.by_fail_policy = true;
        self
    }

    /// One decision per check, in the order the checks were given.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// The decisions, owned.
    pub fn into_decisions(self) -> Vec<Decision> {
        self.decisions
    }

    /// Whether a fail policy gave this answer instead of the store (failing open, or deciding
    /// in local memory while the store was down). Such an answer took nothing from the store:
    /// giving its tokens back there ([`Settle`](crate::store::settle::Settle)) would hand out
    /// tokens nobody paid, so refunds of it are skipped.
    pub fn by_fail_policy(&self) -> bool {
        self.by_fail_policy
    }

    /// Whether every check allowed (and so every bucket paid).
    pub fn allowed(&self) -> bool {
        self.decisions.iter().all(|d| d.allowed)
    }

    /// The decision to show a client in a single set of headers: the first denying one when
    /// denied (with the longest `retry_after`), else the one with the fewest tokens left.
    pub fn most_restrictive(&self) -> Option<&Decision> {
        if self.allowed() {
            self.decisions.iter().min_by_key(|d| d.remaining)
        } else {
            self.decisions
                .iter()
                .filter(|d| !d.allowed)
                .max_by_key(|d| d.retry_after)
        }
    }

    /// The shortest wait after which every check could pass: the longest `retry_after`.
    pub fn retry_after(&self) -> Duration {
        self.decisions
            .iter()
            .map(|d| d.retry_after)
            .max()
            .unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry_after: Duration) -> Decision {
        Decision {
            allowed: false,
            limit: 1,
            remaining: 0,
            retry_after,
            reset_after: retry_after,
        }
    }

    #[test]
    fn whole_units_round_up_and_a_denial_never_says_zero_seconds() {
        let d = denied(Duration::from_nanos(1));
        assert_eq!(d.retry_after_ms(), 1);
        assert_eq!(d.retry_after_secs(), 1);
        let d = denied(Duration::from_millis(1001));
        assert_eq!(d.retry_after_secs(), 2);
        assert_eq!(d.reset_after_ms(), 1001);
    }

    #[test]
    fn verdict_reports_the_longest_wait() {
        let v = Verdict::new(vec![
            denied(Duration::from_secs(1)),
            denied(Duration::from_secs(5)),
        ]);
        assert!(!v.allowed());
        assert_eq!(v.retry_after(), Duration::from_secs(5));
        assert_eq!(
            v.most_restrictive().unwrap().retry_after,
            Duration::from_secs(5)
        );
    }
}
