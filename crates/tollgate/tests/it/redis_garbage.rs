//! Garbage or out-of-range state under a bucket's Redis key (issue 27, point 6): reported as
//! incompatible, never read as a full bucket; the decisions beside it go on; and the key gets
//! the TTL of a bucket of its policy, so it goes away like one instead of being answered by the
//! fail policy until someone deletes it.
#![cfg(feature = "redis")]

use std::time::Duration;

use tollgate::store::settle::{Adjustment, Once, Settle};
use tollgate::{Check, ErrorKind, Policy, RedisStore, Store, StoreError};
use tollgate_testkit::{TestRedis, redis_cmd};

fn set(redis: &TestRedis, key: &str, value: &str) {
    redis_cmd(redis.port(), &[b"SET", key.as_bytes(), value.as_bytes()]).unwrap();
}

/// The key's TTL in milliseconds (-1: none).
fn pttl(redis: &TestRedis, key: &str) -> i64 {
    let reply = redis_cmd(redis.port(), &[b"PTTL", key.as_bytes()]).unwrap();
    reply.as_int().unwrap()
}

fn incompatible(result: Result<impl std::fmt::Debug, StoreError>, key: &str) -> String {
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    let message = error.to_string();
    assert!(message.contains(key), "{message}");
    message
}

#[tokio::test]
async fn a_garbage_token_bucket_is_incompatible_and_expires_like_a_bucket() {
    let redis = TestRedis::start().unwrap();
    for coalesce in [false, true] {
        let store = RedisStore::builder(redis.url())
            .coalesce(coalesce)
            .deny_cache(coalesce)
            .build()
            .await
            .unwrap();
        // 5 tokens, one every 200 ms: a bucket lives at most 2 s (from a capacity in debt).
        let policy = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
        let key = "tollgate:v3:{alice}:tb:=api";
        // The last three end in the policy's own numbers (t = 200,000 µs, tau = 10^6 µs), which
        // bucket.lua recognises before converting the rest: a tat beyond 2^52 µs from now, one
        // that is not a whole number, a space too many.
        for value in [
            "not a number",
            "-5",
            "1e30",
            "99999999999999999999",
            "99999999999999999999 200000 1000000",
            "1e3 200000 1000000",
            "1 200000 1000000 ",
        ] {
            set(&redis, key, value);
            assert_eq!(pttl(&redis, key), -1);
            let alice = [Check::new(policy, b"alice", 1).named("api")];
            incompatible(store.decide(&alice).await, key);
            let ttl = pttl(&redis, key);
            assert!((1..=2000).contains(&ttl), "{value}: TTL {ttl} ms");
            let peek = [Check::new(policy, b"alice", 0).named("api")];
            incompatible(store.decide(&peek).await, key);
            // Beside another bucket, the decision is refused whole; other keys go on.
            let both = [
                Check::new(policy, b"alice", 1).named("api"),
                Check::new(policy, b"alice", 1).named("other"),
            ];
            incompatible(store.decide(&both).await, key);
            let bob = format!("bob-{coalesce}-{value}");
            let bob = [Check::new(policy, bob.as_bytes(), 1).named("api")];
            assert!(store.decide(&bob).await.unwrap().allowed());
            // A refund settles nothing, and its id is not spent.
            let once = Once::new(b"r-1", Duration::from_secs(60));
            let refund = [(alice[0], Adjustment::Refund(1))];
            incompatible(store.settle(Some(once), &refund).await, key);
            redis_cmd(redis.port(), &[b"DEL", key.as_bytes()]).unwrap();
            store.settle(Some(once), &refund).await.unwrap();
            redis_cmd(redis.port(), &[b"DEL", b"tollgate:v3:{alice}:once:722d31"]).unwrap();
        }
        // A TTL longer than a bucket lives is cut; a shorter one is kept.
        set(&redis, key, "x");
        redis_cmd(redis.port(), &[b"PEXPIRE", key.as_bytes(), b"3600000"]).unwrap();
        let alice = [Check::new(policy, b"alice", 1).named("api")];
        incompatible(store.decide(&alice).await, key);
        assert!(pttl(&redis, key) <= 2000);
        redis_cmd(redis.port(), &[b"PEXPIRE", key.as_bytes(), b"500"]).unwrap();
        incompatible(store.decide(&alice).await, key);
        assert!(pttl(&redis, key) <= 500);
        redis_cmd(redis.port(), &[b"DEL", key.as_bytes()]).unwrap();
    }
}

#[tokio::test]
async fn garbage_windows_are_incompatible_and_expire_like_windows() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let minute = Duration::from_secs(60);
    let cases = [
        (
            Policy::fixed_window(5, minute).unwrap(),
            "tollgate:v3:{alice}:fw:=w",
            "1 2",
            60_000,
        ),
        (
            Policy::fixed_window(5, minute).unwrap(),
            "tollgate:v3:{alice}:fw:=w",
            "1 2 x",
            60_000,
        ),
        (
            Policy::sliding_window_counter(5, minute).unwrap(),
            "tollgate:v3:{alice}:sc:=w",
            "1 2 3 99999999999999999",
            120_000,
        ),
        // Carried counts of no width, and six numbers: neither is ever written.
        (
            Policy::sliding_window_counter(5, minute).unwrap(),
            "tollgate:v3:{alice}:sc:=w",
            "1 2 3 60000000 5 6 7 0",
            120_000,
        ),
        (
            Policy::sliding_window_counter(5, minute).unwrap(),
            "tollgate:v3:{alice}:sc:=w",
            "1 2 3 60000000 5 6",
            120_000,
        ),
        (
            Policy::sliding_window_log(5, minute).unwrap(),
            "tollgate:v3:{alice}:sl:=w",
            "a string, not a list",
            60_000,
        ),
    ];
    for (policy, key, value, most) in cases {
        set(&redis, key, value);
        let check = [Check::new(policy, b"alice", 1).named("w")];
        incompatible(store.decide(&check).await, key);
        let ttl = pttl(&redis, key);
        assert!((1..=most).contains(&ttl), "{value}: TTL {ttl} ms");
        // A token bucket decided beside it in one call (the general script) takes nothing.
        let tb = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
        let both = [check[0], Check::new(tb, b"alice", 5).named("tb")];
        incompatible(store.decide(&both).await, key);
        let tb_only = [Check::new(tb, b"alice", 5).named("tb")];
        assert!(
            store.decide(&tb_only).await.unwrap().allowed(),
            "nothing taken"
        );
        redis_cmd(
            redis.port(),
            &[b"DEL", key.as_bytes(), b"tollgate:v3:{alice}:tb:=tb"],
        )
        .unwrap();
    }
    // A log element this version never writes.
    let log = Policy::sliding_window_log(5, minute).unwrap();
    let key = "tollgate:v3:{alice}:sl:=w";
    redis_cmd(redis.port(), &[b"RPUSH", key.as_bytes(), b"12:x"]).unwrap();
    incompatible(
        store
            .decide(&[Check::new(log, b"alice", 1).named("w")])
            .await,
        key,
    );
    assert!((1..=60_000).contains(&pttl(&redis, key)));
}
