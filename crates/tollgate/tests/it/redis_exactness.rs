//! Exactness against a real Redis at Redis's own clock: many tasks in one process, and three
//! OS processes sharing one Redis; plus what a bucket costs in Redis and that it expires, and
//! a timeout too long to add to the time, which is one that never comes.
#![cfg(feature = "redis")]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Check, Clock, MonotonicClock, Nanos, Policy, RedisStore, Store};
use tollgate_testkit::{TestRedis, redis_cmd};

fn ten_per_second() -> Policy {
    Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap()
}

/// Hammers `key` with `tasks` tasks from `start` until `start + 3 s` (epoch nanoseconds of
/// each process's own monotonic clock); returns the count allowed.
async fn hammer(url: &str, key: &'static [u8], tasks: usize, start: Nanos) -> u64 {
    let store = RedisStore::builder(url)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let clock = MonotonicClock::new();
    let end = start + Nanos::new(3_000_000_000);
    while clock.now() < start {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let allowed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (store, allowed) = (store.clone(), Arc::clone(&allowed));
            tokio::spawn(async move {
                let check = [Check::new(ten_per_second(), key, 1)];
                while clock.now() < end {
                    if store.decide(&check).await.unwrap().allowed() {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    allowed.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_on_one_key_get_at_most_the_bound() {
    let redis = TestRedis::start().unwrap();
    let start = MonotonicClock::new().now() + Nanos::new(100_000_000);
    let allowed = hammer(redis.url(), b"tasks", 64, start).await;
    assert!((38..=40).contains(&allowed), "allowed {allowed}");
}

/// The worker half of `three_processes_share_one_bound`: run by the test binary itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of three_processes_share_one_bound"]
async fn worker_process() {
    let (Ok(url), Ok(start)) = (
        std::env::var("TOLLGATE_WORKER_REDIS"),
        std::env::var("TOLLGATE_WORKER_START"),
    ) else {
        return;
    };
    let allowed = hammer(&url, b"processes", 22, Nanos::new(start.parse().unwrap())).await;
    println!("tollgate-worker-allowed={allowed}");
}

#[test]
fn three_processes_share_one_bound() {
    let redis = TestRedis::start().unwrap();
    let start = MonotonicClock::new().now() + Nanos::new(1_500_000_000);
    // Spawned together, waited for after: `output()` in the loop would run them one after
    // another, and the second and third would start after the window closed.
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "redis_exactness::worker_process",
                    "--ignored",
                    "--nocapture",
                ])
                .env("TOLLGATE_WORKER_REDIS", redis.url())
                .env("TOLLGATE_WORKER_START", start.as_u64().to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut total = 0;
    for child in children {
        let child = child.wait_with_output().unwrap();
        assert!(
            child.status.success(),
            "{}",
            String::from_utf8_lossy(&child.stderr)
        );
        let out = String::from_utf8_lossy(&child.stdout);
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix("tollgate-worker-allowed="))
            .unwrap_or_else(|| panic!("no count in {out}"));
        total += line.parse::<u64>().unwrap();
    }
    assert!(
        (38..=40).contains(&total),
        "allowed {total} across 3 processes"
    );
}

#[tokio::test]
async fn a_bucket_is_one_small_key_that_expires_when_full_again() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
    assert!(
        store
            .decide(&[Check::new(policy, b"alice", 3)])
            .await
            .unwrap()
            .allowed()
    );
    let key: &[u8] = b"tollgate:v3:{alice}:tb:#10:10:1000000000";
    let bytes = redis_cmd(redis.port(), &[b"MEMORY", b"USAGE", key]).unwrap();
    let bytes = bytes.as_int().expect("an integer");
    println!("MEMORY USAGE of one bucket: {bytes} bytes");
    // The value holds the tat and the two numbers it was written under (about 31 bytes).
    assert!(bytes <= 144, "{bytes} bytes for one bucket");
    let ttl = redis_cmd(redis.port(), &[b"PTTL", key]).unwrap();
    let ttl = ttl.as_int().expect("an integer");
    assert!(
        (1..=300).contains(&ttl),
        "PTTL {ttl} ms: the time to refill 3 tokens"
    );
}

/// State written by tollgate's previous key layouts (v1, which named every bucket by its
/// numbers; v2, whose token buckets held a bare tat) is neither read nor an error: the v3
/// bucket starts full, and the old keys keep their TTLs and expire.
#[tokio::test]
async fn state_of_the_previous_layout_is_ignored() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
    let v1: &[u8] = b"tollgate:v1:{alice}:tb:10:10:1000000000";
    // A v1 bucket spent for an hour, with the TTL v1 gave it; and a v2 one (a bare tat).
    let far = b"99999999999999999";
    redis_cmd(redis.port(), &[b"SET", v1, far, b"PX", b"3600000"]).unwrap();
    let v2: &[u8] = b"tollgate:v2:{alice}:tb:=api";
    redis_cmd(redis.port(), &[b"SET", v2, far, b"PX", b"3600000"]).unwrap();
    let checks = [
        Check::new(policy, b"alice", 10),
        Check::new(policy, b"alice", 10).named("api"),
    ];
    for check in checks {
        let verdict = store.decide(&[check]).await.unwrap();
        assert!(verdict.allowed(), "{check:?} read a v1 value");
    }
    for old in [v1, v2] {
        let ttl = redis_cmd(redis.port(), &[b"PTTL", old]).unwrap();
        assert!(ttl.as_int().expect("an integer") > 0, "old key untouched");
    }
}

/// The `calls` count of one command in `INFO commandstats`.
fn calls_of(redis: &TestRedis, command: &str) -> u64 {
    tollgate_testkit::command_calls(redis.port(), command).unwrap()
}

/// A store without a deny cache: every decision reaches Redis, so the calls count the batching
/// alone.
async fn undeterred_store(redis: &TestRedis) -> RedisStore {
    RedisStore::builder(redis.url())
        .deny_cache(false)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

/// Concurrent checks of many keys share script calls, and each key is still decided exactly:
/// 64 users, a budget of 5 each, 8 checks each, all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_share_calls_and_each_gets_its_own_budget() {
    let redis = TestRedis::start().unwrap();
    let store = undeterred_store(&redis).await;
    let policy = Policy::token_bucket(5, 1, Duration::from_secs(3600)).unwrap();
    let before = calls_of(&redis, "evalsha");
    let users: Vec<_> = (0..64)
        .map(|user| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = format!("user-{user}");
                let checks = (0..8).map(|_| {
                    let store = store.clone();
                    let key = key.clone();
                    tokio::spawn(async move {
                        let check = [Check::new(policy, key.as_bytes(), 1)];
                        store.decide(&check).await.unwrap().allowed()
                    })
                });
                let mut allowed = 0;
                for check in checks.collect::<Vec<_>>() {
                    allowed += u64::from(check.await.unwrap());
                }
                allowed
            })
        })
        .collect();
    for user in users {
        assert_eq!(user.await.unwrap(), 5, "each user gets exactly its 5");
    }
    let calls = calls_of(&redis, "evalsha") - before;
    assert!(
        calls <= 512 / 4,
        "512 decisions in {calls} script calls: they were not batched"
    );
}

