//! Settings that can never work are [`StoreError::Config`] in plain words, found when the store
//! is built (it tries one connection), not an outage the fail policy would hide, nor a
//! disagreement between versions.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::time::Duration;

use tollgate::{ErrorKind, PostgresStore, RedisStore, Store};
use tollgate_testkit::{TestPostgres, TestRedis};

#[tokio::test]
async fn postgres_no_such_database_or_role_is_a_config_error() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    for (url, says) in [
        (
            format!("postgres://postgres@127.0.0.1:{}/nosuchdb", pg.port()),
            "database \"nosuchdb\" does not exist",
        ),
        (
            format!("postgres://nobody@127.0.0.1:{}/postgres", pg.port()),
            "role \"nobody\" does not exist",
        ),
    ] {
        let refused = PostgresStore::builder(url)
            .timeout(Duration::from_secs(2))
            .build()
            .await;
        let Err(error) = refused else {
            panic!("built on settings that can never work");
        };
        assert_eq!(error.kind(), ErrorKind::Config, "{error}");
        assert!(error.to_string().contains(says), "{error}");
    }
}

#[tokio::test]
async fn postgres_url_without_host_or_user_is_refused_when_built() {
    for url in [
        "postgres://",
        "postgres://127.0.0.1:1/db",
        "host=127.0.0.1 port=x",
    ] {
        let error = PostgresStore::builder(url).build().await.err().unwrap();
        assert_eq!(error.kind(), ErrorKind::Config, "{url}: {error}");
    }
}

#[tokio::test]
async fn redis_db_index_out_of_range_is_a_config_error_and_down_is_not() {
    let redis = TestRedis::start().expect("start redis-server");
    let refused = RedisStore::builder(format!("redis://127.0.0.1:{}/99", redis.port()))
        .timeout(Duration::from_secs(1))
        .build()
        .await;
    let Err(error) = refused else {
        panic!("built on a DB index the server does not have");
    };
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(
        error.to_string().contains("DB index is out of range"),
        "{error}"
    );

    // A Redis that is down builds: it may come back.
    let down = RedisStore::builder("redis://127.0.0.1:1/0")
        .timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let error = down.ready().await.unwrap_err();
    assert!(error.is_transient(), "{error}");
}

/// Issue 44, point 3: a host name that does not resolve used to build, and every decision then
/// failed as an outage (served with the fail policy); of several seed nodes, when none resolves.
#[tokio::test]
async fn redis_host_names_that_do_not_resolve_are_refused_when_built() {
    let Err(error) = RedisStore::builder("redis://nonexistent.invalid:6379")
        .build()
        .await
    else {
        panic!("built on a host name that does not resolve");
    };
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(
        error.to_string().contains("\"nonexistent.invalid\""),
        "{error}"
    );
    let Err(error) = RedisStore::builder("redis://a.invalid:6379")
        .cluster(["redis://a.invalid:6379", "redis://b.invalid:6379"])
        .build()
        .await
    else {
        panic!("built on seed nodes none of which resolves");
    };
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(
        error
            .to_string()
            .contains("none of the Redis host names resolves"),
        "{error}"
    );
}
