//! The Redis store when Redis fails: killed, frozen (`DEBUG SLEEP`), flushed, restarted. Every
//! call must come back within its timeout with the configured outcome, and decisions must
//! recover by themselves once Redis is back.
#![cfg(feature = "redis")]

use crate::faults;

use std::time::Duration;

use faults::{recovery, timed};
use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::{Check, MemoryStore, Policy, RedisStore, Store};
use tollgate_testkit::{TestRedis, redis_cmd};

const TIMEOUT: Duration = Duration::from_millis(50);
/// What a bounded call may take beyond its timeout on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(250);

async fn store(redis: &TestRedis) -> RedisStore {
    RedisStore::builder(redis.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_fails_within_the_timeout_and_recovers_on_restart() {
    let mut redis = TestRedis::start().unwrap();
    let raw = store(&redis).await;
    assert!(timed(&raw, b"k").await.0.unwrap());
    let open = Guarded::new(raw.clone(), FailPolicy::Allow);
    let closed = Guarded::new(raw.clone(), FailPolicy::Deny);
    let local = Guarded::new(raw.clone(), FailPolicy::Local(MemoryStore::new()));

    redis.stop().unwrap();
    for _ in 0..20 {
        let (result, took) = timed(&raw, b"k").await;
        assert!(result.unwrap_err().is_transient());
        assert!(took <= TIMEOUT + SLACK, "took {took:?}");
        let (result, took) = timed(&open, b"k").await;
        assert!(result.unwrap(), "fail open allows");
        assert!(took <= TIMEOUT + SLACK, "took {took:?}");
        assert!(timed(&closed, b"k").await.0.is_err(), "fail closed reports");
        assert!(
            timed(&local, b"k").await.0.unwrap(),
            "local fallback decides"
        );
    }
    assert!(open.stats().failed_open() >= 20);

    redis.restart().unwrap();
    let took = recovery(&raw, Duration::from_secs(5)).await;
    assert!(took <= Duration::from_secs(1), "recovered after {took:?}");
    assert!(timed(&closed, b"k").await.0.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_times_out_instead_of_hanging() {
    let redis = TestRedis::start().unwrap();
    let store = store(&redis).await;
    assert!(timed(&store, b"k").await.0.unwrap());
    let port = redis.port();
    let sleeper = std::thread::spawn(move || redis_cmd(port, &[b"DEBUG", b"SLEEP", b"1"]));
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..5 {
        let (result, took) = timed(&store, b"k").await;
        assert!(
            matches!(result, Err(tollgate::StoreError::Timeout(_))),
            "{result:?}"
        );
        assert!(took <= TIMEOUT + SLACK, "took {took:?}");
    }
    sleeper.join().unwrap().unwrap();
    let took = recovery(&store, Duration::from_secs(5)).await;
    assert!(took <= Duration::from_secs(1), "recovered after {took:?}");
}

#[tokio::test]
async fn script_flush_and_restart_reload_the_script() {
    let mut redis = TestRedis::start().unwrap();
    let store = RedisStore::builder(redis.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let p = Policy::token_bucket(3, 1, Duration::from_secs(60)).unwrap();
    let check = [Check::new(p, b"flush", 1)];
    assert!(store.decide(&check).await.unwrap().allowed());
    redis_cmd(redis.port(), &[b"SCRIPT", b"FLUSH"]).unwrap();
    let v = store.decide(&check).await.unwrap();
    assert!(v.allowed());
    assert_eq!(
        v.decisions()[0].remaining(),
        1,
        "state kept across the reload"
    );

    // A restart loses the data (no persistence) and the script cache: both come back.
    redis.restart().unwrap();
    let took = recovery(&store, Duration::from_secs(5)).await;
    assert!(took <= Duration::from_secs(1), "recovered after {took:?}");
    assert_eq!(
        store.decide(&check).await.unwrap().decisions()[0].remaining(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_leak_no_connections() {
    let mut redis = TestRedis::start().unwrap();
    let store = store(&redis).await;
    for _ in 0..3 {
        assert!(timed(&store, b"k").await.0.is_ok());
        redis.stop().unwrap();
        for _ in 0..10 {
            assert!(timed(&store, b"k").await.0.is_err());
        }
        redis.restart().unwrap();
        recovery(&store, Duration::from_secs(5)).await;
    }
    // Concurrent calls after recovery still share the one multiplexed connection.
    let calls: Vec<_> = (0..64u32)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { timed(&store, &i.to_be_bytes()).await.0.is_ok() })
        })
        .collect();
    for call in calls {
        assert!(call.await.unwrap());
    }
    let clients = redis_cmd(redis.port(), &[b"CLIENT", b"LIST"]).unwrap();
    let count = String::from_utf8_lossy(&clients.into_bytes())
        .lines()
        .count();
    assert!(count <= 3, "{count} client connections");
}

/// A reservation the fail policy allowed took nothing from Redis: cancelling it once Redis is
/// back must not give its tokens back there (a client would get tokens nobody paid). Nor may
/// a local fallback's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_the_fail_policy_allowed_gives_nothing_back() {
    use tollgate::store::settle::reserve;

    let redis = TestRedis::start().unwrap();
    // Without the deny cache, whose remembered denial would answer before the store is asked.
    let raw = RedisStore::builder(redis.url())
        .timeout(TIMEOUT)
        .deny_cache(false)
        .build()
        .await
        .unwrap();
    let policy = Policy::token_bucket(5, 1, Duration::from_secs(3600)).unwrap();
    let spend = [Check::new(policy, b"k", 5).named("api")];
    assert!(raw.decide(&spend).await.unwrap().allowed());

    for on_error in [FailPolicy::Allow, FailPolicy::Local(MemoryStore::new())] {
        let limit = tollgate::NonZeroDuration::new(TIMEOUT).unwrap();
        let guarded = Guarded::new(raw.clone(), on_error).timeout(limit);
        let port = redis.port();
        let sleeper = std::thread::spawn(move || redis_cmd(port, &[b"DEBUG", b"SLEEP", b"0.5"]));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let check = [Check::new(policy, b"k", 3).named("api")];
        let (verdict, reservation) = reserve(&guarded, &check).await.unwrap();
        assert!(verdict.allowed() && verdict.by_fail_policy(), "{verdict:?}");
        sleeper.join().unwrap().unwrap();

        let after = reservation.unwrap().cancel(&guarded).await.unwrap();
        assert!(!after.by_fail_policy());
        assert_eq!(after.decisions()[0].remaining(), 0, "nothing given back");
        let peek = [Check::new(policy, b"k", 1).named("api")];
        assert!(!raw.decide(&peek).await.unwrap().allowed());
    }
}
