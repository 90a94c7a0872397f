//! The two approaches, and a cell's workers for either.

use std::fmt;

use tollgate::Policy;

use super::Isolation;
use super::database::Target;
use super::function::FunctionConn;
use super::limit::Limit;
use super::outcome::Checked;
use super::tollgate::TollgatePg;
use crate::BenchError;

/// A way to keep token buckets in PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Approach {
    /// The published PL/pgSQL function, one call per request over a connection per worker.
    Function,
    /// tollgate's `PostgresStore` with its defaults, `connections(n)` for n workers.
    Tollgate,
    /// The same store with `synchronous_commit(true)`: each decision waits for its commit to
    /// reach the disk, as the function's calls do. Shown beside, not judged by the goals.
    TollgateSync,
}

impl Approach {
    /// Every approach, in the order each cell runs them.
    pub const ALL: [Approach; 3] = [
        Approach::Function,
        Approach::Tollgate,
        Approach::TollgateSync,
    ];

    /// The two the goals compare, and the only ones of the over-grant test and the flaws.
    pub const COMPARED: [Approach; 2] = [Approach::Function, Approach::Tollgate];

    /// The name used in the report.
    pub fn name(self) -> &'static str {
        match self {
            Approach::Function => "function",
            Approach::Tollgate => "tollgate",
            Approach::TollgateSync => "tollgate-sync",
        }
    }

    /// One line on how the approach runs.
    pub fn describe(self) -> &'static str {
        match self {
            Approach::Function => {
                "the published PL/pgSQL function (UPDATE ... RETURNING, INSERT if no row), one \
                 call per request in its own transaction, one connection per worker (as pgbench \
                 clients), SQLSTATE 40001 retried at once up to 10 attempts"
            }
            Approach::Tollgate => {
                "tollgate PostgresStore, defaults (a lone check is one INSERT ... ON CONFLICT \
                 statement; checks that arrive while 2 calls are in flight wait and share the \
                 next: one set-based upsert for single checks on distinct keys, else one call \
                 of its decide function; deny cache; 100 ms timeout; retries with backoff on \
                 40001 while they fit in it; `synchronous_commit = off` for its sessions, so a \
                 decision does not wait for the disk), `connections(n)` shared by n worker tasks"
            }
            Approach::TollgateSync => {
                "the same store with `synchronous_commit(true)`: each commit waits for its WAL \
                 flush, as the function's do (the same durability); beside the others, not judged \
                 by the goals"
            }
        }
    }
}

impl fmt::Display for Approach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One worker's handle on its approach, with the limit it checks.
pub(crate) enum Worker {
    Function(FunctionConn, Limit),
    Tollgate(TollgatePg, Policy),
}

impl Worker {
    /// One request for one token on `key`.
    pub(crate) async fn check(&self, key: &str) -> Checked {
        match self {
            Worker::Function(conn, limit) => conn.check(key, *limit).await,
            Worker::Tollgate(store, policy) => store.check(key, *policy).await,
        }
    }
}

/// The workers of one measurement, connected before its clock starts.
pub(crate) struct Crew {
    pub(crate) workers: Vec<Worker>,
    store: Option<TollgatePg>,
}

impl Crew {
    /// `workers` workers of `approach` under `limit`. The function's workers have a connection
    /// each; tollgate's share one store of `connections` connections.
    pub(crate) async fn hire(
        approach: Approach,
        target: &Target,
        isolation: Isolation,
        workers: usize,
        connections: usize,
        limit: Limit,
    ) -> Result<Crew, BenchError> {
        let mut crew = Crew {
            workers: Vec::with_capacity(workers),
            store: None,
        };
        match approach {
            Approach::Function => {
                for _ in 0..workers {
                    let conn = FunctionConn::connect(target, isolation).await?;
                    crew.workers.push(Worker::Function(conn, limit));
                }
            }
            Approach::Tollgate | Approach::TollgateSync => {
                let synchronous_commit = approach == Approach::TollgateSync;
                let store =
                    TollgatePg::connect(target, connections, isolation, synchronous_commit).await?;
                let policy = limit.policy()?;
                for _ in 0..workers {
                    crew.workers.push(Worker::Tollgate(store.clone(), policy));
                }
                crew.store = Some(store);
            }
        }
        Ok(crew)
    }

    /// Attempts tollgate's store retried on its own (0 for the function, whose retries each
    /// call reports).
    pub(crate) fn store_retried(&self) -> u64 {
        self.store.as_ref().map_or(0, TollgatePg::retried)
    }

    /// Statements tollgate's store sent (0 for the function, whose calls count their own).
    pub(crate) fn store_statements(&self) -> u64 {
        self.store.as_ref().map_or(0, TollgatePg::statements)
    }

    /// tollgate's store's calls that still failed to serialize after every attempt.
    pub(crate) fn store_gave_up(&self) -> u64 {
        self.store.as_ref().map_or(0, TollgatePg::gave_up)
    }
}
