//! The PostgreSQL store: one atomic statement per decision, at the database's clock.
//!
//! A single check is one `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE ... RETURNING`
//! (`decide_one.sql`), a port of [`gcra`](crate::algorithm::gcra) in integer microseconds of
//! `clock_timestamp()`: the upsert locks the bucket's row, so at READ COMMITTED it is atomic
//! without retries, and concurrent first calls on a new key cannot collide (one inserts, the
//! others update). A batch of single checks on distinct buckets is the same upsert over all
//! their rows (`decide_set.sql`). Several checks decided together, and any other batch, are one
//! call of a PL/pgSQL function (`schema.sql`) that locks their rows in a global order, decides
//! in order, and returns the state it read and wrote; tollgate replays the
//! decisions with the pure functions and checks it reaches the same state.
//!
//! Statements are prepared on a few shared connections and pipelined (see `pool.rs`). Under
//! SERIALIZABLE (YugabyteDB, CockroachDB) conflicts (SQLSTATE 40001, 40P01) are retried with
//! bounded, jittered backoff ([`Retry`]). As with Redis, a deny cache answers known denials
//! locally, and concurrent decisions are batched: those that arrive while calls are in flight
//! (at most [`max_in_flight`](PostgresStoreBuilder::max_in_flight), 2) wait, and the next
//! call decides all of them in arrival order. So a transaction (and its commit) serves a whole
//! batch, and a hot row's lock is taken once per batch rather than once per caller. Keys are
//! locked in sorted order, so concurrent batches never deadlock; under SERIALIZABLE, calls in
//! flight at once never share a row (a hot row's batches follow each other), so a process's
//! calls never fail to serialize against each other. A decision that finds nothing
//! in flight is sent at once: alone, a single check is the single upsert. Sessions commit
//! without waiting for the disk unless told to
//! ([`synchronous_commit`](PostgresStoreBuilder::synchronous_commit)). Idle rows (full buckets)
//! are deleted in small batches in the background. Every call is bounded by a timeout (default
//! 100 ms); failures are transient, so the caller's fail policy applies.
//!
//! ```no_run
//! use std::time::Duration;
//! use tollgate::{Check, Policy, PostgresStore, Store};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PostgresStore::builder("postgres://postgres@127.0.0.1/postgres")
//!     .unlogged(true)
//!     .build()
//!     .await?;
//! let policy = Policy::token_bucket(10, 10, Duration::from_secs(1))?;
//! let verdict = store.decide(&[Check::new(policy, b"alice", 1)]).await?;
//! assert!(verdict.allowed());
//! # Ok(())
//! # }
//! ```

mod batch;
mod builder;
mod call;
mod cleanup;
mod error;
mod isolation;
mod pool;
mod retry;
mod schema;
mod settle;
mod statement;
mod store;
mod tls;
mod windows;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::store::batch::Batcher;
use crate::store::deny_cache::DenyCache;
use crate::{Clock, Nanos, StoreError};
pub use builder::{DEFAULT_TIMEOUT, PostgresStoreBuilder};
pub use isolation::Isolation;
use pool::Pool;
pub use retry::{GiveUp, Retry};

/// A store in PostgreSQL (or a database speaking its protocol). Cheap to clone: clones share
/// the connections and caches.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::{Check, Policy, PostgresStore, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::builder("postgres://tollgate@db/tollgate?sslmode=require")
///     .build()
///     .await?;
/// store.ready().await?; // the schema is made on first use
/// let policy = Policy::per_minute(60)?.burst(10)?;
/// let verdict = store.decide(&[Check::new(policy, b"alice", 1).named("api")]).await?;
/// println!("allowed: {}", verdict.allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
    batcher: Option<Arc<Batcher<Inner>>>,
}

/// Counts of conflicts, for metrics and tests.
///
/// ```no_run
/// use tollgate::PostgresStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tollgate::StoreError> {
/// let store = PostgresStore::builder("postgres://tollgate@db/tollgate").build().await?;
/// let stats = store.stats();
/// println!(
///     "{} statements, {} retried, {} gave up",
///     stats.statements(),
///     stats.retries(),
///     stats.gave_up(),
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct PostgresStats {
    pub(crate) statements: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) gave_up: AtomicU64,
}

impl PostgresStats {
    /// Statements sent: one per call and attempt, whatever the call decides.
    pub fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// Attempts that failed to serialize and were run again.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Calls that still conflicted after every attempt.
    pub fn gave_up(&self) -> u64 {
        self.gave_up.load(Ordering::Relaxed)
    }
}

struct Inner {
    pool: Pool,
    isolation: Isolation,
    timeout: Duration,
    retry: Retry,
    clock: Arc<dyn Clock>,
    inject_time: bool,
    deny_cache: Option<DenyCache>,
    cleanup_batch: i64,
    stats: PostgresStats,
    /// Hashes rows for [`Runner::rows`](crate::store::batch::Runner::rows).
    row_hasher: foldhash::fast::FixedState,
}

impl PostgresStore {
    /// Creates the schema, table and function if missing (what `tollgate migrate` runs), on a
    /// connection of its own. Settings that can never work (credentials refused, no such
    /// database) are a [`StoreError::Config`], as for [`Store::ready`](crate::Store::ready).
    ///
    /// # Cancel safety
    ///
    /// It runs in one transaction: dropped before that commits, its connection closes with it
    /// and PostgreSQL rolls the transaction back, leaving the schema as it was; dropped after,
    /// the schema is made. Either way running it again is safe (from many processes at once,
    /// too: they take turns on an advisory lock).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.inner.pool.migrate().await
    }

    /// Deletes idle rows (full buckets) in batches until none is left, and the settlement ids
    /// that have expired; returns how many rows of buckets went. The store also does this in
    /// the background (see [`PostgresStoreBuilder::cleanup_interval`]).
    ///
    /// # Cancel safety
    ///
    /// It deletes in batches, one statement each. Dropped between two, the batches done stay
    /// done; dropped while one is in flight, that statement runs to its end on the server or
    /// not at all. What it deletes is idle either way (a full bucket, an ended window, an
    /// expired id), and a deleted bucket is indistinguishable from a new one, so a cleanup cut
    /// short changes no decision: the next one deletes the rest.
    pub async fn cleanup_idle(&self) -> Result<u64, StoreError> {
        self.inner.cleanup_idle().await
    }

    /// Conflicts retried and given up so far.
    pub fn stats(&self) -> &PostgresStats {
        &self.inner.stats
    }
}

impl Inner {
    /// The local clock, in whole microseconds when it stands in for the database's.
    fn local_now(&self) -> Nanos {
        let now = self.clock.now();
        if self.inject_time {
            Nanos::new(now.as_u64() / 1000 * 1000)
        } else {
            now
        }
    }

    /// The time to pass to the statements: `None` lets the database read its own clock.
    /// The injected time in µs (tests), or `None` for `clock_timestamp()`. An injected reading
    /// past [`MAX_NOW`](crate::algorithm::gcra::MAX_NOW) is refused before anything is sent:
    /// the replay could not decide at it.
    fn now_param(&self) -> Result<Option<i64>, StoreError> {
        if !self.inject_time {
            return Ok(None);
        }
        let now = self.local_now();
        crate::algorithm::gcra::check_now(now)?;
        Ok(Some(i64::try_from(now.as_u64() / 1000).unwrap_or(i64::MAX)))
    }
}
