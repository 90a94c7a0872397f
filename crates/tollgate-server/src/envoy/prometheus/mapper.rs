//! prometheus/statsd_exporter's mapping of statsd names to Prometheus names and labels, as
//! envoyproxy/ratelimit's Prometheus sink applies it (`PROMETHEUS_MAPPER_YAML`, or its default
//! mapping): `mappings[]`, each with a `match`, a `name` and `labels` whose `$1`, `${1}` take
//! what the match captured.
//!
//! As statsd_exporter matches: the `glob` mappings first (`*` matches the characters of one
//! dot-free component), in the file's order, the first that matches winning; then, only when no
//! glob matched, the `regex` mappings in order (Go's RE2 syntax, searched anywhere in the name,
//! not anchored). `match_metric_type` restricts a mapping to counters, gauges or observers;
//! `action: drop` drops what it matches. A name no mapping matches keeps its statsd name, each
//! character Prometheus does not take turned into `_` (and `_` put before a leading digit).
//!
//! The file is bounded: read through [`crate::files`] ([`crate::files::Kind::StatsdMapper`]'s
//! cap), at most [`MAX_MAPPINGS`] mappings, each regex compiled within [`MAX_REGEX_BYTES`].
//! Keys statsd_exporter reads only for timers (`timer_type`, `buckets`, `quantiles`, `ttl`,
//! `scale`, ...) are checked for their type and otherwise not used: tollgate maps counters.

use std::fmt;

use regex::{Regex, RegexBuilder};

use crate::descriptors::yaml::{self, Kind, Node, Value};

/// The most mappings a file may hold.
pub const MAX_MAPPINGS: usize = 1_000;

/// The most memory one compiled `match` may take.
pub const MAX_REGEX_BYTES: usize = 1 << 20;

/// What kind of statsd metric a name is (`match_metric_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A counter (`c`).
    Counter,
    /// A gauge (`g`).
    Gauge,
    /// A timer, histogram or distribution (`ms`, `h`, `d`).
    Observer,
}

/// What a statsd name becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapped {
    /// A Prometheus metric: its name, its labels, and the mapping's `help` if it has one.
    Metric {
        /// The name.
        name: String,
        /// The labels, in the mapping's order.
        labels: Vec<(String, String)>,
        /// `help`.
        help: Option<String>,
    },
    /// Dropped (`action: drop`), or mapped to a name Prometheus does not take.
    Drop,
}

/// A mapping file, checked and compiled.
#[derive(Debug, Clone)]
pub struct Mapper {
    globs: Vec<Mapping>,
    regexes: Vec<Mapping>,
    /// The text it was read from, by which two mappers compare.
    text: String,
}

impl PartialEq for Mapper {
    fn eq(&self, other: &Mapper) -> bool {
        self.text == other.text
    }
}

#[derive(Debug, Clone)]
struct Mapping {
    /// Anchored for a glob, as written for a regex.
    pattern: Regex,
    glob: bool,
    name: String,
    labels: Vec<(String, String)>,
    drop: bool,
    metric_type: Option<MetricType>,
    help: Option<String>,
}

/// Why a mapping file is refused: the mapping (its index in `mappings`) and key, with the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapperError {
    /// 1-based.
    pub line: usize,
    /// Where: `mappings[3].match_type`, `defaults`, ...
    pub at: String,
    /// Why.
    pub message: String,
}

impl fmt::Display for MapperError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.at.is_empty() {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            write!(f, "line {}: {}: {}", self.line, self.at, self.message)
        }
    }
}

impl std::error::Error for MapperError {}

fn fail(node: &Node, at: &str, message: impl Into<String>) -> MapperError {
    MapperError {
        line: node.line,
        at: at.to_owned(),
        message: message.into(),
    }
}

/// The keys of a mapping statsd_exporter reads; those after `help` concern timers alone.
const MAPPING_KEYS: [&str; 15] = [
    "match",
    "name",
    "labels",
    "action",
    "match_type",
    "match_metric_type",
    "help",
    "timer_type",
    "observer_type",
    "buckets",
    "quantiles",
    "ttl",
    "scale",
    "summary_options",
    "histogram_options",
];

