//! Which store the server decides on, from `--store`, wrapped in the fail policy.

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::store::redis::RedisTls;
use tollgate::store::settle::{DynSettle, Settle};
use tollgate::{
    ErrorKind, MemoryStore, NonZeroDuration, PostgresStore, RedisStore, Store, StoreError,
};

use crate::files::Kind;
use crate::limiter::StoreHealth;
use crate::options::{OnStoreError, PostgresOptions, StoreSpec, StoreTls, StoreWait};
use crate::settings::Settings;

/// How long the server waits at start (and a reload or `config check` waits) for a store to
/// answer.
pub(crate) const WARM_UP: Duration = Duration::from_secs(3);

/// Opens the store `settings` name, bounded by its timeout and wrapped in its fail policy;
/// its failures are reported to `health`.
pub async fn open(
    settings: &Settings,
    health: Arc<StoreHealth>,
) -> Result<Arc<dyn DynSettle>, StoreError> {
    // The config file refuses 0; `--max-keys 0` is refused here, as a store that cannot work.
    let max_keys = NonZeroUsize::new(settings.max_keys).ok_or_else(|| {
        StoreError::Config("max_keys is 0: a store that may hold no key fails every check".into())
    })?;
    tls_only_for_redis(settings)?;
    let memory = || MemoryStore::builder().max_keys(max_keys).build();
    let on_error = match settings.on_store_error {
        OnStoreError::Allow => FailPolicy::Allow,
        OnStoreError::Deny => FailPolicy::Deny,
        OnStoreError::Local => FailPolicy::Local(memory()),
    };
    let timeout = settings.store_timeout;
    // The config file refuses 0, and so do the Redis and PostgreSQL builders; the memory
    // store's guard needs it said too.
    let guard_timeout = NonZeroDuration::new(timeout).ok_or_else(|| {
        StoreError::Config(
            "the store timeout is 0: every decision would time out and be answered by the fail \
             policy"
                .into(),
        )
    })?;
    match &settings.store {
        StoreSpec::Memory => Ok(guard(memory(), on_error, guard_timeout, health)),
        StoreSpec::Redis(url) => {
            let store = redis(url, &[], timeout, settings).await?;
            Ok(guard(store, on_error, guard_timeout, health))
        }
        StoreSpec::RedisCluster(urls) => {
            let store = redis(&urls[0], urls, timeout, settings).await?;
            Ok(guard(store, on_error, guard_timeout, health))
        }
        StoreSpec::Postgres(url) => {
            let store = postgres(url, &settings.postgres, timeout).await?;
            Ok(guard(store, on_error, guard_timeout, health))
        }
    }
}

/// The Redis store at `url`, or the cluster whose other seed nodes are `cluster`, with the TLS
/// files of `[store.tls]` and the durability option of `settings`.
async fn redis(
    url: &str,
    cluster: &[String],
    timeout: Duration,
    settings: &Settings,
) -> Result<RedisStore, StoreError> {
    let tls = settings.store_tls.as_ref();
    let builder = RedisStore::builder(url);
    let builder = match settings.store_wait {
        Some(StoreWait { replicas, timeout }) => builder.wait_for_replicas(replicas, timeout),
        None => builder,
    };
    let builder = if cluster.is_empty() {
        builder
    } else {
        builder.cluster(cluster.iter().cloned())
    };
    let builder = match tls {
        Some(tls) => builder.tls(redis_tls(tls)?),
        None => builder,
    };
    builder.timeout(timeout).build().await
}

/// The files of `[store.tls]`, read (each within its cap, by the one file reader).
fn redis_tls(tls: &StoreTls) -> Result<RedisTls, StoreError> {
    let read = |key: &str, path: &std::path::Path, kind: Kind| {
        crate::files::read(path, kind)
            .map(|bytes| bytes.to_vec())
            .map_err(|e| {
                StoreError::Config(format!("[store.tls] {key} {}: {}", path.display(), e.why))
            })
    };
    let mut out = RedisTls::new().skip_hostname_verification(tls.skip_hostname_verification);
    if let Some(ca) = &tls.ca {
        out = out.ca_pem(read("ca", ca, Kind::ClientCa)?);
    }
    if let Some((cert, key)) = &tls.client {
        out = out.client_pem(
            read("cert", cert, Kind::Certificate)?,
            read("key", key, Kind::Key)?,
        );
    }
    Ok(out)
}

/// Refuses `[store.tls]` and `[store] wait_replicas` for a store other than Redis, which would
/// never read them.
fn tls_only_for_redis(settings: &Settings) -> Result<(), StoreError> {
    if !matches!(settings.store, StoreSpec::Memory | StoreSpec::Postgres(_)) {
        return Ok(());
    }
    if settings.store_tls.is_some() {
        return Err(StoreError::Config(
            "[store.tls] is for a rediss:// store; this one is not Redis".into(),
        ));
    }
    if settings.store_wait.is_some() {
        return Err(StoreError::Config(
            "store.wait_replicas is for a Redis store (WAIT); this one is not Redis".into(),
        ));
    }
    Ok(())
}

fn guard<S: Settle>(
    store: S,
    on_error: FailPolicy,
    timeout: NonZeroDuration,
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

/// Asks `ready` until the store answers, `within` passes, or it says it never will (a
/// [`StoreError::Config`]: no such database or DB index, credentials refused), so that a store
/// connecting lazily has done its TCP and TLS handshakes before the first request, whose
/// timeout is far shorter. The error is the last one seen.
pub async fn warm_up<F, Fut>(mut ready: F, within: Duration) -> Result<(), StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
{
    let mut last = StoreError::Timeout(within);
    let attempts = async {
        loop {
            match ready().await {
                Ok(()) => return Ok(()),
                // Asking again will not help.
                Err(e) if e.kind() == ErrorKind::Config => return Err(e),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    match tokio::time::timeout(within, attempts).await {
        Ok(result) => result,
        Err(_) => Err(last),
    }
}

/// Opens the store `settings` name, with no fail policy, and asks it as the server does at
/// start ([`warm_up`] for `within`): what `config check` and a reload that changes the store
/// report. `Ok` for the memory store.
pub async fn probe(settings: &Settings, within: Duration) -> Result<(), StoreError> {
    tls_only_for_redis(settings)?;
    let timeout = settings.store_timeout;
    match &settings.store {
        StoreSpec::Memory => Ok(()),
        StoreSpec::Redis(url) => {
            let store = redis(url, &[], timeout, settings).await?;
            warm_up(|| store.ready(), within).await
        }
        StoreSpec::RedisCluster(urls) => {
            let store = redis(&urls[0], urls, timeout, settings).await?;
            warm_up(|| store.ready(), within).await
        }
        StoreSpec::Postgres(url) => {
            let store = postgres(url, &settings.postgres, timeout).await?;
            warm_up(|| store.ready(), within).await
        }
    }
}
