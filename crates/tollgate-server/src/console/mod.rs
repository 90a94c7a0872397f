//! The operator's console on the admin router: `GET /`, one HTML page with its CSS and
//! JavaScript inline (no external asset, nothing built but by cargo), and `GET /v1/status`
//! (scope `read`), the JSON it polls every second beside `GET /v1/top`.
//!
//! The page is served without a token (a browser cannot send one when it navigates): it holds
//! no data, asks for a token, keeps it in the tab's `sessionStorage`, and sends it as a bearer
//! token with every request it makes. Its script and style run under a strict
//! `Content-Security-Policy` that names their SHA-256 hashes (the page is a constant, so its
//! hashes are computed once), and it writes every string from the server as text, never as
//! markup: keys are chosen by clients.
//!
//! The config loads it shows are recorded in [`Loads`]: the config file at start and at every
//! reload, and Envoy's rules (their directory, or each version over xDS), good or refused.

mod latency;
mod loads;
mod page;
mod status;

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::routing::get;

pub use loads::Loads;

use crate::auth::Scope;
use crate::limiter::Limiter;
use crate::web::auth::require;

/// What the console reads: the decision core, the config loads, the listeners.
pub struct Console {
    limiter: Arc<Limiter>,
    loads: Arc<Loads>,
    latency: latency::Recent,
    listeners: OnceLock<Vec<Listening>>,
}

/// A listener, as the console lists it: its connections are the ones the metrics count under
/// its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    /// `http`, `grpc`, `grpc_unix`, `resp`, `admin` or `prometheus`: the `listener` label of
    /// its metrics.
    pub name: &'static str,
    /// Where it listens.
    pub address: String,
}

impl Console {
    /// The console of `limiter`, its loads noted in `loads`; no listener until
    /// [`Console::listening`] says where the server listens.
    pub fn new(limiter: Arc<Limiter>, loads: Arc<Loads>) -> Console {
        Console {
            limiter,
            loads,
            latency: latency::Recent::new(),
            listeners: OnceLock::new(),
        }
    }

    /// The server listens on `listeners` (told once, when they are bound; a second call
    /// changes nothing).
    pub fn listening(&self, listeners: Vec<Listening>) {
        let _ = self.listeners.set(listeners);
    }

    /// Where loads are noted.
    pub fn loads(&self) -> &Arc<Loads> {
        &self.loads
    }
}

/// `GET /v1/status` (scope `read`), for the admin router (and the data port when there is no
/// admin listener), inside [`crate::web::auth::authenticate`].
pub fn routes(console: Arc<Console>) -> Router {
    Router::new()
        .route(
            "/v1/status",
            get(status::status).layer(require(Scope::Read)),
        )
        .with_state(console)
}

/// `GET /`, the page, merged outside [`crate::web::auth::authenticate`] by the routers that
/// mount the console, and by them only: elsewhere `/` asks for a token like any other path.
pub fn page_route(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(page::page))
        .with_state(console)
}

/// Wall-clock time, in milliseconds since the UNIX epoch: when a load happened and when a
/// status was taken, as an operator compares them with a log's or a file's times.
pub fn now_ms() -> u64 {
    // Wall-clock time is what these fields mean; the decisions never read it.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    let since_epoch = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}
