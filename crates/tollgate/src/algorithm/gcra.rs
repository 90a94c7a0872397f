//! The token bucket as GCRA (the generic cell rate algorithm), in integer nanoseconds.
//!
//! The whole state of a bucket is one number, the theoretical arrival time `tat`: the time at
//! which the bucket would be full again. With the emission interval `t` (time per token) and
//! the tolerance `tau = capacity × t`, the bucket holds `(now + tau - max(tat, now)) / t`
//! tokens at `now`. Taking `cost` tokens moves `tat` forward by `cost × t`; it is allowed iff
//! the new `tat` is at most `now + tau`. A new key has `tat = 0` (any time in the past means
//! "full"). A clock that steps back makes `now` smaller, which can only shrink the bucket.
//!
//! `t` is rounded up to a whole nanosecond, so rounding can only under-grant, by less than one
//! nanosecond per token. Every store (memory, Redis Lua, PostgreSQL SQL) is a port of this file.

use crate::{CheckError, Decision, Nanos, Policy};

/// The furthest past `now` a charge may push a bucket's `tat` whatever its policy: 2^51 µs,
/// about 71 years (one capacity of debt, the usual bound, is less for any policy whose burst
/// refills in under 35 years).
pub const MAX_DEBT: Nanos = Nanos::new((1 << 51) * 1000);

/// The latest clock reading a bucket can be decided at: 2^62 ns after the UNIX epoch, in
/// February 2116. A state is at most [`MAX_TOLERANCE`](crate::MAX_TOLERANCE) (2^62 ns) past
/// `now`, so every `tat` stays below 2^63, which the memory store's cells need (their top bit
/// is a lock). A reading past it is refused with [`CheckError::ClockOutOfRange`].
pub const MAX_NOW: Nanos = Nanos::new((1 << 62) - 1);

/// Refuses a clock reading past [`MAX_NOW`].
#[inline]
pub(crate) fn check_now(now: Nanos) -> Result<(), CheckError> {
    if now > MAX_NOW {
        return Err(CheckError::ClockOutOfRange {
            now: now.into(),
            max: MAX_NOW.into(),
        });
    }
    Ok(())
}

/// The constants of one token-bucket policy.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::gcra::Gcra;
/// use tollgate::{Nanos, Policy};
///
/// // Burst 2, one token a second: the bucket's whole state is its `tat`, starting at zero.
/// let gcra = Gcra::new(&Policy::per_second(1)?.burst(2)?);
/// let now = Nanos::new(10_000_000_000);
/// let first = gcra.decide(Nanos::ZERO, now, 2)?;
/// assert!(first.allowed());
/// // The new `tat` is what a store writes; the next check reads it.
/// let second = gcra.decide(first.new_tat(), now, 1)?;
/// assert!(!second.allowed());
/// assert_eq!(second.decision(false).retry_after(), Duration::from_secs(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Time per token (`t`).
    emission_interval: Nanos,
    /// Time to fill an empty bucket (`tau`).
    tolerance: Nanos,
    capacity: u64,
}

/// The result of evaluating one check against one bucket, before anyone writes.
///
/// ```
/// use tollgate::algorithm::gcra::Gcra;
/// use tollgate::{Nanos, Policy};
///
/// let gcra = Gcra::new(&Policy::per_minute(60)?);
/// let outcome = gcra.decide(Nanos::ZERO, Nanos::new(1 << 40), 1)?;
/// // Nothing is written until the caller applies it: a denial writes nothing.
/// assert!(outcome.allowed());
/// let decision = outcome.decision(true);
/// assert_eq!((decision.limit(), decision.remaining()), (60, 59));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraOutcome {
    gcra: Gcra,
    now: Nanos,
    /// `max(tat, now)`: the state as it stands.
    tat: Nanos,
    /// `tat + cost × t`: the state if the cost is taken.
    new_tat: Nanos,
    allowed: bool,
    /// The wait until `max(cost, 1)` tokens are there: a denial's retry, or what a peek
    /// (cost 0) reports of the next token.
    wait: Nanos,
}

