//! A few shared connections, each with the store's statements prepared. tokio-postgres
//! pipelines the statements of concurrent callers on one connection, so a handful serve many
//! callers without a checkout: a caller leases the connection with the fewest statements in
//! flight (the first such), sends its one statement and awaits the answer. A connection found
//! closed is replaced on the spot.
//!
//! Preferring the first of the least loaded keeps the work on as few connections as the load
//! needs. Each connection is a server process; spread round-robin over all of them, a batching
//! store's two or three calls in flight woke a different process each time, cold in the CPU's
//! caches: at 32 workers on many keys they decided 20–22k checks/s against 36–39k on the
//! first of the least loaded (`tollgate-bench postgres`, interleaved runs of both).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, OnceCell};
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, NoTls, Socket, Statement};

use super::tls::{self, Connect};

use super::Isolation;
use super::error::{connect_error, is_missing_schema, outage, store_error};
use super::schema::Names;
use crate::StoreError;

/// One connection and its prepared statements.
pub(crate) struct Conn {
    pub(crate) client: Client,
    pub(crate) decide_one: Statement,
    pub(crate) peek_one: Statement,
    pub(crate) decide_many: Statement,
    pub(crate) decide_set: Statement,
    pub(crate) cleanup: Statement,
    pub(crate) settle: Statement,
    pub(crate) reset: Statement,
    pub(crate) cleanup_once: Statement,
    pub(crate) decide_any: Statement,
    /// Its statements met a schema that is gone (a table dropped under load): the next lease
    /// makes a new connection, which makes the schema again where the store may create it.
    pub(crate) stale: AtomicBool,
}

/// How connections are made.
pub(crate) struct Setup {
    pub(crate) config: Config,
    /// In the clear or over TLS, as the URL's `sslmode` says.
    pub(crate) tls: Connect,
    pub(crate) names: Names,
    pub(crate) isolation: Isolation,
    pub(crate) synchronous_commit: bool,
    pub(crate) create_schema: bool,
}

pub(crate) struct Pool {
    connector: Arc<Connector>,
    slots: Vec<Slot>,
    /// How long a statement left unanswered still counts in its slot's load.
    hold: Duration,
}

/// What makes connections; shared with the tasks that make them.
struct Connector {
    setup: Setup,
    migrated: OnceCell<()>,
    /// Why the last connection failed, when it can never work (a refused password, no such
    /// database); cleared by a connection made. A connection is made on a task of its own
    /// that may outlast its caller's timeout (a password hashed slowly): this keeps its
    /// reason for the callers that gave up waiting.
    never_works: parking_lot::Mutex<Option<String>>,
}

/// One connection's place: the connection once made, and the statements sent on it and not
/// yet answered.
struct Slot {
    conn: Arc<Mutex<Option<Arc<Conn>>>>,
    load: Arc<AtomicUsize>,
}

/// A connection leased for one statement; it counts in its slot's load until the statement is
/// [`answered`](Lease::answered).
///
/// A lease dropped unanswered (its caller timed out or gave up) leaves its statement running
/// on the connection, and the statements sent after it there wait behind it: it goes on
/// counting for the pool's `hold` (the store's timeout), so that new statements go to other
/// connections meanwhile rather than queue behind one that may be stuck.
pub(crate) struct Lease {
    conn: Arc<Conn>,
    load: Option<Load>,
    hold: Duration,
}

impl Lease {
    /// The connection, for a statement's future to own.
    pub(crate) fn conn(&self) -> Arc<Conn> {
        Arc::clone(&self.conn)
    }

    /// The statement was answered (or failed): the connection is free of it.
    pub(crate) fn answered(mut self) {
        self.load = None;
    }
}

impl std::ops::Deref for Lease {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Answered leases have nothing left to give back here.
        let Some(load) = self.load.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let hold = self.hold;
            runtime.spawn(async move {
                tokio::time::sleep(hold).await;
                drop(load);
            });
        }
    }
}

/// One unit of a slot's load, given back when dropped (also by a caller that gives up while
/// the connection is being made).
struct Load(Arc<AtomicUsize>);

