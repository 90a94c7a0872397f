//! Which store the server decides on, from `--store`, wrapped in the fail policy.

use std::sync::Arc;
use std::time::Duration;

use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::store::settle::{DynSettle, Settle};
use tollgate::{MemoryStore, PostgresStore, RedisStore, StoreError};

use crate::limiter::StoreHealth;
use crate::options::{OnStoreError, PostgresOptions, StoreSpec};
use crate::settings::Settings;

/// Opens the store `settings` name, bounded by its timeout and wrapped in its fail policy;
/// its failures are reported to `health`.
pub async fn open(
    settings: &Settings,
    health: Arc<StoreHealth>,
) -> Result<Arc<dyn DynSettle>, StoreError> {
    let memory = || MemoryStore::builder().max_keys(settings.max_keys).build();
    let on_error = match settings.on_store_error {
        OnStoreError::Allow => FailPolicy::Allow,
        OnStoreError::Deny => FailPolicy::Deny,
        OnStoreError::Local => FailPolicy::Local(memory()),
    };
    let timeout = settings.store_timeout;
    match &settings.store {
        StoreSpec::Memory => Ok(guard(memory(), on_error, timeout, health)),
        StoreSpec::Redis(url) => {
            let store = RedisStore::builder(url.as_str())
                .timeout(timeout)
                .build()
                .await?;
            Ok(guard(store, on_error, timeout, health))
        }
        StoreSpec::RedisCluster(urls) => {
            let store = RedisStore::builder(urls[0].as_str())
                .cluster(urls.iter().cloned())
                .timeout(timeout)
                .build()
                .await?;
            Ok(guard(store, on_error, timeout, health))
        }
        StoreSpec::Postgres(url) => {
            let store = postgres(url, &settings.postgres, timeout).await?;
            Ok(guard(store, on_error, timeout, health))
        }
    }
}

fn guard<S: Settle>(
    store: S,
    on_error: FailPolicy,
    timeout: Duration,
    health: Arc<StoreHealth>,
) -> Arc<dyn DynSettle> {
    Arc::new(
        Guarded::new(store, on_error)
            .timeout(timeout)
            .on_error(move |e| health.failed(e)),
    )
}

/// The PostgreSQL store that `url` and `options` describe (it connects lazily).
pub async fn postgres(
    url: &str,
    options: &PostgresOptions,
    timeout: Duration,
) -> Result<PostgresStore, StoreError> {
    PostgresStore::builder(url)
        .schema(options.schema.as_str())
        .table(options.table.as_str())
        .unlogged(options.unlogged)
        .synchronous_commit(options.synchronous_commit)
        .isolation(options.isolation)
        .connections(options.connections)
        .timeout(timeout)
        .build()
        .await
}
