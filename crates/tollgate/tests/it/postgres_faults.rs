//! The PostgreSQL store when PostgreSQL fails: stopped mid-load and started again, connections
//! killed by `pg_terminate_backend`. Every call comes back within its timeout with the
//! configured outcome, and decisions recover by themselves.
#![cfg(feature = "postgres")]

use crate::faults;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use faults::{recovery, timed};
use tokio_postgres::NoTls;
use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::{MemoryStore, PostgresStore, Store};
use tollgate_testkit::TestPostgres;

const TIMEOUT: Duration = Duration::from_millis(100);
/// What a bounded call may take beyond its timeout on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(400);

async fn store(pg: &TestPostgres) -> PostgresStore {
    PostgresStore::builder(pg.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap()
}

/// Probes until every connection is open: one probe is bounded by the timeout, and each keeps
/// the connections it opened.
async fn open_all(store: &PostgresStore) {
    for _ in 0..50 {
        if store.ready().await.is_ok() {
            return;
        }
    }
    panic!("the store's connections did not open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_mid_load_every_call_is_bounded_and_decisions_recover() {
    let mut pg = TestPostgres::start().unwrap();
    if !pg.is_owned() {
        eprintln!(
            "TOLLGATE_DATABASE_URL names an external PostgreSQL, which this test cannot stop"
        );
        return;
    }
    let raw = store(&pg).await;
    assert!(timed(&raw, b"k").await.0.unwrap());
    let open = Arc::new(Guarded::new(raw.clone(), FailPolicy::Allow));
    let closed = Arc::new(Guarded::new(raw.clone(), FailPolicy::Deny));
    let local = Arc::new(Guarded::new(
        raw.clone(),
        FailPolicy::Local(MemoryStore::new()),
    ));

    // Load on all three while the database goes away.
    let stop = Arc::new(AtomicBool::new(false));
    let slowest = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = (0..12u32)
        .map(|i| {
            let (open, closed, local) = (open.clone(), closed.clone(), local.clone());
            let (stop, slowest) = (stop.clone(), slowest.clone());
            tokio::spawn(async move {
                let key = i.to_be_bytes();
                let mut outcomes = (0u64, 0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let (a, t1) = timed(&*open, &key).await;
                    let (b, t2) = timed(&*closed, &key).await;
                    let (c, t3) = timed(&*local, &key).await;
                    let worst = t1.max(t2).max(t3).as_micros() as u64;
                    slowest.fetch_max(worst, Ordering::Relaxed);
                    outcomes.0 += u64::from(a.expect("fail open never errs"));
                    outcomes.1 += u64::from(b.is_err());
                    outcomes.2 += u64::from(c.expect("the local fallback never errs"));
                }
                outcomes
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    pg.stop().unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    let mut closed_errors = 0;
    for task in load {
        let (_, errors, _) = task.await.unwrap();
        closed_errors += errors;
    }
    assert!(closed_errors > 0, "fail closed reported the outage");
    let slowest = Duration::from_micros(slowest.load(Ordering::Relaxed));
    assert!(slowest <= TIMEOUT + SLACK, "a call took {slowest:?}");
    assert!(open.stats().failed_open() > 0);
    assert!(local.stats().local_fallbacks() > 0);

    pg.restart().unwrap();
    let took = recovery(&raw, Duration::from_secs(10)).await;
    assert!(took <= Duration::from_secs(2), "recovered after {took:?}");
    assert!(timed(&*closed, b"k").await.0.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_are_replaced() {
    let pg = TestPostgres::start().unwrap();
    let store = store(&pg).await;
    // Open every connection of the store (calls one at a time would use only the first).
    open_all(&store).await;
    for i in 0..16u32 {
        assert!(timed(&store, &i.to_be_bytes()).await.0.unwrap());
    }
    let (admin, connection) = tokio_postgres::connect(pg.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let killed = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'tollgate' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(killed.len(), 4, "the store's 4 connections");

    // Each dead connection may fail the one call that finds it; then it is replaced.
    let mut failures = 0;
    for i in 0..16u32 {
        let (result, took) = timed(&store, &i.to_be_bytes()).await;
        assert!(took <= TIMEOUT + SLACK, "took {took:?}");
        failures += u32::from(result.is_err());
    }
    assert!(failures <= 4, "{failures} failed calls");
    for i in 0..16u32 {
        assert!(
            timed(&store, &i.to_be_bytes()).await.0.unwrap(),
            "recovered"
        );
    }
    // The probe opens again every connection that is gone; none is opened twice.
    open_all(&store).await;
    let count: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tollgate'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 4, "no connection leaked");
}
