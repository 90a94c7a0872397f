//! A call of the decide function: checks in, arguments out; and the replay of its answer
//! through [`decide_all`], which turns the locked state into the same decisions the database
//! made.

use std::collections::BTreeMap;

use crate::algorithm::gcra::Gcra;
use crate::algorithm::{BucketState, decide_all};
use crate::{Algorithm, Check, CheckError, Nanos, Policy, PolicyError, StoreError, Verdict};

/// The database's clock unit, and so the resolution of every policy it decides.
pub(crate) const MICROSECOND: Nanos = Nanos::new(1000);

/// The furthest past now a stored tat may be: 2^52 µs (142 years). Nothing this version writes
/// goes further (a charge stops at 2^51 µs of debt, and a tolerance is below 2^62 ns), so a
/// tat beyond it (or a negative one) was written by something else.
const FURTHEST_US: i64 = 1 << 52;

/// A stored tat (µs) read at `now` (µs), or `None` when it is one this version never writes.
pub(crate) fn tat_of(tat: i64, now: i64) -> Option<Nanos> {
    let tat = u64::try_from(tat).ok()?;
    (tat <= u64::try_from(now.saturating_add(FURTHEST_US)).unwrap_or(0))
        .then(|| Nanos::new(tat.saturating_mul(1000)))
}

/// The error for a row whose state this version never writes: `keys`, the rows of the call,
/// and `which` of them when it is known.
pub(crate) fn garbage(keys: &[Vec<u8>], which: Option<usize>) -> StoreError {
    let rows = match which.and_then(|i| keys.get(i)) {
        Some(key) => format!("the row {:?} holds", String::from_utf8_lossy(key)),
        None => {
            let keys: Vec<_> = keys.iter().map(|k| String::from_utf8_lossy(k)).collect();
            format!("one of the rows {keys:?} holds")
        }
    };
    StoreError::incompatible(format!(
        "{rows} a state this version of tollgate never writes (garbage, or out of range): \
         nothing was decided or settled on it, and the cleanup deletes it as it deletes idle \
         buckets"
    ))
}

/// Whether the store decides `policy`: every policy does (products are computed in numeric,
/// and every time fits a bigint of microseconds).
pub(crate) fn supports(policy: &Policy) -> Result<(), PolicyError> {
    let _ = policy;
    Ok(())
}

/// A policy in the database's units.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Units {
    /// The policy at microsecond resolution: what the replay decides with.
    pub(crate) policy: Policy,
    /// The algorithm, as `decide_any` numbers it: 0 token bucket, 1 fixed window, 2 sliding
    /// log, 3 sliding counter.
    pub(crate) code: i32,
    /// Token bucket: µs per token, rounded up. Windows: the width in µs, rounded up.
    pub(crate) t: i64,
    /// Token bucket: capacity × t. Windows: the limit.
    pub(crate) tau: i64,
}

impl Units {
    pub(crate) fn of(policy: &Policy) -> Result<Units, CheckError> {
        let policy = policy.resolved(MICROSECOND);
        // tolerance and period are at most 2^62 ns, so both fit in an i64 (as every tat does:
        // now + tau < 2^63).
        let micros = |n: Nanos| i64::try_from(n.as_u64() / 1000).unwrap_or(i64::MAX);
        let limit = i64::try_from(policy.capacity()).unwrap_or(i64::MAX);
        let (code, t, tau) = match policy.algorithm() {
            Algorithm::TokenBucket => (
                0,
                micros(policy.emission_nanos()),
                micros(policy.tolerance_nanos()),
            ),
            Algorithm::FixedWindow => (1, micros(policy.period_nanos()), limit),
            Algorithm::SlidingWindowLog => (2, micros(policy.period_nanos()), limit),
            Algorithm::SlidingWindowCounter => (3, micros(policy.period_nanos()), limit),
        };
        Ok(Units {
            policy,
            code,
            t,
            tau,
        })
    }

    pub(crate) fn is_token_bucket(&self) -> bool {
        self.code == 0
    }
}

