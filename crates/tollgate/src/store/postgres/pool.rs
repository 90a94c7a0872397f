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
//! first of the least loaded (`tollgate bench postgres`, interleaved runs of both).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, OnceCell};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::schema::Names;
use crate::StoreError;

/// The isolation level of every transaction of the store's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// PostgreSQL's default. Each decision is atomic without retries.
    #[default]
    ReadCommitted,
    /// What YugabyteDB and CockroachDB run: conflicts fail with SQLSTATE 40001 and are retried.
    Serializable,
}

/// One connection and its prepared statements.
pub(crate) struct Conn {
    pub(crate) client: Client,
    pub(crate) decide_one: Statement,
    pub(crate) peek_one: Statement,
    pub(crate) decide_many: Statement,
    pub(crate) decide_set: Statement,
    pub(crate) cleanup: Statement,
}

/// How connections are made.
pub(crate) struct Setup {
    pub(crate) config: Config,
    pub(crate) names: Names,
    pub(crate) isolation: Isolation,
    pub(crate) synchronous_commit: bool,
    pub(crate) create_schema: bool,
}

pub(crate) struct Pool {
    setup: Setup,
    slots: Vec<Slot>,
    migrated: OnceCell<()>,
}

/// One connection's place: the connection once made, and the statements sent on it and not
/// yet answered.
struct Slot {
    conn: Mutex<Option<Arc<Conn>>>,
    load: AtomicUsize,
}

/// A connection leased for one statement; it counts in its slot's load until dropped.
pub(crate) struct Lease<'a> {
    conn: Arc<Conn>,
    _load: Load<'a>,
}

impl Lease<'_> {
    /// The connection, for a statement's future to own.
    pub(crate) fn conn(&self) -> Arc<Conn> {
        Arc::clone(&self.conn)
    }
}

impl std::ops::Deref for Lease<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        &self.conn
    }
}

/// One unit of a slot's load, given back when dropped (also by a caller that gives up while
/// the connection is being made).
struct Load<'a>(&'a AtomicUsize);

impl<'a> Load<'a> {
    fn take(load: &'a AtomicUsize) -> Load<'a> {
        load.fetch_add(1, Ordering::Relaxed);
        Load(load)
    }
}

impl Drop for Load<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reads a bucket's state without taking anything (cost 0).
const PEEK_ONE: &str = r#"SELECT coalesce($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
       (SELECT tat FROM "@schema@"."@table@" WHERE key = $1::bytea)"#;

const DECIDE_MANY: &str = r#"SELECT "@schema@"."@table@_decide"($1, $2, $3, $4, $5, $6, $7)"#;

impl Pool {
    pub(crate) fn new(setup: Setup, connections: usize) -> Pool {
        Pool {
            setup,
            slots: (0..connections.max(1))
                .map(|_| Slot {
                    conn: Mutex::new(None),
                    load: AtomicUsize::new(0),
                })
                .collect(),
            migrated: OnceCell::new(),
        }
    }

    /// The first of the connections with the fewest statements in flight.
    pub(crate) async fn get(&self) -> Result<Lease<'_>, StoreError> {
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
        self.get_at(best).await
    }

    /// Connection `i`, connecting (and preparing) it if it is new or was closed.
    pub(crate) async fn get_at(&self, i: usize) -> Result<Lease<'_>, StoreError> {
        let slot = &self.slots[i % self.slots.len()];
        // Counted from the start: callers that come while it connects go elsewhere.
        let load = Load::take(&slot.load);
        let mut held = slot.conn.lock().await;
        let conn = match held.as_ref().filter(|c| !c.client.is_closed()) {
            Some(conn) => Arc::clone(conn),
            None => {
                *held = None;
                let conn = Arc::new(self.connect().await?);
                *held = Some(Arc::clone(&conn));
                conn
            }
        };
        Ok(Lease { conn, _load: load })
    }

    /// How many connections the pool holds.
    pub(crate) fn size(&self) -> usize {
        self.slots.len()
    }

    /// Creates the schema now (`tollgate migrate`), whether or not the store would on first use.
    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.open().await?;
        self.setup.names.migrate(&mut client).await
    }

    async fn open(&self) -> Result<Client, StoreError> {
        let (client, connection) = self
            .setup
            .config
            .connect(NoTls)
            .await
            .map_err(unavailable)?;
        // The connection's I/O runs on its own task. When it ends (its error is also what the
        // calls in flight got), the client reports closed and the next `get` replaces it.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
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
                .map_err(unavailable)?;
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
        let [decide_one, peek_one, decide_many, decide_set, cleanup] =
            statements.map_err(unavailable)?;
        Ok(Conn {
            client,
            decide_one,
            peek_one,
            decide_many,
            decide_set,
            cleanup,
        })
    }
}

