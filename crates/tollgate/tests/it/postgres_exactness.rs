//! The PostgreSQL store under real concurrency: exact bounds on one hot key at READ COMMITTED
//! (row lock, and coalesced) and at SERIALIZABLE (conflicts retried), no errors when first
//! calls race on an empty table, the configured outcome when retries run out, and a timeout
//! too long to add to the time, which is one that never comes.
#![cfg(feature = "postgres")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::store::postgres::{GiveUp, Isolation, Retry};
use tollgate::{Check, Clock, MonotonicClock, Nanos, Policy, PostgresStore, Store};
use tollgate_testkit::TestPostgres;

fn ten_per_second() -> Policy {
    Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap()
}

async fn store(
    pg: &TestPostgres,
    table: &str,
    coalesce: bool,
    isolation: Isolation,
) -> PostgresStore {
    PostgresStore::builder(pg.url())
        .table(table)
        .coalesce(coalesce)
        .deny_cache(coalesce)
        .isolation(isolation)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("configure the store")
}

/// 64 tasks hammer one key for 3 s of real time; returns (allowed, errors).
async fn hammer(store: &PostgresStore, key: &[u8]) -> (u64, u64) {
    let clock = MonotonicClock::new();
    let deadline = clock.now() + Nanos::new(3_000_000_000);
    let allowed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (store, key) = (store.clone(), key.to_vec());
            let (allowed, errors) = (allowed.clone(), errors.clone());
            tokio::spawn(async move {
                while clock.now() < deadline {
                    match store.decide(&[Check::new(ten_per_second(), &key, 1)]).await {
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
    (
        allowed.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hot_key_at_read_committed_allows_38_to_40_in_3_seconds() {
    let pg = TestPostgres::start().unwrap();
    for coalesce in [false, true] {
        let store = store(
            &pg,
            &format!("exact_rc_{coalesce}"),
            coalesce,
            Isolation::ReadCommitted,
        )
        .await;
        let (allowed, errors) = hammer(&store, b"hot").await;
        assert_eq!(
            errors, 0,
            "coalesce {coalesce}: READ COMMITTED needs no retries"
        );
        assert!(
            (38..=40).contains(&allowed),
            "coalesce {coalesce}: allowed {allowed}"
        );
        assert_eq!(store.stats().retries(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hot_key_at_serializable_stays_exact_and_conflicts_only_uncoalesced() {
    let pg = TestPostgres::start().unwrap();
    for coalesce in [false, true] {
        let store = store(
            &pg,
            &format!("exact_ser_{coalesce}"),
            coalesce,
            Isolation::Serializable,
        )
        .await;
        // Under a loaded scheduler 64 uncoalesced callers may, by chance, never overlap on the
        // row in one run: up to three runs, each on a fresh key, are given to show a conflict.
        let runs = if coalesce { 1 } else { 3 };
        for run in 0..runs {
            let key = format!("hot{run}");
            let (allowed, errors) = hammer(&store, key.as_bytes()).await;
            assert!(allowed <= 40, "coalesce {coalesce}: allowed {allowed}");
            assert!(
                allowed >= 38,
                "coalesce {coalesce}: allowed {allowed} ({errors} errors)"
            );
            if coalesce {
                // The store's calls in flight never share a row: they follow each other.
                let retries = store.stats().retries();
                assert_eq!((retries, errors), (0, 0), "coalesced calls conflicted");
            } else if store.stats().retries() > 0 {
                break;
            }
        }
        if !coalesce {
            assert!(
                store.stats().retries() > 0,
                "64 callers on one row at SERIALIZABLE, each its own transaction, must conflict"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_that_run_out_answer_as_configured() {
    let pg = TestPostgres::start().unwrap();
    for give_up in [GiveUp::Unavailable, GiveUp::Deny] {
        let store = PostgresStore::builder(pg.url())
            .table(format!("give_up_{}", give_up == GiveUp::Deny))
            .coalesce(false)
            .deny_cache(false)
            .isolation(Isolation::Serializable)
            .retry(Retry::default().max_attempts(1).give_up(give_up))
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        let policy = Policy::token_bucket(1_000_000, 1_000_000, Duration::from_secs(1)).unwrap();
        // Bursts of 640 contended calls until one conflicts: on a loaded machine a burst can
        // happen to run its transactions one after the other.
        let mut outcomes = Vec::new();
        for _ in 0..10 {
            let tasks: Vec<_> = (0..32)
                .map(|_| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let mut outcomes = Vec::new();
                        for _ in 0..20 {
                            let check = [Check::new(policy, b"contended", 1)];
                            outcomes.push(store.decide(&check).await.map(|v| v.allowed()));
                        }
                        outcomes
                    })
                })
                .collect();
            for task in tasks {
                outcomes.extend(task.await.unwrap());
            }
            if store.stats().gave_up() > 0 {
                break;
            }
        }
        let gave_up = store.stats().gave_up();
        assert!(
            gave_up > 0,
            "{give_up:?}: no conflict in {} contended calls",
            outcomes.len()
        );
        let (errors, denials) = (
            outcomes.iter().filter(|o| o.is_err()).count() as u64,
            outcomes.iter().filter(|o| matches!(o, Ok(false))).count() as u64,
        );
        match give_up {
            GiveUp::Unavailable => {
                assert_eq!((errors, denials), (gave_up, 0));
                assert!(outcomes.iter().flatten().count() > 0);
                let error = outcomes.into_iter().find_map(Result::err).unwrap();
                assert!(error.is_transient(), "{error}");
                // What the server said, not tokio-postgres's bare "db error".
                assert!(error.to_string().contains("SQLSTATE 40001"), "{error}");
            }
            // The bucket never runs dry: every denial is a give-up.
            GiveUp::Deny => assert_eq!((errors, denials), (0, gave_up)),
            other => panic!("no expectation written for {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_calls_on_an_empty_table_never_fail() {
    let pg = TestPostgres::start().unwrap();
    let store = store(&pg, "first_calls", false, Isolation::ReadCommitted).await;
    // 64 first calls on one new key, and 64 on 64 new keys, all at once.
    let clock = MonotonicClock::new();
    let start = clock.now();
    let calls: Vec<_> = (0..128u32)
        .map(|i| {
            let store = store.clone();
            let key = if i < 64 {
                b"new".to_vec()
            } else {
                i.to_be_bytes().to_vec()
            };
            tokio::spawn(
                async move { store.decide(&[Check::new(ten_per_second(), &key, 1)]).await },
            )
        })
        .collect();
    let mut allowed_on_one_key = 0;
    for (i, call) in calls.into_iter().enumerate() {
        let verdict = call
            .await
            .unwrap()
            .expect("no duplicate-key or other error");
        if i < 64 && verdict.allowed() {
            allowed_on_one_key += 1;
        } else if i >= 64 {
            assert!(verdict.allowed());
        }
    }
    // The burst, plus at most what refilled (10/s) while they ran.
    let refilled = (clock.now() - start).as_u64().div_ceil(100_000_000);
    assert!(
        (10..=10 + refilled).contains(&allowed_on_one_key),
        "{allowed_on_one_key} allowed, {refilled} refilled"
    );
}

/// `Duration::MAX` as the timeout: decisions are made (it panicked computing the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_past_the_end_of_time_never_comes() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let store = PostgresStore::builder(pg.url())
        .table("forever")
        .timeout(Duration::MAX)
        .build()
        .await
        .unwrap();
    let check = [Check::new(ten_per_second(), b"k", 1)];
    assert!(store.decide(&check).await.unwrap().allowed());
}

/// Concurrent checks of many keys share calls, and each key is still decided exactly: 64
/// users, a budget of 5 each, 8 checks each, all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_share_calls_and_each_gets_its_own_budget() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    // No deny cache: every decision reaches the database, so statements count the batching.
    let store = PostgresStore::builder(pg.url())
        .table("many_keys")
        .deny_cache(false)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    store.ready().await.unwrap();
    let policy = Policy::token_bucket(5, 1, Duration::from_secs(3600)).unwrap();
    let before = store.stats().statements();
    let users: Vec<_> = (0..64)
        .map(|user| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = format!("user-{user}");
                let checks: Vec<_> = (0..8)
                    .map(|_| {
                        let (store, key) = (store.clone(), key.clone());
                        tokio::spawn(async move {
                            let check = [Check::new(policy, key.as_bytes(), 1)];
                            store.decide(&check).await.unwrap().allowed()
                        })
                    })
                    .collect();
                let mut allowed = 0;
                for check in checks {
                    allowed += u64::from(check.await.unwrap());
                }
                allowed
            })
        })
        .collect();
    for user in users {
        assert_eq!(user.await.unwrap(), 5, "each user gets exactly its 5");
    }
    let statements = store.stats().statements() - before;
    assert!(
        statements <= 512 / 4,
        "512 decisions in {statements} statements: they were not batched"
    );
}

/// Concurrent single checks of distinct keys are decided by one set-based upsert: each answer
/// is its own key's, allowed then denied with the time to the next token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_of_distinct_keys_answer_each_key_exactly() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let store = PostgresStore::builder(pg.url())
        .table("distinct_keys")
        .deny_cache(false)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    store.ready().await.unwrap();
    let hourly = Policy::token_bucket(1, 1, Duration::from_secs(3600)).unwrap();
    let round = || async {
        let tasks: Vec<_> = (0..48u32)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let key = i.to_be_bytes();
                    store
                        .decide(&[Check::new(hourly, &key, 1)])
                        .await
                        .unwrap()
                        .decisions()[0]
                })
            })
            .collect();
        let mut decisions = Vec::new();
        for task in tasks {
            decisions.push(task.await.unwrap());
        }
        decisions
    };
    let before = store.stats().statements();
    for d in round().await {
        assert!(d.allowed() && d.remaining() == 0, "{d:?}");
    }
    for d in round().await {
        assert!(!d.allowed() && d.remaining() == 0, "{d:?}");
        let hour = Duration::from_secs(3600);
        assert!(
            d.retry_after() <= hour && d.retry_after() > hour - Duration::from_secs(60),
            "{d:?}"
        );
    }
    let statements = store.stats().statements() - before;
    assert!(
        statements < 96 / 2,
        "96 decisions in {statements} statements"
    );
}

/// `url` with its sessions counting calls of functions (`track_functions`).
fn counting_calls(url: &str) -> String {
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}options=-c%20track_functions%3Dall")
}

/// Polls `sql` (one bigint) until it reaches `want`, for up to 10 s.
async fn wait_for(client: &tokio_postgres::Client, sql: &str, want: i64) -> i64 {
    let mut got = 0;
    for _ in 0..200 {
        got = client.query_one(sql, &[]).await.unwrap().get(0);
        if got >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    got
}

// One thread: the order in which the store's callers queue is known.
#[tokio::test(flavor = "current_thread")]
async fn under_serializable_a_set_that_conflicts_is_decided_by_the_function() {
    let pg = TestPostgres::start().unwrap();
    let (sql, connection) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let store = PostgresStore::builder(counting_calls(pg.url()))
        .table("fallback")
        .isolation(Isolation::Serializable)
        .connections(2)
        .deny_cache(false)
        .cleanup_interval(None)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let policy = Policy::token_bucket(1000, 1000, Duration::from_secs(1)).unwrap();
    let decide = |key: &'static [u8]| {
        let store = store.clone();
        async move { store.decide(&[Check::new(policy, key, 1)]).await }
    };
    for key in [&b"x"[..], b"k", b"y"] {
        assert!(decide(key).await.unwrap().allowed());
    }

    // What an earlier run on an external server counted already.
    let calls = "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions \
                 WHERE funcname = 'fallback_decide'";
    let before: i64 = sql.query_one(calls, &[]).await.unwrap().get(0);

    // Another transaction changes every row and holds them.
    let (other, connection) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    other
        .batch_execute("BEGIN; UPDATE tollgate.fallback SET tat = tat")
        .await
        .unwrap();
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE application_name = 'tollgate' AND wait_event_type = 'Lock'";
    // x's single upsert waits for its row, and keeps the store's queue busy...
    let a = tokio::spawn(decide(b"x"));
    assert_eq!(wait_for(&sql, waiting, 1).await, 1);
    // ...so k and y queue, and share the next call: the set-based upsert, which waits too.
    let b = tokio::spawn(decide(b"k"));
    let c = tokio::spawn(decide(b"y"));
    assert_eq!(wait_for(&sql, waiting, 2).await, 2);
    // Committed after their snapshots: each waiting statement fails to serialize.
    other.batch_execute("COMMIT").await.unwrap();

    for task in [a, b, c] {
        assert!(task.await.unwrap().unwrap().allowed());
    }
    // A server process reports its counts when a transaction ends a second or more after its
    // last report (else ten seconds later): the store's probe gives each one such a transaction.
    let mut counted: i64 = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        store.ready().await.unwrap();
        counted = sql.query_one(calls, &[]).await.unwrap().get(0);
        if counted > before {
            break;
        }
    }
    assert_eq!(
        counted - before,
        1,
        "the set was decided again by the decide function"
    );
    let stats = store.stats();
    assert_eq!(stats.gave_up(), 0);
    // x's statement retried once; the set once, as a call of the function.
    assert_eq!(stats.retries(), 2);
}
