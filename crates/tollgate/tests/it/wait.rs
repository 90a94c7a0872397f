//! Waiting for tokens (`until_ready`, `Wait`) on the memory store, in real time with small
//! numbers: its clock is the monotonic one, which tokio's paused time does not move.
#![cfg(feature = "tokio")]

use std::time::Duration;

use tokio::time::Instant;
use tollgate::store::wait::{Wait, until_ready};
use tollgate::{Check, CheckError, MemoryStore, Policy, StoreError};

/// One token every 20 ms, a burst of 1.
fn policy() -> Policy {
    Policy::per_second(50).unwrap().burst(1).unwrap()
}

#[tokio::test]
async fn until_ready_sleeps_until_the_token_comes() {
    let store = MemoryStore::new();
    let check = [Check::new(policy(), b"alice", 1)];
    let start = Instant::now();
    for _ in 0..4 {
        let verdict = until_ready(&store, &check, Duration::from_secs(2))
            .await
            .unwrap();
        assert!(verdict.allowed());
    }
    // The first was in the burst; each of the three others waited for its token.
    assert!(
        start.elapsed() >= Duration::from_millis(55),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_wait_longer_than_the_maximum_answers_the_denial_at_once() {
    let store = MemoryStore::new();
    let hourly = [Check::new(Policy::per_hour(1).unwrap(), b"bob", 1)];
    assert!(store.decide_sync(&hourly).unwrap().allowed());
    let start = Instant::now();
    let verdict = until_ready(&store, &hourly, Duration::from_millis(200))
        .await
        .unwrap();
    assert!(!verdict.allowed());
    assert!(verdict.retry_after() > Duration::from_secs(3500));
    // Sleeping in vain would have used up the 200 ms first.
    assert!(
        start.elapsed() < Duration::from_millis(200),
        "it slept in vain"
    );
}

#[tokio::test]
async fn jitter_stays_within_the_maximum_wait() {
    let store = MemoryStore::new();
    let check = [Check::new(policy(), b"carol", 1)];
    let wait = Wait::at_most(Duration::from_millis(300)).jitter(Duration::from_millis(200));
    assert!(wait.until_ready(&store, &check).await.unwrap().allowed());
    let start = Instant::now();
    // The token is 20 ms away; with up to 200 ms of jitter the sleeps still end by 300 ms
    // (the bound leaves room for a loaded machine's scheduling, not for a longer sleep).
    assert!(wait.until_ready(&store, &check).await.unwrap().allowed());
    assert!(
        start.elapsed() < Duration::from_millis(800),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_cost_above_the_capacity_is_an_error_not_a_wait() {
    let store = MemoryStore::new();
    let too_much = [Check::new(policy(), b"dave", 2)];
    let error = until_ready(&store, &too_much, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        StoreError::Check(CheckError::CostExceedsCapacity { .. })
    ));
}
