//! Reservations and buckets: `POST /v1/reserve`, `POST /v1/commit`, and
//! `GET|DELETE /v1/buckets/{policy}/{key}`.
//!
//! Until the server has a config file of named policies, `{policy}` is `inline`, with the
//! policy's numbers in the query string (`?capacity=10&refill=10&period_ms=1000`), naming the
//! same bucket as a `/v1/check` with those numbers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use tollgate::store::settle::{Adjustment, Once};
use tollgate::{Check, CheckError, Clock, Nanos, Policy, StoreError};

use super::AppState;
use super::check::{answer, decide, read_body, store_problem};
use super::problem::Problem;
use super::request::{CheckRequest, MAX_KEY_BYTES};
use super::reservation::{Refused, Reserved};

/// `POST /v1/reserve`: the check's answer, and when allowed, the reservation to commit.
pub(super) async fn reserve(State(state): State<Arc<AppState>>, body: Body) -> Response {
    let request = match read_body(body).await.and_then(|b| CheckRequest::parse(&b)) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let decision = match decide(&state, &request).await {
        Ok(decision) => decision,
        Err(problem) => return problem.into_response(),
    };
    if !decision.allowed {
        return answer(&request.policy, &decision, None);
    }
    let Ok(id) = state.signer.id() else {
        // The tokens stay taken: a reservation that cannot be handed out is one dropped.
        return Problem::store_unavailable("no random id could be made for the reservation")
            .into_response();
    };
    let reserved = Reserved {
        id,
        expires: state.clock.now() + Nanos::from(state.reservation_ttl),
        policy: request.policy,
        key: request.key,
        cost: request.cost,
    };
    let token = state.signer.sign(&reserved);
    answer(
        &request.policy,
        &decision,
        Some(("reservation", Value::String(token))),
    )
}

/// `POST /v1/commit` with `{"reservation": "...", "used": N}`: gives back `reserved - used`
/// (or takes `used - reserved` without a denial), once; answers the bucket's state.
pub(super) async fn commit(State(state): State<Arc<AppState>>, body: Body) -> Response {
    let (token, used) = match read_body(body).await.and_then(|b| parse_commit(&b)) {
        Ok(parsed) => parsed,
        Err(problem) => return problem.into_response(),
    };
    let now = state.clock.now();
    let reserved = match state.signer.open(&token, now) {
        Ok(reserved) => reserved,
        Err(refused @ (Refused::Unknown | Refused::Expired)) => {
            return Problem::reservation_conflict(refused.to_string()).into_response();
        }
    };
    let adjustment = if used <= reserved.cost {
        Adjustment::Refund(reserved.cost - used)
    } else {
        Adjustment::Charge(used - reserved.cost)
    };
    let check = Check::new(reserved.policy, reserved.key.as_bytes(), 0);
    // The id is remembered a minute past the expiry, so a replay can never outlive it.
    let once = Once {
        id: &reserved.id,
        ttl: Duration::from(reserved.expires - now) + Duration::from_secs(60),
    };
    match state
        .store
        .settle_dyn(Some(once), &[(check, adjustment)])
        .await
    {
        Ok(verdict) => match verdict.decisions.first() {
            Some(decision) => answer(&reserved.policy, decision, None),
            None => Problem::store_unavailable("the store answered no bucket").into_response(),
        },
        Err(StoreError::Check(CheckError::AlreadySettled)) => Problem::reservation_conflict(
            "the reservation was committed already (here or on another server)",
        )
        .into_response(),
        Err(e) => store_problem(&state, e).into_response(),
    }
}

/// `GET /v1/buckets/{policy}/{key}`: the bucket's state, as a check of cost 0 answers it.
pub(super) async fn get_bucket(
    State(state): State<Arc<AppState>>,
    Path((policy, key)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let request = match bucket_request(&policy, key, &query) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    match decide(&state, &request).await {
        Ok(decision) => answer(&request.policy, &decision, None),
        Err(problem) => problem.into_response(),
    }
}

/// `DELETE /v1/buckets/{policy}/{key}`: the bucket is full again; `204`.
pub(super) async fn delete_bucket(
    State(state): State<Arc<AppState>>,
    Path((policy, key)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let request = match bucket_request(&policy, key, &query) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let check = [Check::new(request.policy, request.key.as_bytes(), 0)];
    match state.store.reset_dyn(&check).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => store_problem(&state, e).into_response(),
    }
}

/// The body of a commit: the reservation and the tokens used.
fn parse_commit(body: &[u8]) -> Result<(String, u64), Problem> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Problem::malformed_body(format!("malformed JSON: {e}")))?;
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

fn used(fields: &Map<String, Value>) -> Result<u64, Problem> {
    match fields.get("used") {
        None => Err(Problem::invalid_field("used", "used is required")),
        Some(value) => value.as_u64().ok_or_else(|| {
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

/// The bucket `{policy}/{key}` names, as a check of cost 0.
fn bucket_request(
    policy: &str,
    key: String,
    query: &HashMap<String, String>,
) -> Result<CheckRequest, Problem> {
    if policy != "inline" {
        return Err(Problem::invalid_field(
            "policy",
            format!(
                "no policy named {policy:?}: this server has no named policies yet; use \
                 `inline` with ?capacity=..&refill=..&period_ms=.."
            ),
        ));
    }
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Problem::invalid_field(
            "key",
            format!("key must be 1 to {MAX_KEY_BYTES} bytes"),
        ));
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
                format!(
                    "{name} must be an integer from 0 to {}, not {value:?}",
                    u64::MAX
                ),
            )
        })
    };
    let (capacity, refill, period_ms) =
        (number("capacity")?, number("refill")?, number("period_ms")?);
    let policy =
        Policy::token_bucket(capacity, refill, Duration::from_millis(period_ms)).map_err(|e| {
            let field = if e.field() == "period" {
                "period_ms"
            } else {
                e.field()
            };
            Problem::invalid_field(field, e.to_string())
        })?;
    Ok(CheckRequest {
        key,
        policy,
        cost: 0,
    })
}
