//! Waiting for tokens instead of being refused: [`until_ready`], and [`Wait`] for a jittered
//! wait (governor's `until_ready` / `until_n_ready`; the cost of a [`Check`] is the `n`).
//!
//! A denial says how long until the same checks could pass (`retry_after`): the wait sleeps
//! that long (plus jitter, if asked) and decides again, since someone else may have taken the
//! tokens meanwhile, until the checks pass or the next wait would end past the maximum. Then
//! it answers the last denial at once, without sleeping in vain: a caller whose tokens come
//! too late learns it now.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::store::wait::until_ready;
//! use tollgate::{Check, MemoryStore, Policy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! // One token every 10 ms.
//! let policy = Policy::per_second(100)?.burst(1)?;
//! let check = Check::new(policy, b"crawler", 1);
//! for _ in 0..3 {
//!     // Each call past the first sleeps until its token comes (at most a second).
//!     let verdict = until_ready(&store, &[check], Duration::from_secs(1)).await?;
//!     assert!(verdict.allowed());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Cancel safety
//!
//! Dropping the future while it sleeps charges nothing (the denials it waits on took
//! nothing); dropping it while it decides is a drop of [`Store::decide`] (see its "Cancel
//! safety"). An allowed answer has charged.

use std::hash::BuildHasher;
use std::time::Duration;

use super::{Check, Store};
use crate::{StoreError, Verdict};

/// How long to wait for tokens at most, and how much jitter to add to each wait.
///
/// Jitter spreads the retries of callers denied together (who would otherwise all come back at
/// the very instant the next token does, and all but one be denied again).
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::wait::Wait;
/// use tollgate::{Check, MemoryStore, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let policy = Policy::per_second(1)?;
/// let wait = Wait::at_most(Duration::from_millis(100)).jitter(Duration::from_millis(10));
/// let spend = [Check::new(policy, b"alice", 1)];
/// assert!(wait.until_ready(&store, &spend).await?.allowed());
/// // The next token is a second away: no point sleeping 100 ms first.
/// let denied = wait.until_ready(&store, &spend).await?;
/// assert!(!denied.allowed());
/// assert!(denied.retry_after() > Duration::from_millis(100));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    max_wait: Duration,
    jitter: Duration,
}

/// The shortest sleep between two decisions: a denial that says zero (its tokens were there
/// and were taken meanwhile) must not turn the wait into a busy loop on the store.
const MIN_SLEEP: Duration = Duration::from_millis(1);

impl Wait {
    /// Waits up to `max_wait` in all, without jitter.
    pub fn at_most(max_wait: Duration) -> Wait {
        Wait {
            max_wait,
            jitter: Duration::ZERO,
        }
    }

    /// Adds a random delay of up to `up_to` to each wait (within the maximum).
    pub fn jitter(self, up_to: Duration) -> Wait {
        Wait {
            jitter: up_to,
            ..self
        }
    }

    /// Decides `checks` on `store`, sleeping on each denial's `retry_after` until they pass
    /// or the maximum wait would be exceeded; answers the last verdict (allowed, or the
    /// denial it gave up on). A store's error (`cost > capacity` included) ends the wait.
    ///
    /// # Cancel safety
    ///
    /// As the [module](self)'s: dropped while it sleeps, it has charged nothing.
    pub async fn until_ready<S: Store + ?Sized>(
        &self,
        store: &S,
        checks: &[Check<'_>],
    ) -> Result<Verdict, StoreError> {
        let mut waited = Duration::ZERO;
        loop {
            let verdict = store.decide(checks).await?;
            if verdict.allowed() {
                return Ok(verdict);
            }
            let left = self.max_wait.saturating_sub(waited);
            let needed = verdict.retry_after().max(MIN_SLEEP);
            if needed > left {
                return Ok(verdict);
            }
            let sleep = (needed + self.jitter_sample()).min(left);
            tokio::time::sleep(sleep).await;
            waited += sleep;
        }
    }

    /// A uniform-enough delay in `[0, jitter]`, in whole nanoseconds. The randomness comes
    /// from the standard library's per-instance hasher keys: jitter needs no stronger source.
    fn jitter_sample(&self) -> Duration {
        let bound = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        if bound == 0 {
            return Duration::ZERO;
        }
        let random = std::collections::hash_map::RandomState::new().hash_one(bound);
        Duration::from_nanos(random % bound.saturating_add(1))
    }
}

/// Decides `checks` on `store`, waiting up to `max_wait` for their tokens: [`Wait::at_most`]
/// without jitter.
///
/// # Cancel safety
///
/// As the [module](self)'s: dropped while it sleeps, it has charged nothing.
pub async fn until_ready<S: Store + ?Sized>(
    store: &S,
    checks: &[Check<'_>],
    max_wait: Duration,
) -> Result<Verdict, StoreError> {
    Wait::at_most(max_wait).until_ready(store, checks).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_within_its_bound_and_varies() {
        let wait = Wait::at_most(Duration::from_secs(1)).jitter(Duration::from_millis(5));
        let samples: Vec<_> = (0..64).map(|_| wait.jitter_sample()).collect();
        assert!(samples.iter().all(|d| *d <= Duration::from_millis(5)));
        assert!(samples.iter().any(|d| *d != samples[0]), "{samples:?}");
        assert_eq!(
            Wait::at_most(Duration::ZERO).jitter_sample(),
            Duration::ZERO
        );
    }
}
