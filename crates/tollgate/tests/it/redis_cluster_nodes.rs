//! Redis Cluster batched per node, against the test kit's 3-master cluster: one call decides
//! the checks of many slots of one node, every check decided exactly once under concurrency
//! and while a slot migrates, the per-slot mode, and how many calls a queue keeps in flight
//! (one per node on a cluster, two on one Redis).
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Check, Policy, RedisStore, Store};
use tollgate_testkit::{Reply, TestRedis, TestRedisCluster, command_calls, redis_cmd};

/// So slow a refill that no token comes back during a test: one every 6 minutes.
fn no_refill(capacity: u64) -> Policy {
    Policy::token_bucket(capacity, capacity, Duration::from_secs(360 * capacity)).unwrap()
}

fn ports(cluster: &TestRedisCluster) -> Vec<u16> {
    cluster
        .urls()
        .iter()
        .map(|u| u.rsplit(':').next().unwrap().parse().unwrap())
        .collect()
}

/// A field of `INFO <section>` on the node at `port` (0 when absent): the error counts, which
/// the test kit's `command_calls` does not read.
fn info_count(port: u16, section: &str, line: &str, field: &str) -> u64 {
    let Reply::Bulk(text) = redis_cmd(port, &[b"INFO", section.as_bytes()]).unwrap() else {
        panic!("INFO answers text");
    };
    let text = String::from_utf8(text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(':'))
        .and_then(|fields| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(field)?.strip_prefix('='))
        })
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Script calls each node ran since its statistics were reset.
fn script_calls(port: u16) -> u64 {
    command_calls(port, "evalsha").unwrap()
}

fn reset_stats(cluster: &TestRedisCluster) {
    for port in ports(cluster) {
        redis_cmd(port, &[b"CONFIG", b"RESETSTAT"]).unwrap();
    }
}

async fn store(cluster: &TestRedisCluster, per_node: bool) -> RedisStore {
    store_with(cluster, per_node, Some(1)).await
}

/// `max_in_flight` `None`: the builder's default.
async fn store_with(
    cluster: &TestRedisCluster,
    per_node: bool,
    max_in_flight: Option<usize>,
) -> RedisStore {
    let mut builder = RedisStore::builder("")
        .cluster(cluster.urls())
        .per_node(per_node)
        .timeout(Duration::from_secs(5));
    if let Some(calls) = max_in_flight {
        builder = builder.max_in_flight(calls);
    }
    builder.build().await.unwrap()
}

/// Loads the scripts and connects to every node before anything is counted.
async fn warm_up(store: &RedisStore, policy: Policy) {
    for warm in 0..30u32 {
        let key = format!("warm-{warm}");
        store
            .decide(&[Check::new(policy, key.as_bytes(), 1)])
            .await
            .unwrap();
    }
}

/// 300 users, each its own slot almost always, decided while every node is paused: each
/// node's first call goes alone, everything queued behind it goes in one call. Returns the
/// script calls of each node.
async fn three_hundred_users_while_paused(cluster: &TestRedisCluster, store: &RedisStore) -> u64 {
    let policy = no_refill(5);
    warm_up(store, policy).await;
    reset_stats(cluster);
    for port in ports(cluster) {
        // The nodes answer nothing for 500 ms: the calls queue meanwhile.
        redis_cmd(port, &[b"CLIENT", b"PAUSE", b"500"]).unwrap();
    }
    let tasks: Vec<_> = (0..300u32)
        .map(|user| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = format!("user-{user}");
                store
                    .decide(&[Check::new(policy, key.as_bytes(), 1)])
                    .await
                    .unwrap()
            })
        })
        .collect();
    for task in tasks {
        let verdict = task.await.unwrap();
        assert!(verdict.allowed());
        assert_eq!(verdict.decisions()[0].remaining(), 4, "charged once");
    }
    ports(cluster).into_iter().map(script_calls).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_of_many_slots_share_one_call_per_node() {
    let cluster = TestRedisCluster::start(3).unwrap();
    let store = store(&cluster, true).await;
    assert!(store.batches_per_node(), "Redis 7 takes the flag");
    let calls = three_hundred_users_while_paused(&cluster, &store).await;
    // Per node: the first decision alone, the (about 100) queued behind it in one call.
    assert!(calls <= 6, "{calls} calls for 300 users on 3 nodes");
}

