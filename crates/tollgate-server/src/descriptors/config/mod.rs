//! A directory of envoyproxy/ratelimit YAML files, loaded as that service loads them: the same
//! keys, the same checks in the same order, the same error messages (each prefixed by the
//! file), one domain per file unless domains are merged.
//!
//! Which files: every regular file under the directory, recursively and in sorted order (the
//! service's runtime loader takes every file, whatever its extension), skipping names that
//! start with a dot, as it does with `RUNTIME_IGNOREDOTFILES=true`: Kubernetes mounts a
//! ConfigMap as dot-named directories (`..data`, `..2026_11_25...`) beside links to the
//! files, and reading those too would load each file twice.

pub(crate) mod decode;
mod files;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use files::{MAX_FILES, MAX_TOTAL_BYTES, Snapshot, read_dir};

use super::yaml;

/// A time unit of envoyproxy/ratelimit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// A second.
    Second,
    /// A minute.
    Minute,
    /// An hour.
    Hour,
    /// A day.
    Day,
    /// Seven days.
    Week,
    /// Thirty days, as envoyproxy/ratelimit counts a month.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// The unit a file names, in any case.
    pub fn parse(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// Its length in seconds (envoyproxy/ratelimit's `UnitToDivider`).
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// Its name in the protocol and in `/rlconfig`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// Its number in `RateLimitResponse.RateLimit.Unit`.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit numbered `n` in the protocol (a request's override; `0`, UNKNOWN, is none).
    pub fn from_proto(n: i32) -> Option<Unit> {
        Some(match n {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }
}

/// A descriptor's `rate_limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its place in the config: `domain.key_value.key` (its metrics' key).
    pub full_key: Arc<str>,
    /// `requests_per_unit` (0 denies every request that counts).
    pub requests_per_unit: u32,
    /// `unit` (`None` only when unlimited).
    pub unit: Option<Unit>,
    /// `unlimited`.
    pub unlimited: bool,
    /// `name` (empty when none).
    pub name: String,
    /// `replaces`: the names of the limits it lifts from a request it applies to.
    pub replaces: Vec<String>,
    /// The descriptor's `shadow_mode`.
    pub shadow_mode: bool,
    /// The descriptor's `quota_mode`.
    pub quota_mode: bool,
    /// The descriptor's `detailed_metric`.
    pub detailed_metric: bool,
    /// The descriptor's `metadata` (none when absent or empty): what an answer's dynamic
    /// metadata carries of the limits a request passed.
    pub metadata: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
}

/// One level of a domain's descriptors.
#[derive(Debug, Clone, Default)]
pub(crate) struct Level {
    /// By `key_value`, or `key` alone for a default (wildcards too, by their pattern).
    pub(crate) exact: HashMap<String, Descriptor>,
    /// The wildcard patterns, in load order: the `key_value` and its parts between `*`s.
    pub(crate) wildcards: Vec<(String, Vec<String>)>,
}

/// A configured descriptor.
#[derive(Debug, Clone)]
pub(crate) struct Descriptor {
    pub(crate) rule: Option<Arc<Rule>>,
    pub(crate) children: Level,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: bool,
}

/// A domain's descriptors.
#[derive(Debug, Clone)]
pub struct Domain {
    pub(crate) root: Level,
}

/// The loaded files: their domains.
#[derive(Debug, Clone, Default)]
pub struct EnvoyConfig {
    domains: Arc<BTreeMap<String, Domain>>,
    files: usize,
}

/// Why the files were refused: the file (`None` for the directory) and envoyproxy/ratelimit's
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The file at fault (for a config over xDS, the resource's name).
    pub file: Option<PathBuf>,
    /// What is wrong, as envoyproxy/ratelimit words it.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{}: {}", file.display(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for LoadError {}

impl EnvoyConfig {
    /// Reads and loads every file under `dir`.
    pub fn load_dir(dir: &Path, merge_domains: bool) -> Result<EnvoyConfig, LoadError> {
        EnvoyConfig::load(&read_dir(dir)?, merge_domains)
    }

    /// Loads `files` (a path and its contents each), in their order.
    pub fn load(files: &Snapshot, merge_domains: bool) -> Result<EnvoyConfig, LoadError> {
        EnvoyConfig::load_decoded(
            files.iter().map(|(path, bytes)| {
                parse_file(bytes)
                    .map(|root| (path.clone(), root))
                    .map_err(|message| LoadError {
                        file: Some(path.clone()),
                        message,
                    })
            }),
            merge_domains,
        )
    }

    /// Loads files already decoded (each named by its path, or by its xDS resource's name),
    /// in their order: the one path every source of config goes through, so that a file and
    /// an xDS resource of the same content load alike. A file that failed to decode refuses
    /// the whole, as it comes in the order.
    pub(crate) fn load_decoded(
        files: impl IntoIterator<Item = Result<(PathBuf, decode::Root), LoadError>>,
        merge_domains: bool,
    ) -> Result<EnvoyConfig, LoadError> {
        let mut domains: BTreeMap<String, Domain> = BTreeMap::new();
        let mut count = 0;
        for file in files {
            let (path, root) = file?;
            count += 1;
            let refuse = |message: String| LoadError {
                file: Some(path.clone()),
                message,
            };
            if root.domain.is_empty() {
                return Err(refuse("config file cannot have empty domain".to_owned()));
            }
            let parent = format!("{}.", root.domain);
            match domains.get_mut(&root.domain) {
                Some(_) if !merge_domains => {
                    return Err(refuse(format!(
                        "duplicate domain '{}' in config file",
                        root.domain
                    )));
                }
                Some(domain) => {
                    load_descriptors(&mut domain.root, &parent, root.descriptors)
                        .map_err(refuse)?;
                }
                None => {
                    let mut level = Level::default();
                    load_descriptors(&mut level, &parent, root.descriptors).map_err(refuse)?;
                    domains.insert(root.domain, Domain { root: level });
                }
            }
        }
        Ok(EnvoyConfig {
            domains: Arc::new(domains),
            files: count,
        })
    }

    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// The domains' names, sorted.
    pub fn domain_names(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// How many domains there are.
    pub fn domains(&self) -> usize {
        self.domains.len()
    }

    /// How many files they came from.
    pub fn files(&self) -> usize {
        self.files
    }

    /// Every rule, by domain.
    pub fn rules(&self) -> Vec<(&str, Arc<Rule>)> {
        let mut rules = Vec::new();
        for (name, domain) in self.domains.iter() {
            collect(&domain.root, &mut |rule| rules.push((name.as_str(), rule)));
        }
        rules
    }

    /// The loaded config as envoyproxy/ratelimit's `/rlconfig` prints it, one line per rule
    /// (sorted, where that service prints in hash order).
    pub fn dump(&self) -> String {
        let mut rules: Vec<Arc<Rule>> = self.rules().into_iter().map(|(_, r)| r).collect();
        rules.sort_by(|a, b| a.full_key.cmp(&b.full_key));
        rules
            .iter()
            .map(|r| {
                format!(
                    "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}\n",
                    r.full_key,
                    r.unit
                        .filter(|_| !r.unlimited)
                        .map_or("UNKNOWN", Unit::name),
                    r.requests_per_unit,
                    r.shadow_mode,
                    r.quota_mode
                )
            })
            .collect()
    }
}

fn collect(level: &Level, out: &mut dyn FnMut(Arc<Rule>)) {
    for descriptor in level.exact.values() {
        if let Some(rule) = &descriptor.rule {
            out(Arc::clone(rule));
        }
        collect(&descriptor.children, out);
    }
}

/// A file's YAML, its keys checked and its values decoded.
fn parse_file(bytes: &[u8]) -> Result<decode::Root, String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("error loading config file: yaml: invalid UTF-8 ({e})"))?;
    let node = yaml::parse(text).map_err(|e| {
        format!(
            "error loading config file: yaml: line {}: {}",
            e.line, e.message
        )
    })?;
    if let Some(node) = &node {
        match &node.kind {
            yaml::Kind::Map(_) | yaml::Kind::Scalar(_, yaml::Value::Null) => {}
            _ => {
                return Err(format!(
                    "error loading config file: yaml: unmarshal errors:\n  {}",
                    decode::cannot_unmarshal(node, "map[interface {}]interface {}")
                ));
            }
        }
        decode::validate_keys(node)?;
    }
    decode::decode(node.as_ref())
}

/// Adds `descriptors` to `level`, checking each as envoyproxy/ratelimit's `loadDescriptors`
/// does, in its order.
fn load_descriptors(
    level: &mut Level,
    parent: &str,
    descriptors: Vec<decode::Descriptor>,
) -> Result<(), String> {
    for d in descriptors {
        if d.key.is_empty() {
            return Err("descriptor has empty key".to_owned());
        }
        let final_key = if d.value.is_empty() {
            d.key.clone()
        } else {
            format!("{}_{}", d.key, d.value)
        };
        let full_key = format!("{parent}{final_key}");
        if level.exact.contains_key(&final_key) {
            return Err(format!("duplicate descriptor composite key '{full_key}'"));
        }
        let rule = match d.rate_limit {
            None => None,
            Some(limit) => {
                let unit = Unit::parse(&limit.unit);
                if limit.unlimited && unit.is_some() {
                    return Err("should not specify rate limit unit when unlimited".to_owned());
                }
                if !limit.unlimited && unit.is_none() {
                    return Err(format!("invalid rate limit unit '{}'", limit.unit));
                }
                for replaced in &limit.replaces {
                    if replaced.is_empty() {
                        return Err("should not have an empty replaces entry".to_owned());
                    }
                    if *replaced == limit.name {
                        return Err(
                            "replaces should not contain name of same descriptor".to_owned()
                        );
                    }
                }
                Some(Arc::new(Rule {
                    full_key: full_key.as_str().into(),
                    requests_per_unit: limit.requests_per_unit,
                    unit,
                    unlimited: limit.unlimited,
                    name: limit.name,
                    replaces: limit.replaces,
                    shadow_mode: d.shadow_mode,
                    quota_mode: d.quota_mode,
                    detailed_metric: d.detailed_metric,
                    metadata: d.metadata.map(Arc::new),
                }))
            }
        };
        if d.share_threshold && !final_key.contains('*') {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but \
                 found key '{final_key}'"
            ));
        }
        if final_key.contains('*') {
            let parts = final_key.split('*').map(str::to_owned).collect();
            level.wildcards.push((final_key.clone(), parts));
        }
        let mut children = Level::default();
        load_descriptors(&mut children, &format!("{full_key}."), d.descriptors)?;
        level.exact.insert(
            final_key,
            Descriptor {
                rule,
                children,
                value_to_metric: d.value_to_metric,
                share_threshold: d.share_threshold,
            },
        );
    }
    Ok(())
}
