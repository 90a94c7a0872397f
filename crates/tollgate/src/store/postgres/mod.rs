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

mod call;
mod pool;
mod retry;
mod schema;
mod settle;
mod windows;

use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::types::ToSql;

use super::batch::{Batcher, Runner};
use super::deny_cache::{DenyCache, Refill};
use super::{Check, Store};
use crate::algorithm::gcra::Gcra;
use crate::{CheckError, Clock, Decision, MonotonicClock, Nanos, Policy, StoreError, Verdict};
use call::{Call, Units};
pub use pool::Isolation;
use pool::{Conn, Pool, Setup, store_error};
pub use retry::{GiveUp, Retry};
use schema::Names;

/// The default bound on one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// Configures a [`PostgresStore`].
pub struct PostgresStoreBuilder {
    url: String,
    schema: String,
    table: String,
    unlogged: bool,
    synchronous_commit: bool,
    create_schema: bool,
    connections: usize,
    timeout: Duration,
    isolation: Isolation,
    retry: Retry,
    deny_cache: bool,
    coalesce: bool,
    max_batch: usize,
    max_in_flight: usize,
    cleanup_interval: Option<Duration>,
    cleanup_batch: i64,
    test_clock: Option<Arc<dyn Clock>>,
}

/// A store in PostgreSQL (or a database speaking its protocol). Cheap to clone: clones share
/// the connections and caches.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
    batcher: Option<Arc<Batcher<Inner>>>,
}

/// Counts of conflicts, for metrics and tests.
#[derive(Debug, Default)]
pub struct PostgresStats {
    /// Statements sent: one per call and attempt, whatever the call decides.
    pub statements: AtomicU64,
    /// Attempts that failed to serialize and were run again.
    pub retries: AtomicU64,
    /// Calls that still conflicted after every attempt.
    pub gave_up: AtomicU64,
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
    /// Hashes rows for [`Runner::rows`].
    row_hasher: foldhash::fast::FixedState,
}

impl PostgresStore {
    /// A store on the database at `url` (`postgres://user:password@host:port/db`).
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            url: url.into(),
            schema: "tollgate".into(),
            table: "buckets".into(),
            unlogged: false,
            synchronous_commit: false,
            create_schema: true,
            connections: 4,
            timeout: DEFAULT_TIMEOUT,
            isolation: Isolation::ReadCommitted,
            retry: Retry::default(),
            deny_cache: true,
            coalesce: true,
            max_batch: 256,
            max_in_flight: 2,
            cleanup_interval: Some(Duration::from_secs(10)),
            cleanup_batch: 1000,
            test_clock: None,
        }
    }

    /// Creates the schema, table and function if missing (what `tollgate migrate` runs).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.inner.pool.migrate().await
    }

    /// Deletes idle rows (full buckets) in batches until none is left, and the settlement ids
    /// that have expired; returns how many rows of buckets went. The store also does this in
    /// the background (see [`PostgresStoreBuilder::cleanup_interval`]).
    pub async fn cleanup_idle(&self) -> Result<u64, StoreError> {
        self.inner.cleanup_idle().await
    }

    /// Conflicts retried and given up so far.
    pub fn stats(&self) -> &PostgresStats {
        &self.inner.stats
    }
}

impl PostgresStoreBuilder {
    /// The schema holding the table (default `tollgate`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The table of buckets (default `buckets`); the function is `<table>_decide`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Creates the table UNLOGGED (default off): faster writes, no WAL, but a crash empties it
    /// (every bucket full again, so each key may get one extra burst) and replicas lack it.
    pub fn unlogged(mut self, on: bool) -> Self {
        self.unlogged = on;
        self
    }

