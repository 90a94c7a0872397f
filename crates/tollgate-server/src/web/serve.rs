//! Serving a router on a listener, HTTP/1.1 and HTTP/2 (gRPC) detected per connection, with
//! the bounds `axum::serve` does not set, so that no client holds a connection it does not
//! use: a new connection that sends nothing (or no whole request head) within the request
//! timeout is closed, as is one idle for the idle timeout between requests, and a body that
//! stalls for the request timeout is answered `408`. HTTP/2 connections get keep-alive pings;
//! every connection is asked to go away after its maximum age and closed after the grace
//! period, and one that floods `PING`s or `SETTINGS` is answered `GOAWAY`
//! ([`frame_flood`](crate::net::frame_flood)). A connection over a cap is answered `503` (gRPC:
//! `UNAVAILABLE`) and closed.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, header};
use axum::response::IntoResponse;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_layer::Layer as _;
use tower_service::Service;

use super::activity::{Activity, Tracked};
use super::peer::Peer;
use super::problem::Problem;
use super::repoll::Repoll;
use crate::net::accept::{Accepted, Acceptor, Admitted, OverCap, REFUSAL_TIME};
use crate::net::frame_flood::FloodGuard;
use crate::net::limits::{ConnLimits, KEEPALIVE_TIMEOUT, NEVER, after};
use crate::net::stream::Stream;
use crate::net::tls::Tls;

/// How long a connection asked to close for silence gets to do so before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What a listener serves, and how.
pub struct Listener {
    /// Accepts under the caps.
    pub acceptor: Acceptor,
    /// Its limits.
    pub limits: ConnLimits,
    /// Its TLS, if it has.
    pub tls: Option<Arc<Tls>>,
}

impl Listener {
    /// A plain listener on `listener`, named `name` in logs and metrics.
    pub fn new(
        listener: tokio::net::TcpListener,
        name: &'static str,
        limits: ConnLimits,
        metrics: &crate::metrics::Metrics,
    ) -> Listener {
        Listener {
            acceptor: Acceptor::new(listener, name, &limits, metrics),
            limits,
            tls: None,
        }
    }
}
use super::parse_error::ProblemOnParseError;
use super::problems::Problems;

/// Serves `router` (an axum [`Router`](axum::Router), or an `api::Front` before one)
/// on `listener` until `shutdown` is cancelled, then stops accepting and returns once the
/// requests in flight are answered.
///
/// Any tower service will do: each request is given to a clone of `router`, whose
/// `poll_ready` is called before its `call`, as tower's contract wants. Its future must be
/// `Unpin`, as it is polled in place, without a box: a service whose future is an `async`
/// block boxes it (`Box::pin`).
pub async fn serve<S>(listener: Listener, router: S, shutdown: CancellationToken) -> io::Result<()>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + Unpin + 'static,
{
    let Listener {
        mut acceptor,
        limits,
        tls,
    } = listener;
    let builder = Arc::new(builder(&limits));
    // Every error answer a problem: the endpoints' own, the extractors' rejections, and
    // (rewritten on the way out) the answers hyper gives requests it cannot parse. Around the
    // whole service, not on each route (`Router::layer`), where it would box once more.
    let router = Problems.layer(router);
    let tasks = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = acceptor.accept() => accepted,
        };
        match accepted {
            Accepted::Admitted(admitted) => {
                let timed_out = acceptor.metrics().timed_out.clone();
                tasks.spawn(connection(
                    admitted,
                    Arc::clone(&builder),
                    router.clone(),
                    limits,
                    tls.clone(),
                    shutdown.clone(),
                    timed_out,
                ));
            }
            Accepted::OverCap(refusal) => {
                tasks.spawn(refuse(refusal, Arc::clone(&builder), tls.clone()));
            }
        }
    }
    tasks.close();
    tasks.wait().await;
    Ok(())
}

fn builder(limits: &ConnLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    // hyper times a request head from when it starts waiting for one, so after a response
    // this is the idle timeout; a new connection's first head is bounded by the request
    // timeout below.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout.min(NEVER));
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.keepalive_interval.min(NEVER))
        .keep_alive_timeout(KEEPALIVE_TIMEOUT);
    builder
}

