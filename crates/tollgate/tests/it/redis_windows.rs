//! The window algorithms in Redis against their pure functions.
//!
//! Random sequences of (advance, cost) under an injected clock, for each window algorithm, on a
//! store with no caches and on one with the deny cache and coalescing: every decision must equal
//! the pure model's ([`conformance::Model`], at the store's 1 µs resolution). Then the Redis
//! specifics: checks of different algorithms decided all or nothing in one script run, a
//! coalesced batch decided in arrival order, and what a key holds (type, size, TTL).
#![cfg(feature = "redis")]

use crate::conformance;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use conformance::{Driver, Harness};
use proptest::prelude::*;
use tollgate::{Check, Clock, ManualClock, Nanos, Policy, RedisStore, Store};
use tollgate_testkit::{TestRedis, redis_cmd};

/// One Redis for every proptest case: a server per case would dominate the run.
fn redis() -> &'static TestRedis {
    static REDIS: OnceLock<TestRedis> = OnceLock::new();
    REDIS.get_or_init(|| TestRedis::start().expect("start redis-server"))
}

/// A fresh key per case, so cases sharing the Redis never share a bucket.
fn fresh_key(prefix: &str) -> Vec<u8> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}:{}", NEXT.fetch_add(1, Ordering::Relaxed)).into_bytes()
}

struct Injected {
    clock: ManualClock,
    store: RedisStore,
}

impl Injected {
    async fn start(url: &str, clock: &ManualClock, caches: bool) -> Injected {
        let store = RedisStore::builder(url)
            .test_clock(clock.clone())
            .deny_cache(caches)
            .coalesce(caches)
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("connect");
        Injected {
            clock: clock.clone(),
            store,
        }
    }
}

impl Harness for Injected {
    type S = RedisStore;

    fn store(&self) -> &RedisStore {
        &self.store
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn resolution(&self) -> Nanos {
        Nanos::new(1000)
    }
}

fn window_policy(algorithm: u8, limit: u64, window: Duration) -> Policy {
    match algorithm {
        0 => Policy::fixed_window(limit, window),
        1 => Policy::sliding_window_log(limit, window),
        _ => Policy::sliding_window_counter(limit, window),
    }
    .expect("a valid policy")
}

/// (algorithm, limit, window in ns, steps of (advance in ns, cost)). Windows include ones that
/// are no whole number of microseconds (the store rounds them up, as the model does); costs
/// reach past the limit (an error); advances are often zero (a burst) and sometimes sub-µs.
fn scenario() -> impl Strategy<Value = (u8, u64, u64, Vec<(u64, u64)>)> {
    (
        0u8..3,
        1u64..=6,
        prop_oneof![1_000u64..50_000, 1_000_000u64..3_000_000_000],
    )
        .prop_flat_map(|(algorithm, limit, window)| {
            let advance = prop_oneof![Just(0u64), 0..1_000u64, 0..=window * 3 / 2];
            let step = (advance, 0..=limit + 1);
            (
                Just(algorithm),
                Just(limit),
                Just(window),
                prop::collection::vec(step, 1..48),
            )
        })
}

proptest! {
    // Each case is a few dozen Redis round trips.
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn windows_in_redis_decide_like_the_pure_functions(
        (algorithm, limit, window, steps) in scenario()
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let clock = ManualClock::new(Nanos::new(1_700_000_000_123_456_789));
            let plain = Injected::start(redis().url(), &clock, false).await;
            let cached = Injected::start(redis().url(), &clock, true).await;
            let (mut on_plain, mut on_cached) = (Driver::new(&plain), Driver::new(&cached));
            let policy = window_policy(algorithm, limit, Duration::from_nanos(window));
            let (a, b) = (fresh_key("prop:plain"), fresh_key("prop:cached"));
            for (advance, cost) in steps {
                clock.advance(Duration::from_nanos(advance));
                // The driver asserts that each store and its model agree, errors included.
                let _ = on_plain.decide(&[Check::new(policy, &a, cost)]).await;
                let _ = on_cached.decide(&[Check::new(policy, &b, cost)]).await;
                // Asked again at once, the cache answers if it holds the denial.
                let _ = on_cached.decide(&[Check::new(policy, &b, cost)]).await;
            }
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// decide.lua's carried counts (issue 44) against sliding_counter.rs: the width changes
    /// under a named counter, with and without the deny cache.
    #[test]
    fn a_counter_whose_width_changes_decides_like_the_pure_function(
        (policies, steps) in conformance::changing_counter()
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let clock = ManualClock::new(Nanos::new(1_700_000_000_123_456_789));
            let plain = Injected::start(redis().url(), &clock, false).await;
            let cached = Injected::start(redis().url(), &clock, true).await;
            let (mut on_plain, mut on_cached) = (Driver::new(&plain), Driver::new(&cached));
            let policies: Vec<Policy> = policies
                .iter()
                .map(|&(limit, width)| window_policy(2, limit, Duration::from_nanos(width)))
                .collect();
            let (a, b) = (fresh_key("change:plain"), fresh_key("change:cached"));
            for (which, advance, cost) in steps {
                clock.advance(Duration::from_nanos(advance));
                let p = policies[which];
                let _ = on_plain.decide(&[Check::new(p, &a, cost).named("c")]).await;
                let _ = on_cached.decide(&[Check::new(p, &b, cost).named("c")]).await;
                let _ = on_cached.decide(&[Check::new(p, &b, cost).named("c")]).await;
            }
        });
    }
}

