//! [`Nanos`]: the one unit of time on the decision path.
//!
//! All arithmetic saturates instead of wrapping: a bucket whose theoretical arrival time would
//! overflow is a bucket that is empty for centuries, never one that wraps around to full.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time or a span of time in nanoseconds of some clock.
///
/// `u64` nanoseconds cover 584 years; every operation saturates.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Nanos;
///
/// let t = Nanos::from(Duration::from_millis(1500));
/// assert_eq!(t.as_secs_ceil(), 2);
/// assert_eq!(Nanos::MAX + t, Nanos::MAX); // saturates, never wraps
/// assert_eq!(Nanos::ZERO - t, Nanos::ZERO);
/// assert_eq!(t.as_duration(), Duration::from_millis(1500));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(u64);

impl Nanos {
    /// Zero, the start of a clock.
    pub const ZERO: Nanos = Nanos(0);
    /// The largest representable time.
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// Wraps a count of nanoseconds.
    pub const fn new(nanos: u64) -> Nanos {
        Nanos(nanos)
    }

    /// The count of nanoseconds.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// `self - other`, or zero when `other` is later.
    pub const fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }

    /// `self + other`, or [`Nanos::MAX`].
    pub const fn saturating_add(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(other.0))
    }

    /// `self * n`, or [`Nanos::MAX`].
    pub const fn saturating_mul(self, n: u64) -> Nanos {
        Nanos(self.0.saturating_mul(n))
    }

    /// Whole milliseconds, rounded up: a client told to wait this long is never early.
    pub const fn as_millis_ceil(self) -> u64 {
        self.0.div_ceil(1_000_000)
    }

    /// Whole seconds, rounded up.
    pub const fn as_secs_ceil(self) -> u64 {
        self.0.div_ceil(1_000_000_000)
    }

    /// As a [`Duration`].
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

impl Nanos {
    /// `d`, or [`Nanos::MAX`] for durations over 584 years: `From<Duration>` for `const fn`s
    /// (a policy's constructors).
    pub(crate) const fn saturating_from(d: Duration) -> Nanos {
        let nanos = d.as_nanos();
        if nanos > u64::MAX as u128 {
            Nanos::MAX
        } else {
            // Below u64::MAX, checked above.
            Nanos(nanos as u64)
        }
    }
}

impl From<Duration> for Nanos {
    /// Saturates at [`Nanos::MAX`] for durations over 584 years.
    #[inline]
    fn from(d: Duration) -> Nanos {
        Nanos::saturating_from(d)
    }
}

impl From<Nanos> for Duration {
    #[inline]
    fn from(n: Nanos) -> Duration {
        n.as_duration()
    }
}

impl Add for Nanos {
    type Output = Nanos;
    #[inline]
    fn add(self, rhs: Nanos) -> Nanos {
        self.saturating_add(rhs)
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    #[inline]
    fn sub(self, rhs: Nanos) -> Nanos {
        self.saturating_sub(rhs)
    }
}

impl fmt::Debug for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.as_duration(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Nanos::MAX + Nanos::new(1), Nanos::MAX);
        assert_eq!(Nanos::new(1) - Nanos::new(2), Nanos::ZERO);
        assert_eq!(Nanos::new(u64::MAX / 2).saturating_mul(3), Nanos::MAX);
    }

    #[test]
    fn rounding_is_up() {
        assert_eq!(Nanos::new(1).as_millis_ceil(), 1);
        assert_eq!(Nanos::new(1_000_000).as_millis_ceil(), 1);
        assert_eq!(Nanos::new(1_000_001).as_millis_ceil(), 2);
        assert_eq!(Nanos::new(1).as_secs_ceil(), 1);
        assert_eq!(Nanos::new(2_000_000_000).as_secs_ceil(), 2);
        assert_eq!(Nanos::ZERO.as_secs_ceil(), 0);
    }

    #[test]
    fn debug_reads_as_a_duration() {
        assert_eq!(format!("{:?}", Nanos::new(1_500_000)), "1.5ms");
    }
}
