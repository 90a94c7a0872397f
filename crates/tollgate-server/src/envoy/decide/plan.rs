//! A request's plan: validated, each descriptor's limit found (as envoyproxy/ratelimit finds
//! it), and the buckets they count in, one per bucket however many descriptors name it.

use std::collections::HashSet;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::{Decision, Policy};

use super::{MAX_DESCRIPTORS, MAX_ENTRIES, Refused};
use crate::envoy::EnvoyMetrics;
use crate::envoy::config::Rule;
use crate::envoy::limits::{self, Lookup};
use crate::envoy::metrics::Counters;
use crate::envoy::{EnvoyAlgorithm, Loaded};
use crate::limiter::MAX_KEY_BYTES;

/// One counted descriptor's bucket (several descriptors naming the same bucket share one).
pub(super) struct Bucket {
    pub(super) policy: Option<Policy>,
    pub(super) key: Vec<u8>,
    pub(super) cost: u64,
    /// Its hits are given back rather than taken.
    pub(super) negative: bool,
    /// Its decision, once made (for a bucket left out of later rounds, the one that denied).
    pub(super) decision: Option<Decision>,
    /// Over its limit: denied by the store, or before any call (the hits exceed the limit, or
    /// the limit is 0).
    pub(super) denied: bool,
}

/// What a descriptor is, for the answer.
pub(super) enum Part {
    NoLimit,
    Unlimited,
    Counted {
        limit: limits::Limit,
        hits: u64,
        bucket: usize,
        /// Hits of later descriptors of the request on the same bucket (envoyproxy/ratelimit
        /// counts them in turn, so an earlier one sees more room).
        later: u64,
        negative: bool,
        counters: Counters,
    },
}

/// What a request asks for, before any store call.
pub(super) struct Plan {
    /// The name of the domain's buckets.
    pub(super) name: String,
    /// How the domain's limits are counted.
    pub(super) algorithm: EnvoyAlgorithm,
    /// One per descriptor, in the request's order.
    pub(super) parts: Vec<Part>,
    /// The buckets the counted descriptors count in.
    pub(super) buckets: Vec<Bucket>,
}

impl Plan {
    /// Plans `request` under `loaded`, counting each descriptor's hits in `metrics`.
    pub(super) fn new(
        loaded: &Loaded,
        metrics: &EnvoyMetrics,
        request: &RateLimitRequest,
    ) -> Result<Plan, Refused> {
        validate(request)?;
        let domain = request.domain.as_str();
        let algorithm = loaded.settings.algorithm_of(domain);
        let request_hits = u64::from(request.hits_addend.max(1));

        let mut lookups = Vec::with_capacity(request.descriptors.len());
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let lookup = limits::lookup(&loaded.config, domain, descriptor)
                .map_err(|e| Refused::Invalid(format!("descriptors[{i}]: {e}")))?;
            if matches!(lookup, Lookup::DomainNotFound) {
                metrics.domain_not_found.inc();
            }
            lookups.push(lookup);
        }
        // A matched limit (unlimited ones included) lifts the limits it replaces.
        let replaced: HashSet<String> = lookups
            .iter()
            .filter_map(|l| match l {
                Lookup::Limit(limit) => Some(limit.rule.replaces.iter().cloned()),
                _ => None,
            })
            .flatten()
            .collect();

        let name = bucket_name(domain);
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut parts = Vec::with_capacity(lookups.len());
        for (descriptor, lookup) in request.descriptors.iter().zip(lookups) {
            let limit = match lookup {
                Lookup::DomainNotFound | Lookup::NoLimit => {
                    parts.push(Part::NoLimit);
                    continue;
                }
                Lookup::Limit(limit) if limit.rule.unlimited => {
                    parts.push(Part::Unlimited);
                    continue;
                }
                Lookup::Limit(limit)
                    if !limit.rule.name.is_empty() && replaced.contains(&limit.rule.name) =>
                {
                    parts.push(Part::NoLimit);
                    continue;
                }
                Lookup::Limit(limit) => limit,
            };
            let hits = descriptor
                .hits_addend
                .as_ref()
                .map_or(request_hits, |h| h.value);
            let negative = descriptor.is_negative_hits;
            let policy = policy_of(&limit.rule, algorithm);
            let key = bucket_key(descriptor, &limit.values);
            let counters = metrics.of(
                &loaded.metrics,
                &limit.rule.full_key,
                &limit.stats_key,
                limit.detailed,
            );
            counters.total_hits.inc_by(hits);
            // Descriptors naming one bucket share it, since a store call may name a bucket once:
            // their hits add up, under the stricter of their limits.
            let index = match buckets
                .iter()
                .position(|b| b.key == key && b.negative == negative)
            {
                Some(index) => {
                    let bucket = &mut buckets[index];
                    bucket.cost = bucket.cost.saturating_add(hits);
                    bucket.policy = stricter(bucket.policy, policy);
                    index
                }
                None => {
                    buckets.push(Bucket {
                        policy,
                        key,
                        cost: hits,
                        negative,
                        decision: None,
                        denied: false,
                    });
                    buckets.len() - 1
                }
            };
            parts.push(Part::Counted {
                limit,
                hits,
                bucket: index,
                later: 0,
                negative,
                counters,
            });
        }
        // Each descriptor sees the hits of the later ones on its bucket as room left.
        let mut seen = vec![0u64; buckets.len()];
        for part in parts.iter_mut().rev() {
            if let Part::Counted {
                bucket,
                later,
                hits,
                ..
            } = part
            {
                *later = seen[*bucket];
                seen[*bucket] = seen[*bucket].saturating_add(*hits);
            }
        }
        for bucket in buckets.iter_mut().filter(|b| !b.negative) {
            bucket.denied =
                bucket.cost > 0 && bucket.policy.is_none_or(|p| bucket.cost > p.capacity());
        }
        Ok(Plan {
            name,
            algorithm,
            parts,
            buckets,
        })
    }
}

