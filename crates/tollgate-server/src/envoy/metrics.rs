//! The Envoy front end's metrics, per domain and descriptor key, as envoyproxy/ratelimit counts
//! them (`total_hits`, `over_limit`, `near_limit`, `within_limit`, `shadow_mode`), in the
//! server's Prometheus endpoint.
//!
//! Series are bounded: one per configured rule, made when the config loads and dropped when a
//! reload removes the rule, plus at most [`MAX_DETAILED_SERIES`] keyed by request values
//! (`detailed_metric`, `value_to_metric`, `share_threshold`, overrides); past that, a value's
//! hits count under its rule's key.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus::{IntCounter, IntCounterVec, Opts};

use crate::descriptors::config::EnvoyConfig;
use crate::metrics::Metrics;

/// The most series labelled with request values.
pub const MAX_DETAILED_SERIES: usize = 1_000;

/// The longest descriptor key labelled with request values; a longer one counts under its
/// rule's key.
pub const MAX_DETAILED_KEY: usize = 256;

/// The counters of one descriptor key.
#[derive(Clone)]
pub struct Counters {
    /// Hits counted.
    pub total_hits: IntCounter,
    /// Hits over the limit.
    pub over_limit: IntCounter,
    /// Hits above the near-limit ratio.
    pub near_limit: IntCounter,
    /// Hits within the limit.
    pub within_limit: IntCounter,
    /// Hits over the limit let through by shadow mode.
    pub shadow_mode: IntCounter,
}

/// The series of one loaded config: its rules', and those made since for request values.
#[derive(Clone, Default)]
pub struct Series {
    rules: Arc<HashMap<Arc<str>, Counters>>,
    detailed: Arc<Mutex<HashMap<String, Counters>>>,
}

/// The front end's metric families.
pub struct EnvoyMetrics {
    hits: [IntCounterVec; 5],
    /// Requests to a domain no file configures.
    pub domain_not_found: IntCounter,
    /// Loads of the config directory, by result.
    loads: IntCounterVec,
    /// The calls of upstream's statsd names alone, for envoyproxy/ratelimit's Prometheus
    /// exporter; not in the server's registry, whose own metrics say as much otherwise.
    pub calls: UpstreamCalls,
}

/// What envoyproxy/ratelimit counts of its `ShouldRateLimit` calls.
#[derive(Default)]
pub struct UpstreamCalls {
    /// Every call (`ratelimit_server.ShouldRateLimit.total_requests`).
    pub total: AtomicU64,
    /// Calls answered with an error because the store failed and the fail policy denies
    /// (`ratelimit.service.call.should_rate_limit.redis_error`).
    pub store_errors: AtomicU64,
    /// Calls refused as malformed or before a config is loaded
    /// (`ratelimit.service.call.should_rate_limit.service_error`).
    pub service_errors: AtomicU64,
}

const OUTCOMES: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];

impl EnvoyMetrics {
    /// Registered in `metrics`' registry.
    pub fn new(metrics: &Metrics) -> Result<EnvoyMetrics, prometheus::Error> {
        let help = [
            "Hits counted against Envoy rate limits, by domain and descriptor key.",
            "Hits over an Envoy rate limit.",
            "Hits above the near-limit ratio of an Envoy rate limit.",
            "Hits within an Envoy rate limit.",
            "Hits over an Envoy rate limit in shadow mode (let through).",
        ];
        let mut families = Vec::with_capacity(5);
        for (outcome, help) in OUTCOMES.iter().zip(help) {
            let family = IntCounterVec::new(
                Opts::new(format!("tollgate_envoy_{outcome}_total"), help),
                &["domain", "key"],
            )?;
            metrics.register(Box::new(family.clone()))?;
            families.push(family);
        }
        let domain_not_found = IntCounter::new(
            "tollgate_envoy_domain_not_found_total",
            "Envoy requests to a domain that no config file names.",
        )?;
        metrics.register(Box::new(domain_not_found.clone()))?;
        let loads = IntCounterVec::new(
            Opts::new(
                "tollgate_envoy_config_loads_total",
                "Loads of the Envoy config directory, by result (success, failure).",
            ),
            &["result"],
        )?;
        metrics.register(Box::new(loads.clone()))?;
        for result in ["success", "failure"] {
            loads.with_label_values(&[result]);
        }
        let hits = families
            .try_into()
            .map_err(|_| prometheus::Error::Msg("five families".to_owned()))?;
        Ok(EnvoyMetrics {
            hits,
            domain_not_found,
            loads,
            calls: UpstreamCalls::default(),
        })
    }

