//! Faults under load, through the real server: Redis and PostgreSQL stalled behind a proxy
//! that stops moving bytes, their connections cut, the servers killed and restarted, their
//! state flushed, truncated or dropped. For each, 16 clients ask for 3.5 s with the fault from
//! 1 s to 2 s, and the test checks the issue's figures: every wait bounded by the timeout, the
//! fail policy answering only during the fault, the store deciding again soon after it heals,
//! and no more allowed than the exact bound (plus one burst where the fault loses the bucket).
//! Each prints its figures (`cargo nextest run --test faults --no-capture`).

use crate::support;

use support::Tollgate;
use support::faults::{Figures, bound, under_load};
use tollgate_testkit::{StallProxy, TestPostgres, TestRedis, redis_cmd};

/// Burst 10, refilled at 10 a second.
const CAPACITY: usize = 10;

/// Longer than any wait the timeout allows, on a busy two-core machine.
const WAIT_BOUND: f64 = 0.5;

/// The store's timeout where a stall of the busy CI machine must not count as a failure outside
/// the fault: a flush and a truncation, which must fail nothing (a flush test at 50 ms once
/// counted 12 timeouts outside its fault, all of the machine's), and PostgreSQL stalled (at 100
/// ms, 14 timeouts 0.3 s before the fault began, once). Still under [`WAIT_BOUND`].
const SLACK_TIMEOUT_MS: &str = "300";

fn body(key: &str) -> String {
    format!(
        r#"{{"key": "{key}", "capacity": {CAPACITY}, "refill": {CAPACITY}, "period_ms": 1000}}"#
    )
}

