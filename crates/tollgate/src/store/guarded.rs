//! [`Guarded`]: what a caller does when its store cannot answer.
//!
//! A shared store can be down, slow or restarting. Rate limiting must not take the API down with
//! it, nor hang it: every call is bounded by a timeout, and a *transient* failure (see
//! [`StoreError::is_transient`]) is handled by the [`FailPolicy`] the caller chose. A check that
//! is wrong in itself (`cost > capacity`) is reported as such whatever the policy. Recovery needs
//! nothing: the next call goes to the store again.
//!
//! A store that was built and then refuses its settings (a password changed, a `pg_hba.conf`
//! entry removed, found when it connects again) is down like any other: its decisions fail
//! with [`StoreError::Unavailable`], in plain words, and the fail policy answers them, the
//! [`on_error`](Guarded::on_error) hook sees them and they are counted
//! ([`GuardStats::store_errors`]). [`Store::ready`] still says
//! [`StoreError::Config`], so that a program probing a store before it serves can refuse to
//! start on settings that can never work.
//!
//! A store that answers what this program does not understand ([`StoreError::Incompatible`]: a
//! script error, a key of another type, a schema of another version) is a bug or a
//! misconfiguration, not an outage. The request still needs an answer, so the fail policy gives
//! it too; but such failures are never silent: they are counted apart
//! ([`GuardStats::incompatible`]), handed to the [`on_incompatible`](Guarded::on_incompatible)
//! hook (the server logs them at error level, at most once a second), and [`Store::ready`]
//! fails with the last of them until a decision succeeds again, or
//! [`unready_for`](Guarded::unready_for) ([`INCOMPATIBLE_FOR`] by default) passes without another (an instance that gets no traffic must not stay unready for good once the
//! store is fixed).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::store::guarded::{FailPolicy, Guarded};
//! use tollgate::{Check, MemoryStore, NonZeroDuration, Policy, Store};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Any store; here the memory store stands in for Redis or PostgreSQL.
//! let limit = NonZeroDuration::from_millis(50).unwrap();
//! let store = Guarded::new(MemoryStore::new(), FailPolicy::Deny).timeout(limit);
//! let policy = Policy::token_bucket(5, 5, Duration::from_secs(1))?;
//! assert!(store.decide(&[Check::new(policy, b"alice", 1)]).await?.allowed());
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use super::settle::{Adjustment, Once, Settle};
use super::{Check, Store};
use parking_lot::Mutex;

use crate::{
    Clock, Decision, ErrorKind, MemoryStore, MonotonicClock, Nanos, NonZeroDuration, StoreError,
    Verdict,
};

/// What to answer when the store fails transiently (down, slow, timed out, full).
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::store::guarded::{FailPolicy, Guarded};
/// use tollgate::{Check, MemoryStore, Policy, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A store that fails for a second key stands in for one that is down.
/// let store = MemoryStore::builder().max_keys(NonZeroUsize::MIN).build();
/// let fallback = MemoryStore::new();
/// let guarded = Guarded::new(store, FailPolicy::Local(fallback));
/// let policy = Policy::per_second(1)?;
/// guarded.decide(&[Check::new(policy, b"alice", 1)]).await?;
/// // bob is decided by the local limiter meanwhile: his first request passes, his second not.
/// assert!(guarded.decide(&[Check::new(policy, b"bob", 1)]).await?.allowed());
/// assert!(!guarded.decide(&[Check::new(policy, b"bob", 1)]).await?.allowed());
/// assert_eq!(guarded.stats().local_fallbacks(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum FailPolicy {
    /// Fail open: allow, as if every bucket were full. Availability over protection.
    Allow,
    /// Fail closed: return the store's error, which a front end reports as unavailable
    /// (HTTP 503, gRPC `UNAVAILABLE`). Protection over availability.
    Deny,
    /// Decide with a local in-memory limiter meanwhile: each process then enforces the limit on
    /// its own (so N processes allow up to N times the limit) until the store is back.
    Local(MemoryStore),
}

