//! Reservations and buckets: `POST /v1/reserve`, `POST /v1/commit`, and
//! `GET|DELETE /v1/buckets/{policy}/{key}`.
//!
//! `{policy}` is a configured policy's name, or `inline` with the policy's numbers in the query
//! string (`?capacity=10&refill=10&period_ms=1000`, where inline policies are allowed), naming
//! the same bucket as a `/v1/check` with those numbers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use tollgate::store::settle::{Adjustment, Once};
use tollgate::{Algorithm, CheckError, Nanos, Policy, StoreError};

use super::check::{answer, answer_decided};
use super::request::CheckRequest;
use crate::auth::Grant;
use crate::limiter::reservation::{Refused, Reserved};
use crate::limiter::{DecideError, Entry, Limiter, MAX_KEY_BYTES, Target};
use crate::web::body;
use crate::web::problem::Problem;

/// `POST /v1/reserve`: the check's answer, and when allowed, the reservation to commit. It
/// takes one token-bucket policy (a window cannot give tokens back).
pub(super) async fn reserve(
    State(limiter): State<Arc<Limiter>>,
    grant: Option<Extension<Grant>>,
    body: Body,
) -> Response {
    let request = match body::read(body).await.and_then(|b| CheckRequest::parse(&b)) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    if let Target::Named { names, .. } = &request.target
        && names.len() > 1
    {
        return Problem::invalid_field("policies", "a reservation takes one policy")
            .into_response();
    }
    let entries = match limiter.live().resolve(&request.target) {
        Ok(entries) => entries,
        Err(e) => return Problem::from(e).into_response(),
    };
    if let Some(window) = entries
        .iter()
        .find(|e| e.policy.algorithm() != Algorithm::TokenBucket)
    {
        return Problem::invalid_field(
            "policy",
            format!(
                "{:?} is a window: reservations need a token bucket (a window cannot tell \
                 which window a returned token was taken in)",
                &*window.name
            ),
        )
        .into_response();
    }
    let decided = match limiter
        .decide_entries(entries, request.key.as_bytes(), request.cost)
        .await
    {
        Ok(decided) => decided,
        Err(e) => return Problem::from(e).into_response(),
    };
    if !decided.allowed() {
        return answer_decided(&decided, false, None);
    }
    let Ok(id) = limiter.signer().id() else {
        // The tokens stay taken: a reservation that cannot be handed out is one dropped.
        return Problem::store_unavailable("no random id could be made for the reservation")
            .into_response();
    };
    let entry = &decided.parts[0].entry;
    let reserved = Reserved {
        id,
        expires: limiter.now() + Nanos::from(limiter.reservation_ttl()),
        policy: entry.policy,
        name: entry.named.then(|| entry.name.to_string()),
        // A fail policy's answer or a shadow's denial took nothing: nothing to give back.
        paid: decided.paid && !decided.shadow_denied(),
        key: request.key,
        cost: request.cost,
        owner: grant.and_then(|Extension(grant)| grant.token_name().map(str::to_owned)),
    };
    let token = limiter.signer().sign(&reserved);
    answer_decided(&decided, false, Some(("reservation", &token)))
}

