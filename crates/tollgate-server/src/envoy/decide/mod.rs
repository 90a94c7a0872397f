//! A `RateLimitRequest` decided: its descriptors' limits found, every counted descriptor
//! decided in one store call (all-or-nothing: when one is over, none is charged), and the
//! answer built as envoyproxy/ratelimit builds it (statuses, overall code, headers).
//!
//! Descriptors whose denial does not deny the request — in shadow mode, or one of several in
//! quota mode while another still has room — must not keep the others from being charged. So
//! when only such descriptors deny, nothing was charged (a denial takes nothing), and the
//! others are decided again without them, by the decision core's one rule for such checks.

mod answer;
mod plan;
mod rounds;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use super::{EnvoyMetrics, Loaded};
use crate::descriptors::Charge;
use crate::limiter::{DecideError, Limiter};
use plan::Plan;

/// The most descriptors a request may carry.
pub const MAX_DESCRIPTORS: usize = 64;

/// The most entries a descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// Why a request was not decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The request is malformed (gRPC `INVALID_ARGUMENT`).
    Invalid(String),
    /// The store failed and the fail policy is to deny (gRPC `UNAVAILABLE`).
    Unavailable(String),
}

impl From<DecideError> for Refused {
    fn from(error: DecideError) -> Refused {
        match error {
            DecideError::CostExceedsCapacity(m) | DecideError::InvalidKey(m) => Refused::Invalid(m),
            e @ (DecideError::UnknownPolicy { .. }
            | DecideError::InlineRefused
            | DecideError::Unsupported { .. }
            | DecideError::Unavailable(_)) => Refused::Unavailable(e.to_string()),
        }
    }
}

/// Decides `request` under `loaded`, through `limiter`: its plan (the limits of its descriptors,
/// and the buckets they count in), the refunds of negative hits, the rounds, the answer.
pub async fn decide(
    limiter: &Limiter,
    loaded: &Loaded,
    metrics: &EnvoyMetrics,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, Refused> {
    // A descriptor's own `limit` is a limit the client chooses: refused where inline policies
    // (the other way a client names its numbers) are, by the core's one switch.
    if !limiter.live().inline_policies
        && let Some(i) = request.descriptors.iter().position(|d| d.limit.is_some())
    {
        return Err(Refused::Invalid(format!(
            "descriptors[{i}].limit: a request's own limit is refused on this server \
             (http.inline_policies = false: clients may not choose their limits); drop the \
             override and let the configured limit apply"
        )));
    }
    let mut plan = Plan::new(loaded, metrics, request)?;
    rounds::refund(limiter, &plan.name, &mut plan.buckets, plan.algorithm).await?;
    // Under the server-wide shadow switch no descriptor denies the request, and charged per
    // descriptor none keeps the others from being charged: either way, every descriptor with
    // room is charged, and the answer's codes are worked out afterwards.
    let each = loaded.settings.shadow_mode || loaded.settings.charge == Charge::PerDescriptor;
    rounds::decide_rounds(limiter, &plan.name, &plan.parts, &mut plan.buckets, each).await?;
    Ok(answer::answer(loaded, &plan))
}