impl Load {
    fn take(load: &Arc<AtomicUsize>) -> Load {
        load.fetch_add(1, Ordering::Relaxed);
        Load(Arc::clone(load))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Cost 0: takes nothing, and reads the row. A bucket whose row has other numbers than `$3, $4` (t, tau) is
/// rebased to them (schema.sql), and written so, to refill at this pace from now on; the tat
/// returned is under these numbers.
const PEEK_ONE: &str = r#"WITH clock AS (
    SELECT coalesce($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS now
), moved AS (
    UPDATE "@schema@"."@table@" AS b
    SET tat = "@schema@"."@table@_rebase"(b.tat, b.t, b.tau, $3::bigint, $4::bigint, clock.now),
        t = $3::bigint, tau = $4::bigint
    FROM clock
    WHERE b.key = $1::bytea AND b.tat > clock.now AND b.tat <= clock.now + 4503599627370496
      AND (b.t <> $3::bigint OR b.tau <> $4::bigint)
    RETURNING b.tat
)
SELECT clock.now,
       coalesce((SELECT tat FROM moved),
           (SELECT "@schema@"."@table@_rebase"(b.tat, b.t, b.tau, $3::bigint, $4::bigint, clock.now)
            FROM "@schema@"."@table@" AS b WHERE b.key = $1::bytea))
FROM clock"#;

/// Makes buckets full again: their rows go (a token bucket's or a window's).
const RESET: &str = r#"WITH w AS (
    DELETE FROM "@schema@"."@table@_windows" WHERE key = ANY($1::bytea[])
) DELETE FROM "@schema@"."@table@" WHERE key = ANY($1::bytea[])"#;

const DECIDE_ANY: &str = r#"SELECT "@schema@"."@table@_decide_any"($1, $2, $3, $4, $5, $6)"#;

/// Forgets the settlement ids that have expired, and the windows that ended a minute ago (or
/// whose expiry this version never writes, more than 2^52 µs away).
/// Deletes up to $2 expired settlement ids and up to $2 idle window rows (expired a minute
/// ago), skipping rows a decision holds; answers how many went. Run until it answers fewer
/// than 2 × $2, as the bucket cleanup is.
const CLEANUP_ONCE: &str = r#"WITH w AS (
    DELETE FROM "@schema@"."@table@_windows"
    WHERE key IN (
        SELECT key FROM "@schema@"."@table@_windows"
        WHERE expires <= coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) - 60000000
           OR expires > coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) + 4503599627370496
        LIMIT $2 FOR UPDATE SKIP LOCKED
    )
    AND (expires <= coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) - 60000000
         OR expires > coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) + 4503599627370496)
    RETURNING 1
), o AS (
    DELETE FROM "@schema@"."@table@_once"
    WHERE id IN (
        SELECT id FROM "@schema@"."@table@_once"
        WHERE expires <= coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
        LIMIT $2 FOR UPDATE SKIP LOCKED
    )
    AND expires <= coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
    RETURNING 1
) SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM o)"#;

const DECIDE_MANY: &str = r#"SELECT "@schema@"."@table@_decide"($1, $2, $3, $4, $5, $6, $7)"#;

impl Pool {
    /// Where the store's tables are.
    pub(crate) fn names(&self) -> &Names {
        &self.connector.setup.names
    }

    pub(crate) fn new(setup: Setup, connections: usize, hold: Duration) -> Pool {
        Pool {
            connector: Arc::new(Connector {
                setup,
                migrated: OnceCell::new(),
                never_works: parking_lot::Mutex::new(None),
            }),
            slots: (0..connections)
                .map(|_| Slot {
                    conn: Arc::new(Mutex::new(None)),
                    load: Arc::new(AtomicUsize::new(0)),
                })
                .collect(),
            hold,
        }
    }

    /// The first of the connections with the fewest statements in flight, for a decision (or
    /// another call of a store that serves): a connection made again and refused (a password
    /// changed since the store was built) is an outage, never a [`StoreError::Config`].
    pub(crate) async fn get(&self) -> Result<Lease, StoreError> {
        let mut best = 0;
        let mut least = usize::MAX;
        for (i, slot) in self.slots.iter().enumerate() {
            let load = slot.load.load(Ordering::Relaxed);
            if load < least {
                (best, least) = (i, load);
                if load == 0 {
                    break;
                }
            }
        }
        self.get_at(best).await.map_err(outage)
    }

