//! Reservations and buckets: `POST /v1/reserve`, `POST /v1/commit`, and
//! `GET|DELETE /v1/buckets/{policy}/{key}`.
//!
//! `{policy}` is a configured policy's name, or `inline` with the policy's numbers in the query
//! string (`?capacity=10&refill=10&period_ms=1000`, where inline policies are allowed), naming
//! the same bucket as a `/v1/check` with those numbers.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use tollgate::store::settle::Once;
use tollgate::{Algorithm, CheckError, Nanos, Policy, StoreError};

use super::check::{answer, answer_decided};
use super::request::{CheckRequest, by_policy};
use crate::auth::Grant;
use crate::limiter::reservation::{Refused, Reserved, ReservedBucket, UsedRefused};
use crate::limiter::{DecideError, Entry, Limiter, MAX_KEY_BYTES, Outcome, Part, Target};
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
    let request = match body::read(body).await.and_then(|b| CheckRequest::parse(&b)) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
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
    let listed = matches!(request.target, Target::Named { listed: true, .. });
    let decided = match limiter
        .decide_entries_by(entries, request.key.as_bytes(), |i| request.cost.of(i))
        .await
    {
        Ok(decided) => decided,
        Err(e) => return Problem::from(e).into_response(),
    };
    if !decided.allowed() {
        return answer_decided(&decided, listed, None);
    }
    let Ok(id) = limiter.signer().id() else {
        // The tokens stay taken: a reservation that cannot be handed out is one dropped.
        return Problem::store_unavailable("no random id could be made for the reservation")
            .into_response();
    };
    let buckets = decided
        .parts
        .iter()
        .enumerate()
        .map(|(i, part)| ReservedBucket {
            policy: part.entry.policy,
            name: part.entry.named.then(|| part.entry.name.to_string()),
            cost: request.cost.of(i),
            // A fail policy's answer took nothing, nor did a shadow that denied (the enforced
            // policies were decided without it): nothing to give back there.
            paid: decided.paid && !part.shadow_denied,
        })
        .collect();
    let reserved = Reserved {
        id,
        expires: limiter.now() + Nanos::from(limiter.reservation_ttl()),
        buckets,
        key: request.key,
        owner: grant.and_then(|Extension(grant)| grant.token_name().map(str::to_owned)),
    };
    let token = limiter.signer().sign(&reserved);
    answer_decided(&decided, listed, Some(("reservation", &token)))
}

/// `POST /v1/commit` with `{"reservation": "...", "used": N}`, or for a reservation of
/// several policies, `"used": {"requests": 1, "tokens": 1200}` naming each: gives each bucket
/// back `reserved - used` (or takes `used - reserved` without a denial, `reserved + capacity`
/// at most), once; answers the buckets' state. A configured policy is settled under its
/// numbers of now (a reload may have changed them).
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
    // A reservation made with a token is committed by that token alone; one made without a
    // token (before `[auth]` was on) by no token: whoever made it is unknown, so no token can
    // be said to be its owner.
    let committer = grant
        .as_ref()
        .and_then(|Extension(grant)| grant.token_name());
    match (&reserved.owner, committer) {
        (Some(owner), Some(committer)) if committer != owner.as_str() => {
            return Problem::forbidden(format!(
                "the reservation was made with the token {owner:?}: only it may commit it"
            ))
            .into_response();
        }
        (None, Some(_)) => {
            return Problem::forbidden(
                "the reservation was made before this server asked for tokens ([auth]): no \
                 token may commit it; it lapses at its expiry, its tokens spent",
            )
            .into_response();
        }
        _ => {}
    }
    let live = limiter.live();
    let mut entries = Vec::with_capacity(reserved.buckets.len());
    for bucket in &reserved.buckets {
        entries.push(match &bucket.name {
            None => live.inline_entry(bucket.policy),
            Some(name) => match live.entry(name) {
                Some(entry) if entry.policy.algorithm() == Algorithm::TokenBucket => entry,
                _ => {
                    return Problem::reservation_conflict(format!(
                        "the policy {name:?} is no longer a configured token bucket"
                    ))
                    .into_response();
                }
            },
        });
    }
    let names: Vec<&str> = entries.iter().map(|e| &*e.name).collect();
    let (used, by_name) = match used {
        Used::One(n) => match reserved.used_alike(n, &names) {
            Ok(used) => (used, false),
            Err(refused) => {
                return Problem::invalid_field("used", refused.to_string()).into_response();
            }
        },
        Used::Each(each) => match used_each(&reserved, &names, &each) {
            Ok(used) => (used, true),
            Err(problem) => return problem.into_response(),
        },
    };
    let capacities: Vec<u64> = entries.iter().map(|e| e.policy.capacity()).collect();
    // A commit puts a bucket at most one capacity into debt: a larger `used` is refused, and
    // nothing is settled, so the reservation can still be committed with a sound number.
    let adjustments = match reserved.adjustments(&used, &capacities, &names) {
        Ok(adjustments) => adjustments,
        Err(refused @ UsedRefused::OverDebtCap { index, .. }) => {
            let field: Cow<'static, str> = match by_name {
                true => format!("used.{}", names[index]).into(),
                false => "used".into(),
            };
            return Problem::invalid_field(field, refused.to_string()).into_response();
        }
        Err(refused) => {
            return Problem::invalid_field("used", refused.to_string()).into_response();
        }
    };
    let settlement: Vec<_> = entries
        .iter()
        .map(|entry| entry.check(reserved.key.as_bytes(), 0))
        .zip(adjustments)
        .collect();
    // The id is remembered a minute past the expiry, so a replay can never outlive it.
    let once = Once::new(
        &reserved.id,
        Duration::from(reserved.expires - now) + Duration::from_secs(60),
    );
    match limiter.settle(Some(once), &settlement).await {
        Ok(verdict) if verdict.decisions().len() == entries.len() => {
            if let ([entry], [decision]) = (&entries[..], verdict.decisions()) {
                return answer(entry, decision);
            }
            let parts = entries
                .into_iter()
                .zip(verdict.decisions())
                .map(|(entry, &decision)| Part {
                    entry,
                    decision,
                    shadow_denied: false,
                })
                .collect();
            answer_decided(&Outcome { parts, paid: true }, true, None)
        }
        Ok(_) => Problem::store_unavailable("the store answered no bucket").into_response(),
        Err(StoreError::Check(CheckError::AlreadySettled)) => Problem::reservation_conflict(
            "the reservation was committed already (here or on another server)",
        )
        .into_response(),
        Err(e) => Problem::from(DecideError::from(e)).into_response(),
    }
}

/// The amounts of `"used": {"name": n, ...}`, one per reserved bucket in order: every
/// configured policy of the reservation named, no other.
fn used_each(
    reserved: &Reserved,
    names: &[&str],
    each: &Map<String, Value>,
) -> Result<Vec<u64>, Problem> {
    if reserved.buckets.iter().any(|b| b.name.is_none()) {
        return Err(Problem::invalid_field(
            "used",
            "an inline policy's reservation takes used as a number",
        ));
    }
    by_policy("used", "reservation's", names, each)
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

/// What a commit says was used: one amount, or one per policy.
enum Used {
    One(u64),
    Each(Map<String, Value>),
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

fn used(fields: &Map<String, Value>) -> Result<Used, Problem> {
    match fields.get("used") {
        None => Err(Problem::invalid_field("used", "used is required")),
        Some(Value::Object(each)) => Ok(Used::Each(each.clone())),
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
