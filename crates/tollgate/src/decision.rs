//! [`Decision`] and [`Verdict`]: what a check answers. Being limited is data, not an error.

use std::fmt;
use std::time::Duration;

use crate::Nanos;

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
#[derive(Clone, Copy)]
pub struct Decision {
    allowed: bool,
    limit: u64,
    /// Whole tokens left are `left / per_token`, divided when asked: a check answers with the
    /// numbers it has and does no arithmetic a caller may never read.
    left: u64,
    per_token: u64,
    retry_after: Nanos,
    reset_after: Nanos,
}

impl Decision {
    /// A decision, as a `Store` of your own answers it: see the accessors
    /// for what each number means. The two waits are kept to the nanosecond, up to 584 years
    /// (a longer one is kept as 584 years).
    pub fn new(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after: Duration,
        reset_after: Duration,
    ) -> Decision {
        Decision::exact(
            allowed,
            limit,
            remaining,
            Nanos::from(retry_after),
            Nanos::from(reset_after),
        )
    }

    /// [`Decision::new`] with the waits in nanoseconds.
    #[inline]
    pub(crate) fn exact(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after: Nanos,
        reset_after: Nanos,
    ) -> Decision {
        Decision::of_tokens(allowed, limit, remaining, 1, retry_after, reset_after)
    }

    /// A decision whose whole tokens left are `left / per_token`: a token bucket's room in
    /// nanoseconds and its time per token (the room is at most `limit` tokens' worth). Every
    /// token-bucket decision is built so, in every store; it only stores, because on the memory
    /// store's path a division and two `Duration`s made on the bucket's freshly loaded state
    /// kept the CPU from starting on the next check (the figures: docs/performance.md, "The
    /// memory store").
    #[inline]
    pub(crate) fn of_tokens(
        allowed: bool,
        limit: u64,
        left: u64,
        per_token: u64,
        retry_after: Nanos,
        reset_after: Nanos,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            left,
            per_token,
            retry_after,
            reset_after,
        }
    }

    /// Whether the cost was (or, for a policy checked beside others, could be) taken.
    #[inline]
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The policy's capacity.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whole tokens left after this decision.
    #[inline]
    pub fn remaining(&self) -> u64 {
        // `per_token` is never 0 (a policy's time per token is at least 1 ns); if it were,
        // nothing would be counted as left rather than a panic. Not capped at `limit`: a
        // store's own `Decision::new` says what it says.
        self.left.checked_div(self.per_token).unwrap_or(0)
    }

    /// The shortest wait after which the same cost is allowed, if nobody else takes tokens
    /// meanwhile: zero when allowed. A peek (cost 0) is always allowed, and says the wait for a
    /// cost of 1 instead: zero when a token is there, else when the next one comes (an empty
    /// bucket, one in debt, a full window). Never rounded down.
    #[inline]
    pub fn retry_after(&self) -> Duration {
        self.retry_after.as_duration()
    }

    /// The wait until the bucket is full again.
    #[inline]
    pub fn reset_after(&self) -> Duration {
        self.reset_after.as_duration()
    }

    /// `retry_after` in whole milliseconds, rounded up.
    pub fn retry_after_ms(&self) -> u64 {
        self.retry_after.as_u64().div_ceil(1_000_000)
    }

    /// `retry_after` in whole seconds, rounded up; a denial never says 0
    /// (HTTP `Retry-After`, `CL.THROTTLE`).
    pub fn retry_after_secs(&self) -> u64 {
        let secs = self.retry_after.as_u64().div_ceil(1_000_000_000);
        if self.allowed { secs } else { secs.max(1) }
    }

    /// `reset_after` in whole milliseconds, rounded up.
    pub fn reset_after_ms(&self) -> u64 {
        self.reset_after.as_u64().div_ceil(1_000_000)
    }

    /// `reset_after` in whole seconds, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        self.reset_after.as_u64().div_ceil(1_000_000_000)
    }

    /// What a caller can read: two decisions are equal when every accessor agrees, however
    /// their tokens left were counted.
    fn seen(&self) -> (bool, u64, u64, Nanos, Nanos) {
        (
            self.allowed,
            self.limit,
            self.remaining(),
            self.retry_after,
            self.reset_after,
        )
    }
}

impl PartialEq for Decision {
    fn eq(&self, other: &Decision) -> bool {
        self.seen() == other.seen()
    }
}

impl Eq for Decision {}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .finish()
    }
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
    /// giving its tokens back there (`Settle`) would hand out
    /// tokens nobody paid, so refunds of it are skipped.
    pub fn by_fail_policy(&self) -> bool {
        self.by_fail_policy
    }

    /// Whether every check allowed (and so every bucket paid).
    pub fn allowed(&self) -> bool {
        self.decisions.iter().all(Decision::allowed)
    }

    /// The decision to show a client in a single set of headers: when denied, the denying one
    /// with the longest `retry_after` (the last of equal ones), else the one with the fewest
    /// tokens left (the first of equal ones).
    pub fn most_restrictive(&self) -> Option<&Decision> {
        if self.allowed() {
            self.decisions.iter().min_by_key(|d| d.remaining())
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
            .map_or(Duration::ZERO, Nanos::as_duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry_after: Duration) -> Decision {
        Decision::new(false, 1, 0, retry_after, retry_after)
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
    fn tokens_left_are_counted_when_asked_and_compare_as_read() {
        let ms = Nanos::new(1_000_000);
        // 2.5 tokens of room at 1 µs a token: 2 whole ones, and never above the limit.
        let counted = Decision::of_tokens(true, 10, 2_500, 1_000, Nanos::ZERO, ms);
        assert_eq!(counted.remaining(), 2);
        // A store's own numbers are kept as given.
        let own = Decision::new(true, 0, 5, Duration::ZERO, Duration::ZERO);
        assert_eq!(own.remaining(), 5);
        // Equal to the same answer built from whole tokens, unequal to any other.
        let whole = Decision::new(true, 10, 2, Duration::ZERO, Duration::from_millis(1));
        assert_eq!(counted, whole);
        assert_ne!(
            counted,
            Decision::new(true, 10, 3, Duration::ZERO, Duration::from_millis(1))
        );
        assert_ne!(
            counted,
            Decision::new(true, 10, 2, Duration::ZERO, Duration::from_millis(2))
        );
        // Debug shows what the accessors read, not how it is kept.
        assert_eq!(format!("{counted:?}"), format!("{whole:?}"));
        assert!(format!("{counted:?}").contains("remaining: 2"));
        // A time per token of 0 (no policy has one) counts nothing left rather than panicking.
        assert_eq!(
            Decision::of_tokens(true, 10, 5, 0, Nanos::ZERO, ms).remaining(),
            0
        );
    }

    #[test]
    fn waits_keep_their_nanoseconds_and_saturate_at_584_years() {
        let d = Decision::new(false, 1, 0, Duration::new(3, 999_999_999), Duration::MAX);
        assert_eq!(d.retry_after(), Duration::new(3, 999_999_999));
        assert_eq!(d.retry_after_secs(), 4);
        assert_eq!(d.reset_after(), Duration::from_nanos(u64::MAX));
        assert_eq!(d.reset_after_secs(), u64::MAX.div_ceil(1_000_000_000));
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
            v.most_restrictive().unwrap().retry_after(),
            Duration::from_secs(5)
        );
    }
}