impl std::fmt::Debug for FailPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailPolicy::Allow => "Allow",
            FailPolicy::Deny => "Deny",
            FailPolicy::Local(_) => "Local",
        })
    }
}

/// Counts of how calls were answered, for metrics. Read-only: only the [`Guarded`] that owns
/// them (and its clones) counts.
///
/// ```
/// use tollgate::store::guarded::{FailPolicy, Guarded};
/// use tollgate::{Check, MemoryStore, Policy, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let guarded = Guarded::new(MemoryStore::new(), FailPolicy::Deny);
/// guarded.decide(&[Check::new(Policy::per_second(5)?, b"alice", 1)]).await?;
/// let stats = guarded.stats();
/// assert_eq!((stats.store_errors(), stats.failed_open(), stats.incompatible()), (0, 0, 0));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct GuardStats {
    store_errors: AtomicU64,
    failed_open: AtomicU64,
    local_fallbacks: AtomicU64,
    incompatible: AtomicU64,
}

impl GuardStats {
    /// Calls the store failed (transiently).
    pub fn store_errors(&self) -> u64 {
        self.store_errors.load(Ordering::Relaxed)
    }

    /// Of those, calls answered "allowed" by [`FailPolicy::Allow`].
    pub fn failed_open(&self) -> u64 {
        self.failed_open.load(Ordering::Relaxed)
    }

    /// Of those, calls answered by the local fallback.
    pub fn local_fallbacks(&self) -> u64 {
        self.local_fallbacks.load(Ordering::Relaxed)
    }

    /// Calls the store answered with something this program does not understand (answered by
    /// the fail policy too, and not counted in `store_errors`).
    pub fn incompatible(&self) -> u64 {
        self.incompatible.load(Ordering::Relaxed)
    }
}

/// How long an incompatible answer keeps [`Store::ready`] failing, without a success or
/// another such answer in between.
pub const INCOMPATIBLE_FOR: Duration = Duration::from_secs(10);

/// Called with a store's failure.
type ErrorHook = Arc<dyn Fn(&StoreError) + Send + Sync>;

/// A store with a timeout and a fail policy.
///
/// Cloning it (when the store clones, as every store of this crate does: each is a handle on
/// shared state) gives a handle on the same statistics and readiness: the middleware and the
/// application's own code can share one `Guarded` and see one set of counts.
///
/// ```
/// use std::num::NonZeroUsize;
/// use std::time::Duration;
/// use tollgate::store::guarded::{FailPolicy, Guarded};
/// use tollgate::{Check, MemoryStore, Policy, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A store that holds one key at most: a second key is a (transient) failure.
/// let one_key = MemoryStore::builder().max_keys(NonZeroUsize::MIN).build();
/// let guarded = Guarded::new(one_key, FailPolicy::Allow);
/// let copy = guarded.clone();
/// let policy = Policy::token_bucket(5, 5, Duration::from_secs(1))?;
/// guarded.decide(&[Check::new(policy, b"alice", 1)]).await?;
/// assert!(copy.decide(&[Check::new(policy, b"bob", 1)]).await?.by_fail_policy());
/// assert_eq!(guarded.stats().failed_open(), 1);
/// # Ok(())
/// # }
/// ```
pub struct Guarded<S> {
    store: S,
    fail_policy: FailPolicy,
    timeout: Option<Duration>,
    /// What every clone shares.
    health: Arc<Health>,
    clock: MonotonicClock,
    on_incompatible: Option<ErrorHook>,
    on_error: Option<ErrorHook>,
    unready_for: Duration,
}

/// The counts and readiness of a [`Guarded`] and its clones.
#[derive(Default)]
struct Health {
    stats: GuardStats,
    /// Whether the last failure was an incompatibility not yet followed by a success.
    incompatible: AtomicBool,
    /// What it was, and when.
    last_incompatibility: Mutex<(String, Option<Nanos>)>,
}

