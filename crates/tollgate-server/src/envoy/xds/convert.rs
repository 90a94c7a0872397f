//! A response's resources as the file loader's decoded files: each `RateLimitConfig` becomes
//! what its YAML would decode to (envoyproxy/ratelimit converts them to its YAML structs the
//! same way), then goes through the loader's checks, named by the resource's `name` as a file
//! is by its path. The protocol has no `value_to_metric` or `share_threshold`: both stay off,
//! as upstream leaves them; a descriptor's `metadata` is kept as a file's is (for the answers'
//! dynamic metadata).

use std::collections::HashMap;
use std::path::PathBuf;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::protobuf::{Value, value::Kind};
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message;

use super::settings::MAX_RESOURCES;
use crate::descriptors::config::decode::{Descriptor, RateLimit, Root};
use crate::descriptors::config::{EnvoyConfig, LoadError};

/// The resource type tollgate asks for.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Loads `response`'s resources (every one decoded first, as upstream does, then loaded in
/// their order), or says why not, in the words the management server is sent back. A response
/// of another type is refused whole: read as an empty config, it would drop every rule.
pub(super) fn load(
    response: &DiscoveryResponse,
    merge_domains: bool,
) -> Result<EnvoyConfig, LoadError> {
    let unnamed = |message: String| LoadError {
        file: None,
        message,
    };
    if response.type_url != TYPE_URL {
        return Err(unnamed(format!(
            "a response of type {:?}, where {TYPE_URL:?} was asked for",
            response.type_url
        )));
    }
    let resources = &response.resources;
    if resources.len() > MAX_RESOURCES {
        return Err(unnamed(format!(
            "the response holds {} resources, more than the {MAX_RESOURCES} accepted",
            resources.len()
        )));
    }
    let mut files = Vec::with_capacity(resources.len());
    for any in resources {
        if any.type_url != TYPE_URL {
            return Err(unnamed(format!(
                "mismatched message type: got {:?}, want {TYPE_URL:?}",
                any.type_url
            )));
        }
        let config = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| unnamed(format!("cannot decode a RateLimitConfig: {e}")))?;
        files.push(Ok((PathBuf::from(&config.name), root(config))));
    }
    EnvoyConfig::load_decoded(files, merge_domains)
}

fn root(config: RateLimitConfig) -> Root {
    Root {
        domain: config.domain,
        descriptors: descriptors(config.descriptors),
    }
}

fn descriptors(list: Vec<RateLimitDescriptor>) -> Vec<Descriptor> {
    list.into_iter()
        .map(|d| Descriptor {
            key: d.key,
            value: d.value,
            rate_limit: d.rate_limit.map(policy),
            descriptors: descriptors(d.descriptors),
            shadow_mode: d.shadow_mode,
            quota_mode: d.quota_mode,
            detailed_metric: d.detailed_metric,
            value_to_metric: false,
            share_threshold: false,
            metadata: d.metadata.map(|s| map(s.fields)).filter(|m| !m.is_empty()),
        })
        .collect()
}

/// A descriptor's `metadata` as the file loader keeps it (upstream's `structpbToMap`; an empty
/// one is none, as an empty map in a file is).
fn map(fields: HashMap<String, Value>) -> serde_json::Map<String, serde_json::Value> {
    fields.into_iter().map(|(k, v)| (k, json(v))).collect()
}

/// A protobuf `Value` in JSON's terms: a number that is not finite (which JSON cannot hold) as
/// null, as the file loader has it.
fn json(value: Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value.kind {
        None | Some(Kind::NullValue(_)) => J::Null,
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(n).map_or(J::Null, J::Number),
        Some(Kind::StringValue(s)) => J::String(s),
        Some(Kind::BoolValue(b)) => J::Bool(b),
        Some(Kind::StructValue(s)) => J::Object(map(s.fields)),
        Some(Kind::ListValue(l)) => J::Array(l.values.into_iter().map(json).collect()),
    }
}

fn policy(p: RateLimitPolicy) -> RateLimit {
    RateLimit {
        requests_per_unit: p.requests_per_unit,
        unit: unit_name(p.unit),
        unlimited: p.unlimited,
        name: p.name,
        replaces: p.replaces.into_iter().map(|r| r.name).collect(),
    }
}

