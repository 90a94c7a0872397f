//! Retrying serialization failures. At SERIALIZABLE — the isolation YugabyteDB and CockroachDB
//! run by default — two decisions on one hot row conflict, and the loser fails with SQLSTATE
//! 40001 (or 40P01, a deadlock) and must simply run again. Retries back off exponentially with
//! jitter, so that the losers do not collide again in lockstep, and are bounded in number.
//!
//! Every statement runs through one loop ([`Inner::run`]), bounded by its batch's deadline; a
//! call whose attempts ran out answers what [`GiveUp`] says.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::error::SqlState;

use super::Inner;
use super::error::{is_missing_schema, store_error};
use super::pool::Conn;
use crate::{Decision, Policy, StoreError, Verdict};

/// How serialization failures are retried: [`Retry::default`], changed by its setters (its
/// fields are there to read; more may come, so it is not built as a literal).
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::PostgresStore;
/// use tollgate::store::postgres::{GiveUp, Isolation, Retry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tollgate::StoreError> {
/// let retry = Retry::default()
///     .max_attempts(5)
///     .max_backoff(Duration::from_millis(10))
///     .give_up(GiveUp::Deny);
/// assert_eq!(retry.max_attempts, 5);
/// let store = PostgresStore::builder("postgres://tollgate@127.0.0.1/tollgate")
///     .isolation(Isolation::Serializable)
///     .retry(retry)
///     .build()
///     .await?;
/// # drop(store);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retry {
    /// Attempts in all, the first included (at least 1: the build refuses 0).
    pub max_attempts: u32,
    /// The wait before the first retry; each later one doubles it, up to `max_backoff`.
    pub base_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// What a decision that still conflicts after `max_attempts` answers.
    pub give_up: GiveUp,
}

/// What a decision answers when every attempt failed to serialize.
///
/// ```
/// use tollgate::store::postgres::{GiveUp, Retry};
///
/// // Under heavy contention, shed the request rather than hand it to the fail policy.
/// let retry = Retry::default().give_up(GiveUp::Deny);
/// assert_eq!(Retry::default().give_up, GiveUp::Unavailable);
/// # drop(retry);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Attempts in all, the first included (at least 1: the build refuses 0). 10 by default.
    pub const fn max_attempts(mut self, attempts: u32) -> Retry {
        self.max_attempts = attempts;
        self
    }

    /// The wait before the first retry, doubled for each later one. 1 ms by default.
    pub const fn base_backoff(mut self, wait: Duration) -> Retry {
        self.base_backoff = wait;
        self
    }

    /// The longest wait between attempts. 20 ms by default.
    pub const fn max_backoff(mut self, wait: Duration) -> Retry {
        self.max_backoff = wait;
        self
    }

    /// What a decision that still conflicts after every attempt answers.
    /// [`GiveUp::Unavailable`] by default.
    pub const fn give_up(mut self, give_up: GiveUp) -> Retry {
        self.give_up = give_up;
        self
    }

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

/// Why the retries of a call ended without an answer.
pub(super) enum Failure {
    Store(StoreError),
    /// Every attempt conflicted; the last conflict.
    GaveUp(tokio_postgres::Error),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::Store(e)
    }
}

/// `timeout` from now; a timeout too long to add to the time (`Duration::MAX`, say) is one
/// that never comes, as `tokio::time::timeout` treats it.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

impl Inner {
    /// Runs `statement` on a connection, again after each serialization failure, up to
    /// `max_attempts`, bounded as a whole by `deadline`: the end of the batch's time, which
    /// every statement of a batch shares (a set that conflicts, then the decide function; a
    /// check asked again). A retry that could not finish before then is not started:
    /// the call gives up at once, so the configured [`GiveUp`] answers rather than a timeout.
    pub(super) async fn run<T, F, Fut>(
        &self,
        deadline: Instant,
        max_attempts: u32,
        statement: F,
    ) -> Result<T, Failure>
    where
        F: Fn(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let attempts = async {
            let mut attempt = 1;
            loop {
                let lease = self.pool.get().await?;
                self.stats.statements.fetch_add(1, Ordering::Relaxed);
                let conn = lease.conn();
                let answer = statement(Arc::clone(&conn)).await;
                // Answered: the connection is free for others while this one backs off.
                lease.answered();
                let e = match answer {
                    Ok(answer) => return Ok(answer),
                    Err(e) if is_conflict(&e) => e,
                    Err(e) => {
                        if is_missing_schema(&e) {
                            conn.stale.store(true, Ordering::Relaxed);
                        }
                        return Err(Failure::Store(store_error(e)));
                    }
                };
                let wait = self.retry.backoff(attempt);
                // The retry's own statement needs time too: at least the wait again.
                let in_time = Instant::now()
                    .checked_add(wait.saturating_mul(2))
                    .is_some_and(|t| t < deadline);
                if attempt >= max_attempts || !in_time {
                    return Err(Failure::GaveUp(e));
                }
                self.stats.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
        };
        tokio::time::timeout_at(deadline, attempts)
            .await
            .unwrap_or(Err(Failure::Store(StoreError::Timeout(self.timeout))))
    }

    /// What a call whose retries ran out answers, per [`GiveUp`], for each of its decisions.
    pub(super) fn gave_up<'p>(
        &self,
        decisions: impl IntoIterator<Item = &'p [(Policy, u64)]>,
        error: tokio_postgres::Error,
    ) -> Result<Vec<Verdict>, StoreError> {
        self.stats.gave_up.fetch_add(1, Ordering::Relaxed);
        match self.retry.give_up {
            GiveUp::Unavailable => Err(store_error(error)),
            GiveUp::Deny => Ok(decisions
                .into_iter()
                .map(|policies| {
                    Verdict::new(
                        policies
                            .iter()
                            .map(|(policy, _)| {
                                Decision::new(
                                    false,
                                    policy.capacity(),
                                    0,
                                    self.retry.max_backoff,
                                    policy.tolerance_nanos().as_duration(),
                                )
                            })
                            .collect(),
                    )
                })
                .collect()),
        }
    }
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