impl Gcra {
    /// The constants of `policy` (whatever its algorithm, read as a token bucket).
    #[inline]
    pub fn new(policy: &Policy) -> Gcra {
        Gcra {
            emission_interval: policy.emission_nanos(),
            tolerance: policy.tolerance_nanos(),
            capacity: policy.capacity(),
        }
    }

    /// The constants of a token bucket whose emission interval is `t` and tolerance `tau` (a
    /// multiple of it): the numbers a store wrote beside a bucket's `tat` (Redis hands them
    /// back for the client's replay).
    #[cfg(feature = "redis")]
    pub(crate) fn from_parts(t: Nanos, tau: Nanos) -> Gcra {
        Gcra {
            emission_interval: t,
            tolerance: tau,
            capacity: tau.as_u64() / t.as_u64().max(1),
        }
    }

    /// Evaluates taking `cost` tokens at `now` from the bucket whose state is `tat`
    /// (`Nanos::ZERO` for a key never seen). A `now` past [`MAX_NOW`] is refused.
    #[inline]
    pub fn decide(&self, tat: Nanos, now: Nanos, cost: u64) -> Result<GcraOutcome, CheckError> {
        check_now(now)?;
        self.check_cost(cost)?;
        Ok(self.evaluate(tat, now, cost))
    }

