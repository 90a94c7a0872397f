//! Three server processes answering Envoy's gRPC API on one Redis and on one PostgreSQL: 64
//! concurrent clients on one descriptor for 3 s never exceed the exact bound of the algorithm.

use crate::support;

use std::net::SocketAddr;

use support::Tollgate;
use support::envoy::{configured, descriptor, fixed_window_bound, hammer, request, write};
use tollgate::{Clock, MonotonicClock};
use tollgate_testkit::{TestPostgres, TestRedis};

/// Ten per minute on `k`, in domain `exact`.
const CONFIG: &str = "domain: exact\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";

/// Three servers on `store` (with `extra` options), sharing `dir`'s config.
fn three(dir: &std::path::Path, store: &[&str], extra: &[&str]) -> Vec<Tollgate> {
    let mut args = vec![
        "--grpc-listen",
        "127.0.0.1:0",
        "--envoy-config-dir",
        dir.to_str().expect("a UTF-8 path"),
    ];
    args.extend_from_slice(&support::PATIENT);
    args.extend_from_slice(store);
    args.extend_from_slice(extra);
    (0..3).map(|_| Tollgate::start(&args)).collect()
}

async fn fixed_windows_are_exact(store: &[&str]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(dir.path(), &[("exact.yaml", CONFIG)]);
    let servers = three(dir.path(), store, &[]);
    let addrs: Vec<SocketAddr> = servers.iter().map(Tollgate::grpc_addr).collect();
    // A fresh value per run, so an external store holds no earlier count.
    let value = format!("fw-{}", std::process::id());
    let (allowed, errors, span) =
        hammer(&addrs, request("exact", vec![descriptor(&[("k", &value)])])).await;
    let bound = fixed_window_bound(10, 60, span);
    assert_eq!(errors, 0, "gRPC errors");
    assert!(allowed <= bound, "allowed {allowed}, the bound is {bound}");
    assert!(allowed >= 10, "allowed {allowed}: a window's 10 at least");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_one_redis_never_exceed_the_fixed_windows() {
    let redis = TestRedis::start().expect("start redis-server");
    fixed_windows_are_exact(&["--store", redis.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_one_postgres_never_exceed_the_fixed_windows() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    fixed_windows_are_exact(&["--store", pg.url(), "--postgres-table", "envoy_exact"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_one_redis_never_exceed_the_token_bucket() {
    let redis = TestRedis::start().expect("start redis-server");
    // 10 at once, then 10 per second: at most 40 in 3 s.
    let (dir, toml) = configured(
        "algorithm = \"token_bucket\"",
        &[(
            "tb.yaml",
            "domain: tb\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
        )],
    );
    let envoy = dir.path().join("envoy");
    let servers = three(
        &envoy,
        &["--store", redis.url()],
        &["--config", toml.to_str().expect("a UTF-8 path")],
    );
    let addrs: Vec<SocketAddr> = servers.iter().map(Tollgate::grpc_addr).collect();
    let value = format!("tb-{}", std::process::id());
    let (allowed, errors, (start, end)) =
        hammer(&addrs, request("tb", vec![descriptor(&[("k", &value)])])).await;
    assert_eq!(errors, 0, "gRPC errors");
    let bound = 10 + (10.0 * (end - start)).floor() as u64;
    assert!(allowed <= bound, "allowed {allowed}, the bound is {bound}");
    assert!(allowed >= 38, "allowed {allowed}: 10 + 10/s × 3 s is 40");
}

/// Redis stopped: with `deny`, every call is `UNAVAILABLE` within the timeout; with `allow`,
/// OK. Neither hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_down_is_answered_by_the_fail_policy_within_the_timeout() {
    let mut redis = TestRedis::start().expect("start redis-server");
    if !redis.is_owned() {
        // An external Redis (TOLLGATE_REDIS_URL) cannot be stopped here.
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(dir.path(), &[("exact.yaml", CONFIG)]);
    let start = |policy: &str| {
        Tollgate::start(&[
            "--grpc-listen",
            "127.0.0.1:0",
            "--envoy-config-dir",
            dir.path().to_str().expect("a UTF-8 path"),
            "--store",
            redis.url(),
            "--on-store-error",
            policy,
            "--store-timeout-ms",
            "50",
        ])
    };
    let (deny, allow) = (start("deny"), start("allow"));
    redis.stop().expect("stop redis-server");
    let ask = request("exact", vec![descriptor(&[("k", "down")])]);
    let clock = MonotonicClock::new();
    for (server, policy) in [(&deny, "deny"), (&allow, "allow")] {
        let mut client = support::envoy::client(server.grpc_addr()).await;
        for _ in 0..5 {
            let started = clock.now();
            let answer = client.should_rate_limit(ask.clone()).await;
            let took = std::time::Duration::from(clock.now() - started);
            assert!(
                took < std::time::Duration::from_millis(500),
                "{policy}: answered after {took:?}, the timeout is 50 ms"
            );
            match (policy, answer) {
                ("deny", Err(status)) => {
                    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                }
                ("allow", Ok(r)) => assert_eq!(support::envoy::codes(r.get_ref()).0, "OK"),
                (_, other) => panic!("{policy}: {other:?}"),
            }
        }
    }
}

/// A limit the store cannot count under the chosen algorithm stops the server at start,
/// naming the limit (Redis computes in Lua's doubles: a sliding counter over a year of many
/// requests is beyond them).
#[test]
fn a_limit_beyond_the_store_is_refused_at_start() {
    let redis = TestRedis::start().expect("start redis-server");
    let (_dir, toml) = configured(
        "listen = \"127.0.0.1:0\"\nalgorithm = \"sliding_counter\"",
        &[(
            "y.yaml",
            "domain: y\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 4000000000}\n",
        )],
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            redis.url(),
            "--config",
        ])
        .arg(&toml)
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("y.k: the redis store cannot count it with sliding_counter"),
        "{stderr}"
    );
}
