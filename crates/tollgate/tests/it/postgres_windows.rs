//! The window algorithms on PostgreSQL, exact across processes. Three worker
//! processes (this test binary, run again) hammer one key under each window algorithm, at READ
//! COMMITTED and at SERIALIZABLE; together they get exactly the limit. The window is a day, so
//! the run stays inside one window (a run that straddles midnight UTC is told apart and allowed
//! its second window).
#![cfg(feature = "postgres")]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::store::postgres::{GiveUp, Isolation, Retry};
use tollgate::{Check, Clock, MonotonicClock, Nanos, Policy, PostgresStore, Store};
use tollgate_testkit::TestPostgres;

const LIMIT: u64 = 30;
const DAY: Duration = Duration::from_secs(86_400);

fn policies() -> [(&'static str, Policy); 3] {
    [
        ("fixed", Policy::fixed_window(LIMIT, DAY).unwrap()),
        ("log", Policy::sliding_window_log(LIMIT, DAY).unwrap()),
        (
            "counter",
            Policy::sliding_window_counter(LIMIT, DAY).unwrap(),
        ),
    ]
}

/// The worker half of `three_processes_get_exactly_the_limit_of_each_window`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of three_processes_get_exactly_the_limit_of_each_window"]
async fn window_worker_process() {
    let (Ok(url), Ok(isolation)) = (
        std::env::var("TOLLGATE_WORKER_POSTGRES"),
        std::env::var("TOLLGATE_WORKER_ISOLATION"),
    ) else {
        return;
    };
    let isolation = match isolation.as_str() {
        "serializable" => Isolation::Serializable,
        _ => Isolation::ReadCommitted,
    };
    let store = PostgresStore::builder(url)
        .table("windows_exact")
        .isolation(isolation)
        .retry(
            Retry::default()
                .max_attempts(50)
                .give_up(GiveUp::Unavailable),
        )
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("configure the store");
    let clock = MonotonicClock::new();
    for (name, policy) in policies() {
        let deadline = clock.now() + Nanos::new(700_000_000);
        let allowed = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..12)
            .map(|_| {
                let (store, allowed, errors) = (store.clone(), allowed.clone(), errors.clone());
                tokio::spawn(async move {
                    while clock.now() < deadline {
                        let check = [Check::new(policy, b"hot", 1).named(name)];
                        match store.decide(&check).await {
                            Ok(v) if v.allowed() => allowed.fetch_add(1, Ordering::Relaxed),
                            Ok(_) => 0,
                            Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        println!(
            "tollgate-worker {name} allowed={} errors={}",
            allowed.load(Ordering::Relaxed),
            errors.load(Ordering::Relaxed)
        );
    }
}

fn run_three(pg: &TestPostgres, isolation: &str) {
    let day_of = |n: Nanos| n.as_u64() / 86_400_000_000_000;
    let clock = MonotonicClock::new();
    let first_day = day_of(clock.now());
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "postgres_windows::window_worker_process",
                    "--ignored",
                    "--nocapture",
                ])
                .env("TOLLGATE_WORKER_POSTGRES", pg.url())
                .env("TOLLGATE_WORKER_ISOLATION", isolation)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // All three run at once; then each is waited for.
    let children: Vec<_> = children.into_iter().map(|c| c.wait_with_output()).collect();
    let straddled = day_of(clock.now()) != first_day;
    let mut totals = std::collections::HashMap::new();
    for child in children {
        let child = child.unwrap();
        let out = String::from_utf8_lossy(&child.stdout).into_owned();
        assert!(child.status.success(), "{out}");
        for line in out
            .lines()
            .filter_map(|l| l.strip_prefix("tollgate-worker "))
        {
            let mut words = line.split_whitespace();
            let name = words.next().unwrap().to_owned();
            let allowed: u64 = words.next().unwrap()["allowed=".len()..].parse().unwrap();
            let errors: u64 = words.next().unwrap()["errors=".len()..].parse().unwrap();
            assert_eq!(errors, 0, "{isolation} {name}: {errors} errors");
            *totals.entry(name).or_insert(0) += allowed;
        }
    }
    for (name, _) in policies() {
        let total = totals[name];
        println!("{isolation} {name}: {total} allowed across 3 processes");
        if straddled {
            assert!(total <= 2 * LIMIT, "{name}: {total}");
        } else {
            assert_eq!(total, LIMIT, "{isolation} {name}: exactly the limit");
        }
    }
}

#[test]
fn three_processes_get_exactly_the_limit_of_each_window() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    run_three(&pg, "read-committed");
}

#[test]
fn the_same_at_serializable() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    run_three(&pg, "serializable");
}

/// Concurrent token-bucket and window decisions land in the same batches: each kind is decided
/// its own way (the token buckets in one set statement, each window decision in a call of its
/// own), and each bucket gives exactly its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_batches_of_token_buckets_and_windows_stay_exact() {
    let pg = TestPostgres::start().unwrap();
    let store = PostgresStore::builder(pg.url())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let bucket = Policy::token_bucket(10, 1, Duration::from_secs(3600)).unwrap();
    let window = Policy::fixed_window(10, Duration::from_secs(3600)).unwrap();
    let (by_bucket, by_window) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            let (by_bucket, by_window) = (Arc::clone(&by_bucket), Arc::clone(&by_window));
            tokio::spawn(async move {
                for _ in 0..5 {
                    let (check, count) = if i % 2 == 0 {
                        (Check::new(bucket, b"mixed", 1).named("tb"), &by_bucket)
                    } else {
                        (Check::new(window, b"mixed", 1).named("fw"), &by_window)
                    };
                    if store.decide(&[check]).await.unwrap().allowed() {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(by_bucket.load(Ordering::Relaxed), 10);
    assert_eq!(by_window.load(Ordering::Relaxed), 10);
}
