//! The one way the server is put together, used by `main`, the tests and the benchmarks:
//! [`App::open`] opens the store and builds the decision core and the front ends' state from
//! [`Settings`]; [`Server::bind`] adds the listeners; [`Server::run`] serves.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tollgate::StoreError;

use crate::console::{self, Console, Listening, Loads};
use crate::envoy::{self, Envoy};
use crate::error::ServeError;
use crate::limiter::{Limiter, StoreHealth};
use crate::metrics::Metrics;
use crate::net::ListenerSettings;
use crate::net::accept::Acceptor;
use crate::net::limits::ConnLimits;
use crate::net::tls::Tls;
use crate::settings::Settings;
use crate::{api, reload, resp, store, web};

/// The server's state, its store open: the decision core, Envoy's front end if it is on, and
/// the operator's console.
pub struct App {
    settings: Settings,
    limiter: Arc<Limiter>,
    envoy: Option<(Arc<Envoy>, crate::descriptors::config::Snapshot)>,
    console: Arc<Console>,
}

impl App {
    /// Loads the Envoy config directory (a bad one stops the server before anything starts, as
    /// a bad TOML file does), opens the store and waits a moment for it to answer, and builds
    /// the state every front end decides through.
    pub async fn open(settings: Settings) -> Result<App, ServeError> {
        let envoy_files = match &settings.grpc {
            Some(grpc) => Some(match &grpc.config_dir {
                Some(dir) => {
                    let files = crate::descriptors::config::read_dir(dir)?;
                    let config = crate::descriptors::config::EnvoyConfig::load(
                        &files,
                        grpc.merge_domain_config,
                    )?;
                    (files, config)
                }
                None => (
                    Vec::new(),
                    crate::descriptors::config::EnvoyConfig::default(),
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
        let traces = match &settings.tracing {
            Some(tracing) => {
                let traces = crate::traces::Traces::start(tracing, &metrics)?;
                tracing::info!(
                    protocol = ?tracing.protocol,
                    endpoint = tracing.endpoint.as_deref().unwrap_or("(from OTEL_EXPORTER_OTLP_*, or the default)"),
                    service_name = %tracing.service_name,
                    sampling_rate = tracing.sampling_rate,
                    "exporting OpenTelemetry spans over OTLP"
                );
                Some(Arc::new(traces))
            }
            None => None,
        };
        // Servers that share a store share this secret, to commit each other's reservations.
        let secret = std::env::var_os("TOLLGATE_RESERVATION_SECRET");
        let limiter = Limiter::builder(store)
            .ready_timeout(settings.store_timeout)
            .secret(secret.as_ref().map(|s| s.as_encoded_bytes()))
            .observed(Arc::clone(&metrics), health)
            .policies(settings.policies.clone(), settings.inline_policies)
            .tokens(settings.auth.clone())
            .traces(traces)
            .top(settings.top)
            .build()?;
        metrics.stamp_config();
        let limiter = Arc::new(limiter);
        let envoy = match (&settings.grpc, envoy_files) {
            (Some(grpc), Some((files, config))) => {
                let metrics = envoy::metrics::EnvoyMetrics::new(&metrics)?;
                let envoy = Envoy::new(Arc::clone(&limiter), config, grpc.clone(), metrics)?;
                if grpc.xds.is_some() {
                    // Nothing is loaded before the management server's first version.
                    envoy.wait_for_config();
                } else {
                    envoy.metrics().loaded(true);
                }
                Some((Arc::new(envoy), files))
            }
            _ => None,
        };
        let loads = Arc::new(Loads::default());
        let source = settings.config.as_ref().map_or_else(
            || "(no config file: the defaults and the command line)".to_owned(),
            |path| path.display().to_string(),
        );
        loads.record(console::now_ms(), source, "start", Ok(Vec::new()));
        if let Some((envoy, _)) = &envoy {
            if let Some(dir) = &envoy.loaded().settings.config_dir {
                loads.record(
                    console::now_ms(),
                    dir.display().to_string(),
                    "start",
                    Ok(Vec::new()),
                );
            }
            envoy.note_loads_in(Arc::clone(&loads));
        }
        let console = Arc::new(Console::new(Arc::clone(&limiter), loads));
        Ok(App {
            settings,
            limiter,
            envoy,
            console,
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

    /// Every HTTP route: the API, the console, and Envoy's `/json` and `/rlconfig` when gRPC is
    /// on; each request authenticated first when `[auth]` has tokens; `POST /v1/check` taken
    /// before the router ([`api::Front`]).
    pub fn router(&self) -> api::Front {
        let router = api::router(Arc::clone(&self.limiter))
            .merge(console::routes(Arc::clone(&self.console)));
        let router = match &self.envoy {
            Some((envoy, _)) => router
                .merge(envoy::json::routes(Arc::clone(envoy)))
                .merge(envoy::health::routes(Arc::clone(envoy)))
                .merge(envoy::json::admin_routes(Arc::clone(envoy))),
            None => router,
        };
        let router = web::auth::authenticate(router, Arc::clone(&self.limiter))
            .merge(console::page_route(Arc::clone(&self.console)));
        api::Front::new(router, Arc::clone(&self.limiter))
    }

    /// The data port's routes beside the admin listener `admin` (`http://ADDRESS`): only what
    /// a client needs to be limited.
    fn data_router(&self, admin: String) -> api::Front {
        let router = api::data_router(Arc::clone(&self.limiter), admin);
        let router = match &self.envoy {
            Some((envoy, _)) => router
                .merge(envoy::json::routes(Arc::clone(envoy)))
                .merge(envoy::health::routes(Arc::clone(envoy))),
            None => router,
        };
        let router = web::auth::authenticate(router, Arc::clone(&self.limiter));
        api::Front::new(router, Arc::clone(&self.limiter))
    }

    /// The operators' routes: buckets, policies, metrics, the console, `/rlconfig`.
    fn admin_router(&self) -> Router {
        let router = api::admin_router(Arc::clone(&self.limiter))
            .merge(console::routes(Arc::clone(&self.console)));
        let router = match &self.envoy {
            Some((envoy, _)) => router.merge(envoy::json::admin_routes(Arc::clone(envoy))),
            None => router,
        };
        web::auth::authenticate(router, Arc::clone(&self.limiter))
            .merge(console::page_route(Arc::clone(&self.console)))
    }
}

/// A listener bound, with its TLS loaded.
struct Bound {
    acceptor: Acceptor,
    addr: SocketAddr,
    limits: ConnLimits,
    tls: Option<Arc<Tls>>,
}

impl Bound {
    fn listener(self) -> web::Listener {
        web::Listener {
            acceptor: self.acceptor,
            limits: self.limits,
            tls: self.tls,
        }
    }
}

/// A server with its store open and its listeners bound, not serving yet.
pub struct Server {
    app: App,
    http: Bound,
    resp: Option<Bound>,
    grpc: Option<Bound>,
    /// gRPC on a Unix socket, and the socket's path.
    grpc_unix: Option<(web::Listener, PathBuf)>,
    admin: Option<Bound>,
    /// envoyproxy/ratelimit's Prometheus exporter (`[grpc.prometheus]`).
    prometheus: Option<Bound>,
    xds: Option<DropGuard>,
}

/// Starts the xDS client when `envoy` is configured over xDS and, unless
/// `force_start_without_initial_config`, waits for the management server's first response
/// (put in force or refused) before anything listens, as envoyproxy/ratelimit does.
async fn start_xds(envoy: &Arc<Envoy>) -> Option<DropGuard> {
    let loaded = envoy.loaded();
    let xds = loaded.settings.xds.clone()?;
    let stop = CancellationToken::new();
    let (first, handled) = tokio::sync::oneshot::channel();
    let wait = !xds.force_start_without_initial_config;
    let url = xds.url();
    tokio::spawn(envoy::xds::run(
        Arc::clone(envoy),
        xds,
        loaded.settings.merge_domain_config,
        first,
        stop.clone(),
    ));
    if wait {
        tracing::info!(
            %url,
            "waiting for the first config from the xDS management server before listening \
             (force_start_without_initial_config = false)"
        );
        // The client tells once it handled one, and never ends before `stop`.
        let _ = handled.await;
    }
    Some(stop.drop_guard())
}

impl Server {
    /// Opens the [`App`] `settings` describe and binds its listeners. TLS files that cannot
    /// be used stop it here, as a bad config does.
    pub async fn bind(settings: Settings) -> Result<Server, ServeError> {
        let app = App::open(settings).await?;
        // Stops the xDS client when the server is dropped unstarted (a listener that cannot
        // bind) or, once it runs, at shutdown.
        let xds = match &app.envoy {
            Some((envoy, _)) => start_xds(envoy).await,
            None => None,
        };
        let settings = &app.settings;
        let metrics = app.limiter.metrics();
        let http = bind("http", settings.listen, &settings.http, metrics).await?;
        let resp = match settings.resp_listen {
            Some(addr) => Some(bind("resp", addr, &settings.resp.listener, metrics).await?),
            None => None,
        };
        let (grpc, grpc_unix) = match (&settings.grpc, &app.envoy) {
            (Some(grpc), Some(_)) => {
                let tcp = match grpc.listen {
                    Some(addr) => Some(bind("grpc", addr, &settings.grpc_listener, metrics).await?),
                    None => None,
                };
                let unix = match &grpc.unix_socket {
                    Some(path) => Some((
                        bind_unix(path, &settings.grpc_listener, metrics)?,
                        path.clone(),
                    )),
                    None => None,
                };
                (tcp, unix)
            }
            _ => (None, None),
        };
        let admin = match settings.admin_listen {
            Some(addr) => Some(bind("admin", addr, &settings.admin, metrics).await?),
            None => None,
        };
        // A scrape endpoint, with the admin listener's connection limits (and no TLS, as
        // upstream's exporter serves none).
        let prometheus = match (&settings.grpc, &app.envoy) {
            (Some(grpc), Some(_)) => match &grpc.prometheus {
                Some(exporter) => {
                    let listener = ListenerSettings::plain(settings.admin.limits);
                    Some(bind("prometheus", exporter.listen, &listener, metrics).await?)
                }
                None => None,
            },
            _ => None,
        };
        app.console.listening(listening(
            &http,
            [
                ("resp", &resp),
                ("admin", &admin),
                ("prometheus", &prometheus),
            ],
            grpc.as_ref().map(|bound| bound.addr),
            grpc_unix.as_ref().map(|(_, path)| path.as_path()),
        ));
        Ok(Server {
            app,
            http,
            resp,
            grpc,
            grpc_unix,
            admin,
            prometheus,
            xds,
        })
    }

    /// Where RESP listens, if it does.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.resp.as_ref().map(|bound| bound.addr)
    }

    /// Where Envoy's gRPC service listens, if it does.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|bound| bound.addr)
    }

    /// Where HTTP listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.http.addr
    }

    /// The Unix socket Envoy's gRPC service listens on, if it does.
    pub fn grpc_socket(&self) -> Option<&Path> {
        self.grpc_unix.as_ref().map(|(_, path)| path.as_path())
    }

    /// Where the admin endpoints listen, if on their own port.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|bound| bound.addr)
    }

    /// Where envoyproxy/ratelimit's Prometheus exporter listens, if it does.
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.prometheus.as_ref().map(|bound| bound.addr)
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
        // With an admin listener, the operators' endpoints are there and gone from the data
        // port; without, the data port serves both.
        let router = match &self.admin {
            Some(admin) => {
                let scheme = if admin.tls.is_some() { "https" } else { "http" };
                self.app.data_router(format!("{scheme}://{}", admin.addr))
            }
            None => self.app.router(),
        };
        let admin_router = self.app.admin_router();
        // The other listeners finish their requests in flight before `run` returns, as HTTP's.
        let listeners = TaskTracker::new();
        for bound in [
            Some(&self.http),
            self.resp.as_ref(),
            self.grpc.as_ref(),
            self.admin.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(tls) = &bound.tls {
                tokio::spawn(Arc::clone(tls).watch(shutdown.clone()));
            }
        }
        if let Some(admin) = self.admin {
            let shutdown = shutdown.clone();
            listeners.spawn(async move {
                if let Err(e) = web::serve(admin.listener(), admin_router, shutdown).await {
                    tracing::error!(error = %e, "the admin listener failed");
                }
            });
        }
        let App {
            settings,
            limiter,
            envoy,
            console,
        } = self.app;
        if let Some(resp) = self.resp {
            listeners.spawn(resp::serve(
                resp.acceptor,
                Arc::clone(&limiter),
                settings.resp.clone(),
                resp.tls,
                shutdown.clone(),
            ));
        }
        let envoy = match envoy {
            Some((envoy, files)) if self.grpc.is_some() || self.grpc_unix.is_some() => {
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
                // Upstream's health check fails from SIGTERM on, while requests still finish.
                let stopping = Arc::clone(&envoy);
                let stop = shutdown.clone();
                tokio::spawn(async move {
                    stop.cancelled().await;
                    stopping.stopping();
                });
                let grpc = self.grpc.map(Bound::listener);
                let unix = self.grpc_unix.map(|(listener, _)| listener);
                if let (Some(bound), Some(exporter)) = (self.prometheus, &loaded.prometheus) {
                    let router = envoy::prometheus::router(Arc::clone(&envoy), exporter);
                    let shutdown = shutdown.clone();
                    listeners.spawn(async move {
                        if let Err(e) = web::serve(bound.listener(), router, shutdown).await {
                            tracing::error!(error = %e, "the Prometheus exporter's listener failed");
                        }
                    });
                }
                for listener in [grpc, unix].into_iter().flatten() {
                    let service =
                        envoy::service::serve(listener, Arc::clone(&envoy), shutdown.clone());
                    listeners.spawn(async move {
                        if let Err(e) = service.await {
                            tracing::error!(error = %e, "the gRPC listener failed");
                        }
                    });
                }
                Some(envoy)
            }
            _ => None,
        };
        if let Some(top) = limiter.top() {
            tokio::spawn(Arc::clone(top).run(shutdown.clone()));
        }
        if let Some(path) = settings.config.clone() {
            tokio::spawn(reload::watch(
                path,
                settings,
                Arc::clone(&limiter),
                envoy,
                Arc::clone(console.loads()),
                shutdown.clone(),
            ));
        }
        if let Some(xds) = self.xds {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                shutdown.cancelled().await;
                drop(xds);
            });
        }
        let served = web::serve(self.http.listener(), router, shutdown).await;
        listeners.close();
        listeners.wait().await;
        limiter.close().await;
        if let Some(traces) = limiter.traces() {
            traces.shutdown().await;
        }
        served.map_err(ServeError::Http)
    }
}

