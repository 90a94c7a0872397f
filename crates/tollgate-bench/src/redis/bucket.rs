//! What the three baselines share: the hash layout, the parameters and the client-side refill
//! step of the published benchmark (see `/work/shared/BASELINES.md`), floats and all.

/// A limit as the baselines take it: `burst` tokens, refilled at `rate` tokens per second; every
/// check costs one token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limit {
    pub(crate) burst: u64,
    pub(crate) rate: u64,
}

/// Every check of the benchmark takes one token.
pub(crate) const COST: f64 = 1.0;

/// The hash fields.
pub(crate) const TOKENS: &str = "tokens";
pub(crate) const TS: &str = "ts";

impl Limit {
    /// The TTL the baselines give a key: twice the time to refill from empty, at least a
    /// second, so an idle key vanishes once it would be full anyway.
    pub(crate) fn ttl_ms(&self) -> u64 {
        (self.burst.saturating_mul(2000) / self.rate.max(1)).max(1000)
    }
}

/// The refill step: `delta = max(0, now - ts)`, `tokens = min(burst, tokens + delta / 1000 *
/// rate)`; a missing key (or a field that does not parse) starts with `tokens = burst, ts = now`.
/// Returns the refilled tokens and the stored `ts` (the caller decides what to write back).
pub(crate) fn refill(limit: Limit, now_ms: u64, stored: (Option<f64>, Option<f64>)) -> (f64, f64) {
    let burst = limit.burst as f64;
    let now = now_ms as f64;
    let (tokens, ts) = match stored {
        (Some(tokens), Some(ts)) => (tokens, ts),
        _ => (burst, now),
    };
    let delta = (now - ts).max(0.0);
    ((tokens + delta / 1000.0 * limit.rate as f64).min(burst), ts)
}

/// Reads an `HMGET tokens ts` reply field as the Go client does (`strconv.ParseFloat`).
pub(crate) fn field(value: Option<String>) -> Option<f64> {
    value.and_then(|v| v.parse::<f64>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limit = Limit {
        burst: 10,
        rate: 10,
    };

    #[test]
    fn a_missing_key_starts_full_and_refill_is_capped() {
        assert_eq!(refill(L, 5_000, (None, None)), (10.0, 5_000.0));
        assert_eq!(refill(L, 5_000, (Some(2.0), Some(4_900.0))), (3.0, 4_900.0));
        assert_eq!(
            refill(L, 9_000, (Some(2.0), Some(4_900.0))),
            (10.0, 4_900.0)
        );
    }

    #[test]
    fn a_timestamp_from_the_future_refills_nothing() {
        assert_eq!(refill(L, 5_000, (Some(2.0), Some(6_000.0))), (2.0, 6_000.0));
    }

    #[test]
    fn ttl_covers_a_full_refill() {
        assert_eq!(L.ttl_ms(), 2000);
        let all = Limit {
            burst: 1_000_000_000,
            rate: 1_000_000_000,
        };
        assert_eq!(all.ttl_ms(), 2000);
        assert_eq!(
            Limit {
                burst: 1,
                rate: 100
            }
            .ttl_ms(),
            1000
        );
    }
}
