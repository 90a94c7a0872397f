//! The PostgreSQL store on a primary and its streaming standby, both in the URL with
//! `target_session_attrs=read-write`: the primary killed mid-load and the standby promoted.
//! The store follows the promotion and every call meanwhile comes back within its timeout (the
//! fail policy's to answer). With the standby made to lag on purpose (its WAL sender stopped
//! while grants go on), an asynchronous standby grants tokens twice and a synchronous one none.
//! A statement whose reply was lost with its connection is never sent again.
#![cfg(feature = "postgres")]

use crate::failover_load::Load;
use crate::faults;

use std::time::Duration;

use faults::recovery;
use tollgate::{Check, Policy, PostgresStore, Store};
use tollgate_testkit::{Replication, StallProxy, TestPostgres, TestPostgresReplica};

const TIMEOUT: Duration = Duration::from_millis(200);
/// What a bounded call may take beyond its timeout on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1_000);
/// Workers deciding at once.
const WORKERS: u32 = 16;
/// How far behind the primary the standby is made to fall before the primary dies.
const LAG: Duration = Duration::from_millis(300);

/// `capacity` tokens that do not come back within a test (one a day).
fn no_refill(capacity: u64) -> Policy {
    Policy::token_bucket(capacity, 1, Duration::from_secs(86_400)).unwrap()
}

async fn build_store(url: &str, timeout: Duration, synchronous_commit: bool) -> PostgresStore {
    PostgresStore::builder(url)
        .timeout(timeout)
        .synchronous_commit(synchronous_commit)
        // Every decision to the database (a drain's denials are no cache's to answer).
        .deny_cache(false)
        .build()
        .await
        .unwrap()
}

/// Kills the primary `lag` behind (none: at once) and promotes the standby, off the runtime's
/// workers; returns the pair and the tokens granted when the primary was gone.
async fn fail_over(
    pair: TestPostgresReplica,
    lag: Option<Duration>,
    load: &Load,
) -> (TestPostgresReplica, u64) {
    let counts = std::sync::Arc::clone(&load.counts);
    tokio::task::spawn_blocking(move || {
        let mut pair = pair;
        match lag {
            Some(lag) => pair.kill_primary_behind(lag).unwrap(),
            None => pair.kill_primary().unwrap(),
        }
        let at_kill = counts.allowed.load(std::sync::atomic::Ordering::Relaxed);
        pair.promote().unwrap();
        (pair, at_kill)
    })
    .await
    .unwrap()
}

