//! The body of `POST /v1/check` (and `/v1/reserve`), validated field by field so that every
//! refusal names its field: a configured policy by name, `{"policy": "api", "key": "alice",
//! "cost": 1}`, several all-or-nothing, `{"policies": ["per_second", "per_hour"], "key": ...}`,
//! or an inline token bucket, `{"key": "alice", "capacity": 10, "refill": 10, "period_ms":
//! 1000}`. Configured policies may each cost their own: `"cost": {"requests": 1, "tokens":
//! 2000}` names every policy of the request.
//!
//! The body is read as a JSON object first and each field checked by hand (rather than derived)
//! because serde's messages name a field for some mistakes and only a line and column for others.

use std::borrow::Cow;
use std::time::Duration;

use serde_json::{Map, Value};
use tollgate::Policy;

use crate::limiter::{Amount, Cost, Target, by_policy};
use crate::web::problem::{Problem, http_field};

const FIELDS: [&str; 7] = [
    "key",
    "cost",
    "policy",
    "policies",
    "capacity",
    "refill",
    "period_ms",
];
const INLINE_FIELDS: [&str; 3] = ["capacity", "refill", "period_ms"];

/// A valid check request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest<'a> {
    /// The bucket's key: borrowed from the body on the named fast path
    /// (`{"policy": .., "key": .., "cost": ..}`) when it has no escapes (no copy on the hot
    /// path); owned otherwise. [`CheckRequest::into_owned`] detaches it from the body.
    pub key: Cow<'a, str>,
    /// The policies.
    pub target: Target,
    /// Tokens to take; 0 peeks.
    pub cost: Cost,
}

/// The common shape, `{"policy": "api", "key": "alice", "cost": 1}`, read without building a
/// JSON tree: the hot path of a configured server. Anything else, and anything wrong, is left
/// to the field-by-field reading, whose refusals name the field.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Named<'a> {
    #[serde(borrow)]
    policy: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
    // Absent is 1; `null` is refused (by the field-by-field reading), not taken as absent.
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

impl CheckRequest<'_> {
    /// The same request, its key copied out of the body it may borrow from (to keep it past
    /// the body).
    pub fn into_owned(self) -> CheckRequest<'static> {
        CheckRequest {
            key: Cow::Owned(self.key.into_owned()),
            target: self.target,
            cost: self.cost,
        }
    }

    /// Parses and validates `body`.
    pub fn parse(body: &[u8]) -> Result<CheckRequest<'_>, Problem> {
        if let Ok(named) = serde_json::from_slice::<Named<'_>>(body) {
            return Ok(CheckRequest {
                key: named.key,
                target: Target::Named {
                    names: vec![named.policy.into_owned()],
                    listed: false,
                },
                cost: Cost::All(named.cost),
            });
        }
        // serde_json's message already says where: "... at line 1 column 39"; a key given
        // twice is refused by name (the fast path above refuses it too, as serde derives do).
        let value = crate::web::json::parse(body)?;
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

        let key = Cow::Owned(key(&fields)?);
        if let Some(target) = named(&fields)? {
            let cost = match (&target, fields.get("cost")) {
                (Target::Named { names, .. }, Some(Value::Object(each))) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    let costs = by_policy("cost", "request's", &names, &amounts(each))
                        .map_err(|e| Problem::invalid_field(e.field, e.message))?;
                    Cost::Each(costs)
                }
                _ => Cost::All(integer(&fields, "cost", 0)?.unwrap_or(1)),
            };
            return Ok(CheckRequest { key, target, cost });
        }
        let cost = integer(&fields, "cost", 0)?.unwrap_or(1);
        let capacity = integer(&fields, "capacity", 1)?.ok_or_else(|| missing("capacity"))?;
        let refill = integer(&fields, "refill", 1)?.ok_or_else(|| missing("refill"))?;
        let period_ms = integer(&fields, "period_ms", 1)?.ok_or_else(|| missing("period_ms"))?;

        Ok(CheckRequest {
            key,
            target: Target::Inline(inline_policy(capacity, refill, period_ms)?),
            cost: Cost::All(cost),
        })
    }
}

