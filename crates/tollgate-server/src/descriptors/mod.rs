//! Envoy's descriptors resolved into policies and buckets, as envoyproxy/ratelimit resolves
//! them: its config files loaded as that service loads them ([`config`]), a descriptor matched
//! to its limit as it matches ([`limits`]), and the limit's policy and bucket under the
//! domain's algorithm ([`policy_of`], [`bucket_name`], [`bucket_key`]).

pub mod config;
pub mod limits;
pub(crate) mod yaml;

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use serde::Deserialize;
use tollgate::Policy;

use crate::limiter::MAX_KEY_BYTES;
use config::Rule;

/// Which descriptors of a request are charged when one is over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Charge {
    /// None: a request over one limit takes nothing from any (tollgate's rule).
    #[default]
    AllOrNothing,
    /// Each descriptor on its own, as envoyproxy/ratelimit counts by default: one over its
    /// limit does not keep the others from being charged (it is still not charged itself: a
    /// denial takes nothing).
    PerDescriptor,
}

/// How a domain's limits are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvoyAlgorithm {
    /// Windows aligned to the unit since the epoch, as envoyproxy/ratelimit counts (a burst
    /// of twice the limit can straddle a boundary).
    FixedWindow,
    /// A bucket of `requests_per_unit` refilled over the unit: no double burst.
    TokenBucket,
    /// The weighted two-window approximation of a sliding window.
    SlidingCounter,
}

impl EnvoyAlgorithm {
    /// The name the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvoyAlgorithm::FixedWindow => "fixed_window",
            EnvoyAlgorithm::TokenBucket => "token_bucket",
            EnvoyAlgorithm::SlidingCounter => "sliding_counter",
        }
    }
}

/// The policy of `rule` under `algorithm`; `None` for a limit of 0 (every hit is over).
pub fn policy_of(rule: &Rule, algorithm: EnvoyAlgorithm) -> Option<Policy> {
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
pub fn bucket_name(domain: &str) -> String {
    let name = format!("envoy:{domain}");
    if name.len() <= tollgate::store::MAX_NAME_LEN {
        name
    } else {
        format!("envoy#{}", hex(&digest(domain.as_bytes())[..24]))
    }
}

/// A descriptor's bucket key: each entry's key and value (or shared pattern), separated by
/// bytes no protocol text holds, so that no two descriptors collide as `key_value` strings do.
pub fn bucket_key(descriptor: &RateLimitDescriptor, values: &[String]) -> Vec<u8> {
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
