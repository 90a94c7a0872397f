//! The rounds of a request's counted buckets (the limiter's one rule for descriptors whose
//! denial does not deny the request), and the refunds of negative hits.

use tollgate::{Check, StoreError};

use super::Refused;
use super::plan::{Bucket, Part};
use crate::descriptors::EnvoyAlgorithm;
use crate::limiter::Limiter;
use crate::limiter::rounds::Rounds;

/// Decides the counted buckets in rounds (see the module's comment and [`Rounds`]); with
/// `each`, no descriptor's denial keeps the others from being charged.
pub(super) async fn decide_rounds(
    limiter: &Limiter,
    name: &str,
    parts: &[Part],
    buckets: &mut [Bucket],
    each: bool,
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
            request_over(parts, &all, each)
        };
        rounds.run(limiter, &checks, denies).await?;
    }
    for ((&b, denied), decision) in counted.iter().zip(rounds.denied).zip(rounds.decisions) {
        buckets[b].denied = denied;
        buckets[b].decision = decision.or(buckets[b].decision);
    }
    Ok(())
}

/// Whether each bucket is over its limit.
pub(super) fn denied(buckets: &[Bucket]) -> Vec<bool> {
    buckets.iter().map(|b| b.denied).collect()
}

/// Whether the descriptor of `part` is over its limit, `denied` telling which buckets are.
pub(super) fn over_limit(part: &Part, denied: &[bool]) -> bool {
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
pub(super) fn request_over(parts: &[Part], denied: &[bool], global_shadow: bool) -> bool {
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

/// Gives back the hits of the descriptors marked `is_negative_hits`, in one store call. A
/// refund the store cannot make (it is down) is dropped: giving nothing back is the safe side.
pub(super) async fn refund(
    limiter: &Limiter,
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
    let verdict = match limiter.refund(&checks).await {
        Ok(verdict) => verdict,
        Err(StoreError::Check(e)) => return Err(Refused::Invalid(e.to_string())),
        Err(e) => {
            tracing::debug!(error = %e, "a refund of negative hits was dropped: the store failed");
            return Ok(());
        }
    };
    for (&b, decision) in negative.iter().zip(verdict.into_decisions()) {
        buckets[b].decision = Some(decision);
    }
    Ok(())
}
