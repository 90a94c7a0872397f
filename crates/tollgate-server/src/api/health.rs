//! Liveness and readiness. `/healthz` answers as long as the process serves requests;
//! `/readyz` also asks the store, so a load balancer can take an instance whose store is
//! unreachable out of rotation (unless its fail policy makes it useful anyway).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::limiter::Limiter;
use crate::web::problem::Problem;

pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

pub(super) async fn readyz(State(limiter): State<Arc<Limiter>>) -> Response {
    let store = limiter.store_name();
    match limiter.ready().await {
        Ok(Ok(())) => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "store": store })),
        )
            .into_response(),
        Ok(Err(e)) => Problem::store_unavailable(format!("the {store} store: {e}")).into_response(),
        Err(timeout) => Problem::store_unavailable(format!(
            "the {store} store did not answer within {timeout:?}"
        ))
        .into_response(),
    }
}

/// `GET /metrics`: Prometheus's text exposition format.
pub(super) async fn metrics(State(limiter): State<Arc<Limiter>>) -> Response {
    let mut response = limiter.metrics().render().into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}
