//! [`Policy`]: how many tokens a bucket holds and how fast it refills.
//!
//! A policy that exists is a valid policy: every constructor checks its inputs and returns a
//! [`PolicyError`] naming the field that is wrong.

use std::time::Duration;

use crate::Nanos;

/// The longest a bucket may take to refill from empty to full, and the longest window (2^62
/// ns, about 146 years).
///
/// Bounding it keeps `now + tolerance` far from `u64` overflow for any clock reading this
/// century, so the decision functions never need to reason about saturation.
pub const MAX_TOLERANCE: Duration = Duration::from_nanos(MAX_TOLERANCE_NANOS);

/// [`MAX_TOLERANCE`] in nanoseconds.
const MAX_TOLERANCE_NANOS: u64 = 1 << 62;

/// The largest limit of a [`Algorithm::SlidingWindowLog`] policy: its state keeps one entry
/// per allowed request, so the limit bounds its memory.
pub const MAX_LOG_LIMIT: u64 = 1 << 16;

/// Which algorithm a policy's buckets follow. All of them answer with the same [`Decision`](crate::Decision).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Policy};
///
/// assert_eq!(Policy::per_second(10)?.algorithm(), Algorithm::TokenBucket);
/// let window = Policy::sliding_window_counter(100, Duration::from_secs(60))?;
/// assert_eq!(window.algorithm(), Algorithm::SlidingWindowCounter);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// The token bucket, as GCRA: `capacity` tokens, `refill` tokens every `period`.
    TokenBucket,
    /// At most `capacity` per window of `period`, windows aligned to the UNIX epoch (as Envoy's
    /// rate-limit service counts). A burst of up to twice the limit can straddle a boundary.
    FixedWindow,
    /// At most `capacity` over any sliding `period`, exactly: keeps a log of allowed requests.
    SlidingWindowLog,
    /// The weighted two-window approximation of a sliding window: constant memory, but it
    /// assumes the previous window's requests were spread evenly. When they were bunched at its
    /// end it admits more than `capacity` in a sliding `period` (at worst nearly twice); when
    /// they were bunched at its start it admits fewer.
    SlidingWindowCounter,
}

/// A valid rate-limit policy. Build it with [`Policy::token_bucket`] or one of the window
/// constructors.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Policy;
///
/// // A burst of 10, refilled at 10 tokens per second.
/// let policy = Policy::token_bucket(10, 10, Duration::from_secs(1))?;
/// assert_eq!(policy.capacity(), 10);
/// assert!(Policy::token_bucket(0, 10, Duration::from_secs(1)).is_err());
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    algorithm: Algorithm,
    capacity: u64,
    refill: u64,
    period: Nanos,
    /// Time per token, rounded up so that rounding can only under-grant.
    emission_interval: Nanos,
}

/// Why a policy could not be built. [`PolicyError::field`] names the offending input.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Policy, PolicyError};
///
/// let error = Policy::token_bucket(10, 0, Duration::from_secs(1)).unwrap_err();
/// assert_eq!(error, PolicyError::ZeroRefill);
/// assert_eq!(error.field(), "refill"); // the input to fix, e.g. a config file's key
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// `capacity` must be at least 1.
    #[error("capacity must be at least 1")]
    ZeroCapacity,
    /// `refill` must be at least 1.
    #[error("refill must be at least 1")]
    ZeroRefill,
    /// `period` must be longer than zero.
    #[error("period must be longer than zero")]
    ZeroPeriod,
    /// More than one token per nanosecond cannot be represented.
    #[error("refill {refill} per {period:?} is more than one token per nanosecond")]
    RateTooHigh {
        /// The refill asked for.
        refill: u64,
        /// The period asked for.
        period: Duration,
    },
    /// Refilling from empty would take longer than [`MAX_TOLERANCE`].
    #[error("capacity {capacity} takes longer than 146 years to refill")]
    RefillTooSlow {
        /// The capacity asked for.
        capacity: u64,
    },
    /// A window constructor's `limit` of zero (its [`field`](PolicyError::field) is
    /// `capacity`, which a window's limit is).
    #[error("limit must be at least 1")]
    ZeroLimit,
    /// A window constructor's `window` of zero (its [`field`](PolicyError::field) is
    /// `period`, which a window's length is).
    #[error("window must be longer than zero")]
    ZeroWindow,
    /// A window constructor's `limit` of more than one per nanosecond of its `window`.
    #[error("a limit of {limit} per window of {window:?} is more than one per nanosecond")]
    LimitTooHigh {
        /// The limit asked for.
        limit: u64,
        /// The window asked for.
        window: Duration,
    },
    /// A window longer than [`MAX_TOLERANCE`].
    #[error("the window {window:?} is longer than 146 years")]
    WindowTooLong {
        /// The window asked for.
        window: Duration,
    },
    /// A store cannot decide this policy: its numbers are beyond the store's range, or the
    /// store lacks its algorithm (see `Store::supports`).
    #[error("{reason}")]
    Unsupported {
        /// The input to change: `capacity`, `refill`, `period` or `algorithm`.
        field: &'static str,
        /// Why, for a person.
        reason: &'static str,
    },
    /// A sliding-window log over [`MAX_LOG_LIMIT`].
    #[error("a sliding window log holds at most {MAX_LOG_LIMIT} requests, not {capacity}")]
    LogTooLarge {
        /// The limit asked for.
        capacity: u64,
    },
}