    /// Whether a decision waits for its commit to reach the disk (default off: the session's
    /// `synchronous_commit`). Off, a commit returns once it is in the write-ahead log's
    /// buffers, and the WAL writer flushes it within `3 × wal_writer_delay` (600 ms by
    /// default). The state stays consistent and is replicated as usual; a crash of the
    /// database server (not of a client) loses the decisions of that last moment, so their
    /// tokens can be taken again once it is back. During the crash the store is down anyway
    /// and the fail policy decides; on the default fail-open nothing is limited meanwhile. A
    /// decision needs to be atomic, not durable, before its request goes on: waiting for the
    /// flush would make each one pay a disk write (about 0.2 ms here) for nothing it needs.
    /// On, commits are as durable as the server's settings make them.
    pub fn synchronous_commit(mut self, on: bool) -> Self {
        self.synchronous_commit = on;
        self
    }

    /// Whether to create the schema on first use (default on); off when `tollgate migrate`
    /// creates it ahead and the store's role may not run DDL.
    pub fn create_schema(mut self, on: bool) -> Self {
        self.create_schema = on;
        self
    }

    /// How many connections to share (default 4).
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n;
        self
    }

    /// The bound on one call, retries included (default 100 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The isolation level of the store's transactions (default READ COMMITTED).
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// How serialization failures are retried.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Whether to answer known denials locally (default on).
    pub fn deny_cache(mut self, on: bool) -> Self {
        self.deny_cache = on;
        self
    }

    /// Whether concurrent decisions share calls (default on). Off, every decision is its own
    /// call.
    pub fn coalesce(mut self, on: bool) -> Self {
        self.coalesce = on;
        self
    }

    /// The most decisions one call decides (default 256).
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }

    /// How many calls may be in flight at once (default 2), whatever the number of connections:
    /// the next batch reaches the database while the last one commits. More calls in flight
    /// make smaller batches, and on a hot key, calls that only queue on its row lock (or, under
    /// SERIALIZABLE, conflict).
    pub fn max_in_flight(mut self, calls: usize) -> Self {
        self.max_in_flight = calls;
        self
    }

    /// How often idle rows are deleted in the background (default every 10 s; `None`: never).
    pub fn cleanup_interval(mut self, every: Option<Duration>) -> Self {
        self.cleanup_interval = every;
        self
    }

    /// The most rows one cleanup statement deletes (default 1000).
    pub fn cleanup_batch(mut self, rows: u32) -> Self {
        self.cleanup_batch = i64::from(rows.max(1));
        self
    }

    /// Decides at `clock` instead of `clock_timestamp()`: for tests that move time by hand.
    pub fn test_clock(mut self, clock: impl Clock) -> Self {
        self.test_clock = Some(Arc::new(clock));
        self
    }

    /// Checks the configuration. Connects lazily: a database that is down now makes calls
    /// fail (transiently) until it is up.
    ///
    /// Fails with [`StoreError::Config`] for a schema or table name that is not a plain
    /// identifier, a URL that does not parse, or outside a Tokio runtime (the store runs its
    /// cleanup on one).
    pub async fn build(self) -> Result<PostgresStore, StoreError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::Config("the PostgreSQL store must be built inside a Tokio runtime".into())
        })?;
        let names = Names::new(&self.schema, &self.table, self.unlogged)?;
        let config = pool::config(&self.url, self.timeout.max(Duration::from_millis(500)))?;
        let setup = Setup {
            config,
            names,
            isolation: self.isolation,
            synchronous_commit: self.synchronous_commit,
            create_schema: self.create_schema,
        };
        let inject_time = self.test_clock.is_some();
        let inner = Arc::new(Inner {
            pool: Pool::new(setup, self.connections, self.timeout),
            isolation: self.isolation,
            timeout: self.timeout,
            retry: Retry {
                max_attempts: self.retry.max_attempts.max(1),
                ..self.retry
            },
            clock: self
                .test_clock
                .unwrap_or_else(|| Arc::new(MonotonicClock::new())),
            inject_time,
            deny_cache: self.deny_cache.then(|| DenyCache::new(1 << 16)),
            cleanup_batch: self.cleanup_batch,
            stats: PostgresStats::default(),
            row_hasher: foldhash::fast::FixedState::default(),
        });
        if let Some(every) = self.cleanup_interval {
            runtime.spawn(cleanup_loop(Arc::downgrade(&inner), every));
        }
        let batcher = self.coalesce.then(|| {
            Arc::new(Batcher::new(
                Arc::clone(&inner),
                self.max_batch,
                self.max_in_flight,
            ))
        });
        Ok(PostgresStore { inner, batcher })
    }
}

