//! Serving a router on a listener, as `axum::serve` does, plus what it does not set: a bound on
//! the time a client may take to send a request's head. Without one, a client that sends its
//! headers a byte at a time (slowloris) holds its connection for as long as it likes, and
//! enough of them fill the connection cap.

use std::io;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;

use super::parse_error::ProblemOnParseError;
use super::problem::ensure_problem;

/// The longest a client may take to send a request's line and headers, once it has begun.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` is cancelled, then stops accepting and
/// returns once the requests in flight are answered. HTTP/1.1 and HTTP/2 (gRPC), detected per
/// connection.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    shutdown: CancellationToken,
) -> io::Result<()>
where
    L: axum::serve::Listener,
{
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    // Every error answer a problem: the endpoints' own, the extractors' rejections, and
    // (rewritten on the way out) the answers hyper gives requests it cannot parse.
    let router = router.layer(axum::middleware::map_response(ensure_problem));
    let graceful = GracefulShutdown::new();
    loop {
        let (io, _) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        // A router serves any body, hyper's own included.
        let service = TowerToHyperService::new(router.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(ProblemOnParseError::new(io)), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::trace!(error = %e, "a connection ended with an error");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
}