/// The keys of `defaults`.
const DEFAULT_KEYS: [&str; 7] = [
    "match_type",
    "timer_type",
    "observer_type",
    "buckets",
    "quantiles",
    "glob_disable_ordering",
    "ttl",
];

impl Mapper {
    /// envoyproxy/ratelimit's default mapping (used without `PROMETHEUS_MAPPER_YAML`).
    pub fn upstream_default() -> Mapper {
        // The file is the crate's own and parses (a unit test holds it to that).
        Mapper::parse(DEFAULT_MAPPING).unwrap_or_else(|_| Mapper {
            globs: Vec::new(),
            regexes: Vec::new(),
            text: String::new(),
        })
    }

    /// Checks and compiles the mapping file `text`.
    pub fn parse(text: &str) -> Result<Mapper, MapperError> {
        let root = yaml::parse(text).map_err(|e| MapperError {
            line: e.line,
            at: String::new(),
            message: format!("not YAML: {}", e.message),
        })?;
        let mut mapper = Mapper {
            globs: Vec::new(),
            regexes: Vec::new(),
            text: text.to_owned(),
        };
        let Some(root) = root else {
            return Ok(mapper);
        };
        let pairs = match &root.kind {
            Kind::Map(pairs) => pairs,
            Kind::Scalar(_, Value::Null) => return Ok(mapper),
            _ => return Err(fail(&root, "", "the file must be a map with `mappings`")),
        };
        let mut default_regex = false;
        let mut mappings = None;
        for (key, value) in pairs {
            match key.text().unwrap_or("") {
                "mappings" => mappings = Some(value),
                "defaults" => default_regex = defaults(value)?,
                other => {
                    return Err(fail(
                        key,
                        "",
                        format!(
                            "unknown key `{other}` (a mapping file has `mappings` and `defaults`)"
                        ),
                    ));
                }
            }
        }
        let items = match mappings.map(|m| &m.kind) {
            None | Some(Kind::Scalar(_, Value::Null)) => return Ok(mapper),
            Some(Kind::Seq(items)) => items,
            Some(_) => return Err(fail(&root, "mappings", "must be a list")),
        };
        if items.len() > MAX_MAPPINGS {
            return Err(fail(
                &root,
                "mappings",
                format!(
                    "{} mappings, more than the {MAX_MAPPINGS} allowed",
                    items.len()
                ),
            ));
        }
        for (index, item) in items.iter().enumerate() {
            let mapping = mapping(index, item, default_regex)?;
            if mapping.glob {
                mapper.globs.push(mapping);
            } else {
                mapper.regexes.push(mapping);
            }
        }
        Ok(mapper)
    }

    /// What the statsd metric `name`, of type `kind`, becomes.
    pub fn map(&self, name: &str, kind: MetricType) -> Mapped {
        let wanted = |m: &&Mapping| m.metric_type.is_none_or(|t| t == kind);
        let found = self
            .globs
            .iter()
            .filter(wanted)
            .find_map(|m| m.pattern.captures(name).map(|c| (m, c)))
            .or_else(|| {
                self.regexes
                    .iter()
                    .filter(wanted)
                    .find_map(|m| m.pattern.captures(name).map(|c| (m, c)))
            });
        let Some((mapping, captures)) = found else {
            return Mapped::Metric {
                name: escape(name),
                labels: Vec::new(),
                help: None,
            };
        };
        if mapping.drop {
            return Mapped::Drop;
        }
        let expand = |template: &str| {
            if mapping.glob {
                glob_expand(template, &captures)
            } else {
                let mut out = String::new();
                captures.expand(template, &mut out);
                out
            }
        };
        let metric = expand(&mapping.name);
        if !is_metric_name(&metric) {
            return Mapped::Drop;
        }
        Mapped::Metric {
            name: metric,
            labels: mapping
                .labels
                .iter()
                .map(|(label, template)| (label.clone(), expand(template)))
                .collect(),
            help: mapping.help.clone(),
        }
    }
}

/// envoyproxy/ratelimit's default mapping: its names, as Envoy Gateway's dashboards read them.
const DEFAULT_MAPPING: &str = include_str!("default_mapping.yaml");