/// `POST /v1/commit` with `{"reservation": "...", "used": N}`: gives back `reserved - used`
/// (or takes `used - reserved` without a denial, `reserved + capacity` at most), once; answers
/// the bucket's state. A configured policy is settled under its numbers of now (a reload may
/// have changed them).
pub(super) async fn commit(
    State(limiter): State<Arc<Limiter>>,
    grant: Option<Extension<Grant>>,
    body: Body,
) -> Response {
    let (token, used) = match body::read(body).await.and_then(|b| parse_commit(&b)) {
        Ok(parsed) => parsed,
        Err(problem) => return problem.into_response(),
    };
    let now = limiter.now();
    let reserved = match limiter.signer().open(&token, now) {
        Ok(reserved) => reserved,
        Err(refused @ (Refused::Unknown | Refused::Expired)) => {
            return Problem::reservation_conflict(refused.to_string()).into_response();
        }
    };
    // A reservation made with a token is committed by that token alone.
    let committer = grant
        .as_ref()
        .and_then(|Extension(grant)| grant.token_name());
    if let Some(owner) = &reserved.owner
        && committer.is_some_and(|committer| committer != owner.as_str())
    {
        return Problem::forbidden(format!(
            "the reservation was made with the token {owner:?}: only it may commit it"
        ))
        .into_response();
    }
    let entry = match &reserved.name {
        None => limiter.live().inline_entry(reserved.policy),
        Some(name) => match limiter.live().entry(name) {
            Some(entry) if entry.policy.algorithm() == Algorithm::TokenBucket => entry,
            _ => {
                return Problem::reservation_conflict(format!(
                    "the policy {name:?} is no longer a configured token bucket"
                ))
                .into_response();
            }
        },
    };
    // A commit puts a bucket at most one capacity into debt: a larger `used` is refused, and
    // nothing is settled, so the reservation can still be committed with a sound number.
    let capacity = entry.policy.capacity();
    let most = reserved.cost.saturating_add(capacity);
    if used > most {
        return Problem::invalid_field(
            "used",
            format!(
                "used {used} exceeds the {} reserved plus the capacity {capacity} of {:?}: a \
                 commit puts a bucket at most one capacity into debt, so used must be at most \
                 {most}; nothing was settled",
                reserved.cost, &*entry.name
            ),
        )
        .into_response();
    }
    let adjustment = Adjustment::commit(reserved.cost, used, reserved.paid);
    let bucket = entry.check(reserved.key.as_bytes(), 0);
    // The id is remembered a minute past the expiry, so a replay can never outlive it.
    let once = Once {
        id: &reserved.id,
        ttl: Duration::from(reserved.expires - now) + Duration::from_secs(60),
    };
    match limiter.settle(Some(once), &[(bucket, adjustment)]).await {
        Ok(verdict) => match verdict.decisions().first() {
            Some(decision) => answer(&entry, decision),
            None => Problem::store_unavailable("the store answered no bucket").into_response(),
        },
        Err(StoreError::Check(CheckError::AlreadySettled)) => Problem::reservation_conflict(
            "the reservation was committed already (here or on another server)",
        )
        .into_response(),
        Err(e) => Problem::from(DecideError::from(e)).into_response(),
    }
}

/// `GET /v1/buckets/{policy}/{key}`: the bucket's state, as a check of cost 0 answers it.
pub(super) async fn get_bucket(
    State(limiter): State<Arc<Limiter>>,
    Path((policy, key)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let entry = match bucket(&limiter, &policy, &key, &query) {
        Ok(entry) => entry,
        Err(problem) => return problem.into_response(),
    };
    match limiter.decide_entries(vec![entry], key.as_bytes(), 0).await {
        Ok(decided) => answer_decided(&decided, false, None),
        Err(e) => Problem::from(e).into_response(),
    }
}

/// `DELETE /v1/buckets/{policy}/{key}`: the bucket is full again; `204`.
pub(super) async fn delete_bucket(
    State(limiter): State<Arc<Limiter>>,
    Path((policy, key)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let entry = match bucket(&limiter, &policy, &key, &query) {
        Ok(entry) => entry,
        Err(problem) => return problem.into_response(),
    };
    let buckets = [entry.check(key.as_bytes(), 0)];
    match limiter.reset(&buckets).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => Problem::from(DecideError::from(e)).into_response(),
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

/// The bucket `{policy}/{key}` names: a configured policy's, or an inline one's by the
/// numbers of the query string.
fn bucket(
    limiter: &Limiter,
    policy: &str,
    key: &str,
    query: &HashMap<String, String>,
) -> Result<Arc<Entry>, Problem> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Problem::invalid_field(
            "key",
            format!("key must be 1 to {MAX_KEY_BYTES} bytes"),
        ));
    }
    let live = limiter.live();
    if policy != "inline" {
        let entry = live
            .entry(policy)
            .ok_or_else(|| Problem::from(live.unknown("policy", policy)))?;
        if let Some(unknown) = query.keys().next() {
            return Err(Problem::invalid_field(
                unknown.clone(),
                format!("unknown parameter {unknown:?}: a configured policy takes none"),
            ));
        }
        return Ok(entry);
    }
    if !live.inline_policies {
        return Err(DecideError::InlineRefused.into());
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
    let policy =
        Policy::token_bucket(capacity, refill, Duration::from_millis(period_ms)).map_err(|e| {
            let field = if e.field() == "period" {
                "period_ms"
            } else {
                e.field()
            };
            Problem::invalid_field(field, e.to_string())
        })?;
    Ok(live.inline_entry(policy))
}
