//! The HTTP/JSON front end: `POST /v1/check`, `/v1/reserve`, `/v1/commit`,
//! `GET|DELETE /v1/buckets/{policy}/{key}`, `GET /v1/policies`, `/healthz`, `/readyz` and
//! `/metrics`.
//!
//! Every answer is JSON (but the metrics); every error is `application/problem+json`
//! ([`problem`]), including unknown paths and methods, so a client never has to parse an HTML
//! or plain-text error page.

mod check;
pub use check::MAX_BODY_BYTES;
pub(crate) use check::read_body;
pub mod conn;
pub(crate) mod decide;
mod health;
pub mod live;
mod policies;
pub use policies::algorithm as policy_algorithm;
pub mod problem;
pub mod request;
pub mod reservation;
mod serve;
pub use serve::HEADER_READ_TIMEOUT;
mod settle;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::http::{Method, Uri};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;
use tollgate::store::settle::DynSettle;

use crate::config::Policies;
use crate::metrics::Metrics;
use crate::store::StoreHealth;
use live::Live;
use problem::Problem;
use reservation::Signer;
use tollgate::{Check, Clock, MonotonicClock, StoreError, Verdict};

/// What every handler shares.
pub struct AppState {
    store: Arc<dyn DynSettle>,
    ready_timeout: Duration,
    signer: Signer,
    /// The time reservations expire by.
    clock: Arc<dyn Clock>,
    /// Times store calls, for the metrics.
    timer: MonotonicClock,
    reservation_ttl: Duration,
    live: ArcSwap<Live>,
    metrics: Arc<Metrics>,
    health: Arc<StoreHealth>,
}

impl AppState {
    /// Handlers deciding on `store`; `/readyz` waits at most `ready_timeout` for it.
    /// Reservations are signed with `secret` (servers sharing a store must share it), or with
    /// a secret made at random; they last [`reservation::DEFAULT_TTL`]. No configured
    /// policies, inline ones allowed, metrics of its own: see [`policies`](Self::policies) and
    /// [`observed`](Self::observed).
    pub fn new(
        store: Arc<dyn DynSettle>,
        ready_timeout: Duration,
        secret: Option<&[u8]>,
    ) -> Result<AppState, ring::error::Unspecified> {
        let metrics = Arc::new(Metrics::new().map_err(|_| ring::error::Unspecified)?);
        let health = Arc::new(StoreHealth::new(
            Arc::clone(&metrics),
            crate::cli::OnStoreError::Deny,
        ));
        Ok(AppState {
            store,
            ready_timeout,
            signer: Signer::new(secret)?,
            clock: Arc::new(MonotonicClock::new()),
            timer: MonotonicClock::new(),
            reservation_ttl: reservation::DEFAULT_TTL,
            live: ArcSwap::from_pointee(Live::new(Policies::default(), true, &metrics)),
            metrics,
            health,
        })
    }

    /// Reports to `metrics`, and store calls to `health` (which the store's fail policy
    /// reports its failures to).
    pub fn observed(mut self, metrics: Arc<Metrics>, health: Arc<StoreHealth>) -> Self {
        self.live = ArcSwap::from_pointee(Live::new(
            self.live.load().policies.clone(),
            self.live.load().inline_policies,
            &metrics,
        ));
        self.metrics = metrics;
        self.health = health;
        self
    }

    /// Serves `policies`, and inline policies only if `inline` allows.
    pub fn policies(self, policies: Policies, inline: bool) -> Self {
        self.reload(policies, inline);
        self
    }

    /// Puts `policies` in force for the next requests (a reload): buckets keep their state,
    /// since they are named by policy name and key. The series of policies no longer
    /// configured are dropped.
    pub fn reload(&self, policies: Policies, inline: bool) {
        let old = self
            .live
            .swap(Arc::new(Live::new(policies, inline, &self.metrics)));
        let live = self.live.load();
        for gone in old
            .policies
            .iter()
            .filter(|p| live.policies.get(&p.name).is_none())
        {
            self.metrics.forget_policy(&gone.name);
        }
    }

    /// Decides `checks` on the store: one call, timed for the metrics, its fail-policy answers
    /// counted, the store's recovery noted. Every front end decides through here.
    pub async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        let started = self.timer.now();
        let result = self.store.decide_dyn(checks).await;
        let took = Duration::from(self.timer.now() - started);
        self.metrics.store_latency.observe(took.as_secs_f64());
        let verdict = result?;
        if verdict.decisions.len() != checks.len() {
            return Err(StoreError::incompatible(
                "the store answered another number of decisions than it was asked",
            ));
        }
        if verdict.by_fail_policy {
            self.metrics.fail_policy_decisions.inc();
        } else {
            self.health.answered();
        }
        Ok(verdict)
    }

    /// Whether the store can decide `policy` at all (see [`tollgate::Store::supports`]).
    pub fn supports(&self, policy: &tollgate::Policy) -> Result<(), tollgate::PolicyError> {
        self.store.supports_dyn(policy)
    }

    /// The store's short name.
    pub fn store_name(&self) -> &'static str {
        self.store.name_dyn()
    }

    /// Gives each check's cost back to its bucket (token buckets only), in one store call.
    pub async fn refund(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        let adjustments: Vec<_> = checks
            .iter()
            .map(|c| (*c, tollgate::store::settle::Adjustment::Refund(c.cost)))
            .collect();
        self.store.settle_dyn(None, &adjustments).await
    }

    /// The policies in force now.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
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
        .route("/v1/policies", get(policies::list))
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .route("/readyz", get(health::readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Serves `router` (the [`router`] of a state, say) on `listener` until `shutdown` is
/// cancelled, then stops accepting and returns once the requests in flight are answered. A
/// client gets [`HEADER_READ_TIMEOUT`] to send a request's head.
pub async fn serve<L>(listener: L, router: Router, shutdown: CancellationToken) -> io::Result<()>
where
    L: axum::serve::Listener,
{
    serve::serve(listener, router, shutdown).await
}

async fn not_found(uri: Uri) -> impl IntoResponse {
    Problem::not_found(uri.path())
}

async fn method_not_allowed(method: Method, uri: Uri) -> impl IntoResponse {
    Problem::method_not_allowed(method.as_str(), uri.path())
}
