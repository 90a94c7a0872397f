//! PostgreSQL's port of the rebase (`<table>_rebase`, in numeric) against `Gcra::rebase_in`: a
//! bucket written under one policy's numbers, read under another's by each statement that reads
//! token buckets (the peek, `<table>_decide`, `<table>_decide_any`, the settlement), is written
//! back with the tat the pure function gives and the new numbers.
#![cfg(feature = "postgres")]

use crate::rebase_ports::{MICROSECOND, fresh_key, policies};

use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use tokio_postgres::NoTls;
use tollgate::algorithm::gcra::{Gcra, MAX_DEBT};
use tollgate::store::settle::{Adjustment, Settle};
use tollgate::{Check, Clock, ManualClock, Nanos, Policy, PostgresStore, Store};
use tollgate_testkit::TestPostgres;

fn postgres() -> &'static TestPostgres {
    static PG: OnceLock<TestPostgres> = OnceLock::new();
    PG.get_or_init(|| TestPostgres::start().expect("start PostgreSQL"))
}

/// `d` in whole microseconds, as PostgreSQL's `bigint` columns hold them.
fn micros(d: Duration) -> i64 {
    i64::try_from(crate::rebase_ports::micros(d)).expect("below 2^63 µs")
}

proptest! {
    // Each case is a few statements.
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_statement_rebases_as_the_pure_function(
        old in policies(),
        new in policies(),
        share in 1u64..=1000,
        statement in 0u8..4,
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let checked = runtime.block_on(async {
            let clock = ManualClock::new(Nanos::new(1_700_000_000_123_456_000));
            let store = PostgresStore::builder(postgres().url())
                .table("rebase")
                .test_clock(clock.clone())
                .cleanup_interval(None)
                .timeout(Duration::from_secs(5))
                .build()
                .await
                .expect("connect");
            if store.supports(&old).is_err() || store.supports(&new).is_err() {
                return None;
            }
            // The schema is made on first use.
            store.ready().await.expect("ready");
            let (client, connection) = tokio_postgres::connect(postgres().url(), NoTls)
                .await
                .expect("connect");
            tokio::spawn(connection);
            let (o, n) = (old.at_resolution(MICROSECOND.as_duration()), new.at_resolution(MICROSECOND.as_duration()));
            let (t, tau) = (micros(o.emission_interval()), micros(o.tolerance()));
            let most = tau.max((2 * tau).min((MAX_DEBT.as_u64() / 1000) as i64));
            let backlog = ((i128::from(most) * i128::from(share) / 1000) as i64).max(1);
            let now = (clock.now().as_u64() / 1000) as i64;
            let key = fresh_key();
            let row = format!("v2:tb:=3:api:{key}");
            client
                .execute(
                    "INSERT INTO tollgate.rebase (key, tat, t, tau) VALUES ($1, $2, $3, $4)",
                    &[&row.as_bytes(), &(now + backlog), &t, &tau],
                )
                .await
                .expect("insert");
            let check = Check::new(new, key.as_bytes(), 0).named("api");
            let other = Check::new(new, key.as_bytes(), 0).named("other");
            let window = Policy::fixed_window(5, Duration::from_secs(1)).unwrap();
            match statement {
                // The peek.
                0 => drop(store.decide(&[check]).await.expect("decided")),
                // `<table>_decide`: two token buckets together.
                1 => drop(store.decide(&[check, other]).await.expect("decided")),
                // `<table>_decide_any`: a window beside it.
                2 => {
                    let beside = Check::new(window, key.as_bytes(), 0).named("w");
                    drop(store.decide(&[check, beside]).await.expect("decided"));
                }
                // The settlement: a refund of nothing.
                _ => drop(
                    store
                        .settle(None, &[(check, Adjustment::Refund(0))])
                        .await
                        .expect("settled"),
                ),
            }
            let expected = Gcra::new(&n).rebase_in(
                &Gcra::new(&o),
                Nanos::new((now + backlog) as u64 * 1000),
                Nanos::new(now as u64 * 1000),
                MICROSECOND,
            );
            let stored = client
                .query_one(
                    "SELECT tat, t, tau FROM tollgate.rebase WHERE key = $1",
                    &[&row.as_bytes()],
                )
                .await
                .expect("the row");
            let got: (i64, i64, i64) = (stored.get(0), stored.get(1), stored.get(2));
            let want = (
                (expected.as_u64() / 1000) as i64,
                micros(n.emission_interval()),
                micros(n.tolerance()),
            );
            Some((got, want))
        });
        if let Some((got, want)) = checked {
            prop_assert_eq!(got, want);
        }
    }
}
