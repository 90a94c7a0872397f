//! Retrying serialization failures. At SERIALIZABLE — the isolation YugabyteDB and CockroachDB
//! run by default — two decisions on one hot row conflict, and the loser fails with SQLSTATE
//! 40001 (or 40P01, a deadlock) and must simply run again. Retries back off exponentially with
//! jitter, so that the losers do not collide again in lockstep, and are bounded in number.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_postgres::error::SqlState;

/// How serialization failures are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The wait before the first retry; each later one doubles it, up to `max_backoff`.
    pub base_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// What a decision that still conflicts after `max_attempts` answers.
    pub give_up: GiveUp,
}

/// What a decision answers when every attempt failed to serialize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// A transient store error, so the caller's fail policy applies (the default).
    Unavailable,
    /// A denial, retryable after `max_backoff`: under heavy contention, shed the request.
    Deny,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            max_attempts: 10,
            base_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(20),
            give_up: GiveUp::Unavailable,
        }
    }
}

impl Retry {
    /// The wait before attempt `attempt + 1` (`attempt` >= 1): exponential, capped, and drawn
    /// uniformly from its upper half.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.max_backoff);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        let half = nanos / 2;
        Duration::from_nanos(half + jitter() % (nanos - half + 1))
    }
}

/// Whether `error` is a conflict that running the statement again resolves.
pub(crate) fn is_conflict(error: &tokio_postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
    )
}

/// A random number, different on every call: std's randomly seeded hasher over a counter.
fn jitter() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static SEED: RandomState = RandomState::new();
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    SEED.with(|seed| seed.hash_one(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_stays_in_its_upper_half_and_is_capped() {
        let retry = Retry::default();
        for _ in 0..200 {
            let first = retry.backoff(1);
            assert!(first >= Duration::from_micros(500) && first <= Duration::from_millis(1));
            let third = retry.backoff(3);
            assert!(third >= Duration::from_millis(2) && third <= Duration::from_millis(4));
            let late = retry.backoff(30);
            assert!(late >= Duration::from_millis(10) && late <= Duration::from_millis(20));
        }
    }

    #[test]
    fn backoff_is_jittered() {
        let retry = Retry::default();
        let waits: std::collections::HashSet<Duration> =
            (0..50).map(|_| retry.backoff(5)).collect();
        assert!(waits.len() > 10, "{waits:?}");
    }
}
