//! Which store the server decides on, from `--store`, wrapped in the fail policy.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;
use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::store::settle::{DynSettle, Settle};

use tollgate::store::postgres::Isolation;
use tollgate::{
    Clock, ErrorKind, MemoryStore, MonotonicClock, Nanos, Policy, PolicyError, PostgresStore,
    RedisStore, StoreError,
};

use crate::cli::{IsolationArg, OnStoreError, PostgresArgs};
use crate::metrics::Metrics;
use crate::settings::Settings;

/// A parsed `--store` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// This process's memory.
    Memory,
    /// One Redis (`redis://` or `rediss://`).
    Redis(String),
    /// The seed nodes of a Redis Cluster.
    RedisCluster(Vec<String>),
    /// PostgreSQL (`postgres://` or `postgresql://`).
    Postgres(String),
}

impl StoreSpec {
    /// Parses `memory`, a Redis URL, or comma-separated Redis URLs (a cluster).
    pub fn parse(s: &str) -> Result<StoreSpec, String> {
        let s = s.trim();
        if s == "memory" {
            return Ok(StoreSpec::Memory);
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreSpec::Postgres(s.to_owned()));
        }
        let urls: Vec<String> = s.split(',').map(|u| u.trim().to_owned()).collect();
        for url in &urls {
            let Some((scheme, rest)) = url.split_once("://") else {
                return Err(format!(
                    "{url:?} is not a store: expected `memory`, `redis://HOST:PORT`, \
                     `rediss://HOST:PORT`, a comma-separated list of redis:// URLs, or \
                     `postgres://USER@HOST:PORT/DB`"
                ));
            };
            if !matches!(scheme, "redis" | "rediss") {
                return Err(format!(
                    "{url:?}: unknown store scheme {scheme:?}; expected redis, rediss or postgres"
                ));
            }
            if rest.is_empty() {
                return Err(format!("{url:?} names no host"));
            }
        }
        Ok(match <[String; 1]>::try_from(urls) {
            Ok([url]) => StoreSpec::Redis(url),
            Err(urls) => StoreSpec::RedisCluster(urls),
        })
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Redis(url) => write!(f, "redis at {}", redact(url)),
            StoreSpec::RedisCluster(urls) => {
                let urls: Vec<String> = urls.iter().map(|u| redact(u)).collect();
                write!(f, "redis cluster at {}", urls.join(","))
            }
            StoreSpec::Postgres(url) => write!(f, "postgres at {}", redact(url)),
        }
    }
}

/// A URL without its password, for logs.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***{}", &url[at..]),
        _ => url.to_owned(),
    }
}

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

/// Whether `policy` is one the store `spec` names can decide (checked without connecting).
pub fn supports(spec: &StoreSpec, policy: &Policy) -> Result<(), PolicyError> {
    match spec {
        StoreSpec::Memory => Ok(()),
        StoreSpec::Redis(_) | StoreSpec::RedisCluster(_) => RedisStore::supports_policy(policy),
        StoreSpec::Postgres(_) => PostgresStore::supports_policy(policy),
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

/// The store's health as the server sees it: failures counted by kind, a line logged when it
/// starts failing and when it answers again (never one per request), and what it answers that
/// this program does not understand logged at error level at most once a second.
pub struct StoreHealth {
    metrics: Arc<Metrics>,
    fail_policy: OnStoreError,
    failing: AtomicBool,
    incompatible: IncompatibleLog,
}

impl StoreHealth {
    /// Reports to `metrics`; the fail policy is named in the logs.
    pub fn new(metrics: Arc<Metrics>, fail_policy: OnStoreError) -> StoreHealth {
        StoreHealth {
            metrics,
            fail_policy,
            failing: AtomicBool::new(false),
            incompatible: IncompatibleLog::default(),
        }
    }

    /// A store call failed with `error`.
    pub fn failed(&self, error: &StoreError) {
        self.metrics.store_error(error.kind());
        if error.kind() == ErrorKind::Incompatible {
            self.incompatible.record(error);
        }
        if !self.failing.swap(true, Ordering::Relaxed) {
            let answer = match self.fail_policy {
                OnStoreError::Allow => "allowing every request (fail open)",
                OnStoreError::Deny => "answering 503 (fail closed)",
                OnStoreError::Local => "deciding in this process's memory",
            };
            tracing::warn!(%error, "the store is failing; {answer} until it answers again");
        }
    }

    /// A store call succeeded.
    pub fn answered(&self) {
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("the store answers again; deciding on it");
        }
    }
}

/// Logs what the store answered that this program does not understand, at error level and at
/// most once a second, with how many such answers there were in between: loud enough to be
/// seen, never a line per request.
#[derive(Default)]
struct IncompatibleLog {
    clock: MonotonicClock,
    /// When the last line was logged, and the answers since.
    last: Mutex<(Option<Nanos>, u64)>,
}

impl IncompatibleLog {
    const EVERY: Nanos = Nanos::new(1_000_000_000);

    fn record(&self, error: &StoreError) {
        let now = self.clock.now();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.1 += 1;
        if last.0.is_none_or(|at| now - at >= Self::EVERY) {
            tracing::error!(
                %error,
                answers = last.1,
                "the store answered what this version of tollgate does not understand; the \
                 fail policy answers meanwhile"
            );
            *last = (Some(now), 0);
        }
    }
}

/// The PostgreSQL store that `url` and `args` describe (it connects lazily).
pub async fn postgres(
    url: &str,
    args: &PostgresArgs,
    timeout: Duration,
) -> Result<PostgresStore, StoreError> {
    PostgresStore::builder(url)
        .schema(args.postgres_schema.as_str())
        .table(args.postgres_table.as_str())
        .unlogged(args.postgres_unlogged)
        .synchronous_commit(args.postgres_synchronous_commit)
        .isolation(match args.postgres_isolation {
            IsolationArg::ReadCommitted => Isolation::ReadCommitted,
            IsolationArg::Serializable => Isolation::Serializable,
        })
        .connections(args.postgres_connections)
        .timeout(timeout)
        .build()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind_of_store() {
        assert_eq!(StoreSpec::parse("memory"), Ok(StoreSpec::Memory));
        assert_eq!(
            StoreSpec::parse("redis://127.0.0.1:6379/2"),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379/2".into()))
        );
        assert_eq!(
            StoreSpec::parse("redis://a:1, redis://b:2"),
            Ok(StoreSpec::RedisCluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
    }

    #[test]
    fn postgres_urls_name_the_postgres_store() {
        assert_eq!(
            StoreSpec::parse("postgres://u@db:5432/limits"),
            Ok(StoreSpec::Postgres("postgres://u@db:5432/limits".into()))
        );
        assert!(matches!(
            StoreSpec::parse("postgresql://db/x"),
            Ok(StoreSpec::Postgres(_))
        ));
    }

    #[test]
    fn refuses_what_it_cannot_open_and_says_why() {
        assert!(StoreSpec::parse("mysql://x").unwrap_err().contains("mysql"));
        assert!(
            StoreSpec::parse("redis://")
                .unwrap_err()
                .contains("no host")
        );
        assert!(StoreSpec::parse("memroy").unwrap_err().contains("memroy"));
    }

    #[test]
    fn passwords_stay_out_of_logs() {
        let spec = StoreSpec::parse("redis://user:secret@host:6379").unwrap();
        assert_eq!(spec.to_string(), "redis at redis://***@host:6379");
    }
}
