//! Leases on a real Redis and a real PostgreSQL: a hot bucket is decided from leased tokens
//! with almost no store calls, nothing is over-granted, what a lease did not spend goes back,
//! and the last tokens are decided one by one.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::store::lease::Leased;
use tollgate::store::settle::Settle;
use tollgate::{
    Check, CheckError, MemoryStore, Policy, PostgresStore, RedisStore, Store, StoreError,
};
use tollgate_testkit::{TestPostgres, TestRedis, command_calls};

/// A large bucket that never refills while a test runs (one token an hour): what the tests
/// count is exact.
fn large() -> Policy {
    Policy::token_bucket(100_000, 1, Duration::from_secs(3600)).unwrap()
}

async fn redis(redis: &TestRedis) -> RedisStore {
    RedisStore::builder(redis.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

async fn postgres(pg: &TestPostgres, table: &str) -> PostgresStore {
    PostgresStore::builder(pg.url())
        .table(table)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

/// Script calls Redis ran so far.
fn script_calls(redis: &TestRedis) -> u64 {
    command_calls(redis.port(), "evalsha").unwrap()
}

/// Leases on `store` once a bucket is decided twice in a lifetime: hot on the slowest machine.
fn eager<S: Settle>(store: S) -> Leased<S> {
    Leased::builder(store)
        .hot(NonZeroU64::new(2).unwrap())
        .build()
}

/// `n` decisions of one token, one after another; returns how many were allowed.
async fn spend(store: &impl Store, check: Check<'_>, n: u64) -> u64 {
    let mut allowed = 0;
    for _ in 0..n {
        allowed += u64::from(store.decide(&[check]).await.unwrap().allowed());
    }
    allowed
}

/// What the bucket holds now, as the store alone says.
async fn remaining(store: &impl Store, check: Check<'_>) -> u64 {
    let peek = store.decide(&[check.with_cost(0)]).await.unwrap();
    peek.decisions()[0].remaining()
}

#[tokio::test]
async fn a_hot_redis_key_is_decided_from_leases_and_what_is_left_goes_back() {
    let server = TestRedis::start().unwrap();
    let plain = redis(&server).await;
    let leased = eager(plain.clone());
    let check = Check::new(large(), b"api", 1).named("api");
    let before = script_calls(&server);
    assert_eq!(spend(&leased, check, 5_000).await, 5_000);
    let calls = script_calls(&server) - before;
    // Without leases: 5,000 calls, one per decision. (A lease follows the demand of its last
    // lifetime, so a slow machine renews more often.)
    assert!(calls <= 250, "{calls} script calls for 5,000 decisions");
    assert!(leased.stats().local_decisions() >= 4_750);
    leased.close().await;
    // Every unspent token went back: the bucket paid for exactly the 5,000 allowed.
    assert_eq!(remaining(&plain, check).await, 100_000 - 5_000);
    assert!(leased.stats().tokens_returned() > 0);
    assert_eq!(leased.stats().tokens_lost(), 0);
}

#[tokio::test]
async fn a_hot_postgres_row_is_decided_from_leases_and_what_is_left_goes_back() {
    let pg = TestPostgres::start().unwrap();
    let plain = postgres(&pg, "lease_hot_row").await;
    let leased = eager(plain.clone());
    let check = Check::new(large(), b"api", 1).named("api");
    assert_eq!(spend(&leased, check, 5_000).await, 5_000);
    let statements = plain.stats().statements();
    assert!(
        statements <= 250,
        "{statements} statements for 5,000 decisions"
    );
    leased.close().await;
    assert_eq!(remaining(&plain, check).await, 100_000 - 5_000);
}

/// Two servers drain one bucket of 1,000 with 16 tasks each until each task is denied; then
/// both give back what they hold. What they allowed plus what is left is the bucket, exactly:
/// nothing over-granted, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_drain_a_bucket_exactly() {
    let server = TestRedis::start().unwrap();
    let plain = redis(&server).await;
    let policy = Policy::token_bucket(1_000, 1, Duration::from_secs(3600)).unwrap();
    let servers: Vec<_> = (0..2).map(|_| Arc::new(eager(plain.clone()))).collect();
    let allowed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..32)
        .map(|task| {
            let (store, allowed) = (Arc::clone(&servers[task % 2]), Arc::clone(&allowed));
            tokio::spawn(async move {
                let check = [Check::new(policy, b"drain", 1).named("drain")];
                while store.decide(&check).await.unwrap().allowed() {
                    allowed.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let leased: u64 = servers.iter().map(|s| s.stats().tokens_leased()).sum();
    assert!(leased > 0, "no lease was taken: the test tests nothing");
    for store in &servers {
        store.close().await;
    }
    let check = Check::new(policy, b"drain", 1).named("drain");
    let left = spend(&plain, check, 1_000).await;
    let allowed = allowed.load(Ordering::Relaxed);
    assert_eq!(allowed + left, 1_000, "allowed {allowed}, left {left}");
}

/// A bucket near empty is never leased: its last tokens are decided by the store one by one.
#[tokio::test]
async fn the_last_tokens_are_never_leased() {
    let server = TestRedis::start().unwrap();
    let plain = redis(&server).await;
    // Hot from its second decision: only the sizing rule keeps it from being leased.
    let leased = eager(plain.clone());
    let policy = Policy::token_bucket(1_000, 1, Duration::from_secs(3600)).unwrap();
    let check = Check::new(policy, b"last", 1).named("last");
    // Spend the bucket down to 15 tokens, then make it hot.
    plain.decide(&[check.with_cost(985)]).await.unwrap();
    let before = script_calls(&server);
    assert_eq!(spend(&leased, check, 100).await, 15);
    assert_eq!(leased.stats().tokens_leased(), 0);
    // One call per decision: the 15 allowed and the 85 denied (the first denial is cached,
    // and every later one answered from that cache).
    let calls = script_calls(&server) - before;
    assert!((16..=100).contains(&calls), "{calls} calls");
}

/// In a decision of several checks, a leased check's tokens go back to its lease when another
/// check denies: the call as a whole took nothing.
#[tokio::test]
async fn a_denied_call_puts_the_leased_tokens_back() {
    let memory = MemoryStore::new();
    let leased = Leased::builder(memory.clone())
        .hot(NonZeroU64::new(2).unwrap())
        .only(|c| c.name() == Some("global"))
        .build();
    let global = Check::new(large(), b"all", 1).named("global");
    // Make the global bucket hot and leased.
    spend(&leased, global, 100).await;
    assert!(leased.stats().tokens_leased() > 0);
    let user = Policy::token_bucket(1, 1, Duration::from_secs(3600)).unwrap();
    let both = [global, Check::new(user, b"alice", 1).named("user")];
    assert!(leased.decide(&both).await.unwrap().allowed());
    let local = leased.stats().local_decisions();
    for _ in 0..10 {
        let verdict = leased.decide(&both).await.unwrap();
        assert!(!verdict.allowed());
    }
    assert!(leased.stats().local_decisions() == local);
    leased.close().await;
    // 101 allowed in all: the ten denied calls took nothing from the global bucket.
    assert_eq!(remaining(&memory, global).await, 100_000 - 101);
}

/// A reset makes the bucket full and forgets the lease held on it: its tokens were paid into
/// the state the reset dropped.
#[tokio::test]
async fn a_reset_forgets_the_lease() {
    let server = TestRedis::start().unwrap();
    let plain = redis(&server).await;
    // No sweep gives the lease back while the test runs, however slow the machine.
    let leased = Leased::builder(plain.clone())
        .hot(NonZeroU64::new(2).unwrap())
        .lifetime(tollgate::NonZeroDuration::from_secs(600).unwrap())
        .build();
    let check = Check::new(large(), b"reset", 1).named("reset");
    spend(&leased, check, 200).await;
    assert!(leased.stats().tokens_leased() > 0);
    leased.reset(&[check]).await.unwrap();
    leased.close().await;
    // Nothing was given back into the new, full bucket.
    assert_eq!(leased.stats().tokens_returned(), 0);
    assert_eq!(remaining(&plain, check).await, 100_000);
}

/// An allowed answer from a lease says what this server sees: the store's last word plus the
/// lease it still holds, so `remaining` counts down one by one.
#[tokio::test]
async fn remaining_counts_down_under_a_lease() {
    let server = TestRedis::start().unwrap();
    let leased = eager(redis(&server).await);
    let check = Check::new(large(), b"view", 1).named("view");
    let mut last = u64::MAX;
    for n in 1..=300 {
        let decision = leased.decide(&[check]).await.unwrap().decisions()[0];
        assert!(decision.allowed());
        assert_eq!(decision.remaining(), 100_000 - n, "decision {n}");
        assert!(decision.remaining() < last);
        last = decision.remaining();
    }
    assert!(leased.stats().local_decisions() > 100);
}

/// A limit lowered under a name (a reload): the lease taken under the old numbers keeps at
/// most a share of the new capacity, so it cannot pour out more than the new limit allows, and
/// a cost above the new capacity is refused as the store refuses it.
#[tokio::test]
async fn a_lowered_limit_cuts_the_lease_taken_under_the_old_one() {
    let memory = MemoryStore::new();
    let leased = eager(memory.clone());
    let old = Check::new(large(), b"k", 1).named("api");
    assert_eq!(spend(&leased, old, 200).await, 200);
    assert!(leased.stats().tokens_leased() > 100, "{:?}", leased.stats());
    let lowered = Policy::token_bucket(80, 1, Duration::from_secs(3600)).unwrap();
    let new = Check::new(lowered, b"k", 1).named("api");
    let too_much = leased.decide(&[new.with_cost(81)]).await;
    assert!(
        matches!(
            too_much,
            Err(StoreError::Check(CheckError::CostExceedsCapacity { .. }))
        ),
        "{too_much:?}"
    );
    // The bucket held far more than 80: under the new numbers it holds 80 (its level, capped
    // at the new capacity), and the lease keeps at most its cut (80 / 8) of what it took.
    let allowed = spend(&leased, new, 100).await;
    assert!(
        (80..=90).contains(&allowed),
        "{allowed} allowed under a limit of 80"
    );
}
