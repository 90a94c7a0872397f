//! A request's plan, by Envoy's rules and before any store call: validated, each descriptor's
//! limit found (as envoyproxy/ratelimit finds it), and the buckets they count in, one per
//! bucket however many descriptors name it. Planning counts nothing (`hits`
//! does, once the core has not refused the request).

use std::collections::HashSet;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate::{Check, Decision, Policy};

use super::{EnvoyError, MAX_DESCRIPTORS, MAX_ENTRIES};
use crate::descriptors::limits::{self, Lookup};
use crate::descriptors::{EnvoyAlgorithm, bucket_key, bucket_name, policy_of};
use crate::envoy::Loaded;
use crate::limiter::{Counted, CountedOutcome};

/// One counted descriptor's bucket (several descriptors naming the same bucket share one).
pub(super) struct Bucket {
    /// `None` for a limit of 0: every hit is over, and the store is not asked.
    pub(super) policy: Option<Policy>,
    pub(super) key: Vec<u8>,
    pub(super) cost: u64,
    /// Its hits are given back rather than taken.
    pub(super) negative: bool,
    /// Over its limit before any call (the hits exceed the limit, or the limit is 0).
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
    /// How many descriptors name a domain no file configures.
    pub(super) domain_not_found: u64,
}

impl Plan {
    /// Plans `request` under `loaded`.
    pub(super) fn new(loaded: &Loaded, request: &RateLimitRequest) -> Result<Plan, EnvoyError> {
        validate(request)?;
        let domain = request.domain.as_str();
        let algorithm = loaded.settings.algorithm_of(domain);
        let request_hits = u64::from(request.hits_addend.max(1));

        let mut lookups = Vec::with_capacity(request.descriptors.len());
        let mut domain_not_found = 0;
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let lookup = limits::lookup(&loaded.config, domain, descriptor)
                .map_err(|e| EnvoyError::Invalid(format!("descriptors[{i}]: {e}")))?;
            if matches!(lookup, Lookup::DomainNotFound) {
                domain_not_found += 1;
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
            domain_not_found,
        })
    }

    /// The buckets the store counts in, with their policies: those given back (`negative`),
    /// or those charged.
    fn stored(&self, negative: bool) -> impl Iterator<Item = (&Bucket, Policy)> {
        self.buckets
            .iter()
            .filter(move |b| b.negative == negative)
            .filter_map(|b| b.policy.map(|p| (b, p)))
    }

    /// What the core is asked: the refunds, then the checks; `own_limit` when a descriptor
    /// names its own limit.
    pub(super) fn counted<'a>(&'a self, own_limit: bool, domain: &'a str) -> Counted<'a> {
        let mut counted = Counted::new(own_limit).in_domain(domain);
        for (bucket, policy) in self.stored(true) {
            counted.refund(Check::new(policy, &bucket.key, bucket.cost).named(&self.name));
        }
        for (bucket, policy) in self.stored(false) {
            let check = Check::new(policy, &bucket.key, bucket.cost).named(&self.name);
            counted.check(check, bucket.denied);
        }
        counted
    }

    /// Why the refunds cannot be made: `is_negative_hits` gives hits back, which only a token
    /// bucket does exactly.
    pub(super) fn refunds_refused(&self) -> Option<EnvoyError> {
        if self.algorithm == EnvoyAlgorithm::TokenBucket || self.stored(true).next().is_none() {
            return None;
        }
        Some(EnvoyError::Invalid(format!(
            "is_negative_hits gives hits back, which only the token_bucket algorithm can do \
             exactly; this domain counts with {} (set [grpc.domains.NAME] algorithm = \
             \"token_bucket\")",
            self.algorithm.as_str()
        )))
    }

    /// Whether each bucket is over its limit, given which of the checks [`counted`]
    /// (Self::counted) asked for are denied (`checks`, in order).
    pub(super) fn flags(&self, checks: &[bool]) -> Vec<bool> {
        let mut checks = checks.iter();
        self.buckets
            .iter()
            .map(|b| match b.policy {
                Some(_) if !b.negative => checks.next().copied().unwrap_or(b.denied),
                _ => b.denied,
            })
            .collect()
    }

    /// Each bucket as `outcome` leaves it: over its limit or not, and its decision (none for
    /// a limit of 0, nor for a refund the store dropped).
    pub(super) fn decided(&self, outcome: &CountedOutcome) -> Vec<(bool, Option<Decision>)> {
        let (mut refunds, mut checks) = (outcome.refunds.iter(), outcome.checks.iter());
        self.buckets
            .iter()
            .map(|b| match (b.policy, b.negative) {
                (None, _) => (b.denied, None),
                (Some(_), true) => (b.denied, refunds.next().copied().flatten()),
                (Some(_), false) => checks
                    .next()
                    .map_or((b.denied, None), |c| (c.denied, Some(c.decision))),
            })
            .collect()
    }
}

/// Refuses what envoyproxy/ratelimit refuses, and what would grow memory without bound.
fn validate(request: &RateLimitRequest) -> Result<(), EnvoyError> {
    let invalid = |m: String| Err(EnvoyError::Invalid(m));
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