/// The `listener` label of gRPC's Unix socket, counted apart from its TCP listener.
const GRPC_UNIX: &str = "grpc_unix";

/// The listeners as the console lists them, by the names their connections are counted under.
fn listening<const N: usize>(
    http: &Bound,
    others: [(&'static str, &Option<Bound>); N],
    grpc: Option<SocketAddr>,
    grpc_unix: Option<&Path>,
) -> Vec<Listening> {
    let mut listeners = vec![Listening {
        name: "http",
        address: http.addr.to_string(),
    }];
    if let Some(addr) = grpc {
        listeners.push(Listening {
            name: "grpc",
            address: addr.to_string(),
        });
    }
    if let Some(path) = grpc_unix {
        listeners.push(Listening {
            name: GRPC_UNIX,
            address: format!("unix:{}", path.display()),
        });
    }
    listeners.extend(others.into_iter().filter_map(|(name, bound)| {
        bound.as_ref().map(|bound| Listening {
            name,
            address: bound.addr.to_string(),
        })
    }));
    listeners
}

/// Connections the kernel completes and queues before they are accepted: a burst, or a moment
/// the server's workers are busy, is queued rather than dropped (the client would wait a
/// second to try again). The kernel caps it at `net.core.somaxconn`.
const BACKLOG: u32 = 4096;

fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As std and tokio do: a restarted server can bind while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Binds the Unix socket at `path` for gRPC: a socket left there by a server before (a file
/// of the socket type) is removed first; any other file there is refused, never removed.
fn bind_unix(
    path: &Path,
    settings: &ListenerSettings,
    metrics: &Metrics,
) -> Result<web::Listener, ServeError> {
    use std::os::unix::fs::FileTypeExt;
    let refuse = |source: std::io::Error| ServeError::BindUnix {
        path: path.to_owned(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(refuse(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a file that is not a socket is there",
            )));
        }
        std::fs::remove_file(path).map_err(refuse)?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(refuse)?;
    // A label of its own: its `max_connections` is a limit of its own, beside the TCP one's.
    let max = i64::try_from(settings.limits.max_connections).unwrap_or(i64::MAX);
    metrics
        .connections
        .max
        .with_label_values(&[GRPC_UNIX])
        .set(max);
    Ok(web::Listener {
        acceptor: Acceptor::unix(listener, GRPC_UNIX, &settings.limits, metrics),
        limits: settings.limits,
        tls: None,
    })
}

/// What HTTP listeners offer in ALPN: gRPC clients insist on `h2`.
const HTTP_ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

async fn bind(
    name: &'static str,
    addr: SocketAddr,
    settings: &ListenerSettings,
    metrics: &Metrics,
) -> Result<Bound, ServeError> {
    let tls = match &settings.tls {
        Some(files) => {
            let alpn: &[&[u8]] = if name == "resp" { &[] } else { &HTTP_ALPN };
            let tls = Tls::load(files.clone(), alpn).map_err(|source| ServeError::Tls {
                listener: name,
                source,
            })?;
            Some(Arc::new(tls))
        }
        None => None,
    };
    let listener = listen(addr).map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener.local_addr().map_err(ServeError::Http)?;
    let max = i64::try_from(settings.limits.max_connections).unwrap_or(i64::MAX);
    metrics.connections.max.with_label_values(&[name]).set(max);
    Ok(Bound {
        acceptor: Acceptor::new(listener, name, &settings.limits, metrics),
        addr: bound,
        limits: settings.limits,
        tls,
    })
}
