//! A bucket that one check of a call charges is *taken first* (`bucket.lua`): written with
//! `SET ... NX GET` as if absent, so a new bucket is read and written in one command. These
//! tests count the commands, and check that what is taken first is taken back when its
//! decision does not take or when a later read of the call fails (a slot on the move), so
//! nothing is ever charged twice.
#![cfg(feature = "redis")]

use std::time::Duration;

use tollgate::{Check, Policy, RedisStore, Store};
use tollgate_testkit::{Reply, TestRedis, TestRedisCluster, command_calls, redis_cmd};

/// So slow a refill that no token comes back during a test.
fn no_refill(capacity: u64) -> Policy {
    Policy::token_bucket(capacity, capacity, Duration::from_secs(360 * capacity)).unwrap()
}

fn reset(port: u16) {
    redis_cmd(port, &[b"CONFIG", b"RESETSTAT"]).unwrap();
}

/// Writes (`SET`, and `PSETEX`, which writes a decided bucket) and `MGET` commands run on
/// `port` since its statistics were reset.
fn sets_and_reads(port: u16) -> (u64, u64) {
    (
        command_calls(port, "set").unwrap() + command_calls(port, "psetex").unwrap(),
        command_calls(port, "mget").unwrap(),
    )
}

fn exists(port: u16, key: &str) -> bool {
    redis_cmd(port, &[b"EXISTS", key.as_bytes()]).unwrap() == Reply::Integer(1)
}

async fn remaining(store: &RedisStore, check: Check<'_>) -> u64 {
    let peek = check.with_cost(0);
    store.decide(&[peek]).await.unwrap().decisions()[0].remaining()
}

#[tokio::test]
async fn a_new_bucket_is_read_and_written_in_one_command() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let policy = no_refill(5);
    let alice = Check::new(policy, b"alice", 2).named("api");
    reset(redis.port());
    let verdict = store.decide(&[alice]).await.unwrap();
    assert!(verdict.allowed());
    assert_eq!(verdict.decisions()[0].remaining(), 3);
    assert_eq!(sets_and_reads(redis.port()), (1, 0), "one SET, no read");
    // Now it exists: the same command reads it, and the decision is written after.
    reset(redis.port());
    let verdict = store.decide(&[alice]).await.unwrap();
    assert_eq!(verdict.decisions()[0].remaining(), 1);
    assert_eq!(sets_and_reads(redis.port()), (2, 0));
    // Denied: read, nothing written.
    reset(redis.port());
    assert!(!store.decide(&[alice]).await.unwrap().allowed());
    assert_eq!(sets_and_reads(redis.port()), (1, 0));
    assert_eq!(remaining(&store, alice).await, 1);
}

/// A decision of two buckets of one user: the new one is taken first, the other denies, and
/// the new one is absent again afterwards; nothing was taken from either.
#[tokio::test]
async fn a_bucket_taken_first_is_taken_back_when_its_decision_is_denied() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let tiny = Check::new(no_refill(1), b"dave", 1).named("tiny");
    assert!(store.decide(&[tiny]).await.unwrap().allowed());
    let fresh = Check::new(no_refill(5), b"dave", 3).named("fresh");
    reset(redis.port());
    let verdict = store.decide(&[tiny, fresh]).await.unwrap();
    assert!(!verdict.allowed());
    assert_eq!(
        verdict.decisions()[1].remaining(),
        5,
        "answered as untouched"
    );
    assert_eq!(
        command_calls(redis.port(), "del").unwrap(),
        1,
        "taken first, then taken back"
    );
    assert!(!exists(redis.port(), "tollgate:v3:{dave}:tb:=fresh"));
    assert_eq!(remaining(&store, fresh).await, 5);
    assert_eq!(remaining(&store, tiny).await, 0);
}

/// A key of another type under a bucket's name reads as missing and is overwritten when
/// charged, taken first or not (as one `MGET` reads it).
#[tokio::test]
async fn a_key_of_another_type_is_overwritten_as_before() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let key = "tollgate:v3:{erin}:tb:=api";
    redis_cmd(redis.port(), &[b"RPUSH", key.as_bytes(), b"x"]).unwrap();
    let erin = Check::new(no_refill(5), b"erin", 1).named("api");
    let verdict = store.decide(&[erin]).await.unwrap();
    assert_eq!(verdict.decisions()[0].remaining(), 4);
    assert_eq!(
        redis_cmd(redis.port(), &[b"TYPE", key.as_bytes()]).unwrap(),
        Reply::Status("string".into())
    );
    assert_eq!(remaining(&store, erin).await, 4);
}

