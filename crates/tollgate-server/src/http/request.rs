//! The body of `POST /v1/check`, validated field by field so that every refusal names its
//! field: `{"key": "alice", "capacity": 10, "refill": 10, "period_ms": 1000, "cost": 1}`.
//!
//! The body is read as a JSON object first and each field checked by hand (rather than derived)
//! because serde's messages name a field for some mistakes and only a line and column for others.

use std::time::Duration;

use serde_json::{Map, Value};
use tollgate::Policy;

use super::problem::Problem;

/// The longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

const FIELDS: [&str; 5] = ["key", "capacity", "refill", "period_ms", "cost"];

/// A valid check request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest {
    /// The bucket's key.
    pub key: String,
    /// The inline token-bucket policy.
    pub policy: Policy,
    /// Tokens to take; 0 peeks.
    pub cost: u64,
}

impl CheckRequest {
    /// Parses and validates `body`.
    pub fn parse(body: &[u8]) -> Result<CheckRequest, Problem> {
        // serde_json's message already says where: "... at line 1 column 39".
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| Problem::malformed_body(format!("malformed JSON: {e}")))?;
        let Value::Object(fields) = value else {
            return Err(Problem::malformed_body(
                "the body must be a JSON object such as \
                 {\"key\": \"alice\", \"capacity\": 10, \"refill\": 10, \"period_ms\": 1000}",
            ));
        };
        if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(Problem::invalid_field(
                unknown.clone(),
                format!("unknown field {unknown:?}; expected {}", FIELDS.join(", ")),
            ));
        }

        let key = key(&fields)?;
        let capacity = integer(&fields, "capacity")?.ok_or_else(|| missing("capacity"))?;
        let refill = integer(&fields, "refill")?.ok_or_else(|| missing("refill"))?;
        let period_ms = integer(&fields, "period_ms")?.ok_or_else(|| missing("period_ms"))?;
        let cost = integer(&fields, "cost")?.unwrap_or(1);

        let policy = Policy::token_bucket(capacity, refill, Duration::from_millis(period_ms))
            .map_err(|e| {
                let field = match e.field() {
                    "period" => "period_ms",
                    other => other,
                };
                Problem::invalid_field(field, e.to_string())
            })?;
        if cost > capacity {
            return Err(Problem::invalid_field(
                "cost",
                format!("cost {cost} exceeds the capacity {capacity}: it can never be allowed"),
            ));
        }
        Ok(CheckRequest { key, policy, cost })
    }
}

fn key(fields: &Map<String, Value>) -> Result<String, Problem> {
    match fields.get("key") {
        None => Err(missing("key")),
        Some(Value::String(key)) if key.is_empty() => {
            Err(Problem::invalid_field("key", "key must not be empty"))
        }
        Some(Value::String(key)) if key.len() > MAX_KEY_BYTES => Err(Problem::invalid_field(
            "key",
            format!(
                "key is {} bytes long; at most {MAX_KEY_BYTES} are accepted",
                key.len()
            ),
        )),
        Some(Value::String(key)) => Ok(key.clone()),
        Some(other) => Err(Problem::invalid_field(
            "key",
            format!("key must be a string, not {}", kind(other)),
        )),
    }
}

/// A non-negative integer field, `None` when absent.
fn integer(fields: &Map<String, Value>, name: &'static str) -> Result<Option<u64>, Problem> {
    match fields.get(name) {
        None => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            let found = match value {
                Value::Number(n) if n.is_i64() => "a negative number".to_owned(),
                Value::Number(n) if n.is_f64() => format!("{n}"),
                other => kind(other).to_owned(),
            };
            Problem::invalid_field(
                name,
                format!(
                    "{name} must be an integer from 0 to {}, not {found}",
                    u64::MAX
                ),
            )
        }),
    }
}

fn missing(name: &'static str) -> Problem {
    Problem::invalid_field(name, format!("{name} is required"))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
