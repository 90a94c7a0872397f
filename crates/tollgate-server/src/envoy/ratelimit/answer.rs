//! The answer, as envoyproxy/ratelimit builds it: each descriptor's status, the overall code,
//! the headers, and the counts its metrics report.

use std::time::{Duration, SystemTime};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tollgate::{Decision, Policy, headers};

use super::over::{over_limit, request_over};
use super::plan::{Part, Plan};
use crate::descriptors::EnvoyAlgorithm;
use crate::descriptors::config::{Rule, Unit};
use crate::envoy::Loaded;
use crate::envoy::metrics::Counters;
use crate::limiter::CountedOutcome;

/// The response to a request planned as `plan`, its parts counted in `counters` and decided
/// as `outcome` tells, under `loaded`.
pub(super) fn answer(
    loaded: &Loaded,
    plan: &Plan,
    counters: &[Option<Counters>],
    outcome: &CountedOutcome,
) -> RateLimitResponse {
    let (parts, algorithm) = (&plan.parts, plan.algorithm);
    let global_shadow = loaded.settings.shadow_mode;
    let (flags, decisions): (Vec<bool>, Vec<_>) = plan.decided(outcome).into_iter().unzip();
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
            } => {
                let decision = decisions[*bucket];
                let over = over_limit(part, &flags);
                // The descriptor's own shadow mode makes its code OK; the server-wide switch
                // leaves the codes and makes only the overall code OK, as in
                // envoyproxy/ratelimit.
                let shadow = limit.rule.shadow_mode;
                let remaining = if over {
                    0
                } else {
                    decision.map_or(0, |d| d.remaining().saturating_add(*later))
                };
                if !*negative && let Some(counters) = &counters[i] {
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
                    duration_until_reset: Some(until_reset(&limit.rule, decision, algorithm, now)),
                    quota: None,
                }
            }
        };
        statuses.push(status);
    }
    let over = request_over(parts, &flags, false);
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
        response.response_headers_to_add = response_headers(
            &loaded.settings,
            &limit.rule,
            &statuses[i],
            plan.buckets[*bucket].policy.zip(decisions[*bucket]),
        );
    }
    response.statuses = statuses;
    response
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
        (EnvoyAlgorithm::FixedWindow, Some(d)) if d.reset_after() > Duration::ZERO => {
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
    settings: &crate::envoy::EnvoySettings,
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
        let shown = Decision::new(
            decision.allowed(),
            decision.limit(),
            u64::from(status.limit_remaining),
            decision.retry_after(),
            Duration::from_secs(u64::try_from(reset).unwrap_or(0)),
        );
        out.push(header(
            "RateLimit-Policy",
            headers::rate_limit_policy(name, &policy),
        ));
        out.push(header("RateLimit", headers::rate_limit(name, &shown)));
    }
    out
}
