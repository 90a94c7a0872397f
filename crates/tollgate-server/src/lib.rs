//! The tollgate server: a standalone rate-limit service over tollgate's stores.
//!
//! [`serve`] runs the whole server until a shutdown token is cancelled; `main.rs` only parses
//! the command line and turns signals into that cancellation. Embedders can mount
//! [`http::router`] in their own axum application instead.

#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

mod bench;
pub mod cli;
pub mod config;
pub mod envoy;
pub mod http;
pub mod metrics;
mod reload;
pub mod resp;
pub mod settings;
pub mod store;

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use cli::{MigrateArgs, ServeArgs};
use config::{Config, ConfigError};
use settings::Settings;
use tollgate::StoreError;
use tollgate::store::settle::DynSettle;

/// How long the server waits at start for its store to answer.
const WARM_UP: Duration = Duration::from_secs(3);

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The config file was refused.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The store could not be opened.
    #[error("cannot open the store ({store}): {source}")]
    Store {
        /// The store asked for.
        store: String,
        /// Why.
        source: StoreError,
    },
    /// `migrate` was given a store that has no schema.
    #[error(
        "`migrate` creates the PostgreSQL schema: --store must be a postgres:// URL, not {0:?}"
    )]
    NothingToMigrate(String),
    /// The system's random source failed (reservations are signed with a random secret).
    #[error("the system's random source failed")]
    Random,
    /// The metrics could not be registered.
    #[error("the metrics could not be registered: {0}")]
    Metrics(#[from] prometheus::Error),
    /// Serving failed.
    #[error("the HTTP server failed: {0}")]
    Http(#[source] io::Error),
    /// The Envoy config directory was refused.
    #[error("{0}")]
    Envoy(#[from] envoy::config::LoadError),
    /// A benchmark failed.
    #[error("the benchmark failed: {0}")]
    Bench(#[from] tollgate_bench::BenchError),
}

pub use bench::bench;

/// The settings `args` ask for: the config file they name (or none: the embedded default),
/// under the options given on the command line; its policies checked against the store.
pub fn prepare(args: &ServeArgs) -> Result<Settings, ServeError> {
    let config = args.config.as_deref().map(Config::load).transpose()?;
    let settings = Settings::resolve(args, config.as_ref());
    check_policies(
        settings.config.as_deref(),
        &settings.store,
        &settings.policies,
    )?;
    Ok(settings)
}

/// Refuses policies the store cannot decide (numbers beyond its range), naming where the file
/// defines each.
pub(crate) fn check_policies(
    file: Option<&Path>,
    store: &store::StoreSpec,
    policies: &config::Policies,
) -> Result<(), ConfigError> {
    for p in policies.iter() {
        if let Err(e) = store::supports(store, &p.policy) {
            return Err(ConfigError {
                file: file.map(Path::to_owned).unwrap_or_default(),
                at: Some(p.defined_at),
                field: format!("policies.{}.{}", p.name, e.field()),
                message: format!("the {store} store cannot decide it: {e}"),
            });
        }
    }
    Ok(())
}

/// `tollgate config check PATH`: the policies a TOML file defines, one line each (and the
/// Envoy directory it names, loaded), or a directory of envoyproxy/ratelimit YAML loaded (its
/// domains merged with `merge_domains`); or why it is refused.
pub fn check_config(path: &Path, merge_domains: bool) -> Result<String, ServeError> {
    if path.is_dir() {
        let config = envoy::config::EnvoyConfig::load_dir(path, merge_domains)?;
        return Ok(format!(
            "{}: ok, {}, {}\n{}",
            path.display(),
            count(config.files(), "file"),
            count(config.domains(), "domain"),
            config.dump()
        ));
    }
    let config = Config::load(path)?;
    if let Some(store) = &config.store {
        check_policies(Some(path), store, &config.policies)?;
    }
    let envoy = match &config.grpc.config_dir {
        Some(dir) => {
            let merge = config.grpc.merge_domain_config.unwrap_or(false);
            let envoy = envoy::config::EnvoyConfig::load_dir(dir, merge)?;
            format!(
                "  grpc.config_dir {}: {}, {}\n",
                dir.display(),
                count(envoy.files(), "file"),
                count(envoy.domains(), "domain")
            )
        }
        None => String::new(),
    };
    let mut out = format!(
        "{}: ok, {} {}\n",
        path.display(),
        config.policies.len(),
        if config.policies.len() == 1 {
            "policy"
        } else {
            "policies"
        }
    );
    for p in config.policies.iter() {
        out.push_str(&format!(
            "  {}: {}, capacity {}, {}{}\n",
            p.name,
            http::policy_algorithm(p.policy.algorithm()),
            p.policy.capacity(),
            match p.policy.algorithm() {
                tollgate::Algorithm::TokenBucket => format!(
                    "refill {} every {}",
                    p.policy.refill(),
                    humantime::format_duration(Duration::from(p.policy.period()))
                ),
                _ => format!(
                    "window {}",
                    humantime::format_duration(Duration::from(p.policy.period()))
                ),
            },
            if p.shadow { ", shadow" } else { "" }
        ));
    }
    out.push_str(&envoy);
    Ok(out)
}

/// `n` and `what`, plural unless `n` is 1.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Opens the store, binds the listener, announces both on stdout, and serves until `shutdown`
/// is cancelled and the requests in flight are answered. The config file, if any, is watched
/// and reloaded (and on SIGHUP); `args` are the options the reloads resolve under.
pub async fn serve(
    args: ServeArgs,
    settings: Settings,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let server = Server::bind(args, settings).await?;
    // stdout, one line, so that scripts (and tests) can read the port chosen for `:0`.
    let s = &server.settings;
    let mut resp = server
        .resp_addr()
        .map(|addr| format!(" and redis://{addr}"))
        .unwrap_or_default();
    if let Some(addr) = server.grpc_addr() {
        resp.push_str(&format!(" and grpc://{addr}"));
    }
    println!(
        "tollgate listening on http://{}{resp} (store: {}, on store error: {}, timeout {:?}, \
         config: {}, {} named {})",
        server.local_addr,
        s.store,
        s.on_store_error,
        s.store_timeout,
        s.config
            .as_ref()
            .map_or_else(|| "none".to_owned(), |p| p.display().to_string()),
        s.policies.len(),
        if s.policies.len() == 1 {
            "policy"
        } else {
            "policies"
        },
    );
    server.run(shutdown).await
}

/// A server with its store open and its listener bound, not serving yet.
pub struct Server {
    args: ServeArgs,
    settings: Settings,
    state: Arc<http::AppState>,
    listener: http::conn::Counted,
    local_addr: SocketAddr,
    resp: Option<(TcpListener, SocketAddr)>,
    grpc: Option<Grpc>,
}

/// The Envoy front end, bound.
struct Grpc {
    listener: http::conn::Counted,
    addr: SocketAddr,
    envoy: Arc<envoy::Envoy>,
    /// The files loaded at start, which the directory's watcher compares with.
    files: envoy::config::Snapshot,
}

impl Server {
    /// Opens the store `settings` name and binds the HTTP listener.
    pub async fn bind(args: ServeArgs, settings: Settings) -> Result<Server, ServeError> {
        // A bad Envoy config stops the server before anything starts, as a bad TOML file does.
        let envoy_files = match &settings.grpc {
            Some(grpc) => Some(match &grpc.config_dir {
                Some(dir) => {
                    let files = envoy::config::read_dir(dir)?;
                    let config =
                        envoy::config::EnvoyConfig::load(&files, grpc.merge_domain_config)?;
                    (files, config)
                }
                None => (Vec::new(), envoy::config::EnvoyConfig::default()),
            }),
            None => None,
        };
        let metrics = Arc::new(metrics::Metrics::new()?);
        let health = Arc::new(store::StoreHealth::new(
            Arc::clone(&metrics),
            settings.on_store_error,
        ));
        let store = store::open(&settings, Arc::clone(&health))
            .await
            .map_err(|source| ServeError::Store {
                store: settings.store.to_string(),
                source,
            })?;
        if let Err(e) = warm_up(store.as_ref(), WARM_UP).await {
            tracing::warn!(
                error = %e,
                "the store does not answer yet; serving anyway, with the fail policy `{}` \
                 until it does",
                settings.on_store_error
            );
        }
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: settings.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(ServeError::Http)?;
        let resp = match settings.resp_listen {
            Some(addr) => {
                let resp = TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::Bind { addr, source })?;
                let bound = resp.local_addr().map_err(ServeError::Http)?;
                Some((resp, bound))
            }
            None => None,
        };
        // Servers that share a store share this secret, to commit each other's reservations.
        let secret = std::env::var_os("TOLLGATE_RESERVATION_SECRET");
        let secret = secret.as_ref().map(|s| s.as_encoded_bytes());
        let state = http::AppState::new(store, settings.store_timeout, secret)
            .map_err(|_| ServeError::Random)?
            .observed(Arc::clone(&metrics), health)
            .policies(settings.policies.clone(), settings.inline_policies);
        metrics.stamp_config();
        let state = Arc::new(state);
        let grpc = match (&settings.grpc, envoy_files) {
            (Some(grpc), Some((files, config))) => {
                let listener =
                    TcpListener::bind(grpc.listen)
                        .await
                        .map_err(|source| ServeError::Bind {
                            addr: grpc.listen,
                            source,
                        })?;
                let addr = listener.local_addr().map_err(ServeError::Http)?;
                let envoy = envoy::Envoy::new(Arc::clone(&state), config, grpc.clone())?;
                envoy.metrics().loaded(true);
                Some(Grpc {
                    listener: http::conn::Counted::new(
                        listener,
                        http::conn::DEFAULT_MAX_CONNECTIONS,
                        Arc::clone(&metrics),
                    ),
                    addr,
                    envoy: Arc::new(envoy),
                    files,
                })
            }
            _ => None,
        };
        let listener =
            http::conn::Counted::new(listener, http::conn::DEFAULT_MAX_CONNECTIONS, metrics);
        Ok(Server {
            args,
            settings,
            state,
            listener,
            local_addr,
            resp,
            grpc,
        })
    }

    /// Where RESP listens, if it does.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.resp.as_ref().map(|(_, addr)| *addr)
    }

    /// Where Envoy's gRPC service listens, if it does.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|g| g.addr)
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` is cancelled and the requests in flight are answered, reloading
    /// the config file meanwhile.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ServeError> {
        if let Some((listener, _)) = self.resp {
            tokio::spawn(resp::serve(
                listener,
                Arc::clone(&self.state),
                self.settings.resp.clone(),
                shutdown.clone(),
            ));
        }
        let mut router = http::router(Arc::clone(&self.state));
        let mut envoy = None;
        if let Some(grpc) = self.grpc {
            router = router.merge(envoy::json::routes(Arc::clone(&grpc.envoy)));
            let settings = grpc.envoy.loaded().settings.clone();
            if let Some(dir) = settings.config_dir.clone() {
                tokio::spawn(envoy::reload::watch(
                    Arc::clone(&grpc.envoy),
                    dir,
                    settings.merge_domain_config,
                    grpc.files,
                    shutdown.clone(),
                ));
            }
            let service =
                envoy::service::serve(grpc.listener, Arc::clone(&grpc.envoy), shutdown.clone());
            tokio::spawn(async move {
                if let Err(e) = service.await {
                    tracing::error!(error = %e, "the gRPC listener failed");
                }
            });
            envoy = Some(grpc.envoy);
        }
        if let Some(path) = self.settings.config.clone() {
            tokio::spawn(reload::watch(
                path,
                self.args,
                self.settings,
                Arc::clone(&self.state),
                envoy,
                shutdown.clone(),
            ));
        }
        http::serve(self.listener, router, shutdown)
            .await
            .map_err(ServeError::Http)
    }
}

/// Creates the PostgreSQL schema, table and function that `args` name.
pub async fn migrate(args: MigrateArgs) -> Result<(), ServeError> {
    let url = match store::StoreSpec::parse(&args.store) {
        Ok(store::StoreSpec::Postgres(url)) => url,
        _ => return Err(ServeError::NothingToMigrate(args.store)),
    };
    let failed = |source| ServeError::Store {
        store: store::StoreSpec::Postgres(url.clone()).to_string(),
        source,
    };
    let timeout = Duration::from_secs(30);
    let store = store::postgres(&url, &args.postgres, timeout)
        .await
        .map_err(failed)?;
    store.migrate().await.map_err(failed)?;
    println!(
        "tollgate: {}.{} and {}.{}_decide are ready",
        args.postgres.postgres_schema,
        args.postgres.postgres_table,
        args.postgres.postgres_schema,
        args.postgres.postgres_table
    );
    Ok(())
}

/// Asks the store until it answers (or `within` passes), so that a store connecting lazily has
/// done its TCP and TLS handshakes before the first request, whose timeout is far shorter.
async fn warm_up(store: &dyn DynSettle, within: Duration) -> Result<(), StoreError> {
    let mut last = StoreError::Timeout(within);
    let attempts = async {
        loop {
            match store.ready_dyn().await {
                Ok(()) => return Ok(()),
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