/// The row key of `check`'s bucket: the layout's version, the algorithm (`tb`, or a window's
/// `fw`, `sl`, `sc`, whose rows live in `<table>_windows`), the bucket's name
/// (`=<length>:<policy name>:`, or `#<capacity>:<refill>:<period_ns>:` when the check has no
/// name), then the user's key as raw bytes. The name part delimits itself (a length, or a fixed
/// shape), so names and keys never run into each other. `v1` named every bucket by its numbers
/// as `v1:tb:<capacity>:<refill>:<period_ns>:`; such rows are never read, and are deleted by the
/// cleanup once their buckets are full.
pub(crate) fn bucket_key(check: &Check<'_>) -> Vec<u8> {
    let policy = &check.policy;
    let kind = match policy.algorithm() {
        Algorithm::TokenBucket => "tb",
        Algorithm::FixedWindow => "fw",
        Algorithm::SlidingWindowLog => "sl",
        Algorithm::SlidingWindowCounter => "sc",
    };
    let mut out = match check.name {
        Some(name) => format!("v2:{kind}:={}:{name}:", name.len()),
        None => format!(
            "v2:{kind}:#{}:{}:{}:",
            policy.capacity(),
            policy.refill(),
            policy.period_nanos().as_u64()
        ),
    }
    .into_bytes();
    out.extend_from_slice(check.key);
    out
}

/// Refuses what can never be decided, before any I/O.
pub(crate) fn validate(check: &Check<'_>) -> Result<Units, CheckError> {
    let units = Units::of(&check.policy)?;
    if check.cost > check.policy.capacity() {
        return Err(CheckError::CostExceedsCapacity {
            cost: check.cost,
            capacity: check.policy.capacity(),
        });
    }
    Ok(units)
}

/// The arguments of `<table>_decide` for a list of decisions.
#[derive(Debug, Default)]
pub(crate) struct Call {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) sizes: Vec<i32>,
    pub(crate) idx: Vec<i32>,
    pub(crate) t: Vec<i64>,
    pub(crate) tau: Vec<i64>,
    pub(crate) cost: Vec<i64>,
    /// Per check: its policy at µs resolution and its cost, for the replay.
    checks: Vec<(Policy, u64)>,
}

