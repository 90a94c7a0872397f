//! The servers, in-process on `127.0.0.1` ephemeral ports.
//!
//! The handler's variants are served the same way (`axum::serve` with `ConnectInfo`,
//! `TCP_NODELAY`), so that the only difference between them is the layer in front of the
//! handler, and so is the JSON endpoint ([`json`](super::json)). `tollgate serve`'s are served
//! by its own listener (`Server::bind`), in plaintext and over TLS, so that between those two
//! the only difference is TLS. Between the two kinds, the JSON endpoint is also served by the
//! server's listener machinery (`tollgate_server::web::serve`), so that what that machinery
//! costs is told apart from what the server's routes and limiter cost.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use axum::serve::ListenerExt;
use hyper::header::HeaderName;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tollgate::middleware::{ClientIp, Header, KeyExtractor, TollgateLayer};
use tollgate::{MemoryStore, Policy};
use tollgate_server::metrics::Metrics;
use tollgate_server::net::limits;
use tollgate_server::web::{self, Listener};

use super::json;
use super::variant::Variant;
use crate::tls::{Certificates, TlsClient};
use crate::{BenchError, servers};

/// The header [`Variant::TollgateKeys`] is keyed by.
pub(crate) static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The policy's name, as it appears in the `RateLimit` headers (and as the server variant's
/// configured policy is named).
pub const POLICY_NAME: &str = "allow_all";

/// A bucket no load generator can empty: 10^9 tokens refilled at 10^9 per second. Every request
/// still takes the whole decision path (a compare-and-swap on its key's cell, the headers), and
/// none is rejected, so the 200s of the variants are the same work but for the middleware.
pub fn allow_all() -> Result<Policy, BenchError> {
    Ok(Policy::token_bucket(
        1_000_000_000,
        1_000_000_000,
        Duration::from_secs(1),
    )?)
}

/// The handler every variant serves: a short static body, so the middleware is not hidden
/// behind the handler's own work.
async fn hello() -> &'static str {
    "hello\n"
}

/// [`hello`] with the headers the middleware adds to its answer, as long as they are there
/// (the remaining count of a fresh allow-all bucket, reset in 1 s).
async fn hello_with_headers() -> ([(&'static str, &'static str); 2], &'static str) {
    (
        [
            ("ratelimit-policy", "\"allow_all\";q=1000000000;w=1"),
            ("ratelimit", "\"allow_all\";r=999999999;t=1"),
        ],
        "hello\n",
    )
}

/// The router of one of the handler's variants; `None` for the server's.
fn router(variant: Variant) -> Result<Option<Router>, BenchError> {
    let app = Router::new().route("/hello", get(hello));
    Ok(Some(match variant {
        Variant::Bare => app,
        Variant::BareHeaders => Router::new().route("/hello", get(hello_with_headers)),
        Variant::Tollgate => app.layer(layer(ClientIp::new())?),
        Variant::TollgateKeys => app.layer(layer(Header::new(X_API_KEY.clone()))?),
        Variant::BareJson => json::router(),
        Variant::BareJsonListener
        | Variant::Server
        | Variant::ServerTls
        | Variant::ServerTopOff => return Ok(None),
    }))
}

/// The layer as a user would build it: the defaults (RateLimit headers on, fail open, 50 ms
/// timeout) but for the key and the policy.
fn layer(key: impl KeyExtractor) -> Result<TollgateLayer, BenchError> {
    Ok(TollgateLayer::builder(MemoryStore::new())
        .policy(POLICY_NAME, allow_all()?)
        .key(key)
        .build()?)
}

/// A running server.
pub(crate) struct Server {
    pub(crate) variant: Variant,
    pub(crate) addr: SocketAddr,
    /// How the load generator reaches it over TLS; `None` in plaintext.
    pub(crate) tls: Option<TlsClient>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), BenchError>>,
}

impl Server {
    /// Serves `variant` on an ephemeral port of `127.0.0.1`, on the caller's runtime;
    /// [`Variant::ServerTls`] with `certificates` (which must outlive it).
    pub(crate) async fn start(
        variant: Variant,
        certificates: Option<&Certificates>,
    ) -> Result<Server, BenchError> {
        let shutdown = CancellationToken::new();
        if variant == Variant::BareJsonListener {
            return Server::on_servers_listener(variant, json::router(), shutdown).await;
        }
        let Some(app) = router(variant)? else {
            let (certificates, tls) = match variant {
                Variant::ServerTls => {
                    let certificates = certificates.ok_or_else(|| {
                        BenchError::Tls("server_tls needs its certificates".into())
                    })?;
                    (Some(certificates), Some(certificates.client(b"http/1.1")?))
                }
                _ => (None, None),
            };
            let top = variant != Variant::ServerTopOff;
            let server =
                servers::http(POLICY_NAME, &allow_all()?, certificates, top, &shutdown).await?;
            return Ok(Server {
                variant,
                addr: server.addr,
                tls,
                shutdown,
                task: tokio::spawn(server.finished()),
            });
        };
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // Small responses on keep-alive connections: send each at once.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let serve = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .into_future();
        Ok(Server::plaintext(variant, addr, shutdown, serve))
    }

    /// `variant` served in plaintext on `addr` by `serve`, which ends once `shutdown` is
    /// cancelled.
    fn plaintext(
        variant: Variant,
        addr: SocketAddr,
        shutdown: CancellationToken,
        serve: impl Future<Output = std::io::Result<()>> + Send + 'static,
    ) -> Server {
        Server {
            variant,
            addr,
            tls: None,
            shutdown,
            task: tokio::spawn(async move { Ok(serve.await?) }),
        }
    }

    /// `app` served by `tollgate serve`'s listener machinery as its HTTP listener is, with
    /// that listener's default limits (its caps, timeouts and flood guard; its `TCP_NODELAY`),
    /// the problem layer included.
    async fn on_servers_listener(
        variant: Variant,
        app: Router,
        shutdown: CancellationToken,
    ) -> Result<Server, BenchError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let metrics = Metrics::new().map_err(|e| BenchError::Args(format!("metrics: {e}")))?;
        let listener = Listener::new(listener, "http", limits::HTTP, &metrics);
        let serve = web::serve(listener, app, shutdown.clone());
        Ok(Server::plaintext(variant, addr, shutdown, serve))
    }

    /// Stops accepting, waits for open connections to close, and reports how serving ended.
    pub(crate) async fn stop(self) -> Result<(), BenchError> {
        self.shutdown.cancel();
        self.task.await?
    }
}
