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

/// The sentinels' `down-after-milliseconds` in tests that cause no failover: a loaded 2-core
/// machine must not make one by starving a node for a second.
const STEADY: Duration = Duration::from_secs(5);

/// The kit's blocking wait, off the runtime's threads.
fn new_primary(set: &mut SentinelSet) -> u16 {
    tokio::task::block_in_place(|| set.wait_for_new_primary(FAILOVER)).unwrap()
}

/// A store that follows `set`'s primary, each call bounded by [`TIMEOUT`].
async fn following(set: &SentinelSet) -> RedisStore {
    RedisStore::builder(set.url())
        .timeout(TIMEOUT)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_is_found_through_the_sentinels() {
    let set = SentinelSet::start_with_down_after(1, 3, STEADY).unwrap();
    let store = following(&set).await;
    store.ready().await.unwrap();
    assert_eq!(allowed(&store, &hourly(10), b"alice", 15).await, 10);
    // The decisions were written on the primary the sentinels name.
    let keys = set.cmd_primary(&[b"DBSIZE"]).unwrap().as_int().unwrap();
    assert!(keys >= 1, "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_sentinel_first_in_the_list_delays_no_discovery() {
    let set = SentinelSet::start_with_down_after(1, 1, STEADY).unwrap();
    // Accepts connections (the kernel does) and never answers: a sentinel that froze.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let url = format!(
        "redis+sentinel://127.0.0.1:{silent_port},127.0.0.1:{}/{}",
        set.sentinel_ports()[0],
        set.master_name()
    );
    // A store timeout of 10 s (env mode's default) bounded each sentinel's question before:
    // the silent one cost 10 s. Now the sentinels are asked at once, each within 500 ms.
    let started = Instant::now();
    let store = RedisStore::builder(url)
        .timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "discovery took {took:?}");
    assert_eq!(allowed(&store, &hourly(3), b"bob", 4).await, 3);
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_can_never_work_is_refused_at_build() {
    let set = SentinelSet::start_with_down_after(1, 1, STEADY).unwrap();
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
    let store = following(&set).await;
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
    /// Store errors that were Redis's `READONLY` (a call sent to a node turned replica).
    readonly: Arc<AtomicUsize>,
    slowest: Arc<AtomicUsize>,
    stop: Arc<tokio::sync::Notify>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(store: &RedisStore, policy: &Policy, key: &'static [u8], workers: usize) -> Load {
        let load = Load {
            allowed: Arc::default(),
            errors: Arc::default(),
            readonly: Arc::default(),
            slowest: Arc::default(),
            stop: Arc::default(),
            tasks: Vec::new(),
        };
        let tasks = (0..workers)
            .map(|_| {
                let (store, policy) = (store.clone(), *policy);
                let (allowed, errors) = (load.allowed.clone(), load.errors.clone());
                let readonly = load.readonly.clone();
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
                            Err(e) => {
                                let text = e.to_string().to_lowercase();
                                if text.contains("readonly") || text.contains("read only") {
                                    readonly.fetch_add(1, Ordering::Relaxed);
                                }
                                errors.fetch_add(1, Ordering::Relaxed)
                            }
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
    let store = following(&set).await;
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
    let store = following(&set).await;
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
async fn a_primary_turned_replica_is_left_on_the_readonly_its_calls_meet() {
    let mut set = SentinelSet::start(1, 1).unwrap();
    let store = following(&set).await;
    assert_eq!(allowed(&store, &hourly(2), b"before", 3).await, 2);
    let load = Load::start(&store, &hourly(1_000_000), b"busy", 4);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The sentinels frozen: no `+switch-master`, no answer to the once-a-second question.
    // Only the calls meeting READONLY can tell the store that its primary is one no longer.
    set.pause_sentinels(true).unwrap();
    let old = set.primary_port();
    let new = set.node_ports().into_iter().find(|&p| p != old).unwrap();
    let url = |port: u16| format!("redis://127.0.0.1:{port}");
    let port = new.to_string();
    for (node, args) in [
        (new, [&b"REPLICAOF"[..], b"NO", b"ONE"]),
        (old, [&b"REPLICAOF"[..], b"127.0.0.1", port.as_bytes()]),
    ] {
        let said = tollgate_testkit::redis_cmd(url(node).as_str(), &args).unwrap();
        assert_eq!(said, tollgate_testkit::Reply::Status("OK".into()));
    }
    let start = Instant::now();
    while load.readonly.load(Ordering::Relaxed) == 0 {
        assert!(start.elapsed() < FAILOVER, "no call met READONLY");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The sentinels told of the new primary; the store asks them because of READONLY.
    set.pause_sentinels(false).unwrap();
    let quorum_of_one = [
        &b"SENTINEL"[..],
        b"MONITOR",
        b"tollgate",
        b"127.0.0.1",
        port.as_bytes(),
        b"1",
    ];
    set.cmd_sentinel(0, &[b"SENTINEL", b"REMOVE", b"tollgate"])
        .unwrap();
    let said = set.cmd_sentinel(0, &quorum_of_one).unwrap();
    assert_eq!(said, tollgate_testkit::Reply::Status("OK".into()));
    // A write answered: the store is on the new primary (the old one refuses every write).
    until_answered(&store).await;
    let (allowed, _errors, slowest) = load.finish().await;
    assert!(allowed > 0);
    assert!(slowest <= TIMEOUT + SLACK, "a decision took {slowest:?}");
    assert_eq!(allowed_after(&store, 4).await, 4);
}

/// Drains a bucket of [`LIMIT`] from a load while the primary, its replication stalled for
/// 300 ms, is killed; then drains what the new primary holds. Answers the decisions allowed
/// and the store errors, the store waiting for a replica when `wait`.
async fn across_a_stalled_and_killed_primary(wait: bool) -> (usize, usize) {
    // Two replicas: once one is promoted, the other replicates it, and WAIT 1 can be met again.
    let mut set = SentinelSet::start(2, 3).unwrap();
    // No deny cache: its denials from the old primary would hide the new primary's tokens.
    let store = RedisStore::builder(set.url())
        .timeout(Duration::from_millis(600))
        .deny_cache(false);
    let store = match wait {
        true => store.wait_for_replicas(1, Duration::from_millis(300)),
        false => store,
    };
    let store = store.build().await.unwrap();
    let policy = hourly(LIMIT as u64);
    let load = Load::start(&store, &policy, b"hot", 4);
    let start = Instant::now();
    while load.allowed.load(Ordering::Relaxed) < LIMIT / 3 {
        assert!(start.elapsed() < FAILOVER, "the load made no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // What the primary writes from here on reaches no replica: a crash now loses it.
    set.stall_replication().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    set.kill_primary().unwrap();
    set.resume_old_primary().unwrap();
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
    assert!(
        slowest <= Duration::from_millis(600) + SLACK,
        "a decision took {slowest:?}"
    );
    let (allowed, errors) = (allowed + drain_allowed, errors + drain_errors);
    eprintln!("waiting {wait}: {allowed} allowed, {errors} store errors, limit {LIMIT}");
    (allowed, errors)
}

const LIMIT: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_replica_grants_nothing_twice_across_a_killed_primary() {
    let (allowed, errors) = across_a_stalled_and_killed_primary(true).await;
    // Every decision answered from the store survived the failover: at most LIMIT allowed. A
    // store error may have charged a token it did not grant (a write applied, its WAIT short).
    assert!(allowed <= LIMIT, "over-grant: {allowed} allowed of {LIMIT}");
    assert!(
        allowed + errors >= LIMIT,
        "{allowed} allowed and {errors} errors of {LIMIT}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_waiting_the_same_crash_grants_twice() {
    // The control of the test above: the same failure over-grants when nobody waits.
    let (allowed, _errors) = across_a_stalled_and_killed_primary(false).await;
    assert!(
        allowed > LIMIT,
        "no over-grant: {allowed} allowed of {LIMIT}"
    );
}
