//! One check in the decision script's terms, encoded once: its policy as the script's code
//! and two numbers (microseconds, kept exact in Lua's doubles), its bucket's key, and what the
//! deny cache and a replay of `bucket.lua` need. Both the planner (which buckets a call sends,
//! in which order) and the script call read it.

use super::keys::bucket_key;
use crate::algorithm::gcra::Gcra;
use crate::store::deny_cache::Refill;
use crate::{Algorithm, Check, CheckError, Nanos, Policy, PolicyError};

/// Lua numbers are doubles: every quantity must stay an exact integer (below 2^53, with room
/// for the sums the script forms).
const MAX_EXACT: u128 = 1 << 52;

/// One microsecond, the script's unit of time.
pub(crate) const MICROSECOND: Nanos = Nanos::new(1000);

/// A policy in the script's terms: its algorithm code and two numbers (see `decide.lua`), in
/// microseconds rounded up (the emission interval, then the period), so rounding only
/// under-grants. Refuses a policy whose numbers could pass 2^52 in Lua's doubles, naming the
/// field that makes them so: a period of more than about 142 years, a burst that takes longer
/// to refill, a limit of 2^52, or a sliding counter's limit × window (in µs) of 2^51.
pub(crate) fn params(policy: &Policy) -> Result<(u8, u64, u64), PolicyError> {
    let too_large = |field| PolicyError::Unsupported {
        field,
        reason: "the Redis store computes in Lua's doubles: this policy's numbers would pass \
                 2^52 (a period of 142 years, a burst refilled as slowly, or a sliding counter \
                 whose limit × window in microseconds reaches 2^51)",
    };
    let micros = policy.resolved(MICROSECOND);
    let limit = u128::from(policy.capacity());
    let width = u128::from(micros.period_nanos().as_u64() / 1000);
    if width >= MAX_EXACT {
        return Err(too_large("period"));
    }
    let (code, a, b) = match policy.algorithm() {
        Algorithm::TokenBucket => {
            let t = u128::from(micros.emission_nanos().as_u64() / 1000);
            (0, t, t * limit)
        }
        Algorithm::FixedWindow => (1, width, limit),
        Algorithm::SlidingWindowLog => (2, width, limit),
        Algorithm::SlidingWindowCounter => {
            if limit * width >= MAX_EXACT / 2 {
                return Err(too_large("capacity"));
            }
            (3, width, limit)
        }
    };
    // For a token bucket, t <= tau = b; for windows, both bound the width and the counts.
    if a >= MAX_EXACT {
        return Err(too_large("period"));
    }
    if b >= MAX_EXACT {
        return Err(too_large("capacity"));
    }
    // Both fit: below 2^52.
    Ok((code, a as u64, b as u64))
}

/// One check, encoded for the script once: validated, its Redis key formatted.
pub(crate) struct Encoded {
    /// The bucket's Redis key.
    pub(crate) bucket: Vec<u8>,
    /// The policy decided with (the deny cache's terms).
    pub(crate) policy: Policy,
    pub(super) code: u8,
    pub(super) a: u64,
    pub(super) b: u64,
    pub(crate) cost: u64,
    pub(super) limit: u64,
    /// How a denial of this bucket evolves, for the deny cache.
    pub(crate) refill: Refill,
    /// A token bucket's constants at the script's resolution, to replay `bucket.lua`.
    pub(super) gcra: Option<Gcra>,
}

impl Encoded {
    pub(crate) fn new(check: &Check<'_>) -> Result<Encoded, CheckError> {
        let (code, a, b) = params(&check.policy).map_err(|e| match e {
            PolicyError::Unsupported { reason, .. } => CheckError::Unsupported(reason),
            _ => CheckError::Unsupported("a policy the Redis store cannot decide"),
        })?;
        let capacity = check.policy.capacity();
        if check.cost > capacity {
            return Err(CheckError::CostExceedsCapacity {
                cost: check.cost,
                capacity,
            });
        }
        let (refill, gcra) = match check.policy.algorithm() {
            Algorithm::TokenBucket => {
                let micros = check.policy.resolved(MICROSECOND);
                (
                    Refill::Every(micros.emission_nanos()),
                    Some(Gcra::new(&micros)),
                )
            }
            Algorithm::FixedWindow => (Refill::AtWindowEnd, None),
            Algorithm::SlidingWindowLog | Algorithm::SlidingWindowCounter => {
                (Refill::Sliding, None)
            }
        };
        Ok(Encoded {
            bucket: bucket_key(check),
            policy: check.policy,
            code,
            a,
            b,
            cost: check.cost,
            limit: capacity,
            refill,
            gcra,
        })
    }

    /// What this check takes from a token bucket that is full, in the script's terms (cost ×
    /// t, µs), and the numbers a bucket so created is written under (t, tau): `None` for a
    /// peek or another algorithm.
    pub(crate) fn take(&self) -> Option<Take> {
        (self.gcra.is_some() && self.cost > 0).then(|| (self.cost * self.a, self.a, self.b))
    }
}

/// What a check taken first takes (µs), and its policy's t and tau (µs): `bucket.lua` writes a
/// bucket it creates as `"<now + took> <t> <tau>"`.
pub(crate) type Take = (u64, u64, u64);

/// Every check of `decisions`, in order.
pub(crate) fn checks<D: AsRef<[Encoded]>>(decisions: &[D]) -> impl Iterator<Item = &Encoded> {
    decisions.iter().flat_map(AsRef::as_ref)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn policies_are_sent_in_whole_microseconds_rounded_up() {
        let s = Duration::from_secs(1);
        let tb = Policy::token_bucket(3, 3, s).unwrap();
        assert_eq!(params(&tb).unwrap(), (0, 333_334, 1_000_002));
        let fw = Policy::fixed_window(5, Duration::from_nanos(1_500)).unwrap();
        assert_eq!(params(&fw).unwrap(), (1, 2, 5));
        let sl = Policy::sliding_window_log(4, s).unwrap();
        assert_eq!(params(&sl).unwrap(), (2, 1_000_000, 4));
        let sc = Policy::sliding_window_counter(4, s).unwrap();
        assert_eq!(params(&sc).unwrap(), (3, 1_000_000, 4));
    }

    #[test]
    fn policies_beyond_exact_doubles_are_refused() {
        let day = Duration::from_secs(86_400);
        // 8.64e10 µs × 1e5 ≈ 2^53: the weighted estimate would not be exact.
        let sc = Policy::sliding_window_counter(100_000, day).unwrap();
        assert_eq!(params(&sc).unwrap_err().field(), "capacity");
        assert!(params(&Policy::sliding_window_counter(10_000, day).unwrap()).is_ok());
        let fw = Policy::fixed_window(1 << 53, Duration::from_secs(1 << 30)).unwrap();
        assert_eq!(params(&fw).unwrap_err().field(), "capacity");
        // The server's reproduction: a period of 4.55e12 ms is beyond the range by itself.
        let long = Policy::token_bucket(1, 1, Duration::from_millis(4_550_000_000_000)).unwrap();
        assert_eq!(params(&long).unwrap_err().field(), "period");
    }
}
