//! A store that answers what this program does not understand is reported as such, never
//! mistaken for an outage that fail-open hides; and builders refuse bad input with an error
//! instead of panicking.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::{
    Check, ErrorKind, MemoryStore, Policy, PostgresStore, RedisStore, Store, StoreError,
};
use tollgate_testkit::{TestPostgres, TestRedis, redis_cmd};

/// Another program wrote a string where a sliding log keeps its list: `WRONGTYPE` inside the
/// script. Today's code called that "unavailable", and fail-open let every request through
/// with nothing said.
#[tokio::test]
async fn a_key_of_another_type_is_incompatible_counted_and_fails_readiness() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    redis_cmd(
        redis.port(),
        &[b"SET", b"tollgate:v3:{alice}:sl:=log", b"not a list"],
    )
    .unwrap();
    let log = Policy::sliding_window_log(5, Duration::from_secs(60)).unwrap();
    let check = [Check::new(log, b"alice", 1).named("log")];
    let error = store.decide(&check).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    assert!(!error.is_transient());
    assert!(error.to_string().contains("WRONGTYPE"), "{error}");

    let seen = Arc::new(AtomicUsize::new(0));
    let hook = Arc::clone(&seen);
    let guarded = Guarded::new(store, FailPolicy::Allow)
        .unready_for(Duration::from_millis(300))
        .on_incompatible(move |_| {
            hook.fetch_add(1, Ordering::Relaxed);
        });
    // Fail-open still answers the request...
    assert!(guarded.decide(&check).await.unwrap().allowed());
    // ...but says so: counted apart, handed to the hook, and readiness fails with the reason.
    assert_eq!(guarded.stats().incompatible(), 1);
    assert_eq!(guarded.stats().store_errors(), 0);
    assert_eq!(seen.load(Ordering::Relaxed), 1);
    let ready = guarded.ready().await.unwrap_err();
    assert!(ready.to_string().contains("WRONGTYPE"), "{ready}");
    // A decision that succeeds clears readiness.
    let fine = [Check::new(log, b"bob", 1).named("log")];
    assert!(guarded.decide(&fine).await.unwrap().allowed());
    guarded.ready().await.unwrap();
    // So does a quiet spell: an instance without traffic is ready again once the store is
    // fixed, without a decision to prove it.
    let answer = guarded.decide(&check).await.unwrap();
    assert!(answer.by_fail_policy(), "the fail policy answered");
    guarded.ready().await.unwrap_err();
    tokio::time::sleep(Duration::from_millis(350)).await;
    guarded.ready().await.unwrap();
}

/// A Redis that is down is transient, as before.
#[tokio::test]
async fn a_redis_that_is_down_is_transient() {
    let store = RedisStore::builder("redis://127.0.0.1:1")
        .timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let policy = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    let error = store
        .decide(&[Check::new(policy, b"k", 1)])
        .await
        .unwrap_err();
    assert!(error.is_transient(), "{error}");
}

/// A database without tollgate's table, which the store may not create (its role runs no DDL
/// and `tollgate migrate` was not run): a misconfiguration, not an outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_schema_the_store_may_not_create_is_incompatible() {
    let pg = TestPostgres::start().unwrap();
    let store = PostgresStore::builder(pg.url())
        .schema("absent")
        .create_schema(false)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let policy = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    let error = store
        .decide(&[Check::new(policy, b"k", 1)])
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    assert!(error.to_string().contains("42P01"), "{error}");
}

/// What a store can never decide is found before any request, naming the field.
#[tokio::test]
async fn policies_beyond_a_store_are_refused_by_field() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let long = Policy::token_bucket(1, 1, Duration::from_millis(4_550_000_000_000)).unwrap();
    assert_eq!(store.supports(&long).unwrap_err().field(), "period");
    // A burst refilled at one a second for 144 years: within `Policy`, beyond 2^52 µs.
    let slow = Policy::token_bucket(4_550_000_000, 1, Duration::from_secs(1)).unwrap();
    assert_eq!(store.supports(&slow).unwrap_err().field(), "capacity");
    let fine = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
    store.supports(&fine).unwrap();
    assert!(MemoryStore::new().supports(&long).is_ok());
}

#[tokio::test]
async fn builders_refuse_bad_input_instead_of_panicking() {
    let empty: [&str; 0] = [];
    let error = RedisStore::builder("")
        .cluster(empty)
        .build()
        .await
        .err()
        .expect("no URL is an error");
    assert!(matches!(error, StoreError::Config(_)), "{error}");
    let error = RedisStore::connect("not a url").await.err().expect("error");
    assert!(matches!(error, StoreError::Config(_)), "{error}");
    // Shards far beyond reason are brought into range, not allocated (or overflowed).
    let store = MemoryStore::builder().shards(usize::MAX).build();
    let policy = Policy::token_bucket(1, 1, Duration::from_secs(1)).unwrap();
    assert!(store.check(&policy, b"k", 1).unwrap().allowed());
}

#[test]
fn the_postgres_builder_outside_a_runtime_is_an_error() {
    let build = PostgresStore::builder("postgres://127.0.0.1:1/x").build();
    // Polled without a Tokio runtime: the builder must say so, not panic in `tokio::spawn`.
    let error = futures_lite_block_on(build).err().expect("an error");
    assert!(matches!(error, StoreError::Config(_)), "{error}");
}

/// Polls `future` to completion on this thread, with no runtime around it.
fn futures_lite_block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// Servers of two layouts on one store would keep separate buckets: readiness says so.
#[tokio::test]
async fn another_layout_in_redis_fails_readiness() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    store.ready().await.unwrap();
    let layout = redis_cmd(redis.port(), &[b"GET", b"tollgate:layout"]).unwrap();
    assert_eq!(layout.as_str(), Some("v3"), "{layout:?}");
    // A server of the previous layout (v2: a token bucket's tat without its numbers) got there
    // first.
    redis_cmd(redis.port(), &[b"SET", b"tollgate:layout", b"v2"]).unwrap();
    let error = store.ready().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Incompatible);
    assert!(error.to_string().contains("\"v2\""), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_layout_in_postgres_fails_readiness_until_migrated() {
    let pg = TestPostgres::start().unwrap();
    let store = PostgresStore::builder(pg.url())
        .table("layout")
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    store.ready().await.unwrap();
    let (client, connection) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    // The table as the previous layout (v2) made it: no numbers beside the tat.
    client
        .batch_execute(
            "ALTER TABLE tollgate.layout DROP COLUMN t, DROP COLUMN tau;
             COMMENT ON TABLE tollgate.layout IS 'tollgate layout v2'",
        )
        .await
        .unwrap();
    let error = store.ready().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Incompatible);
    assert!(error.to_string().contains("layout v2"), "{error}");
    store.migrate().await.unwrap();
    store.ready().await.unwrap();
    // Migrated in place: the numbers are back beside the tat, and decisions go on.
    let policy = Policy::per_second(2).unwrap();
    let check = [Check::new(policy, b"k", 1).named("api")];
    assert!(store.decide(&check).await.unwrap().allowed());
}
