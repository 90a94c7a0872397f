//! Reservations and buckets: `POST /v1/reserve`, `POST /v1/commit`, and
//! `GET|DELETE /v1/buckets/{policy}/{key}`.
//!
//! `{policy}` is a configured policy's name, or `inline` with the policy's numbers in the query
//! string (`?capacity=10&refill=10&period_ms=1000`, where inline policies are allowed), naming
//! the same bucket as a `/v1/check` with those numbers.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::check::{answer, answer_decided};
use super::request::{CheckRequest, amounts, inline_policy};
use crate::auth::Grant;
use crate::limiter::{Ask, CommitError, DecideError, KeyError, Limiter, Target, Used};
use crate::web::body;
use crate::web::problem::Problem;

/// `POST /v1/reserve`: the check's answer, and when allowed, the reservation to commit. It
/// takes token-bucket policies (a window cannot give tokens back): one, or several each with
/// its own cost (`"policies": ["requests", "tokens"], "cost": {"requests": 1, "tokens":
/// 2000}`), all or nothing as a check.
pub(super) async fn reserve(
    State(limiter): State<Arc<Limiter>>,
    grant: Option<Extension<Grant>>,
    body: Body,
) -> Response {
    let body = match body::read(body).await {
        Ok(body) => body,
        Err(problem) => return problem.into_response(),
    };
    let CheckRequest { key, target, cost } = match CheckRequest::parse(&body) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let listed = target.listed();
    let ask = Ask {
        target,
        key: key.as_bytes(),
        cost,
    };
    let owner = grant.as_ref().and_then(|Extension(g)| g.token_name());
    match limiter.reserve(ask, owner).await {
        Ok(reservation) => match &reservation.token {
            Some(token) => {
                answer_decided(&reservation.outcome, listed, Some(("reservation", token)))
            }
            None => answer_decided(&reservation.outcome, listed, None),
        },
        Err(e) => Problem::from(e).into_response(),
    }
}

/// `POST /v1/commit` with `{"reservation": "...", "used": N}`, or for a reservation of
/// several policies, `"used": {"requests": 1, "tokens": 1200}` naming each: the core settles
/// it once ([`Limiter::commit`]); the answer is the buckets' state.
pub(super) async fn commit(
    State(limiter): State<Arc<Limiter>>,
    grant: Option<Extension<Grant>>,
    body: Body,
) -> Response {
    let (token, used) = match body::read(body).await.and_then(|b| parse_commit(&b)) {
        Ok(parsed) => parsed,
        Err(problem) => return problem.into_response(),
    };
    let committer = grant.as_ref().and_then(|Extension(g)| g.token_name());
    match limiter.commit(&token, used, committer).await {
        Ok(outcome) => match &outcome.parts[..] {
            [part] => answer(&part.entry, &part.decision),
            _ => answer_decided(&outcome, true, None),
        },
        Err(CommitError::Conflict(message)) => {
            Problem::reservation_conflict(message).into_response()
        }
        Err(CommitError::Forbidden(message)) => Problem::forbidden(message).into_response(),
        Err(CommitError::Used { field, message }) => {
            Problem::invalid_field(field, message).into_response()
        }
        Err(CommitError::Store(e)) => Problem::from(e).into_response(),
    }
}

/// `GET /v1/buckets/{policy}/{key}`: the bucket's state, as a check of cost 0 answers it.
pub(super) async fn get_bucket(
    State(limiter): State<Arc<Limiter>>,
    Path((policy, key)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let target = match bucket(&limiter, &policy, &query) {
        Ok(target) => target,
        Err(problem) => return problem.into_response(),
    };
    match limiter.read(target, key.as_bytes()).await {
        Ok(outcome) => answer_decided(&outcome, false, None),
        Err(e) => bucket_problem(e).into_response(),
    }
}

/// `DELETE /v1/buckets/{policy}/{key}`: the bucket is full again; `204`.
pub(super) async fn delete_bucket(
    State(limiter): State<Arc<Limiter>>,
    Path((policy, key)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let target = match bucket(&limiter, &policy, &query) {
        Ok(target) => target,
        Err(problem) => return problem.into_response(),
    };
    match limiter.reset(target, key.as_bytes()).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => bucket_problem(e).into_response(),
    }
}

/// A bucket path's refusal: its key is refused in the path's own words.
fn bucket_problem(error: DecideError) -> Problem {
    match error {
        DecideError::Key(KeyError { most, .. }) => {
            Problem::invalid_field("key", format!("key must be 1 to {most} bytes"))
        }
        e => Problem::from(e),
    }
}

/// The body of a commit: the reservation and the tokens used.
fn parse_commit(body: &[u8]) -> Result<(String, Used), Problem> {
    let value = crate::web::json::parse(body)?;
    let Value::Object(fields) = value else {
        return Err(Problem::malformed_body(
            "the body must be a JSON object such as {\"reservation\": \"...\", \"used\": 3}",
        ));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "reservation" | "used"))
    {
        return Err(Problem::invalid_field(
            unknown.clone(),
            format!("unknown field {unknown:?}; expected reservation, used"),
        ));
    }
    let token = match fields.get("reservation") {
        Some(Value::String(token)) => token.clone(),
        Some(_) => {
            return Err(Problem::invalid_field(
                "reservation",
                "reservation must be the string /v1/reserve answered",
            ));
        }
        None => {
            return Err(Problem::invalid_field(
                "reservation",
                "reservation is required",
            ));
        }
    };
    let used = used(&fields)?;
    Ok((token, used))
}

fn used(fields: &serde_json::Map<String, Value>) -> Result<Used, Problem> {
    match fields.get("used") {
        None => Err(Problem::invalid_field("used", "used is required")),
        Some(Value::Object(each)) => Ok(Used::Each(amounts(each))),
        Some(value) => value.as_u64().map(Used::One).ok_or_else(|| {
            Problem::invalid_field(
                "used",
                format!(
                    "used must be an integer from 0 to {}, not {value}",
                    u64::MAX
                ),
            )
        }),
    }
}

/// The bucket `{policy}/{key}` names: a configured policy's, or an inline one's by the
/// numbers of the query string.
fn bucket(
    limiter: &Limiter,
    policy: &str,
    query: &HashMap<String, String>,
) -> Result<Target, Problem> {
    if policy != "inline" {
        let target = Target::Named {
            names: vec![policy.to_owned()],
            listed: false,
        };
        if let Some(unknown) = query.keys().next() {
            // A name that is no policy is the first fault to name.
            limiter.live().resolve(&target)?;
            return Err(Problem::invalid_field(
                unknown.clone(),
                format!("unknown parameter {unknown:?}: a configured policy takes none"),
            ));
        }
        return Ok(target);
    }
    if let Some(unknown) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "capacity" | "refill" | "period_ms"))
    {
        return Err(Problem::invalid_field(
            unknown.clone(),
            format!("unknown parameter {unknown:?}; expected capacity, refill, period_ms"),
        ));
    }
    let number = |name: &'static str| -> Result<u64, Problem> {
        let value = query
            .get(name)
            .ok_or_else(|| Problem::invalid_field(name, format!("{name} is required")))?;
        value.parse().map_err(|_| {
            Problem::invalid_field(
                name,
                // Each of the three is 1 at least (a policy of zeros limits nothing).
                format!(
                    "{name} must be an integer from 1 to {}, not {value:?}",
                    u64::MAX
                ),
            )
        })
    };
    let (capacity, refill, period_ms) =
        (number("capacity")?, number("refill")?, number("period_ms")?);
    Ok(Target::Inline(inline_policy(capacity, refill, period_ms)?))
}