/// The inline token bucket of these numbers, or the refusal naming the number at fault as
/// the HTTP API names it (the period in milliseconds).
pub(super) fn inline_policy(capacity: u64, refill: u64, period_ms: u64) -> Result<Policy, Problem> {
    Policy::token_bucket(capacity, refill, Duration::from_millis(period_ms))
        .map_err(|e| Problem::invalid_field(http_field(e.field()), e.to_string()))
}

/// The amounts of `{"name": n, ...}` as the request gave them, for the core to match with
/// the policies' names.
pub(super) fn amounts(each: &Map<String, Value>) -> Vec<(String, Amount)> {
    each.iter()
        .map(|(name, value)| {
            let amount = value
                .as_u64()
                .map_or_else(|| Amount::Invalid(value.to_string()), Amount::Tokens);
            (name.clone(), amount)
        })
        .collect()
}

/// The configured policies the request names, if it names any.
fn named(fields: &Map<String, Value>) -> Result<Option<Target>, Problem> {
    let (names, listed) = match (fields.get("policy"), fields.get("policies")) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(Problem::invalid_field(
                "policies",
                "give either policy (one name) or policies (a list), not both",
            ));
        }
        (Some(Value::String(name)), None) => (vec![name.clone()], false),
        (Some(other), None) => {
            return Err(Problem::invalid_field(
                "policy",
                format!("policy must be a policy's name, not {}", kind(other)),
            ));
        }
        (None, Some(Value::Array(items))) => {
            // How many, and each once: the core's rules (a body holds at most 64 KiB of them).
            let mut names: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                let Value::String(name) = item else {
                    return Err(Problem::invalid_field(
                        "policies",
                        format!("policies must list names, not {}", kind(item)),
                    ));
                };
                names.push(name.clone());
            }
            (names, true)
        }
        (None, Some(other)) => {
            return Err(Problem::invalid_field(
                "policies",
                format!("policies must be a list of names, not {}", kind(other)),
            ));
        }
    };
    if let Some(inline) = INLINE_FIELDS.iter().find(|f| fields.contains_key(**f)) {
        return Err(Problem::invalid_field(
            *inline,
            format!(
                "{inline} is for an inline policy; a configured policy has its numbers in the \
                 server's config"
            ),
        ));
    }
    Ok(Some(Target::Named { names, listed }))
}

fn key(fields: &Map<String, Value>) -> Result<String, Problem> {
    match fields.get("key") {
        None => Err(missing("key")),
        Some(Value::String(key)) => Ok(key.clone()),
        Some(other) => Err(Problem::invalid_field(
            "key",
            format!("key must be a string, not {}", kind(other)),
        )),
    }
}

/// An integer field of `least` or more, `None` when absent. A value below `least` that is a
/// whole number is left to the policy's own check, which names the field the same way.
fn integer(
    fields: &Map<String, Value>,
    name: &'static str,
    least: u64,
) -> Result<Option<u64>, Problem> {
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
                    "{name} must be an integer from {least} to {}, not {found}",
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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::CheckRequest;

    /// The named fast path borrows a key without escapes from the body; an escaped key, and
    /// the field-by-field path (an inline policy), own theirs; `into_owned` changes nothing
    /// but that.
    #[test]
    fn the_key_is_borrowed_on_the_named_fast_path_only() {
        let bodies: [(&[u8], bool); 3] = [
            (br#"{"policy": "api", "key": "alice"}"#, true),
            (br#"{"policy": "api", "key": "al\u0069ce"}"#, false),
            (
                br#"{"key": "alice", "capacity": 2, "refill": 1, "period_ms": 60000}"#,
                false,
            ),
        ];
        for (body, borrowed) in bodies {
            let request = CheckRequest::parse(body).unwrap();
            assert_eq!(request.key, "alice");
            assert_eq!(matches!(request.key, Cow::Borrowed(_)), borrowed);
            let owned = request.clone().into_owned();
            assert!(matches!(owned.key, Cow::Owned(_)));
            assert_eq!(owned, request);
        }
    }
}
