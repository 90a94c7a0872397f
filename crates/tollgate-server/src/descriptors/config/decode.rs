//! A file's YAML checked and decoded as envoyproxy/ratelimit does: first every key against its
//! allowlist (`validateYamlKeys`), then the typed decode (yaml.v2's `Unmarshal` into its
//! structs, whose type errors are collected and worded as yaml.v2 words them).

use super::super::yaml::{Kind, Node, Value};

/// The keys a file may use, at any depth (envoyproxy/ratelimit's allowlist).
const KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// A file, decoded.
#[derive(Debug, Default)]
pub(crate) struct Root {
    pub(crate) domain: String,
    pub(crate) descriptors: Vec<Descriptor>,
}

/// `descriptors[]`.
#[derive(Debug, Default)]
pub(crate) struct Descriptor {
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) rate_limit: Option<RateLimit>,
    pub(crate) descriptors: Vec<Descriptor>,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) detailed_metric: bool,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: bool,
    /// `metadata`, as yaml.v2 decodes it and `structpb.NewStruct` keeps it (`None` when absent
    /// or empty).
    pub(crate) metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `rate_limit`.
#[derive(Debug, Default)]
pub(crate) struct RateLimit {
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: String,
    pub(crate) unlimited: bool,
    pub(crate) name: String,
    pub(crate) replaces: Vec<String>,
}

/// The keys of `node` and below, as `validateYamlKeys` checks them (in document order).
pub(super) fn validate_keys(node: &Node) -> Result<(), String> {
    let Kind::Map(pairs) = &node.kind else {
        return Ok(());
    };
    for (i, (key, value)) in pairs.iter().enumerate() {
        // yaml.v2 decodes a map before this check sees it: of a key given twice, the last
        // value is the one checked.
        if key.text().is_some() && pairs[i + 1..].iter().any(|(k, _)| k.text() == key.text()) {
            continue;
        }
        let name = match &key.kind {
            Kind::Scalar(text, Value::Str) => text.as_str(),
            _ => {
                return Err(format!(
                    "config error, key is not of type string: {}",
                    key.go_value()
                ));
            }
        };
        if !KEYS.contains(&name) {
            return Err(format!("config error, unknown key '{name}'"));
        }
        if name == "metadata" {
            continue;
        }
        match &value.kind {
            Kind::Seq(items) => {
                for item in items {
                    if !matches!(item.kind, Kind::Map(_)) {
                        return Err(format!(
                            "config error, yaml file contains list of type other than map: {}",
                            item.go_value()
                        ));
                    }
                    validate_keys(item)?;
                }
            }
            Kind::Map(_) => validate_keys(value)?,
            Kind::Scalar(_, Value::Float(_)) => return Err("error checking config".to_owned()),
            // A uint64 in Go: neither `int` nor any type the check lets through.
            Kind::Scalar(_, Value::Int(i)) if *i > i128::from(i64::MAX) => {
                return Err("error checking config".to_owned());
            }
            Kind::Scalar(..) => {}
        }
    }
    Ok(())
}

/// The typed decode's errors, collected as yaml.v2 collects them.
#[derive(Default)]
struct Errors(Vec<String>);

impl Errors {
    fn wrong(&mut self, node: &Node, into: &str) {
        self.0.push(cannot_unmarshal(node, into));
    }
}

/// yaml.v2's words for `node` that does not decode into the Go type `into`.
pub(super) fn cannot_unmarshal(node: &Node, into: &str) -> String {
    let value = match &node.kind {
        Kind::Scalar(text, _) => {
            // yaml.v2 shortens a long value to its first 7 characters.
            let shown: String = if text.chars().count() > 10 {
                text.chars().take(7).chain("...".chars()).collect()
            } else {
                text.clone()
            };
            format!(" `{shown}`")
        }
        _ => String::new(),
    };
    format!(
        "line {}: cannot unmarshal {}{value} into {into}",
        node.line,
        node.tag()
    )
}

/// Decodes a file whose keys passed [`validate_keys`]; `None` is an empty document.
pub(super) fn decode(node: Option<&Node>) -> Result<Root, String> {
    let mut errors = Errors::default();
    let mut root = Root::default();
    if let Some(node) = node {
        match &node.kind {
            Kind::Map(pairs) => {
                for (key, value) in pairs {
                    match key.text() {
                        Some("domain") => root.domain = string(value, &mut errors),
                        Some("descriptors") => root.descriptors = descriptors(value, &mut errors),
                        _ => {}
                    }
                }
            }
            Kind::Scalar(_, Value::Null) => {}
            _ => errors.wrong(node, "config.YamlRoot"),
        }
    }
    if errors.0.is_empty() {
        Ok(root)
    } else {
        Err(format!(
            "error loading config file: yaml: unmarshal errors:\n  {}",
            errors.0.join("\n  ")
        ))
    }
}

fn string(node: &Node, errors: &mut Errors) -> String {
    match &node.kind {
        Kind::Scalar(_, Value::Null) => String::new(),
        Kind::Scalar(text, _) => text.clone(),
        _ => {
            errors.wrong(node, "string");
            String::new()
        }
    }
}

fn boolean(node: &Node, errors: &mut Errors) -> bool {
    match &node.kind {
        Kind::Scalar(_, Value::Bool(b)) => *b,
        Kind::Scalar(_, Value::Null) => false,
        _ => {
            errors.wrong(node, "bool");
            false
        }
    }
}

