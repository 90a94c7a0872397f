//! Leases across OS processes, on Redis, a Redis Cluster and PostgreSQL: three processes with
//! leases on share one exact bound, and a process killed while it holds a lease under-grants by
//! exactly that lease (it cannot give it back; the refill pays it back), never over-grants.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::store::lease::Leased;
use tollgate::store::settle::DynSettle;
use tollgate::{Check, Clock, MonotonicClock, Nanos, Policy, PostgresStore, RedisStore, Store};
use tollgate_testkit::{TestPostgres, TestRedis, TestRedisCluster};

/// 200 a second, a burst of 200: large enough to be leased while it is full.
fn two_hundred_per_second() -> Policy {
    Policy::token_bucket(200, 200, Duration::from_secs(1)).unwrap()
}

/// 1,000 tokens that do not refill while a test runs.
fn thousand() -> Policy {
    Policy::token_bucket(1_000, 1, Duration::from_secs(3600)).unwrap()
}

/// The store `spec` names: `redis <url>`, `cluster <url>,<url>,...` or `postgres <url> <table>`.
async fn open(spec: &str) -> Arc<dyn DynSettle> {
    let parts: Vec<&str> = spec.split(' ').collect();
    match parts[..] {
        ["cluster", urls] => Arc::new(
            RedisStore::builder("")
                .cluster(urls.split(',').map(str::to_owned))
                .timeout(Duration::from_secs(2))
                .build()
                .await
                .unwrap(),
        ),
        ["redis", url] => Arc::new(
            RedisStore::builder(url)
                .timeout(Duration::from_secs(2))
                .build()
                .await
                .unwrap(),
        ),
        ["postgres", url, table] => Arc::new(
            PostgresStore::builder(url)
                .table(table)
                .timeout(Duration::from_secs(2))
                .build()
                .await
                .unwrap(),
        ),
        _ => panic!("no store in {spec:?}"),
    }
}

/// The worker half of the tests below, run by the test binary itself: `hammer <start>` decides
/// with 16 tasks for 2 s from `start` (nanoseconds of the shared monotonic clock) and prints
/// what it allowed; `hold` takes a lease, prints what it allowed and holds, and waits to be
/// killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of the lease tests"]
async fn worker() {
    let (Ok(spec), Ok(mode)) = (
        std::env::var("TOLLGATE_LEASE_STORE"),
        std::env::var("TOLLGATE_LEASE_MODE"),
    ) else {
        return;
    };
    let store = open(&spec).await;
    match mode.split_once(' ') {
        Some(("hammer", start)) => {
            let (allowed, last) = hammer(store, Nanos::new(start.parse().unwrap())).await;
            println!("tollgate-worker-allowed={allowed} last={}", last.as_u64());
        }
        _ => {
            // A lifetime longer than the test: nothing is given back before the kill.
            let leased = Leased::builder(store)
                .lifetime(tollgate::NonZeroDuration::from_secs(600).unwrap())
                .hot(std::num::NonZeroU64::new(2).unwrap())
                .build();
            let check = Check::new(thousand(), b"held", 1).named("held");
            let mut allowed = 0;
            for _ in 0..100 {
                allowed += u64::from(leased.decide(&[check]).await.unwrap().allowed());
            }
            let held = leased.stats().tokens_leased() - leased.stats().local_decisions();
            println!("tollgate-worker-allowed={allowed} held={held}");
            tokio::time::sleep(Duration::from_secs(600)).await;
        }
    }
}