    /// Whether `cost` can ever be allowed. It depends on the policy alone, so a store that
    /// retries a bucket's compare-and-swap checks it once, before reading the bucket.
    #[inline]
    pub(crate) fn check_cost(&self, cost: u64) -> Result<(), CheckError> {
        if cost > self.capacity {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    /// [`Gcra::decide`] for a `cost` that passed [`Gcra::check_cost`].
    #[inline]
    pub(crate) fn evaluate(&self, tat: Nanos, now: Nanos, cost: u64) -> GcraOutcome {
        debug_assert!(
            cost <= self.capacity,
            "cost not checked against the capacity"
        );
        let tat = tat.max(now);
        let new_tat = tat + self.emission_interval.saturating_mul(cost);
        // cost 0 is a peek: allowed even when a clock that stepped back leaves the bucket
        // "below empty".
        let allowed = cost == 0 || new_tat - now <= self.tolerance;
        // A peek is always allowed but still says when one token would be: the wait of a
        // cost of 1. `-` saturates, so a cost that fits waits zero.
        let probe = tat + self.emission_interval.saturating_mul(cost.max(1));
        GcraOutcome {
            gcra: *self,
            now,
            tat,
            new_tat,
            allowed,
            wait: probe - self.tolerance - now,
        }
    }

    /// Gives back `amount` tokens at `now`: `tat` moves back by `amount × t`, but never before
    /// `now` (a full bucket holds no more than its capacity), and a bucket that is full already
    /// stays as it is. From a bucket in debt, a refund first pays the debt.
    #[inline]
    pub fn refund(&self, tat: Nanos, now: Nanos, amount: u64) -> Nanos {
        if tat <= now {
            return tat;
        }
        tat.saturating_sub(self.emission_interval.saturating_mul(amount))
            .max(now)
    }

    /// Takes `amount` tokens at `now` whatever the bucket holds (a reservation committed above
    /// its estimate): the bucket may go into debt, and then allows nothing until the refill has
    /// paid it back. The debt is bounded, however many charges come: at most one capacity
    /// below empty (`tat <= now + 2 tau`), and never more than [`MAX_DEBT`] past `now`, which
    /// keeps every store's arithmetic exact (Redis's doubles included). A charge never lowers
    /// `tat` (a bucket spent further under larger numbers stays as spent).
    #[inline]
    pub fn charge(&self, tat: Nanos, now: Nanos, amount: u64) -> Nanos {
        let base = tat.max(now);
        let most = now.saturating_add(self.tolerance.saturating_mul(2).min(MAX_DEBT));
        let charged = base.saturating_add(self.emission_interval.saturating_mul(amount));
        base.max(charged.min(most))
    }

    /// The `tat` under these numbers of a bucket whose state is `tat` under `from`'s: the same
    /// level at `now` (its tokens, or its debt as negative tokens), capped at this capacity,
    /// to refill at this pace from there. A change of numbers (a reload, new arguments) thus
    /// neither hands out a fresh burst nor lengthens a wait it did not slow: the wait for
    /// any cost becomes `ceil(wait × t' / t)`, never longer at a rate as high or higher. A
    /// full bucket stays as it is (full under any numbers). The new level is rounded down
    /// (the new `tat` up), so a change never creates a token. A debt deeper than one new
    /// capacity (or than [`MAX_DEBT`]) is kept at that: the most a bucket of these numbers
    /// owes after any charge.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::gcra::Gcra;
    /// use tollgate::{Nanos, Policy};
    ///
    /// // 3 every 30 s, spent; then raised to 6 every 10 s: the bucket holds what it held.
    /// let old = Gcra::new(&Policy::token_bucket(3, 1, Duration::from_secs(10))?);
    /// let new = Gcra::new(&Policy::token_bucket(6, 6, Duration::from_secs(10))?);
    /// let now = Nanos::new(100_000_000_000);
    /// let tat = old.decide(Nanos::ZERO, now, 3)?.new_tat();
    /// let denied = old.decide(tat, now, 1)?.decision(false);
    /// assert_eq!(denied.retry_after(), Duration::from_secs(10));
    /// let rebased = new.rebase(&old, tat, now);
    /// let now_denied = new.decide(rebased, now, 1)?.decision(false);
    /// assert_eq!((now_denied.remaining(), now_denied.retry_after()), (0, Duration::from_nanos(1_666_666_667)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rebase(&self, from: &Gcra, tat: Nanos, now: Nanos) -> Nanos {
        self.rebase_in(from, tat, now, Nanos::new(1))
    }

    /// [`Gcra::rebase`] for a store whose clock counts in `unit`s (Redis and PostgreSQL count
    /// microseconds): `tat`, `now` and both policies' numbers are whole units, and so is the
    /// result, which is then what the store's own port computes in its unit (the new level
    /// rounded down to a whole unit of time, not to a nanosecond).
    pub fn rebase_in(&self, from: &Gcra, tat: Nanos, now: Nanos, unit: Nanos) -> Nanos {
        if tat <= now || from == self {
            return tat;
        }
        let unit = i128::from(unit.as_u64().max(1));
        let units = |n: Nanos| i128::from(n.as_u64()) / unit;
        let (t, tau) = (units(from.emission_interval), units(from.tolerance));
        let (t_new, tau_new) = (units(self.emission_interval), units(self.tolerance));
        // The level in units of 1/t token (negative in debt), then in units of 1/t' token,
        // rounded down: a fraction of a token is never rounded into one.
        let level = tau - units(tat - now);
        let backlog = tau_new - (level * t_new).div_euclid(t.max(1));
        let most = self
            .tolerance
            .max(self.tolerance.saturating_mul(2).min(MAX_DEBT));
        let backlog = backlog.clamp(0, units(most)) * unit;
        // Within [0, 2^62]: the cast is exact.
        now.saturating_add(Nanos::new(backlog as u64))
    }

    /// Whether a bucket with state `tat` is full at `now` (and so can be forgotten: a missing key
    /// is a full bucket).
    #[inline]
    pub fn is_full(tat: Nanos, now: Nanos) -> bool {
        tat <= now
    }
}

impl GcraOutcome {
    /// Whether the bucket holds the cost.
    #[inline]
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The state to store when the cost is taken.
    #[inline]
    pub fn new_tat(&self) -> Nanos {
        self.new_tat
    }

