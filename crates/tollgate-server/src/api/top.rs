//! `GET /v1/top`: who is denied (or allowed) most, per policy and per Envoy domain, over the
//! last minute or hour, from the summaries of [`crate::top`], each count with its error bounds:
//! `error`, the summary's (the count is at most that above the estimate), and `sample_error`,
//! the sampling's (the estimate is within that of the true count but for odds below one in a
//! million; 0 at `sample_every` 1). `dropped` counts the decisions of that kind left out since
//! the start because a buffer was full (0 unless the ticker falls behind): a true count may be
//! up to that much more.
//!
//! ```text
//! GET /v1/top?policy=api&window=1m&by=denied&limit=10
//! {"policy": "api", "window": "1m", "by": "denied", "capacity": 1000, "sample_every": 64,
//!  "dropped": 0, "keys": [{"key": "alice", "count": 12800, "error": 64, "sample_error": 4505}]}
//! ```
//!
//! Without `policy` or `domain`, every summary, under `"summaries"`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::limiter::Limiter;
use crate::top::{By, INLINE, Subject, Summary, Top, Window, sample};
use crate::web::problem::Problem;

/// How many keys a summary shows unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 10;

/// What a request asks for.
struct Asked {
    subject: Option<Subject>,
    window: Window,
    by: By,
    limit: usize,
}

pub(super) async fn top(
    State(limiter): State<Arc<Limiter>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(top) = limiter.top() else {
        return Problem::unknown(
            "top",
            "the summaries of who is limited are off on this server ([top] enabled = false)",
        )
        .into_response();
    };
    let asked = match parse(&query, top.capacity()) {
        Ok(asked) => asked,
        Err(problem) => return problem.into_response(),
    };
    let body = match &asked.subject {
        Some(subject) => match found(&limiter, top, subject) {
            Ok(summary) => one(subject, &summary, &asked),
            Err(problem) => return problem.into_response(),
        },
        None => {
            let summaries: Vec<Value> = top
                .all()
                .iter()
                .map(|(subject, summary)| one(subject, summary, &asked))
                .collect();
            json!({
                "window": asked.window.as_str(),
                "by": asked.by.as_str(),
                "summaries": summaries,
            })
        }
    };
    let mut response = body.to_string().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The query's parameters, checked: each refusal names its parameter.
fn parse(query: &HashMap<String, String>, capacity: usize) -> Result<Asked, Problem> {
    if let Some(unknown) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "policy" | "domain" | "window" | "by" | "limit"))
    {
        return Err(Problem::invalid_field(
            unknown.clone(),
            format!("unknown parameter {unknown:?}: policy, domain, window, by and limit are"),
        ));
    }
    let subject = match (query.get("policy"), query.get("domain")) {
        (Some(_), Some(_)) => {
            return Err(Problem::invalid_field(
                "domain",
                "give policy or domain, not both",
            ));
        }
        (Some(p), None) if p == INLINE => Some(Subject::Inline),
        (Some(p), None) => Some(Subject::Policy(p.as_str().into())),
        (None, Some(d)) => Some(Subject::Domain(d.clone())),
        (None, None) => None,
    };
    let window = match query.get("window").map(String::as_str) {
        None | Some("1m") => Window::Minute,
        Some("1h") => Window::Hour,
        Some(other) => {
            return Err(Problem::invalid_field(
                "window",
                format!("window must be 1m or 1h, not {other:?}"),
            ));
        }
    };
    let by = match query.get("by").map(String::as_str) {
        None | Some("denied") => By::Denied,
        Some("allowed") => By::Allowed,
        Some(other) => {
            return Err(Problem::invalid_field(
                "by",
                format!("by must be denied or allowed, not {other:?}"),
            ));
        }
    };
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT.min(capacity),
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=capacity).contains(n))
            .ok_or_else(|| {
                Problem::invalid_field(
                    "limit",
                    format!("limit must be a whole number from 1 to {capacity}, not {text:?}"),
                )
            })?,
    };
    Ok(Asked {
        subject,
        window,
        by,
        limit,
    })
}

/// The summary of `subject`, or a 404 naming it.
fn found(limiter: &Limiter, top: &Top, subject: &Subject) -> Result<Arc<Summary>, Problem> {
    let missing = || match subject {
        Subject::Domain(d) => Problem::unknown(
            "domain",
            format!("no Envoy domain named {d:?} is configured on this server"),
        ),
        Subject::Policy(p) => {
            Problem::unknown("policy", limiter.live().unknown("policy", p).to_string())
        }
        Subject::Inline => Problem::unknown("policy", "no inline summary"),
    };
    top.get(subject).ok_or_else(missing)
}

/// One summary's JSON.
fn one(subject: &Subject, summary: &Summary, asked: &Asked) -> Value {
    let read = summary.read(asked.window, asked.by);
    let keys: Vec<Value> = read
        .top()
        .iter()
        .take(asked.limit)
        .map(|c| {
            let key = match subject {
                Subject::Domain(_) => envoy_key(&c.key),
                _ => shown(&c.key),
            };
            let sample_error = sample::error(c.count, summary.sample_every());
            json!({"key": key, "count": c.count, "error": c.error, "sample_error": sample_error})
        })
        .collect();
    let mut body = json!({});
    match subject {
        Subject::Policy(name) => body["policy"] = json!(&**name),
        Subject::Inline => body["policy"] = json!(INLINE),
        Subject::Domain(domain) => body["domain"] = json!(domain),
    }
    body["window"] = json!(asked.window.as_str());
    body["by"] = json!(asked.by.as_str());
    body["capacity"] = json!(summary.capacity());
    body["sample_every"] = json!(summary.sample_every());
    body["dropped"] = json!(summary.dropped(asked.by));
    body["keys"] = Value::Array(keys);
    body
}

/// A key as text: itself when it is UTF-8, else with the bytes that are not escaped as `\xNN`.
fn shown(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) => text.to_owned(),
        Err(_) => key.escape_ascii().to_string(),
    }
}

/// An Envoy bucket's key as text: entries as the bucket is keyed (`key\u{1f}value\u{1e}`
/// each), and a key too long for a bucket as its digest, `#` and 64 hex digits, as stored
/// (`#` and the SHA-256's 32 bytes; a key of entries always ends in `\u{1e}`).
fn envoy_key(key: &[u8]) -> String {
    match key {
        [b'#', digest @ ..] if digest.len() == 32 && key.last() != Some(&0x1e) => {
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("#{hex}")
        }
        _ => shown(key),
    }
}