/// Deletes idle rows every `every`, until the store is dropped.
async fn cleanup_loop(inner: Weak<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        // A failure (the database is down) is retried at the next tick.
        let _ = inner.cleanup_idle().await;
    }
}

/// Why the retries of a call ended without an answer.
enum Failure {
    Store(StoreError),
    /// Every attempt conflicted; the last conflict.
    GaveUp(tokio_postgres::Error),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::Store(e)
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
    fn now_param(&self) -> Option<i64> {
        self.inject_time
            .then(|| i64::try_from(self.local_now().as_u64() / 1000).unwrap_or(i64::MAX))
    }

    /// Runs `statement` on a connection, again after each serialization failure, up to
    /// `max_attempts`, bounded as a whole by `deadline`: the end of the batch's time, which
    /// every statement of a batch shares (a set that conflicts, then the decide function; a
    /// check asked again). A retry that could not finish before then is not started:
    /// the call gives up at once, so the configured [`GiveUp`] answers rather than a timeout.
    async fn run<T, F, Fut>(
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
                    Err(e) if retry::is_conflict(&e) => e,
                    Err(e) => {
                        if pool::is_missing_schema(&e) {
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
    fn gave_up<'p>(
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
                            .map(|(policy, _)| Decision {
                                allowed: false,
                                limit: policy.capacity(),
                                remaining: 0,
                                retry_after: self.retry.max_backoff,
                                reset_after: Duration::from(policy.tolerance()),
                            })
                            .collect(),
                    )
                })
                .collect()),
        }
    }

    /// Decides `decisions`, answering them in order: token buckets as
    /// [`decide_token_buckets`](Self::decide_token_buckets) does, decisions with a window one
    /// `decide_any` call each.
    async fn decide_batch(&self, decisions: &[Vec<Queued>]) -> Result<Vec<Verdict>, StoreError> {
        let sent = self.local_now();
        let deadline = deadline_after(self.timeout);
        let windowed: Vec<bool> = decisions
            .iter()
            .map(|d| d.iter().any(|q| !q.units.is_token_bucket()))
            .collect();
        if windowed.iter().all(|w| !w) {
            return self.decide_token_buckets(sent, deadline, decisions).await;
        }
        if windowed.iter().all(|w| *w) {
            return self.decide_windows(deadline, decisions).await;
        }
        // A batch of both: the token-bucket decisions keep their set statement, and only the
        // decisions with a window go one call each. Decisions of one batch came concurrently,
        // and a window's bucket is never a token bucket's, so neither order is owed.
        let (windows, buckets): (Vec<_>, Vec<_>) =
            decisions.iter().zip(&windowed).partition(|(_, w)| **w);
        let windows: Vec<Vec<Queued>> = windows.into_iter().map(|(d, _)| d.clone()).collect();
        let buckets: Vec<Vec<Queued>> = buckets.into_iter().map(|(d, _)| d.clone()).collect();
        let mut by_buckets = self
            .decide_token_buckets(sent, deadline, &buckets)
            .await?
            .into_iter();
        let mut by_windows = self.decide_windows(deadline, &windows).await?.into_iter();
        windowed
            .iter()
            .map(|&w| {
                if w {
                    by_windows.next()
                } else {
                    by_buckets.next()
                }
                .ok_or_else(|| {
                    StoreError::incompatible("the store answered a different number of decisions")
                })
            })
            .collect()
    }

    /// Decides `decisions` of token buckets only: a lone single check is one statement, a set
    /// of single checks one set statement, anything else one call of the decide function.
    /// Records single checks' denials in the deny cache.
    async fn decide_token_buckets(
        &self,
        sent: Nanos,
        deadline: Instant,
        decisions: &[Vec<Queued>],
    ) -> Result<Vec<Verdict>, StoreError> {
        let verdicts = match decisions {
            [one] if one.len() == 1 => {
                let q = &one[0];
                let decision = if q.cost == 0 {
                    self.peek(deadline, &q.units, &q.bucket).await?
                } else {
                    self.take(deadline, &q.units, &q.bucket, q.cost, true)
                        .await?
                };
                vec![Verdict::new(vec![decision])]
            }
            _ if set_of_singles(decisions) => {
                let checks: Vec<&Queued> = decisions.iter().map(|d| &d[0]).collect();
                match self.take_set(deadline, &checks).await? {
                    Some(decided) => decided
                        .into_iter()
                        .map(|decision| Verdict::new(vec![decision]))
                        .collect(),
                    None => {
                        self.stats.retries.fetch_add(1, Ordering::Relaxed);
                        self.decide_by_function(deadline, decisions).await?
                    }
                }
            }
            _ => self.decide_by_function(deadline, decisions).await?,
        };
        if verdicts.len() != decisions.len() {
            return Err(StoreError::incompatible(
                "the store answered a different number of decisions",
            ));
        }
        if let Some(cache) = &self.deny_cache {
            for (queued, verdict) in decisions.iter().zip(&verdicts) {
                if let ([q], [decision]) = (&queued[..], &verdict.decisions[..]) {
                    // A token bucket's denial stands until its retry_after: no token comes
                    // sooner.
                    cache.record(
                        &q.bucket,
                        &q.units.policy,
                        q.cost,
                        Refill::Every(q.units.policy.emission_interval()),
                        sent,
                        decision.retry_after,
                        decision,
                    );
                }
            }
        }
        Ok(verdicts)
    }

    /// Decides `decisions`, some with a window among their checks: one call of `decide_any`
    /// per decision, in order. (Windows are not coalesced into set statements as token buckets
    /// are: each decision is its own call.)
    async fn decide_windows(
        &self,
        deadline: Instant,
        decisions: &[Vec<Queued>],
    ) -> Result<Vec<Verdict>, StoreError> {
        let mut verdicts = Vec::with_capacity(decisions.len());
        for decision in decisions {
            let call = windows::AnyCall::new(
                decision
                    .iter()
                    .map(|q| (q.bucket.as_slice(), &q.units, q.cost)),
            );
            let now_param = self.now_param();
            let params: [&(dyn ToSql + Sync); 6] = [
                &call.keys,
                &call.kinds,
                &call.a,
                &call.b,
                &call.cost,
                &now_param,
            ];
            let row = match self
                .run(deadline, self.retry.max_attempts, |conn| async move {
                    conn.client.query_one(&conn.decide_any, &params).await
                })
                .await
            {
                Ok(row) => row,
                Err(Failure::Store(e)) => return Err(e),
                Err(Failure::GaveUp(e)) => {
                    let policies: Vec<(Policy, u64)> =
                        decision.iter().map(|q| (q.units.policy, q.cost)).collect();
                    verdicts.extend(self.gave_up([&policies[..]], e)?);
                    continue;
                }
            };
            let reply: Vec<i64> = row
                .try_get(0)
                .map_err(|e| StoreError::Incompatible(Box::new(e)))?;
            verdicts.push(call.replay(&reply)?);
        }
        Ok(verdicts)
    }

    /// Decides `decisions` in order with one call of the decide function.
    async fn decide_by_function(
        &self,
        deadline: Instant,
        decisions: &[Vec<Queued>],
    ) -> Result<Vec<Verdict>, StoreError> {
        let checks: Vec<Vec<Check<'_>>> = decisions
            .iter()
            .map(|d| d.iter().map(Queued::check).collect())
            .collect();
        let call = Call::new(checks.iter().map(|c| &c[..]))?;
        match self.call(deadline, &call).await {
            Ok(verdicts) => Ok(verdicts),
            Err(Failure::Store(e)) => Err(e),
            Err(Failure::GaveUp(e)) => {
                let policies: Vec<Vec<(Policy, u64)>> = decisions
                    .iter()
                    .map(|d| d.iter().map(|q| (q.units.policy, q.cost)).collect())
                    .collect();
                self.gave_up(policies.iter().map(Vec::as_slice), e)
            }
        }
    }

    /// One check with cost >= 1 on the row `bucket`: the single upsert; asked `again` once
    /// when the row changed under the statement (see [`answer`]).
    async fn take(
        &self,
        deadline: Instant,
        units: &Units,
        bucket: &[u8],
        cost: u64,
        again: bool,
    ) -> Result<Decision, StoreError> {
        let cost_param = i64::try_from(cost).unwrap_or(i64::MAX);
        let now_param = self.now_param();
        let params: [&(dyn ToSql + Sync); 5] =
            [&bucket, &cost_param, &units.t, &units.tau, &now_param];
        let row = match self
            .run(deadline, self.retry.max_attempts, |conn| async move {
                conn.client.query_one(&conn.decide_one, &params).await
            })
            .await
        {
            Ok(row) => row,
            Err(Failure::Store(e)) => return Err(e),
            Err(Failure::GaveUp(e)) => {
                return self
                    .gave_up([&[(units.policy, cost)][..]], e)?
                    .pop()
                    .and_then(|v| v.decisions.into_iter().next())
                    .ok_or_else(|| StoreError::incompatible("no decision"));
            }
        };
        let read = |i: usize| {
            row.try_get::<_, Option<i64>>(i)
                .map_err(|e| StoreError::Incompatible(Box::new(e)))
        };
        let (now, taken, seen) = (read(0)?.unwrap_or(0), read(1)?, read(2)?);
        match answer(units, cost, now, taken, seen)? {
            Some(decision) => Ok(decision),
            // Asked again, the statement reads a clock and a snapshot from after the
            // transactions it waited for.
            None if again => Box::pin(self.take(deadline, units, bucket, cost, false)).await,
            None => Ok(stale_denial(units, cost, now, seen)?),
        }
    }

    /// Single checks on distinct buckets, each cost >= 1: one statement for all.
    ///
    /// Under SERIALIZABLE, one attempt: `None` when it failed to serialize, and the caller
    /// decides the batch with the decide function instead, with the usual retries. One
    /// conflicting row fails a whole set, and a set retried as a set meets the same storm again
    /// (in a benchmark race of first calls on fresh keys, a set of 22 ran out of retries); the
    /// decide function locks its rows before it decides. With the fallback, such give-ups came
    /// as rarely as on the decide function alone (one batch in four runs either way).
    async fn take_set(
        &self,
        deadline: Instant,
        checks: &[&Queued],
    ) -> Result<Option<Vec<Decision>>, StoreError> {
        let keys: Vec<&[u8]> = checks.iter().map(|q| q.bucket.as_slice()).collect();
        let costs: Vec<i64> = checks
            .iter()
            .map(|q| i64::try_from(q.cost).unwrap_or(i64::MAX))
            .collect();
        let t: Vec<i64> = checks.iter().map(|q| q.units.t).collect();
        let tau: Vec<i64> = checks.iter().map(|q| q.units.tau).collect();
        let now_param = self.now_param();
        let params: [&(dyn ToSql + Sync); 5] = [&keys, &costs, &t, &tau, &now_param];
        let attempts = match self.isolation {
            Isolation::ReadCommitted => self.retry.max_attempts,
            Isolation::Serializable => 1,
        };
        let rows = match self
            .run(deadline, attempts, |conn| async move {
                conn.client.query(&conn.decide_set, &params).await
            })
            .await
        {
            Ok(rows) => rows,
            Err(Failure::Store(e)) => return Err(e),
            Err(Failure::GaveUp(_)) if self.isolation == Isolation::Serializable => {
                return Ok(None);
            }
            Err(Failure::GaveUp(e)) => {
                let policies: Vec<[(Policy, u64); 1]> =
                    checks.iter().map(|q| [(q.units.policy, q.cost)]).collect();
                return Ok(Some(
                    self.gave_up(policies.iter().map(|p| &p[..]), e)?
                        .into_iter()
                        .flat_map(|v| v.decisions)
                        .collect(),
                ));
            }
        };
        if rows.len() != checks.len() {
            return Err(StoreError::incompatible(
                "the statement answered a different number of checks",
            ));
        }
        let mut decisions = Vec::with_capacity(checks.len());
        for (row, q) in rows.iter().zip(checks) {
            let read = |i: usize| {
                row.try_get::<_, Option<i64>>(i)
                    .map_err(|e| StoreError::Incompatible(Box::new(e)))
            };
            let decision =
                match answer(&q.units, q.cost, read(0)?.unwrap_or(0), read(1)?, read(2)?)? {
                    Some(decision) => decision,
                    // Rare: the row changed under the statement. Asked again alone.
                    None => {
                        self.take(deadline, &q.units, &q.bucket, q.cost, true)
                            .await?
                    }
                };
            decisions.push(decision);
        }
        Ok(Some(decisions))
    }

    /// Cost 0: reads the row `bucket`, writes nothing.
    async fn peek(
        &self,
        deadline: Instant,
        units: &Units,
        bucket: &[u8],
    ) -> Result<Decision, StoreError> {
        let now_param = self.now_param();
        let params: [&(dyn ToSql + Sync); 2] = [&bucket, &now_param];
        let row = self
            .run(deadline, self.retry.max_attempts, |conn| async move {
                conn.client.query_one(&conn.peek_one, &params).await
            })
            .await
            .map_err(|f| match f {
                Failure::Store(e) => e,
                Failure::GaveUp(e) => {
                    self.stats.gave_up.fetch_add(1, Ordering::Relaxed);
                    store_error(e)
                }
            })?;
        let read = |i: usize| {
            row.try_get::<_, Option<i64>>(i)
                .map_err(|e| StoreError::Incompatible(Box::new(e)))
        };
        let now = micros(read(0)?.unwrap_or(0));
        let tat = micros(read(1)?.unwrap_or(0));
        Ok(Gcra::new(&units.policy)
            .decide(tat, now, 0)?
            .decision(false))
    }

    /// One call of the decide function.
    async fn call(&self, deadline: Instant, call: &Call) -> Result<Vec<Verdict>, Failure> {
        let now_param = self.now_param();
        let params: [&(dyn ToSql + Sync); 7] = [
            &call.keys,
            &now_param,
            &call.sizes,
            &call.idx,
            &call.t,
            &call.tau,
            &call.cost,
        ];
        let row = self
            .run(deadline, self.retry.max_attempts, |conn| async move {
                conn.client.query_one(&conn.decide_many, &params).await
            })
            .await?;
        let reply: Vec<i64> = row
            .try_get(0)
            .map_err(|e| StoreError::Incompatible(Box::new(e)))?;
        Ok(call.replay(&reply)?)
    }

    async fn cleanup_idle(&self) -> Result<u64, StoreError> {
        let now_param = self.now_param();
        loop {
            let lease = self.pool.get().await?;
            let params: [&(dyn ToSql + Sync); 2] = [&now_param, &self.cleanup_batch];
            let forgotten = lease.client.query_one(&lease.cleanup_once, &params).await;
            lease.answered();
            let row = forgotten.map_err(store_error)?;
            let counts = row.try_get(0).and_then(|w| Ok((w, row.try_get(1)?)));
            let (windows, ids): (i64, i64) =
                counts.map_err(|e| StoreError::Incompatible(Box::new(e)))?;
            if windows.max(ids) < self.cleanup_batch {
                break;
            }
        }
        let mut deleted = 0;
        loop {
            let lease = self.pool.get().await?;
            let params: [&(dyn ToSql + Sync); 2] = [&now_param, &self.cleanup_batch];
            let deleted_now = lease.client.execute(&lease.cleanup, &params).await;
            lease.answered();
            let n = deleted_now.map_err(store_error)?;
            deleted += n;
            if n < self.cleanup_batch.unsigned_abs() {
                return Ok(deleted);
            }
        }
    }
}