fn uint32(node: &Node, errors: &mut Errors) -> u32 {
    match &node.kind {
        Kind::Scalar(_, Value::Null) => 0,
        Kind::Scalar(_, Value::Int(i)) if u32::try_from(*i).is_ok() => *i as u32,
        _ => {
            errors.wrong(node, "uint32");
            0
        }
    }
}

/// The maps of a list (its other items were refused by [`validate_keys`]); `into` names the
/// Go type a list decodes into.
fn maps<'n>(node: &'n Node, into: &str, errors: &mut Errors) -> Vec<&'n [(Node, Node)]> {
    match &node.kind {
        Kind::Scalar(_, Value::Null) => Vec::new(),
        Kind::Seq(items) => items
            .iter()
            .filter_map(|item| match &item.kind {
                Kind::Map(pairs) => Some(pairs.as_slice()),
                Kind::Scalar(_, Value::Null) => None,
                _ => {
                    errors.wrong(item, into.trim_start_matches("[]"));
                    None
                }
            })
            .collect(),
        _ => {
            errors.wrong(node, into);
            Vec::new()
        }
    }
}

fn descriptors(node: &Node, errors: &mut Errors) -> Vec<Descriptor> {
    maps(node, "[]config.YamlDescriptor", errors)
        .into_iter()
        .map(|pairs| {
            let mut d = Descriptor::default();
            for (key, value) in pairs {
                match key.text() {
                    Some("key") => d.key = string(value, errors),
                    Some("value") => d.value = string(value, errors),
                    Some("rate_limit") => d.rate_limit = rate_limit(value, errors),
                    Some("descriptors") => d.descriptors = descriptors(value, errors),
                    Some("shadow_mode") => d.shadow_mode = boolean(value, errors),
                    Some("quota_mode") => d.quota_mode = boolean(value, errors),
                    Some("detailed_metric") => d.detailed_metric = boolean(value, errors),
                    Some("value_to_metric") => d.value_to_metric = boolean(value, errors),
                    Some("share_threshold") => d.share_threshold = boolean(value, errors),
                    Some("metadata") => d.metadata = metadata(value, errors),
                    _ => {}
                }
            }
            d
        })
        .collect()
}

fn rate_limit(node: &Node, errors: &mut Errors) -> Option<RateLimit> {
    let pairs = match &node.kind {
        Kind::Scalar(_, Value::Null) => return None,
        Kind::Map(pairs) => pairs,
        _ => {
            errors.wrong(node, "config.YamlRateLimit");
            return None;
        }
    };
    let mut limit = RateLimit::default();
    for (key, value) in pairs {
        match key.text() {
            Some("requests_per_unit") => limit.requests_per_unit = uint32(value, errors),
            Some("unit") => limit.unit = string(value, errors),
            Some("unlimited") => limit.unlimited = boolean(value, errors),
            Some("name") => limit.name = string(value, errors),
            Some("replaces") => {
                limit.replaces = maps(value, "[]config.yamlReplaces", errors)
                    .into_iter()
                    .map(|pairs| {
                        pairs
                            .iter()
                            .filter(|(k, _)| k.text() == Some("name"))
                            .map(|(_, v)| string(v, errors))
                            .next_back()
                            .unwrap_or_default()
                    })
                    .collect();
            }
            _ => {}
        }
    }
    Some(limit)
}

/// `metadata`: a map with scalar keys, which yaml.v2 decodes as strings; kept as
/// envoyproxy/ratelimit keeps it (`structpb.NewStruct`: numbers as doubles, nested maps' keys as
/// Go's `%v` prints them) for the answers' dynamic metadata. Empty: none.
fn metadata(
    node: &Node,
    errors: &mut Errors,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    match &node.kind {
        Kind::Scalar(_, Value::Null) => None,
        Kind::Map(pairs) => {
            for (key, _) in pairs {
                if !matches!(key.kind, Kind::Scalar(..)) {
                    errors.wrong(key, "string");
                }
            }
            match json(node) {
                serde_json::Value::Object(map) if !map.is_empty() => Some(map),
                _ => None,
            }
        }
        _ => {
            errors.wrong(node, "map[string]interface {}");
            None
        }
    }
}

/// `node` as a protobuf `Value` holds it, in JSON's terms: a number that is not finite (which
/// JSON cannot hold) as null.
fn json(node: &Node) -> serde_json::Value {
    use serde_json::Value as J;
    match &node.kind {
        Kind::Scalar(_, Value::Null) => J::Null,
        Kind::Scalar(_, Value::Bool(b)) => J::Bool(*b),
        // protobuf's Struct holds every number as a double.
        #[allow(clippy::cast_precision_loss)]
        Kind::Scalar(_, Value::Int(i)) => {
            serde_json::Number::from_f64(*i as f64).map_or(J::Null, J::Number)
        }
        Kind::Scalar(_, Value::Float(f)) => {
            serde_json::Number::from_f64(*f).map_or(J::Null, J::Number)
        }
        Kind::Scalar(text, Value::Str) => J::String(text.clone()),
        Kind::Seq(items) => J::Array(items.iter().map(json).collect()),
        Kind::Map(pairs) => J::Object(pairs.iter().map(|(k, v)| (k.go_value(), json(v))).collect()),
    }
}
