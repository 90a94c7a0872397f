//! `tollgate serve --store redis://...`: exact across server processes sharing one Redis, and
//! the configured outcome, within the timeout, while Redis is down.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tollgate::{Clock, MonotonicClock, Nanos};
use tollgate_testkit::{TestRedis, TestRedisCluster};

use support::Tollgate;

fn body(key: &str) -> String {
    format!(r#"{{"key": "{key}", "capacity": 10, "refill": 10, "period_ms": 1000}}"#)
}

/// Burst 10, refilled at 10 per hour: no token comes back while the test runs, however slowly
/// calls fail while Redis is down.
fn slow_body(key: &str) -> String {
    format!(r#"{{"key": "{key}", "capacity": 10, "refill": 10, "period_ms": 3600000}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_server_processes_sharing_one_redis_allow_38_to_40_in_3_seconds() {
    let redis = TestRedis::start().expect("start redis-server");
    let args = [&["--store", redis.url()][..], &support::PATIENT].concat();
    let servers: Vec<Tollgate> = (0..3).map(|_| Tollgate::start(&args)).collect();
    for server in &servers {
        assert!(server.banner.contains("store: redis"), "{}", server.banner);
    }
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    // A fresh key per run, so an external TOLLGATE_REDIS_URL holds no earlier state.
    let key = format!("exact-{}", std::process::id());
    let (allowed, other) = support::hammer(&addrs, &body(&key)).await;
    assert_eq!(other, 0, "answers other than 200/429");
    assert!(
        (38..=40).contains(&allowed),
        "allowed {allowed}: burst 10 + 10/s × 3 s bounds it by 40"
    );
}

/// An in-process server on `--store <redis> <extra args>`.
async fn serve(redis: &TestRedis, extra: &[&str]) -> (SocketAddr, CancellationToken) {
    let mut argv = vec!["--store", redis.url(), "--store-timeout-ms", "100"];
    argv.extend_from_slice(extra);
    // Without a subcommand, the options are `serve`'s.
    argv.extend_from_slice(&["--listen", "127.0.0.1:0"]);
    let settings = tollgate_server::cli::serve_settings(argv).unwrap();
    let server = tollgate_server::Server::bind(settings).await.unwrap();
    let addr = server.local_addr();
    let shutdown = CancellationToken::new();
    tokio::spawn(server.run(shutdown.clone()));
    (addr, shutdown)
}

/// Posts a check and returns its status and how long it took.
async fn timed_check(client: &Client, addr: SocketAddr, key: &str) -> (StatusCode, Duration) {
    timed_post(client, addr, slow_body(key)).await
}

async fn timed_post(client: &Client, addr: SocketAddr, body: String) -> (StatusCode, Duration) {
    let clock = MonotonicClock::new();
    let start = clock.now();
    let response = client
        .post(format!("http://{addr}/v1/check"))
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status(), Duration::from(clock.now() - start))
}

async fn ready(client: &Client, addr: SocketAddr) -> StatusCode {
    let response = client.get(format!("http://{addr}/readyz")).send().await;
    response.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fail_policy_answers_within_the_timeout_while_redis_is_down_and_recovers() {
    let mut redis = TestRedis::start().expect("start redis-server");
    if !redis.is_owned() {
        eprintln!("TOLLGATE_REDIS_URL names an external Redis, which this test cannot stop");
        return;
    }
    let (open, _o) = serve(&redis, &["--on-store-error", "allow"]).await;
    let (closed, _c) = serve(&redis, &["--on-store-error", "deny"]).await;
    let (local, _l) = serve(&redis, &["--on-store-error", "local"]).await;
    let client = Client::new();
    for addr in [open, closed, local] {
        assert_eq!(timed_check(&client, addr, "up").await.0, StatusCode::OK);
        assert_eq!(ready(&client, addr).await, StatusCode::OK);
    }

    redis.stop().unwrap();
    // A bound generous enough for a loaded 2-core machine, far below a hang.
    let bound = Duration::from_millis(100 + 400);
    let (status, took) = timed_check(&client, open, "down").await;
    assert_eq!(status, StatusCode::OK, "fail open allows");
    assert!(took < bound, "took {took:?}");

    let (status, took) = timed_check(&client, closed, "down").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "fail closed is a 503"
    );
    assert!(took < bound, "took {took:?}");
    let response = client
        .post(format!("http://{closed}/v1/check"))
        .body(body("down"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(response.headers()["retry-after"], "1");

    // The local fallback enforces the limit in this process: 10, then 429.
    for i in 0..10 {
        let (status, took) = timed_check(&client, local, "down").await;
        assert_eq!(status, StatusCode::OK, "local check {i}");
        assert!(took < bound, "took {took:?}");
    }
    assert_eq!(
        timed_check(&client, local, "down").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    for addr in [open, closed, local] {
        assert_eq!(ready(&client, addr).await, StatusCode::SERVICE_UNAVAILABLE);
    }

    redis.restart().unwrap();
    // Each server reconnects on its own, when a call finds the old connection dead.
    let clock = MonotonicClock::new();
    let start = clock.now();
    for addr in [open, closed, local] {
        while ready(&client, addr).await != StatusCode::OK {
            assert!(
                clock.now() - start < Nanos::new(1_000_000_000),
                "{addr} did not recover within 1 s of Redis coming back"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Decisions come from Redis again: the fail-closed server answers, and the key that the
    // local fallback drained is full in Redis.
    assert_eq!(timed_check(&client, closed, "back").await.0, StatusCode::OK);
    assert_eq!(timed_check(&client, local, "down").await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comma_separated_store_is_a_redis_cluster() {
    let cluster = TestRedisCluster::start(3).expect("start a 3-master cluster");
    let seeds = cluster.urls().join(",");
    let server = Tollgate::start(&[&["--store", &seeds][..], &support::PATIENT].concat());
    assert!(server.banner.contains("redis cluster"), "{}", server.banner);
    let client = Client::new();
    // Whichever master holds a key's slot, its bucket counts exactly.
    for key in ["alice", "bob", "carol", "dave"] {
        for i in 0..10 {
            let (status, _) = timed_check(&client, server.addr, key).await;
            assert_eq!(status, StatusCode::OK, "{key} check {i}");
        }
        let (status, _) = timed_check(&client, server.addr, key).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{key}");
    }
}

/// An inline policy beyond what the Redis store can compute was once refused as
/// `"field": "cost"`, which named the wrong input; it is a `400` naming the number to change,
/// and nothing is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_policy_beyond_redis_names_its_field() {
    let redis = TestRedis::start().expect("start redis-server");
    let (addr, shutdown) = serve(&redis, &[]).await;
    let client = Client::new();
    let cases = [
        (
            r#"{"key": "k", "capacity": 1, "refill": 1, "period_ms": 4550000000000}"#,
            "period_ms",
        ),
        (
            r#"{"key": "k", "capacity": 4550000000, "refill": 1, "period_ms": 1000}"#,
            "capacity",
        ),
    ];
    for (body, field) in cases {
        let response = client
            .post(format!("http://{addr}/v1/check"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        let problem: serde_json::Value =
            serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(problem["field"], field, "{problem}");
    }
    shutdown.cancel();
}

/// Reservations commit at most once across servers: three servers on one Redis, reservations made on one, committed on another,
/// replayed on the third: the bound holds (kept = reserved - refunded <= 10 + 10/s) and every
/// replay is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_reserve_and_commit_within_the_bound() {
    let redis = TestRedis::start().expect("start redis-server");
    let args = [&["--store", redis.url()][..], &support::PATIENT].concat();
    let servers: Vec<Tollgate> = (0..3)
        .map(|_| Tollgate::start_with_env(&args, &[support::SECRET]))
        .collect();
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let key = format!("reserve-{}", std::process::id());
    let body = format!(
        r#"{{"key": "{key}", "capacity": 10, "refill": 10, "period_ms": 1000, "cost": 4}}"#
    );
    let settled = support::reserve_and_commit(&addrs, &body, 4).await;
    support::assert_settled_within_the_bound(&settled);
}

/// Two named policies in one check, on a 3-master Redis Cluster, through the server:
/// every policy of one key lands in one hash slot, so the check is one atomic script; each
/// policy's bound is exact and nothing is a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_named_policies_in_one_check_on_a_redis_cluster() {
    let cluster = tollgate_testkit::TestRedisCluster::start(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(
        &file,
        format!(
            "[store]\nurl = \"{}\"\ntimeout = \"2s\"\non_error = \"deny\"\n[policies.per_second]\ncapacity = 5\nperiod = \"1s\"\n\
             [policies.per_hour]\ncapacity = 8\nperiod = \"1h\"\n",
            cluster.urls().join(",")
        ),
    )
    .unwrap();
    let server = support::Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    let both = json!({"policies": ["per_second", "per_hour"], "key": "alice"});
    let statuses = |n: usize| {
        let (client, both) = (client.clone(), both.clone());
        let server = &server;
        async move {
            let mut seen = Vec::new();
            for _ in 0..n {
                seen.push(
                    support::check(&client, server, both.clone())
                        .await
                        .0
                        .as_u16(),
                );
            }
            seen
        }
    };
    // The per-second bucket binds after 5; nothing is charged for the denials.
    assert_eq!(statuses(7).await, [200, 200, 200, 200, 200, 429, 429]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // A second later the per-second bucket is full again, and the hourly one has 3 left.
    assert_eq!(statuses(5).await, [200, 200, 200, 429, 429]);
    let (_, body) = support::check(&client, &server, both).await;
    assert_eq!(body["policy"], "per_hour", "{body}");
    // The per-second bucket paid for the 3 allowed, none of the 3 denied.
    assert_eq!(body["policies"][0]["remaining"], 2, "{body}");
}