    fn counters(&self, key: &str) -> Counters {
        let (domain, rest) = key.split_once('.').unwrap_or((key, ""));
        let c = |i: usize| self.hits[i].with_label_values(&[domain, rest]);
        Counters {
            total_hits: c(0),
            over_limit: c(1),
            near_limit: c(2),
            within_limit: c(3),
            shadow_mode: c(4),
        }
    }

    /// The series of `config`'s rules.
    pub fn series(&self, config: &EnvoyConfig) -> Series {
        let rules = config
            .rules()
            .into_iter()
            // Unlimited descriptors count nothing, as in envoyproxy/ratelimit.
            .filter(|(_, rule)| !rule.unlimited)
            .map(|(_, rule)| (Arc::clone(&rule.full_key), self.counters(&rule.full_key)))
            .collect();
        Series {
            rules: Arc::new(rules),
            detailed: Arc::default(),
        }
    }

    /// The counters of the descriptor key `key`, of a limit found by the rule at `rule_key`:
    /// `detailed` keys hold request values and get series of their own while there is room.
    pub fn of(&self, series: &Series, rule_key: &str, key: &str, detailed: bool) -> Counters {
        if !detailed && let Some(counters) = series.rules.get(key) {
            return counters.clone();
        }
        // A key of long request values is no label a scrape should carry a thousand times.
        if key.len() > MAX_DETAILED_KEY {
            return self.fallback(series, rule_key);
        }
        let mut made = series
            .detailed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(counters) = made.get(key) {
            return counters.clone();
        }
        if made.len() < MAX_DETAILED_SERIES {
            let counters = self.counters(key);
            made.insert(key.to_owned(), counters.clone());
            return counters;
        }
        drop(made);
        self.fallback(series, rule_key)
    }

    /// Where the hits of a key without a series of its own go: its rule's series, or for an
    /// override (whose key is not a rule's), one series per domain.
    fn fallback(&self, series: &Series, rule_key: &str) -> Counters {
        match series.rules.get(rule_key) {
            Some(counters) => counters.clone(),
            None => {
                let domain = rule_key.split('.').next().unwrap_or("");
                self.counters(&format!("{domain}.overrides"))
            }
        }
    }

    /// Drops the series of `old` that `new` does not have.
    pub fn forget_gone(&self, old: &Series, new: &Series) {
        let kept: HashSet<&str> = new.rules.keys().map(|k| &**k).collect();
        let detailed = old
            .detailed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let gone = old
            .rules
            .keys()
            .map(|k| &**k)
            .chain(detailed.keys().map(String::as_str))
            .filter(|k| !kept.contains(k));
        for key in gone {
            let (domain, rest) = key.split_once('.').unwrap_or((key, ""));
            for family in &self.hits {
                let _ = family.remove_label_values(&[domain, rest]);
            }
        }
    }

    /// The per-key families, each with its outcome (`total_hits`, `over_limit`, ...), labelled
    /// `domain` and `key` (the descriptor key after the domain).
    pub fn hit_families(&self) -> impl Iterator<Item = (&'static str, &IntCounterVec)> {
        OUTCOMES.into_iter().zip(&self.hits)
    }

    /// Loads counted, good (`ok`) or refused.
    pub fn loads(&self, ok: bool) -> u64 {
        let result = if ok { "success" } else { "failure" };
        self.loads.with_label_values(&[result]).get()
    }

    /// Counts a load of the directory, or of a version over xDS.
    pub fn loaded(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.loads.with_label_values(&[result]).inc();
    }
}
