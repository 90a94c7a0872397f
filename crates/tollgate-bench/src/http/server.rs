//! The servers, in-process on `127.0.0.1` ephemeral ports.
//!
//! Every variant is served the same way (`axum::serve` with `ConnectInfo`, `TCP_NODELAY`), so
//! that the only difference between them is the layer in front of the handler.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use axum::serve::ListenerExt;
use hyper::header::HeaderName;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::middleware::{ClientIp, Header, KeyExtractor, RateLimitLayer};
use tollgate::{MemoryStore, Policy};

use super::variant::Variant;
use crate::BenchError;

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

fn router(variant: Variant, server: Option<&Router>) -> Result<Router, BenchError> {
    let app = Router::new().route("/hello", get(hello));
    Ok(match variant {
        Variant::Bare => app,
        Variant::BareHeaders => Router::new().route("/hello", get(hello_with_headers)),
        Variant::Tollgate => app.layer(layer(ClientIp::new())?),
        Variant::TollgateKeys => app.layer(layer(Header::new(X_API_KEY.clone()))?),
        Variant::Server => server.cloned().ok_or_else(|| {
            BenchError::Args("the server variant needs the server's router".into())
        })?,
    })
}

/// The layer as a user would build it: the defaults (RateLimit headers on, fail open, 50 ms
/// timeout) but for the key and the policy.
fn layer(key: impl KeyExtractor) -> Result<RateLimitLayer, BenchError> {
    Ok(RateLimitLayer::builder(MemoryStore::new())
        .policy(POLICY_NAME, allow_all()?)
        .key(key)
        .build()?)
}

/// A running server.
pub(crate) struct Server {
    pub(crate) variant: Variant,
    pub(crate) addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Serves `variant` on an ephemeral port of `127.0.0.1`, on the caller's runtime;
    /// [`Variant::Server`] serves `server`, `tollgate serve`'s router.
    pub(crate) async fn start(
        variant: Variant,
        server: Option<&Router>,
    ) -> Result<Server, BenchError> {
        let app = router(variant, server)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // Small responses on keep-alive connections: send each at once.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let (shutdown, signal) = oneshot::channel();
        let task = tokio::spawn(
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async {
                let _ = signal.await;
            })
            .into_future(),
        );
        Ok(Server {
            variant,
            addr,
            shutdown,
            task,
        })
    }

    /// Stops accepting, waits for open connections to close, and reports how serving ended.
    pub(crate) async fn stop(self) -> Result<(), BenchError> {
        let _ = self.shutdown.send(());
        Ok(self.task.await??)
    }
}
