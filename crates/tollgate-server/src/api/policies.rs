//! `GET /v1/policies`: the configured policies, as a client needs them to choose one.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tollgate::Algorithm;

use crate::limiter::Limiter;
use crate::options;

pub(super) async fn list(State(limiter): State<Arc<Limiter>>) -> Response {
    let live = limiter.live();
    let policies: Vec<Value> = live
        .policies
        .iter()
        .map(|p| {
            let mut v = json!({
                "name": &*p.name,
                "algorithm": options::algorithm_name(p.policy.algorithm()),
                "capacity": p.policy.capacity(),
                "period_ms": u64::try_from(p.policy.period().as_millis()).unwrap_or(u64::MAX),
                "shadow": p.shadow,
            });
            if p.policy.algorithm() == Algorithm::TokenBucket {
                v["refill"] = Value::from(p.policy.refill());
            }
            v
        })
        .collect();
    let body = json!({
        "policies": policies,
        "inline_policies": live.inline_allowed(),
    });
    let mut response = body.to_string().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
