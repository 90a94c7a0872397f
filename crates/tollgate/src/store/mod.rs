//! The [`Store`] trait: one atomic operation, "decide these checks".
//!
//! A store is shaped around the decision, not around get/set: a Redis store runs one script, a
//! PostgreSQL store one statement, the memory store one compare-and-swap, each deciding every
//! check of a call together. [`DynStore`] is its object-safe twin, for choosing a store at run
//! time.
//!
//! Stores compose: `Arc<S>` is a store when `S` is, and so are `dyn DynStore` and
//! `dyn DynSettle` (hence `Arc<dyn DynStore>`), so one store — picked from configuration or
//! wrapped in a [`Guarded`](guarded::Guarded) — can be handed to the middleware and kept by the
//! application's own code:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tollgate::store::DynStore;
//! use tollgate::{Check, MemoryStore, Policy, Store};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<dyn DynStore> = Arc::new(MemoryStore::new());
//! let policy = Policy::token_bucket(1, 1, Duration::from_secs(60))?;
//! // The same bucket, through a clone of the handle: the second check finds it spent.
//! let other = Arc::clone(&store);
//! assert!(store.decide(&[Check::new(policy, b"alice", 1)]).await?.allowed());
//! assert!(!other.decide(&[Check::new(policy, b"alice", 1)]).await?.allowed());
//! # Ok(())
//! # }
//! ```

// The shared stores' machinery: batching calls, and remembering denials.
#[cfg(any(feature = "redis", feature = "postgres"))]
mod batch;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod deny_cache;
#[cfg(feature = "tokio")]
pub mod guarded;
#[cfg(feature = "tokio")]
pub mod lease;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod reach;
#[cfg(feature = "redis")]
pub mod redis;
pub mod settle;
#[cfg(feature = "tokio")]
pub mod wait;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::{CheckError, Policy, PolicyError, StoreError, Verdict};

/// Refuses the settings of a batching store (Redis, PostgreSQL) that would make it useless,
/// naming each and saying why, when the store is built: a builder's setters return `Self`, as
/// redis-rs's and deadpool's do, and the build reports what is wrong, as theirs do.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn refuse_zero_settings(
    builder: &str,
    timeout: std::time::Duration,
    max_batch: usize,
    max_in_flight: usize,
) -> Result<(), StoreError> {
    if timeout.is_zero() {
        return Err(zero_setting(
            builder,
            "timeout",
            "every decision would time out before the store answers, and the fail policy would \
             answer all of them (failing open, nothing would be limited); give the longest a \
             decision may wait",
        ));
    }
    if max_batch == 0 {
        return Err(zero_setting(
            builder,
            "max_batch",
            "a call decides at least one decision; turn batching off with `coalesce(false)`",
        ));
    }
    if max_in_flight == 0 {
        return Err(zero_setting(
            builder,
            "max_in_flight",
            "no call could ever be made; turn batching off with `coalesce(false)`",
        ));
    }
    Ok(())
}

/// A [`StoreError::Config`] for `builder`'s `setting` set to zero.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn zero_setting(builder: &str, setting: &str, why: &str) -> StoreError {
    StoreError::Config(format!("{builder}::{setting} is 0: {why}"))
}

/// The longest policy name a bucket may carry, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// One check: take `cost` tokens from the bucket of `key` under `policy`.
///
/// A bucket is identified by its policy's *name*, its algorithm and the key — not by the
/// policy's numbers, which are read at each decision. So an operator can change a named limit
/// and every bucket keeps its state: a client that spent its bucket stays spent, and no change
/// of numbers hands out a fresh burst (see [`algorithm`](crate::algorithm) for what each
/// algorithm does with new numbers). A check without a name is named by its numbers: the same
/// key under two unnamed policies (10 per second and 1000 per hour) is two buckets.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Check, MemoryStore, Policy};
///
/// let store = MemoryStore::new();
/// let strict = Policy::token_bucket(2, 1, Duration::from_secs(60))?;
/// let relaxed = Policy::token_bucket(100, 100, Duration::from_secs(1))?;
/// let spend = Check::new(strict, b"alice", 2).named("api");
/// assert!(store.decide_sync(&[spend])?.allowed());
/// // The limit is raised: alice's bucket is the same one, still spent.
/// let after = store.decide_sync(&[Check::new(relaxed, b"alice", 1).named("api")])?;
/// assert!(!after.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check<'k> {
    pub(crate) policy: Policy,
    pub(crate) name: Option<&'k str>,
    pub(crate) key: &'k [u8],
    pub(crate) cost: u64,
}