/// The decision of one upsert of cost `cost` (>= 1): `taken` is the tat it wrote, or `None`
/// when it denied, and then `seen` the tat of its snapshot. The decision is replayed with
/// [`Gcra`] and checked against what was written.
///
/// `None` when the statement denied a check its own snapshot allows: another transaction
/// changed the row between the statement's start (its snapshot, and the time it read) and the
/// row's lock. The denial may then be an artefact of that earlier time (the other transaction
/// decided at a later one, and took tokens the statement's time had not yet made), so the
/// caller asks again.
fn answer(
    units: &Units,
    cost: u64,
    now: i64,
    taken: Option<i64>,
    seen: Option<i64>,
) -> Result<Option<Decision>, StoreError> {
    let now = micros(now);
    let gcra = Gcra::new(&units.policy);
    let Some(taken) = taken else {
        let outcome = gcra.decide(micros(seen.unwrap_or(0)), now, cost)?;
        return Ok((!outcome.allowed()).then(|| outcome.decision(false)));
    };
    // The upsert wrote max(tat, now) + cost × t: replaying from max(tat, now) gives the same
    // decision.
    let cost_param = i64::try_from(cost).unwrap_or(i64::MAX);
    let held = micros(taken.saturating_sub(cost_param.saturating_mul(units.t)));
    let outcome = gcra.decide(held, now, cost)?;
    if !outcome.allowed() || outcome.new_tat() != micros(taken) {
        return Err(StoreError::incompatible(
            "the statement and tollgate's model disagree",
        ));
    }
    Ok(Some(outcome.decision(true)))
}

