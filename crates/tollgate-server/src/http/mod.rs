//! The HTTP/JSON front end: `POST /v1/check`, `GET /healthz`, `GET /readyz`.
//!
//! Every answer is JSON; every error is `application/problem+json` ([`problem`]), including
//! unknown paths and methods, so a client never has to parse an HTML or plain-text error page.

mod check;
pub use check::MAX_BODY_BYTES;
mod health;
pub mod problem;
pub mod request;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{Method, Uri};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tollgate::{DynStore, StoreError};

use problem::Problem;

/// What every handler shares.
pub struct AppState {
    store: Arc<dyn DynStore>,
    ready_timeout: Duration,
    /// Whether the last decision failed: failures are logged when they start and end, not
    /// once per request.
    failing: AtomicBool,
}

impl AppState {
    /// Handlers deciding on `store`; `/readyz` waits at most `ready_timeout` for it.
    pub fn new(store: Arc<dyn DynStore>, ready_timeout: Duration) -> AppState {
        AppState {
            store,
            ready_timeout,
            failing: AtomicBool::new(false),
        }
    }

    /// Notes that a decision failed with `error`.
    fn store_failed(&self, error: &StoreError) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(%error, "the store fails; answering 503 until it recovers");
        }
    }

    /// Notes that a decision succeeded.
    fn store_answered(&self) {
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("the store answers again");
        }
    }
}

/// The routes, for embedding in another axum application.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/check", post(check::check))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Serves `state` on `listener` until `shutdown` is cancelled, then stops accepting and
/// returns once the requests in flight are answered.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

async fn not_found(uri: Uri) -> impl IntoResponse {
    Problem::not_found(uri.path())
}

async fn method_not_allowed(method: Method, uri: Uri) -> impl IntoResponse {
    Problem::method_not_allowed(method.as_str(), uri.path())
}
