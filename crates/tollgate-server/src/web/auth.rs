//! Authentication over HTTP, for the API and Envoy's `/json` and `/rlconfig` alike: every
//! request but `/healthz` and `/readyz` shows `Authorization: Bearer <secret>` once `[auth]`
//! has tokens ([`authenticate`], around the whole router), and each route asks for the scope
//! it needs ([`require`], on the route). A missing or wrong token is a `401` with
//! `WWW-Authenticate: Bearer`, a token without the scope a `403`, both problem+json.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};

use crate::auth::{Frontend, Grant, Refusal, Scope, Strikes};
use crate::limiter::Limiter;
use crate::web::problem::Problem;

/// Paths answered without a token: probes must work without a secret.
const OPEN: [&str; 2] = ["/healthz", "/readyz"];

/// `router`, each request authenticated by `limiter`'s tokens first; the [`Grant`] it gets is
/// in the request's extensions for [`require`] (and handlers) to read.
pub fn authenticate(router: Router, limiter: Arc<Limiter>) -> Router {
    router.layer(from_fn_with_state(limiter, bearer))
}

async fn bearer(State(limiter): State<Arc<Limiter>>, mut request: Request, next: Next) -> Response {
    // Without tokens nothing is asked, and no grant is added: [`require`] lets a request
    // without one through, so a server without `[auth]` answers as it always has.
    if OPEN.contains(&request.uri().path()) || !limiter.auth().required() {
        return next.run(request).await;
    }
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    match limiter.auth().bearer(header) {
        Ok(grant) => {
            request.extensions_mut().insert(grant);
            next.run(request).await
        }
        Err(refusal) => {
            limiter.auth().failed(Frontend::Http);
            if refusal == Refusal::Wrong
                && let Some(strikes) = request.extensions().get::<Strikes>()
            {
                tokio::time::sleep(strikes.strike()).await;
            }
            Problem::from(refusal).into_response()
        }
    }
}

/// Refuses the request unless its [`Grant`] allows `scope`; for
/// `.layer(from_fn_with_state(Scope::Admin, require))` on a route. A request that
/// [`authenticate`] did not see (a router embedded elsewhere) has no grant and is let through:
/// authenticating it is the embedding application's business.
pub async fn require(State(scope): State<Scope>, request: Request, next: Next) -> Response {
    if let Some(grant) = request.extensions().get::<Grant>()
        && let Err(refusal) = grant.allows(scope)
    {
        return Problem::from(refusal).into_response();
    }
    next.run(request).await
}