/// A denial by a row that changed under the statement, asked twice: the snapshot cannot say by
/// how much, but the next token is at least one emission interval away.
fn stale_denial(
    units: &Units,
    cost: u64,
    now: i64,
    seen: Option<i64>,
) -> Result<Decision, StoreError> {
    let outcome = Gcra::new(&units.policy).decide(micros(seen.unwrap_or(0)), micros(now), cost)?;
    Ok(Decision {
        allowed: false,
        remaining: 0,
        retry_after: Duration::from(units.policy.emission_interval()),
        ..outcome.decision(false)
    })
}

/// `timeout` from now; a timeout too long to add to the time (`Duration::MAX`, say) is one
/// that never comes, as `tokio::time::timeout` treats it.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

fn micros(us: i64) -> Nanos {
    Nanos::new(u64::try_from(us).unwrap_or(0).saturating_mul(1000))
}

/// Whether `decisions` are single checks with a cost on distinct buckets, which one set-based
/// upsert decides (`decide_set.sql`); anything else (several checks decided together, a
/// bucket twice, a peek) takes the decide function, as does a set that failed to serialize
/// (see `take_set`).
fn set_of_singles(decisions: &[Vec<Queued>]) -> bool {
    let mut buckets = std::collections::HashSet::with_capacity(decisions.len());
    decisions
        .iter()
        .all(|d| matches!(&d[..], [q] if q.cost > 0 && buckets.insert(q.bucket.as_slice())))
}