impl PolicyError {
    /// The name of the input that is wrong: `capacity`, `refill`, `period` (or, for a store
    /// lacking an algorithm, `algorithm`), as [`Policy`] names its numbers: a window's
    /// `limit` is its `capacity`, and its `window` its `period`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Policy, PolicyError};
    ///
    /// let error = Policy::fixed_window(0, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error, PolicyError::ZeroLimit);
    /// assert_eq!(error.to_string(), "limit must be at least 1");
    /// assert_eq!(error.field(), "capacity");
    /// ```
    pub fn field(&self) -> &'static str {
        match self {
            PolicyError::ZeroCapacity
            | PolicyError::RefillTooSlow { .. }
            | PolicyError::LogTooLarge { .. }
            | PolicyError::ZeroLimit
            | PolicyError::LimitTooHigh { .. } => "capacity",
            PolicyError::ZeroRefill | PolicyError::RateTooHigh { .. } => "refill",
            PolicyError::ZeroPeriod
            | PolicyError::ZeroWindow
            | PolicyError::WindowTooLong { .. } => "period",
            PolicyError::Unsupported { field, .. } => field,
        }
    }
}

impl Policy {
    /// A token bucket of `n` tokens a second, with a burst of `n` (a new bucket starts full).
    /// Reads as it is written; [`burst`](Policy::burst) sets another burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Policy;
    ///
    /// let api = Policy::per_second(10)?;
    /// assert_eq!(api, Policy::token_bucket(10, 10, Duration::from_secs(1))?);
    /// // 100 a minute, up to 20 at once.
    /// let uploads = Policy::per_minute(100)?.burst(20)?;
    /// assert_eq!((uploads.capacity(), uploads.refill()), (20, 100));
    /// assert!(Policy::per_hour(0).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    ///
    /// Every constructor is a `const fn`, so a policy can be a constant, checked when the
    /// program compiles:
    ///
    /// ```
    /// use tollgate::Policy;
    ///
    /// const API: Policy = match Policy::per_second(10) {
    ///     Ok(policy) => policy,
    ///     Err(_) => panic!("10 a second is a valid policy"),
    /// };
    /// assert_eq!(API.capacity(), 10);
    /// ```
    pub const fn per_second(n: u64) -> Result<Policy, PolicyError> {
        Policy::token_bucket(n, n, Duration::from_secs(1))
    }

    /// A token bucket of `n` tokens a minute, with a burst of `n`.
    pub const fn per_minute(n: u64) -> Result<Policy, PolicyError> {
        Policy::token_bucket(n, n, Duration::from_secs(60))
    }

    /// A token bucket of `n` tokens an hour, with a burst of `n`.
    pub const fn per_hour(n: u64) -> Result<Policy, PolicyError> {
        Policy::token_bucket(n, n, Duration::from_secs(3600))
    }