/// Refuses what envoyproxy/ratelimit refuses, and what would grow memory without bound.
fn validate(request: &RateLimitRequest) -> Result<(), Refused> {
    let invalid = |m: String| Err(Refused::Invalid(m));
    if request.domain.is_empty() {
        return invalid("rate limit domain must not be empty".to_owned());
    }
    if request.descriptors.is_empty() {
        return invalid("rate limit descriptor list must not be empty".to_owned());
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return invalid(format!(
            "{} descriptors: at most {MAX_DESCRIPTORS} are accepted",
            request.descriptors.len()
        ));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.entries.len() > MAX_ENTRIES {
            return invalid(format!(
                "descriptors[{i}] has {} entries: at most {MAX_ENTRIES} are accepted",
                d.entries.len()
            ));
        }
        if let Some(j) = d.entries.iter().position(|e| e.key.is_empty()) {
            return invalid(format!(
                "descriptors[{i}].entries[{j}].key must not be empty"
            ));
        }
    }
    Ok(())
}

/// The policy of `rule` under `algorithm`; `None` for a limit of 0 (every hit is over).
pub(crate) fn policy_of(rule: &Rule, algorithm: EnvoyAlgorithm) -> Option<Policy> {
    let unit = Duration::from_secs(rule.unit?.seconds());
    // A policy counts at most one request a nanosecond: more than 10⁹ a second is counted as
    // 10⁹ (never more than the limit).
    let most = u64::try_from(unit.as_nanos()).unwrap_or(u64::MAX);
    let n = u64::from(rule.requests_per_unit).min(most);
    let policy = match algorithm {
        EnvoyAlgorithm::FixedWindow => Policy::fixed_window(n, unit),
        EnvoyAlgorithm::TokenBucket => Policy::token_bucket(n, n, unit),
        EnvoyAlgorithm::SlidingCounter => Policy::sliding_window_counter(n, unit),
    };
    policy.ok()
}

/// The name of a domain's buckets: `envoy:DOMAIN`, or its digest when too long for a name.
fn bucket_name(domain: &str) -> String {
    let name = format!("envoy:{domain}");
    if name.len() <= tollgate::store::MAX_NAME_LEN {
        name
    } else {
        format!("envoy#{}", hex(&digest(domain.as_bytes())[..24]))
    }
}

/// A descriptor's bucket key: each entry's key and value (or shared pattern), separated by
/// bytes no protocol text holds, so that no two descriptors collide as `key_value` strings do.
fn bucket_key(
    descriptor: &envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor,
    values: &[String],
) -> Vec<u8> {
    let mut key = Vec::new();
    for (entry, value) in descriptor.entries.iter().zip(values) {
        key.extend_from_slice(entry.key.as_bytes());
        key.push(0x1f);
        key.extend_from_slice(value.as_bytes());
        key.push(0x1e);
    }
    if key.len() > MAX_KEY_BYTES {
        let mut hashed = b"#".to_vec();
        hashed.extend_from_slice(&digest(&key));
        return hashed;
    }
    key
}

fn digest(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stricter of two policies a bucket is counted under: the smaller limit, or over the
/// longer period; a limit of 0 (`None`) is the strictest.
fn stricter(a: Option<Policy>, b: Option<Policy>) -> Option<Policy> {
    let (a, b) = (a?, b?);
    let key = |p: &Policy| (p.capacity(), std::cmp::Reverse(p.period()));
    Some(if key(&b) < key(&a) { b } else { a })
}