/// One check waiting for a call: owned, validated, its row key formatted once.
#[derive(Clone)]
struct Queued {
    key: Box<[u8]>,
    name: Option<Box<str>>,
    cost: u64,
    units: Units,
    bucket: Vec<u8>,
}

impl Queued {
    fn new(check: &Check<'_>) -> Result<Queued, CheckError> {
        Ok(Queued {
            key: check.key.into(),
            name: check.name.map(Into::into),
            cost: check.cost,
            units: call::validate(check)?,
            bucket: call::bucket_key(check),
        })
    }

    fn check(&self) -> Check<'_> {
        let check = Check::new(self.units.policy, &self.key, self.cost);
        match &self.name {
            Some(name) => check.named(name),
            None => check,
        }
    }
}

impl Runner for Inner {
    type Item = Vec<Queued>;
    type Answer = Verdict;

    fn run<'a>(
        &'a self,
        items: &'a [Vec<Queued>],
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send + 'a {
        self.decide_batch(items)
    }

    /// Under SERIALIZABLE, two transactions that overlap in time and write one row fail to
    /// serialize: calls in flight at once never share a row, so a hot row's calls follow each
    /// other and only another process's calls can conflict with them. At READ COMMITTED the
    /// row's lock orders them with no failure, and the next call may as well wait on it in
    /// the database.
    fn rows(&self, item: &Vec<Queued>, rows: &mut Vec<u64>) {
        if self.isolation == Isolation::Serializable {
            rows.extend(item.iter().map(|q| self.row_hasher.hash_one(&q.bucket)));
        }
    }
}