impl<S: Clone> Clone for Guarded<S> {
    fn clone(&self) -> Self {
        Guarded {
            store: self.store.clone(),
            fail_policy: self.fail_policy.clone(),
            timeout: self.timeout,
            health: Arc::clone(&self.health),
            clock: self.clock,
            on_incompatible: self.on_incompatible.clone(),
            on_error: self.on_error.clone(),
            unready_for: self.unready_for,
        }
    }
}

impl<S: Store> Guarded<S> {
    /// Wraps `store`; failures are handled by `fail_policy`.
    pub fn new(store: S, fail_policy: FailPolicy) -> Guarded<S> {
        Guarded {
            store,
            fail_policy,
            timeout: None,
            health: Arc::default(),
            clock: MonotonicClock::new(),
            on_incompatible: None,
            on_error: None,
            unready_for: INCOMPATIBLE_FOR,
        }
    }

    /// Calls `hook` with every [`StoreError::Incompatible`] (to log it; it runs on the
    /// request's path, so it should be quick).
    pub fn on_incompatible(mut self, hook: impl Fn(&StoreError) + Send + Sync + 'static) -> Self {
        self.on_incompatible = Some(Arc::new(hook));
        self
    }

    /// How long an incompatible answer keeps [`Store::ready`] failing when no decision
    /// succeeds and no other such answer comes meanwhile.
    pub fn unready_for(mut self, period: Duration) -> Self {
        self.unready_for = period;
        self
    }

    /// Calls `hook` with every failure of a decision that the fail policy answers (transient
    /// or incompatible; not a check refused for itself): to count them by
    /// [`kind`](StoreError::kind), or to note that the store is down. It runs on the request's
    /// path, so it should be quick.
    pub fn on_error(mut self, hook: impl Fn(&StoreError) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Arc::new(hook));
        self
    }

    /// Bounds every call, on top of the store's own timeout. A call that runs out of time is
    /// dropped, as [`Store::decide`]'s "Cancel safety" says: answered by the fail policy,
    /// while the store may still charge it.
    ///
    /// A [`NonZeroDuration`]: with a zero timeout a shared store would never answer in time,
    /// and the fail policy would answer every call (failing open, nothing would be limited).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::store::guarded::{FailPolicy, Guarded};
    /// use tollgate::{MemoryStore, NonZeroDuration};
    ///
    /// let limit = NonZeroDuration::from_millis(50).unwrap();
    /// let store = Guarded::new(MemoryStore::new(), FailPolicy::Allow).timeout(limit);
    /// // A timeout read from a file: zero is refused where it is read.
    /// let read = Duration::ZERO;
    /// assert!(NonZeroDuration::new(read).is_none());
    /// # drop(store);
    /// ```
    ///
    /// A zero `Duration` does not compile:
    ///
    /// ```compile_fail
    /// use std::time::Duration;
    /// use tollgate::store::guarded::{FailPolicy, Guarded};
    /// use tollgate::MemoryStore;
    ///
    /// let _ = Guarded::new(MemoryStore::new(), FailPolicy::Allow).timeout(Duration::ZERO);
    /// ```
    pub fn timeout(mut self, timeout: NonZeroDuration) -> Self {
        self.timeout = Some(timeout.get());
        self
    }

    /// How calls were answered so far.
    pub fn stats(&self) -> &GuardStats {
        &self.health.stats
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.store
    }

    async fn bounded(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        let Some(limit) = self.timeout else {
            return self.store.decide(checks).await;
        };
        let mut decided = std::pin::pin!(self.store.decide(checks));
        // A store that answers at once (the memory store always does) needs no timer: reading
        // the clock and arming one would cost more than its decision.
        let first = std::future::poll_fn(|cx| Poll::Ready(decided.as_mut().poll(cx))).await;
        if let Poll::Ready(answer) = first {
            return answer;
        }
        tokio::time::timeout(limit, decided)
            .await
            .unwrap_or(Err(StoreError::Timeout(limit)))
    }
}

