//! `GET /healthcheck`, as envoyproxy/ratelimit answers it on its HTTP port (Envoy Gateway's
//! startup, readiness and liveness probes): `200 OK` with the body `OK` when healthy, else
//! `500` with no body. Unhealthy while the server shuts down (upstream's SIGTERM), and, with
//! `health_needs_config` (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`), until a config has been
//! loaded once, from the directory or from xDS alike ([`Envoy::config_loaded`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};

use super::Envoy;
use crate::web::problem::AsIs;

/// The path of the probe.
pub const PATH: &str = "/healthcheck";

/// `/healthcheck`, to merge into the data port's router (open to every caller, as probes are).
pub fn routes(envoy: Arc<Envoy>) -> Router {
    Router::new()
        .route(PATH, get(healthcheck))
        .with_state(envoy)
}

async fn healthcheck(State(envoy): State<Arc<Envoy>>) -> Response {
    if healthy(&envoy) {
        (StatusCode::OK, "OK").into_response()
    } else {
        // Bare, as upstream's: a probe reads the status alone.
        (StatusCode::INTERNAL_SERVER_ERROR, Extension(AsIs)).into_response()
    }
}

/// Whether `envoy` is healthy as upstream's health checker counts it.
pub fn healthy(envoy: &Envoy) -> bool {
    let needs_config = envoy.loaded().settings.health_needs_config;
    !envoy.is_stopping() && (!needs_config || envoy.config_loaded())
}
