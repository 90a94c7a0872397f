//! A few shared connections, each with the store's statements prepared. tokio-postgres
//! pipelines the statements of concurrent callers on one connection, so a handful serve many
//! callers without a checkout: a caller takes the next connection in turn, sends its one
//! statement and awaits the answer. A connection found closed is replaced on the spot.

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
    pub(crate) create_schema: bool,
}

pub(crate) struct Pool {
    setup: Setup,
    slots: Vec<Mutex<Option<Arc<Conn>>>>,
    next: AtomicUsize,
    migrated: OnceCell<()>,
}

/// Reads a bucket's state without taking anything (cost 0).
const PEEK_ONE: &str = r#"SELECT coalesce($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
       (SELECT tat FROM "@schema@"."@table@" WHERE key = $1::bytea)"#;

const DECIDE_MANY: &str = r#"SELECT "@schema@"."@table@_decide"($1, $2, $3, $4, $5, $6, $7)"#;

impl Pool {
    pub(crate) fn new(setup: Setup, connections: usize) -> Pool {
        Pool {
            setup,
            slots: (0..connections.max(1)).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            migrated: OnceCell::new(),
        }
    }

    /// The next connection in turn, connecting (and preparing) it if it is new or was closed.
    pub(crate) async fn get(&self) -> Result<Arc<Conn>, StoreError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut slot = self.slots[i].lock().await;
        if let Some(conn) = slot.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(Arc::clone(conn));
        }
        *slot = None;
        let conn = Arc::new(self.connect().await?);
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
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
        // about 1.7 times as much here (pgbench, 5.4k against 9.4k calls/s). The connections run tollgate's statements only.
        // A server without the setting (before PostgreSQL 12, some distributed SQL) keeps its
        // own planning.
        if let Err(e) = client
            .batch_execute("SET plan_cache_mode = force_generic_plan")
            .await
        {
            if e.code() != Some(&tokio_postgres::error::SqlState::UNDEFINED_OBJECT) {
                return Err(unavailable(e));
            }
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
