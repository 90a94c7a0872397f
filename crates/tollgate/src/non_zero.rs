//! [`NonZeroDuration`]: a span of time that cannot be zero, for the settings a zero would
//! break (a timeout every call would run out of, a lease that ends before it serves).

use std::fmt;
use std::time::Duration;

/// A [`Duration`] longer than zero, as [`NonZeroU64`](std::num::NonZeroU64) is a `u64` other
/// than zero: a setting that takes one cannot be given zero, so it has nothing to refuse.
///
/// ```
/// use std::time::Duration;
/// use tollgate::NonZeroDuration;
///
/// const TIMEOUT: NonZeroDuration = NonZeroDuration::from_millis(50).unwrap();
/// assert_eq!(TIMEOUT.get(), Duration::from_millis(50));
/// assert_eq!(NonZeroDuration::new(Duration::ZERO), None);
/// // From a value read at run time: zero is yours to answer.
/// let read = Duration::from_secs(2);
/// let timeout = NonZeroDuration::new(read).ok_or("timeout must be longer than zero")?;
/// assert_eq!(Duration::from(timeout), read);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NonZeroDuration(Duration);

impl NonZeroDuration {
    /// `duration`, unless it is zero.
    pub const fn new(duration: Duration) -> Option<NonZeroDuration> {
        if duration.is_zero() {
            None
        } else {
            Some(NonZeroDuration(duration))
        }
    }

    /// `ms` milliseconds, unless it is zero.
    pub const fn from_millis(ms: u64) -> Option<NonZeroDuration> {
        NonZeroDuration::new(Duration::from_millis(ms))
    }

    /// `secs` seconds, unless it is zero.
    pub const fn from_secs(secs: u64) -> Option<NonZeroDuration> {
        NonZeroDuration::new(Duration::from_secs(secs))
    }

    /// The duration.
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl From<NonZeroDuration> for Duration {
    fn from(duration: NonZeroDuration) -> Duration {
        duration.0
    }
}

impl fmt::Debug for NonZeroDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
