//! `POST /v1/check`: one check of configured policies by name, or of an inline token bucket.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::{Value, json};
use tollgate::{CheckError, Decision, Policy, StoreError, headers};

use super::AppState;
use super::decide::{Decided, Part, decide};
use super::problem::Problem;
use super::request::{CheckRequest, Target};

/// The longest body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

pub(super) async fn check(State(state): State<Arc<AppState>>, body: Body) -> Response {
    let request = match read_body(body).await.and_then(|b| CheckRequest::parse(&b)) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let entries = match state.live.load().resolve(&request.target) {
        Ok(entries) => entries,
        Err(problem) => return problem.into_response(),
    };
    match decide(&state, entries, request.key.as_bytes(), request.cost).await {
        Ok(decided) => {
            let listed = matches!(request.target, Target::Named { listed: true, .. });
            answer_decided(&decided, listed, None)
        }
        Err(problem) => problem.into_response(),
    }
}

/// The problem to answer for a store's error.
pub(super) fn store_problem(error: StoreError) -> Problem {
    match error {
        StoreError::Check(e @ CheckError::CostExceedsCapacity { .. }) => {
            Problem::invalid_field("cost", e.to_string())
        }
        StoreError::Check(e) => Problem::invalid_field("key", e.to_string()),
        e => Problem::store_unavailable(e.to_string()),
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

/// The answer of a request's decision: the most restrictive part in the top-level fields, and
/// with `listed` (the request named a list of policies), one entry per policy.
pub(super) fn answer_decided(
    decided: &Decided,
    listed: bool,
    extra: Option<(&str, Value)>,
) -> Response {
    let shown = decided.shown();
    let mut body = fields(&shown.decision);
    body["allowed"] = Value::Bool(decided.allowed());
    if shown.entry.named {
        body["policy"] = Value::from(&*shown.entry.name);
    }
    if decided.shadow_denied() {
        body["shadow_denied"] = Value::Bool(true);
    }
    if listed {
        body["policies"] = decided.parts.iter().map(part).collect();
    }
    if let Some((name, value)) = extra {
        body[name] = value;
    }
    respond(
        decided.allowed(),
        body,
        &shown.entry.name,
        &shown.entry.policy,
        &shown.decision,
    )
}

/// The answer of one bucket's state (a commit's, a bucket's).
pub(super) fn answer(name: &str, policy: &Policy, decision: &Decision) -> Response {
    let mut body = fields(decision);
    body["policy"] = Value::from(name);
    respond(decision.allowed, body, name, policy, decision)
}

fn part(part: &Part) -> Value {
    let mut v = fields(&part.decision);
    v["policy"] = Value::from(&*part.entry.name);
    if part.shadow_denied {
        v["shadow_denied"] = Value::Bool(true);
    }
    v
}

fn fields(decision: &Decision) -> Value {
    json!({
        "allowed": decision.allowed,
        "limit": decision.limit,
        "remaining": decision.remaining,
        "retry_after_ms": decision.retry_after_ms(),
        "reset_after_ms": decision.reset_after_ms(),
    })
}

/// `200` or `429` with `body`, the RateLimit headers of `decision` under the policy `name`,
/// and `Retry-After` when denied.
fn respond(
    allowed: bool,
    body: Value,
    name: &str,
    policy: &Policy,
    decision: &Decision,
) -> Response {
    let status = if allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = (status, body.to_string()).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Names are letters, digits, `_`, `-` and `.`, quoted: always valid header text.
    if let Ok(v) = HeaderValue::try_from(headers::rate_limit_policy(name, policy)) {
        h.insert(RATELIMIT_POLICY.clone(), v);
    }
    if let Ok(v) = HeaderValue::try_from(headers::rate_limit(name, decision)) {
        h.insert(RATELIMIT.clone(), v);
    }
    if !allowed {
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from(decision.retry_after_secs()),
        );
    }
    response
}
