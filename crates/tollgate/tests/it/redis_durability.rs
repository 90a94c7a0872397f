//! The Redis store's durability option (`wait_for_replicas`): each call's `WAIT` behind it,
//! answered by replicas that hold the write, or a store error within the timeout when too few
//! do.
#![cfg(feature = "redis")]

use crate::faults;

use std::time::Duration;

use faults::timed;
use tollgate::{Check, Policy, RedisStore, Store, StoreError};
use tollgate_testkit::{SentinelSet, TestRedis};

/// Room for two WAITs: the first call's `EVALSHA` meets `NOSCRIPT`, and its WAIT waits too.
const TIMEOUT: Duration = Duration::from_millis(500);
const WAIT: Duration = Duration::from_millis(100);
/// What a bounded call may take beyond its timeout on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(250);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_every_decision_is_a_store_error_within_the_timeout() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::builder(redis.url())
        .timeout(TIMEOUT)
        .wait_for_replicas(1, WAIT)
        .build()
        .await
        .unwrap();
    for i in 0..5u8 {
        let (result, took) = timed(&store, &[b'k', i]).await;
        let e = result.unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert!(e.to_string().contains("0 of the 1 replicas"), "{e}");
        assert!(took >= WAIT, "WAIT returned before its timeout: {took:?}");
        assert!(took <= TIMEOUT + SLACK, "took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_in_sync_decisions_are_exact() {
    let set = SentinelSet::start(1, 1).unwrap();
    let store = RedisStore::builder(set.primary_url())
        .timeout(Duration::from_secs(2))
        .wait_for_replicas(1, Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let policy = Policy::per_hour(10).unwrap();
    let mut allowed = 0;
    for _ in 0..15 {
        let verdict = store
            .decide(&[Check::new(policy, b"alice", 1)])
            .await
            .unwrap();
        allowed += usize::from(verdict.allowed());
    }
    assert_eq!(allowed, 10);
    // The replica holds the bucket the primary wrote.
    set.wait_replica_in_sync(Duration::from_secs(10)).unwrap();
}

#[tokio::test]
async fn a_wait_timeout_not_below_the_store_timeout_is_refused_naming_both() {
    let redis = TestRedis::start().unwrap();
    let refused = RedisStore::builder(redis.url())
        .timeout(Duration::from_millis(50))
        .wait_for_replicas(1, Duration::from_millis(50))
        .build()
        .await;
    let Err(StoreError::Config(why)) = refused else {
        panic!("accepted a wait timeout equal to the store timeout");
    };
    assert!(why.contains("wait timeout (50ms)"), "{why}");
    assert!(why.contains("store timeout (50ms)"), "{why}");
    let cluster = RedisStore::builder(redis.url())
        .cluster([redis.url(), redis.url()])
        .wait_for_replicas(1, Duration::from_millis(10))
        .build()
        .await;
    assert!(matches!(cluster, Err(StoreError::Config(_))));
}
