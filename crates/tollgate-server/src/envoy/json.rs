//! The Envoy front end over HTTP, as envoyproxy/ratelimit offers it for trying a config with
//! curl: `POST /json` answers a `RateLimitRequest` written in protobuf's JSON mapping (200 when
//! OK, 429 when over the limit), and `GET /rlconfig` prints the loaded config.
//!
//! Where envoyproxy/ratelimit answers a bad body with a bare `400 Bad Request`, this answers
//! with the server's problem+json, naming the field.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Extension, Router};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Envoy;
use super::ratelimit::{self, EnvoyError};
use crate::auth::{Grant, Scope};
use crate::descriptors::config::Unit;
use crate::web::auth::require;
use crate::web::body;
use crate::web::problem::Problem;

/// `/json`, to merge into the HTTP router (it asks for its scope once it has read the
/// request: `check`, or `admin` for negative hits).
pub fn routes(envoy: Arc<Envoy>) -> Router {
    Router::new().route("/json", any(answer)).with_state(envoy)
}

/// `/rlconfig`: what the loaded Envoy config says, for operators (on the admin listener when
/// there is one): the whole config, an administrator's.
pub fn admin_routes(envoy: Arc<Envoy>) -> Router {
    Router::new()
        .route("/rlconfig", get(rlconfig).layer(require(Scope::Admin)))
        .with_state(envoy)
}

async fn rlconfig(State(envoy): State<Arc<Envoy>>) -> Response {
    let text = envoy.loaded().config.dump();
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

async fn answer(
    State(envoy): State<Arc<Envoy>>,
    grant: Option<Extension<Grant>>,
    body: Body,
) -> Response {
    let bytes = match body::read(body).await {
        Ok(bytes) => bytes,
        Err(problem) => return problem.into_response(),
    };
    let request = match parse(&bytes) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    // The scope depends on the body (a refund is an administrator's): asked here, not on the
    // route. A request `authenticate` did not see is let through, as `require` lets it.
    if let Some(Extension(grant)) = grant
        && let Err(refusal) = grant.allows(super::scope_of(&request))
    {
        return Problem::from(refusal).into_response();
    }
    let loaded = envoy.loaded();
    let answer =
        ratelimit::should_rate_limit(envoy.limiter(), &loaded, envoy.metrics(), &request).await;
    // Upstream counts the failures of `/json` as of gRPC calls (not the calls: its count is
    // of gRPC's).
    if let Err(error) = &answer {
        error.count(envoy.metrics());
    }
    match answer {
        Ok(response) => {
            let status = if response.overall_code == Code::OverLimit as i32 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, axum::Json(render(&response))).into_response()
        }
        Err(EnvoyError::Invalid(message)) => {
            Problem::invalid_field("body", message).into_response()
        }
        Err(EnvoyError::Unavailable(message)) => {
            Problem::store_unavailable(message).into_response()
        }
        Err(EnvoyError::NoConfig) => Problem::no_config(ratelimit::NO_CONFIG).into_response(),
    }
}

/// `RateLimitRequest` in protobuf's JSON mapping: lowerCamelCase or the proto's own names,
/// numbers as JSON numbers or strings, the unit by name or number.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hits_addend", rename = "hitsAddend")]
    hits_addend: Option<Number>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    limit: Option<JsonOverride>,
    #[serde(default, alias = "hits_addend", rename = "hitsAddend")]
    hits_addend: Option<Number>,
    #[serde(default, alias = "is_negative_hits", rename = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(default, alias = "requests_per_unit", rename = "requestsPerUnit")]
    requests_per_unit: Option<Number>,
    #[serde(default)]
    unit: Option<JsonUnit>,
}

/// A protobuf integer in JSON: a number, or a string holding one.
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Number(u64),
    Text(String),
}

