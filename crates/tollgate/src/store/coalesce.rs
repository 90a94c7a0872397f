//! Coalescing of concurrent checks on one hot bucket.
//!
//! Without it, every check of a hot key is its own round trip, and in Redis its own script run;
//! in PostgreSQL, each waits for the row lock of the one before. Here the checks of one bucket
//! queue up while a call for that bucket is in flight; when it returns, the next call decides
//! the whole queue at once, in arrival order, exactly as if the checks had arrived one by one.
//! A check that finds no call in flight starts one at once, so a quiet key waits for nothing.
//!
//! The calls run on a spawned task, so a caller that gives up (its timeout, a dropped request)
//! never strands the checks queued behind it.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::BoxFuture;
use crate::{Decision, Policy, StoreError};

/// Decides a batch of single checks on one bucket, in order.
pub(crate) trait Batcher: Send + Sync + 'static {
    fn decide_batch(
        self: Arc<Self>,
        policy: Policy,
        key: Arc<[u8]>,
        costs: Vec<u64>,
    ) -> BoxFuture<'static, Result<Vec<Decision>, StoreError>>;
}

struct Waiter {
    cost: u64,
    reply: oneshot::Sender<Result<Decision, StoreError>>,
}

/// Queues of waiting checks, by bucket.
pub(crate) struct Coalescer {
    queues: Mutex<HashMap<Vec<u8>, Vec<Waiter>>>,
    max_batch: usize,
}

impl Coalescer {
    pub(crate) fn new(max_batch: usize) -> Coalescer {
        Coalescer {
            queues: Mutex::new(HashMap::new()),
            max_batch: max_batch.max(1),
        }
    }

    /// Decides `cost` on the bucket `bucket` (`key` under `policy`), in a batch with whatever
    /// else is waiting for that bucket.
    pub(crate) async fn check<B: Batcher>(
        self: &Arc<Self>,
        batcher: &Arc<B>,
        bucket: Vec<u8>,
        policy: Policy,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, StoreError> {
        let (reply, answer) = oneshot::channel();
        let waiter = Waiter { cost, reply };
        let start = {
            let mut queues = self.queues.lock();
            match queues.get_mut(&bucket) {
                Some(queue) => {
                    queue.push(waiter);
                    false
                }
                None => {
                    queues.insert(bucket.clone(), vec![waiter]);
                    true
                }
            }
        };
        if start {
            tokio::spawn(Arc::clone(self).drive(Arc::clone(batcher), bucket, policy, key.into()));
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the batch deciding this check was dropped".into(),
            ))
        })
    }

    /// Runs calls for `bucket` until its queue is empty, then forgets the bucket.
    async fn drive<B: Batcher>(
        self: Arc<Self>,
        batcher: Arc<B>,
        bucket: Vec<u8>,
        policy: Policy,
        key: Arc<[u8]>,
    ) {
        loop {
            let batch: Vec<Waiter> = {
                let mut queues = self.queues.lock();
                let Some(queue) = queues.get_mut(&bucket) else {
                    return;
                };
                if queue.is_empty() {
                    queues.remove(&bucket);
                    return;
                }
                let n = queue.len().min(self.max_batch);
                queue.drain(..n).collect()
            };
            let costs = batch.iter().map(|w| w.cost).collect();
            match Arc::clone(&batcher)
                .decide_batch(policy, Arc::clone(&key), costs)
                .await
            {
                Ok(decisions) => {
                    for (waiter, decision) in batch.into_iter().zip(decisions) {
                        // A waiter that gave up has dropped its receiver: nothing to tell it.
                        let _ = waiter.reply.send(Ok(decision));
                    }
                }
                Err(error) => {
                    for waiter in batch {
                        let _ = waiter.reply.send(Err(error.replicate()));
                    }
                }
            }
        }
    }
}

impl StoreError {
    /// The same error for another waiter of a failed batch.
    pub(crate) fn replicate(&self) -> StoreError {
        match self {
            StoreError::Check(e) => StoreError::Check(e.clone()),
            StoreError::Full { max_keys } => StoreError::Full {
                max_keys: *max_keys,
            },
            StoreError::Timeout(d) => StoreError::Timeout(*d),
            StoreError::Unavailable(e) => StoreError::Unavailable(e.to_string().into()),
        }
    }
}