/// The unit's name as Go's generated `String()` gives it: `UNKNOWN` for 0 (refused unless
/// unlimited, as in a file), the number for one the protocol does not know.
fn unit_name(unit: i32) -> String {
    RateLimitUnit::try_from(unit).map_or_else(|_| unit.to_string(), |u| u.as_str_name().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::Any;
    use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace;

    fn load(resources: &[Any], merge_domains: bool) -> Result<EnvoyConfig, LoadError> {
        let response = DiscoveryResponse {
            type_url: TYPE_URL.to_owned(),
            resources: resources.to_vec(),
            ..DiscoveryResponse::default()
        };
        super::load(&response, merge_domains)
    }

    fn any(config: &RateLimitConfig) -> Any {
        Any {
            type_url: TYPE_URL.to_owned(),
            value: config.encode_to_vec(),
        }
    }

    fn limit(unit: RateLimitUnit, n: u32) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        })
    }

    fn descriptor(
        key: &str,
        value: &str,
        rate_limit: Option<RateLimitPolicy>,
    ) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.to_owned(),
            value: value.to_owned(),
            rate_limit,
            ..RateLimitDescriptor::default()
        }
    }

    fn config(name: &str, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
        RateLimitConfig {
            name: name.to_owned(),
            domain: domain.to_owned(),
            descriptors,
        }
    }

    #[test]
    fn every_feature_of_a_file_loads_alike() {
        let mut nested = descriptor("rule-0-match-0", "", None);
        let mut month = descriptor("rule-0-match-1", "x", limit(RateLimitUnit::Month, 5));
        month.shadow_mode = true;
        month.detailed_metric = true;
        nested.descriptors = vec![month];
        let mut replacing = descriptor("k", "v", limit(RateLimitUnit::Year, 1));
        if let Some(p) = replacing.rate_limit.as_mut() {
            p.name = "yearly".to_owned();
            p.replaces = vec![RateLimitReplace {
                name: "other".to_owned(),
            }];
        }
        let unlimited = descriptor(
            "free",
            "",
            Some(RateLimitPolicy {
                unlimited: true,
                ..RateLimitPolicy::default()
            }),
        );
        let mut week = descriptor("w", "", limit(RateLimitUnit::Week, 7));
        let value = |kind| Value { kind: Some(kind) };
        let inner = envoy_types::pb::google::protobuf::Struct {
            fields: [("x".to_owned(), value(Kind::BoolValue(true)))].into(),
        };
        week.metadata = Some(envoy_types::pb::google::protobuf::Struct {
            fields: [
                ("team".to_owned(), value(Kind::StringValue("a".to_owned()))),
                ("count".to_owned(), value(Kind::NumberValue(2.0))),
                ("nested".to_owned(), value(Kind::StructValue(inner))),
            ]
            .into(),
        });
        let loaded = load(
            &[any(&config(
                "listener/http",
                "edge",
                vec![nested, replacing, unlimited, week],
            ))],
            false,
        )
        .unwrap();
        let yaml = "domain: edge\ndescriptors:\n- key: rule-0-match-0\n  descriptors:\n  - key: rule-0-match-1\n    value: x\n    shadow_mode: true\n    detailed_metric: true\n    rate_limit: {unit: month, requests_per_unit: 5}\n- key: k\n  value: v\n  rate_limit: {unit: YEAR, requests_per_unit: 1, name: yearly, replaces: [{name: other}]}\n- key: free\n  rate_limit: {unlimited: true}\n- key: w\n  rate_limit: {unit: week, requests_per_unit: 7}\n  metadata: {team: a, count: 2, nested: {x: true}}\n";
        let file = EnvoyConfig::load(&vec![(PathBuf::from("f"), yaml.as_bytes().to_vec())], false)
            .unwrap();
        assert_eq!(loaded.dump(), file.dump());
        let mut a = loaded.rules();
        let mut b = file.rules();
        a.sort_by(|x, y| x.1.full_key.cmp(&y.1.full_key));
        b.sort_by(|x, y| x.1.full_key.cmp(&y.1.full_key));
        assert_eq!(a, b);
        assert_eq!(loaded.files(), 1);
    }

    #[test]
    fn bad_configs_are_refused_in_upstreams_words_named_by_resource() {
        let cases = [
            (
                config("r1", "", vec![]),
                "r1: config file cannot have empty domain",
            ),
            (
                config("r2", "d", vec![descriptor("", "", None)]),
                "r2: descriptor has empty key",
            ),
            (
                config(
                    "r3",
                    "d",
                    vec![descriptor("k", "", limit(RateLimitUnit::Unknown, 1))],
                ),
                "r3: invalid rate limit unit 'UNKNOWN'",
            ),
            (
                config(
                    "r4",
                    "d",
                    vec![descriptor("k", "v", None), descriptor("k", "v", None)],
                ),
                "r4: duplicate descriptor composite key 'd.k_v'",
            ),
        ];
        for (config, message) in cases {
            let error = load(&[any(&config)], false).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
        let mut odd = descriptor("k", "", limit(RateLimitUnit::Second, 1));
        if let Some(p) = odd.rate_limit.as_mut() {
            p.unit = 42;
        }
        let error = load(&[any(&config("r5", "d", vec![odd]))], false).unwrap_err();
        assert_eq!(error.to_string(), "r5: invalid rate limit unit '42'");
    }

    #[test]
    fn several_resources_are_several_files() {
        let a = config(
            "a",
            "d",
            vec![descriptor("k", "1", limit(RateLimitUnit::Second, 1))],
        );
        let b = config(
            "b",
            "d",
            vec![descriptor("k", "2", limit(RateLimitUnit::Second, 1))],
        );
        let error = load(&[any(&a), any(&b)], false).unwrap_err();
        assert_eq!(error.to_string(), "b: duplicate domain 'd' in config file");
        let merged = load(&[any(&a), any(&b)], true).unwrap();
        assert_eq!(
            (merged.domains(), merged.files(), merged.rules().len()),
            (1, 2, 2)
        );
    }

    #[test]
    fn what_is_not_a_rate_limit_config_is_refused() {
        let wrong = Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned(),
            value: Vec::new(),
        };
        let error = load(&[wrong], false).unwrap_err();
        assert!(
            error.message.starts_with("mismatched message type"),
            "{error}"
        );
        let garbage = Any {
            type_url: TYPE_URL.to_owned(),
            value: vec![0xff; 8],
        };
        let error = load(&[garbage], false).unwrap_err();
        assert!(
            error.message.starts_with("cannot decode a RateLimitConfig"),
            "{error}"
        );
    }
}
