//! Authentication over HTTP, for the API and Envoy's `/json` and `/rlconfig` alike: every
//! request but `/healthz` and `/readyz` shows `Authorization: Bearer <secret>` once `[auth]`
//! has tokens ([`authenticate`], around the whole router), and each route asks for the scope
//! it needs ([`require`], on the route). A missing or wrong token is a `401` with
//! `WWW-Authenticate: Bearer`, a token without the scope a `403`, both problem+json.

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

use crate::auth::{Frontend, Grant, Refusal, Scope, Strikes};
use crate::limiter::Limiter;
use crate::web::problem::Problem;

/// Paths answered without a token: probes must work without a secret.
const OPEN: [&str; 2] = ["/healthz", "/readyz"];

/// `router`, each request authenticated by `limiter`'s tokens first; the [`Grant`] it gets is
/// in the request's extensions for [`require`] (and handlers) to read.
pub fn authenticate(router: Router, limiter: Arc<Limiter>) -> Router {
    router.layer(Authenticate(limiter))
}

/// The layer of [`authenticate`]. Both layers here are services of their own, not
/// `axum::middleware::from_fn`: that boxes a future and clones the inner service for every
/// request, which on `POST /v1/check` was about a sixth of the allocations.
#[derive(Clone)]
struct Authenticate(Arc<Limiter>);

impl<S> Layer<S> for Authenticate {
    type Service = Authenticated<S>;

    fn layer(&self, inner: S) -> Authenticated<S> {
        Authenticated {
            inner,
            limiter: Arc::clone(&self.0),
        }
    }
}

#[derive(Clone)]
struct Authenticated<S> {
    inner: S,
    limiter: Arc<Limiter>,
}

impl<S> Service<Request> for Authenticated<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Answer<S::Future> {
        // Without tokens nothing is asked, and no grant is added: [`require`] lets a request
        // without one through, so a server without `[auth]` answers as it always has.
        let auth = self.limiter.auth();
        if OPEN.contains(&request.uri().path()) || !auth.required() {
            return Answer::Inner(self.inner.call(request));
        }
        let header = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        match auth.bearer(header) {
            Ok(grant) => {
                request.extensions_mut().insert(grant);
                Answer::Inner(self.inner.call(request))
            }
            Err(refusal) => {
                auth.failed(Frontend::Http);
                let delay = match request.extensions().get::<Strikes>() {
                    Some(strikes) if refusal == Refusal::Wrong => Some(strikes.strike()),
                    _ => None,
                };
                Answer::Refused(Box::pin(async move {
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    Problem::from(refusal).into_response()
                }))
            }
        }
    }
}

/// Refuses a request unless its [`Grant`] allows `scope`; `.layer(require(Scope::Admin))` on
/// a route. A request that [`authenticate`] did not see (a router embedded elsewhere) has no
/// grant and is let through: authenticating it is the embedding application's business.
pub fn require(scope: Scope) -> Require {
    Require(scope)
}

/// The layer of [`require`].
#[derive(Clone, Copy)]
pub struct Require(Scope);

impl<S> Layer<S> for Require {
    type Service = Required<S>;

    fn layer(&self, inner: S) -> Required<S> {
        Required {
            inner,
            scope: self.0,
        }
    }
}

/// A service behind [`require`].
#[derive(Clone)]
pub struct Required<S> {
    inner: S,
    scope: Scope,
}

impl<S> Service<Request> for Required<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Answer<S::Future> {
        if let Some(grant) = request.extensions().get::<Grant>()
            && let Err(refusal) = grant.allows(self.scope)
        {
            return Answer::Refused(Box::pin(std::future::ready(
                Problem::from(refusal).into_response(),
            )));
        }
        Answer::Inner(self.inner.call(request))
    }
}

/// The inner service's answer, or a refusal (boxed: refusals are rare, and one of them waits).
pub enum Answer<F> {
    /// Let through: the inner service answers.
    Inner(F),
    /// Refused: a problem, after the connection's strikes' delay.
    Refused(Pin<Box<dyn Future<Output = Response> + Send>>),
}

impl<F: Future<Output = Result<Response, Infallible>> + Unpin> Future for Answer<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Answer::Inner(inner) => Pin::new(inner).poll(cx),
            Answer::Refused(refused) => refused.as_mut().poll(cx).map(Ok),
        }
    }
}
