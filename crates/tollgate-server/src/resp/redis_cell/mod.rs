//! `CL.THROTTLE key max_burst count period [quantity]`, answered as the redis-cell module (0.5)
//! answers it, integer for integer.
//!
//! The module's arithmetic, which this file reproduces: the emission interval is
//! `T = period_ns / count` computed in `f64` and truncated to whole nanoseconds; the tolerance is
//! `τ = T × (max_burst + 1)` and the limit `max_burst + 1`; a request of `quantity` is allowed
//! when `max(tat, now) + T × quantity − τ ≤ now`. The bucket itself is tollgate's token bucket
//! with exactly those numbers (capacity `max_burst + 1`, one token every `T`), named by the key
//! alone, so the decision is the store's, atomic on any store; the reply's numbers are then
//! derived from the decision as the module derives them: `remaining` from microseconds in
//! `f64`, the seconds of `retry_after` and `reset_after` truncated and then raised by one when
//! the part below the second holds a whole millisecond (so 1.0004 s answers 1, and 1.001 s
//! answers 2). A quantity above the limit is limited with `retry_after` −1, nothing taken.
//!
//! Negative numbers the module takes as they come (0.5.0 checks none of them): a negative
//! `max_burst`, a negative emission interval (`count` or `period` negative, not both) or a
//! negative `quantity` run through its arithmetic all the same. Those requests are answered
//! with the module's reply, worked out by [`Degenerate`] (in `degenerate.rs`) from the key's
//! bucket as it stands, and never change the bucket. Numbers whose tolerance does not fit in 64
//! bits of nanoseconds are refused.

use std::time::Duration;

use tollgate::{Decision, Policy};

mod degenerate;

pub(super) use degenerate::Degenerate;

/// The bucket name every `CL.THROTTLE` key goes by: the key alone names the bucket, whatever
/// numbers come with it.
pub(super) const BUCKET: &str = "cl.throttle";

const USAGE: &str =
    "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]";

/// A valid `CL.THROTTLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Throttle<'a> {
    /// The key.
    pub(super) key: &'a [u8],
    /// The bucket's policy: capacity `max_burst + 1`, a token every `T`.
    pub(super) policy: Policy,
    /// The tokens asked for.
    pub(super) quantity: u64,
    /// `T`, in nanoseconds.
    emission: i64,
}