impl Pool {
    /// The store's statements, prepared one after the other: this runs once per connection,
    /// not per decision.
    async fn prepare(&self, client: &Client) -> Result<[Statement; 5], tokio_postgres::Error> {
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
        ])
    }
}

/// Sets a session setting that a server may not know (before PostgreSQL 12, some distributed
/// SQL): such a server keeps its own behaviour.
async fn set_if_known(client: &Client, set: &str) -> Result<(), StoreError> {
    match client.batch_execute(set).await {
        Err(e) if e.code() != Some(&SqlState::UNDEFINED_OBJECT) => Err(unavailable(e)),
        _ => Ok(()),
    }
}

fn is_missing_schema(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(
            &SqlState::UNDEFINED_TABLE
                | &SqlState::UNDEFINED_FUNCTION
                | &SqlState::INVALID_SCHEMA_NAME
        )
    )
}

/// A failure of the database, with what the server said: tokio-postgres displays an error the
/// server sent as a bare "db error", which would hide a serialization failure or a missing
/// table from the logs.
pub(crate) fn unavailable(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => StoreError::Unavailable(
            format!(
                "{}: {} (SQLSTATE {})",
                db.severity(),
                db.message(),
                db.code().code()
            )
            .into(),
        ),
        None => StoreError::Unavailable(Box::new(e)),
    }
}

/// Parses a `postgres://` URL (or a key=value string) into a connection config.
pub(crate) fn config(url: &str, connect_timeout: Duration) -> Result<Config, StoreError> {
    let mut config: Config = url.parse().map_err(unavailable)?;
    config.connect_timeout(connect_timeout);
    if config.get_application_name().is_none() {
        config.application_name("tollgate");
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use tollgate_testkit::TestPostgres;

    use super::*;

    async fn pool(url: &str, synchronous_commit: bool, connections: usize) -> Pool {
        let setup = Setup {
            config: config(url, Duration::from_secs(5)).unwrap(),
            names: Names::new("tollgate", "buckets", false).unwrap(),
            isolation: Isolation::ReadCommitted,
            synchronous_commit,
            create_schema: true,
        };
        Pool::new(setup, connections)
    }

    /// A database whose sessions commit synchronously unless told otherwise (the test kit's
    /// server runs with `synchronous_commit = off`).
    async fn synchronous_database(pg: &TestPostgres) -> String {
        let (client, connection) = tokio_postgres::connect(pg.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        // One at a time: several statements in one message would be one transaction, which
        // CREATE DATABASE refuses.
        for sql in [
            "DROP DATABASE IF EXISTS tollgate_sync",
            "CREATE DATABASE tollgate_sync",
            "ALTER DATABASE tollgate_sync SET synchronous_commit = on",
        ] {
            client.batch_execute(sql).await.unwrap();
        }
        let (base, _) = pg.url().rsplit_once('/').unwrap();
        format!("{base}/tollgate_sync")
    }

    async fn setting(pool: &Pool) -> String {
        let lease = pool.get().await.unwrap();
        let row = lease
            .client
            .query_one("SHOW synchronous_commit", &[])
            .await
            .unwrap();
        row.get(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sessions_commit_asynchronously_unless_asked_to_wait_for_the_disk() {
        let pg = TestPostgres::start().unwrap();
        let url = synchronous_database(&pg).await;
        assert_eq!(setting(&pool(&url, false, 1).await).await, "off");
        assert_eq!(setting(&pool(&url, true, 1).await).await, "on");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_go_to_the_first_of_the_least_loaded_connections() {
        let pg = TestPostgres::start().unwrap();
        let pool = pool(pg.url(), false, 3).await;
        // One at a time, every statement takes the first connection: the others stay unmade.
        for _ in 0..5 {
            let lease = pool.get().await.unwrap();
            assert!(std::ptr::eq(lease._load.0, &pool.slots[0].load));
        }
        assert!(pool.slots[1].conn.lock().await.is_none());
        // Held at once, they spread: one each, then the first again.
        let a = pool.get().await.unwrap();
        let b = pool.get().await.unwrap();
        let c = pool.get().await.unwrap();
        let d = pool.get().await.unwrap();
        let on = |lease: &Lease<'_>| {
            (0..3)
                .position(|i| std::ptr::eq(lease._load.0, &pool.slots[i].load))
                .unwrap()
        };
        assert_eq!([on(&a), on(&b), on(&c), on(&d)], [0, 1, 2, 0]);
        drop((a, b, c, d));
        assert!(
            pool.slots
                .iter()
                .all(|s| s.load.load(Ordering::Relaxed) == 0)
        );
    }
}