/// On one Redis, a bucket that exists costs a command of its own when taken first (it would
/// have shared the call's one `MGET`): a store whose lone buckets keep existing stops taking
/// them first, and takes them first again once they are mostly new. (Decisions of two buckets
/// each: in a call of one bucket, taking first is the read, and always done.)
#[tokio::test]
async fn one_redis_takes_first_only_while_lone_buckets_are_mostly_new() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let policy = no_refill(1_000);
    reset(redis.port());
    for _ in 0..40 {
        assert!(
            store
                .decide(&two(policy, b"frank"))
                .await
                .unwrap()
                .allowed()
        );
    }
    let (sets, reads) = sets_and_reads(redis.port());
    // Each decision writes twice; the first few read with SET before the store learns.
    assert!(reads >= 35, "{reads} MGETs, {sets} SETs");
    assert!(sets <= 80 + 10, "{reads} MGETs, {sets} SETs");
    assert_eq!(remaining(&store, two(policy, b"frank")[1]).await, 960);
    // New users: read by MGET while the store still expects them to exist, then taken first.
    let users: Vec<String> = (0..120u32).map(|u| format!("new-{u}")).collect();
    for user in &users[..100] {
        let verdict = store.decide(&two(policy, user.as_bytes())).await;
        assert!(verdict.unwrap().allowed());
    }
    reset(redis.port());
    for user in &users[100..] {
        let verdict = store.decide(&two(policy, user.as_bytes())).await.unwrap();
        assert_eq!(verdict.decisions()[0].remaining(), 999);
    }
    assert_eq!(sets_and_reads(redis.port()), (40, 0));
}

/// Two buckets of `user`, under `policy` named `a` and `b`: one decision, one call.
fn two(policy: Policy, user: &[u8]) -> [Check<'_>; 2] {
    [
        Check::new(policy, user, 1).named("a"),
        Check::new(policy, user, 1).named("b"),
    ]
}

/// A call of one bucket takes it first whatever the store learnt: its one command is the read.
#[tokio::test]
async fn a_call_of_one_bucket_always_takes_it_first() {
    let redis = TestRedis::start().unwrap();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let frank = Check::new(no_refill(1_000), b"frank", 1);
    reset(redis.port());
    for _ in 0..20 {
        assert!(store.decide(&[frank]).await.unwrap().allowed());
    }
    // The first creates; each other reads with SET ... NX GET and writes.
    assert_eq!(sets_and_reads(redis.port()), (39, 0));
}

/// Per node, a call takes a new user's bucket first, then meets a bucket its node no longer
/// serves alone (its slot is migrating, the key not there): the call takes back what it took
/// and fails, and is decided again per slot. Each bucket is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_per_node_that_meets_a_moving_slot_takes_back_what_it_took() {
    meets_a_moving_slot(1).await;
}

/// The same, the moving bucket peeked: a peek is never taken first, so the call meets the slot
/// at its later read of the bucket (`read_rest`), not at a `SET`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_per_node_that_meets_a_moving_slot_at_a_read_takes_back_what_it_took() {
    meets_a_moving_slot(0).await;
}

