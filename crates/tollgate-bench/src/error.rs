//! Why a benchmark run failed. A check that fails during a measurement is not one of these: it
//! is counted in its cell's `errors` and the run goes on.

use std::path::PathBuf;

/// A benchmark that could not be set up, run or written.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Redis refused or failed a command.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// PostgreSQL refused or failed a statement of the benchmark's own (setup, the baseline's
    /// connections).
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// tollgate's store could not be built or failed.
    #[error("tollgate store: {0}")]
    Store(#[from] tollgate::StoreError),
    /// A policy of the benchmark is invalid.
    #[error("policy: {0}")]
    Policy(#[from] tollgate::PolicyError),
    /// Redis answered something the benchmark cannot read.
    #[error("unexpected reply from Redis: {0}")]
    Reply(String),
    /// An optimistic-locking check gave up after its retries (the baseline counts it as an error).
    #[error("EXEC aborted {attempts} times in a row")]
    Contention {
        /// Attempts made.
        attempts: u32,
    },
    /// A socket of the HTTP benchmark could not be bound, connected or served.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// The HTTP client failed outside a measured request (the handshake).
    #[error("http: {0}")]
    Http(#[from] hyper::Error),
    /// The middleware could not be built.
    #[error("rate-limit layer: {0}")]
    Layer(#[from] tollgate::middleware::LayerError),
    /// A server to measure could not be started in this process.
    #[error("tollgate server: {0}")]
    Serve(#[from] tollgate_server::ServeError),
    /// The TLS variants' certificates could not be made, or a client could not be set up or
    /// complete its handshake.
    #[error("TLS: {0}")]
    Tls(String),
    /// The arguments cannot make a run.
    #[error("invalid arguments: {0}")]
    Args(String),
    /// A worker task panicked or was cancelled.
    #[error("worker task: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// A report's charts could not be drawn.
    #[error("chart: {0}")]
    Chart(String),
    /// The report could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}