/// Checks `defaults`; whether its `match_type` is `regex`.
fn defaults(node: &Node) -> Result<bool, MapperError> {
    let pairs = match &node.kind {
        Kind::Map(pairs) => pairs,
        Kind::Scalar(_, Value::Null) => return Ok(false),
        _ => return Err(fail(node, "defaults", "must be a map")),
    };
    let mut regex = false;
    for (key, value) in pairs {
        let name = key.text().unwrap_or("");
        let at = format!("defaults.{name}");
        if !DEFAULT_KEYS.contains(&name) {
            return Err(fail(
                key,
                &at,
                format!("unknown key (one of {})", DEFAULT_KEYS.join(", ")),
            ));
        }
        if name == "match_type" {
            regex = match_type(value, &at)?;
        }
    }
    Ok(regex)
}

/// Whether a `match_type` says `regex` (`glob` or empty: not).
fn match_type(node: &Node, at: &str) -> Result<bool, MapperError> {
    match scalar(node, at)? {
        "" | "glob" => Ok(false),
        "regex" => Ok(true),
        other => Err(fail(
            node,
            at,
            format!("{other:?} is not a match type (glob or regex)"),
        )),
    }
}

fn scalar<'a>(node: &'a Node, at: &str) -> Result<&'a str, MapperError> {
    match &node.kind {
        Kind::Scalar(_, Value::Null) => Ok(""),
        Kind::Scalar(text, _) => Ok(text),
        _ => Err(fail(
            node,
            at,
            format!("must be a scalar, not {}", node.tag()),
        )),
    }
}

/// The mapping at `index` of `mappings`.
fn mapping(index: usize, node: &Node, default_regex: bool) -> Result<Mapping, MapperError> {
    let here = format!("mappings[{index}]");
    let Kind::Map(pairs) = &node.kind else {
        return Err(fail(node, &here, "must be a map"));
    };
    let mut pattern = None;
    let mut name = None;
    let mut labels = Vec::new();
    let mut drop = false;
    let mut regex = default_regex;
    let mut metric_type = None;
    let mut help = None;
    for (key, value) in pairs {
        let k = key.text().unwrap_or("");
        let at = format!("{here}.{k}");
        match k {
            "match" => pattern = Some((scalar(value, &at)?.to_owned(), value)),
            "name" => name = Some((scalar(value, &at)?.to_owned(), value)),
            "help" => help = Some(scalar(value, &at)?.to_owned()),
            "match_type" => regex = match_type(value, &at)?,
            "action" => {
                drop = match scalar(value, &at)? {
                    "" | "map" => false,
                    "drop" => true,
                    other => {
                        return Err(fail(
                            value,
                            &at,
                            format!("{other:?} is not an action (map or drop)"),
                        ));
                    }
                }
            }
            "match_metric_type" => {
                metric_type = match scalar(value, &at)? {
                    "" => None,
                    "counter" => Some(MetricType::Counter),
                    "gauge" => Some(MetricType::Gauge),
                    "observer" | "timer" => Some(MetricType::Observer),
                    other => {
                        return Err(fail(
                            value,
                            &at,
                            format!("{other:?} is not a metric type (counter, gauge or observer)"),
                        ));
                    }
                }
            }
            "timer_type" | "observer_type" => match scalar(value, &at)? {
                "" | "default" | "histogram" | "summary" => {}
                other => {
                    return Err(fail(
                        value,
                        &at,
                        format!("{other:?} is not a timer type (histogram or summary)"),
                    ));
                }
            },
            "labels" => labels = label_map(value, &at)?,
            _ if MAPPING_KEYS.contains(&k) => {}
            _ => {
                return Err(fail(
                    key,
                    &at,
                    format!("unknown key (one of {})", MAPPING_KEYS.join(", ")),
                ));
            }
        }
    }
    let Some((text, match_node)) = pattern.filter(|(t, _)| !t.is_empty()) else {
        return Err(fail(node, &format!("{here}.match"), "is missing"));
    };
    let at = format!("{here}.match");
    let source = if regex {
        text.clone()
    } else {
        glob_regex(&text).map_err(|e| fail(match_node, &at, e))?
    };
    let compiled = RegexBuilder::new(&source)
        .size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| fail(match_node, &at, format!("not a regex: {e}")))?;
    let name = match name {
        Some((name, name_node)) if !name.is_empty() => {
            if !is_name_template(&name) {
                return Err(fail(
                    name_node,
                    &format!("{here}.name"),
                    format!(
                        "{name:?} is not a metric name (letters, digits, `_` and `$1`-style \
                         captures, not starting with a digit)"
                    ),
                ));
            }
            name
        }
        _ if drop => String::new(),
        _ => return Err(fail(node, &format!("{here}.name"), "is missing")),
    };
    Ok(Mapping {
        pattern: compiled,
        glob: !regex,
        name,
        labels,
        drop,
        metric_type,
        help,
    })
}

