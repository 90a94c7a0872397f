//! tollgate's PostgreSQL store as a user would run it: `PostgresStore` with its defaults
//! (batching and the deny cache on, 100 ms timeout, retries with backoff under SERIALIZABLE),
//! `connections(n)` shared by all of a cell's worker tasks, in the run's schema under its own
//! table name so it never meets the baseline's table.

use std::time::Duration;

use tollgate::{Check, Policy, PostgresStore, Store};

use super::Isolation;
use super::database::{TABLE, Target};
use super::outcome::{CallError, Checked};
use crate::BenchError;

/// Checks per call when rows are created ahead of a run.
const PRECREATE_BATCH: usize = 200;

/// A store; clones share its connections.
#[derive(Clone)]
pub(crate) struct TollgatePg {
    store: PostgresStore,
}

impl TollgatePg {
    /// A store with `connections` connections at `isolation`, every connection opened (and its
    /// statements prepared) before it is returned, so that no cell's clock pays for that.
    pub(crate) async fn connect(
        target: &Target,
        connections: usize,
        isolation: Isolation,
        synchronous_commit: bool,
    ) -> Result<TollgatePg, BenchError> {
        let store = PostgresStore::builder(target.url.as_str())
            .schema(target.schema.as_str())
            .table(TABLE)
            .unlogged(target.unlogged)
            .connections(connections)
            .isolation(isolation)
            .synchronous_commit(synchronous_commit)
            .build()
            .await?;
        let pg = TollgatePg { store };
        pg.warm_up().await?;
        Ok(pg)
    }

    /// `ready` opens every connection, bounded by the store's 100 ms timeout; on a busy machine
    /// one probe may not open them all, but each opens some and keeps them, so probing again
    /// finishes the job.
    async fn warm_up(&self) -> Result<(), BenchError> {
        let mut probes = 0;
        loop {
            probes += 1;
            match self.store.ready().await {
                Ok(()) => return Ok(()),
                Err(e) if probes >= 100 => return Err(e.into()),
                Err(_) => {}
            }
        }
    }

    /// One request for one token on `key`.
    pub(crate) async fn check(&self, key: &str, policy: Policy) -> Checked {
        let outcome = match self
            .store
            .decide(&[Check::new(policy, key.as_bytes(), 1)])
            .await
        {
            Ok(verdict) => match verdict.decisions().first() {
                Some(decision) => Ok(decision.allowed()),
                None => Err(CallError::Reply("tollgate returned no decision".into())),
            },
            Err(e) => Err(CallError::Store(e)),
        };
        // The store retries serialization failures itself, and batches checks into shared
        // statements: it counts both, per store.
        Checked {
            outcome,
            retried: 0,
            statements: 0,
        }
    }

    /// Attempts the store retried after a serialization failure, since it was built.
    pub(crate) fn retried(&self) -> u64 {
        self.store.stats().retries()
    }

    /// Calls that still failed to serialize after every attempt, since it was built.
    pub(crate) fn gave_up(&self) -> u64 {
        self.store.stats().gave_up()
    }

    /// Statements the store sent (attempts included), since it was built.
    pub(crate) fn statements(&self) -> u64 {
        self.store.stats().statements()
    }

    /// Creates the rows of `keys` under `policy` (each bucket with one token taken), through
    /// the store's own multi-check calls, a batch at a time. This runs before any measurement,
    /// on a store of its own with a generous timeout.
    pub(crate) async fn precreate(
        target: &Target,
        keys: &[String],
        policy: Policy,
    ) -> Result<(), BenchError> {
        let store = PostgresStore::builder(target.url.as_str())
            .schema(target.schema.as_str())
            .table(TABLE)
            .timeout(Duration::from_secs(30))
            // Its rows are full buckets at once (a token comes back every microsecond): the
            // background cleanup would delete them before the cells run.
            .cleanup_interval(None)
            .build()
            .await?;
        for chunk in keys.chunks(PRECREATE_BATCH) {
            let checks: Vec<Check<'_>> = chunk
                .iter()
                .map(|key| Check::new(policy, key.as_bytes(), 1))
                .collect();
            store.decide(&checks).await?;
        }
        Ok(())
    }
}
