//! Liveness and readiness. `/healthz` answers as long as the process serves requests;
//! `/readyz` also asks the store, so a load balancer can take an instance whose store is
//! unreachable out of rotation (unless its fail policy makes it useful anyway).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::problem::Problem;

pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

pub(super) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let store = state.store.name_dyn();
    match tokio::time::timeout(state.ready_timeout, state.store.ready_dyn()).await {
        Ok(Ok(())) => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "store": store })),
        )
            .into_response(),
        Ok(Err(e)) => Problem::store_unavailable(format!("the {store} store: {e}")).into_response(),
        Err(_) => Problem::store_unavailable(format!(
            "the {store} store did not answer within {:?}",
            state.ready_timeout
        ))
        .into_response(),
    }
}

/// `GET /metrics`: Prometheus's text exposition format.
pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}
