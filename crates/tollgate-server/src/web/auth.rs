//! Authentication over HTTP, for the API and Envoy's `/json` and `/rlconfig` alike: every
//! request but `/healthz`, `/readyz` and `/healthcheck` shows `Authorization: Bearer <secret>`
//! once `[auth]` has tokens ([`authenticate`], around the whole router), and each route asks
//! for the scope it needs ([`require`], on the route); `POST /v1/check`, answered before the
//! router (`api::Front`), goes through the same two gates of its own. A missing or
//! wrong token is a `401` with `WWW-Authenticate: Bearer`, a token without the scope a `403`,
//! an address that failed too often a `429` with `Retry-After` ([`crate::auth::Strikes`]), all
//! problem+json.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::Request;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::peer::Peer;
use crate::auth::{Caller, Frontend, Grant, Scope};
use crate::limiter::Limiter;
use crate::web::body;
use crate::web::problem::Problem;

/// Paths answered without a token: probes must work without a secret. (The console's page
/// `/` is too, where it is mounted: it is merged outside this gate, so a router without the
/// console asks for a token at `/` like anywhere else.)
const OPEN: [&str; 3] = ["/healthz", "/readyz", "/healthcheck"];

/// `router`, each request authenticated by `limiter`'s tokens first; the [`Grant`] it gets is
/// in the request's extensions for [`require`] (and handlers) to read.
pub fn authenticate(router: Router, limiter: Arc<Limiter>) -> Router {
    router.layer(authentication(limiter))
}

/// The layer [`authenticate`] puts around each route, for a service answered before the
/// router (`POST /v1/check`'s).
pub fn authentication(limiter: Arc<Limiter>) -> Gate<Authenticate> {
    Gate(Authenticate(limiter))
}

/// Refuses a request unless its [`Grant`] allows `scope`; `.layer(require(Scope::Admin))` on
/// a route. A request that [`authenticate`] did not see (a router embedded elsewhere) has no
/// grant and is let through: authenticating it is the embedding application's business.
pub fn require(scope: Scope) -> Gate<Require> {
    Gate(Require(scope))
}

/// What a [`Gate`] asks of each request before its service sees it.
pub trait Guard: Clone {
    /// `None` to let `request` through (perhaps with something added to it), or the answer
    /// that refuses it.
    fn refuse(&self, request: &mut Request) -> Option<Denial>;
}

/// A refusal's answer (boxed: refusals are rare, and one of them waits).
pub type Denial = Pin<Box<dyn Future<Output = Response> + Send>>;

/// The layer of [`authenticate`] and [`require`]: a service of its own, not
/// `axum::middleware::from_fn`, which boxes a future and clones the inner service for every
/// request (on `POST /v1/check`, about a sixth of the allocations).
#[derive(Clone, Copy)]
pub struct Gate<G>(G);

impl<G: Guard> Gate<G> {
    /// A gate asking `guard` of each request.
    pub fn new(guard: G) -> Gate<G> {
        Gate(guard)
    }
}

impl<S, G: Guard> Layer<S> for Gate<G> {
    type Service = Gated<S, G>;

    fn layer(&self, inner: S) -> Gated<S, G> {
        Gated {
            inner,
            guard: self.0.clone(),
        }
    }
}

/// A service behind a [`Gate`].
#[derive(Clone)]
pub struct Gated<S, G> {
    inner: S,
    guard: G,
}

impl<S, G> Service<Request> for Gated<S, G>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
    G: Guard,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Answer<S::Future> {
        match self.guard.refuse(&mut request) {
            None => Answer::Inner(self.inner.call(request)),
            Some(refused) => {
                let body = std::mem::take(request.body_mut());
                Answer::Denied(Box::pin(async move {
                    // Over HTTP/2, an answer given before the request's body has arrived ends
                    // the stream with a reset, which clients (curl: "Stream error in the
                    // HTTP/2 framing layer") report instead of the 401: read what the client
                    // is sending first, up to the bound every body has.
                    let _ = body::drain(body).await;
                    refused.await
                }))
            }
        }
    }
}

/// The bearer token, around the whole router.
#[derive(Clone)]
pub struct Authenticate(Arc<Limiter>);

impl Guard for Authenticate {
    fn refuse(&self, request: &mut Request) -> Option<Denial> {
        // Without tokens nothing is asked, and no grant is added: [`require`] lets a request
        // without one through, so a server without `[auth]` answers as it always has.
        let auth = self.0.auth();
        if OPEN.contains(&request.uri().path()) || !auth.required() {
            return None;
        }
        let header = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        let caller = Caller::new(Frontend::Http, Peer::of(request.extensions()));
        match auth.admit(caller, header, None) {
            Ok(grant) => {
                request.extensions_mut().insert(grant);
                None
            }
            Err(refusal) => Some(Box::pin(async move {
                Problem::from(refusal.held_back().await).into_response()
            })),
        }
    }
}

/// A scope, on a route.
#[derive(Clone, Copy)]
pub struct Require(Scope);

impl Guard for Require {
    fn refuse(&self, request: &mut Request) -> Option<Denial> {
        let refusal = request.extensions().get::<Grant>()?.allows(self.0).err()?;
        Some(Box::pin(std::future::ready(
            Problem::from(refusal).into_response(),
        )))
    }
}

/// The inner service's answer, or a refusal.
pub enum Answer<F> {
    /// Let through: the inner service answers.
    Inner(F),
    /// Denied: a problem, after the delay the address's strikes call for.
    Denied(Denial),
}

impl<F: Future<Output = Result<Response, Infallible>> + Unpin> Future for Answer<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Answer::Inner(inner) => Pin::new(inner).poll(cx),
            Answer::Denied(refused) => refused.as_mut().poll(cx).map(Ok),
        }
    }
}