/// After a change of width the value holds the carried counts, and lives until they have slid
/// out; once they have, the next grant writes four numbers again.
#[tokio::test]
async fn carried_counts_are_written_and_expire_with_them() {
    let redis = TestRedis::start().expect("start redis-server");
    let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
    let h = Injected::start(redis.url(), &clock, false).await;
    let mut d = Driver::new(&h);
    let minute = Policy::sliding_window_counter(10, Duration::from_secs(60)).unwrap();
    let second = Policy::sliding_window_counter(10, Duration::from_secs(1)).unwrap();
    let key = b"tollgate:v3:{carried}:sc:=c";
    let value = || {
        let v = redis_cmd(redis.port(), &[b"GET", key]).expect("redis answers");
        String::from_utf8(v.as_bytes().expect("a string").to_vec()).expect("text")
    };
    let pttl = || {
        redis_cmd(redis.port(), &[b"PTTL", key])
            .unwrap()
            .as_int()
            .unwrap()
    };
    assert!(d.named("c", minute, b"carried", 6).await.allowed());
    assert_eq!(value().split(' ').count(), 4);
    assert!(d.named("c", second, b"carried", 2).await.allowed());
    let carried: Vec<u64> = value().split(' ').map(|n| n.parse().unwrap()).collect();
    assert_eq!(carried.len(), 8);
    assert_eq!(
        &carried[5..],
        [0, 6, 60_000_000],
        "the minute's counts, frozen"
    );
    // The minute's 6 count until the end of the minute after theirs (plus the injected
    // clock's slack of a minute), far past the second's two windows.
    assert!(pttl() > 60_000 + 2_000, "PTTL {}", pttl());
    let v = d.named("c", second, b"carried", 3).await;
    assert!(!v.allowed(), "the minute's counts still charge");
    clock.advance(Duration::from_secs(120));
    assert!(d.named("c", second, b"carried", 3).await.allowed());
    assert_eq!(value().split(' ').count(), 4);
}