/// Three users of one node, the third in a migrating slot and checked at `moving_cost`.
async fn meets_a_moving_slot(moving_cost: u64) {
    let cluster = TestRedisCluster::start(3).unwrap();
    let store = RedisStore::builder("")
        .cluster(cluster.urls())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    assert!(store.batches_per_node());
    let policy = no_refill(10);
    // Three users of one node, in three slots: the first goes alone while the node is paused,
    // the others queue behind it in arrival order, so `anna` is taken first before `moving`
    // is read.
    let (node, [first, anna, moving]) = three_users_of_one_node(&cluster);
    let port = |url: &str| url.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let other = cluster
        .urls()
        .iter()
        .map(|u| port(u))
        .find(|&p| p != node)
        .unwrap();
    let slot = match redis_cmd(node, &[b"CLUSTER", b"KEYSLOT", moving.as_bytes()]).unwrap() {
        Reply::Integer(slot) => slot.to_string(),
        reply => panic!("{reply:?}"),
    };
    for warm in 0..30u32 {
        let key = format!("warm-{warm}");
        store
            .decide(&[Check::new(policy, key.as_bytes(), 1)])
            .await
            .unwrap();
    }
    let id = |port: u16| match redis_cmd(port, &[b"CLUSTER", b"MYID"]).unwrap() {
        Reply::Bulk(id) => id,
        reply => panic!("{reply:?}"),
    };
    let (node_id, other_id) = (id(node), id(other));
    let slot = slot.as_bytes();
    redis_cmd(
        other,
        &[b"CLUSTER", b"SETSLOT", slot, b"IMPORTING", &node_id],
    )
    .unwrap();
    redis_cmd(
        node,
        &[b"CLUSTER", b"SETSLOT", slot, b"MIGRATING", &other_id],
    )
    .unwrap();
    reset(node);
    redis_cmd(node, &[b"CLIENT", b"PAUSE", b"300"]).unwrap();
    let mut tasks = Vec::new();
    let costs = [1, 1, moving_cost];
    for (user, cost) in [&first, &anna, &moving].into_iter().zip(costs) {
        let (store, user) = (store.clone(), user.clone());
        tasks.push(tokio::spawn(async move {
            let verdict = store
                .decide(&[Check::new(policy, user.as_bytes(), cost)])
                .await
                .unwrap();
            verdict.decisions()[0].remaining()
        }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for (task, cost) in tasks.into_iter().zip(costs) {
        assert_eq!(task.await.unwrap(), 10 - cost);
    }
    let Reply::Bulk(errors) = redis_cmd(node, &[b"INFO", b"errorstats"]).unwrap() else {
        panic!("INFO answers text");
    };
    assert!(
        String::from_utf8_lossy(&errors).contains("errorstat_ERR"),
        "the call per node met the moving slot"
    );
    for (user, cost) in [&first, &anna, &moving].into_iter().zip(costs) {
        let check = Check::new(policy, user.as_bytes(), 1);
        assert_eq!(
            remaining(&store, check).await,
            10 - cost,
            "{user}: charged once"
        );
    }
}

/// Three users whose buckets sit on one node (returned), each in a slot of its own.
fn three_users_of_one_node(cluster: &TestRedisCluster) -> (u16, [String; 3]) {
    let node = cluster.master_of(b"u0").unwrap();
    let slot_of =
        |user: &str| match redis_cmd(node, &[b"CLUSTER", b"KEYSLOT", user.as_bytes()]).unwrap() {
            Reply::Integer(slot) => slot,
            reply => panic!("{reply:?}"),
        };
    let mut users: Vec<(String, i64)> = Vec::new();
    for i in 0.. {
        let user = format!("u{i}");
        let slot = slot_of(&user);
        if cluster.master_of(user.as_bytes()) == Some(node) && users.iter().all(|u| u.1 != slot) {
            users.push((user, slot));
            if users.len() == 3 {
                break;
            }
        }
    }
    let names: Vec<String> = users.into_iter().map(|(u, _)| u).collect();
    (node, names.try_into().unwrap())
}

/// Over `maxmemory`, Redis refuses a script's first write: a denial and a peek are still
/// answered (the script stops taking first and reads), a charge fails, and the failed call
/// took nothing.
#[tokio::test]
async fn over_maxmemory_denials_are_answered_and_charges_fail_without_taking() {
    let redis = TestRedis::start().unwrap();
    if !redis.is_owned() {
        eprintln!("TOLLGATE_REDIS_URL names an external Redis, whose maxmemory this test leaves");
        return;
    }
    let store = RedisStore::builder(redis.url())
        .deny_cache(false)
        .build()
        .await
        .unwrap();
    let tiny = Check::new(no_refill(1), b"gina", 1).named("tiny");
    assert!(store.decide(&[tiny]).await.unwrap().allowed());
    let limit = |bytes: &[u8]| {
        redis_cmd(redis.port(), &[b"CONFIG", b"SET", b"maxmemory", bytes]).unwrap();
    };
    limit(b"1");
    let verdict = store.decide(&[tiny]).await;
    limit(b"0");
    assert!(!verdict.unwrap().allowed(), "a denial needs no write");
    limit(b"1");
    let henry = Check::new(no_refill(5), b"henry", 1);
    let charged = store.decide(&[henry]).await;
    let peek = store.decide(&[henry.with_cost(0)]).await;
    limit(b"0");
    assert!(charged.is_err(), "{charged:?}");
    assert_eq!(peek.unwrap().decisions()[0].remaining(), 5);
    assert_eq!(
        remaining(&store, henry).await,
        5,
        "the failed call took nothing"
    );
    assert_eq!(
        store.decide(&[henry]).await.unwrap().decisions()[0].remaining(),
        4
    );
}
