//! A `RateLimitRequest` decided: its descriptors' limits found, every counted descriptor
//! decided in one store call (all-or-nothing: when one is over, none is charged), and the
//! answer built as envoyproxy/ratelimit builds it (statuses, overall code, headers).
//!
//! Descriptors whose denial does not deny the request — in shadow mode, or one of several in
//! quota mode while another still has room — must not keep the others from being charged. So
//! when only such descriptors deny, nothing was charged (a denial takes nothing), and the
//! others are decided again without them; each round leaves out at least one more, so the
//! rounds end.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tollgate::{Check, Decision, Policy, StoreError, headers};

use super::config::{Rule, Unit};
use super::limits::{self, Lookup};
use super::metrics::Counters;
use super::{EnvoyAlgorithm, Loaded};
use crate::limiter::rounds::Rounds;
use crate::limiter::{DecideError, Limiter};

/// The most descriptors a request may carry.
pub const MAX_DESCRIPTORS: usize = 64;

/// The most entries a descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// A bucket key longer than this is replaced by its SHA-256 digest, so that what a client
/// sends bounds the store's memory per key.
const MAX_KEY_BYTES: usize = 1024;

/// Why a request was not decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The request is malformed (gRPC `INVALID_ARGUMENT`).
    Invalid(String),
    /// The store failed and the fail policy is to deny (gRPC `UNAVAILABLE`).
    Unavailable(String),
}

/// One counted descriptor's bucket (several descriptors naming the same bucket share one).
struct Bucket {
    policy: Option<Policy>,
    key: Vec<u8>,
    cost: u64,
    /// Its hits are given back rather than taken.
    negative: bool,
    /// Its decision, once made (for a bucket left out of later rounds, the one that denied).
    decision: Option<Decision>,
    /// Over its limit: denied by the store, or before any call (the hits exceed the limit, or
    /// the limit is 0).
    denied: bool,
}

