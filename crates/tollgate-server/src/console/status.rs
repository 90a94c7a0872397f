//! `GET /v1/status` (scope `read`): what the console polls every second. The policies with
//! their limits and their decisions counted since start (a client differences two reads for a
//! rate), the store's health and latency, each listener's connections against its cap, and the
//! last config loads, newest first.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tollgate::Algorithm;

use super::{Console, now_ms};
use crate::auth::{Grant, Scope};
use crate::metrics::{INLINE, PolicyCounters};
use crate::options;
use crate::web::problem::Problem;

pub(super) async fn status(
    State(console): State<Arc<Console>>,
    grant: Option<Extension<Grant>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Some(unknown) = query.keys().next() {
        return Problem::invalid_field(
            unknown.clone(),
            format!("unknown parameter {unknown:?}: /v1/status takes none"),
        )
        .into_response();
    }
    let body = json!({
        "now_ms": now_ms(),
        "policies": policies(&console),
        "inline": inline(&console),
        "store": store(&console),
        "listeners": listeners(&console),
        "loads": loads(&console),
        "caller": caller(grant.as_deref()),
    });
    let mut response = body.to_string().into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn policies(console: &Console) -> Vec<Value> {
    let live = console.limiter.live();
    live.policies
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
            if let Some(entry) = live.entry(&p.name) {
                let counters = &entry.counters;
                v["allowed"] = Value::from(counters.allowed.get());
                v["denied"] = Value::from(counters.denied.get());
                v["shadow_denied"] = Value::from(counters.shadow_denied.get());
            }
            v
        })
        .collect()
}

/// The decisions on clients' own numbers: inline policies (the `inline` label) and the
/// buckets RESP's `CL.THROTTLE` and `THROTTLE` choose (a label each), summed.
fn inline(console: &Console) -> Value {
    let live = console.limiter.live();
    let mut counters = live.chosen_counters();
    counters.push(console.limiter.metrics().policy(INLINE));
    let sum = |count: fn(&PolicyCounters) -> u64| counters.iter().map(count).sum::<u64>();
    json!({
        "enabled": live.inline_allowed(),
        "allowed": sum(|c| c.allowed.get()),
        "denied": sum(|c| c.denied.get()),
    })
}

fn store(console: &Console) -> Value {
    let limiter = &console.limiter;
    let latency = console.latency.latency(&limiter.metrics().store_latency);
    json!({
        "kind": limiter.store_name(),
        "healthy": !limiter.store_health().failing(),
        "on_store_error": limiter.store_health().fail_policy().to_string(),
        "errors": limiter.metrics().store_errors_total(),
        "latency_ms": {
            "p50": latency.p50_ms,
            "p99": latency.p99_ms,
            "calls": latency.calls,
            "window_ms": u64::try_from(latency.window.as_millis()).unwrap_or(u64::MAX),
        },
    })
}

fn listeners(console: &Console) -> Vec<Value> {
    let connections = &console.limiter.metrics().connections;
    console
        .listeners
        .get()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "address": l.address,
                "connections": connections.open.with_label_values(&[l.name]).get(),
                "cap": connections.max.with_label_values(&[l.name]).get(),
            })
        })
        .collect()
}

fn loads(console: &Console) -> Vec<Value> {
    console
        .loads
        .newest_first()
        .into_iter()
        .map(|load| {
            json!({
                "at_ms": load.at_ms,
                "source": load.source,
                "trigger": load.trigger,
                "ok": load.error.is_none(),
                "error": load.error,
                "notes": load.notes,
            })
        })
        .collect()
}

/// Who asks, so that the page offers a reset only to a token that may make one: the token's
/// name (`null` on a server without tokens) and its scopes.
fn caller(grant: Option<&Grant>) -> Value {
    let grant = grant.unwrap_or(&Grant::Open);
    let scopes: Vec<&str> = [Scope::Check, Scope::Read, Scope::Admin]
        .into_iter()
        .filter(|s| grant.allows(*s).is_ok())
        .map(Scope::as_str)
        .collect();
    json!({ "token": grant.token_name(), "scopes": scopes })
}
