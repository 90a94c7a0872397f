//! Decisions with a window among their checks: one call of `<table>_decide_any` (schema.sql)
//! per decision, and its replay. The function locks the rows, decides whether each check
//! passes and writes the states they leave; tollgate decides the same checks with the pure
//! functions from the states the function read, answers from that, and refuses a reply whose
//! written states it does not reach.

use std::time::Duration;

use crate::algorithm::fixed_window::FixedWindowState;
use crate::algorithm::sliding_counter::{Carried, SlidingCounterState};
use crate::algorithm::sliding_log::SlidingLogState;
use crate::algorithm::{BucketState, decide_all};
use crate::{Decision, Nanos, Policy, StoreError, Verdict};

use super::call::{self, Units};

/// The arguments of one call.
pub(crate) struct AnyCall {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) kinds: Vec<i32>,
    pub(crate) a: Vec<i64>,
    pub(crate) b: Vec<i64>,
    pub(crate) cost: Vec<i64>,
    /// Per check: its policy at µs resolution and cost, for the replay.
    checks: Vec<(Policy, u64)>,
}

impl AnyCall {
    /// The call deciding one decision: `(row key, units, cost)` per check.
    pub(crate) fn new<'q>(checks: impl IntoIterator<Item = (&'q [u8], &'q Units, u64)>) -> AnyCall {
        let mut call = AnyCall {
            keys: Vec::new(),
            kinds: Vec::new(),
            a: Vec::new(),
            b: Vec::new(),
            cost: Vec::new(),
            checks: Vec::new(),
        };
        for (key, units, cost) in checks {
            call.keys.push(key.to_vec());
            call.kinds.push(units.code);
            call.a.push(units.t);
            call.b.push(units.tau);
            call.cost.push(i64::try_from(cost).unwrap_or(i64::MAX));
            call.checks.push((units.policy, cost));
        }
        call
    }

    /// Replays the reply `{now, allowed, per check: len, state before, len, state after}`.
    pub(crate) fn replay(&self, reply: &[i64]) -> Result<Verdict, StoreError> {
        let malformed = || StoreError::incompatible("malformed reply from decide_any");
        let mut rest = reply;
        let next = |rest: &mut &[i64]| -> Result<i64, StoreError> {
            let (&n, tail) = rest.split_first().ok_or_else(malformed)?;
            *rest = tail;
            Ok(n)
        };
        let now_us = next(&mut rest)?;
        let now = us(now_us);
        let flag = next(&mut rest)?;
        let allowed = flag == 1;
        let mut raw: Vec<[&[i64]; 2]> = Vec::with_capacity(self.checks.len());
        for _ in &self.kinds {
            let mut pair: [&[i64]; 2] = [&[], &[]];
            for state in &mut pair {
                let len = usize::try_from(next(&mut rest)?).map_err(|_| malformed())?;
                if rest.len() < len {
                    return Err(malformed());
                }
                let (read, tail) = rest.split_at(len);
                rest = tail;
                *state = read;
            }
            raw.push(pair);
        }
        if !rest.is_empty() {
            return Err(malformed());
        }
        // 2: a state this version never writes; nothing was taken.
        if flag == 2 {
            let which = self
                .kinds
                .iter()
                .zip(&raw)
                .position(|(&kind, [before, _])| state_of(kind, before, now_us).is_none());
            return Err(call::garbage(&self.keys, which));
        }
        let mut states = Vec::with_capacity(self.checks.len());
        let mut written = Vec::with_capacity(self.checks.len());
        for (&kind, [before, after]) in self.kinds.iter().zip(&raw) {
            states.push(state_of(kind, before, now_us).ok_or_else(malformed)?);
            written.push(state_of(kind, after, now_us).ok_or_else(malformed)?);
        }
        let pairs: Vec<(&Policy, u64)> = self.checks.iter().map(|(p, c)| (p, *c)).collect();
        let mut verdict = decide_all(&pairs, &mut states, now)?;
        if verdict.allowed() != allowed || states != written {
            return Err(StoreError::incompatible(
                "decide_any and tollgate's model disagree; is the function of another tollgate \
                 version? (`tollgate migrate` replaces it)",
            ));
        }
        // The database's clock reads whole microseconds: a wait that ends between two ticks
        // (a sliding counter's can) is over at the next one.
        for d in &mut verdict.decisions {
            *d = Decision::new(
                d.allowed(),
                d.limit(),
                d.remaining(),
                whole_micros(d.retry_after()),
                whole_micros(d.reset_after()),
            );
        }
        Ok(verdict)
    }
}

fn whole_micros(d: Duration) -> Duration {
    Duration::from_micros(u64::try_from(d.as_nanos().div_ceil(1000)).unwrap_or(u64::MAX))
}

fn us(n: i64) -> Nanos {
    Nanos::new(u64::try_from(n).unwrap_or(0).saturating_mul(1000))
}

/// The pure state of a row's state in µs read at `now` (µs; an empty one is a bucket never
/// seen), or `None` when this version never writes it: another shape, a negative number, a
/// time more than 2^52 µs past now.
fn state_of(kind: i32, state: &[i64], now: i64) -> Option<BucketState> {
    if state.iter().any(|&n| n < 0) {
        return None;
    }
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Some(match (kind, state) {
        (0, []) => BucketState::TokenBucket(Nanos::ZERO),
        (0, &[tat]) => BucketState::TokenBucket(call::tat_of(tat, now)?),
        (1, []) => BucketState::FixedWindow(FixedWindowState::default()),
        (1, &[window, c, width]) => BucketState::FixedWindow(FixedWindowState {
            window: count(window),
            count: count(c),
            width: count(width).saturating_mul(1000),
        }),
        (3, []) => BucketState::SlidingWindowCounter(SlidingCounterState::default()),
        (3, &[window, previous, current, width]) => {
            BucketState::SlidingWindowCounter(SlidingCounterState {
                window: count(window),
                previous: count(previous),
                current: count(current),
                width: count(width).saturating_mul(1000),
                carried: Carried::default(),
            })
        }
        // With the counts of an earlier width carried: both widths are written, never 0.
        (3, &[window, previous, current, width, cw, cp, cc, cwidth]) if width > 0 && cwidth > 0 => {
            BucketState::SlidingWindowCounter(SlidingCounterState {
                window: count(window),
                previous: count(previous),
                current: count(current),
                width: count(width).saturating_mul(1000),
                carried: Carried {
                    window: count(cw),
                    previous: count(cp),
                    current: count(cc),
                    width: count(cwidth).saturating_mul(1000),
                },
            })
        }
        (2, entries) if entries.len() % 2 == 0 => BucketState::SlidingWindowLog(
            SlidingLogState::from_entries(entries.chunks(2).map(|e| (us(e[0]), count(e[1])))),
        ),
        _ => return None,
    })
}