    /// Connection `i`, connecting (and preparing) it if it is new or was closed: for the
    /// readiness probe, which says when the settings can never work ([`StoreError::Config`]).
    ///
    /// A connection is made on a task of its own, which keeps it in its slot however the
    /// caller fares: a caller that gives up (its timeout) does not undo the work. Under load,
    /// callers that each gave up while connecting would otherwise start again from nothing,
    /// every time: the first probes of a benchmark's 32 connections did, for 10 s.
    pub(crate) async fn get_at(&self, i: usize) -> Result<Lease, StoreError> {
        let slot = &self.slots[i % self.slots.len()];
        // Counted from the start: callers that come while it connects go elsewhere.
        let load = Load::take(&slot.load);
        let mut held = Arc::clone(&slot.conn).lock_owned().await;
        let conn = match held
            .as_ref()
            .filter(|c| !c.client.is_closed() && !c.stale.load(Ordering::Relaxed))
        {
            Some(conn) => Arc::clone(conn),
            None => {
                *held = None;
                let connector = Arc::clone(&self.connector);
                let making = tokio::spawn(async move {
                    // A server that accepted the connection and then stopped answering must
                    // not hold the slot for good.
                    let bound = connector.bound();
                    let made = tokio::time::timeout(bound, connector.connect()).await;
                    let made = made.map_err(|_| StoreError::Timeout(bound))?;
                    *connector.never_works.lock() = match &made {
                        Err(StoreError::Config(why)) => Some(why.clone()),
                        _ => None,
                    };
                    let conn = Arc::new(made?);
                    *held = Some(Arc::clone(&conn));
                    Ok::<_, StoreError>(conn)
                });
                making
                    .await
                    .map_err(|e| StoreError::Unavailable(Box::new(e)))??
            }
        };
        Ok(Lease {
            conn,
            load: Some(load),
            hold: self.hold,
        })
    }

    /// Why the last connection failed, if that can never work ([`StoreError::Config`]): what
    /// a caller that timed out waiting for a connection reports rather than its timeout.
    pub(crate) fn never_works(&self) -> Option<StoreError> {
        self.connector
            .never_works
            .lock()
            .clone()
            .map(StoreError::Config)
    }

    /// Connects once and keeps nothing: [`StoreError::Config`] when the database refuses the
    /// settings for good (no such database or role, a password refused, a TLS certificate not
    /// trusted or not for the host, TLS required and not offered); `Ok` when it accepts them,
    /// or does not answer now (an outage the store outlives).
    pub(crate) async fn first_connection(&self) -> Result<(), StoreError> {
        let bound = self.connector.bound();
        match tokio::time::timeout(bound, self.connector.open()).await {
            Ok(Err(never @ StoreError::Config(_))) => Err(never),
            Ok(_) | Err(_) => Ok(()),
        }
    }

    /// The TCP hosts and ports of the URL whose names must resolve, or none when it reaches the
    /// server without a resolver (a Unix socket, or `hostaddr` given).
    pub(crate) fn host_names(&self) -> Vec<(String, u16)> {
        let config = &self.connector.setup.config;
        if !config.get_hostaddrs().is_empty() {
            return Vec::new();
        }
        let ports = config.get_ports();
        let mut names = Vec::new();
        for (i, host) in config.get_hosts().iter().enumerate() {
            match host {
                tokio_postgres::config::Host::Tcp(name) => {
                    // One port for every host, or one each; 5432 when none is given.
                    let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                    names.push((name.clone(), port));
                }
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(_) => return Vec::new(),
            }
        }
        names
    }

    /// How many connections the pool holds.
    pub(crate) fn size(&self) -> usize {
        self.slots.len()
    }

    /// Creates the schema now (`tollgate migrate`), whether or not the store would on first use.
    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.connector.open().await?;
        self.connector.setup.names.migrate(&mut client).await
    }
}

impl Connector {
    /// The most that making and preparing one connection may take: a few times the time
    /// allowed to reach the server.
    fn bound(&self) -> Duration {
        let reach = self.setup.config.get_connect_timeout().copied();
        reach.unwrap_or(Duration::from_secs(1)).saturating_mul(4)
    }

    async fn open(&self) -> Result<Client, StoreError> {
        match &self.setup.tls {
            Connect::Plain => open_with(&self.setup.config, NoTls).await,
            #[cfg(feature = "postgres-tls")]
            Connect::Rustls(tls) => open_with(&self.setup.config, tls.clone()).await,
        }
    }

