//! Flaw (a): concurrent first calls. Many workers call for the same fresh keys at once, in the
//! same order, starting together: the function's UPDATE finds no row in each of them, each
//! INSERTs, and all but the first fail on the primary key (SQLSTATE 23505). tollgate's upsert
//! has one insert win and the others update.

use std::sync::Arc;

use tokio::sync::Barrier;
use tokio::task::JoinSet;

use super::approach::{Approach, Crew};
use super::database::Target;
use super::limit::DEFAULTS;
use super::outcome::Tally;
use super::{Isolation, IsolationNames};
use crate::BenchError;
use crate::clock::Stopwatch;

/// Flaw (a): concurrent first calls on fresh keys.
#[derive(Debug, Clone)]
pub struct Race {
    /// The isolation level.
    pub isolation: Isolation,
    /// The approach.
    pub approach: Approach,
    /// Concurrent workers, each calling every key once, in the same order.
    pub workers: usize,
    /// Fresh keys.
    pub keys: usize,
    /// Calls made (`workers × keys`).
    pub calls: u64,
    /// Calls allowed (the limit allows every one).
    pub allowed: u64,
    /// Calls that failed.
    pub errors: u64,
    /// Of those, duplicate keys (SQLSTATE 23505).
    pub duplicate_key: u64,
    /// Of those, serialization failures that outlived the retries (40001).
    pub serialization: u64,
    /// Of those, tollgate's calls that ran past the store's timeout.
    pub timeouts: u64,
    /// tollgate's store's statements that gave up on 40001.
    pub gave_up: u64,
    /// Attempts retried after a serialization failure.
    pub retried: u64,
}

/// Concurrent workers, each a connection for the function; tollgate gets as many connections.
pub(crate) const WORKERS: usize = 32;
/// Fresh keys, each called once by every worker.
pub(crate) const KEYS: usize = 200;

/// Runs the race for `approach` at `isolation` on keys no one has used (under the function's
/// default limit of 120 tokens, so every call that does not fail is allowed).
pub(crate) async fn run(
    target: &Target,
    approach: Approach,
    isolation: Isolation,
) -> Result<Race, BenchError> {
    let mut crew = Crew::hire(approach, target, isolation, WORKERS, WORKERS, DEFAULTS).await?;
    let keys: Arc<[String]> = (0..KEYS)
        .map(|i| format!("race:{}:{i}", isolation.name()))
        .collect();
    let barrier = Arc::new(Barrier::new(WORKERS));
    let mut tasks = JoinSet::new();
    for worker in crew.workers.drain(..) {
        let keys = Arc::clone(&keys);
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            let mut tally = Tally::default();
            barrier.wait().await;
            for key in keys.iter() {
                let call = Stopwatch::start();
                let checked = worker.check(key).await;
                tally.record(checked, call.elapsed());
            }
            tally
        });
    }
    let mut tally = Tally::default();
    while let Some(worker) = tasks.join_next().await {
        tally.merge(worker?);
    }
    tally.retried += crew.store_retried();
    tally.statements += crew.store_statements();
    tally.gave_up += crew.store_gave_up();
    eprintln!(
        "race {} {approach}: {} calls, {} allowed, {} errors ({} duplicate key){}",
        isolation.sql(),
        tally.decisions + tally.errors,
        tally.allowed,
        tally.errors,
        tally.duplicate_key,
        tally.first_error_note()
    );
    Ok(Race {
        isolation,
        approach,
        workers: WORKERS,
        keys: KEYS,
        calls: tally.decisions + tally.errors,
        allowed: tally.allowed,
        errors: tally.errors,
        duplicate_key: tally.duplicate_key,
        serialization: tally.serialization,
        timeouts: tally.timeouts,
        gave_up: tally.gave_up,
        retried: tally.retried,
    })
}