    /// The decision, with the cost `taken` (only possible when allowed) or not.
    #[inline]
    pub fn decision(&self, taken: bool) -> Decision {
        let Gcra {
            emission_interval: t,
            tolerance: tau,
            capacity,
        } = self.gcra;
        let tat = if taken && self.allowed {
            self.new_tat
        } else {
            self.tat
        };
        let backlog = tat - self.now;
        Decision::of_tokens(
            self.allowed,
            capacity,
            (tau - backlog).as_u64(),
            t.as_u64(),
            self.wait,
            backlog,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1_000_000;

    fn policy(capacity: u64, refill: u64, period_ms: u64) -> Gcra {
        Gcra::new(
            &Policy::token_bucket(capacity, refill, Duration::from_millis(period_ms)).unwrap(),
        )
    }

    /// Runs `(at_ms, cost, allowed, remaining, retry_after_ms, reset_after_ms)` steps in order.
    fn run(gcra: Gcra, steps: &[(u64, u64, bool, u64, u64, u64)]) {
        let mut tat = Nanos::ZERO;
        for (i, &(at, cost, allowed, remaining, retry, reset)) in steps.iter().enumerate() {
            let outcome = gcra.decide(tat, Nanos::new(at * MS), cost).unwrap();
            let d = outcome.decision(true);
            if outcome.allowed() && cost > 0 {
                tat = outcome.new_tat();
            }
            let got = (
                d.allowed(),
                d.remaining(),
                d.retry_after().as_nanos() as u64,
                d.reset_after().as_nanos() as u64,
            );
            assert_eq!(
                got,
                (allowed, remaining, retry * MS, reset * MS),
                "step {i}: at {at} ms, cost {cost}"
            );
        }
    }

    #[test]
    fn burst_then_refill() {
        // 5 tokens, one every 100 ms.
        run(
            policy(5, 10, 1000),
            &[
                (1000, 1, true, 4, 0, 100),
                (1000, 1, true, 3, 0, 200),
                (1000, 3, true, 0, 0, 500),
                (1000, 1, false, 0, 100, 500),
                (1050, 1, false, 0, 50, 450),
                (1100, 1, true, 0, 0, 500),
                (1400, 2, true, 1, 0, 400),
                (2000, 0, true, 5, 0, 0),
            ],
        );
    }

    #[test]
    fn peek_takes_nothing_and_is_always_allowed() {
        run(
            policy(2, 2, 1000),
            &[
                (0, 0, true, 2, 0, 0),
                (0, 2, true, 0, 0, 1000),
                // Empty: the peek is allowed and says when the next token comes.
                (0, 0, true, 0, 500, 1000),
                (0, 1, false, 0, 500, 1000),
                (300, 0, true, 0, 200, 700),
            ],
        );
    }

    #[test]
    fn a_denial_changes_nothing() {
        let g = policy(3, 1, 1000);
        let full = g.decide(Nanos::ZERO, Nanos::new(0), 3).unwrap();
        let tat = full.new_tat();
        let denied = g.decide(tat, Nanos::new(500 * MS), 1).unwrap();
        assert!(!denied.allowed());
        assert_eq!(denied.decision(true), denied.decision(false));
        assert_eq!(
            denied.decision(false).retry_after(),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn retry_after_is_exact_waiting_it_is_enough() {
        let g = policy(10, 3, 1000); // t = 333_333_334 ns
        let mut tat = g.decide(Nanos::ZERO, Nanos::ZERO, 10).unwrap().new_tat();
        let mut now = Nanos::ZERO;
        for _ in 0..20 {
            let denied = g.decide(tat, now, 2).unwrap();
            assert!(!denied.allowed());
            let wait = Nanos::from(denied.decision(false).retry_after());
            // One nanosecond sooner is still denied; exactly then, allowed.
            assert!(
                !g.decide(tat, now + wait - Nanos::new(1), 2)
                    .unwrap()
                    .allowed()
            );
            now = now + wait;
            let ok = g.decide(tat, now, 2).unwrap();
            assert!(ok.allowed());
            tat = ok.new_tat();
        }
    }

    #[test]
    fn cost_over_capacity_is_an_error_not_a_denial() {
        let err = policy(3, 1, 1000)
            .decide(Nanos::ZERO, Nanos::ZERO, 4)
            .unwrap_err();
        assert_eq!(
            err,
            CheckError::CostExceedsCapacity {
                cost: 4,
                capacity: 3
            }
        );
    }

    #[test]
    fn a_clock_stepping_back_never_creates_tokens() {
        let g = policy(4, 4, 1000); // 250 ms per token
        let at_10s = Nanos::new(10_000 * MS);
        let tat = g.decide(Nanos::ZERO, at_10s, 4).unwrap().new_tat();
        // The clock steps back by 5 s: the bucket is not refilled, it looks emptier.
        let back = g.decide(tat, Nanos::new(5_000 * MS), 1).unwrap();
        assert!(!back.allowed());
        assert_eq!(back.decision(false).remaining(), 0);
        assert!(g.decide(tat, Nanos::new(5_000 * MS), 0).unwrap().allowed());
        // And forward again, tokens arrive on the original schedule.
        assert!(
            !g.decide(tat, at_10s + Nanos::new(249 * MS), 1)
                .unwrap()
                .allowed()
        );
        assert!(
            g.decide(tat, at_10s + Nanos::new(250 * MS), 1)
                .unwrap()
                .allowed()
        );
    }

    #[test]
    fn refunds_never_fill_past_capacity_and_charges_go_into_debt() {
        let g = policy(4, 4, 1000); // 250 ms per token
        let now = Nanos::new(10_000 * MS);
        let spent = g.decide(Nanos::ZERO, now, 3).unwrap().new_tat();
        // Two of three back: one token short of full.
        let back = g.refund(spent, now, 2);
        assert_eq!(
            g.decide(back, now, 0).unwrap().decision(false).remaining(),
            3
        );
        // More than was taken: full, never fuller.
        let full = g.refund(spent, now, 100);
        assert_eq!(full, now);
        assert_eq!(
            g.refund(Nanos::ZERO, now, 5),
            Nanos::ZERO,
            "full stays full"
        );
        // A charge of 6 on a full bucket of 4: two tokens of debt, 500 ms before anything
        // passes, and 750 ms before one token does.
        let debt = g.charge(Nanos::ZERO, now, 6);
        assert!(!g.decide(debt, now, 1).unwrap().allowed());
        assert!(
            !g.decide(debt, now + Nanos::new(749 * MS), 1)
                .unwrap()
                .allowed()
        );
        assert!(
            g.decide(debt, now + Nanos::new(750 * MS), 1)
                .unwrap()
                .allowed()
        );
        // A refund pays the debt first.
        assert_eq!(g.refund(debt, now, 2), now + Nanos::new(1000 * MS));
        // At most one capacity of debt, however large or many the charges.
        let most = now + Nanos::new(2000 * MS);
        assert_eq!(g.charge(Nanos::ZERO, now, u64::MAX), most);
        assert_eq!(g.charge(g.charge(debt, now, 5), now, 5), most);
        // A bucket spent further (under larger numbers) is not lifted by a charge.
        let deeper = now + Nanos::new(9000 * MS);
        assert_eq!(g.charge(deeper, now, 1), deeper);
        // A policy whose burst takes centuries is held to 71 years of debt.
        let slow = policy(100, 1, 31_536_000_000); // a token a year
        assert_eq!(slow.charge(Nanos::ZERO, now, u64::MAX), now + MAX_DEBT);
    }

    #[test]
    fn full_bucket_detection() {
        assert!(Gcra::is_full(Nanos::new(5), Nanos::new(5)));
        assert!(!Gcra::is_full(Nanos::new(6), Nanos::new(5)));
    }
}
