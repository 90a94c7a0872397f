//! The answer's `dynamic_metadata` under `response_dynamic_metadata` (`RESPONSE_DYNAMIC_METADATA`),
//! as envoyproxy/ratelimit fills it: the request's `domain`; its `descriptors`, each with its
//! `entries` as `"key=value"` strings, its own `limit` (in protobuf's text form) and its own
//! `hitsAddend` when it sets them; and the request's `hitsAddend` when it is not 0. Envoy puts
//! it under the filter's namespace, `envoy.filters.http.ratelimit`, for its access logs and the
//! filters after it.

use std::collections::HashMap;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};

use super::plan::Part;

/// The metadata of `request`, planned into `parts` and answered with `statuses`.
pub(super) fn of(
    request: &RateLimitRequest,
    parts: &[Part],
    statuses: &[DescriptorStatus],
) -> Struct {
    let mut fields = HashMap::with_capacity(3);
    fields.insert("domain".to_owned(), text(request.domain.clone()));
    fields.insert(
        "descriptors".to_owned(),
        list(request.descriptors.iter().map(descriptor).collect()),
    );
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            number(f64::from(request.hits_addend)),
        );
    }
    // The limits passed: counted and not over (a shadow limit over is OK in its status, and
    // passed, as upstream counts it); unlimited and unmatched descriptors have no limit. A
    // limit whose metrics key holds the request's values (`detailed_metric`, `value_to_metric`)
    // brings none: upstream makes those limits anew for the request, without their metadata.
    let mut passed = serde_json::Map::new();
    for (part, status) in parts.iter().zip(statuses) {
        if let Part::Counted { limit, .. } = part
            && status.code != Code::OverLimit as i32
            && !limit.detailed
            && let Some(metadata) = &limit.rule.metadata
        {
            merge(&mut passed, metadata);
        }
    }
    if !passed.is_empty() {
        fields.insert(
            "metadata".to_owned(),
            value(Kind::StructValue(structure(&passed))),
        );
    }
    Struct { fields }
}

/// `from`'s keys added to `into`'s: a key `into` has stays, but two maps merge.
fn merge(
    into: &mut serde_json::Map<String, serde_json::Value>,
    from: &serde_json::Map<String, serde_json::Value>,
) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (Some(serde_json::Value::Object(mine)), serde_json::Value::Object(theirs)) => {
                merge(mine, theirs);
            }
            (Some(_), _) => {}
            (None, _) => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

/// A JSON object as protobuf's `Struct`.
fn structure(map: &serde_json::Map<String, serde_json::Value>) -> Struct {
    Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect(),
    }
}

fn from_json(json: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    value(match json {
        J::Null => Kind::NullValue(0),
        J::Bool(b) => Kind::BoolValue(*b),
        J::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        J::String(s) => Kind::StringValue(s.clone()),
        J::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(from_json).collect(),
        }),
        J::Object(map) => Kind::StructValue(structure(map)),
    })
}

/// One descriptor's fields.
fn descriptor(descriptor: &RateLimitDescriptor) -> Value {
    let mut fields = HashMap::with_capacity(3);
    let entries = descriptor
        .entries
        .iter()
        .map(|e| text(format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert("entries".to_owned(), list(entries));
    if let Some(limit) = &descriptor.limit {
        fields.insert("limit".to_owned(), text(override_text(limit)));
    }
    if let Some(hits) = &descriptor.hits_addend {
        // A double, as protobuf's Struct holds every number (exact up to 2^53).
        #[allow(clippy::cast_precision_loss)]
        fields.insert("hitsAddend".to_owned(), number(hits.value as f64));
    }
    value(Kind::StructValue(Struct { fields }))
}

/// A `RateLimitOverride` in protobuf's text form, as Go's `String()` writes it: the fields
/// that are set, `name:value`, the unit by its enum name (its number when it has none).
fn override_text(limit: &RateLimitOverride) -> String {
    let mut parts = Vec::with_capacity(2);
    if limit.requests_per_unit != 0 {
        parts.push(format!("requests_per_unit:{}", limit.requests_per_unit));
    }
    if limit.unit != 0 {
        parts.push(match RateLimitUnit::try_from(limit.unit) {
            Ok(unit) => format!("unit:{}", unit.as_str_name()),
            Err(_) => format!("unit:{}", limit.unit),
        });
    }
    parts.join(" ")
}

fn value(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn text(s: String) -> Value {
    value(Kind::StringValue(s))
}

fn number(n: f64) -> Value {
    value(Kind::NumberValue(n))
}

fn list(values: Vec<Value>) -> Value {
    value(Kind::ListValue(ListValue { values }))
}
