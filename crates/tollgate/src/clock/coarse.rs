//! [`CoarseClock`]: the time read from memory, which a thread of its own keeps up to date.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Clock, MonotonicClock};
use crate::Nanos;

/// A clock read from memory: a thread of its own writes [`MonotonicClock`]'s time there once
/// per resolution (1 ms by default), and a read is one load. The cheapest clock for the
/// `MemoryStore`, where the clock is a large part of a check: use it
/// with `MemoryStore::builder().clock(CoarseClock::new())`. governor's `QuantaUpkeepClock` and
/// quanta's `Clock::recent` are clocks of this kind.
///
/// **Precision.** A read lags [`MonotonicClock`] by up to the resolution, plus however late the
/// thread is scheduled when the machine is busy (milliseconds on a loaded machine), and moves in
/// steps of about the resolution. The store decides every check at this one clock, so its
/// decisions stay exact with respect to it: a bucket refills at the policy's rate as this clock
/// counts time. Against the monotonic clock it sees time late, never early: over any interval
/// it counts at most the interval plus the lag it had at the interval's start, and a bucket
/// whose refill is due within the lag is still refused (its `retry_after` says how long, on this
/// clock). Choose a resolution well under a policy's time per token (1 ms against 10 ms for a
/// policy of 100 per second).
///
/// **Cost.** The thread wakes once per resolution (a thousand wake-ups a second at 1 ms) and
/// ends within one resolution after the last clone of the clock is dropped; clones share it,
/// and each [`CoarseClock::new`] starts one. Should the thread not start (a process at its
/// thread limit), the clock reads [`MonotonicClock`] at every call instead: as exact, and as
/// costly as that clock.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, CoarseClock, MemoryStore, Policy};
///
/// let clock = CoarseClock::with_resolution(Duration::from_millis(1));
/// let (a, b) = (clock.now(), clock.now());
/// assert!(b >= a);
/// let store = MemoryStore::builder().clock(clock).build();
/// assert!(store.check(&Policy::per_second(10)?, b"alice", 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct CoarseClock {
    now: Arc<AtomicU64>,
    /// Read at every call when the thread could not be started.
    direct: Option<MonotonicClock>,
    resolution: Duration,
}

impl CoarseClock {
    /// The finest resolution: a thread waking more often would cost a noticeable share of a
    /// core.
    pub const MIN_RESOLUTION: Duration = Duration::from_micros(100);
    /// The coarsest resolution.
    pub const MAX_RESOLUTION: Duration = Duration::from_secs(1);

    /// A clock written once a millisecond.
    pub fn new() -> CoarseClock {
        CoarseClock::with_resolution(Duration::from_millis(1))
    }

    /// A clock written once per `resolution`, held between [`MIN_RESOLUTION`] and
    /// [`MAX_RESOLUTION`].
    ///
    /// [`MIN_RESOLUTION`]: CoarseClock::MIN_RESOLUTION
    /// [`MAX_RESOLUTION`]: CoarseClock::MAX_RESOLUTION
    pub fn with_resolution(resolution: Duration) -> CoarseClock {
        let resolution = resolution.clamp(Self::MIN_RESOLUTION, Self::MAX_RESOLUTION);
        let source = MonotonicClock::new();
        let now = Arc::new(AtomicU64::new(source.now().as_u64()));
        let weak = Arc::downgrade(&now);
        let started = std::thread::Builder::new()
            .name("tollgate-clock".into())
            .spawn(move || tick(&weak, source, resolution))
            .is_ok();
        CoarseClock {
            now,
            direct: (!started).then_some(source),
            resolution,
        }
    }

    /// How often the time is written.
    pub fn resolution(&self) -> Duration {
        self.resolution
    }
}

impl Default for CoarseClock {
    fn default() -> CoarseClock {
        CoarseClock::new()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Nanos {
        match &self.direct {
            None => Nanos::new(self.now.load(Ordering::Relaxed)),
            Some(source) => source.now(),
        }
    }
}

/// The thread: writes `source`'s time once per `resolution` while a clock holds `now`. Only
/// this thread writes, from a monotonic source, so a read never goes back.
fn tick(now: &Weak<AtomicU64>, source: MonotonicClock, resolution: Duration) {
    loop {
        std::thread::sleep(resolution);
        let Some(now) = now.upgrade() else { return };
        now.store(source.now().as_u64(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn it_moves_in_steps_and_never_ahead_of_the_monotonic_clock() {
        let clock = CoarseClock::with_resolution(Duration::from_millis(1));
        assert_eq!(clock.resolution(), Duration::from_millis(1));
        let first = clock.now();
        // A thousand reads in a row take far less than a millisecond: at most one step.
        let mut seen: Vec<Nanos> = (0..1000).map(|_| clock.now()).collect();
        seen.dedup();
        assert!(seen.len() <= 2, "{} distinct reads", seen.len());
        // It moves, and stays behind a monotonic clock anchored after it.
        #[allow(clippy::disallowed_methods)] // a bound on the wait, not a decision's time
        let start = Instant::now();
        while clock.now() < first + Nanos::new(20_000_000) {
            assert!(start.elapsed() < Duration::from_secs(20), "it did not move");
            std::thread::yield_now();
        }
        let later = MonotonicClock::new();
        assert!(clock.now() <= later.now(), "ahead of the monotonic clock");
    }

    #[test]
    fn resolutions_are_held_to_their_bounds() {
        let fine = CoarseClock::with_resolution(Duration::ZERO);
        assert_eq!(fine.resolution(), CoarseClock::MIN_RESOLUTION);
        let coarse = CoarseClock::with_resolution(Duration::from_secs(60));
        assert_eq!(coarse.resolution(), CoarseClock::MAX_RESOLUTION);
    }

    #[test]
    fn the_thread_writes_until_the_last_clone_is_dropped() {
        let source = MonotonicClock::new();
        let now = Arc::new(AtomicU64::new(0));
        let weak = Arc::downgrade(&now);
        let (ended, end) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            tick(&weak, source, Duration::from_millis(1));
            let _ = ended.send(());
        });
        #[allow(clippy::disallowed_methods)] // a bound on the wait
        let start = Instant::now();
        while now.load(Ordering::Relaxed) == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "nothing written");
            std::thread::yield_now();
        }
        let clone = Arc::clone(&now);
        drop(now);
        // A clone still holds it: the thread goes on.
        assert!(end.recv_timeout(Duration::from_millis(20)).is_err());
        drop(clone);
        end.recv_timeout(Duration::from_secs(20))
            .expect("the thread ends once no clock holds the time");
    }
}
