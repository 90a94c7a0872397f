//! Which configured limit a request's descriptor meets, found as envoyproxy/ratelimit's
//! `GetLimit` finds it: the nested walk (an exact `key_value` beats the first matching
//! wildcard, which beats the `key`-only default), a limit applying only at the descriptor's
//! last entry, and the request's own `limit` override.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

use super::config::{EnvoyConfig, Rule, Unit};

/// The limit a descriptor meets.
#[derive(Debug, Clone)]
pub struct Limit {
    /// The rule (for an override, one made for the request).
    pub rule: Arc<Rule>,
    /// The key its metrics go by: the rule's place in the config, or with `detailed_metric`,
    /// `value_to_metric` or `share_threshold`, the request's values in it.
    pub stats_key: String,
    /// Whether `stats_key` holds values of the request (and so its series are bounded apart).
    pub detailed: bool,
    /// The values the bucket is named by: each entry's, or the wildcard pattern of an entry
    /// matched by a `share_threshold` descriptor (every value it matches shares one bucket).
    pub values: Vec<String>,
}

/// What a descriptor meets.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// The request's domain has no config.
    DomainNotFound,
    /// No limit: the request goes on (as for a descriptor configured without one).
    NoLimit,
    /// This limit.
    Limit(Limit),
}

/// The limit `descriptor` of a request to `domain` meets; `Err` for an override whose unit
/// is not one (envoyproxy/ratelimit stops on it).
pub fn lookup(
    config: &EnvoyConfig,
    domain: &str,
    descriptor: &RateLimitDescriptor,
) -> Result<Lookup, String> {
    let Some(configured) = config.domain(domain) else {
        return Ok(Lookup::DomainNotFound);
    };
    let entries = &descriptor.entries;
    if let Some(over) = &descriptor.limit {
        let unit = Unit::from_proto(over.unit).ok_or_else(|| {
            format!(
                "limit.unit must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR, not {}",
                over.unit
            )
        })?;
        let stats_key = format!("{domain}.{}", path(entries));
        let rule = Rule {
            full_key: stats_key.as_str().into(),
            requests_per_unit: over.requests_per_unit,
            unit: Some(unit),
            unlimited: false,
            name: String::new(),
            replaces: Vec::new(),
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            metadata: None,
        };
        return Ok(Lookup::Limit(Limit {
            rule: Arc::new(rule),
            stats_key,
            detailed: true,
            values: entries.iter().map(|e| e.value.clone()).collect(),
        }));
    }

    let mut level = &configured.root;
    let mut found = None;
    let mut patterns: Vec<Option<String>> = vec![None; entries.len()];
    let mut metric_parts: Vec<String> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let final_key = format!("{}_{}", entry.key, entry.value);
        let mut wildcard = None;
        let mut by_value = true;
        let next = match level.exact.get(&final_key) {
            Some(next) => Some(next),
            None => match level
                .wildcards
                .iter()
                .find(|(_, parts)| wildcard_match(parts, &final_key))
            {
                Some((pattern, _)) => {
                    wildcard = Some(pattern.as_str());
                    level.exact.get(pattern)
                }
                None => {
                    by_value = false;
                    level.exact.get(&entry.key)
                }
            },
        };
        let Some(next) = next else { break };
        let prefix = format!("{}_", entry.key);
        let shown = match wildcard {
            Some(pattern) => {
                let pattern_value = pattern.strip_prefix(&prefix).unwrap_or(pattern);
                if next.share_threshold {
                    patterns[i] = Some(pattern_value.to_owned());
                    pattern_value
                } else if next.value_to_metric {
                    &entry.value
                } else {
                    pattern_value
                }
            }
            None if by_value || next.value_to_metric => &entry.value,
            None => "",
        };
        metric_parts.push(key_value(&entry.key, shown));
        if i + 1 == entries.len() {
            found = next.rule.clone();
        }
        if next.children.exact.is_empty() {
            break;
        }
        level = &next.children;
    }
    let Some(rule) = found else {
        return Ok(Lookup::NoLimit);
    };
    let shared = patterns.iter().any(Option::is_some);
    let (stats_key, detailed) = if rule.detailed_metric {
        let parts: Vec<String> = entries
            .iter()
            .zip(&patterns)
            .map(|(e, p)| match p {
                Some(pattern) => format!("{}_{pattern}", e.key),
                None if shared => key_value(&e.key, &e.value),
                None => format!("{}_{}", e.key, e.value),
            })
            .collect();
        (format!("{domain}.{}", parts.join(".")), true)
    } else {
        let key = format!("{domain}.{}", metric_parts.join("."));
        let detailed = *key != *rule.full_key;
        (key, detailed)
    };
    let values = entries
        .iter()
        .zip(patterns)
        .map(|(e, p)| p.unwrap_or_else(|| e.value.clone()))
        .collect();
    Ok(Lookup::Limit(Limit {
        rule,
        stats_key,
        detailed,
        values,
    }))
}

/// `key`, or `key_value` when there is a value.
fn key_value(key: &str, value: &str) -> String {
    if value.is_empty() {
        key.to_owned()
    } else {
        format!("{key}_{value}")
    }
}

/// The entries as a config path: `key_value.key...`.
fn path(entries: &[Entry]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|e| key_value(&e.key, &e.value))
        .collect();
    parts.join(".")
}

/// Whether `s` matches the pattern whose parts between `*`s are `parts`: `*` matches any run
/// of characters, the empty one included.
pub(crate) fn wildcard_match(parts: &[String], s: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    let needed: usize = parts.iter().map(String::len).sum();
    if s.len() < needed || !s.starts_with(first.as_str()) || !s.ends_with(last.as_str()) {
        return false;
    }
    let Some(mut middle) = s.get(first.len()..s.len() - last.len()) else {
        return false;
    };
    for part in &parts[1..parts.len() - 1] {
        match middle.find(part.as_str()) {
            Some(at) => middle = &middle[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(pattern: &str) -> Vec<String> {
        pattern.split('*').map(str::to_owned).collect()
    }

    #[test]
    fn wildcards_match_as_envoyproxy_ratelimit_does() {
        assert!(wildcard_match(&parts("wild_foo*"), "wild_foo1"));
        assert!(wildcard_match(&parts("wild_foo*"), "wild_foo"));
        let mid = parts("midWild_bar*b");
        for yes in ["midWild_barab", "midWild_bar123b", "midWild_barb"] {
            assert!(wildcard_match(&mid, yes), "{yes}");
        }
        for no in ["midWild_bara", "midWild_xbarb"] {
            assert!(!wildcard_match(&mid, no), "{no}");
        }
        let multi = parts("multiWild_foo*bar*baz");
        assert!(wildcard_match(&multi, "multiWild_foo123bar456baz"));
        assert!(wildcard_match(&multi, "multiWild_foobarbaz"));
        assert!(!wildcard_match(&multi, "multiWild_foo123baz"));
        assert!(!wildcard_match(&multi, "multiWild_bar456baz"));
        // The parts may not overlap: `ab*ba` needs four characters.
        assert!(!wildcard_match(&parts("ab*ba"), "aba"));
    }
}
