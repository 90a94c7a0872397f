//! Builders refuse settings that cannot work (issue 29, point 10): a zero that used to build a
//! store failing every call, a limiter silently off behind the fail policy, or a value clamped
//! without a word. Each is refused at `build()` with a [`StoreError::Config`] that names the
//! setting and says why; the memory store's caps are `NonZeroUsize` (its `compile_fail` doc
//! test shows `max_keys(0)` no longer compiles), and `Guarded::timeout` and
//! `LeasedBuilder::lifetime` take a `NonZeroDuration` (their `compile_fail` doc tests show a
//! zero `Duration` no longer compiles: issue 43, point 5).
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::time::Duration;

use tollgate::store::postgres::Retry;
use tollgate::{PostgresStore, PostgresStoreBuilder, RedisStore, StoreError};

/// The message of the [`StoreError::Config`] that `result` must be.
fn config_error<T>(result: Result<T, StoreError>) -> String {
    match result {
        Err(StoreError::Config(why)) => why,
        Err(other) => panic!("expected a config error, got {other}"),
        Ok(_) => panic!("expected a config error, the store was built"),
    }
}

#[tokio::test]
async fn redis_refuses_a_zero_timeout_batch_or_in_flight() {
    let url = "redis://127.0.0.1:6379";
    for (setting, builder) in [
        ("timeout", RedisStore::builder(url).timeout(Duration::ZERO)),
        ("max_batch", RedisStore::builder(url).max_batch(0)),
        ("max_in_flight", RedisStore::builder(url).max_in_flight(0)),
    ] {
        let why = config_error(builder.build().await);
        assert!(
            why.starts_with(&format!("RedisStoreBuilder::{setting} is 0: ")),
            "{why}"
        );
    }
    let why = config_error(
        RedisStore::builder(url)
            .timeout(Duration::ZERO)
            .build()
            .await,
    );
    assert!(why.contains("nothing would be limited"), "{why}");
}

#[tokio::test]
async fn postgres_refuses_every_zero_setting() {
    let url = "postgres://postgres@127.0.0.1:5432/postgres";
    let builder = || PostgresStore::builder(url);
    let retry = Retry::default().max_attempts(0);
    let cases: [(&str, PostgresStoreBuilder); 7] = [
        ("timeout", builder().timeout(Duration::ZERO)),
        ("connections", builder().connections(0)),
        ("max_batch", builder().max_batch(0)),
        ("max_in_flight", builder().max_in_flight(0)),
        ("retry.max_attempts", builder().retry(retry)),
        ("cleanup_batch", builder().cleanup_batch(0)),
        (
            "cleanup_interval",
            builder().cleanup_interval(Some(Duration::ZERO)),
        ),
    ];
    for (setting, builder) in cases {
        let why = config_error(builder.build().await);
        assert!(
            why.starts_with(&format!("PostgresStoreBuilder::{setting} is 0: ")),
            "{setting}: {why}"
        );
    }
    // Cleanup turned off is not a zero interval.
    builder()
        .cleanup_interval(None)
        .build()
        .await
        .expect("no cleanup is a valid choice");
}

/// `Guarded::timeout` takes a `NonZeroDuration`; the layer, whose builder takes a `Duration`,
/// refuses a zero at `build()` rather than panicking inside it.
#[cfg(feature = "tower")]
#[test]
fn a_layer_refuses_a_zero_timeout_at_build() {
    use tollgate::middleware::{LayerError, TollgateLayer};
    use tollgate::{MemoryStore, Policy};

    let built = TollgateLayer::builder(MemoryStore::new())
        .policy("api", Policy::per_second(10).unwrap())
        .timeout(Duration::ZERO)
        .build();
    assert_eq!(built.err(), Some(LayerError::ZeroTimeout));
}
