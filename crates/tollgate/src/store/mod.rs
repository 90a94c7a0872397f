//! The [`Store`] trait: one atomic operation, "decide these checks".
//!
//! A store is shaped around the decision, not around get/set: a Redis store runs one script, a
//! PostgreSQL store one statement, the memory store one compare-and-swap, each deciding every
//! check of a call together. [`DynStore`] is its object-safe twin, for choosing a store at run
//! time.

#[cfg(feature = "tokio")]
mod batch;
#[cfg(feature = "tokio")]
mod deny_cache;
#[cfg(feature = "tokio")]
pub mod guarded;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

use std::future::Future;
use std::pin::Pin;

use crate::{Policy, StoreError, Verdict};

/// One check: take `cost` tokens from the bucket of `key` under `policy`.
///
/// Buckets are identified by the key *and* the policy: the same key under two policies (10 per
/// second and 1000 per hour) is two buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check<'k> {
    /// The policy of the bucket.
    pub policy: Policy,
    /// The key, any bytes.
    pub key: &'k [u8],
    /// Tokens to take; 0 peeks.
    pub cost: u64,
}

impl<'k> Check<'k> {
    /// A check of `cost` tokens from `key` under `policy`.
    pub fn new(policy: Policy, key: &'k [u8], cost: u64) -> Check<'k> {
        Check { policy, key, cost }
    }
}

/// A rate-limit store: decides a set of checks atomically (all allowed and charged, or none
/// charged), at the store's own clock.
pub trait Store: Send + Sync + 'static {
    /// Decides `checks` together. An empty set is allowed.
    fn decide(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send;

    /// Whether the store answers (for readiness probes).
    fn ready(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A short name for logs and metrics: `memory`, `redis`, `postgres`.
    fn name(&self) -> &'static str;
}

/// A boxed future, as [`DynStore`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Store`] behind a pointer: every `Store` is a `DynStore`, so a server can pick its store
/// from configuration and hold an `Arc<dyn DynStore>`.
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
}
