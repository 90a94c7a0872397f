//! tollgate's Redis store as a user would run it: `RedisStore` with its defaults (deny cache and
//! coalescing on), one store (one multiplexed connection) shared by every worker.

use std::time::Duration;

use tollgate::{Check, Policy, RedisStore, Store};

use super::bucket::Limit;
use crate::BenchError;

/// The store and the policy of the current cell; cloned into each worker.
#[derive(Clone)]
pub(crate) struct TollgateRedis {
    store: RedisStore,
}

impl TollgateRedis {
    /// The store on `url`, each decision bounded by `timeout` (else the store's default).
    pub(crate) async fn connect(
        url: &str,
        timeout: Option<Duration>,
    ) -> Result<TollgateRedis, BenchError> {
        let builder = RedisStore::builder(url);
        let builder = match timeout {
            Some(timeout) => builder.timeout(timeout),
            None => builder,
        };
        Ok(TollgateRedis {
            store: builder.build().await?,
        })
    }

    /// The policy equal to a baseline's `limit`: `burst` tokens, `rate` per second.
    pub(crate) fn policy(limit: Limit) -> Result<Policy, BenchError> {
        Ok(Policy::token_bucket(
            limit.burst,
            limit.rate,
            Duration::from_secs(1),
        )?)
    }

    /// One check of one token on `key`.
    pub(crate) async fn check(&self, key: &str, policy: Policy) -> Result<bool, BenchError> {
        let verdict = self
            .store
            .decide(&[Check::new(policy, key.as_bytes(), 1)])
            .await?;
        let decision = verdict
            .decisions()
            .first()
            .ok_or_else(|| BenchError::Reply("tollgate returned no decision".into()))?;
        Ok(decision.allowed())
    }
}