impl Number {
    fn get(&self) -> Result<u64, String> {
        match self {
            Number::Number(n) => Ok(*n),
            Number::Text(t) => t
                .parse()
                .map_err(|_| format!("{t:?} is not a whole number")),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JsonUnit {
    Number(i32),
    Name(String),
}

fn parse(bytes: &[u8]) -> Result<RateLimitRequest, Problem> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let json: JsonRequest = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        // serde_path_to_error says `?` for JSON that breaks before any field (a syntax error).
        let field = if path == "." || path == "?" {
            "body".to_owned()
        } else {
            path
        };
        Problem::invalid_field(field, e.inner().to_string())
    })?;
    let invalid = |field: String, e: String| Problem::invalid_field(field, e);
    let u32_of = |n: &Number, field: String| {
        n.get()
            .and_then(|v| u32::try_from(v).map_err(|_| format!("{v} is above {}", u32::MAX)))
            .map_err(|e| invalid(field, e))
    };
    let mut descriptors = Vec::with_capacity(json.descriptors.len());
    for (i, d) in json.descriptors.into_iter().enumerate() {
        let limit = match d.limit {
            None => None,
            Some(over) => {
                let unit = match over.unit {
                    None => 0,
                    Some(JsonUnit::Number(n)) => n,
                    Some(JsonUnit::Name(name)) => match name.as_str() {
                        "UNKNOWN" => 0,
                        other => Unit::parse(other).map(Unit::proto).ok_or_else(|| {
                            invalid(
                                format!("descriptors[{i}].limit.unit"),
                                format!("{other:?} is not a unit: SECOND, MINUTE, HOUR, DAY, MONTH or YEAR"),
                            )
                        })?,
                    },
                };
                let requests_per_unit = match &over.requests_per_unit {
                    None => 0,
                    Some(n) => u32_of(n, format!("descriptors[{i}].limit.requestsPerUnit"))?,
                };
                Some(RateLimitOverride {
                    requests_per_unit,
                    unit,
                })
            }
        };
        let hits_addend = d
            .hits_addend
            .map(|n| {
                n.get()
                    .map(|value| UInt64Value { value })
                    .map_err(|e| invalid(format!("descriptors[{i}].hitsAddend"), e))
            })
            .transpose()?;
        descriptors.push(RateLimitDescriptor {
            entries: d
                .entries
                .into_iter()
                .map(|e| Entry {
                    key: e.key,
                    value: e.value,
                })
                .collect(),
            limit,
            hits_addend,
            is_negative_hits: d.is_negative_hits,
        });
    }
    let hits_addend = match &json.hits_addend {
        None => 0,
        Some(n) => u32_of(n, "hitsAddend".to_owned())?,
    };
    Ok(RateLimitRequest {
        domain: json.domain,
        descriptors,
        hits_addend,
    })
}

/// The answer in protobuf's JSON mapping: lowerCamelCase, enums by name, default values left
/// out, durations as `"58s"`.
fn render(response: &RateLimitResponse) -> Value {
    let code = |c: i32| match Code::try_from(c) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    };
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(code(response.overall_code)));
    let statuses: Vec<Value> = response
        .statuses
        .iter()
        .map(|s| {
            let mut status = Map::new();
            status.insert("code".into(), json!(code(s.code)));
            if let Some(limit) = &s.current_limit {
                let mut current = Map::new();
                if limit.requests_per_unit != 0 {
                    current.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
                }
                if let Some(unit) = Unit::from_proto(limit.unit) {
                    current.insert("unit".into(), json!(unit.name()));
                }
                if !limit.name.is_empty() {
                    current.insert("name".into(), json!(limit.name));
                }
                status.insert("currentLimit".into(), Value::Object(current));
            }
            if s.limit_remaining != 0 {
                status.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                status.insert(
                    "durationUntilReset".into(),
                    json!(format!("{}s", d.seconds)),
                );
            }
            Value::Object(status)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    let headers: Vec<Value> = response
        .response_headers_to_add
        .iter()
        .map(|h| json!({"key": h.key, "value": h.value}))
        .collect();
    if !headers.is_empty() {
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_that_breaks_before_any_field_blames_the_body() {
        for broken in [&b"{not json"[..], b"", b"not json"] {
            let problem = parse(broken).expect_err("refused");
            assert_eq!(problem.field(), Some("body"), "{}", problem.detail());
        }
        let problem = parse(br#"{"domain": 7}"#).expect_err("refused");
        assert_eq!(problem.field(), Some("domain"), "{}", problem.detail());
    }
}
