//! Deleting idle rows (full buckets, ended windows, expired settlement ids): on demand
//! ([`PostgresStore::cleanup_idle`](super::PostgresStore::cleanup_idle)), and in the background
//! in the loop the builder starts.

use std::sync::Weak;
use std::time::Duration;

use tokio_postgres::types::ToSql;

use super::Inner;
use super::error::store_error;
use crate::StoreError;

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
    pub(super) async fn cleanup_idle(&self) -> Result<u64, StoreError> {
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
