//! A request's plan: validated, each descriptor's limit found (as envoyproxy/ratelimit finds
//! it), and the buckets they count in, one per bucket however many descriptors name it.

use std::collections::HashSet;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::{Decision, Policy};

use super::{MAX_DESCRIPTORS, MAX_ENTRIES, Refused};
use crate::descriptors::limits::{self, Lookup};
use crate::descriptors::{EnvoyAlgorithm, bucket_key, bucket_name, policy_of};
use crate::envoy::EnvoyMetrics;
use crate::envoy::Loaded;
use crate::envoy::metrics::Counters;

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

/// The stricter of two policies a bucket is counted under: the smaller limit, or over the
/// longer period; a limit of 0 (`None`) is the strictest.
fn stricter(a: Option<Policy>, b: Option<Policy>) -> Option<Policy> {
    let (a, b) = (a?, b?);
    let key = |p: &Policy| (p.capacity(), std::cmp::Reverse(p.period()));
    Some(if key(&b) < key(&a) { b } else { a })
}