impl Call {
    /// The call deciding `decisions` in order, each all-or-nothing.
    pub(crate) fn new<'c>(
        decisions: impl IntoIterator<Item = &'c [Check<'c>]>,
    ) -> Result<Call, CheckError> {
        let decisions: Vec<&[Check<'_>]> = decisions.into_iter().collect();
        // Distinct buckets in sorted order: every caller locks rows in one global order.
        let mut index: BTreeMap<Vec<u8>, i32> = BTreeMap::new();
        for check in decisions.iter().flat_map(|d| d.iter()) {
            index.insert(bucket_key(check), 0);
        }
        let mut call = Call::default();
        for (i, (key, slot)) in index.iter_mut().enumerate() {
            *slot = i32::try_from(i + 1).map_err(|_| CheckError::Unsupported("too many checks"))?;
            call.keys.push(key.clone());
        }
        for checks in decisions {
            call.sizes.push(
                i32::try_from(checks.len())
                    .map_err(|_| CheckError::Unsupported("too many checks"))?,
            );
            for check in checks {
                let units = validate(check)?;
                if !units.is_token_bucket() {
                    return Err(CheckError::Unsupported(
                        "the decide function takes token buckets; windows go to decide_any",
                    ));
                }
                call.idx.push(index[&bucket_key(check)]);
                call.t.push(units.t);
                call.tau.push(units.tau);
                call.cost
                    .push(i64::try_from(check.cost).unwrap_or(i64::MAX));
                call.checks.push((units.policy, check.cost));
            }
        }
        Ok(call)
    }

    /// Replays the call on the state the function locked. `reply` is `{now, the tat of each
    /// key before (under the numbers of the first check naming it), then after}`; the replay
    /// must end in the state the function wrote. A key a later check names under other
    /// numbers (a policy changed between two coalesced checks) is rebased there, as the
    /// function does.
    pub(crate) fn replay(&self, reply: &[i64]) -> Result<Vec<Verdict>, StoreError> {
        let malformed = || StoreError::incompatible("malformed reply from the decide function");
        let (&now, tats) = reply.split_first().ok_or_else(malformed)?;
        if tats.len() != 2 * self.keys.len() {
            return Err(malformed());
        }
        let (old, written) = tats.split_at(self.keys.len());
        let micros = |us: i64| Nanos::new(u64::try_from(us).unwrap_or(0).saturating_mul(1000));
        let (now_us, now) = (now, micros(now));
        let mut states: Vec<BucketState> = Vec::with_capacity(old.len());
        for (k, &tat) in old.iter().enumerate() {
            let tat = tat_of(tat, now_us).ok_or_else(|| garbage(&self.keys, Some(k)))?;
            states.push(BucketState::TokenBucket(tat));
        }
        let mut under: Vec<Option<Gcra>> = vec![None; states.len()];
        let mut verdicts = Vec::with_capacity(self.sizes.len());
        let mut first = 0;
        for &size in &self.sizes {
            let range = first..first + usize::try_from(size).unwrap_or(0);
            first = range.end;
            let checks: Vec<(&Policy, u64)> = self.checks[range.clone()]
                .iter()
                .map(|(p, c)| (p, *c))
                .collect();
            let slots: Vec<usize> = self.idx[range]
                .iter()
                .map(|&k| usize::try_from(k - 1).unwrap_or(0))
                .collect();
            for (&k, (policy, _)) in slots.iter().zip(&checks) {
                let gcra = Gcra::new(policy);
                if let (Some(from), BucketState::TokenBucket(tat)) = (under[k], &states[k]) {
                    states[k] =
                        BucketState::TokenBucket(gcra.rebase_in(&from, *tat, now, MICROSECOND));
                }
                under[k] = Some(gcra);
            }
            let mut held: Vec<BucketState> = slots.iter().map(|&k| states[k].clone()).collect();
            let verdict = decide_all(&checks, &mut held, now)?;
            if verdict.allowed() {
                for (&k, state) in slots.iter().zip(held) {
                    states[k] = state;
                }
            }
            verdicts.push(verdict);
        }
        let replayed = states.iter().map(|s| match s {
            BucketState::TokenBucket(tat) => *tat,
            _ => Nanos::ZERO,
        });
        if !replayed.eq(written.iter().map(|&tat| micros(tat))) {
            return Err(StoreError::incompatible(
                "the decide function and tollgate's model disagree; is the function of another \
                 tollgate version? (`tollgate migrate` replaces it)",
            ));
        }
        Ok(verdicts)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn keys_are_distinct_sorted_and_shared_between_decisions() {
        let p = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
        let a = [Check::new(p, b"zed", 1), Check::new(p, b"amy", 1)];
        let b = [Check::new(p, b"amy", 2)];
        let call = Call::new([&a[..], &b[..]]).unwrap();
        assert_eq!(call.keys.len(), 2);
        assert!(call.keys[0] < call.keys[1]);
        assert_eq!(call.sizes, [2, 1]);
        assert_eq!(call.idx, [2, 1, 1]);
        assert_eq!(call.t, [200_000; 3]);
        assert_eq!(call.tau, [1_000_000; 3]);
    }

    #[test]
    fn replay_carries_state_from_one_decision_to_the_next() {
        let p = Policy::token_bucket(2, 1, Duration::from_secs(1)).unwrap();
        let one = [Check::new(p, b"k", 1)];
        let call = Call::new([&one[..], &one[..], &one[..]]).unwrap();
        let now = 1_000_000_000_i64;
        let verdicts = call.replay(&[now, 0, now + 2_000_000]).unwrap();
        let allowed: Vec<bool> = verdicts.iter().map(Verdict::allowed).collect();
        assert_eq!(allowed, [true, true, false]);
        assert_eq!(
            verdicts[2].decisions[0].retry_after(),
            Duration::from_secs(1)
        );
        // A function that wrote anything else is caught.
        assert!(call.replay(&[now, 0, now + 1_000_000]).is_err());
    }

    #[test]
    fn the_token_bucket_function_refuses_windows_and_impossible_costs() {
        let w = Policy::fixed_window(5, Duration::from_secs(1)).unwrap();
        assert!(matches!(
            Call::new([&[Check::new(w, b"k", 1)][..]]),
            Err(CheckError::Unsupported(_))
        ));
        let p = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
        assert!(matches!(
            Call::new([&[Check::new(p, b"k", 6)][..]]),
            Err(CheckError::CostExceedsCapacity { .. })
        ));
    }
}