/// A fresh key per test process, so an external store holds no earlier state.
fn key(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// Fails closed, so that the fail policy's answers are the 503s counted.
fn serve(store: &str, timeout_ms: &str) -> Tollgate {
    Tollgate::start(&[
        "--store",
        store,
        "--on-store-error",
        "deny",
        "--store-timeout-ms",
        timeout_ms,
    ])
}

/// The checks every fault shares: bounded waits, failures only around the fault, the store
/// back within `back` seconds of the heal, and at most `extra` more allowed than the bound.
fn check(figures: &Figures, what: &str, back: f64, extra: usize) {
    eprintln!("{}", figures.line(what));
    assert!(
        figures.longest_wait() <= WAIT_BOUND,
        "{what}: a request waited {:.3} s",
        figures.longest_wait()
    );
    assert_eq!(
        figures.failed_outside(back),
        0,
        "{what}: failures outside the fault"
    );
    assert!(
        figures.back_after() <= back,
        "{what}: the store decided again only {:.3} s after the heal",
        figures.back_after()
    );
    let bound = bound(CAPACITY) + extra;
    assert!(
        figures.allowed() <= bound,
        "{what}: {} allowed, the bound is {bound}",
        figures.allowed()
    );
    assert!(
        figures.allowed() >= CAPACITY,
        "{what}: the store never decided"
    );
}

fn redis_url_via(proxy: &StallProxy) -> String {
    format!("redis://127.0.0.1:{}", proxy.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stalled_behind_a_proxy() {
    let redis = TestRedis::start().expect("start redis-server");
    let proxy = StallProxy::start(([127, 0, 0, 1], redis.port()).into()).expect("a proxy");
    let server = serve(&redis_url_via(&proxy), "50");
    let figures = under_load(
        server.addr,
        &body(&key("redis-stall")),
        async { proxy.stall() },
        async { proxy.resume() },
    )
    .await;
    check(&figures, "redis stalled", 0.5, 0);
    assert!(
        figures.failed() > 0,
        "the stall was answered by the fail policy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_connections_cut() {
    let redis = TestRedis::start().expect("start redis-server");
    let proxy = StallProxy::start(([127, 0, 0, 1], redis.port()).into()).expect("a proxy");
    let server = serve(&redis_url_via(&proxy), "50");
    let figures = under_load(
        server.addr,
        &body(&key("redis-cut")),
        async { proxy.cut() },
        async {},
    )
    .await;
    // Cut at 1 s: the fault lasts as long as reconnecting does, measured from the cut.
    check(&figures, "redis connections cut", 0.5, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_empty() {
    let mut redis = TestRedis::start().expect("start redis-server");
    if !redis.is_owned() {
        return; // an external Redis cannot be killed here
    }
    let server = serve(redis.url(), "50");
    let port = redis.port();
    let redis = std::sync::Mutex::new(&mut redis);
    let figures = under_load(
        server.addr,
        &body(&key("redis-kill")),
        async { redis.lock().unwrap().stop().expect("stop redis-server") },
        async {
            redis
                .lock()
                .unwrap()
                .restart()
                .expect("restart redis-server")
        },
    )
    .await;
    // Restarted empty: the bucket is lost, so one more burst.
    check(&figures, "redis killed, restarted empty", 1.0, CAPACITY);
    assert!(figures.failed() > 0);
    assert_eq!(
        redis_cmd(port, &[b"PING"]).map(|r| format!("{r:?}")).ok(),
        Some("Status(\"PONG\")".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_flushall_and_script_flush_under_load() {
    let redis = TestRedis::start().expect("start redis-server");
    let server = serve(redis.url(), SLACK_TIMEOUT_MS);
    let port = redis.port();
    let figures = under_load(
        server.addr,
        &body(&key("redis-flush")),
        async {
            redis_cmd(port, &[b"SCRIPT", b"FLUSH"]).expect("SCRIPT FLUSH");
            redis_cmd(port, &[b"FLUSHALL"]).expect("FLUSHALL");
        },
        async {},
    )
    .await;
    // The scripts are loaded again at the next call; the bucket is lost: one more burst.
    check(&figures, "redis SCRIPT FLUSH + FLUSHALL", 0.0, CAPACITY);
    assert_eq!(figures.failed(), 0, "a flush is no outage");
}

/// The PostgreSQL URL of `pg` with its port replaced by `port`.
fn pg_url_on(pg: &TestPostgres, port: u16) -> String {
    pg.url()
        .replace(&format!(":{}/", pg.port()), &format!(":{port}/"))
}

/// Runs `sql` on `pg` with its own `psql`.
fn psql(pg: &TestPostgres, sql: &str) {
    let bin = pg.bin_dir().expect("a kit-started PostgreSQL");
    let out = std::process::Command::new(bin.join("psql"))
        .args([pg.url(), "-v", "ON_ERROR_STOP=1", "-qc", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stalled_behind_a_proxy() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let proxy = StallProxy::start(([127, 0, 0, 1], pg.port()).into()).expect("a proxy");
    let server = serve(&pg_url_on(&pg, proxy.port()), SLACK_TIMEOUT_MS);
    let figures = under_load(
        server.addr,
        &body(&key("pg-stall")),
        async { proxy.stall() },
        async { proxy.resume() },
    )
    .await;
    check(&figures, "postgres stalled", 0.5, 0);
    assert!(figures.failed() > 0);
}

/// Killed as in a crash (connections die mid-transaction) and restarted, at `isolation`.
async fn postgres_killed_and_restarted_at(isolation: &str) {
    let mut pg = TestPostgres::start().expect("start PostgreSQL");
    if !pg.is_owned() {
        return;
    }
    let server = Tollgate::start(&[
        "--store",
        pg.url(),
        "--on-store-error",
        "deny",
        "--store-timeout-ms",
        "100",
        "--postgres-isolation",
        isolation,
    ]);
    let pg = std::sync::Mutex::new(&mut pg);
    let figures = under_load(
        server.addr,
        &body(&key("pg-kill")),
        async { pg.lock().unwrap().stop().expect("stop PostgreSQL") },
        async { pg.lock().unwrap().restart().expect("restart PostgreSQL") },
    )
    .await;
    // Killed as in a crash, its last commits may be lost: one more burst at most.
    check(
        &figures,
        &format!("postgres killed, restarted ({isolation})"),
        1.5,
        CAPACITY,
    );
    assert!(figures.failed() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_and_restarted() {
    postgres_killed_and_restarted_at("read-committed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_and_restarted_under_serializable() {
    postgres_killed_and_restarted_at("serializable").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_table_truncated_then_dropped_under_load() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    if pg.bin_dir().is_none() {
        return; // psql comes with a kit-started server
    }
    let server = serve(pg.url(), SLACK_TIMEOUT_MS);
    let figures = under_load(
        server.addr,
        &body(&key("pg-truncate")),
        async { psql(&pg, "TRUNCATE tollgate.buckets") },
        async {},
    )
    .await;
    check(&figures, "postgres table truncated", 0.0, CAPACITY);
    assert_eq!(figures.failed(), 0, "a truncation is no outage");

    let figures = under_load(
        server.addr,
        &body(&key("pg-drop")),
        async { psql(&pg, "DROP TABLE tollgate.buckets CASCADE") },
        async {},
    )
    .await;
    // The store makes its table again where it may create its schema: the connection whose
    // statement met the missing table is replaced, and the new one makes the table.
    check(&figures, "postgres table dropped", 0.5, CAPACITY);
}

/// Failing open, the server allows during the stall what the fail policy allows, and beyond
/// those answers never more than the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stalled_failing_open_allows_no_more_than_the_fail_policy_did() {
    let redis = TestRedis::start().expect("start redis-server");
    let proxy = StallProxy::start(([127, 0, 0, 1], redis.port()).into()).expect("a proxy");
    let server = Tollgate::start(&[
        "--store",
        &redis_url_via(&proxy),
        "--on-store-error",
        "allow",
        "--store-timeout-ms",
        "50",
    ]);
    let figures = under_load(
        server.addr,
        &body(&key("redis-stall-open")),
        async { proxy.stall() },
        async { proxy.resume() },
    )
    .await;
    let metrics = reqwest::get(format!("http://{}/metrics", server.addr))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let by_fail_policy = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_fail_policy_decisions_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("the fail policy's count") as usize;
    eprintln!(
        "{} ({by_fail_policy} of them by the fail policy)",
        figures.line("redis stalled, failing open")
    );
    assert!(figures.longest_wait() <= WAIT_BOUND);
    assert_eq!(figures.failed(), 0, "failing open answers every request");
    assert!(by_fail_policy > 0);
    assert!(
        figures.allowed() - by_fail_policy <= bound(CAPACITY),
        "{} allowed, {by_fail_policy} by the fail policy: the store allowed more than {}",
        figures.allowed(),
        bound(CAPACITY)
    );
}

/// The gRPC and RESP front ends under the same stall, then their Redis connections cut: every
/// call answered within the timeout, `UNAVAILABLE` (gRPC) or an error reply (RESP) while Redis
/// is stalled, a call or two failed by the cut, decisions again after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_resp_under_a_redis_stall() {
    use support::envoy::{descriptor, request, write};
    let redis = TestRedis::start().expect("start redis-server");
    let proxy = StallProxy::start(([127, 0, 0, 1], redis.port()).into()).expect("a proxy");
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(
        dir.path(),
        &[(
            "f.yaml",
            "domain: f\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n",
        )],
    );
    let server = Tollgate::start(&[
        "--store",
        &redis_url_via(&proxy),
        "--on-store-error",
        "deny",
        "--store-timeout-ms",
        "50",
        "--grpc-listen",
        "127.0.0.1:0",
        "--resp-listen",
        "127.0.0.1:0",
        "--envoy-config-dir",
        dir.path().to_str().expect("a UTF-8 path"),
    ]);
    let mut grpc = support::envoy::client(server.grpc_addr()).await;
    let resp = redis::Client::open(format!("redis://{}", server.resp_addr())).expect("a URL");
    let mut resp = resp
        .get_multiplexed_async_connection()
        .await
        .expect("connect over RESP");
    let clock = tollgate::MonotonicClock::new();
    use tollgate::Clock;
    let ask = request("f", vec![descriptor(&[("k", "v")])]);
    // (longest wait, failures) of each front end, in three phases: before, stalled, after.
    let mut phases = Vec::new();
    // Before, stalled, after; then every connection to Redis cut, then after.
    for phase in 0..5 {
        match phase {
            1 => proxy.stall(),
            3 => proxy.cut(),
            _ => proxy.resume(),
        }
        // After a fault, the first calls may still meet its end.
        let settle = if phase % 2 == 0 && phase > 0 { 100 } else { 0 };
        tokio::time::sleep(std::time::Duration::from_millis(settle)).await;
        let (mut longest, mut grpc_failed, mut resp_failed) = (0.0f64, 0, 0);
        for _ in 0..20 {
            let started = clock.now();
            if grpc.should_rate_limit(ask.clone()).await.is_err() {
                grpc_failed += 1;
            }
            let reply: redis::RedisResult<Vec<i64>> = redis::cmd("CL.THROTTLE")
                .arg("fk")
                .arg(1_000_000)
                .arg(1_000_000)
                .arg(3600)
                .query_async(&mut resp)
                .await;
            if reply.is_err() {
                resp_failed += 1;
            }
            let took = std::time::Duration::from(clock.now() - started).as_secs_f64();
            longest = longest.max(took);
        }
        phases.push((longest, grpc_failed, resp_failed));
    }
    eprintln!(
        "FAULT grpc and resp, redis stalled then cut: (longest wait s, gRPC failures, RESP \
         failures) before, stalled, after, cut, after: {phases:?}"
    );
    for (longest, _, _) in &phases {
        assert!(
            *longest <= 2.0 * WAIT_BOUND,
            "a gRPC + RESP pair waited {longest:.3} s"
        );
    }
    assert_eq!((phases[0].1, phases[0].2), (0, 0), "before the stall");
    assert_eq!(
        (phases[1].1, phases[1].2),
        (20, 20),
        "during: the fail policy denies"
    );
    assert_eq!((phases[2].1, phases[2].2), (0, 0), "after: decisions again");
    // Cut connections are made again at once: a call or two may meet the cut.
    assert!(
        phases[3].1 + phases[3].2 <= 4,
        "after the cut: {:?}",
        phases[3]
    );
    assert_eq!((phases[4].1, phases[4].2), (0, 0), "and then none");
}
