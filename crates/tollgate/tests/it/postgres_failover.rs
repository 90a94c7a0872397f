//! The PostgreSQL store on a primary and its streaming standby, both in the URL with
//! `target_session_attrs=read-write`: the primary killed mid-load and the standby promoted.
//! The store follows the promotion, every call meanwhile comes back within its timeout (the
//! fail policy's to answer), a statement whose connection died is never sent again, and with
//! a synchronous standby no token is granted twice.
#![cfg(feature = "postgres")]

use crate::faults;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use faults::recovery;
use tollgate::{Check, Clock, MonotonicClock, Policy, PostgresStore, Store, StoreError};
use tollgate_testkit::{Replication, TestPostgresReplica};

const TIMEOUT: Duration = Duration::from_millis(200);
/// What a bounded call may take beyond its timeout on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(400);
/// Workers deciding at once.
const WORKERS: u32 = 16;

/// `capacity` tokens that do not come back within a test (one a day).
fn no_refill(capacity: u64) -> Policy {
    Policy::token_bucket(capacity, 1, Duration::from_secs(86_400)).unwrap()
}

async fn store(pair: &TestPostgresReplica, synchronous_commit: bool) -> PostgresStore {
    PostgresStore::builder(pair.url())
        .timeout(TIMEOUT)
        .synchronous_commit(synchronous_commit)
        .build()
        .await
        .unwrap()
}

/// What the workers saw: tokens the store granted, calls it could not answer, the slowest call.
#[derive(Debug, Default)]
struct Seen {
    allowed: u64,
    failed: u64,
    slowest: Duration,
}