    async fn connect(&self) -> Result<Conn, StoreError> {
        let mut client = self.open().await?;
        // The decide function's statements take arrays, for which PostgreSQL keeps planning
        // each call afresh (a custom plan looks cheaper than the generic one): a call cost
        // about 1.7 times as much here (pgbench, 5.4k against 9.4k calls/s). The connections
        // run tollgate's statements only.
        set_if_known(&client, "SET plan_cache_mode = force_generic_plan").await?;
        if !self.setup.synchronous_commit {
            // See `PostgresStoreBuilder::synchronous_commit`.
            set_if_known(&client, "SET synchronous_commit = off").await?;
        }
        if self.setup.isolation == Isolation::Serializable {
            client
                .batch_execute(
                    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
                )
                .await
                .map_err(store_error)?;
        }
        if self.setup.create_schema {
            self.migrated
                .get_or_try_init(|| self.setup.names.migrate(&mut client))
                .await?;
        }
        let statements = match self.prepare(&client).await {
            // The schema vanished since this store made it (dropped, or lost with a crash
            // before it reached the disk): make it again.
            Err(e) if self.setup.create_schema && is_missing_schema(&e) => {
                self.setup.names.migrate(&mut client).await?;
                self.prepare(&client).await
            }
            prepared => prepared,
        };
        let [
            decide_one,
            peek_one,
            decide_many,
            decide_set,
            cleanup,
            settle,
            reset,
            cleanup_once,
            decide_any,
        ] = statements.map_err(store_error)?;
        Ok(Conn {
            client,
            decide_one,
            peek_one,
            decide_many,
            decide_set,
            cleanup,
            settle,
            reset,
            cleanup_once,
            decide_any,
            stale: AtomicBool::new(false),
        })
    }
}

impl Connector {
    /// The store's statements, prepared one after the other: this runs once per connection,
    /// not per decision.
    async fn prepare(&self, client: &Client) -> Result<[Statement; 9], tokio_postgres::Error> {
        let names = &self.setup.names;
        Ok([
            client
                .prepare(&names.render(include_str!("decide_one.sql")))
                .await?,
            client.prepare(&names.render(PEEK_ONE)).await?,
            client.prepare(&names.render(DECIDE_MANY)).await?,
            client
                .prepare(&names.render(include_str!("decide_set.sql")))
                .await?,
            client
                .prepare(&names.render(include_str!("cleanup.sql")))
                .await?,
            client
                .prepare(&names.render(include_str!("settle.sql")))
                .await?,
            client.prepare(&names.render(RESET)).await?,
            client.prepare(&names.render(CLEANUP_ONCE)).await?,
            client.prepare(&names.render(DECIDE_ANY)).await?,
        ])
    }
}

/// Sets a session setting that a server may not know (before PostgreSQL 12, some distributed
/// SQL): such a server keeps its own behaviour.
async fn set_if_known(client: &Client, set: &str) -> Result<(), StoreError> {
    match client.batch_execute(set).await {
        Err(e) if e.code() != Some(&SqlState::UNDEFINED_OBJECT) => Err(store_error(e)),
        _ => Ok(()),
    }
}

/// A connection made with `tls`.
async fn open_with<T>(config: &Config, tls: T) -> Result<Client, StoreError>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let (client, connection) = config.connect(tls).await.map_err(connect_error)?;
    // The connection's I/O runs on its own task. When it ends (its error is also what the
    // calls in flight got), the client reports closed and the next `get` replaces it.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Parses a `postgres://` URL (or a key=value string) into a connection config, and how its
/// connections use TLS.
pub(crate) fn config(
    url: &str,
    connect_timeout: Duration,
) -> Result<(Config, Connect), StoreError> {
    let (url, ssl) = tls::take_ssl_settings(url)?;
    let mut config: Config = url.parse().map_err(|e: tokio_postgres::Error| {
        let cause = std::error::Error::source(&e).map_or_else(|| e.to_string(), |c| c.to_string());
        StoreError::Config(format!("the PostgreSQL URL does not parse: {cause}"))
    })?;
    // What the driver needs and will not guess: it would fail on every connection.
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        return Err(StoreError::Config(
            "the PostgreSQL URL names no host (postgres://USER@HOST:PORT/DATABASE)".into(),
        ));
    }
    if config.get_user().is_none() {
        return Err(StoreError::Config(
            "the PostgreSQL URL names no user (postgres://USER@HOST:PORT/DATABASE)".into(),
        ));
    }
    config.connect_timeout(connect_timeout);
    if config.get_application_name().is_none() {
        config.application_name("tollgate");
    }
    let (mode, tls) = tls::connector(&ssl)?;
    config.ssl_mode(mode);
    Ok((config, tls))
}

