//! Why the server could not start, or stopped.

use std::io;
use std::net::SocketAddr;

use tollgate::StoreError;

use crate::config::ConfigError;
use crate::descriptors::config::LoadError;
use crate::limiter::BuildError;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The command line was refused.
    #[error("{0}")]
    Args(String),
    /// The config file was refused.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The Unix socket could not be bound.
    #[error("cannot listen on the Unix socket {}: {source}", .path.display())]
    BindUnix {
        /// The socket's path.
        path: std::path::PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A listener's TLS files cannot be used.
    #[error("[{listener}.tls]: {source}")]
    Tls {
        /// The listener (`http`, `grpc`, `resp`, `admin`).
        listener: &'static str,
        /// Why.
        source: crate::net::tls::TlsError,
    },
    /// The store could not be opened.
    #[error("cannot open the store ({store}): {source}")]
    Store {
        /// The store asked for.
        store: String,
        /// Why.
        source: StoreError,
    },
    /// The store can never work as configured (no such database or DB index, credentials
    /// refused, a host name that does not resolve, no TLS roots, a certificate not trusted):
    /// `--store` / `[store] url` is to fix.
    #[error("cannot use the store ({store}): {}; fix --store or [store] url", plain(.source))]
    Unusable {
        /// The store asked for.
        store: String,
        /// Why, a [`StoreError::Config`].
        source: StoreError,
    },
    /// `migrate` was given a store that has no schema.
    #[error(
        "`migrate` creates the PostgreSQL schema: --store must be a postgres:// URL, not {0:?}"
    )]
    NothingToMigrate(String),
    /// The decision core could not be built.
    #[error("{0}")]
    Limiter(#[from] BuildError),
    /// The metrics could not be registered.
    #[error("the metrics could not be registered: {0}")]
    Metrics(#[from] prometheus::Error),
    /// Serving failed.
    #[error("the HTTP server failed: {0}")]
    Http(#[source] io::Error),
    /// The Envoy config directory was refused.
    #[error("{0}")]
    Envoy(#[from] LoadError),
    /// `[tracing]` could not start.
    #[error("{0}")]
    Traces(#[from] crate::traces::TracesError),
}

/// A store's error without its kind's preamble, when it is what the user has to fix.
pub(crate) fn plain(e: &StoreError) -> String {
    match e {
        StoreError::Config(why) => why.clone(),
        other => other.to_string(),
    }
}