impl<'k> Check<'k> {
    /// A check of `cost` tokens from `key` under `policy`, its bucket named by the numbers.
    /// The key is any bytes, borrowed: `"alice"`, `b"alice"`, `&String`, `&Vec<u8>`.
    ///
    /// ```
    /// use tollgate::{Check, Policy};
    ///
    /// let policy = Policy::per_second(10)?;
    /// let user = String::from("alice");
    /// assert_eq!(Check::new(policy, &user, 1), Check::new(policy, b"alice", 1));
    /// assert_eq!(Check::new(policy, "alice", 1).key(), b"alice");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn new(policy: Policy, key: &'k (impl AsRef<[u8]> + ?Sized), cost: u64) -> Check<'k> {
        Check {
            policy,
            name: None,
            key: key.as_ref(),
            cost,
        }
    }

    /// The policy: its numbers decide.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The policy's name, which (with the algorithm and the key) names the bucket; `None`
    /// names it by the policy's numbers.
    pub fn name(&self) -> Option<&'k str> {
        self.name
    }

    /// The key, any bytes.
    pub fn key(&self) -> &'k [u8] {
        self.key
    }

    /// Tokens to take; 0 peeks.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The same check of `cost` tokens.
    pub fn with_cost(self, cost: u64) -> Check<'k> {
        Check { cost, ..self }
    }

    /// The same check on the bucket named `name` (1 to [`MAX_NAME_LEN`] bytes).
    pub fn named(self, name: &'k str) -> Check<'k> {
        Check {
            name: Some(name),
            ..self
        }
    }

    /// Whether `self` and `other` name the same bucket.
    pub fn same_bucket(&self, other: &Check<'_>) -> bool {
        self.key == other.key
            && self.policy.algorithm() == other.policy.algorithm()
            && match (self.name, other.name) {
                (Some(a), Some(b)) => a == b,
                // Named by the numbers a store keys it by (not, say, the resolution).
                (None, None) => {
                    (
                        self.policy.capacity(),
                        self.policy.refill(),
                        self.policy.period_nanos(),
                    ) == (
                        other.policy.capacity(),
                        other.policy.refill(),
                        other.policy.period_nanos(),
                    )
                }
                _ => false,
            }
    }

    /// Refuses a set of checks that no store can decide: a name that is empty or too long, or
    /// a bucket named twice.
    pub(crate) fn validate_all(checks: &[Check<'_>]) -> Result<(), CheckError> {
        for (index, check) in checks.iter().enumerate() {
            if let Some(name) = check.name
                && (name.is_empty() || name.len() > MAX_NAME_LEN)
            {
                return Err(CheckError::InvalidName { index });
            }
            if checks[..index].iter().any(|c| c.same_bucket(check)) {
                return Err(CheckError::DuplicateBucket { index });
            }
        }
        Ok(())
    }
}

/// A rate-limit store: decides a set of checks atomically (all allowed and charged, or none
/// charged), at the store's own clock.
///
/// Most callers use a store; implementing one is for wrapping another (to count, log or route
/// calls), or for a backend of one's own, whose `decide` must be atomic across its checks:
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use tollgate::{Check, MemoryStore, Policy, Store, StoreError, Verdict};
///
/// /// Counts the calls that reach the store it wraps.
/// struct Counted<S> {
///     inner: S,
///     calls: AtomicU64,
/// }
///
/// impl<S: Store> Store for Counted<S> {
///     async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
///         self.calls.fetch_add(1, Ordering::Relaxed);
///         self.inner.decide(checks).await
///     }
///
///     async fn ready(&self) -> Result<(), StoreError> {
///         self.inner.ready().await
///     }
///
///     fn name(&self) -> &'static str {
///         self.inner.name()
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Counted { inner: MemoryStore::new(), calls: AtomicU64::new(0) };
/// let policy = Policy::token_bucket(2, 1, Duration::from_secs(1))?;
/// assert!(store.decide(&[Check::new(policy, b"alice", 2)]).await?.allowed());
/// assert!(!store.decide(&[Check::new(policy, b"alice", 1)]).await?.allowed());
/// assert_eq!(store.calls.load(Ordering::Relaxed), 2);
/// # Ok(())
/// # }
/// ```
pub trait Store: Send + Sync + 'static {
    /// Decides `checks` together. An empty set is allowed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (a timeout, a request that went away) never charges part of a call,
    /// nor more than its answer would have said; whether it charged at all depends on how far it
    /// got:
    ///
    /// - [`MemoryStore`](crate::MemoryStore) decides on the first poll and is ready then: a
    ///   future that was polled has decided (and charged, if allowed); one never polled has not.
    /// - `RedisStore` and `PostgresStore` batch concurrent checks. A future dropped while its
    ///   checks wait in the queue charges nothing: the call that takes the queue skips a
    ///   decision nobody awaits. Once its call has been handed to the connection (its batch
    ///   was taken, or its lane was idle and it made the call itself), the script or statement
    ///   runs to its end on the server, all checks or none, and may have charged: the answer
    ///   is lost, not the charge. Denials charge nothing either way, and a denial answered
    ///   from the Redis store's local cache of denials makes no call at all.
    /// - [`Guarded`](guarded::Guarded)'s timeout is such a drop: the fail policy answers, and
    ///   the store may still charge the call that timed out (so, failing open, one request
    ///   may be both allowed locally and charged in the store; never charged twice).
    fn decide(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send;

    /// Whether the store answers (for readiness probes). Settings that can never work
    /// (credentials refused, no such database or DB index) are a [`StoreError::Config`] here,
    /// so that a program probing its store before it serves can refuse to start; a decision
    /// meets the same refusal as an outage ([`StoreError::Unavailable`]), which a fail policy
    /// answers.
    ///
    /// # Cancel safety
    ///
    /// A probe changes no bucket, so dropping it loses nothing but its answer. A connection it
    /// was making may still be made, for the next call to use.
    fn ready(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A short name for logs and metrics: `memory`, `redis`, `postgres`.
    fn name(&self) -> &'static str;

    /// Whether this store can decide `policy` at all. A store whose numbers have a narrower
    /// range than [`Policy`]'s (Redis computes in Lua's doubles) or that lacks an algorithm
    /// refuses, naming the field, so that a caller checks a policy once, when it is configured
    /// or received, rather than meeting [`CheckError::Unsupported`] at each decision.
    fn supports(&self, policy: &Policy) -> Result<(), PolicyError> {
        let _ = policy;
        Ok(())
    }
}

/// A boxed future, as [`DynStore`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Store`] behind a pointer: every `Store` is a `DynStore`, so a server can pick its store
/// from configuration and hold an `Arc<dyn DynStore>`.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::store::DynStore;
/// use tollgate::{Check, MemoryStore, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// fn pick(_url: &str) -> Arc<dyn DynStore> {
///     // A RedisStore or a PostgresStore would do as well.
///     Arc::new(MemoryStore::new())
/// }
/// let store = pick("memory");
/// assert_eq!(store.name_dyn(), "memory");
/// let verdict = store.decide_dyn(&[Check::new(Policy::per_second(1)?, b"alice", 1)]).await?;
/// assert!(verdict.allowed());
/// # Ok(())
/// # }
/// ```
pub trait DynStore: Send + Sync + 'static {
    /// See [`Store::decide`].
    fn decide_dyn<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>>;
    /// See [`Store::ready`].
    fn ready_dyn(&self) -> BoxFuture<'_, Result<(), StoreError>>;
    /// See [`Store::name`].
    fn name_dyn(&self) -> &'static str;
    /// See [`Store::supports`].
    fn supports_dyn(&self, policy: &Policy) -> Result<(), PolicyError>;
}

impl<S: Store> DynStore for S {
    fn decide_dyn<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(self.decide(checks))
    }

    fn ready_dyn(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.ready())
    }

    fn name_dyn(&self) -> &'static str {
        self.name()
    }

    fn supports_dyn(&self, policy: &Policy) -> Result<(), PolicyError> {
        self.supports(policy)
    }
}

/// A shared store is a store: the middleware and the application's own code can hold one
/// `Arc` to the same buckets (and the same [`Guarded`](guarded::Guarded) statistics).
impl<S: Store + ?Sized> Store for Arc<S> {
    fn decide(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send {
        (**self).decide(checks)
    }

    fn ready(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).ready()
    }

    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn supports(&self, policy: &Policy) -> Result<(), PolicyError> {
        (**self).supports(policy)
    }
}

/// A store chosen at run time (`Arc<dyn DynStore>`) is a store again, for every API that takes
/// `impl Store`.
impl Store for dyn DynStore {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        self.decide_dyn(checks).await
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.ready_dyn().await
    }

    fn name(&self) -> &'static str {
        self.name_dyn()
    }

    fn supports(&self, policy: &Policy) -> Result<(), PolicyError> {
        self.supports_dyn(policy)
    }
}