impl PostgresStore {
    /// Whether this store can decide `policy` (its numbers within the store's range), without
    /// a store at hand: what [`Store::supports`] answers, for checking a config file.
    pub fn supports_policy(policy: &Policy) -> Result<(), crate::PolicyError> {
        call::supports(policy)
    }
}

impl Store for PostgresStore {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        if checks.is_empty() {
            return Ok(Verdict::new(Vec::new()));
        }
        Check::validate_all(checks)?;
        let queued = checks
            .iter()
            .map(Queued::new)
            .collect::<Result<Vec<_>, _>>()?;
        if let (Some(cache), [q]) = (&self.inner.deny_cache, &queued[..])
            && let Some(denied) =
                cache.get(&q.bucket, &q.units.policy, q.cost, self.inner.local_now())
        {
            return Ok(Verdict::new(vec![denied]));
        }
        let timeout = self.inner.timeout;
        let decided = async {
            match &self.batcher {
                Some(batcher) => batcher.submit(b"", queued).await,
                None => self
                    .inner
                    .decide_batch(std::slice::from_ref(&queued))
                    .await?
                    .pop()
                    .ok_or_else(|| StoreError::incompatible("the store answered nothing")),
            }
        };
        tokio::time::timeout(timeout, decided)
            .await
            .unwrap_or(Err(StoreError::Timeout(timeout)))
    }

    /// Asks on every connection at once, so that a probe also opens (and prepares) the ones
    /// not used yet, rather than leaving that to the first requests; and checks that the
    /// table is of this version's layout ([`StoreError::Incompatible`] otherwise).
    async fn ready(&self) -> Result<(), StoreError> {
        let ping = async {
            let mut pings = tokio::task::JoinSet::new();
            for i in 0..self.inner.pool.size() {
                let inner = Arc::clone(&self.inner);
                pings.spawn(async move {
                    let lease = inner.pool.get_at(i).await?;
                    if i > 0 {
                        let pong = lease.client.simple_query("SELECT 1").await;
                        lease.answered();
                        return pong.map(drop).map_err(store_error);
                    }
                    // One connection also checks that the table is of this version's layout.
                    let query = inner.pool.names().layout_query();
                    let layout = lease.client.query_one(query.as_str(), &[]).await;
                    lease.answered();
                    let layout: String = layout
                        .map_err(store_error)?
                        .try_get(0)
                        .map_err(|e| StoreError::Incompatible(Box::new(e)))?;
                    if layout != schema::LAYOUT {
                        return Err(StoreError::incompatible(format!(
                            "the table holds {:?}, this tollgate writes {:?}: servers of two \
                             versions would keep separate buckets; upgrade them together \
                             (`tollgate migrate` sets the layout)",
                            layout,
                            schema::LAYOUT
                        )));
                    }
                    Ok(())
                });
            }
            while let Some(ping) = pings.join_next().await {
                ping.map_err(|e| StoreError::Unavailable(Box::new(e)))??;
            }
            Ok(())
        };
        tokio::time::timeout(self.inner.timeout, ping)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.inner.timeout)))
    }

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn supports(&self, policy: &Policy) -> Result<(), crate::PolicyError> {
        PostgresStore::supports_policy(policy)
    }
}
