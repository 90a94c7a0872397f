//! The decision functions, pure: old state + now + policy + cost -> outcome (decision + new
//! state). No I/O, no clock, no allocation on the token-bucket path.
//!
//! [`BucketState`] and [`decide_all`] put the algorithms behind one shape so that several
//! checks can be decided together, all or nothing.

pub mod fixed_window;
pub mod gcra;
pub mod sliding_counter;
pub mod sliding_log;

use crate::{Algorithm, CheckError, Decision, Nanos, Policy, Verdict};
use fixed_window::{FixedWindowOutcome, FixedWindowState};
use gcra::{Gcra, GcraOutcome};
use sliding_counter::{SlidingCounterOutcome, SlidingCounterState};
use sliding_log::{SlidingLogOutcome, SlidingLogState};

/// The stored state of one key under one policy, whatever its algorithm.
///
/// ```
/// use tollgate::algorithm::{evaluate, BucketState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::per_second(1)?;
/// let mut state = BucketState::new(&policy);
/// let outcome = evaluate(&policy, &state, Nanos::new(5_000_000_000), 1)?;
/// outcome.apply(&mut state);
/// assert!(!state.is_idle(&policy, Nanos::new(5_000_000_000)));
/// assert!(state.is_idle(&policy, Nanos::new(6_000_000_000))); // refilled: as never seen
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BucketState {
    /// A token bucket's theoretical arrival time.
    TokenBucket(Nanos),
    /// A fixed window's count.
    FixedWindow(FixedWindowState),
    /// A sliding window's log.
    SlidingWindowLog(SlidingLogState),
    /// A sliding window's two counts.
    SlidingWindowCounter(SlidingCounterState),
}

impl BucketState {
    /// The state of a key never seen under `policy`.
    pub fn new(policy: &Policy) -> BucketState {
        match policy.algorithm() {
            Algorithm::TokenBucket => BucketState::TokenBucket(Nanos::ZERO),
            Algorithm::FixedWindow => BucketState::FixedWindow(FixedWindowState::default()),
            Algorithm::SlidingWindowLog => {
                BucketState::SlidingWindowLog(SlidingLogState::default())
            }
            Algorithm::SlidingWindowCounter => {
                BucketState::SlidingWindowCounter(SlidingCounterState::default())
            }
        }
    }

    /// Whether the state at `now` is the same as a key never seen, so it can be dropped.
    pub fn is_idle(&self, policy: &Policy, now: Nanos) -> bool {
        // A window is numbered in the width it was counted in, which the state keeps (the
        // policy's period may have changed since); a state without one is the policy's.
        let width = |stored: u64| match stored {
            0 => policy.period_nanos().as_u64(),
            w => w,
        };
        match self {
            BucketState::TokenBucket(tat) => Gcra::is_full(*tat, now),
            BucketState::FixedWindow(s) => s.count == 0 || s.window < now.as_u64() / width(s.width),
            BucketState::SlidingWindowLog(s) => s.is_idle(policy.period_nanos(), now),
            BucketState::SlidingWindowCounter(s) => s.is_idle(policy.period_nanos().as_u64(), now),
        }
    }
}

/// One evaluated check of any algorithm.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{evaluate, BucketState, Outcome};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::fixed_window(1, Duration::from_secs(1))?;
/// let state = BucketState::new(&policy);
/// let outcome = evaluate(&policy, &state, Nanos::ZERO, 1)?;
/// assert!(matches!(outcome, Outcome::FixedWindow(_)));
/// assert!(outcome.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// See [`GcraOutcome`].
    TokenBucket(GcraOutcome),
    /// See [`FixedWindowOutcome`].
    FixedWindow(FixedWindowOutcome),
    /// See [`SlidingLogOutcome`].
    SlidingWindowLog(SlidingLogOutcome),
    /// See [`SlidingCounterOutcome`].
    SlidingWindowCounter(SlidingCounterOutcome),
}

/// `state`, written under the numbers of `from`, as a bucket of `to`'s numbers at `now`: what
/// a store does before deciding on a bucket whose policy's numbers changed under its name.
/// A token bucket keeps its level, capped at the new capacity ([`Gcra::rebase`]); a window
/// keeps its counts, which carry the width they were counted in, so it is returned as it is.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{evaluate, rebase, BucketState};
/// use tollgate::{Nanos, Policy};
///
/// let old = Policy::token_bucket(3, 1, Duration::from_secs(10))?;
/// let raised = Policy::token_bucket(6, 6, Duration::from_secs(10))?;
/// let now = Nanos::new(1 << 40);
/// let mut state = BucketState::new(&old);
/// evaluate(&old, &state, now, 3)?.apply(&mut state); // spent
/// let state = rebase(&state, &old, &raised, now);
/// let decision = evaluate(&raised, &state, now, 1)?.decision(false);
/// // Still spent, and the next token comes at the raised pace: 10 s / 6.
/// assert_eq!(decision.remaining(), 0);
/// assert_eq!(decision.retry_after(), Duration::from_nanos(1_666_666_667));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn rebase(state: &BucketState, from: &Policy, to: &Policy, now: Nanos) -> BucketState {
    match state {
        BucketState::TokenBucket(tat) if from.algorithm() == Algorithm::TokenBucket => {
            BucketState::TokenBucket(Gcra::new(to).rebase(&Gcra::new(from), *tat, now))
        }
        other => other.clone(),
    }
}

