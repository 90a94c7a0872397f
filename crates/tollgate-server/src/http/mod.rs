//! The HTTP/JSON front end: `POST /v1/check`, `GET /healthz`, `GET /readyz`.
//!
//! Every answer is JSON; every error is `application/problem+json` ([`problem`]), including
//! unknown paths and methods, so a client never has to parse an HTML or plain-text error page.

mod check;
pub use check::MAX_BODY_BYTES;
mod health;
pub mod problem;
pub mod request;
pub mod reservation;
mod settle;

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
use tollgate::StoreError;
use tollgate::store::settle::DynSettle;

use problem::Problem;
use reservation::Signer;
use tollgate::{Clock, MonotonicClock};

/// What every handler shares.
pub struct AppState {
    store: Arc<dyn DynSettle>,
    ready_timeout: Duration,
    signer: Signer,
    /// The time reservations expire by.
    clock: Arc<dyn Clock>,
    reservation_ttl: Duration,
    /// Whether the last decision failed: failures are logged when they start and end, not
    /// once per request.
    failing: AtomicBool,
}

impl AppState {
    /// Handlers deciding on `store`; `/readyz` waits at most `ready_timeout` for it.
    /// Reservations are signed with `secret` (servers sharing a store must share it), or with
    /// a secret made at random; they last [`reservation::DEFAULT_TTL`].
    pub fn new(
        store: Arc<dyn DynSettle>,
        ready_timeout: Duration,
        secret: Option<&[u8]>,
    ) -> Result<AppState, ring::error::Unspecified> {
        Ok(AppState {
            store,
            ready_timeout,
            signer: Signer::new(secret)?,
            clock: Arc::new(MonotonicClock::new()),
            reservation_ttl: reservation::DEFAULT_TTL,
            failing: AtomicBool::new(false),
        })
    }

    /// Reservations expire by `clock` (the store's, in tests that move time by hand).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How long a reservation may wait for its commit.
    pub fn reservation_ttl(mut self, ttl: Duration) -> Self {
        self.reservation_ttl = ttl;
        self
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
        .route("/v1/reserve", post(settle::reserve))
        .route("/v1/commit", post(settle::commit))
        .route(
            "/v1/buckets/{policy}/{key}",
            get(settle::get_bucket).delete(settle::delete_bucket),
        )
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