/// A `CL.THROTTLE`, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Parsed<'a> {
    /// Numbers a token bucket can hold.
    Bucket(Throttle<'a>),
    /// A negative among the numbers: the module's reply, worked out without a bucket of them.
    Degenerate(Degenerate<'a>),
}

impl<'a> Throttle<'a> {
    /// Reads `args` (the command's name first), or the error line to answer.
    pub(super) fn parse(args: &[&'a [u8]]) -> Result<Parsed<'a>, String> {
        if args.len() != 5 && args.len() != 6 {
            return Err(USAGE.to_owned());
        }
        let key = args[1];
        let max_burst = integer(args[2])?;
        let count = integer(args[3])?;
        let period = integer(args[4])?;
        let quantity = args.get(5).map_or(Ok(1), |q| integer(q))?;
        let period_ns = i128::from(period) * 1_000_000_000;
        let emission = if count == 0 || period_ns == 0 {
            0
        } else {
            (period_ns as f64 / count as f64) as i64
        };
        if emission == 0 {
            return Err("Cell error: Zero rates are not supported".to_owned());
        }
        if max_burst < 0 || emission < 0 || quantity < 0 {
            return Ok(Parsed::Degenerate(Degenerate::new(
                key, max_burst, emission, quantity,
            )));
        }
        let limit = max_burst as u64 + 1;
        let tolerance = (emission as u64).checked_mul(limit);
        let policy = tolerance
            .filter(|&t| t <= i64::MAX as u64)
            .and_then(|_| {
                Policy::token_bucket(limit, 1, Duration::from_nanos(emission as u64)).ok()
            })
            .ok_or_else(|| {
                "Cell error: max_burst × period / count is too long a time to keep".to_owned()
            })?;
        Ok(Parsed::Bucket(Throttle {
            key,
            policy,
            quantity: quantity as u64,
            emission,
        }))
    }

    /// The module's five integers for `decision`, the store's answer to this request; with
    /// `over_capacity` (the quantity exceeds the limit, which the module answers limited with
    /// `retry_after` −1), the answer to a look at the bucket, which took nothing.
    pub(super) fn reply(&self, decision: &Decision, over_capacity: bool) -> [i64; 5] {
        let limit = self.policy.capacity() as i64;
        let tolerance = i128::from(self.emission) * i128::from(limit);
        let ttl = decision.reset_after().as_nanos() as i128;
        // A look (quantity 0) at a bucket spent past its tolerance, as one is after its numbers
        // shrank, is limited for the module, with the wait until it is back within; the store
        // answers a look allowed, so it is worked out here.
        let overdrawn = self.quantity == 0 && ttl > tolerance;
        let limited = over_capacity || !decision.allowed() || overdrawn;
        let retry_after = if overdrawn {
            ttl - tolerance
        } else if limited && !over_capacity {
            decision.retry_after().as_nanos() as i128
        } else {
            -1_000_000_000
        };
        let next = tolerance - ttl;
        let remaining = if next > -i128::from(self.emission) {
            (whole_micros(next) as f64 / whole_micros(i128::from(self.emission)) as f64) as i64
        } else {
            0
        };
        [
            i64::from(limited),
            limit,
            remaining,
            seconds(retry_after),
            seconds(ttl),
        ]
    }
}

/// An argument as the module reads one: UTF-8, then Rust's `i64` parse.
fn integer(arg: &[u8]) -> Result<i64, String> {
    if let Some(n) = std::str::from_utf8(arg)
        .ok()
        .and_then(|text| text.parse().ok())
    {
        return Ok(n);
    }
    let text = String::from_utf8_lossy(arg);
    Err(format!("Cell error: Couldn't parse as integer: {text}"))
}

/// Nanoseconds to whole microseconds, truncated toward zero.
fn whole_micros(ns: i128) -> i128 {
    ns / 1000
}

/// A signed duration in nanoseconds as the module answers it in seconds: its `f64` seconds
/// truncated, plus one when the part below the second holds at least a whole millisecond.
fn seconds(ns: i128) -> i64 {
    let (whole, nanos) = (ns / 1_000_000_000, ns % 1_000_000_000);
    let f = whole as f64 + nanos as f64 / 1_000_000_000.0;
    let mut s = f as i64;
    if nanos / 1_000_000 > 0 {
        s += 1;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Check, ManualClock, MemoryStore, Nanos};

    pub(super) fn args(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    /// Runs `(advance_ms, command, reply)` steps on one memory store whose clock moves by hand,
    /// comparing each reply with what the module answers (worked out by its arithmetic).
    fn run(steps: &[(u64, &str, [i64; 5])]) {
        let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
        let store = MemoryStore::builder().clock(clock.clone()).build();
        for (i, (advance_ms, command, expected)) in steps.iter().enumerate() {
            clock.advance(Duration::from_millis(*advance_ms));
            let Ok(Parsed::Bucket(t)) = Throttle::parse(&args(command)) else {
                panic!("{command} is not a bucket's numbers");
            };
            // What the core does with a quantity above the limit: a look.
            let over = t.quantity > t.policy.capacity();
            let check =
                [Check::new(t.policy, t.key, if over { 0 } else { t.quantity }).named(BUCKET)];
            let decision = store.decide_sync(&check).unwrap().decisions()[0];
            assert_eq!(
                t.reply(&decision, over),
                *expected,
                "step {i}: {command} at +{advance_ms} ms"
            );
        }
    }

    #[test]
    fn a_burst_then_limited_then_refilled() {
        // max_burst 15: limit 16; 30 per 60 s: T = 2 s; τ = 32 s.
        let mut steps = vec![(0, "CL.THROTTLE user 15 30 60", [0, 16, 15, -1, 2])];
        for n in 1..16 {
            steps.push((
                0,
                "CL.THROTTLE user 15 30 60",
                [0, 16, 15 - n, -1, 2 * (n + 1)],
            ));
        }
        // Spent: the next waits T = 2 s; nothing taken, reset stays 32 s.
        steps.push((0, "CL.THROTTLE user 15 30 60", [1, 16, 0, 2, 32]));
        // 500 ms later: 1.5 s to wait, answered 2 (a part below the second rounds up).
        steps.push((500, "CL.THROTTLE user 15 30 60", [1, 16, 0, 2, 32]));
        // At +2 s a token is back: allowed, none left again.
        steps.push((1500, "CL.THROTTLE user 15 30 60", [0, 16, 0, -1, 32]));
        run(&steps);
    }

    #[test]
    fn quantity_zero_looks_and_a_quantity_above_the_limit_is_limited_without_a_wait() {
        run(&[
            (0, "CL.THROTTLE k 4 5 1 0", [0, 5, 5, -1, 0]),
            (0, "CL.THROTTLE k 4 5 1 3", [0, 5, 2, -1, 1]),
            (0, "CL.THROTTLE k 4 5 1 0", [0, 5, 2, -1, 1]),
            // The limit itself: allowed only from a full bucket.
            (0, "CL.THROTTLE k 4 5 1 5", [1, 5, 2, 1, 1]),
            (0, "CL.THROTTLE k 4 5 1 6", [1, 5, 2, -1, 1]),
            (0, "CL.THROTTLE fresh 4 5 1 5", [0, 5, 0, -1, 1]),
        ]);
    }

    #[test]
    fn the_key_alone_names_the_bucket_when_its_numbers_change() {
        // The key alone names the bucket, and its level carries over a change of numbers
        // (tollgate's contract; the module keeps the bucket's time instead): spent stays spent,
        // and the new numbers refill it at their pace from there.
        run(&[
            // All 10 tokens of a 10-per-10 s bucket (T = 1 s, limit 10).
            (0, "CL.THROTTLE k 9 10 10 10", [0, 10, 0, -1, 10]),
            // The same key under 5 per 5 s (T = 1 s, limit 5): still spent, a token in 1 s (the
            // module, which keeps the time, says 6 s).
            (0, "CL.THROTTLE k 4 5 5", [1, 5, 0, 1, 5]),
            // A look under those numbers (allowed, as a look is): spent, full in 5 s.
            (0, "CL.THROTTLE k 4 5 5 0", [0, 5, 0, -1, 5]),
            // Under 1 per day (limit 2): spent, a token in a day.
            (0, "CL.THROTTLE k 1 1 86400", [1, 2, 0, 86_400, 172_800]),
        ]);
    }

    #[test]
    fn sub_second_rounding_follows_the_module() {
        assert_eq!(seconds(1_000_400_000), 1);
        assert_eq!(seconds(1_001_000_000), 2);
        assert_eq!(seconds(400_000), 0);
        assert_eq!(seconds(-1_000_000_000), -1);
        assert_eq!(seconds(0), 0);
    }

    #[test]
    fn refusals_are_worded_as_the_module_words_them() {
        let refused = |line: &str| Throttle::parse(&args(line)).unwrap_err();
        assert_eq!(refused("CL.THROTTLE k 1 2"), USAGE);
        assert_eq!(refused("CL.THROTTLE k 1 2 3 4 5"), USAGE);
        assert_eq!(
            refused("CL.THROTTLE k x 2 3"),
            "Cell error: Couldn't parse as integer: x"
        );
        assert_eq!(
            refused("CL.THROTTLE k 1 0 3"),
            "Cell error: Zero rates are not supported"
        );
        assert_eq!(
            refused("CL.THROTTLE k 1 2 0"),
            "Cell error: Zero rates are not supported"
        );
    }
}
