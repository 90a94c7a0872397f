//! The conformance suite against a real PostgreSQL (started by the test kit), with time passed
//! into the statements so the store and the model read the same clock: the single upsert, the
//! decide function (several policies, coalesced batches), at READ COMMITTED and SERIALIZABLE.
#![cfg(feature = "postgres")]

use crate::conformance;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use conformance::Harness;
use tollgate::store::postgres::Isolation;
use tollgate::{Clock, ManualClock, Nanos, PostgresStore};
use tollgate_testkit::TestPostgres;

struct Postgres {
    _server: TestPostgres,
    clock: ManualClock,
    store: PostgresStore,
}

/// A table of its own per store, so that tests sharing one TOLLGATE_DATABASE_URL never meet.
fn fresh_table() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "conf_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl Postgres {
    async fn start(coalesce: bool, isolation: Isolation) -> Postgres {
        let server = TestPostgres::start().expect("start PostgreSQL");
        let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
        let store = PostgresStore::builder(server.url())
            .table(fresh_table())
            .test_clock(clock.clone())
            .deny_cache(coalesce)
            .coalesce(coalesce)
            .isolation(isolation)
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("configure the store");
        Postgres {
            _server: server,
            clock,
            store,
        }
    }
}

impl Harness for Postgres {
    type S = PostgresStore;

    fn store(&self) -> &Self::S {
        &self.store
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn resolution(&self) -> Nanos {
        Nanos::new(1000)
    }
}

mod plain {
    use super::*;
    conformance_tests!(Postgres::start(false, Isolation::ReadCommitted).await);
}

mod with_deny_cache_and_coalescing {
    use super::*;
    conformance_tests!(Postgres::start(true, Isolation::ReadCommitted).await);
}

mod serializable {
    use super::*;
    conformance_tests!(Postgres::start(false, Isolation::Serializable).await);
}

/// decide_any's carried counts (issue 44) against sliding_counter.rs: random steps under a
/// named sliding counter whose width changes under it (one server for every case).
#[test]
fn a_counter_whose_width_changes_decides_like_the_model() {
    use proptest::test_runner::{Config, TestRunner};
    use tollgate::{Check, Policy};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let pg = runtime.block_on(Postgres::start(false, Isolation::ReadCommitted));
    let mut runner = TestRunner::new(Config::with_cases(32));
    let case = AtomicU32::new(0);
    runner
        .run(&conformance::changing_counter(), |(policies, steps)| {
            let key = format!("change:{}", case.fetch_add(1, Ordering::Relaxed)).into_bytes();
            let policies: Vec<Policy> = policies
                .iter()
                .map(|&(limit, width)| {
                    Policy::sliding_window_counter(limit, Duration::from_nanos(width)).unwrap()
                })
                .collect();
            runtime.block_on(async {
                let mut d = conformance::Driver::new(&pg);
                for (which, advance, cost) in steps {
                    pg.advance(Duration::from_nanos(advance));
                    let check = Check::new(policies[which], &key, cost).named("c");
                    // The driver asserts that the store and its model agree, errors included.
                    let _ = d.decide(&[check]).await;
                }
            });
            Ok(())
        })
        .unwrap();
}
