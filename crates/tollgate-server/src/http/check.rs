//! `POST /v1/check`: one check of an inline token-bucket policy.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::json;
use tollgate::{Check, CheckError, Decision, Policy, StoreError, headers};

use super::AppState;
use super::problem::Problem;
use super::request::CheckRequest;

/// The longest body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The name an inline policy goes by in the `RateLimit` headers.
const INLINE: &str = "inline";

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

pub(super) async fn check(State(state): State<Arc<AppState>>, body: Body) -> Response {
    let request = match read_body(body).await.and_then(|b| CheckRequest::parse(&b)) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    match decide(&state, &request).await {
        Ok(decision) => answer(&request.policy, &decision, None),
        Err(problem) => problem.into_response(),
    }
}

/// Decides `request` on the store: its decision, or the problem to answer.
pub(super) async fn decide(state: &AppState, request: &CheckRequest) -> Result<Decision, Problem> {
    // A policy the store cannot decide at all (beyond Redis's range, say) is the request's
    // fault, and its field says which number to change.
    if let Err(e) = state.store.supports_dyn(&request.policy) {
        return Err(Problem::invalid_field(
            policy_field(e.field()),
            e.to_string(),
        ));
    }
    let checks = [Check::new(
        request.policy,
        request.key.as_bytes(),
        request.cost,
    )];
    match state.store.decide_dyn(&checks).await {
        Ok(verdict) => match verdict.decisions.first() {
            Some(decision) => {
                state.store_answered();
                Ok(*decision)
            }
            None => Err(Problem::store_unavailable("the store answered no decision")),
        },
        Err(e) => Err(store_problem(state, e)),
    }
}

/// The problem to answer for a store's error.
pub(super) fn store_problem(state: &AppState, error: StoreError) -> Problem {
    match error {
        StoreError::Check(e @ CheckError::CostExceedsCapacity { .. }) => {
            Problem::invalid_field("cost", e.to_string())
        }
        StoreError::Check(e) => Problem::invalid_field("key", e.to_string()),
        e => {
            state.store_failed(&e);
            Problem::store_unavailable(e.to_string())
        }
    }
}

/// The request's field for a policy's input: the period is sent as `period_ms`.
fn policy_field(field: &'static str) -> &'static str {
    match field {
        "period" => "period_ms",
        other => other,
    }
}

pub(super) async fn read_body(body: Body) -> Result<axum::body::Bytes, Problem> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Problem::body_too_large(MAX_BODY_BYTES)),
        Err(e) => Err(Problem::malformed_body(format!(
            "the body could not be read: {e}"
        ))),
    }
}

/// The answer of a decision: `200` or `429`, its JSON body (with `extra` fields, such as a
/// reservation), the RateLimit headers, and `Retry-After` when denied.
pub(super) fn answer(
    policy: &Policy,
    decision: &Decision,
    extra: Option<(&str, serde_json::Value)>,
) -> Response {
    let status = if decision.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut body = json!({
        "allowed": decision.allowed,
        "limit": decision.limit,
        "remaining": decision.remaining,
        "retry_after_ms": decision.retry_after_ms(),
        "reset_after_ms": decision.reset_after_ms(),
    });
    if let Some((name, value)) = extra {
        body[name] = value;
    }
    let mut response = (status, body.to_string()).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Both values are built from numbers and a fixed name: always valid header text.
    if let Ok(v) = HeaderValue::try_from(headers::rate_limit_policy(INLINE, policy)) {
        h.insert(RATELIMIT_POLICY.clone(), v);
    }
    if let Ok(v) = HeaderValue::try_from(headers::rate_limit(INLINE, decision)) {
        h.insert(RATELIMIT.clone(), v);
    }
    if !decision.allowed {
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from(decision.retry_after_secs()),
        );
    }
    response
}
