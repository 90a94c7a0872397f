//! The floor beside tollgate's script: `floor.lua` (`TIME`, one `MGET` of a batch's buckets,
//! one `PSETEX` a bucket, a fixed reply), batched as tollgate's store batches on one Redis.
//!
//! Its Redis time per decision is what any script that reads and writes a bucket a decision
//! pays, with the decisions batched alike; tollgate's beyond it is its script's own body. It
//! decides nothing: every check is answered allowed.
//!
//! The batching follows the store's defaults on one Redis: at most [`IN_FLIGHT`] calls at once,
//! and the checks that arrive while they are in flight wait, and the next call takes them all,
//! up to [`MAX_BATCH`], in arrival order. The batches' size shows in the report as calls per
//! decision, beside tollgate's.

use std::sync::Arc;

use redis::aio::ConnectionManager;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::bucket::Limit;
use crate::BenchError;

const SCRIPT: &str = include_str!("floor.lua");

/// The store's default `max_batch`.
const MAX_BATCH: usize = 256;

/// The store's calls in flight at once on one Redis (its `max_in_flight` default there).
const IN_FLIGHT: usize = 2;

/// What a bucket the cell has not written yet is written with: three integers, the shape and
/// length of a tollgate bucket's value (its TAT, emission interval and tolerance, in µs).
const FRESH: &str = "1764400000000000 1000 1000000000000";

/// A check waiting for its batch's call.
struct Pending {
    key: String,
    ttl_ms: u64,
    answered: oneshot::Sender<Result<(), String>>,
}

/// The queue of the checks to batch; cloned into each worker.
#[derive(Clone)]
pub(crate) struct Floor {
    queue: mpsc::UnboundedSender<Pending>,
}

impl Floor {
    /// Loads the script once (`SCRIPT LOAD`) and starts the batcher on `conn`; the batcher
    /// stops when the last clone of the queue is dropped.
    pub(crate) async fn load(mut conn: ConnectionManager) -> Result<Floor, BenchError> {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(SCRIPT)
            .query_async(&mut conn)
            .await?;
        let (queue, pending) = mpsc::unbounded_channel();
        tokio::spawn(batch(pending, conn, sha.into()));
        Ok(Floor { queue })
    }

    /// One check on `key`, in the next batch: always allowed, once its call has written the
    /// bucket.
    pub(crate) async fn check(&self, key: &str, limit: Limit) -> Result<bool, BenchError> {
        let (answered, answer) = oneshot::channel();
        let stopped = || BenchError::Reply("the floor's batcher has stopped".into());
        self.queue
            .send(Pending {
                key: key.to_owned(),
                ttl_ms: limit.ttl_ms(),
                answered,
            })
            .map_err(|_| stopped())?;
        match answer.await {
            Ok(Ok(())) => Ok(true),
            Ok(Err(e)) => Err(BenchError::Reply(e)),
            Err(_) => Err(stopped()),
        }
    }
}

/// Takes the waiting checks in batches, a call each, at most [`IN_FLIGHT`] at once.
async fn batch(
    mut pending: mpsc::UnboundedReceiver<Pending>,
    conn: ConnectionManager,
    sha: Arc<str>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        // A slot first, then the checks: what arrives while every slot is busy waits for the
        // next call, which takes it all.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let mut checks = Vec::with_capacity(MAX_BATCH);
        if pending.recv_many(&mut checks, MAX_BATCH).await == 0 {
            return;
        }
        let (mut conn, sha) = (conn.clone(), Arc::clone(&sha));
        tokio::spawn(async move {
            let outcome = call(&mut conn, &sha, &checks)
                .await
                .map_err(|e| e.to_string());
            for check in checks {
                // A worker that stopped waiting is not an error of the call.
                let _ = check.answered.send(outcome.clone());
            }
            drop(slot);
        });
    }
}

/// One `EVALSHA` of the script on `checks`' buckets.
async fn call(
    conn: &mut ConnectionManager,
    sha: &str,
    checks: &[Pending],
) -> Result<(), redis::RedisError> {
    // One cell's workers share a limit; the longest TTL keeps every bucket at least as long.
    let ttl_ms = checks.iter().map(|c| c.ttl_ms).max().unwrap_or(1000);
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(checks.len());
    for check in checks {
        cmd.arg(&check.key);
    }
    let _now_us: i64 = cmd.arg(FRESH).arg(ttl_ms).query_async(conn).await?;
    Ok(())
}
