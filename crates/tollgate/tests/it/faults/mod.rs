//! What the fault tests of every networked store share: a check that measures itself, and
//! waiting for a store to come back.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tollgate::{Check, Clock, MonotonicClock, Nanos, Policy, Store, StoreError};

/// A policy that never denies within a test, so every failure is the store's.
pub fn policy() -> Policy {
    Policy::token_bucket(1_000_000, 1_000_000, Duration::from_secs(1)).unwrap()
}

/// Decides one check of [`policy`] and measures how long it took.
pub async fn timed<S: Store>(store: &S, key: &[u8]) -> (Result<bool, StoreError>, Duration) {
    let clock = MonotonicClock::new();
    let start = clock.now();
    let result = store
        .decide(&[Check::new(policy(), key, 1)])
        .await
        .map(|v| v.allowed());
    (result, Duration::from(clock.now() - start))
}

/// Polls until a call succeeds (failing the test after `give_up`); returns how long it took.
pub async fn recovery<S: Store>(store: &S, give_up: Duration) -> Duration {
    let clock = MonotonicClock::new();
    let start = clock.now();
    while timed(store, b"recover").await.0.is_err() {
        assert!(
            clock.now() - start < Nanos::from(give_up),
            "no recovery within {give_up:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Duration::from(clock.now() - start)
}