impl<S: Store> Store for Guarded<S> {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        let answer = match self.bounded(checks).await {
            // Settings refused by a store that was built and served (one of a user's own that
            // reports them late): an outage, as the stores of this crate report it.
            Err(StoreError::Config(why)) => Err(StoreError::Unavailable(why.into())),
            answer => answer,
        };
        let error = match answer {
            Ok(verdict) => {
                if self.health.incompatible.load(Ordering::Relaxed) {
                    self.health.incompatible.store(false, Ordering::Relaxed);
                }
                return Ok(verdict);
            }
            Err(e) if e.is_transient() => {
                self.health
                    .stats
                    .store_errors
                    .fetch_add(1, Ordering::Relaxed);
                e
            }
            Err(e) if e.kind() == ErrorKind::Incompatible => {
                self.health
                    .stats
                    .incompatible
                    .fetch_add(1, Ordering::Relaxed);
                if let StoreError::Incompatible(why) = &e {
                    *self.health.last_incompatibility.lock() =
                        (why.to_string(), Some(self.clock.now()));
                }
                self.health.incompatible.store(true, Ordering::Relaxed);
                if let Some(hook) = &self.on_incompatible {
                    hook(&e);
                }
                e
            }
            Err(e) => return Err(e),
        };
        if let Some(hook) = &self.on_error {
            hook(&error);
        }
        match &self.fail_policy {
            FailPolicy::Deny => Err(error),
            FailPolicy::Allow => {
                self.health
                    .stats
                    .failed_open
                    .fetch_add(1, Ordering::Relaxed);
                Ok(allow_all(checks))
            }
            FailPolicy::Local(local) => {
                self.health
                    .stats
                    .local_fallbacks
                    .fetch_add(1, Ordering::Relaxed);
                let mut verdict = local.decide_sync(checks)?;
                verdict.by_fail_policy = true;
                Ok(verdict)
            }
        }
    }

    async fn ready(&self) -> Result<(), StoreError> {
        if self.health.incompatible.load(Ordering::Relaxed) {
            let (why, at) = self.health.last_incompatibility.lock().clone();
            if at.is_some_and(|at| self.clock.now() - at < Nanos::from(self.unready_for)) {
                return Err(StoreError::incompatible(why));
            }
            self.health.incompatible.store(false, Ordering::Relaxed);
        }
        self.store.ready().await
    }

    fn name(&self) -> &'static str {
        self.store.name()
    }

    fn supports(&self, policy: &crate::Policy) -> Result<(), crate::PolicyError> {
        self.store.supports(policy)
    }
}

/// Settlements are bounded by the timeout too, but no fail policy answers for them: a refund
/// that did not happen must not be reported as done, so its error reaches the caller.
impl<S: Settle> Settle for Guarded<S> {
    async fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> Result<Verdict, StoreError> {
        self.bound(self.store.settle(once, adjustments)).await
    }

    async fn reset(&self, buckets: &[Check<'_>]) -> Result<(), StoreError> {
        self.bound(self.store.reset(buckets)).await
    }
}

impl<S> Guarded<S> {
    async fn bound<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.timeout {
            Some(limit) => tokio::time::timeout(limit, call)
                .await
                .unwrap_or(Err(StoreError::Timeout(limit))),
            None => call.await,
        }
    }
}

/// The fail-open answer: allowed, as from full buckets.
fn allow_all(checks: &[Check<'_>]) -> Verdict {
    let mut verdict = Verdict::new(
        checks
            .iter()
            .map(|c| {
                Decision::exact(
                    true,
                    c.policy.capacity(),
                    c.policy.capacity().saturating_sub(c.cost),
                    Nanos::ZERO,
                    Nanos::ZERO,
                )
            })
            .collect(),
    );
    verdict.by_fail_policy = true;
    verdict
}