/// 60 users arriving 5 ms apart while the Redis servers at `ports` are paused: per server, the
/// first call goes alone, and each further call allowed in flight takes the one user that has
/// arrived when it starts; everything later waits for the next. Returns the script calls of
/// all the servers.
async fn sixty_users_one_by_one_while_paused(ports: &[u16], store: &RedisStore, round: u32) -> u64 {
    let policy = no_refill(5);
    warm_up(store, policy).await;
    for &port in ports {
        redis_cmd(port, &[b"CONFIG", b"RESETSTAT"]).unwrap();
    }
    // Long enough for every user to arrive (300 ms of sleeps) on a slow machine.
    for &port in ports {
        redis_cmd(port, &[b"CLIENT", b"PAUSE", b"3000"]).unwrap();
    }
    let mut tasks = Vec::new();
    for user in 0..60u32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("one-by-one-{round}-{user}");
            store
                .decide(&[Check::new(policy, key.as_bytes(), 1)])
                .await
                .unwrap()
        }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().decisions()[0].remaining(), 4);
    }
    ports.iter().map(|&port| script_calls(port)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_keeps_one_call_in_flight_per_node_by_default() {
    let cluster = TestRedisCluster::start(3).unwrap();
    let store = store_with(&cluster, true, None).await;
    assert!(store.batches_per_node());
    let calls = sixty_users_one_by_one_while_paused(&ports(&cluster), &store, 1).await;
    // Per node: the first user's call, then one call for the rest (about 20 per node).
    assert!(
        calls <= 6,
        "{calls} calls: more than one in flight per node"
    );
    // Two in flight, as asked: the second user of each node goes alone as well.
    let store = store_with(&cluster, true, Some(2)).await;
    let calls = sixty_users_one_by_one_while_paused(&ports(&cluster), &store, 2).await;
    assert!(calls >= 7, "{calls} calls: max_in_flight(2) not honoured");
}

/// One Redis keeps two calls in flight by default: its queue is the whole store, and the next
/// batch reaches it while the last reply travels back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_redis_keeps_two_calls_in_flight_by_default() {
    let redis = TestRedis::start().unwrap();
    if !redis.is_owned() {
        eprintln!("TOLLGATE_REDIS_URL names an external Redis, which this test cannot pause");
        return;
    }
    let store = RedisStore::builder(redis.url())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let calls = sixty_users_one_by_one_while_paused(&[redis.port()], &store, 1).await;
    // The first user's call, the second user's alone, then one call for the rest.
    assert_eq!(calls, 3, "{calls} calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_slot_mode_makes_a_call_per_key() {
    let cluster = TestRedisCluster::start(3).unwrap();
    let store = store(&cluster, false).await;
    assert!(!store.batches_per_node());
    let calls = three_hundred_users_while_paused(&cluster, &store).await;
    assert_eq!(calls, 300, "each key its own queue");
}

/// 64 workers deciding 40 users round and round, half of them under two policies at once:
/// each user is allowed exactly its capacity, and a two-policy decision charges both or none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_workers_get_exactly_the_bound_per_node() {
    let cluster = TestRedisCluster::start(3).unwrap();
    let store = store(&cluster, true).await;
    assert!(store.batches_per_node());
    let (ten, six) = (no_refill(10), no_refill(6));
    let allowed: Arc<Vec<AtomicU64>> = Arc::new((0..40).map(|_| AtomicU64::new(0)).collect());
    let workers: Vec<_> = (0..64usize)
        .map(|worker| {
            let (store, allowed) = (store.clone(), Arc::clone(&allowed));
            tokio::spawn(async move {
                for i in 0..100 {
                    let user = (worker * 7 + i) % 40;
                    let key = format!("u{user}");
                    let verdict = if user % 2 == 0 {
                        store.decide(&[Check::new(ten, key.as_bytes(), 1)]).await
                    } else {
                        let both = [
                            Check::new(ten, key.as_bytes(), 1),
                            Check::new(six, key.as_bytes(), 1),
                        ];
                        store.decide(&both).await
                    };
                    if verdict.unwrap().allowed() {
                        allowed[user].fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    for (user, count) in allowed.iter().enumerate() {
        let count = count.load(Ordering::Relaxed);
        let key = format!("u{user}");
        let peek = store
            .decide(&[Check::new(ten, key.as_bytes(), 0)])
            .await
            .unwrap();
        if user % 2 == 0 {
            assert_eq!(count, 10, "user {user}");
            assert_eq!(peek.decisions()[0].remaining(), 0);
        } else {
            assert_eq!(count, 6, "user {user}: the smaller bucket bounds the pair");
            assert_eq!(
                peek.decisions()[0].remaining(),
                4,
                "charged with the pair only"
            );
        }
    }
}

fn id(port: u16) -> Vec<u8> {
    match redis_cmd(port, &[b"CLUSTER", b"MYID"]).unwrap() {
        Reply::Bulk(id) => id,
        other => panic!("CLUSTER MYID: {other:?}"),
    }
}

fn ok(reply: Reply) {
    assert!(
        matches!(&reply, Reply::Status(s) if s == "OK" || s == "NOKEY"),
        "{reply:?}"
    );
}

/// While workers decide users of every node, one user's slot moves to another node in steps
/// (migrating, its key moved, then owned by the new node): calls per node that meet it fail
/// before writing and are decided again per slot. Every decision is made exactly once: each
/// bucket's state is its capacity minus the decisions answered allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_mid_run_is_decided_once() {
    let cluster = TestRedisCluster::start(3).unwrap();
    let store = store(&cluster, true).await;
    assert!(store.batches_per_node());
    let policy = no_refill(100_000);
    let users: Vec<String> = (0..30).map(|u| format!("m{u}")).collect();
    let moving = users[0].clone();
    let source = cluster.master_of(moving.as_bytes()).unwrap();
    let target = *ports(&cluster).iter().find(|&&p| p != source).unwrap();
    let slot = match redis_cmd(source, &[b"CLUSTER", b"KEYSLOT", moving.as_bytes()]).unwrap() {
        Reply::Integer(slot) => slot.to_string(),
        other => panic!("{other:?}"),
    };
    let users = Arc::new(users);
    let allowed: Arc<Vec<AtomicU64>> = Arc::new(users.iter().map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..16usize)
        .map(|worker| {
            let (store, allowed, users, stop) = (
                store.clone(),
                Arc::clone(&allowed),
                Arc::clone(&users),
                Arc::clone(&stop),
            );
            tokio::spawn(async move {
                let mut i = worker;
                while !stop.load(Ordering::Relaxed) {
                    // The moving user in every other decision.
                    let user = if i % 2 == 0 { 0 } else { i % users.len() };
                    i += 1;
                    let check = [Check::new(policy, users[user].as_bytes(), 1)];
                    assert!(store.decide(&check).await.unwrap().allowed());
                    allowed[user].fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    reset_stats(&cluster);
    let step = || std::thread::sleep(Duration::from_millis(300));
    let migrate = {
        let (slot, moving) = (slot.clone(), moving.clone());
        tokio::task::spawn_blocking(move || {
            let (source_id, target_id) = (id(source), id(target));
            step();
            let slot = slot.as_bytes();
            ok(redis_cmd(
                target,
                &[b"CLUSTER", b"SETSLOT", slot, b"IMPORTING", &source_id],
            )
            .unwrap());
            ok(redis_cmd(
                source,
                &[b"CLUSTER", b"SETSLOT", slot, b"MIGRATING", &target_id],
            )
            .unwrap());
            step();
            let Reply::Array(keys) =
                redis_cmd(source, &[b"CLUSTER", b"GETKEYSINSLOT", slot, b"100"]).unwrap()
            else {
                panic!("GETKEYSINSLOT answers an array");
            };
            let keys: Vec<Vec<u8>> = keys.into_iter().map(Reply::into_bytes).collect();
            assert!(!keys.is_empty(), "{moving}'s bucket is on {source}");
            let port = target.to_string();
            let mut migrate: Vec<&[u8]> = vec![
                b"MIGRATE",
                b"127.0.0.1",
                port.as_bytes(),
                b"",
                b"0",
                b"5000",
                b"KEYS",
            ];
            migrate.extend(keys.iter().map(Vec::as_slice));
            ok(redis_cmd(source, &migrate).unwrap());
            step();
            for port in [target, source] {
                ok(redis_cmd(port, &[b"CLUSTER", b"SETSLOT", slot, b"NODE", &target_id]).unwrap());
            }
            step();
        })
    };
    migrate.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    // The source node refused calls that named the moved bucket: with an error when it was
    // one of the keys a call reached (and the call is decided again per slot), with a
    // redirection when it was the key the call declared (which the client follows). Which one
    // a call meets depends on how the workers' decisions fell into batches.
    let refused: u64 = ["ERR", "ASK", "MOVED"]
        .iter()
        .map(|e| info_count(source, "errorstats", &format!("errorstat_{e}"), "count"))
        .sum();
    assert!(refused > 0, "no call met the moving slot");
    assert_eq!(cluster.master_of(moving.as_bytes()), Some(target));
    for (user, count) in users.iter().zip(allowed.iter()) {
        let count = count.load(Ordering::Relaxed);
        let peek = store
            .decide(&[Check::new(policy, user.as_bytes(), 0)])
            .await
            .unwrap();
        assert_eq!(
            peek.decisions()[0].remaining(),
            100_000 - count,
            "{user}: every decision charged once"
        );
    }
    assert!(allowed[0].load(Ordering::Relaxed) > 0);
}