/// The tokens left in `key`'s bucket of `policy`, taken all: the largest costs granted, halving
/// the cost on each denial (a denied cost takes nothing).
async fn drain(store: &PostgresStore, policy: Policy, key: &[u8]) -> u64 {
    let (mut cost, mut taken) = (policy.capacity(), 0);
    while cost > 0 {
        match store.decide(&[Check::new(policy, key, cost)]).await {
            Ok(v) if v.allowed() => taken += cost,
            Ok(_) => cost /= 2,
            Err(e) => panic!("draining the promoted standby: {e:?}"),
        }
    }
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_is_followed_and_decisions_are_exact_again() {
    let pair = TestPostgresReplica::start(Replication::Asynchronous).unwrap();
    let store = build_store(&pair.url(), TIMEOUT, false).await;
    let load = Load::start(&store, WORKERS, faults::policy(), b"busy");
    load.until_answered(200).await;
    let (pair, _) = fail_over(pair, None, &load).await;
    let took = recovery(&store, Duration::from_secs(20)).await;
    assert!(took <= Duration::from_secs(10), "followed after {took:?}");
    // Decisions go on after the switch.
    let after = load.allowed();
    load.until_answered(after + 200).await;
    let (_, failed, slowest) = load.stop().await;
    assert!(failed > 0, "the switch was answered by the fail policy");
    assert!(slowest <= TIMEOUT + SLACK, "a call took {slowest:?}");
    // Exact again: a fresh key of 50 grants 50 at most to many workers at once, and every
    // token is accounted for (a call that timed out may have taken one). A store with a longer
    // timeout, so that a loaded machine's slow call is not a failure.
    let patient = build_store(&pair.url(), Duration::from_secs(5), false).await;
    let load = Load::start(&patient, WORKERS, no_refill(50), b"fresh");
    load.until_answered(50).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (allowed, failed, _) = load.stop().await;
    assert!(
        allowed <= 50 && 50 <= allowed + failed,
        "{allowed} granted, {failed} failed"
    );
    drop(pair);
}

/// A failover with the standby `LAG` behind: tokens granted by the workers, calls failed, tokens
/// granted when the primary was gone, and tokens left on the promoted standby.
async fn lagged_failover(replication: Replication, capacity: u64) -> (u64, u64, u64, u64) {
    let pair = TestPostgresReplica::start(replication).unwrap();
    // The store's sessions wait for the standby only if they commit synchronously.
    let synchronous = replication == Replication::Synchronous;
    let store = build_store(&pair.url(), TIMEOUT, synchronous).await;
    let policy = no_refill(capacity);
    let load = Load::start(&store, WORKERS, policy, b"hot");
    load.until_answered(100).await;
    let (pair, at_kill) = fail_over(pair, Some(LAG), &load).await;
    recovery(&store, Duration::from_secs(20)).await;
    let (allowed, failed, slowest) = load.stop().await;
    assert!(slowest <= TIMEOUT + SLACK, "a call took {slowest:?}");
    assert!(
        at_kill < capacity,
        "the bucket ran dry before the primary died"
    );
    let left = drain(&store, policy, b"hot").await;
    drop(pair);
    (allowed, failed, at_kill, left)
}

/// The control: with an asynchronous standby behind, the commits it never got are tokens the
/// promoted standby grants again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_standby_behind_grants_tokens_twice() {
    const CAPACITY: u64 = 50_000;
    let (allowed, failed, _, left) = lagged_failover(Replication::Asynchronous, CAPACITY).await;
    assert!(
        allowed + left > CAPACITY,
        "{allowed} granted and {left} left of {CAPACITY} ({failed} failed): nothing was lost, \
         the lag was not made"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_synchronous_standby_a_failover_grants_no_token_twice() {
    const CAPACITY: u64 = 50_000;
    let (allowed, failed, at_kill, left) =
        lagged_failover(Replication::Synchronous, CAPACITY).await;
    // Every grant the primary answered reached the standby before its answer: the bucket the
    // standby took over had them all.
    assert!(
        allowed + left <= CAPACITY,
        "{allowed} granted and {left} left of {CAPACITY}: tokens granted twice"
    );
    // And none went missing but for calls that failed (a commit that reached the standby and
    // whose answer died with the primary, or one that timed out waiting for it).
    assert!(
        allowed + failed + left >= CAPACITY,
        "{allowed} granted, {failed} failed, {left} left of {CAPACITY}"
    );
    assert!(at_kill > 0, "no token granted before the primary died");
}

/// A statement whose commit was done and whose reply was lost with its connection returns an
/// error and is not sent again: the token is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_reply_is_lost_is_never_sent_again() {
    let pg = TestPostgres::start().unwrap();
    let proxy = StallProxy::start(([127, 0, 0, 1], pg.port()).into()).unwrap();
    let proxied_url = pg
        .url()
        .replace(&format!(":{}/", pg.port()), &format!(":{}/", proxy.port()));
    assert_ne!(proxied_url, pg.url());
    let proxied = build_store(&proxied_url, Duration::from_secs(10), false).await;
    let direct = build_store(pg.url(), Duration::from_secs(10), false).await;
    let policy = no_refill(5);
    // Connections made, schema there.
    assert!(
        proxied
            .decide(&[Check::new(policy, b"warm", 1)])
            .await
            .unwrap()
            .allowed()
    );
    let sent = proxied.stats().statements();
    proxy.hold_replies();
    let call = tokio::spawn({
        let proxied = proxied.clone();
        async move { proxied.decide(&[Check::new(policy, b"once", 1)]).await }
    });
    // The statement reaches the server and commits; its reply is held, then cut.
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.cut();
    let answer = call.await.unwrap();
    assert!(answer.is_err(), "the reply was lost: {answer:?}");
    assert_eq!(
        proxied.stats().statements(),
        sent + 1,
        "sent once, never again"
    );
    // Charged exactly once: 4 tokens left (not 5, not 3).
    assert!(
        direct
            .decide(&[Check::new(policy, b"once", 4)])
            .await
            .unwrap()
            .allowed()
    );
    assert!(
        !direct
            .decide(&[Check::new(policy, b"once", 1)])
            .await
            .unwrap()
            .allowed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlogged_table_is_empty_on_the_promoted_standby() {
    let pair = TestPostgresReplica::start(Replication::Synchronous).unwrap();
    let store = PostgresStore::builder(pair.url())
        // Long enough that a loaded machine's slow call (the table made) is not a failure.
        .timeout(Duration::from_secs(5))
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
    let mut pair = pair;
    let pair = tokio::task::spawn_blocking(move || {
        pair.kill_primary().unwrap();
        pair.promote().unwrap();
        pair
    })
    .await
    .unwrap();
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
