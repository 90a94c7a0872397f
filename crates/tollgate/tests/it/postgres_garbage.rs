//! Garbage or out-of-range state in a bucket's PostgreSQL row (issue 27, point 6): reported as
//! incompatible, never decided on nor read as a full bucket, and the row goes away as idle
//! rows do (the cleanup deletes it; a garbage window's expiry is cut to its policy's).
#![cfg(feature = "postgres")]

use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use tollgate::store::settle::{Adjustment, Once, Settle};
use tollgate::{Check, ErrorKind, Policy, PostgresStore, Store, StoreError};
use tollgate_testkit::TestPostgres;

async fn connect(pg: &TestPostgres) -> Client {
    let (client, connection) = tokio_postgres::connect(pg.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

fn incompatible<T: std::fmt::Debug>(result: Result<T, StoreError>, key: &str) {
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    assert!(error.to_string().contains(key), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_token_bucket_row_is_incompatible_and_cleaned_up() {
    let pg = TestPostgres::start().unwrap();
    let store = PostgresStore::builder(pg.url())
        .table("garbage")
        .cleanup_interval(None)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let client = connect(&pg).await;
    let policy = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    let key = "v2:tb:=3:api:alice";
    let alice = |cost| Check::new(policy, b"alice", cost).named("api");
    // Nine quintillion µs: beyond any tat, and arithmetic on it would overflow a bigint.
    for tat in [-5_i64, 9_000_000_000_000_000_000] {
        store.ready().await.unwrap();
        client
            .execute(
                "INSERT INTO tollgate.garbage (key, tat) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET tat = excluded.tat",
                &[&key.as_bytes(), &tat],
            )
            .await
            .unwrap();
        incompatible(store.decide(&[alice(1)]).await, key);
        incompatible(store.decide(&[alice(0)]).await, key);
        let both = [alice(1), Check::new(policy, b"alice", 1).named("other")];
        incompatible(store.decide(&both).await, key);
        let row: i64 = client
            .query_one(
                "SELECT tat FROM tollgate.garbage WHERE key = $1",
                &[&key.as_bytes()],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(row, tat, "never decided on");
        // A refund settles nothing, and its id is not spent.
        let once = Once::new(b"r-1", Duration::from_secs(60));
        let refund = [(alice(0), Adjustment::Refund(1))];
        incompatible(store.settle(Some(once), &refund).await, key);
        // The cleanup deletes it as an idle row; then the key is a new bucket.
        store.cleanup_idle().await.unwrap();
        assert!(store.decide(&[alice(1)]).await.unwrap().allowed());
        store.settle(Some(once), &refund).await.unwrap();
        client
            .batch_execute("DELETE FROM tollgate.garbage_once; DELETE FROM tollgate.garbage")
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_window_row_is_incompatible_and_expires_like_its_window() {
    let pg = TestPostgres::start().unwrap();
    let store = PostgresStore::builder(pg.url())
        .table("garbage")
        .cleanup_interval(None)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    store.ready().await.unwrap();
    let client = connect(&pg).await;
    let minute = Duration::from_secs(60);
    let cases = [
        (
            Policy::fixed_window(5, minute).unwrap(),
            "fw",
            vec![1_i64, 2],
            60,
        ),
        (
            Policy::fixed_window(5, minute).unwrap(),
            "fw",
            vec![1, -2, 3],
            60,
        ),
        (
            Policy::sliding_window_counter(5, minute).unwrap(),
            "sc",
            vec![1, 2, 3],
            120,
        ),
        // Carried counts of no width: never written.
        (
            Policy::sliding_window_counter(5, minute).unwrap(),
            "sc",
            vec![1, 2, 3, 60_000_000, 5, 6, 7, 0],
            120,
        ),
        (
            Policy::sliding_window_log(5, minute).unwrap(),
            "sl",
            vec![1, 2, 3],
            60,
        ),
    ];
    for (policy, kind, state, most_secs) in cases {
        let key = format!("v2:{kind}:=1:w:alice");
        client
            .execute(
                "INSERT INTO tollgate.garbage_windows (key, state, expires)
                 VALUES ($1, $2, 9000000000000000000)
                 ON CONFLICT (key) DO UPDATE SET state = excluded.state, expires = excluded.expires",
                &[&key.as_bytes(), &state],
            )
            .await
            .unwrap();
        let check = Check::new(policy, b"alice", 1).named("w");
        incompatible(store.decide(&[check]).await, &key);
        // A token bucket decided beside it takes nothing.
        let tb = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
        let both = [check, Check::new(tb, b"alice", 5).named("tb")];
        incompatible(store.decide(&both).await, &key);
        let tb_only = [Check::new(tb, b"alice", 5).named("tb")];
        assert!(
            store.decide(&tb_only).await.unwrap().allowed(),
            "nothing taken"
        );
        let row = client
            .query_one(
                "SELECT state, expires - (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
                 FROM tollgate.garbage_windows WHERE key = $1",
                &[&key.as_bytes()],
            )
            .await
            .unwrap();
        let (kept, left): (Vec<i64>, i64) = (row.get(0), row.get(1));
        assert_eq!(kept, state, "never decided on");
        assert!(
            left <= most_secs * 1_000_000,
            "{kind}: expires in {left} µs"
        );
        client
            .batch_execute("DELETE FROM tollgate.garbage_windows; DELETE FROM tollgate.garbage")
            .await
            .unwrap();
    }
}
