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
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};

/// The metadata of `request`.
pub(super) fn of(request: &RateLimitRequest) -> Struct {
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
    Struct { fields }
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