    /// The same rate with a burst (capacity) of `burst` tokens: a bucket holds at most
    /// `burst`, and a new one starts with them. Only a token bucket has a burst apart from its
    /// rate; a window policy is refused (`field()` is `algorithm`).
    ///
    /// ```
    /// use tollgate::Policy;
    ///
    /// // 1 a second on average, 5 at once after a quiet spell.
    /// let login = Policy::per_second(1)?.burst(5)?;
    /// assert_eq!(login.capacity(), 5);
    /// assert_eq!(Policy::per_second(1)?.burst(0).unwrap_err().field(), "capacity");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub const fn burst(self, burst: u64) -> Result<Policy, PolicyError> {
        if !matches!(self.algorithm, Algorithm::TokenBucket) {
            return Err(PolicyError::Unsupported {
                field: "algorithm",
                reason: "only a token bucket has a burst apart from its rate",
            });
        }
        Policy::build(
            self.algorithm,
            burst,
            self.refill,
            self.period.as_duration(),
        )
    }

    /// A token bucket holding at most `capacity` tokens, refilled with `refill` tokens every
    /// `period`. A new bucket starts full. Two numbers side by side are easy to swap:
    /// [`per_second`](Policy::per_second) and [`burst`](Policy::burst) say which is which;
    /// this stays for rates they do not spell (`refill` tokens every `period`, any period).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Policy;
    ///
    /// // A burst of 30, then 3 tokens every 2 seconds: the rate of 90 a minute.
    /// let p = Policy::token_bucket(30, 3, Duration::from_secs(2))?;
    /// let same_rate = Policy::per_minute(90)?.burst(30)?;
    /// assert_eq!(p.emission_interval(), same_rate.emission_interval());
    /// assert_eq!(p.capacity(), same_rate.capacity());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub const fn token_bucket(
        capacity: u64,
        refill: u64,
        period: Duration,
    ) -> Result<Policy, PolicyError> {
        Policy::build(Algorithm::TokenBucket, capacity, refill, period)
    }

    /// At most `limit` per epoch-aligned window of length `window`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Policy, PolicyError};
    ///
    /// let minute = Policy::fixed_window(100, Duration::from_secs(60))?;
    /// assert_eq!((minute.capacity(), minute.period()), (100, Duration::from_secs(60)));
    /// // Refusals name the limit and the window.
    /// let slow = Policy::fixed_window(1, Duration::from_secs(200 * 365 * 86_400));
    /// assert!(matches!(slow, Err(PolicyError::WindowTooLong { .. })));
    /// assert_eq!(
    ///     Policy::fixed_window(1, Duration::ZERO).unwrap_err().to_string(),
    ///     "window must be longer than zero"
    /// );
    /// # Ok::<(), PolicyError>(())
    /// ```
    pub const fn fixed_window(limit: u64, window: Duration) -> Result<Policy, PolicyError> {
        Policy::build(Algorithm::FixedWindow, limit, limit, window)
    }

    /// At most `limit` in any sliding `window`, exactly (a log of up to [`MAX_LOG_LIMIT`] entries).
    pub const fn sliding_window_log(limit: u64, window: Duration) -> Result<Policy, PolicyError> {
        Policy::build(Algorithm::SlidingWindowLog, limit, limit, window)
    }

    /// About `limit` in a sliding `window`, by the weighted two-window approximation
    /// (see [`Algorithm::SlidingWindowCounter`] for its error).
    pub const fn sliding_window_counter(
        limit: u64,
        window: Duration,
    ) -> Result<Policy, PolicyError> {
        Policy::build(Algorithm::SlidingWindowCounter, limit, limit, window)
    }

    /// Checks the numbers; a window's are its `limit` (the capacity and the refill) and its
    /// `window` (the period), and its refusals say so.
    const fn build(
        algorithm: Algorithm,
        capacity: u64,
        refill: u64,
        period: Duration,
    ) -> Result<Policy, PolicyError> {
        let window = !matches!(algorithm, Algorithm::TokenBucket);
        if capacity == 0 {
            return Err(if window {
                PolicyError::ZeroLimit
            } else {
                PolicyError::ZeroCapacity
            });
        }
        if refill == 0 {
            return Err(PolicyError::ZeroRefill);
        }
        let nanos = Nanos::saturating_from(period);
        if nanos.as_u64() == 0 {
            return Err(if window {
                PolicyError::ZeroWindow
            } else {
                PolicyError::ZeroPeriod
            });
        }
        if refill > nanos.as_u64() {
            return Err(if window {
                PolicyError::LimitTooHigh {
                    limit: capacity,
                    window: period,
                }
            } else {
                PolicyError::RateTooHigh { refill, period }
            });
        }
        if matches!(algorithm, Algorithm::SlidingWindowLog) && capacity > MAX_LOG_LIMIT {
            return Err(PolicyError::LogTooLarge { capacity });
        }
        let emission_interval = nanos.as_u64().div_ceil(refill);
        let too_slow = match emission_interval.checked_mul(capacity) {
            Some(tolerance) => tolerance > MAX_TOLERANCE_NANOS,
            None => true,
        };
        if too_slow || nanos.as_u64() > MAX_TOLERANCE_NANOS {
            return Err(if window {
                PolicyError::WindowTooLong { window: period }
            } else {
                PolicyError::RefillTooSlow { capacity }
            });
        }
        Ok(Policy {
            algorithm,
            capacity,
            refill,
            period: nanos,
            emission_interval: Nanos::new(emission_interval),
        })
    }

    /// The policy as a store whose clock counts in `unit` sees it: the emission interval and
    /// the period (a window's length) rounded up to whole units, so that, again, rounding can
    /// only under-grant (a longer window admits no more). Redis counts in microseconds.
    ///
    /// Rounding the period first leaves the emission interval as it was
    /// (`⌈⌈p/u⌉/r⌉ = ⌈p/(u·r)⌉`), so a token bucket sees only the rounded interval.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Policy;
    ///
    /// let third = Policy::token_bucket(3, 3, Duration::from_secs(1))?;
    /// let redis = third.at_resolution(Duration::from_micros(1));
    /// assert_eq!(redis.emission_interval(), Duration::from_nanos(333_334_000));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[cfg(feature = "test-util")]
    pub fn at_resolution(&self, unit: Duration) -> Policy {
        self.resolved(Nanos::from(unit))
    }

    /// The policy as a store whose clock counts in `unit` sees it (what `at_resolution` gives
    /// tests), for the stores whose clocks count in microseconds.
    #[cfg(any(feature = "redis", feature = "postgres", feature = "test-util", test))]
    pub(crate) fn resolved(&self, unit: Nanos) -> Policy {
        let unit = u128::from(unit.as_u64().max(1));
        let whole = |n: u128| Nanos::new(u64::try_from(n * unit).unwrap_or(u64::MAX));
        let per_token = u128::from(self.refill) * unit;
        let units = u128::from(self.period.as_u64()).div_ceil(per_token);
        Policy {
            period: whole(u128::from(self.period.as_u64()).div_ceil(unit)),
            emission_interval: whole(units),
            ..*self
        }
    }

    /// The algorithm of this policy.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The most tokens a bucket holds (the burst), or the limit per window.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens added every [`period`](Policy::period) (equal to the capacity for windows).
    pub fn refill(&self) -> u64 {
        self.refill
    }

    /// The refill period, or the window length.
    pub fn period(&self) -> Duration {
        Duration::from(self.period)
    }

    /// The time one token takes to refill, rounded up to a whole nanosecond.
    pub fn emission_interval(&self) -> Duration {
        Duration::from(self.emission_interval)
    }

    /// The time an empty token bucket takes to fill (`capacity × emission_interval`).
    pub fn tolerance(&self) -> Duration {
        Duration::from(self.tolerance_nanos())
    }

    /// [`period`](Policy::period) in the stores' unit.
    pub(crate) fn period_nanos(&self) -> Nanos {
        self.period
    }

    /// [`emission_interval`](Policy::emission_interval) in the stores' unit.
    pub(crate) fn emission_nanos(&self) -> Nanos {
        self.emission_interval
    }

    /// [`tolerance`](Policy::tolerance) in the stores' unit.
    pub(crate) fn tolerance_nanos(&self) -> Nanos {
        self.emission_interval.saturating_mul(self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_policies_name_their_field() {
        let s = Duration::from_secs(1);
        let cases = [
            (Policy::token_bucket(0, 1, s), "capacity"),
            (Policy::token_bucket(1, 0, s), "refill"),
            (Policy::token_bucket(1, 1, Duration::ZERO), "period"),
            (
                Policy::token_bucket(1, 2, Duration::from_nanos(1)),
                "refill",
            ),
            (
                Policy::token_bucket(u64::MAX, 1, Duration::from_secs(3600)),
                "capacity",
            ),
            (Policy::sliding_window_log(MAX_LOG_LIMIT + 1, s), "capacity"),
            (Policy::fixed_window(0, s), "capacity"),
        ];
        for (result, field) in cases {
            assert_eq!(result.unwrap_err().field(), field);
        }
    }

    #[test]
    fn named_rates_and_bursts() {
        let p = Policy::per_hour(100).unwrap().burst(10).unwrap();
        assert_eq!((p.capacity(), p.refill()), (10, 100));
        assert_eq!(p.period_nanos(), Nanos::from(Duration::from_secs(3600)));
        let window = Policy::fixed_window(10, Duration::from_secs(1)).unwrap();
        assert_eq!(window.burst(20).unwrap_err().field(), "algorithm");
        // A rate above one token a nanosecond is refused by its field, as ever.
        assert_eq!(
            Policy::per_second(2_000_000_000).unwrap_err().field(),
            "refill"
        );
    }

    #[test]
    fn coarser_resolution_rounds_up_to_whole_units() {
        let p = Policy::token_bucket(3, 3, Duration::from_secs(1)).unwrap();
        let us = p.resolved(Nanos::new(1000));
        assert_eq!(us.emission_nanos(), Nanos::new(333_334_000));
        assert_eq!(us.capacity(), 3);
        assert_eq!(p.resolved(Nanos::new(1)), p);
        let w = Policy::fixed_window(3, Duration::from_nanos(2_000_001)).unwrap();
        assert_eq!(
            w.resolved(Nanos::new(1000)).period_nanos(),
            Nanos::new(2_001_000)
        );
    }

    #[test]
    fn emission_interval_rounds_up() {
        let p = Policy::token_bucket(3, 3, Duration::from_secs(1)).unwrap();
        assert_eq!(p.emission_nanos(), Nanos::new(333_333_334));
        assert_eq!(p.tolerance_nanos(), Nanos::new(1_000_000_002));
    }
}
