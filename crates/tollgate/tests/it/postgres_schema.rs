//! Where and how the PostgreSQL store keeps its buckets: the schema made on first use or by
//! `migrate` (safely from many processes at once), a configurable schema and table, UNLOGGED,
//! and idle rows deleted in batches.
#![cfg(feature = "postgres")]

use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use tollgate::{Check, ManualClock, Nanos, Policy, PostgresStore, Store};
use tollgate_testkit::TestPostgres;

async fn sql(pg: &TestPostgres) -> Client {
    let (client, connection) = tokio_postgres::connect(pg.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_is_made_on_first_use_in_the_configured_place_and_can_be_unlogged() {
    let pg = TestPostgres::start().unwrap();
    let store = PostgresStore::builder(pg.url())
        .schema("limits")
        .table("api_buckets")
        .unlogged(true)
        .build()
        .await
        .unwrap();
    let policy = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    assert!(
        store
            .decide(&[Check::new(policy, b"k", 1)])
            .await
            .unwrap()
            .allowed()
    );

    let client = sql(&pg).await;
    let row = client
        .query_one(
            "SELECT c.relpersistence::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'limits' AND c.relname = 'api_buckets'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "u", "UNLOGGED");
    let rows = client
        .query("SELECT key FROM limits.api_buckets", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let key: Vec<u8> = rows[0].get(0);
    assert!(key.starts_with(b"v2:tb:#5:5:1000000000:") && key.ends_with(b":k"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_is_idempotent_and_safe_from_many_processes_at_once() {
    let pg = TestPostgres::start().unwrap();
    let stores: Vec<PostgresStore> = {
        let mut stores = Vec::new();
        for _ in 0..8 {
            stores.push(
                PostgresStore::builder(pg.url())
                    .table("migrated")
                    .build()
                    .await
                    .unwrap(),
            );
        }
        stores
    };
    let runs: Vec<_> = stores
        .iter()
        .map(|s| {
            let s = s.clone();
            tokio::spawn(async move { s.migrate().await })
        })
        .collect();
    for run in runs {
        run.await
            .unwrap()
            .expect("concurrent migrations all succeed");
    }
    stores[0].migrate().await.expect("and again");

    // A store that may not run DDL works on the migrated schema.
    let no_ddl = PostgresStore::builder(pg.url())
        .table("migrated")
        .create_schema(false)
        .build()
        .await
        .unwrap();
    let policy = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    assert!(
        no_ddl
            .decide(&[Check::new(policy, b"k", 1)])
            .await
            .unwrap()
            .allowed()
    );
}

#[tokio::test]
async fn bad_names_are_refused_before_connecting() {
    let err = PostgresStore::builder("postgres://nowhere.invalid/db")
        .table("buckets; DROP TABLE users")
        .build()
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("table name"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_rows_are_deleted_in_batches_and_busy_ones_kept() {
    let pg = TestPostgres::start().unwrap();
    let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
    let store = PostgresStore::builder(pg.url())
        .table("idle")
        .test_clock(clock.clone())
        .cleanup_interval(None)
        .cleanup_batch(7)
        .build()
        .await
        .unwrap();
    let fast = Policy::token_bucket(2, 2, Duration::from_secs(1)).unwrap();
    let slow = Policy::token_bucket(2, 2, Duration::from_secs(3600)).unwrap();
    for i in 0..50u32 {
        store
            .decide(&[Check::new(fast, &i.to_be_bytes(), 1)])
            .await
            .unwrap();
    }
    store.decide(&[Check::new(slow, b"busy", 2)]).await.unwrap();
    assert_eq!(
        store.cleanup_idle().await.unwrap(),
        0,
        "nothing is full yet"
    );

    clock.advance(Duration::from_millis(500));
    assert_eq!(
        store.cleanup_idle().await.unwrap(),
        0,
        "full again, but not for a minute: a busy fast bucket is not churned"
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        store.cleanup_idle().await.unwrap(),
        50,
        "every fast bucket has been full for a minute"
    );
    let client = sql(&pg).await;
    let left: i64 = client
        .query_one("SELECT count(*) FROM tollgate.idle", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 1, "the busy bucket stays");
    // A deleted row is a full bucket.
    let v = store
        .decide(&[Check::new(fast, &0u32.to_be_bytes(), 2)])
        .await
        .unwrap();
    assert!(v.allowed());
    let v = store.decide(&[Check::new(slow, b"busy", 1)]).await.unwrap();
    assert!(!v.allowed(), "the busy bucket kept its state");
}
