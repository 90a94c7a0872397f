//! A limit in the published function's own terms, and the same limit as a tollgate policy, so
//! that both approaches always run under one and the same bucket.

use std::time::Duration;

use tollgate::Policy;

use crate::BenchError;

/// The function's parameters: `refill_per_sec` tokens a second, and a bucket of
/// `window_seconds × refill_per_sec` tokens (the function's capacity). Both are `int` in its
/// signature, and so is their product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit {
    pub(crate) refill_per_sec: i32,
    pub(crate) window_seconds: i32,
}

/// Throughput cells: a billion tokens refilled a million a second, so that every call is allowed
/// and both approaches write on every call. The product stays below `int`'s 2^31.
pub(crate) const ALLOW_ALL: Limit = Limit {
    refill_per_sec: 1_000_000,
    window_seconds: 1_000,
};

/// The over-grant test: burst 10, 10 per second.
pub(crate) const SMALL: Limit = Limit {
    refill_per_sec: 10,
    window_seconds: 1,
};

/// The function's defaults (2 per second, a 60-second window: 120 tokens): the race on first
/// calls, where every call should be allowed.
pub(crate) const DEFAULTS: Limit = Limit {
    refill_per_sec: 2,
    window_seconds: 60,
};

/// The rounding schedule: 2 per second, as the function's default, in a bucket of 10 so the
/// burst is spent in a moment.
pub(crate) const SLOW: Limit = Limit {
    refill_per_sec: 2,
    window_seconds: 5,
};

impl Limit {
    /// The bucket's capacity: `window_seconds × refill_per_sec`.
    pub(crate) fn capacity(self) -> u64 {
        u64::try_from(self.window_seconds).unwrap_or(0)
            * u64::try_from(self.refill_per_sec).unwrap_or(0)
    }

    /// Tokens per second.
    pub(crate) fn rate(self) -> u64 {
        u64::try_from(self.refill_per_sec).unwrap_or(0)
    }

    /// The same bucket for tollgate: `capacity` tokens, `refill_per_sec` every second.
    pub(crate) fn policy(self) -> Result<Policy, BenchError> {
        Ok(Policy::token_bucket(
            self.capacity(),
            self.rate(),
            Duration::from_secs(1),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_approaches_see_the_same_bucket() {
        for limit in [ALLOW_ALL, SMALL, DEFAULTS, SLOW] {
            let policy = limit.policy().unwrap();
            assert_eq!(policy.capacity(), limit.capacity());
            assert_eq!(policy.refill(), limit.rate());
            assert!(i32::try_from(limit.capacity()).is_ok(), "{limit:?}");
        }
        assert_eq!(SMALL.capacity(), 10);
        assert_eq!(SLOW.capacity(), 10);
        assert_eq!(ALLOW_ALL.capacity(), 1_000_000_000);
    }
}
