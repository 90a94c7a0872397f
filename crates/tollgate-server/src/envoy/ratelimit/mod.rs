//! `ShouldRateLimit` answered: the request planned by Envoy's rules (its descriptors' limits
//! found, and the buckets they count in), handed to the decision core in one call (the
//! refunds of negative hits, then every counted descriptor decided all-or-nothing: when one is
//! over, none is charged), and the answer built as envoyproxy/ratelimit builds it (statuses,
//! overall code, headers).
//!
//! Descriptors whose denial does not deny the request — in shadow mode, or one of several in
//! quota mode while another still has room — must not keep the others from being charged.
//! Which denials deny is Envoy's rule (`over.rs`), which the core's rounds ask as they go.

mod answer;
mod hits;
mod metadata;
mod over;
mod plan;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use super::{EnvoyMetrics, Loaded};
use crate::descriptors::Charge;
use crate::limiter::{Counted, DecideError, Limiter};
use plan::Plan;

/// The most descriptors a request may carry.
pub const MAX_DESCRIPTORS: usize = 64;

/// The most entries a descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// Why a `RateLimitRequest` was not answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvoyError {
    /// The request is malformed (gRPC `INVALID_ARGUMENT`).
    Invalid(String),
    /// The store failed and the fail policy is to deny (gRPC `UNAVAILABLE`).
    Unavailable(String),
    /// No config is loaded yet (configuration over xDS before its first version): gRPC
    /// `UNKNOWN` with [`NO_CONFIG`], as envoyproxy/ratelimit answers then.
    NoConfig,
}

impl EnvoyError {
    /// Counts the error as envoyproxy/ratelimit counts a failed call: a store's failure as
    /// `redis_error`, the rest as `service_error`.
    pub fn count(&self, metrics: &EnvoyMetrics) {
        let calls = &metrics.calls;
        let counter = match self {
            EnvoyError::Unavailable(_) => &calls.store_errors,
            EnvoyError::Invalid(_) | EnvoyError::NoConfig => &calls.service_errors,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// envoyproxy/ratelimit's words for a request answered before any config is loaded.
pub const NO_CONFIG: &str = "no rate limit configuration loaded";

impl From<DecideError> for EnvoyError {
    fn from(error: DecideError) -> EnvoyError {
        match error {
            DecideError::CostExceedsCapacity(m) | DecideError::InvalidKey(m) => {
                EnvoyError::Invalid(m)
            }
            e @ (DecideError::Key(_) | DecideError::Policies(_)) => {
                EnvoyError::Invalid(e.to_string())
            }
            e @ (DecideError::UnknownPolicy { .. }
            | DecideError::NotTokenBucket { .. }
            | DecideError::InlineRefused
            | DecideError::Unsupported { .. }
            | DecideError::Unavailable(_)) => EnvoyError::Unavailable(e.to_string()),
        }
    }
}

/// Answers `request` under `loaded`, deciding through `limiter` and counting in `metrics`.
pub async fn should_rate_limit(
    limiter: &Limiter,
    loaded: &Loaded,
    metrics: &EnvoyMetrics,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, EnvoyError> {
    // Before anything is counted, as envoyproxy/ratelimit checks for a config first.
    if loaded.waiting {
        return Err(EnvoyError::NoConfig);
    }
    // A descriptor's own `limit` is a limit the client chooses, which the core refuses where
    // it refuses inline policies. That refusal comes before anything else, and a request it
    // refuses counts no hits: a request that cannot be counted (malformed, or giving hits back
    // where the domain's algorithm cannot) still asks the core, with nothing to count.
    let own_limit = request.descriptors.iter().position(|d| d.limit.is_some());
    let plan = Plan::new(loaded, request);
    let counted = match &plan {
        Ok(plan) if plan.refunds_refused().is_none() => {
            plan.counted(own_limit.is_some(), &request.domain)
        }
        _ => Counted::new(own_limit.is_some()),
    };
    // Under the server-wide shadow switch no descriptor denies the request, and charged per
    // descriptor none keeps the others from being charged: either way, every descriptor with
    // room is charged, and the answer's codes are worked out afterwards.
    let each = loaded.settings.shadow_mode || loaded.settings.charge == Charge::PerDescriptor;
    let denies = |denied: &[bool]| {
        plan.as_ref()
            .is_ok_and(|plan| over::request_over(&plan.parts, &plan.flags(denied), each))
    };
    let outcome = limiter.check_counted(counted, denies).await;
    if let (Err(DecideError::InlineRefused), Some(i)) = (&outcome, own_limit) {
        return Err(EnvoyError::Invalid(format!(
            "descriptors[{i}].limit: a request's own limit is refused on this server \
             (http.inline_policies = false: clients may not choose their limits); drop the \
             override and let the configured limit apply"
        )));
    }
    let plan = plan?;
    // A planned request's hits count whatever the store answered, refunds refused included.
    let counters = hits::count(loaded, metrics, &plan);
    if let Some(refused) = plan.refunds_refused() {
        return Err(refused);
    }
    let mut response = answer::answer(loaded, &plan, &counters, &outcome?);
    if loaded.settings.response_dynamic_metadata {
        response.dynamic_metadata = Some(metadata::of(request, &plan.parts, &response.statuses));
    }
    Ok(response)
}
