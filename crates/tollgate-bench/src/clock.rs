//! The one module that reads the ambient clocks.
//!
//! The workspace's `.clippy.toml` forbids `Instant::now` and `SystemTime::now`, so that nothing on
//! tollgate's decision path reads time behind its injected `Clock`. A benchmark has to: it times
//! every call, and the published baselines take `now_ms` from the client's wall clock by design.
//! Everything in this crate that needs the time asks this module.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A running timer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts timing now.
    pub(crate) fn start() -> Stopwatch {
        Stopwatch(Instant::now())
    }

    /// The time since [`Stopwatch::start`].
    pub(crate) fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// The wall clock in milliseconds since the UNIX epoch, as the baselines' clients send it.
pub(crate) fn unix_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}