#[cfg(test)]
mod tests {
    use tollgate_testkit::TestPostgres;

    use super::*;

    const HOLD: Duration = Duration::from_millis(100);

    fn pool(config: Config, synchronous_commit: bool, connections: usize) -> Pool {
        let setup = Setup {
            config,
            tls: Connect::Plain,
            names: Names::new("tollgate", "buckets", false).unwrap(),
            isolation: Isolation::ReadCommitted,
            synchronous_commit,
            create_schema: true,
        };
        Pool::new(setup, connections, HOLD)
    }

    fn config_of(pg: &TestPostgres) -> Config {
        config(pg.url(), Duration::from_secs(5)).unwrap().0
    }

    /// Sessions that commit synchronously unless told otherwise (the test kit's server runs
    /// with `synchronous_commit = off`).
    fn synchronous_sessions(pg: &TestPostgres) -> Config {
        let mut config = config_of(pg);
        config.options("-c synchronous_commit=on");
        config
    }

    async fn setting(pool: &Pool) -> String {
        let lease = pool.get().await.unwrap();
        let row = lease
            .client
            .query_one("SHOW synchronous_commit", &[])
            .await
            .unwrap();
        lease.answered();
        row.get(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sessions_commit_asynchronously_unless_asked_to_wait_for_the_disk() {
        let pg = TestPostgres::start().unwrap();
        let config = synchronous_sessions(&pg);
        assert_eq!(setting(&pool(config.clone(), false, 1)).await, "off");
        assert_eq!(setting(&pool(config, true, 1)).await, "on");
    }

    /// Which slot a lease counts in.
    fn slot_of(pool: &Pool, lease: &Lease) -> usize {
        let load = &lease.load.as_ref().unwrap().0;
        (0..pool.slots.len())
            .position(|i| Arc::ptr_eq(load, &pool.slots[i].load))
            .unwrap()
    }

    fn loads(pool: &Pool) -> Vec<usize> {
        let load = |s: &Slot| s.load.load(Ordering::Relaxed);
        pool.slots.iter().map(load).collect()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn statements_go_to_the_first_of_the_least_loaded_connections() {
        let pg = TestPostgres::start().unwrap();
        let pool = pool(config_of(&pg), false, 3);
        // One at a time, every statement takes the first connection: the others stay unmade.
        for _ in 0..5 {
            let lease = pool.get().await.unwrap();
            assert_eq!(slot_of(&pool, &lease), 0);
            lease.answered();
        }
        assert!(pool.slots[1].conn.lock().await.is_none());
        // Held at once, they spread: one each, then the first again.
        let held = [
            pool.get().await.unwrap(),
            pool.get().await.unwrap(),
            pool.get().await.unwrap(),
            pool.get().await.unwrap(),
        ];
        let on: Vec<usize> = held.iter().map(|l| slot_of(&pool, l)).collect();
        assert_eq!(on, [0, 1, 2, 0]);
        held.into_iter().for_each(Lease::answered);
        assert_eq!(loads(&pool), [0, 0, 0]);
    }

    // Paused time: the hold passes when the test says so.
    #[tokio::test(flavor = "current_thread")]
    async fn a_statement_left_unanswered_keeps_its_connection_busy_for_the_hold() {
        let pg = TestPostgres::start().unwrap();
        let pool = pool(config_of(&pg), false, 2);
        for i in 0..2 {
            pool.get_at(i).await.unwrap().answered();
        }
        tokio::time::pause();
        // Its caller gave up before the answer: the statement may still hold connection 0.
        drop(pool.get().await.unwrap());
        assert_eq!(loads(&pool), [1, 0]);
        let next = pool.get().await.unwrap();
        assert_eq!(slot_of(&pool, &next), 1, "new statements go elsewhere");
        next.answered();
        tokio::time::sleep(HOLD).await;
        tokio::task::yield_now().await;
        assert_eq!(loads(&pool), [0, 0], "counted for the hold only");
        let again = pool.get().await.unwrap();
        assert_eq!(slot_of(&pool, &again), 0);
        again.answered();
    }
}