/// What a descriptor is, for the answer.
enum Part {
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

/// Decides `request` under `loaded`, through `app`.
pub async fn decide(
    app: &Limiter,
    loaded: &Loaded,
    metrics: &super::EnvoyMetrics,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, Refused> {
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
        bucket.denied = bucket.cost > 0 && bucket.policy.is_none_or(|p| bucket.cost > p.capacity());
    }

    let global_shadow = loaded.settings.shadow_mode;
    refund(app, &name, &mut buckets, algorithm).await?;
    decide_rounds(app, &name, &parts, &mut buckets, global_shadow).await?;

    let flags = denied(&buckets);
    let near_ratio = loaded.settings.near_limit_ratio;
    let now = wall_clock();
    let mut statuses = Vec::with_capacity(parts.len());
    let mut shown: Option<(usize, u32)> = None;
    for (i, part) in parts.iter().enumerate() {
        let status = match part {
            Part::NoLimit => DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            },
            Part::Unlimited => DescriptorStatus {
                code: Code::Ok as i32,
                limit_remaining: u32::MAX,
                ..Default::default()
            },
            Part::Counted {
                limit,
                hits,
                bucket,
                later,
                negative,
                counters,
            } => {
                let b = &buckets[*bucket];
                let over = over_limit(part, &flags);
                // The descriptor's own shadow mode makes its code OK; the server-wide switch
                // leaves the codes and makes only the overall code OK, as in
                // envoyproxy/ratelimit.
                let shadow = limit.rule.shadow_mode;
                let remaining = if over {
                    0
                } else {
                    b.decision.map_or(0, |d| d.remaining.saturating_add(*later))
                };
                if !*negative {
                    count(counters, &limit.rule, *hits, remaining, over, near_ratio);
                    if over && shadow {
                        counters
                            .shadow_mode
                            .inc_by(over_by(&limit.rule, *hits, remaining));
                    }
                }
                let code = if over && !shadow {
                    Code::OverLimit
                } else {
                    Code::Ok
                };
                let remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
                if over && !limit.rule.quota_mode && !shadow {
                    shown = Some((i, 0));
                } else if shown.is_none_or(|(_, least)| remaining < least) {
                    shown = Some((i, remaining));
                }
                DescriptorStatus {
                    code: code as i32,
                    current_limit: Some(CurrentLimit {
                        name: limit.rule.name.clone(),
                        requests_per_unit: limit.rule.requests_per_unit,
                        unit: limit.rule.unit.map_or(0, Unit::proto),
                    }),
                    limit_remaining: remaining,
                    duration_until_reset: Some(until_reset(
                        &limit.rule,
                        b.decision,
                        algorithm,
                        now,
                    )),
                    quota: None,
                }
            }
        };
        statuses.push(status);
    }
    let over = request_over(&parts, &flags, false);
    let mut response = RateLimitResponse {
        overall_code: if over && !global_shadow {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32,
        ..Default::default()
    };
    if let Some((i, _)) = shown
        && let Part::Counted { limit, bucket, .. } = &parts[i]
    {
        let status = &statuses[i];
        let b = &buckets[*bucket];
        response.response_headers_to_add = response_headers(
            &loaded.settings,
            &limit.rule,
            status,
            b.policy.zip(b.decision),
        );
    }
    response.statuses = statuses;
    Ok(response)
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

/// Decides the counted buckets in rounds (see the module's comment and [`Rounds`]).
async fn decide_rounds(
    app: &Limiter,
    name: &str,
    parts: &[Part],
    buckets: &mut [Bucket],
    global_shadow: bool,
) -> Result<(), Refused> {
    let counted: Vec<usize> = (0..buckets.len())
        .filter(|&b| !buckets[b].negative && buckets[b].policy.is_some())
        .collect();
    let mut rounds = Rounds::new(counted.iter().map(|&b| buckets[b].denied).collect());
    {
        let view: &[Bucket] = buckets;
        let checks: Vec<Check<'_>> = counted
            .iter()
            .filter_map(|&b| {
                let bucket = &view[b];
                bucket
                    .policy
                    .map(|p| Check::new(p, &bucket.key, bucket.cost).named(name))
            })
            .collect();
        let others = denied(view);
        let denies = |denied: &[bool]| {
            let mut all = others.clone();
            for (&b, &d) in counted.iter().zip(denied) {
                all[b] = d;
            }
            request_over(parts, &all, global_shadow)
        };
        rounds.decide(app, &checks, denies).await?;
    }
    for ((&b, denied), decision) in counted.iter().zip(rounds.denied).zip(rounds.decisions) {
        buckets[b].denied = denied;
        buckets[b].decision = decision.or(buckets[b].decision);
    }
    Ok(())
}

/// Whether each bucket is over its limit.
fn denied(buckets: &[Bucket]) -> Vec<bool> {
    buckets.iter().map(|b| b.denied).collect()
}

/// Whether the descriptor of `part` is over its limit, `denied` telling which buckets are.
fn over_limit(part: &Part, denied: &[bool]) -> bool {
    match part {
        Part::Counted {
            bucket,
            negative: false,
            ..
        } => denied[*bucket],
        _ => false,
    }
}

/// Whether the request is over, by envoyproxy/ratelimit's rule: a descriptor over its limit
/// that is neither in shadow nor in quota mode, or every quota descriptor over (one in shadow
/// mode never is). Under the server-wide shadow switch (`global_shadow`), never.
fn request_over(parts: &[Part], denied: &[bool], global_shadow: bool) -> bool {
    if global_shadow {
        return false;
    }
    let (mut quota, mut quota_over) = (0usize, 0usize);
    for part in parts {
        let Part::Counted { limit, .. } = part else {
            continue;
        };
        let over = over_limit(part, denied) && !limit.rule.shadow_mode;
        if limit.rule.quota_mode {
            quota += 1;
            quota_over += usize::from(over);
        } else if over {
            return true;
        }
    }
    quota > 0 && quota == quota_over
}

/// The stricter of two policies a bucket is counted under: the smaller limit, or over the
/// longer period; a limit of 0 (`None`) is the strictest.
fn stricter(a: Option<Policy>, b: Option<Policy>) -> Option<Policy> {
    let (a, b) = (a?, b?);
    let key = |p: &Policy| (p.capacity(), std::cmp::Reverse(p.period()));
    Some(if key(&b) < key(&a) { b } else { a })
}

/// Gives back the hits of the descriptors marked `is_negative_hits`, in one store call. A
/// refund the store cannot make (it is down) is dropped: giving nothing back is the safe side.
async fn refund(
    app: &Limiter,
    name: &str,
    buckets: &mut [Bucket],
    algorithm: EnvoyAlgorithm,
) -> Result<(), Refused> {
    let negative: Vec<usize> = (0..buckets.len())
        .filter(|&b| buckets[b].negative && buckets[b].policy.is_some())
        .collect();
    if negative.is_empty() {
        return Ok(());
    }
    if algorithm != EnvoyAlgorithm::TokenBucket {
        return Err(Refused::Invalid(format!(
            "is_negative_hits gives hits back, which only the token_bucket algorithm can do \
             exactly; this domain counts with {} (set [grpc.domains.NAME] algorithm = \
             \"token_bucket\")",
            algorithm.as_str()
        )));
    }
    let checks: Vec<Check<'_>> = negative
        .iter()
        .filter_map(|&b| {
            let bucket = &buckets[b];
            bucket
                .policy
                .map(|p| Check::new(p, &bucket.key, bucket.cost).named(name))
        })
        .collect();
    let verdict = match app.refund(&checks).await {
        Ok(verdict) => verdict,
        Err(StoreError::Check(e)) => return Err(Refused::Invalid(e.to_string())),
        Err(e) => {
            tracing::debug!(error = %e, "a refund of negative hits was dropped: the store failed");
            return Ok(());
        }
    };
    for (&b, decision) in negative.iter().zip(verdict.decisions) {
        buckets[b].decision = Some(decision);
    }
    Ok(())
}

impl From<DecideError> for Refused {
    fn from(error: DecideError) -> Refused {
        match error {
            DecideError::CostExceedsCapacity(m) | DecideError::InvalidKey(m) => Refused::Invalid(m),
            e => Refused::Unavailable(e.to_string()),
        }
    }
}

/// The envoyproxy/ratelimit counts of one descriptor's hits: near the limit above
/// `near_ratio` of it, over it, or within it.
fn count(counters: &Counters, rule: &Rule, hits: u64, remaining: u64, over: bool, near_ratio: f64) {
    let limit = u64::from(rule.requests_per_unit);
    // The count before this request, as far as the decision tells.
    let (before, after) = if over {
        let before = limit.saturating_sub(remaining);
        (before, before.saturating_add(hits))
    } else {
        let after = limit.saturating_sub(remaining);
        (after.saturating_sub(hits), after)
    };
    let near = (limit as f32 * near_ratio as f32).floor() as u64;
    if over {
        if before >= limit {
            counters.over_limit.inc_by(hits);
        } else {
            counters.over_limit.inc_by(after - limit);
            counters.near_limit.inc_by(limit - near.max(before));
        }
    } else {
        if after > near {
            counters
                .near_limit
                .inc_by(if before >= near { hits } else { after - near });
        }
        counters.within_limit.inc_by(hits);
    }
}

/// The hits over the limit, for the shadow-mode count.
fn over_by(rule: &Rule, hits: u64, remaining: u64) -> u64 {
    let limit = u64::from(rule.requests_per_unit);
    let before = limit.saturating_sub(remaining);
    if before >= limit {
        hits
    } else {
        before.saturating_add(hits).saturating_sub(limit)
    }
}

/// The seconds since the epoch (a fixed window's reset is counted on the wall clock, as
/// envoyproxy/ratelimit counts it).
fn wall_clock() -> u64 {
    // Wall-clock time is what a window aligned to the epoch means.
    #[allow(clippy::disallowed_methods)]
    let now = SystemTime::now();
    now.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `duration_until_reset`, in whole seconds rounded up: to the end of the unit's window (as
/// envoyproxy/ratelimit answers) for fixed windows, else until the bucket is full again.
fn until_reset(
    rule: &Rule,
    decision: Option<Decision>,
    algorithm: EnvoyAlgorithm,
    now: u64,
) -> ProtoDuration {
    let unit = rule.unit.map_or(1, Unit::seconds);
    let seconds = match (algorithm, decision) {
        // The store's clock when its decision says (a window with nothing counted does not).
        (EnvoyAlgorithm::FixedWindow, Some(d)) if d.reset_after > Duration::ZERO => {
            d.reset_after_secs()
        }
        (EnvoyAlgorithm::FixedWindow, _) | (_, None) => unit - now % unit,
        (_, Some(d)) => d.reset_after_secs(),
    };
    ProtoDuration {
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// The headers of the descriptor shown: envoyproxy/ratelimit's `RateLimit-Limit`,
/// `-Remaining` and `-Reset`, and the IETF `RateLimit-Policy` and `RateLimit`.
fn response_headers(
    settings: &super::EnvoySettings,
    rule: &Rule,
    status: &DescriptorStatus,
    decided: Option<(Policy, Decision)>,
) -> Vec<HeaderValue> {
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds);
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    };
    let mut out = Vec::new();
    if settings.response_headers {
        let [limit, remaining, reset_name] = &settings.header_names;
        out.push(header(limit, rule.requests_per_unit.to_string()));
        out.push(header(remaining, status.limit_remaining.to_string()));
        out.push(header(reset_name, reset.to_string()));
    }
    if settings.ietf_headers
        && let Some((policy, decision)) = decided
    {
        let name: &str = if rule.name.is_empty() {
            &rule.full_key
        } else {
            &rule.name
        };
        // The state the status shows (a descriptor over its limit has nothing left).
        let shown = Decision {
            remaining: u64::from(status.limit_remaining),
            reset_after: Duration::from_secs(u64::try_from(reset).unwrap_or(0)),
            ..decision
        };
        out.push(header(
            "RateLimit-Policy",
            headers::rate_limit_policy(name, &policy),
        ));
        out.push(header("RateLimit", headers::rate_limit(name, &shown)));
    }
    out
}
