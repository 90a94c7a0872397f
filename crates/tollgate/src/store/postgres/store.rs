//! [`Store`] for the PostgreSQL store: checks validated and queued, known denials answered
//! from the cache, the rest decided in a batch within the timeout; and the readiness probe.

use std::sync::Arc;

use super::batch::Queued;
use super::call;
use super::error::store_error;
use super::{PostgresStore, schema};
use crate::store::{Check, Store};
use crate::{Policy, StoreError, Verdict};

impl PostgresStore {
    /// Whether this store can decide `policy` (its numbers within the store's range), without
    /// a store at hand: what [`Store::supports`] answers, for checking a config file.
    pub fn supports_policy(policy: &Policy) -> Result<(), crate::PolicyError> {
        call::supports(policy)
    }
}

impl Store for PostgresStore {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        if checks.is_empty() {
            return Ok(Verdict::new(Vec::new()));
        }
        Check::validate_all(checks)?;
        let queued = checks
            .iter()
            .map(Queued::new)
            .collect::<Result<Vec<_>, _>>()?;
        if let (Some(cache), [q]) = (&self.inner.deny_cache, &queued[..])
            && let Some(denied) =
                cache.get(&q.bucket, &q.units.policy, q.cost, self.inner.local_now())
        {
            return Ok(Verdict::new(vec![denied]));
        }
        let timeout = self.inner.timeout;
        let decided = async {
            match &self.batcher {
                Some(batcher) => batcher.submit(b"", queued).await,
                None => self
                    .inner
                    .decide_batch(std::slice::from_ref(&queued))
                    .await?
                    .pop()
                    .ok_or_else(|| StoreError::incompatible("the store answered nothing")),
            }
        };
        tokio::time::timeout(timeout, decided)
            .await
            .unwrap_or(Err(StoreError::Timeout(timeout)))
    }

    /// Asks on every connection at once, so that a probe also opens (and prepares) the ones
    /// not used yet, rather than leaving that to the first requests; and checks that the
    /// table is of this version's layout ([`StoreError::Incompatible`] otherwise).
    /// Credentials refused or no such database are a [`StoreError::Config`] here (a decision
    /// meets them as an outage).
    async fn ready(&self) -> Result<(), StoreError> {
        let ping = async {
            let mut pings = tokio::task::JoinSet::new();
            for i in 0..self.inner.pool.size() {
                let inner = Arc::clone(&self.inner);
                pings.spawn(async move {
                    let lease = inner.pool.get_at(i).await?;
                    if i > 0 {
                        let pong = lease.client.simple_query("SELECT 1").await;
                        lease.answered();
                        return pong.map(drop).map_err(store_error);
                    }
                    // One connection also checks that the table is of this version's layout.
                    let query = inner.pool.names().layout_query();
                    let layout = lease.client.query_one(query.as_str(), &[]).await;
                    lease.answered();
                    let layout: String = layout
                        .map_err(store_error)?
                        .try_get(0)
                        .map_err(|e| StoreError::Incompatible(Box::new(e)))?;
                    if layout != schema::LAYOUT {
                        return Err(StoreError::incompatible(format!(
                            "the table holds {:?}, this tollgate writes {:?}: servers of two \
                             versions would keep separate buckets; upgrade them together \
                             (`tollgate migrate` sets the layout)",
                            layout,
                            schema::LAYOUT
                        )));
                    }
                    Ok(())
                });
            }
            while let Some(ping) = pings.join_next().await {
                ping.map_err(|e| StoreError::Unavailable(Box::new(e)))??;
            }
            Ok(())
        };
        // A connection that can never be made is reported as such, not as the timeout of a
        // probe that gave up while the attempt (a password hashed slowly) went on.
        tokio::time::timeout(self.inner.timeout, ping)
            .await
            .unwrap_or_else(|_| {
                Err(self
                    .inner
                    .pool
                    .never_works()
                    .unwrap_or(StoreError::Timeout(self.inner.timeout)))
            })
    }

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn supports(&self, policy: &Policy) -> Result<(), crate::PolicyError> {
        PostgresStore::supports_policy(policy)
    }
}
