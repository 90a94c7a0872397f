//! `POST /v1/check`: one check of configured policies by name, or of an inline token bucket.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use tollgate::{Decision, headers};

use super::request::CheckRequest;
use crate::auth::Scope;
use crate::limiter::{Ask, Entry, Limiter, Outcome};
use crate::traces;
use crate::web::auth::{Gate, Require, require};
use crate::web::body;
use crate::web::problem::Problem;

/// The check's path: the router's route and the Front's match.
pub(super) const PATH: &str = "/v1/check";

/// The check's gate, on the router's route and in the Front alike: the scope
/// `check` of a request [`crate::web::auth::authenticate`] let in.
pub(super) fn gate() -> Gate<Require> {
    require(Scope::Check)
}

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

pub(super) async fn check(State(limiter): State<Arc<Limiter>>, request: Request) -> Response {
    let Some(traces) = limiter.traces() else {
        return decide(&limiter, request.into_body()).await;
    };
    let span = traces.http_request(request.headers(), "POST", "/v1/check");
    let response = span.run(decide(&limiter, request.into_body())).await;
    let status = response.status();
    span.set(traces::count(
        "http.response.status_code",
        usize::from(status.as_u16()),
    ));
    if status.is_server_error()
        || status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS
    {
        span.fail(status.to_string());
    } else {
        span.set(traces::flag("allowed", status == StatusCode::OK));
    }
    span.end();
    response
}

/// The check in `body`, decided and answered.
async fn decide(limiter: &Limiter, body: Body) -> Response {
    let body = match body::read(body).await {
        Ok(body) => body,
        Err(problem) => return problem.into_response(),
    };
    let request = match CheckRequest::parse(&body) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let CheckRequest { key, target, cost } = request;
    let listed = target.listed();
    let ask = Ask {
        target,
        key: key.as_bytes(),
        cost,
    };
    match limiter.check(ask).await {
        Ok(outcome) => answer_decided(&outcome, listed, None),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// The answer of a request's decision: the most restrictive part in the top-level fields, and
/// with `listed` (the request named a list of policies), one entry per policy.
pub(super) fn answer_decided(
    decided: &Outcome,
    listed: bool,
    extra: Option<(&str, &str)>,
) -> Response {
    let shown = decided.shown();
    let allowed = decided.allowed();
    let mut body = String::with_capacity(160);
    body.push('{');
    fields(&mut body, allowed, &shown.decision);
    if listed {
        body.push_str(",\"policies\":[");
        for (i, part) in decided.parts.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push('{');
            fields(&mut body, part.decision.allowed(), &part.decision);
            string(&mut body, "policy", &part.entry.name);
            if part.shadow_denied {
                body.push_str(",\"shadow_denied\":true");
            }
            body.push('}');
        }
        body.push(']');
    }
    if let Some(entry) = shown.entry.filter(|e| e.named) {
        string(&mut body, "policy", &entry.name);
    }
    if decided.shadow_denied() {
        body.push_str(",\"shadow_denied\":true");
    }
    if let Some((name, value)) = extra {
        string(&mut body, name, value);
    }
    body.push('}');
    respond(allowed, body, shown.entry.map(|e| &**e), &shown.decision)
}

/// The answer of one bucket's state (a commit's).
pub(super) fn answer(entry: &Entry, decision: &Decision) -> Response {
    let mut body = String::with_capacity(128);
    body.push('{');
    fields(&mut body, decision.allowed(), decision);
    string(&mut body, "policy", &entry.name);
    body.push('}');
    respond(decision.allowed(), body, Some(entry), decision)
}

/// A decision's fields, written by hand: every value is a number or a boolean, and they are
/// the hot path's whole body. Numbers by `itoa`: `write!`'s formatting machinery was a tenth
/// of a `/v1/check`'s instructions.
fn fields(body: &mut String, allowed: bool, decision: &Decision) {
    body.push_str(if allowed {
        "\"allowed\":true"
    } else {
        "\"allowed\":false"
    });
    let mut digits = itoa::Buffer::new();
    for (name, n) in [
        (",\"limit\":", decision.limit()),
        (",\"remaining\":", decision.remaining()),
        (",\"reset_after_ms\":", decision.reset_after_ms()),
        (",\"retry_after_ms\":", decision.retry_after_ms()),
    ] {
        body.push_str(name);
        body.push_str(digits.format(n));
    }
}

/// `,"name":"value"`. Every string the server writes here is a policy's name (letters, digits,
/// `_`, `-`, `.`), `inline`, or a base64url reservation: nothing JSON must escape.
fn string(body: &mut String, name: &str, value: &str) {
    debug_assert!(!value.contains(['"', '\\']) && !value.chars().any(char::is_control));
    for part in [",\"", name, "\":\"", value, "\""] {
        body.push_str(part);
    }
}

/// `200` or `429` with `body`, the RateLimit headers of `decision` under `entry`'s policy (none
/// without an enforced policy to describe), and `Retry-After` when denied.
fn respond(allowed: bool, body: String, entry: Option<&Entry>, decision: &Decision) -> Response {
    let status = if allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    // Made whole rather than by `(status, body).into_response()`, which gives a `String` the
    // content type `text/plain` first, for this to replace.
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(entry) = entry {
        // Built from numbers and a policy's name (letters, digits, `_`, `-`, `.`), quoted:
        // always valid header text.
        if let Ok(v) = HeaderValue::from_maybe_shared(entry.policy_item.clone()) {
            h.insert(RATELIMIT_POLICY.clone(), v);
        }
        if let Ok(v) = HeaderValue::try_from(headers::rate_limit(&entry.name, decision)) {
            h.insert(RATELIMIT.clone(), v);
        }
    }
    if !allowed {
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from(decision.retry_after_secs()),
        );
    }
    response
}
