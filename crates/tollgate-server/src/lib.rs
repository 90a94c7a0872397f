//! The tollgate server: a standalone rate-limit service over tollgate's stores.
//!
//! [`serve`] runs the whole server until a shutdown token is cancelled; `main.rs` only parses
//! the command line and turns signals into that cancellation. Embedders can mount
//! [`http::router`] in their own axum application instead.

#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

mod bench;
pub mod cli;
pub mod http;
pub mod store;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use cli::{MigrateArgs, ServeArgs};
use tollgate::StoreError;
use tollgate::store::settle::DynSettle;

/// How long the server waits at start for its store to answer.
const WARM_UP: Duration = Duration::from_secs(3);

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The store could not be opened.
    #[error("cannot open the store ({store}): {source}")]
    Store {
        /// The store asked for.
        store: String,
        /// Why.
        source: StoreError,
    },
    /// `migrate` was given a store that has no schema.
    #[error(
        "`migrate` creates the PostgreSQL schema: --store must be a postgres:// URL, not {0:?}"
    )]
    NothingToMigrate(String),
    /// The system's random source failed (reservations are signed with a random secret).
    #[error("the system's random source failed")]
    Random,
    /// Serving failed.
    #[error("the HTTP server failed: {0}")]
    Http(#[source] io::Error),
    /// A benchmark failed.
    #[error("the benchmark failed: {0}")]
    Bench(#[from] tollgate_bench::BenchError),
}

pub use bench::bench;

/// Opens the store, binds the listener, announces both on stdout, and serves until `shutdown`
/// is cancelled and the requests in flight are answered.
pub async fn serve(args: ServeArgs, shutdown: CancellationToken) -> Result<(), ServeError> {
    let store = store::open(&args)
        .await
        .map_err(|source| ServeError::Store {
            store: args.store.to_string(),
            source,
        })?;
    if let Err(e) = warm_up(store.as_ref(), WARM_UP).await {
        eprintln!(
            "tollgate: the store does not answer yet ({e}); serving anyway, with the fail \
             policy `{}` until it does",
            args.on_store_error
        );
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: args.listen,
            source,
        })?;
    let local = listener.local_addr().map_err(ServeError::Http)?;
    // stdout, one line, so that scripts (and tests) can read the port chosen for `:0`.
    println!(
        "tollgate listening on http://{local} (store: {}, on store error: {}, timeout {:?})",
        args.store,
        args.on_store_error,
        args.store_timeout()
    );
    // Servers that share a store share this secret, to commit each other's reservations.
    let secret = std::env::var_os("TOLLGATE_RESERVATION_SECRET");
    let secret = secret.as_ref().map(|s| s.as_encoded_bytes());
    let state =
        http::AppState::new(store, args.store_timeout(), secret).map_err(|_| ServeError::Random)?;
    let state = Arc::new(state);
    http::serve(listener, state, shutdown)
        .await
        .map_err(ServeError::Http)
}

/// Creates the PostgreSQL schema, table and function that `args` name.
pub async fn migrate(args: MigrateArgs) -> Result<(), ServeError> {
    let url = match store::StoreSpec::parse(&args.store) {
        Ok(store::StoreSpec::Postgres(url)) => url,
        _ => return Err(ServeError::NothingToMigrate(args.store)),
    };
    let failed = |source| ServeError::Store {
        store: store::StoreSpec::Postgres(url.clone()).to_string(),
        source,
    };
    let timeout = Duration::from_secs(30);
    let store = store::postgres(&url, &args.postgres, timeout)
        .await
        .map_err(failed)?;
    store.migrate().await.map_err(failed)?;
    println!(
        "tollgate: {}.{} and {}.{}_decide are ready",
        args.postgres.postgres_schema,
        args.postgres.postgres_table,
        args.postgres.postgres_schema,
        args.postgres.postgres_table
    );
    Ok(())
}

/// Asks the store until it answers (or `within` passes), so that a store connecting lazily has
/// done its TCP and TLS handshakes before the first request, whose timeout is far shorter.
async fn warm_up(store: &dyn DynSettle, within: Duration) -> Result<(), StoreError> {
    let mut last = StoreError::Timeout(within);
    let attempts = async {
        loop {
            match store.ready_dyn().await {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    match tokio::time::timeout(within, attempts).await {
        Ok(result) => result,
        Err(_) => Err(last),
    }
}