fn label_map(node: &Node, at: &str) -> Result<Vec<(String, String)>, MapperError> {
    let pairs = match &node.kind {
        Kind::Map(pairs) => pairs,
        Kind::Scalar(_, Value::Null) => return Ok(Vec::new()),
        _ => return Err(fail(node, at, "must be a map of label names to values")),
    };
    let mut labels: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        let label = key.text().unwrap_or("");
        let here = format!("{at}.{label}");
        if !is_label_name(label) {
            return Err(fail(
                key,
                &here,
                "is not a label name (letters, digits and `_`, not starting with a digit nor `__`)",
            ));
        }
        if labels.iter().any(|(l, _)| l == label) {
            return Err(fail(key, &here, "is given twice"));
        }
        labels.push((label.to_owned(), scalar(value, &here)?.to_owned()));
    }
    Ok(labels)
}

/// The anchored regex of a glob: components of letters, digits, `_`, `-` and `*`, each `*` a
/// capture of dot-free characters.
fn glob_regex(glob: &str) -> Result<String, String> {
    let mut out = String::from("^");
    for (i, component) in glob.split('.').enumerate() {
        let ok = !component.is_empty()
            && component
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*'));
        if !ok {
            return Err(format!(
                "{glob:?} is not a glob (dot-separated components of letters, digits, `_`, `-` \
                 and `*`); say `match_type: regex` for a regex"
            ));
        }
        if i > 0 {
            out.push_str("\\.");
        }
        for c in component.chars() {
            if c == '*' {
                out.push_str("([^.]*)");
            } else {
                out.push(c);
            }
        }
    }
    out.push('$');
    Ok(out)
}

/// statsd_exporter's glob templates: `$N` and `${N}` are the Nth `*`'s text; other text stays.
fn glob_expand(template: &str, captures: &regex::Captures<'_>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (digits, consumed) = match after.strip_prefix('{') {
            Some(inner) => match inner.find('}') {
                Some(end) if end > 0 && inner[..end].bytes().all(|b| b.is_ascii_digit()) => {
                    (&inner[..end], end + 2)
                }
                _ => ("", 0),
            },
            None => {
                let end = after
                    .bytes()
                    .position(|b| !b.is_ascii_digit())
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        match digits.parse::<usize>() {
            Ok(n) if consumed > 0 => {
                out.push_str(captures.get(n).map_or("", |m| m.as_str()));
                rest = &after[consumed..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A name statsd_exporter gives a statsd name no mapping matched.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// Whether Prometheus takes `name` as a metric name.
pub fn is_metric_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with("__")
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A `name` with its captures: what Prometheus takes once each `$N`/`${N}` is replaced by a
/// word.
fn is_name_template(name: &str) -> bool {
    let stripped: String = {
        let mut out = String::new();
        let mut chars = name.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '$' {
                out.push(c);
                continue;
            }
            let braced = chars.next_if_eq(&'{').is_some();
            let mut digits = 0;
            while chars.next_if(char::is_ascii_digit).is_some() {
                digits += 1;
            }
            if digits == 0 || (braced && chars.next_if_eq(&'}').is_none()) {
                return false;
            }
            out.push('x');
        }
        out
    };
    is_metric_name(&stripped)
}

#[cfg(test)]
mod tests;