/// `WORKERS` tasks deciding one token of `policy` on `key` until `stop`.
fn load(
    store: &PostgresStore,
    policy: &Policy,
    key: &'static [u8],
    stop: &Arc<AtomicBool>,
    allowed: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<Seen>> {
    (0..WORKERS)
        .map(|_| {
            let (store, policy) = (store.clone(), *policy);
            let (stop, allowed) = (Arc::clone(stop), Arc::clone(allowed));
            tokio::spawn(async move {
                let clock = MonotonicClock::new();
                let mut seen = Seen::default();
                while !stop.load(Ordering::Relaxed) {
                    let start = clock.now();
                    let answer = store.decide(&[Check::new(policy, key, 1)]).await;
                    seen.slowest = seen.slowest.max(Duration::from(clock.now() - start));
                    match answer {
                        Ok(verdict) if verdict.allowed() => {
                            seen.allowed += 1;
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(StoreError::Unavailable(_) | StoreError::Timeout(_)) => {
                            seen.failed += 1;
                        }
                        Err(e) => panic!("a failover is an outage, not {e:?}"),
                    }
                    // A denial from the deny cache comes without a wait: a client that asks
                    // again at once would never let its worker drive the runtime's timers.
                    tokio::task::yield_now().await;
                }
                seen
            })
        })
        .collect()
}

async fn sum(tasks: Vec<tokio::task::JoinHandle<Seen>>) -> Seen {
    let mut all = Seen::default();
    for task in tasks {
        let seen = task.await.unwrap();
        all.allowed += seen.allowed;
        all.failed += seen.failed;
        all.slowest = all.slowest.max(seen.slowest);
    }
    all
}

/// Waits until `allowed` reaches `at_least` (failing the test after 30 s).
async fn until(allowed: &AtomicU64, at_least: u64) {
    for _ in 0..3_000 {
        if allowed.load(Ordering::Relaxed) >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("only {allowed:?} of {at_least} tokens granted in 30 s");
}

/// Kills the primary and promotes the standby, off the runtime's workers.
async fn fail_over(pair: TestPostgresReplica) -> TestPostgresReplica {
    tokio::task::spawn_blocking(move || {
        let mut pair = pair;
        pair.kill_primary().unwrap();
        pair.promote().unwrap();
        pair
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_is_followed_and_decisions_are_exact_again() {
    let pair = TestPostgresReplica::start(Replication::Asynchronous).unwrap();
    let store = store(&pair, false).await;
    let policy = faults::policy();
    let stop = Arc::new(AtomicBool::new(false));
    let allowed = Arc::new(AtomicU64::new(0));
    let tasks = load(&store, &policy, b"busy", &stop, &allowed);
    until(&allowed, 200).await;
    let pair = fail_over(pair).await;
    let took = recovery(&store, Duration::from_secs(20)).await;
    assert!(took <= Duration::from_secs(10), "followed after {took:?}");
    // Decisions go on after the switch.
    let after = allowed.load(Ordering::Relaxed);
    until(&allowed, after + 200).await;
    stop.store(true, Ordering::Relaxed);
    let seen = sum(tasks).await;
    assert!(
        seen.failed > 0,
        "the switch was answered by the fail policy"
    );
    assert!(
        seen.slowest <= TIMEOUT + SLACK,
        "a call took {:?}",
        seen.slowest
    );
    // Exact again: a fresh key of 50 grants 50 and not one more, to many workers at once.
    let policy = no_refill(50);
    let stop = Arc::new(AtomicBool::new(false));
    let allowed = Arc::new(AtomicU64::new(0));
    let tasks = load(&store, &policy, b"fresh", &stop, &allowed);
    until(&allowed, 50).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let seen = sum(tasks).await;
    assert_eq!((seen.allowed, seen.failed), (50, 0));
    // Not one retry: the statements that died with the primary were answered, never re-sent.
    assert_eq!(store.stats().retries(), 0);
    drop(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_synchronous_standby_a_failover_grants_no_token_twice() {
    const CAPACITY: u64 = 600;
    let pair = TestPostgresReplica::start(Replication::Synchronous).unwrap();
    // The store's sessions wait for the standby only if they commit synchronously.
    let store = store(&pair, true).await;
    let policy = no_refill(CAPACITY);
    let stop = Arc::new(AtomicBool::new(false));
    let allowed = Arc::new(AtomicU64::new(0));
    let tasks = load(&store, &policy, b"hot", &stop, &allowed);
    until(&allowed, CAPACITY / 3).await;
    let before = allowed.load(Ordering::Relaxed);
    let pair = fail_over(pair).await;
    recovery(&store, Duration::from_secs(20)).await;
    // Run the bucket dry on the promoted standby: every token it has not granted yet.
    let clock = MonotonicClock::new();
    let start = clock.now();
    loop {
        if one(&store, &policy, b"hot").await == Some(false) {
            break;
        }
        assert!(
            Duration::from(clock.now() - start) < Duration::from_secs(30),
            "the bucket never ran dry"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let seen = sum(tasks).await;
    assert!(
        before < CAPACITY,
        "the primary died before the bucket ran dry"
    );
    // Every grant the primary answered reached the standby before its answer: the bucket the
    // standby took over had them all. (Fewer than CAPACITY when a commit reached the standby
    // and its answer died with the primary: a token lost, never one granted twice.)
    assert!(
        seen.allowed <= CAPACITY,
        "{} tokens granted of {CAPACITY}",
        seen.allowed
    );
    assert!(
        seen.slowest <= TIMEOUT + SLACK,
        "a call took {:?}",
        seen.slowest
    );
    assert_eq!(store.stats().retries(), 0);
    drop(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlogged_table_is_empty_on_the_promoted_standby() {
    let pair = TestPostgresReplica::start(Replication::Synchronous).unwrap();
    let store = PostgresStore::builder(pair.url())
        .timeout(TIMEOUT)
        .unlogged(true)
        .synchronous_commit(true)
        .deny_cache(false)
        .build()
        .await
        .unwrap();
    let policy = no_refill(3);
    for expected in [Some(true), Some(true), Some(true), Some(false)] {
        assert_eq!(one(&store, &policy, b"k").await, expected);
    }
    let pair = fail_over(pair).await;
    recovery(&store, Duration::from_secs(20)).await;
    // The table exists on the standby (its definition is in the catalog, which is logged) but
    // its rows never left the primary: the bucket is full again.
    assert_eq!(one(&store, &policy, b"k").await, Some(true));
    drop(pair);
}

/// One token of `policy` on `key`: allowed or not, `None` when the store could not answer.
async fn one(store: &PostgresStore, policy: &Policy, key: &[u8]) -> Option<bool> {
    let answer = store.decide(&[Check::new(*policy, key, 1)]).await;
    answer.ok().map(|v| v.allowed())
}
