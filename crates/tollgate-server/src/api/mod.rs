//! The HTTP/JSON front end: `POST /v1/check`, `/v1/reserve`, `/v1/commit`,
//! `GET|DELETE /v1/buckets/{policy}/{key}`, `GET /v1/policies`, `GET /v1/top`, `/healthz`,
//! `/readyz` and `/metrics`, on the [`Limiter`].
//!
//! Every answer is JSON (but the metrics); every error is `application/problem+json`
//! ([`Problem`]), including unknown paths and methods, so a client never has to parse an HTML
//! or plain-text error page.

mod check;
mod front;
mod health;
mod policies;
pub mod request;
mod settle;
pub mod top;

pub use front::{Front, FrontFuture};

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, Uri};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};

use crate::auth::Scope;
use crate::limiter::Limiter;
use crate::web::auth::{authenticate, require};
use crate::web::problem::Problem;

/// Every route, for embedding in another axum application, and for the data port when
/// there is no admin listener. Each asks for the scope it needs of a request
/// [`crate::web::auth::authenticate`] let in (a commit gives back only what its own reservation
/// took, so it is part of deciding; a reset is an administrator's).
pub fn router(limiter: Arc<Limiter>) -> Router {
    client_routes()
        .merge(admin_routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(limiter)
}

/// [`router`], authenticated by `limiter`'s tokens ([`authenticate`]), with `POST /v1/check`
/// answered before it ([`Front`]): the API alone as the server serves it, for
/// [`crate::web::serve`].
pub fn front(limiter: Arc<Limiter>) -> Front {
    Front::new(
        authenticate(router(Arc::clone(&limiter)), Arc::clone(&limiter)),
        limiter,
    )
}

/// What a client needs to be limited: `/v1/check`, `/v1/reserve`, `/v1/commit`, and the
/// health probes; for the data port beside an admin listener, which `admin` names
/// (`http://ADDRESS`): a request for an operators' path is told it is served there.
pub fn data_router(limiter: Arc<Limiter>, admin: String) -> Router {
    let admin: Arc<str> = admin.into();
    client_routes()
        .fallback(move |uri: Uri| not_here(uri, Arc::clone(&admin)))
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(limiter)
}

/// The admin listener's routes: the operators' ones and the health probes.
pub fn admin_router(limiter: Arc<Limiter>) -> Router {
    admin_routes()
        .merge(probes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(limiter)
}

/// `/v1/check`, `/v1/reserve`, `/v1/commit`, and the health probes.
fn client_routes() -> Router<Arc<Limiter>> {
    let decide = require(Scope::Check);
    Router::new()
        .route(check::PATH, post(check::check).layer(check::gate()))
        .route("/v1/reserve", post(settle::reserve).layer(decide))
        .route("/v1/commit", post(settle::commit).layer(decide))
        .merge(probes())
}

/// What operators use, which reads or changes any client's bucket: `/v1/buckets`,
/// `/v1/policies`, `/v1/top`, `/metrics`.
fn admin_routes() -> Router<Arc<Limiter>> {
    let read = require(Scope::Read);
    let admin = require(Scope::Admin);
    Router::new()
        .route(
            "/v1/buckets/{policy}/{key}",
            get(settle::get_bucket)
                .layer(read)
                .merge(delete(settle::delete_bucket).layer(admin)),
        )
        .route("/v1/policies", get(policies::list).layer(read))
        .route("/v1/top", get(top::top).layer(read))
        .route("/metrics", get(health::metrics).layer(admin))
}

/// 404 on the data port; for a path of the operators' (a scraper's `/metrics`, `/v1/policies`,
/// `/v1/buckets/...`, `/v1/top`, the console's `/` and `/v1/status`), a 404 that says where it
/// moved.
async fn not_here(uri: Uri, admin: Arc<str>) -> Problem {
    let path = uri.path();
    let operators = matches!(
        path,
        "/metrics" | "/v1/policies" | "/v1/top" | "/" | "/v1/status"
    ) || path.starts_with("/v1/buckets/");
    if operators {
        Problem::moved_to_admin(path, &admin)
    } else {
        Problem::not_found(path)
    }
}

fn probes() -> Router<Arc<Limiter>> {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
}

async fn not_found(uri: Uri) -> impl IntoResponse {
    Problem::not_found(uri.path())
}

async fn method_not_allowed(method: Method, uri: Uri) -> impl IntoResponse {
    Problem::method_not_allowed(method.as_str(), uri.path())
}
