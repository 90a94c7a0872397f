//! What a connection is doing, for its timeouts: the requests in flight and when the last one
//! ended, and a body that may not stall.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::peer::Peer;
use crate::net::limits::{ConnLimits, after};

/// A connection's requests: how many are in flight, and when the last one ended.
pub(super) struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds from `started` to the end of the last request; `u64::MAX` before any.
    last_end: AtomicU64,
}

impl Activity {
    pub(super) fn new(started: Instant) -> Activity {
        Activity {
            started,
            in_flight: AtomicUsize::new(0),
            last_end: AtomicU64::new(u64::MAX),
        }
    }

    /// When the connection is to be closed for silence if nothing happens meanwhile: its
    /// first request must arrive within the request timeout, later ones within the idle
    /// timeout of the last; `None` while a request is in flight.
    pub(super) fn deadline(&self, limits: &ConnLimits) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(match self.last_end.load(Ordering::Acquire) {
            u64::MAX => after(self.started, limits.request_timeout),
            ms => after(
                after(self.started, Duration::from_millis(ms)),
                limits.idle_timeout,
            ),
        })
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(self))
    }
}

/// A request in flight; its end is recorded when it is dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.0.last_end.store(ms, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The served service (a router, or an `api::Front` before one), with each request
/// recorded in the connection's [`Activity`] and its body bounded by the request timeout.
#[derive(Clone)]
pub(super) struct Tracked<S> {
    pub(super) service: S,
    pub(super) activity: Arc<Activity>,
    pub(super) stall: Duration,
    /// The connection's TCP peer, whose failed authentications are counted.
    pub(super) peer: Peer,
}

impl<S> Service<http::Request<Incoming>> for Tracked<S>
where
    S: Service<Request<Body>, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Tracking<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // hyper's adapter polls the clone it then calls (`oneshot`), so the inner service is
        // asked on that same clone before each call, as its contract wants.
        self.service.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Tracking<S::Future> {
        let in_flight = self.activity.begin();
        let stall = self.stall;
        let mut request = request.map(|body| Body::new(Stalling::new(body, stall)));
        request.extensions_mut().insert(self.peer);
        Tracking {
            answer: self.service.call(request),
            in_flight: Some(in_flight),
        }
    }
}

/// A request's answer, the request in flight until it is given (a future of its own rather
/// than a boxed `async` block: one allocation less a request).
pub(super) struct Tracking<F> {
    answer: F,
    in_flight: Option<InFlight>,
}

impl<F: Future<Output = Result<Response, Infallible>> + Unpin> Future for Tracking<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let response = std::task::ready!(Pin::new(&mut this.answer).poll(cx));
        this.in_flight = None;
        Poll::Ready(response)
    }
}

/// The body stalled: it was not whole within the request timeout.
#[derive(Debug)]
pub struct BodyStalled(pub Duration);

impl std::fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the body was not whole within {} ms", self.0.as_millis())
    }
}

impl std::error::Error for BodyStalled {}

/// A body that fails with [`BodyStalled`] when it is not whole within the request timeout of
/// the first wait for it: a body trickled a byte at a time would hold its connection
/// otherwise (bodies are at most 64 KiB, so an honest one arrives long before).
struct Stalling {
    body: Incoming,
    stall: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Stalling {
    fn new(body: Incoming, stall: Duration) -> Stalling {
        Stalling {
            body,
            stall,
            timer: None,
        }
    }
}

impl http_body::Body for Stalling {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                let stall = this.stall;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyStalled(stall))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
