//! Deleting idle rows (full buckets, ended windows, expired settlement ids): on demand, and in
//! the background every [`cleanup_interval`](super::PostgresStoreBuilder::cleanup_interval).

use std::sync::Weak;
use std::time::Duration;

use tokio_postgres::types::ToSql;

use super::error::store_error;
use super::{Inner, PostgresStore};
use crate::StoreError;

impl PostgresStore {
    /// Deletes idle rows (full buckets) in batches until none is left, and the settlement ids
    /// that have expired; returns how many rows of buckets went. The store also does this in
    /// the background (see
    /// [`PostgresStoreBuilder::cleanup_interval`](super::PostgresStoreBuilder::cleanup_interval)).
    ///
    /// # Cancel safety
    ///
    /// It deletes in batches, one statement each. Dropped between two, the batches done stay
    /// done; dropped while one is in flight, that statement runs to its end on the server or
    /// not at all. What it deletes is idle either way (a full bucket, an ended window, an
    /// expired id), and a deleted bucket is indistinguishable from a new one, so a cleanup cut
    /// short changes no decision: the next one deletes the rest.
    pub async fn cleanup_idle(&self) -> Result<u64, StoreError> {
        self.inner.cleanup_idle().await
    }
}

/// Deletes idle rows every `every`, until the store is dropped.
pub(super) async fn cleanup_loop(inner: Weak<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        // A failure (the database is down) is retried at the next tick.
        let _ = inner.cleanup_idle().await;
    }
}

impl Inner {
    async fn cleanup_idle(&self) -> Result<u64, StoreError> {
        let now_param = self.now_param()?;
        loop {
            let lease = self.pool.get().await?;
            let params: [&(dyn ToSql + Sync); 2] = [&now_param, &self.cleanup_batch];
            let forgotten = lease.client.query_one(&lease.cleanup_once, &params).await;
            lease.answered();
            let row = forgotten.map_err(store_error)?;
            let counts = row.try_get(0).and_then(|w| Ok((w, row.try_get(1)?)));
            let (windows, ids): (i64, i64) =
                counts.map_err(|e| StoreError::Incompatible(Box::new(e)))?;
            if windows.max(ids) < self.cleanup_batch {
                break;
            }
        }
        let mut deleted = 0;
        loop {
            let lease = self.pool.get().await?;
            let params: [&(dyn ToSql + Sync); 2] = [&now_param, &self.cleanup_batch];
            let deleted_now = lease.client.execute(&lease.cleanup, &params).await;
            lease.answered();
            let n = deleted_now.map_err(store_error)?;
            deleted += n;
            if n < self.cleanup_batch.unsigned_abs() {
                return Ok(deleted);
            }
        }
    }
}
