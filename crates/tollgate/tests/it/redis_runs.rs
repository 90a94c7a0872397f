//! A batch of users' checks (one check of cost 1 each, under one policy, on buckets numbered
//! in order) goes to `bucket.lua` as one run of its short form, decoded in the script: each
//! decision is still answered as if alone, whatever the state of its bucket.
#![cfg(feature = "redis")]

use std::time::Duration;

use tollgate::{Check, ErrorKind, Policy, RedisStore, Store};
use tollgate_testkit::{TestRedis, command_calls, redis_cmd};

/// A store whose decisions queue behind one call at a time, and are then decided together.
async fn batching(redis: &TestRedis) -> RedisStore {
    RedisStore::builder(redis.url())
        .coalesce(true)
        .max_in_flight(1)
        .deny_cache(false)
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_run_of_users_is_decided_as_each_alone() {
    let redis = TestRedis::start().unwrap();
    let store = batching(&redis).await;
    // Two tokens, no refill during the test.
    let policy = Policy::token_bucket(2, 2, Duration::from_secs(3600)).unwrap();
    let user = |i: usize| format!("user-{i}");
    // Among new users: one exhausted (3), one used once (8), one whose key holds garbage (6).
    for i in [3, 3, 8] {
        let key = user(i);
        let check = Check::new(policy, key.as_bytes(), 1).named("api");
        assert!(store.decide(&[check]).await.unwrap().allowed());
    }
    let garbage = "tollgate:v3:{user-6}:tb:=api";
    redis_cmd(redis.port(), &[b"SET", garbage.as_bytes(), b"garbage"]).unwrap();

    redis_cmd(redis.port(), &[b"CONFIG", b"RESETSTAT"]).unwrap();
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let store = store.clone();
            let key = user(i);
            tokio::spawn(async move {
                store
                    .decide(&[Check::new(policy, key.as_bytes(), 1).named("api")])
                    .await
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let result = task.await.unwrap();
        match i {
            3 => {
                let decision = result.unwrap().decisions()[0];
                assert!(!decision.allowed(), "user 3 had no token left");
                assert_eq!(decision.remaining(), 0);
            }
            6 => {
                let error = result.unwrap_err();
                assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
            }
            _ => {
                let decision = result.unwrap().decisions()[0];
                assert!(decision.allowed(), "user {i}");
                assert_eq!(decision.remaining(), if i == 8 { 0 } else { 1 }, "user {i}");
            }
        }
    }
    // The first decision found the store idle and went alone; those that queued behind it went
    // together: twelve decisions in at most three calls, one of them a run of four or more.
    assert!(command_calls(redis.port(), "evalsha").unwrap() <= 3);
}

/// A hot key's batch is one run on one bucket: its tokens run out in the middle of it, and on a
/// bucket holding garbage every decision of the run is refused.
#[tokio::test]
async fn a_run_on_one_bucket_runs_out_in_order() {
    let redis = TestRedis::start().unwrap();
    let store = batching(&redis).await;
    let policy = Policy::token_bucket(5, 5, Duration::from_secs(3600)).unwrap();
    let concurrently = |key: &'static [u8]| {
        let tasks: Vec<_> = (0..12)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .decide(&[Check::new(policy, key, 1).named("api")])
                        .await
                })
            })
            .collect();
        async move {
            let mut results = Vec::new();
            for task in tasks {
                results.push(task.await.unwrap());
            }
            results
        }
    };
    redis_cmd(redis.port(), &[b"CONFIG", b"RESETSTAT"]).unwrap();
    let remaining: Vec<Option<u64>> = concurrently(b"hot")
        .await
        .into_iter()
        .map(|result| {
            let decision = result.unwrap().decisions()[0];
            decision.allowed().then(|| decision.remaining())
        })
        .collect();
    // In arrival order: five grants, each seeing the one before, then denials.
    let mut expected = vec![Some(4), Some(3), Some(2), Some(1), Some(0)];
    expected.resize(12, None);
    assert_eq!(remaining, expected);
    assert!(command_calls(redis.port(), "evalsha").unwrap() <= 3);

    let garbage = "tollgate:v3:{spoilt}:tb:=api";
    redis_cmd(redis.port(), &[b"SET", garbage.as_bytes(), b"garbage"]).unwrap();
    for result in concurrently(b"spoilt").await {
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Incompatible);
    }
}

/// Lua's `unpack` gives at most about 8,000 values: a batch of more buckets than that read by one
/// `MGET` (peeks are never taken first), or a sliding log given more entries in one call, would
/// fail whole without the scripts' slices.
#[tokio::test]
async fn batches_beyond_luas_unpack_limit_are_decided() {
    const MANY: usize = 9_000;
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::builder(redis.url())
        .coalesce(true)
        .max_in_flight(1)
        .max_batch(MANY)
        .timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let policy = Policy::token_bucket(3, 3, Duration::from_secs(3600)).unwrap();
    let log = Policy::sliding_window_log(MANY as u64, Duration::from_secs(3600)).unwrap();
    for (policy, cost, key) in [(policy, 0, None), (log, 1, Some("log"))] {
        redis_cmd(redis.port(), &[b"CONFIG", b"RESETSTAT"]).unwrap();
        let tasks: Vec<_> = (0..MANY)
            .map(|i| {
                let store = store.clone();
                let key = key.map_or_else(|| format!("peek-{i}"), String::from);
                tokio::spawn(async move {
                    store
                        .decide(&[Check::new(policy, key.as_bytes(), cost)])
                        .await
                })
            })
            .collect();
        for task in tasks {
            assert!(task.await.unwrap().unwrap().allowed());
        }
        // The first call alone, then the rest together.
        assert!(command_calls(redis.port(), "evalsha").unwrap() <= 3);
    }
}
