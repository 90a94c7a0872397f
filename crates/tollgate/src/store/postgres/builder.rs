//! Configuring a [`PostgresStore`]: where its table is, how it talks to the database, how it
//! batches, retries and cleans up; and building it.

use std::sync::Arc;
use std::time::Duration;

use super::cleanup::cleanup_loop;
use super::isolation::Isolation;
use super::pool::{self, Pool, Setup};
use super::retry::Retry;
use super::schema::Names;
use super::{Inner, PostgresStats, PostgresStore};
use crate::store::batch::Batcher;
use crate::store::deny_cache::DenyCache;
use crate::{Clock, MonotonicClock, StoreError};

/// The default bound on one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// Configures a [`PostgresStore`].
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::PostgresStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tollgate::StoreError> {
/// // Building checks the settings and tries one connection: a database that does not answer
/// // now is no error, one that refuses the role or the database is.
/// let store = PostgresStore::builder("postgres://tollgate@127.0.0.1:5432/tollgate")
///     .schema("limits")
///     .connections(8)
///     .timeout(Duration::from_millis(200))
///     .cleanup_interval(None)
///     .build()
///     .await?;
/// # drop(store);
/// # Ok(())
/// # }
/// ```
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

impl PostgresStore {
    /// A store on the database at `url` (`postgres://user:password@host:port/db`).
    ///
    /// A primary with standbys is listed host by host, with `target_session_attrs=read-write`:
    /// `postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write`. Each connection
    /// is made on the first host that takes writes; after a promotion, the connections to the
    /// old primary close and are made again on the new one. Statements in flight when the
    /// primary dies are answered by the fail policy and never sent again (a serialization
    /// failure is the only error retried). Without a synchronous standby the commits of the
    /// primary's last moment are lost with it (see
    /// [`synchronous_commit`](PostgresStoreBuilder::synchronous_commit)), and an
    /// [`unlogged`](PostgresStoreBuilder::unlogged) table is empty on the standby.
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
    /// On, commits are as durable as the server's settings make them: with a synchronous
    /// standby (`synchronous_standby_names`, `synchronous_commit = on` on the server), a
    /// decision is answered once the standby has it, and a failover to that standby loses none.
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

    /// The most rows one cleanup statement deletes (default 1000; 0 is refused at
    /// [`build`](Self::build)).
    pub fn cleanup_batch(mut self, rows: u32) -> Self {
        self.cleanup_batch = i64::from(rows);
        self
    }

    /// Decides at `clock` instead of `clock_timestamp()`: for tests that move time by hand.
    /// Never in production (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn test_clock(mut self, clock: impl Clock) -> Self {
        self.test_clock = Some(Arc::new(clock));
        self
    }

    /// Checks the configuration, and tries one connection. A database that does not answer
    /// now is no error: calls fail (transiently) until it is up.
    ///
    /// Fails with [`StoreError::Config`] for a schema or table name that is not a plain
    /// identifier, a URL that does not parse, or outside a Tokio runtime (the store runs its
    /// cleanup on one); for a setting of zero, naming it: `timeout` (every decision would
    /// go to the fail policy), `connections`, `max_batch`, `max_in_flight`,
    /// `retry.max_attempts`, `cleanup_batch`, or a `cleanup_interval` of zero; and for
    /// settings that can never work, found here rather than left to the fail policy: host
    /// names the resolver says do not exist (of several, when none resolves), TLS that
    /// `sslmode` asks to check with no root certificate to check with, and what the one
    /// connection is refused for (no such database or role, a password refused, a
    /// certificate not trusted or not for the host).
    ///
    /// ```
    /// use tollgate::{PostgresStore, StoreError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let refused = PostgresStore::builder("postgres://tollgate@127.0.0.1/tollgate")
    ///     .connections(0)
    ///     .build()
    ///     .await;
    /// let Err(StoreError::Config(why)) = refused else { panic!("no connections was accepted") };
    /// assert!(why.starts_with("PostgresStoreBuilder::connections is 0"), "{why}");
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Building resolves the hosts and tries one connection, within the store timeout, to refuse
    /// settings that can never work. Dropped before it answers, it has kept nothing (that
    /// connection is closed, and the background cleanup starts only with a store built).
    pub async fn build(self) -> Result<PostgresStore, StoreError> {
        self.refuse_zeros()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::Config("the PostgreSQL store must be built inside a Tokio runtime".into())
        })?;
        let names = Names::new(&self.schema, &self.table, self.unlogged)?;
        let (config, tls) = pool::config(&self.url, self.timeout.max(Duration::from_millis(500)))?;
        let setup = Setup {
            config,
            tls,
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
            retry: self.retry,
            clock: self
                .test_clock
                .unwrap_or_else(|| Arc::new(MonotonicClock::new())),
            inject_time,
            deny_cache: self.deny_cache.then(|| DenyCache::new(1 << 16)),
            cleanup_batch: self.cleanup_batch,
            stats: PostgresStats::default(),
            row_hasher: foldhash::fast::FixedState::default(),
        });
        // Settings that can never work fail here, not as an outage the fail policy answers.
        let reach = self.timeout.max(Duration::from_secs(1));
        let hosts = inner.pool.host_names();
        crate::store::reach::some_host_resolves("PostgreSQL", &hosts, reach).await?;
        inner.pool.first_connection().await?;
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

    /// The settings of zero that [`build`](Self::build) refuses.
    fn refuse_zeros(&self) -> Result<(), StoreError> {
        const BUILDER: &str = "PostgresStoreBuilder";
        crate::store::refuse_zero_settings(
            BUILDER,
            self.timeout,
            self.max_batch,
            self.max_in_flight,
        )?;
        let zero = |setting, why| Err(crate::store::zero_setting(BUILDER, setting, why));
        if self.connections == 0 {
            return zero("connections", "no decision could ever be made");
        }
        if self.retry.max_attempts == 0 {
            return zero(
                "retry.max_attempts",
                "it counts the first attempt too, so no decision would be tried",
            );
        }
        if self.cleanup_batch == 0 {
            return zero(
                "cleanup_batch",
                "a cleanup would delete nothing and idle rows would stay forever; \
                 turn cleanup off with `cleanup_interval(None)`",
            );
        }
        if self.cleanup_interval.is_some_and(|every| every.is_zero()) {
            return zero(
                "cleanup_interval",
                "cleanups would run back to back; turn cleanup off with `cleanup_interval(None)`",
            );
        }
        Ok(())
    }
}
