//! The one way the server is put together, used by `main`, the tests and the benchmarks:
//! [`App::open`] opens the store and builds the decision core and the front ends' state from
//! [`Settings`]; [`Server::bind`] adds the listeners; [`Server::run`] serves.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tollgate::StoreError;

use crate::envoy::{self, Envoy};
use crate::error::ServeError;
use crate::limiter::{Limiter, StoreHealth};
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::web::conn::{Counted, DEFAULT_MAX_CONNECTIONS};
use crate::{http, reload, resp, store, web};

/// The server's state, its store open: the decision core, and Envoy's front end if it is on.
pub struct App {
    settings: Settings,
    limiter: Arc<Limiter>,
    envoy: Option<(Arc<Envoy>, crate::limiter::descriptors::config::Snapshot)>,
}

impl App {
    /// Loads the Envoy config directory (a bad one stops the server before anything starts, as
    /// a bad TOML file does), opens the store and waits a moment for it to answer, and builds
    /// the state every front end decides through.
    pub async fn open(settings: Settings) -> Result<App, ServeError> {
        let envoy_files = match &settings.grpc {
            Some(grpc) => Some(match &grpc.config_dir {
                Some(dir) => {
                    let files = crate::limiter::descriptors::config::read_dir(dir)?;
                    let config = crate::limiter::descriptors::config::EnvoyConfig::load(
                        &files,
                        grpc.merge_domain_config,
                    )?;
                    (files, config)
                }
                None => (
                    Vec::new(),
                    crate::limiter::descriptors::config::EnvoyConfig::default(),
                ),
            }),
            None => None,
        };
        let metrics = Arc::new(Metrics::new()?);
        let health = Arc::new(StoreHealth::new(
            Arc::clone(&metrics),
            settings.on_store_error,
        ));
        let store = store::open(&settings, Arc::clone(&health))
            .await
            .map_err(|source| {
                let store = settings.store.to_string();
                match source {
                    StoreError::Config(_) => ServeError::Unusable { store, source },
                    source => ServeError::Store { store, source },
                }
            })?;
        match store::warm_up(|| store.ready_dyn(), store::WARM_UP).await {
            Ok(()) => {}
            // A typo never turns limiting off: a store that can never work (no such database
            // or DB index, credentials refused) stops the server here, rather than leave every
            // decision to the fail policy.
            Err(source) if source.kind() == tollgate::ErrorKind::Config => {
                return Err(ServeError::Unusable {
                    store: settings.store.to_string(),
                    source,
                });
            }
            Err(e) => tracing::warn!(
                error = %e,
                "the store does not answer yet; serving anyway, with the fail policy `{}` \
                 until it does",
                settings.on_store_error
            ),
        }
        // Servers that share a store share this secret, to commit each other's reservations.
        let secret = std::env::var_os("TOLLGATE_RESERVATION_SECRET");
        let limiter = Limiter::builder(store)
            .ready_timeout(settings.store_timeout)
            .secret(secret.as_ref().map(|s| s.as_encoded_bytes()))
            .observed(Arc::clone(&metrics), health)
            .policies(settings.policies.clone(), settings.inline_policies)
            .tokens(settings.auth.clone())
            .build()?;
        metrics.stamp_config();
        let limiter = Arc::new(limiter);
        let envoy = match (&settings.grpc, envoy_files) {
            (Some(grpc), Some((files, config))) => {
                let metrics = envoy::metrics::EnvoyMetrics::new(&metrics)?;
                let envoy = Envoy::new(Arc::clone(&limiter), config, grpc.clone(), metrics)?;
                envoy.metrics().loaded(true);
                Some((Arc::new(envoy), files))
            }
            _ => None,
        };
        Ok(App {
            settings,
            limiter,
            envoy,
        })
    }

    /// The decision core.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Every HTTP route: the API, and Envoy's `/json` and `/rlconfig` when gRPC is on; each
    /// request authenticated first when `[auth]` has tokens.
    pub fn router(&self) -> Router {
        let router = http::router(Arc::clone(&self.limiter));
        let router = match &self.envoy {
            Some((envoy, _)) => router.merge(envoy::json::routes(Arc::clone(envoy))),
            None => router,
        };
        web::auth::authenticate(router, Arc::clone(&self.limiter))
    }
}

/// A server with its store open and its listeners bound, not serving yet.
pub struct Server {
    app: App,
    listener: Counted,
    local_addr: SocketAddr,
    resp: Option<(TcpListener, SocketAddr)>,
    grpc: Option<(Counted, SocketAddr)>,
}

impl Server {
    /// Opens the [`App`] `settings` describe and binds its listeners.
    pub async fn bind(settings: Settings) -> Result<Server, ServeError> {
        let app = App::open(settings).await?;
        let settings = &app.settings;
        let (listener, local_addr) = bind(settings.listen).await?;
        let resp = match settings.resp_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let metrics = app.limiter.metrics();
        let grpc = match (&settings.grpc, &app.envoy) {
            (Some(grpc), Some(_)) => {
                let (listener, addr) = bind(grpc.listen).await?;
                let counted = Counted::new(listener, DEFAULT_MAX_CONNECTIONS, Arc::clone(metrics));
                Some((counted, addr))
            }
            _ => None,
        };
        let listener = Counted::new(listener, DEFAULT_MAX_CONNECTIONS, Arc::clone(metrics));
        Ok(Server {
            app,
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
        self.grpc.as_ref().map(|(_, addr)| *addr)
    }

    /// Where HTTP listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.app.settings
    }

    /// The Envoy front end, if gRPC is on.
    pub fn envoy(&self) -> Option<&Arc<Envoy>> {
        self.app.envoy.as_ref().map(|(envoy, _)| envoy)
    }

    /// Serves until `shutdown` is cancelled and the requests in flight are answered, reloading
    /// the config file (and the Envoy directory) meanwhile.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ServeError> {
        let router = self.app.router();
        let App {
            settings,
            limiter,
            envoy,
        } = self.app;
        if let Some((listener, _)) = self.resp {
            tokio::spawn(resp::serve(
                listener,
                Arc::clone(&limiter),
                settings.resp.clone(),
                shutdown.clone(),
            ));
        }
        let envoy = match (envoy, self.grpc) {
            (Some((envoy, files)), Some((listener, _))) => {
                let loaded = envoy.loaded().settings.clone();
                if let Some(dir) = loaded.config_dir.clone() {
                    tokio::spawn(envoy::reload::watch(
                        Arc::clone(&envoy),
                        dir,
                        loaded.merge_domain_config,
                        files,
                        shutdown.clone(),
                    ));
                }
                let service = envoy::service::serve(listener, Arc::clone(&envoy), shutdown.clone());
                tokio::spawn(async move {
                    if let Err(e) = service.await {
                        tracing::error!(error = %e, "the gRPC listener failed");
                    }
                });
                Some(envoy)
            }
            _ => None,
        };
        if let Some(path) = settings.config.clone() {
            tokio::spawn(reload::watch(
                path,
                settings,
                Arc::clone(&limiter),
                envoy,
                shutdown.clone(),
            ));
        }
        web::serve(self.listener, router, shutdown)
            .await
            .map_err(ServeError::Http)
    }
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener.local_addr().map_err(ServeError::Http)?;
    Ok((listener, bound))
}