/// A batch mixes the script's short form (one check of cost 1 under the batch's first policy)
/// with the long one (another cost, another policy, several checks at once), in any order:
/// each key still gets exactly its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_and_long_forms_share_a_batch_exactly() {
    let redis = TestRedis::start().unwrap();
    let store = undeterred_store(&redis).await;
    let hour = Duration::from_secs(3600);
    let five = Policy::token_bucket(5, 1, hour).unwrap();
    let seven = Policy::token_bucket(7, 1, hour).unwrap();
    // Per round, on its own keys: cost 1 under `five` (short form when `five` comes first),
    // cost 2 under `five`, cost 1 under `seven`, and both policies at once.
    let asks = |round: usize| -> Vec<Vec<(Policy, String, u64)>> {
        let key = |k: &str| format!("r{round}-{k}");
        let mut asks = Vec::new();
        for i in 0..8 {
            asks.push(vec![(five, key("ones"), 1)]);
            asks.push(vec![(five, key("twos"), 2)]);
            asks.push(vec![(seven, key("sevens"), 1)]);
            if i % 2 == 0 {
                asks.push(vec![(five, key("pair"), 1), (seven, key("pair"), 3)]);
            }
        }
        asks
    };
    for round in 0..8 {
        let tasks: Vec<_> = asks(round)
            .into_iter()
            .map(|ask| {
                let store = store.clone();
                tokio::spawn(async move {
                    let checks: Vec<Check<'_>> = ask
                        .iter()
                        .map(|(p, k, cost)| Check::new(*p, k.as_bytes(), *cost))
                        .collect();
                    let allowed = store.decide(&checks).await.unwrap().allowed();
                    (ask[0].1.clone(), allowed)
                })
            })
            .collect();
        let mut allowed = std::collections::BTreeMap::new();
        for task in tasks {
            let (key, ok) = task.await.unwrap();
            *allowed.entry(key).or_insert(0) += u32::from(ok);
        }
        let got = |k: &str| allowed[&format!("r{round}-{k}")];
        // 5 of cost 1; 2 of cost 2 (4 of 5 tokens); 7 of 8 under seven; the pair: `seven`
        // holds 7 at cost 3, so 2 of 4 pairs (and `five` then has 3 left of 5).
        assert_eq!(
            (got("ones"), got("twos"), got("sevens"), got("pair")),
            (5, 2, 7, 2),
            "round {round}"
        );
    }
}

/// `Duration::MAX` as the timeout: decisions are made, batched and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_past_the_end_of_time_never_comes() {
    let redis = TestRedis::start().unwrap();
    for batch in [true, false] {
        let store = RedisStore::builder(redis.url())
            .coalesce(batch)
            .timeout(Duration::MAX)
            .build()
            .await
            .unwrap();
        let check = [Check::new(ten_per_second(), b"forever", 1)];
        assert!(
            store.decide(&check).await.unwrap().allowed(),
            "batch {batch}"
        );
    }
}
