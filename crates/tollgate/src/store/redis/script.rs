//! The token-bucket script: arguments in, decisions out. See `token_bucket.lua` for the contract.

use std::collections::HashMap;
use std::time::Duration;

use redis::{Script, Value};

use super::keys::bucket_key;
use crate::{Algorithm, Check, CheckError, Decision, Nanos, Policy, StoreError, Verdict};

/// Lua numbers are doubles: every quantity must stay an exact integer.
const MAX_EXACT: u128 = 1 << 52;

pub(crate) fn script() -> Script {
    Script::new(include_str!("token_bucket.lua"))
}

/// A policy in the script's units: emission interval and tolerance in microseconds, the
/// interval rounded up (as in nanoseconds in memory) so rounding only under-grants.
pub(crate) fn micros(policy: &Policy) -> Result<(u64, u64), CheckError> {
    if policy.algorithm() != Algorithm::TokenBucket {
        return Err(CheckError::Unsupported(
            "the Redis store decides token buckets only",
        ));
    }
    let t = u128::from(
        policy
            .at_resolution(Nanos::new(1000))
            .emission_interval()
            .as_u64()
            / 1000,
    );
    let tau = t * u128::from(policy.capacity());
    if tau >= MAX_EXACT {
        return Err(CheckError::Unsupported(
            "policy too large for the Redis store (capacity × µs per token >= 2^52)",
        ));
    }
    // Both fit: tau < 2^52 and t <= tau.
    Ok((t as u64, tau as u64))
}

/// One script call: a list of decisions, each a list of checks.
pub(crate) struct Call {
    keys: Vec<Vec<u8>>,
    args: Vec<u64>,
    /// Capacity of each check, per decision: to label the decisions coming back.
    limits: Vec<Vec<u64>>,
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
                let (t, tau) = micros(&check.policy)?;
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
                call.args.extend([k, t, tau, check.cost]);
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
    ) -> Result<Vec<Verdict>, StoreError> {
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

    fn parse(&self, reply: Value) -> Result<Vec<Verdict>, StoreError> {
        let Value::Array(items) = reply else {
            return Err(malformed("not an array"));
        };
        let mut numbers = items.into_iter().map(|v| match v {
            Value::Int(n) => u64::try_from(n).map_err(|_| malformed("negative number")),
            _ => Err(malformed("not an integer")),
        });
        let mut next = || numbers.next().unwrap_or(Err(malformed("too short")));
        let _now = next()?;
        let mut verdicts = Vec::with_capacity(self.limits.len());
        for limits in &self.limits {
            let _all = next()?;
            let mut decisions = Vec::with_capacity(limits.len());
            for &limit in limits {
                decisions.push(Decision {
                    allowed: next()? == 1,
                    limit,
                    remaining: next()?,
                    retry_after: Duration::from_micros(next()?),
                    reset_after: Duration::from_micros(next()?),
                });
            }
            verdicts.push(Verdict { decisions });
        }
        Ok(verdicts)
    }
}

fn malformed(what: &'static str) -> StoreError {
    StoreError::Unavailable(format!("malformed reply from the tollgate script: {what}").into())
}
