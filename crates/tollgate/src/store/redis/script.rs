//! The decision script: arguments in, decisions out. See `decide.lua` for the contract.

use std::collections::HashMap;
use std::time::Duration;

use redis::{Script, Value};

use super::keys::bucket_key;
use crate::{Algorithm, Check, CheckError, Decision, Nanos, Policy, StoreError, Verdict};

/// Lua numbers are doubles: every quantity must stay an exact integer (below 2^53, with room
/// for the sums the script forms).
const MAX_EXACT: u128 = 1 << 52;

/// One microsecond, the script's unit of time.
pub(crate) const MICROSECOND: Nanos = Nanos::new(1000);

pub(crate) fn script() -> Script {
    Script::new(include_str!("decide.lua"))
}

/// A policy in the script's terms: its algorithm code and two numbers (see `decide.lua`), in
/// microseconds rounded up as [`Policy::at_resolution`] rounds them, so rounding only
/// under-grants.
pub(crate) fn params(policy: &Policy) -> Result<(u8, u64, u64), CheckError> {
    let too_large = || {
        CheckError::Unsupported(
            "policy too large for the Redis store (its numbers would pass 2^52 in Lua's doubles)",
        )
    };
    let micros = policy.at_resolution(MICROSECOND);
    let limit = u128::from(policy.capacity());
    let width = u128::from(micros.period().as_u64() / 1000);
    let (code, a, b) = match policy.algorithm() {
        Algorithm::TokenBucket => {
            let t = u128::from(micros.emission_interval().as_u64() / 1000);
            (0, t, t * limit)
        }
        Algorithm::FixedWindow => (1, width, limit),
        Algorithm::SlidingWindowLog => (2, width, limit),
        Algorithm::SlidingWindowCounter => {
            if limit * width >= MAX_EXACT / 2 {
                return Err(too_large());
            }
            (3, width, limit)
        }
    };
    // For a token bucket, t <= tau = b; for windows, both bound the width and the counts.
    if a >= MAX_EXACT || b >= MAX_EXACT {
        return Err(too_large());
    }
    // Both fit: below 2^52.
    Ok((code, a as u64, b as u64))
}

/// One script call: a list of decisions, each a list of checks.
pub(crate) struct Call {
    keys: Vec<Vec<u8>>,
    args: Vec<u64>,
    /// Capacity of each check, per decision: to label the decisions coming back.
    limits: Vec<Vec<u64>>,
}

/// The script's answer to one decision.
pub(crate) struct Reply {
    pub(crate) verdict: Verdict,
    /// Per check: how long a denial stays exactly as answered if nobody else takes (what a deny
    /// cache may repeat); zero when allowed.
    pub(crate) holds: Vec<Duration>,
}

impl Call {
    pub(crate) fn new<'c>(
        decisions: impl IntoIterator<Item = &'c [Check<'c>]>,
    ) -> Result<Call, CheckError> {
        let mut index: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut call = Call {
            keys: Vec::new(),
            args: vec![0],
            limits: Vec::new(),
        };
        for checks in decisions {
            call.args.push(checks.len() as u64);
            let mut limits = Vec::with_capacity(checks.len());
            for check in checks {
                let (code, a, b) = params(&check.policy)?;
                if check.cost > check.policy.capacity() {
                    return Err(CheckError::CostExceedsCapacity {
                        cost: check.cost,
                        capacity: check.policy.capacity(),
                    });
                }
                let key = bucket_key(&check.policy, check.key);
                let next = index.len() as u64 + 1;
                let k = *index.entry(key.clone()).or_insert_with(|| {
                    call.keys.push(key);
                    next
                });
                call.args.extend([k, u64::from(code), a, b, check.cost]);
                limits.push(check.policy.capacity());
            }
            call.limits.push(limits);
        }
        call.args[0] = call.limits.len() as u64;
        Ok(call)
    }

    /// Runs the call; `now_us` injects the time (tests), `None` uses Redis's clock.
    pub(crate) async fn run(
        &self,
        script: &Script,
        conn: &mut impl redis::aio::ConnectionLike,
        now_us: Option<u64>,
    ) -> Result<Vec<Reply>, StoreError> {
        let mut invocation = script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key.as_slice());
        }
        invocation.arg(now_us.map_or(String::new(), |n| n.to_string()));
        for arg in &self.args {
            invocation.arg(*arg);
        }
        let reply: Value = invocation
            .invoke_async(conn)
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        self.parse(reply)
    }

    fn parse(&self, reply: Value) -> Result<Vec<Reply>, StoreError> {
        let Value::Array(items) = reply else {
            return Err(malformed("not an array"));
        };
        let mut numbers = items.into_iter().map(|v| match v {
            Value::Int(n) => u64::try_from(n).map_err(|_| malformed("negative number")),
            _ => Err(malformed("not an integer")),
        });
        let mut next = || numbers.next().unwrap_or(Err(malformed("too short")));
        let _now = next()?;
        let mut replies = Vec::with_capacity(self.limits.len());
        for limits in &self.limits {
            let _all = next()?;
            let mut decisions = Vec::with_capacity(limits.len());
            let mut holds = Vec::with_capacity(limits.len());
            for &limit in limits {
                decisions.push(Decision {
                    allowed: next()? == 1,
                    limit,
                    remaining: next()?,
                    retry_after: Duration::from_micros(next()?),
                    reset_after: Duration::from_micros(next()?),
                });
                holds.push(Duration::from_micros(next()?));
            }
            replies.push(Reply {
                verdict: Verdict { decisions },
                holds,
            });
        }
        Ok(replies)
    }
}

fn malformed(what: &'static str) -> StoreError {
    StoreError::Unavailable(format!("malformed reply from the tollgate script: {what}").into())
}

#[cfg(test)]
mod tests {
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
        assert!(matches!(params(&sc), Err(CheckError::Unsupported(_))));
        assert!(params(&Policy::sliding_window_counter(10_000, day).unwrap()).is_ok());
        let fw = Policy::fixed_window(1 << 53, Duration::from_secs(1 << 30)).unwrap();
        assert!(matches!(params(&fw), Err(CheckError::Unsupported(_))));
    }
}
