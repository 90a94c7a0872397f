//! Clocks: where `now` comes from.
//!
//! The decision functions never read time themselves; a store asks its [`Clock`]. Production uses
//! [`MonotonicClock`]; tests use [`ManualClock`] and move time by hand, so no test sleeps to wait
//! for a refill. This is the one module allowed to read the ambient clocks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::Nanos;

/// A source of the current time in [`Nanos`] since the UNIX epoch.
///
/// Implementations should never go backwards, but the algorithms are safe if one does: a clock
/// that steps back never creates tokens.
///
/// ```
/// use tollgate::{Clock, MemoryStore, Nanos, Policy};
///
/// /// A clock that always reads the same instant.
/// struct Frozen(Nanos);
///
/// impl Clock for Frozen {
///     fn now(&self) -> Nanos {
///         self.0
///     }
/// }
///
/// let store = MemoryStore::builder().clock(Frozen(Nanos::new(1 << 50))).build();
/// let policy = Policy::per_hour(1)?;
/// assert!(store.check(&policy, b"alice", 1)?.allowed());
/// // Time never passes: no refill.
/// assert!(!store.check(&policy, b"alice", 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Nanos;
}

/// A monotonic clock anchored to the wall clock once, at creation.
///
/// It reads [`Instant`] (which never steps back when NTP adjusts the wall clock) and adds the
/// UNIX time taken at creation, so fixed windows still align with the epoch.
///
/// ```
/// use tollgate::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let (a, b) = (clock.now(), clock.now());
/// assert!(b >= a);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    start: Instant,
    epoch_offset: Nanos,
}

impl MonotonicClock {
    /// Reads the wall clock once and anchors to it.
    #[allow(clippy::disallowed_methods)] // the one place allowed to read ambient time
    pub fn new() -> MonotonicClock {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        MonotonicClock {
            start: Instant::now(),
            epoch_offset: Nanos::from(since_epoch),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> MonotonicClock {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Nanos {
        self.epoch_offset + Nanos::from(self.start.elapsed())
    }
}

/// A clock that moves only when told to; clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock, Nanos};
///
/// let clock = ManualClock::new(Duration::from_secs(1));
/// clock.advance(Duration::from_millis(10));
/// assert_eq!(clock.now(), Nanos::new(1_010_000_000));
/// // The clock's own unit is accepted too.
/// clock.set(Nanos::new(5));
/// assert_eq!(clock.now(), Nanos::new(5));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start`: a `Duration` since the clock's origin, as [`advance`]
    /// takes (or [`Nanos`], the clock's unit).
    ///
    /// [`advance`]: ManualClock::advance
    pub fn new(start: impl Into<Nanos>) -> ManualClock {
        ManualClock {
            now: Arc::new(AtomicU64::new(start.into().as_u64())),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = Nanos::from(by).as_u64();
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the clock to `to` (a `Duration` since the origin, or [`Nanos`]), which may be in
    /// the past (to test clocks that step back).
    pub fn set(&self, to: impl Into<Nanos>) {
        self.now.store(to.into().as_u64(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        Nanos::new(self.now.load(Ordering::SeqCst))
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_is_near_the_epoch_time_and_never_goes_back() {
        let clock = MonotonicClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        // Later than 2020-01-01: anchored to the epoch, not to boot.
        assert!(a > Nanos::new(1_577_836_800 * 1_000_000_000));
    }

    #[test]
    fn manual_clock_clones_share_time_and_can_step_back() {
        let clock = ManualClock::new(Nanos::new(100));
        let other = clock.clone();
        other.advance(Duration::from_nanos(50));
        assert_eq!(clock.now(), Nanos::new(150));
        clock.set(Nanos::new(20));
        assert_eq!(other.now(), Nanos::new(20));
    }
}
