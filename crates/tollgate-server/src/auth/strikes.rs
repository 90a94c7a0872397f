//! Failed authentications on one connection, and what they cost it: each wrong secret is
//! answered a little later than the last (a guesser gets few tries a second), and a RESP
//! connection is closed after [`MAX_RESP_FAILURES`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Wrong `AUTH`s a RESP connection may make; the last one closes it.
pub const MAX_RESP_FAILURES: u32 = 10;

/// How much later each failure after the first is answered than the one before it.
const STEP: Duration = Duration::from_millis(10);

/// The longest a failure is held back.
const MAX_DELAY: Duration = Duration::from_secs(1);

/// The failures of one connection, shared by the requests on it (an HTTP/2 connection's
/// streams, or HTTP/1.1's keep-alive requests).
#[derive(Debug, Clone, Default)]
pub struct Strikes(Arc<AtomicU32>);

impl Strikes {
    /// Counts a failure; how long to hold its answer back.
    pub fn strike(&self) -> Duration {
        let failures = self.0.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        delay(failures)
    }
}

/// How long the `failures`-th failure of a connection is held back: nothing for the first (a
/// typo), then a step more for each.
pub fn delay(failures: u32) -> Duration {
    STEP.saturating_mul(failures.saturating_sub(1))
        .min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_waits_a_step_longer_up_to_a_bound() {
        assert_eq!(delay(1), Duration::ZERO);
        assert_eq!(delay(2), STEP);
        assert_eq!(delay(10), STEP * 9);
        assert_eq!(delay(u32::MAX), MAX_DELAY);
        let strikes = Strikes::default();
        let shared = strikes.clone();
        assert_eq!(strikes.strike(), Duration::ZERO);
        assert_eq!(shared.strike(), STEP);
    }
}