#[tokio::test]
async fn checks_of_different_algorithms_are_all_or_nothing() {
    let redis = TestRedis::start().expect("start redis-server");
    let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
    let h = Injected::start(redis.url(), &clock, false).await;
    let mut d = Driver::new(&h);
    let s = Duration::from_secs(1);
    let bucket = Policy::token_bucket(10, 10, s).unwrap();
    let fixed = Policy::fixed_window(3, s).unwrap();
    let log = Policy::sliding_window_log(4, s).unwrap();
    let counter = Policy::sliding_window_counter(5, s).unwrap();
    let all =
        |cost| [bucket, fixed, log, counter].map(|p| Check::new(p, b"mixed".as_slice(), cost));
    assert!(d.decide(&all(2)).await.unwrap().allowed());
    // The fixed window holds 1 of 3: it denies, and nobody else is charged.
    let v = d.decide(&all(2)).await.unwrap();
    assert!(!v.allowed());
    let remaining: Vec<u64> = v.decisions().iter().map(|d| d.remaining()).collect();
    assert_eq!(remaining, [8, 1, 2, 3]);
    assert!(d.decide(&all(1)).await.unwrap().allowed());
    for step in 0..30u64 {
        h.advance(Duration::from_millis(97 * (step % 4)));
        d.decide(&all(step % 3)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalesced_batch_is_decided_in_arrival_order() {
    let redis = TestRedis::start().expect("start redis-server");
    let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
    let store = Injected::start(redis.url(), &clock, true).await.store;
    let log = Policy::sliding_window_log(5, Duration::from_secs(60)).unwrap();
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .decide(&[Check::new(log, b"batch", 1)])
                    .await
                    .unwrap()
                    .decisions()[0]
            })
        })
        .collect();
    let mut allowed_remaining = Vec::new();
    for task in tasks {
        let d = task.await.unwrap();
        if d.allowed() {
            allowed_remaining.push(d.remaining());
        }
    }
    // As if one by one: five grants, each seeing the one before.
    allowed_remaining.sort_unstable();
    assert_eq!(allowed_remaining, [0, 1, 2, 3, 4]);
}

/// What one key of each window algorithm is in Redis: its type, its size, its TTL.
#[tokio::test]
async fn window_keys_are_small_and_expire() {
    let redis = TestRedis::start().expect("start redis-server");
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let minute = Duration::from_secs(60);
    // (policy, key, type, longest TTL in ms: to the window's end, to the newest grant's exit,
    // to the end of the next window; most bytes).
    let cases: [(Policy, &[u8], &str, i64, i64); 3] = [
        (
            Policy::fixed_window(100, minute).unwrap(),
            b"tollgate:v3:{alice}:fw:#100:100:60000000000",
            "string",
            60_000,
            120,
        ),
        (
            Policy::sliding_window_log(100, minute).unwrap(),
            b"tollgate:v3:{alice}:sl:#100:100:60000000000",
            "list",
            60_000,
            256,
        ),
        (
            Policy::sliding_window_counter(100, minute).unwrap(),
            b"tollgate:v3:{alice}:sc:#100:100:60000000000",
            "string",
            120_000,
            120,
        ),
    ];
    for (policy, key, kind, most, size) in cases {
        for cost in [1, 3] {
            let check = [Check::new(policy, b"alice", cost)];
            assert!(store.decide(&check).await.unwrap().allowed());
        }
        let reply = |args: &[&[u8]]| redis_cmd(redis.port(), args).expect("redis answers");
        assert_eq!(reply(&[b"TYPE", key]).as_str(), Some(kind));
        let bytes = reply(&[b"MEMORY", b"USAGE", key])
            .as_int()
            .expect("an integer");
        let ttl = reply(&[b"PTTL", key]).as_int().expect("an integer");
        let name = String::from_utf8_lossy(key);
        println!("MEMORY USAGE of {name} after 2 grants: {bytes} bytes, PTTL {ttl} ms");
        assert!(bytes <= size, "{bytes} bytes");
        assert!((1..=most).contains(&ttl), "PTTL {ttl} ms of {kind}");
    }
    // A log keeps one element per grant, not per token.
    let log = b"tollgate:v3:{alice}:sl:#100:100:60000000000";
    let len = redis_cmd(redis.port(), &[b"LLEN", log]).unwrap();
    assert_eq!(len.as_int(), Some(2));
    // A log at its limit, for the size of a full one.
    let full = Policy::sliding_window_log(100, minute).unwrap();
    for _ in 0..100 {
        let check = [Check::new(full, b"bob", 1)];
        assert!(store.decide(&check).await.unwrap().allowed());
    }
    let key = b"tollgate:v3:{bob}:sl:#100:100:60000000000";
    let bytes = redis_cmd(redis.port(), &[b"MEMORY", b"USAGE", key]).unwrap();
    let bytes = bytes.as_int().expect("an integer");
    println!("MEMORY USAGE of a full sliding log of 100: {bytes} bytes");
    assert!(bytes <= 100 * 16, "{bytes} bytes");
}