/// Serves one connection until it ends, it is silent or idle too long, it is too old, or the
/// server stops.
async fn connection<S>(
    admitted: Admitted,
    builder: Arc<Builder<TokioExecutor>>,
    router: S,
    limits: ConnLimits,
    tls: Option<Arc<Tls>>,
    shutdown: CancellationToken,
    timed_out: prometheus::IntCounter,
) where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + Unpin + 'static,
{
    let started = Instant::now();
    let Admitted {
        stream,
        place,
        peer,
    } = admitted;
    let handshake = Stream::open(stream, tls.as_deref());
    let stream = match tokio::time::timeout(limits.request_timeout.min(NEVER), handshake).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "a TLS handshake failed");
            return;
        }
        Err(_) => {
            timed_out.inc();
            return;
        }
    };
    let activity = Arc::new(Activity::new(started));
    let service = Tracked {
        service: router,
        activity: Arc::clone(&activity),
        stall: limits.request_timeout,
        peer: Peer(peer),
    };
    // A request's body wakes the connection's task while it runs (see `repoll`).
    let mut connection = Repoll::new(builder.serve_connection_with_upgrades(
        TokioIo::new(FloodGuard::new(ProblemOnParseError::new(stream))),
        TowerToHyperService::new(service),
    ));
    let old_at = after(started, limits.max_age);
    // Once asked to go away: when it is dropped if it has not closed by then.
    let mut closing: Option<Instant> = None;
    let mut stopping = false;
    loop {
        let now = Instant::now();
        let wake = match closing {
            Some(at) => Some(at),
            None => [
                activity
                    .deadline(&limits)
                    .or_else(|| Some(after(now, limits.request_timeout))),
                Some(old_at),
            ]
            .into_iter()
            .flatten()
            .min(),
        };
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ended = &mut connection => {
                if let Err(e) = ended {
                    tracing::trace!(error = %e, "a connection ended with an error");
                }
                break;
            }
            () = shutdown.cancelled(), if !stopping => {
                // The requests in flight get the request timeout to finish (the store's
                // timeout bounds a decision); a client that will not take its answer is not
                // waited for longer.
                stopping = true;
                if closing.is_none() {
                    connection.inner().graceful_shutdown();
                }
                let drain = after(Instant::now(), limits.request_timeout);
                closing = Some(closing.map_or(drain, |at| at.min(drain)));
            }
            () = sleep => {
                let now = Instant::now();
                if closing.is_some_and(|at| at <= now) {
                    break;
                }
                if closing.is_some() || stopping {
                    continue;
                }
                if old_at <= now {
                    connection.inner().graceful_shutdown();
                    closing = Some(after(now, limits.max_age_grace));
                } else if activity.deadline(&limits).is_some_and(|at| at <= now) {
                    timed_out.inc();
                    connection.inner().graceful_shutdown();
                    closing = Some(now + CLOSE_GRACE);
                }
            }
        }
    }
    drop(place);
}

/// Tells a connection over a cap why, in HTTP/1.1 or HTTP/2 as it speaks, and closes it.
async fn refuse(refusal: OverCap, builder: Arc<Builder<TokioExecutor>>, tls: Option<Arc<Tls>>) {
    let OverCap { stream, over, .. } = refusal;
    let cap = over.key();
    let answer = async move {
        let stream = Stream::open(stream, tls.as_deref()).await.ok()?;
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            std::future::ready(Ok::<_, std::convert::Infallible>(refusal_answer(
                &request, cap,
            )))
        });
        builder
            .serve_connection(TokioIo::new(stream), service)
            .await
            .ok()
    };
    let _ = tokio::time::timeout(REFUSAL_TIME, answer).await;
}

fn refusal_answer<B>(request: &Request<B>, cap: &str) -> Response<Body> {
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        // A trailers-only gRPC answer: UNAVAILABLE, which clients retry elsewhere.
        let mut response = Response::new(Body::empty());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert("grpc-status", HeaderValue::from_static("14"));
        if let Ok(message) = HeaderValue::from_str(&format!("too many connections ({cap})")) {
            headers.insert("grpc-message", message);
        }
        return response;
    }
    let mut response = Problem::too_many_connections(cap).into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
