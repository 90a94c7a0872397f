//! The Redis store behind Sentinel, on real processes (a primary, a replica, sentinels):
//! discovery, refusals at build, sentinel authentication, and failovers followed, with every
//! decision answered within the timeout meanwhile and, waiting for a replica, no over-grant.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tollgate::{Check, Policy, RedisStore, Store, StoreError};
use tollgate_testkit::SentinelSet;

/// Generous: a 2-core machine runs four Redis processes and the sentinels beside the test.
const TIMEOUT: Duration = Duration::from_millis(300);
const SLACK: Duration = Duration::from_millis(400);
/// The sentinels' failover takes a few seconds; a loaded machine may take several times that.
const FAILOVER: Duration = Duration::from_secs(60);

fn hourly(n: u64) -> Policy {
    Policy::per_hour(n).unwrap()
}

/// How many of `tries` decisions of cost 1 on `key` are allowed.
async fn allowed(store: &RedisStore, policy: &Policy, key: &[u8], tries: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..tries {
        let verdict = store.decide(&[Check::new(*policy, key, 1)]).await.unwrap();
        allowed += usize::from(verdict.allowed());
    }
    allowed
}

/// The kit's blocking wait, off the runtime's threads.
fn new_primary(set: &mut SentinelSet) -> u16 {
    tokio::task::block_in_place(|| set.wait_for_new_primary(FAILOVER)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_is_found_through_the_sentinels() {
    let set = SentinelSet::start(1, 3).unwrap();
    let store = RedisStore::builder(set.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    store.ready().await.unwrap();
    assert_eq!(allowed(&store, &hourly(10), b"alice", 15).await, 10);
    // The decisions were written on the primary the sentinels name.
    let keys = set.cmd_primary(&[b"DBSIZE"]).unwrap().as_int().unwrap();
    assert!(keys >= 1, "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_can_never_work_is_refused_at_build() {
    let set = SentinelSet::start(1, 1).unwrap();
    let port = set.sentinel_ports()[0];
    let unknown = RedisStore::builder(format!("redis+sentinel://127.0.0.1:{port}/nobody"))
        .build()
        .await;
    let Err(StoreError::Config(why)) = unknown else {
        panic!("an unknown master name was accepted");
    };
    assert!(why.contains("\"nobody\""), "{why}");

    let unresolved = RedisStore::builder("redis+sentinel://no-such-host.invalid:26379/tollgate")
        .build()
        .await;
    assert!(matches!(unresolved, Err(StoreError::Config(_))));

    // Nothing listens: no sentinel answers, which may pass, so it is no Config error, but no
    // store either.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = free.local_addr().unwrap().port();
    drop(free);
    let down = RedisStore::builder(format!("redis+sentinel://127.0.0.1:{nobody}/tollgate"))
        .build()
        .await;
    let Err(e) = down else {
        panic!("built a store with no sentinel");
    };
    assert!(e.is_transient(), "{e}");

    for bad in [
        "redis+sentinel://127.0.0.1:1",
        "redis+sentinel://127.0.0.1:1/m?password=x",
    ] {
        let refused = RedisStore::builder(bad).build().await;
        assert!(matches!(refused, Err(StoreError::Config(_))), "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_asking_for_a_password_get_the_urls_sentinel_password() {
    let set = SentinelSet::start_with_sentinel_password(1, 1, "watchers-only").unwrap();
    let store = RedisStore::builder(set.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    assert_eq!(allowed(&store, &hourly(3), b"bob", 5).await, 3);

    let port = set.sentinel_ports()[0];
    for url in [
        format!("redis+sentinel://127.0.0.1:{port}/tollgate"),
        format!("redis+sentinel://127.0.0.1:{port}/tollgate?sentinel_password=wrong"),
    ] {
        let refused = RedisStore::builder(url).build().await;
        let Err(StoreError::Config(why)) = refused else {
            panic!("a sentinel's refusal was not a Config error");
        };
        assert!(why.contains("sentinel_password"), "{why}");
        assert!(!why.contains("wrong"), "{why}");
    }
}

/// Decides `policy` on `key` from `workers` tasks until `stop`, counting allowed decisions,
/// denials and store errors apart, and the longest any decision took.
struct Load {
    allowed: Arc<AtomicUsize>,
    errors: Arc<AtomicUsize>,
    slowest: Arc<AtomicUsize>,
    stop: Arc<tokio::sync::Notify>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(store: &RedisStore, policy: &Policy, key: &'static [u8], workers: usize) -> Load {
        let load = Load {
            allowed: Arc::default(),
            errors: Arc::default(),
            slowest: Arc::default(),
            stop: Arc::default(),
            tasks: Vec::new(),
        };
        let tasks = (0..workers)
            .map(|_| {
                let (store, policy) = (store.clone(), *policy);
                let (allowed, errors) = (load.allowed.clone(), load.errors.clone());
                let (slowest, stop) = (load.slowest.clone(), load.stop.clone());
                tokio::spawn(async move {
                    loop {
                        let start = Instant::now();
                        let result = store.decide(&[Check::new(policy, key, 1)]).await;
                        let took = start.elapsed().as_millis() as usize;
                        slowest.fetch_max(took, Ordering::Relaxed);
                        match result {
                            Ok(v) if v.allowed() => allowed.fetch_add(1, Ordering::Relaxed),
                            Ok(_) => 0,
                            Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                        };
                        let stopped =
                            tokio::time::timeout(Duration::from_millis(5), stop.notified());
                        if stopped.await.is_ok() {
                            stop.notify_one();
                            return;
                        }
                    }
                })
            })
            .collect();
        Load { tasks, ..load }
    }

    async fn finish(self) -> (usize, usize, Duration) {
        self.stop.notify_one();
        for task in self.tasks {
            task.await.unwrap();
        }
        (
            self.allowed.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            Duration::from_millis(self.slowest.load(Ordering::Relaxed) as u64),
        )
    }
}

/// Polls until a decision succeeds again.
async fn until_answered(store: &RedisStore) -> Duration {
    let start = Instant::now();
    let policy = hourly(1_000_000);
    while store
        .decide(&[Check::new(policy, b"probe", 1)])
        .await
        .is_err()
    {
        assert!(start.elapsed() < FAILOVER, "no answer after the failover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_followed_without_a_decision_hanging() {
    let mut set = SentinelSet::start(1, 3).unwrap();
    let store = RedisStore::builder(set.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let load = Load::start(&store, &hourly(1_000_000), b"busy", 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = set.primary_port();
    set.kill_primary().unwrap();
    let new = new_primary(&mut set);
    assert_ne!(old, new);
    until_answered(&store).await;
    let (allowed, _errors, slowest) = load.finish().await;
    assert!(allowed > 0);
    assert!(slowest <= TIMEOUT + SLACK, "a decision took {slowest:?}");
    // Exact again on the new primary, which never had our scripts loaded.
    assert_eq!(allowed_after(&store, 5).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_primary_is_left_and_its_stale_return_ignored() {
    let mut set = SentinelSet::start(1, 3).unwrap();
    let store = RedisStore::builder(set.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    let load = Load::start(&store, &hourly(1_000_000), b"busy", 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old_url = set.primary_url();
    // Frozen: its connections stay open and nothing answers, past down-after-milliseconds.
    set.pause_primary().unwrap();
    new_primary(&mut set);
    until_answered(&store).await;
    // Woken, it still thinks it is the primary until the sentinels turn it into a replica.
    set.resume_old_primary().unwrap();
    let start = Instant::now();
    loop {
        let said = tollgate_testkit::redis_cmd(&old_url, &[b"ROLE"]).unwrap();
        if matches!(&said, tollgate_testkit::Reply::Array(r)
            if r.first().and_then(|x| x.as_str()) == Some("slave"))
        {
            break;
        }
        assert!(start.elapsed() < FAILOVER, "{said:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (allowed, _errors, slowest) = load.finish().await;
    assert!(allowed > 0);
    assert!(slowest <= TIMEOUT + SLACK, "a decision took {slowest:?}");
    assert_eq!(allowed_after(&store, 5).await, 5);
}

/// Allowed decisions of a fresh key under a limit of `limit` an hour, asked `limit + 3` times.
async fn allowed_after(store: &RedisStore, limit: u64) -> usize {
    let key: &[u8] = b"after-the-switch";
    allowed(store, &hourly(limit), key, limit as usize + 3).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_turns_the_old_primary_readonly_and_is_followed() {
    let mut set = SentinelSet::start(1, 1).unwrap();
    let store = RedisStore::builder(set.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap();
    assert_eq!(allowed(&store, &hourly(2), b"before", 3).await, 2);
    let old_url = set.primary_url();
    // A sentinel refuses (NOGOODSLAVE) until it has read the replica's own INFO.
    let start = Instant::now();
    loop {
        let said = set
            .cmd_sentinel(0, &[b"SENTINEL", b"FAILOVER", b"tollgate"])
            .unwrap();
        if said == tollgate_testkit::Reply::Status("OK".into()) {
            break;
        }
        assert!(start.elapsed() < FAILOVER, "{said:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    new_primary(&mut set);
    // Until the sentinel turns the old primary into a replica, it still takes writes that the
    // new one will never see (a manual failover's split brain). Once it has, a store that
    // stayed there meets READONLY, and follows.
    let start = Instant::now();
    loop {
        let said = tollgate_testkit::redis_cmd(&old_url, &[b"SET", b"x", b"1"]).unwrap();
        if matches!(&said, tollgate_testkit::Reply::Error(e) if e.starts_with("READONLY")) {
            break;
        }
        assert!(start.elapsed() < FAILOVER, "{said:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    until_answered(&store).await;
    assert_eq!(allowed_after(&store, 4).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_replica_grants_nothing_twice_across_a_killed_primary() {
    // Two replicas: once one is promoted, the other replicates it, and WAIT 1 can be met again.
    let mut set = SentinelSet::start(2, 3).unwrap();
    let store = RedisStore::builder(set.url())
        .timeout(Duration::from_millis(600))
        .wait_for_replicas(1, Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    const LIMIT: usize = 60;
    let policy = hourly(LIMIT as u64);
    let load = Load::start(&store, &policy, b"hot", 4);
    // Kill the primary while the bucket is being drained.
    let start = Instant::now();
    while load.allowed.load(Ordering::Relaxed) < LIMIT / 3 {
        assert!(start.elapsed() < FAILOVER, "the load made no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    set.kill_primary().unwrap();
    new_primary(&mut set);
    until_answered(&store).await;
    // Drain what is left on the new primary, beside the load.
    let (drained, mut drain_errors) = (Instant::now(), 0);
    let mut drain_allowed = 0;
    loop {
        assert!(drained.elapsed() < FAILOVER, "the bucket never ran dry");
        match store.decide(&[Check::new(policy, b"hot", 1)]).await {
            Ok(v) if v.allowed() => drain_allowed += 1,
            Ok(_) => break,
            Err(_) => drain_errors += 1,
        }
    }
    let (allowed, errors, slowest) = load.finish().await;
    let (allowed, errors) = (allowed + drain_allowed, errors + drain_errors);
    // Every decision answered from the store survived the failover: at most LIMIT allowed. A
    // store error may have charged a token it did not grant (a write applied, its WAIT short).
    assert!(allowed <= LIMIT, "over-grant: {allowed} allowed of {LIMIT}");
    assert!(
        allowed + errors >= LIMIT,
        "{allowed} allowed and {errors} errors of {LIMIT}"
    );
    assert!(
        slowest <= Duration::from_millis(600) + SLACK,
        "a decision took {slowest:?}"
    );
}