/// What the workers allowed, and when the last answer came (a call sent just before the end
/// is decided after it, when the bucket may have refilled a token more).
async fn hammer(store: Arc<dyn DynSettle>, start: Nanos) -> (u64, Nanos) {
    let store = Arc::new(Leased::new(store));
    let clock = MonotonicClock::new();
    let end = start + Nanos::new(2_000_000_000);
    while clock.now() < start {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let allowed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (store, allowed) = (Arc::clone(&store), Arc::clone(&allowed));
            tokio::spawn(async move {
                let check = [Check::new(two_hundred_per_second(), b"shared", 1).named("shared")];
                while clock.now() < end {
                    if store.decide(&check).await.unwrap().allowed() {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let last = clock.now();
    store.close().await;
    (allowed.load(Ordering::Relaxed), last)
}

fn worker_command(spec: &str, mode: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "lease_processes::worker",
            "--ignored",
            "--nocapture",
        ])
        .env("TOLLGATE_LEASE_STORE", spec)
        .env("TOLLGATE_LEASE_MODE", mode);
    command
}

/// The `key=value` numbers of a worker's line.
fn field(line: &str, name: &str) -> u64 {
    line.split(' ')
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        .parse()
        .unwrap()
}

/// Three processes with leases on, 16 tasks each, demand far above 200 a second for 2 s: at
/// most the bound (200 held, and 200 a second from the start to the last answer), and not far
/// below it.
fn three_processes_share_one_bound(spec: &str) {
    let start = MonotonicClock::new().now() + Nanos::new(1_500_000_000);
    let mode = format!("hammer {}", start.as_u64());
    // Spawned together, waited for after: all three decide in the same window.
    let children: Vec<_> = (0..3)
        .map(|_| {
            worker_command(spec, &mode)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut total, mut last) = (0, start);
    for child in children {
        let child = child.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&child.stdout);
        assert!(
            child.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&child.stderr)
        );
        let line = out
            .lines()
            .find(|l| l.starts_with("tollgate-worker-allowed="))
            .unwrap_or_else(|| panic!("no count in {out}"));
        total += field(line, "tollgate-worker-allowed");
        last = last.max(Nanos::new(field(line, "last")));
    }
    // 200 a second, one token every 5 ms: whole tokens refilled by the last answer.
    let bound = 200 + (last - start).as_u64() / 5_000_000;
    assert!(
        total <= bound && total >= 540,
        "allowed {total} across 3 processes; at most {bound}"
    );
}

#[test]
fn three_processes_with_leases_share_one_bound_on_redis() {
    let redis = TestRedis::start().unwrap();
    three_processes_share_one_bound(&format!("redis {}", redis.url()));
}

#[test]
fn three_processes_with_leases_share_one_bound_on_a_redis_cluster() {
    let cluster = TestRedisCluster::start(3).unwrap();
    three_processes_share_one_bound(&format!("cluster {}", cluster.urls().join(",")));
}

#[test]
fn three_processes_with_leases_share_one_bound_on_postgres() {
    let pg = TestPostgres::start().unwrap();
    three_processes_share_one_bound(&format!("postgres {} lease_three", pg.url()));
}

/// A process takes a lease and is killed (SIGKILL: no chance to give it back). What it
/// allowed, what is left and what it held add up to the bucket exactly: the crash cost the
/// lease it held, no more, and granted nothing twice.
async fn a_killed_process_loses_exactly_its_lease(spec: &str) {
    let mut child = worker_command(spec, "hold")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map(Result::unwrap)
        .find(|l| l.starts_with("tollgate-worker-allowed="))
        .expect("the worker's count");
    child.kill().unwrap();
    child.wait().unwrap();
    let (allowed, held) = (
        field(&line, "tollgate-worker-allowed"),
        field(&line, "held"),
    );
    assert_eq!(allowed, 100);
    assert!(held > 0, "the worker held no lease: the test tests nothing");
    let store = open(spec).await;
    let check = [Check::new(thousand(), b"held", 1).named("held")];
    let mut left = 0;
    while store.decide(&check).await.unwrap().allowed() {
        left += 1;
    }
    assert_eq!(
        allowed + left + held,
        1_000,
        "allowed {allowed}, left {left}, lost with the process {held}"
    );
}

#[tokio::test]
async fn a_killed_process_loses_exactly_its_lease_on_redis() {
    let redis = TestRedis::start().unwrap();
    a_killed_process_loses_exactly_its_lease(&format!("redis {}", redis.url())).await;
}

#[tokio::test]
async fn a_killed_process_loses_exactly_its_lease_on_a_redis_cluster() {
    let cluster = TestRedisCluster::start(3).unwrap();
    let spec = format!("cluster {}", cluster.urls().join(","));
    a_killed_process_loses_exactly_its_lease(&spec).await;
}

#[tokio::test]
async fn a_killed_process_loses_exactly_its_lease_on_postgres() {
    let pg = TestPostgres::start().unwrap();
    a_killed_process_loses_exactly_its_lease(&format!("postgres {} lease_killed", pg.url())).await;
}