/// Evaluates taking `cost` at `now` from `state` under `policy`. A state of another algorithm
/// than the policy's (a key whose policy changed kind) is read as a key never seen. A `now`
/// past [`MAX_NOW`](gcra::MAX_NOW) is refused ([`CheckError::ClockOutOfRange`]).
pub fn evaluate(
    policy: &Policy,
    state: &BucketState,
    now: Nanos,
    cost: u64,
) -> Result<Outcome, CheckError> {
    gcra::check_now(now)?;
    let fresh;
    let state = if matches_algorithm(state, policy.algorithm()) {
        state
    } else {
        fresh = BucketState::new(policy);
        &fresh
    };
    Ok(match state {
        BucketState::TokenBucket(tat) => {
            Outcome::TokenBucket(Gcra::new(policy).decide(*tat, now, cost)?)
        }
        BucketState::FixedWindow(s) => {
            Outcome::FixedWindow(fixed_window::decide(policy, *s, now, cost)?)
        }
        BucketState::SlidingWindowLog(s) => {
            Outcome::SlidingWindowLog(sliding_log::decide(policy, s, now, cost)?)
        }
        BucketState::SlidingWindowCounter(s) => {
            Outcome::SlidingWindowCounter(sliding_counter::decide(policy, *s, now, cost)?)
        }
    })
}

fn matches_algorithm(state: &BucketState, algorithm: Algorithm) -> bool {
    matches!(
        (state, algorithm),
        (BucketState::TokenBucket(_), Algorithm::TokenBucket)
            | (BucketState::FixedWindow(_), Algorithm::FixedWindow)
            | (
                BucketState::SlidingWindowLog(_),
                Algorithm::SlidingWindowLog
            )
            | (
                BucketState::SlidingWindowCounter(_),
                Algorithm::SlidingWindowCounter
            )
    )
}

impl Outcome {
    /// Whether this check alone would pass.
    pub fn allowed(&self) -> bool {
        match self {
            Outcome::TokenBucket(o) => o.allowed(),
            Outcome::FixedWindow(o) => o.allowed(),
            Outcome::SlidingWindowLog(o) => o.allowed(),
            Outcome::SlidingWindowCounter(o) => o.allowed(),
        }
    }

    /// The decision, with the cost `taken` or not.
    pub fn decision(&self, taken: bool) -> Decision {
        match self {
            Outcome::TokenBucket(o) => o.decision(taken),
            Outcome::FixedWindow(o) => o.decision(taken),
            Outcome::SlidingWindowLog(o) => o.decision(taken),
            Outcome::SlidingWindowCounter(o) => o.decision(taken),
        }
    }

    /// Takes the cost: writes the new state.
    pub fn apply(&self, state: &mut BucketState) {
        match self {
            Outcome::TokenBucket(o) => *state = BucketState::TokenBucket(o.new_tat()),
            Outcome::FixedWindow(o) => *state = BucketState::FixedWindow(o.new_state()),
            Outcome::SlidingWindowCounter(o) => {
                *state = BucketState::SlidingWindowCounter(o.new_state())
            }
            Outcome::SlidingWindowLog(o) => {
                if !matches!(state, BucketState::SlidingWindowLog(_)) {
                    *state = BucketState::SlidingWindowLog(SlidingLogState::default());
                }
                if let BucketState::SlidingWindowLog(log) = state {
                    o.apply(log);
                }
            }
        }
    }
}

/// Decides several checks together: each `(policy, state, cost)` is evaluated at `now`; if all
/// allow, every state is updated, otherwise none is.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{decide_all, BucketState};
/// use tollgate::{Nanos, Policy};
///
/// let per_second = Policy::token_bucket(2, 2, Duration::from_secs(1))?;
/// let per_hour = Policy::token_bucket(3, 3, Duration::from_secs(3600))?;
/// let mut states = [BucketState::new(&per_second), BucketState::new(&per_hour)];
/// let checks = [(&per_second, 1), (&per_hour, 1)];
/// let mut now = Nanos::ZERO;
/// for _ in 0..3 {
///     assert!(decide_all(&checks, &mut states, now)?.allowed());
///     now = now + Nanos::new(1_000_000_000);
/// }
/// // The hourly budget is spent: denied, and the per-second bucket was not charged.
/// let verdict = decide_all(&checks, &mut states, now)?;
/// assert!(!verdict.allowed());
/// assert_eq!(verdict.decisions()[0].remaining(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn decide_all(
    checks: &[(&Policy, u64)],
    states: &mut [BucketState],
    now: Nanos,
) -> Result<Verdict, CheckError> {
    debug_assert_eq!(checks.len(), states.len());
    let outcomes = checks
        .iter()
        .zip(states.iter())
        .map(|(&(policy, cost), state)| evaluate(policy, state, now, cost))
        .collect::<Result<Vec<_>, _>>()?;
    let allowed = outcomes.iter().all(Outcome::allowed);
    if allowed {
        // A peek writes nothing: not even the window it rolled to or the width it read, which
        // would make a later check see the state as a new width leaves it.
        for ((outcome, state), _) in outcomes
            .iter()
            .zip(states.iter_mut())
            .zip(checks)
            .filter(|(_, (_, cost))| *cost > 0)
        {
            outcome.apply(state);
        }
    }
    Ok(Verdict::new(
        outcomes.iter().map(|o| o.decision(allowed)).collect(),
    ))
}
