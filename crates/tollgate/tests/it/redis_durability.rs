//! The Redis store's durability option (`wait_for_replicas`): each call's `WAIT` behind it on
//! a connection of its own, answered by replicas that hold the write, or, for what it charged,
//! a store error within the timeout when too few do; `ready()` saying when the primary lacks
//! the replicas asked for.
#![cfg(feature = "redis")]

use std::time::Duration;

use tokio::time::Instant;
use tollgate::{Check, Policy, RedisStore, Store, StoreError};
use tollgate_testkit::{SentinelSet, TestRedis};

/// Room for two WAITs: the first call's `EVALSHA` meets `NOSCRIPT`, and its WAIT waits too.
const TIMEOUT: Duration = Duration::from_millis(500);
const WAIT: Duration = Duration::from_millis(100);
/// What a bounded call may take beyond its timeout on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(250);

/// A store on `redis` that waits [`WAIT`] for one replica behind every call, with no deny
/// cache (so that every denial is Redis's own answer).
async fn waiting_for_one(redis: &TestRedis) -> RedisStore {
    RedisStore::builder(redis.url())
        .timeout(TIMEOUT)
        .wait_for_replicas(1, WAIT)
        .deny_cache(false)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_what_was_charged_is_a_store_error_and_a_denial_is_answered() {
    let redis = TestRedis::start().unwrap();
    let store = waiting_for_one(&redis).await;
    let policy = Policy::per_hour(2).unwrap();
    let check = [Check::new(policy, b"k", 1)];
    let decide = || store.decide(&check);
    // Allowed and charged, their WAIT short: a store error, within the timeout.
    for _ in 0..2 {
        let start = Instant::now();
        let e = decide().await.unwrap_err();
        let took = start.elapsed();
        assert!(e.is_transient(), "{e}");
        assert!(e.to_string().contains("0 of the 1 replicas"), "{e}");
        assert!(took >= WAIT, "WAIT returned before its timeout: {took:?}");
        assert!(took <= TIMEOUT + SLACK, "took {took:?}");
    }
    // The primary charged both: denied, which wrote nothing that a failover could lose.
    for _ in 0..3 {
        let verdict = decide().await.unwrap();
        assert!(!verdict.allowed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_waits_never_queue_behind_one_another() {
    let redis = TestRedis::start().unwrap();
    if !redis.is_owned() {
        eprintln!(
            "TOLLGATE_REDIS_URL names an external Redis, which this test cannot count its connections"
        );
        return;
    }
    // Sixteen WAITs one after another on one connection would take 16 × 150 ms, far past the
    // timeout; on connections of their own each takes 150 ms, leaving room for a busy machine.
    let wait = Duration::from_millis(150);
    let store = RedisStore::builder(redis.url())
        .timeout(TIMEOUT)
        .wait_for_replicas(1, wait)
        .build()
        .await
        .unwrap();
    let policy = Policy::per_hour(1_000_000).unwrap();
    // Loads the script (the first call meets NOSCRIPT, behind which a WAIT waits too).
    let _ = store.decide(&[Check::new(policy, b"warm", 1)]).await;
    for round in 0..3u8 {
        let calls = (0..16u8).map(|i| {
            let store = store.clone();
            async move {
                let key = [b'q', round, i];
                store.decide(&[Check::new(policy, &key, 1)]).await
            }
        });
        for result in futures_util::future::join_all(calls).await {
            let e = result.unwrap_err();
            assert!(
                e.to_string().contains("0 of the 1 replicas"),
                "round {round}: {e}"
            );
        }
    }
    // Two lanes and the settlements' two: the pool's bound, besides the test's own.
    let clients = redis.cmd(&[b"CLIENT", b"LIST"]).unwrap();
    let clients = clients.as_str().unwrap_or_default().lines().count();
    assert!(clients <= 2 + 2 + 1, "{clients} connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_timed_out_is_never_applied_later() {
    let redis = TestRedis::start().unwrap();
    if !redis.is_owned() {
        eprintln!("TOLLGATE_REDIS_URL names an external Redis, which this test cannot pause");
        return;
    }
    let store = waiting_for_one(&redis).await;
    let policy = Policy::per_hour(1).unwrap();
    // The script loaded, and a connection of the pool open with nothing pending.
    let warm = store.decide(&[Check::new(policy, b"warm", 1)]).await;
    assert!(warm.unwrap_err().to_string().contains("0 of the 1"));
    // Shorter than the 1 s a connection waits for a reply before it gives up on itself: a
    // connection kept open would deliver the calls once the pause ends.
    let pause = Duration::from_millis(950);
    let millis = pause.as_millis().to_string();
    let paused = redis.cmd(&[b"CLIENT", b"PAUSE", millis.as_bytes()]);
    assert_eq!(
        paused.unwrap(),
        tollgate_testkit::Reply::Status("OK".into())
    );
    let start = Instant::now();
    let check = [Check::new(policy, b"paused", 1)];
    let calls = (0..4).map(|_| store.decide(&check));
    for result in futures_util::future::join_all(calls).await {
        let e = result.unwrap_err();
        assert!(matches!(e, StoreError::Timeout(_)), "{e}");
    }
    // Past the pause, with time to run what Redis still held of them.
    tokio::time::sleep((pause + Duration::from_millis(500)).saturating_sub(start.elapsed())).await;
    // Their connections were closed before Redis read them: no bucket of that key exists.
    let buckets = redis.cmd(&[b"KEYS", b"*{paused}*"]).unwrap();
    assert_eq!(buckets, tollgate_testkit::Reply::Array(Vec::new()));
    // Nothing took the bucket's one token, which this call takes (its WAIT short, so answered
    // as an error, not a denial).
    let e = store
        .decide(&[Check::new(policy, b"paused", 1)])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("0 of the 1 replicas"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_says_how_many_replicas_the_primary_lacks() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::builder(redis.url())
        .timeout(TIMEOUT)
        .wait_for_replicas(2, WAIT)
        .build()
        .await
        .unwrap();
    let Err(StoreError::Config(why)) = store.ready().await else {
        panic!("ready() accepted 2 replicas of a primary that has none");
    };
    assert!(why.contains("asks for 2 replicas"), "{why}");
    assert!(why.contains("has 0 connected"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_in_sync_decisions_are_exact() {
    // No failover wanted: a loaded machine must not make one by starving the primary a second.
    let set = SentinelSet::start_with_down_after(1, 1, Duration::from_secs(5)).unwrap();
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
