//! Clocks: where `now` comes from.
//!
//! The decision functions never read time themselves; a store asks its [`Clock`]. Production uses
//! [`MonotonicClock`]; tests use [`ManualClock`] and move time by hand, so no test sleeps to wait
//! for a refill. [`CoarseClock`] and `QuantaClock` (feature `quanta`) are cheaper reads for the
//! memory store. This is the one module allowed to read the ambient clocks.

mod coarse;

pub use coarse::CoarseClock;

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

/// A clock read from the CPU's time-stamp counter (through the `quanta` crate), anchored to the
/// wall clock once, at creation, like [`MonotonicClock`]. Feature `quanta`.
///
/// It costs a few nanoseconds a read where [`MonotonicClock`] costs tens (`Instant::now` is a
/// call into the vDSO): worth it for the `MemoryStore`, where the clock is
/// a large part of a check. Use it with `MemoryStore::builder().clock(QuantaClock::new())`.
///
/// **Precision.** On x86-64 it reads the time-stamp counter only when the CPU reports an
/// invariant TSC (and `rdtscp`); on AArch64 it reads the system counter. The first clock a
/// process creates calibrates the counter's rate against the OS monotonic clock, for up to
/// 200 ms (until the mean error is under 10 ns over at least 500 rounds); later clocks reuse
/// that rate. A read is then the counter scaled by that rate in integer arithmetic: one
/// nanosecond resolution, with the calibration's rate error as a drift from the OS clock that
/// grows with the time since creation (a rate in error by one part in a million is 1 ms late
/// or early after 1000 s). The store decides every check at this one clock, so its decisions
/// stay exact with respect to it; a bucket refills at the policy's rate as this clock counts
/// time. Without a usable counter (another CPU, or a virtual machine that hides invariant TSC)
/// quanta reads the OS monotonic clock instead, and this clock costs what [`MonotonicClock`]
/// does.
///
/// **Monotonic.** A read never falls below the one at creation. The invariant counter does not
/// go back on one core and is synchronized across cores by the hardware and the kernel; if a
/// machine's were not, a read a few ticks back is safe: a clock that steps back never creates
/// tokens.
///
/// ```
/// use tollgate::{Clock, MemoryStore, Policy, QuantaClock};
///
/// let clock = QuantaClock::new();
/// let (a, b) = (clock.now(), clock.now());
/// assert!(b >= a);
/// let store = MemoryStore::builder().clock(clock).build();
/// assert!(store.check(&Policy::per_second(10)?, b"alice", 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "quanta")]
#[cfg_attr(docsrs, doc(cfg(feature = "quanta")))]
#[derive(Debug, Clone)]
pub struct QuantaClock {
    clock: quanta::Clock,
    /// The counter's raw reading at creation.
    start: u64,
    epoch_offset: Nanos,
}

#[cfg(feature = "quanta")]
impl QuantaClock {
    /// Calibrates the counter (once per process: up to 200 ms), reads the wall clock once and
    /// anchors to it.
    #[allow(clippy::disallowed_methods)] // the one place allowed to read ambient time
    pub fn new() -> QuantaClock {
        let clock = quanta::Clock::new();
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        QuantaClock {
            start: clock.raw(),
            clock,
            epoch_offset: Nanos::from(since_epoch),
        }
    }
}

#[cfg(feature = "quanta")]
impl Default for QuantaClock {
    fn default() -> QuantaClock {
        QuantaClock::new()
    }
}

#[cfg(feature = "quanta")]
impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> Nanos {
        // The distance from the reading at creation, scaled to nanoseconds; zero for a reading
        // at or before it.
        let elapsed = self.clock.delta_as_nanos(self.start, self.clock.raw());
        self.epoch_offset + Nanos::new(elapsed)
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

    #[cfg(feature = "quanta")]
    #[test]
    fn quanta_clock_is_near_the_epoch_time_and_never_goes_back() {
        let clock = QuantaClock::new();
        let reference = MonotonicClock::new();
        let mut last = clock.now();
        for _ in 0..10_000 {
            let next = clock.now();
            assert!(next >= last);
            last = next;
        }
        // Anchored to the wall clock as the monotonic clock is: within a second of it.
        let (a, b) = (clock.now().as_u64(), reference.now().as_u64());
        assert!(a.abs_diff(b) < 1_000_000_000, "{a} vs {b}");
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
