//! `lease = true`: a hot policy is decided from leased tokens on Redis, with honest remaining
//! counts; what the leases hold goes back when the server stops; a reload turns leasing off.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tollgate::{Check, Policy, RedisStore, Store};
use tollgate_server::ServeError;
use tollgate_testkit::{TestRedis, command_calls};

/// 100,000 tokens that do not refill while the test runs.
fn config(redis: &TestRedis, lease: bool) -> String {
    format!(
        "[store]\nurl = \"{}\"\n\n[policies.all]\ncapacity = 100000\nrefill = 1\nperiod = \"1h\"\nlease = {lease}\n",
        redis.url()
    )
}

async fn serve(
    file: &Path,
) -> (
    SocketAddr,
    CancellationToken,
    JoinHandle<Result<(), ServeError>>,
) {
    let file = file.to_str().unwrap();
    let settings =
        tollgate_server::cli::serve_settings(["--config", file, "--listen", "127.0.0.1:0"])
            .unwrap();
    let server = tollgate_server::Server::bind(settings).await.unwrap();
    let addr = server.local_addr();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(server.run(shutdown.clone()));
    (addr, shutdown, running)
}

/// Script calls Redis ran so far.
fn script_calls(redis: &TestRedis) -> u64 {
    command_calls(redis.port(), "evalsha").unwrap()
}

/// `n` checks of `all` on key `k`, all allowed; each answer's `remaining` is the one before
/// less one, from `from` when given.
async fn check_down(client: &Client, addr: SocketAddr, from: Option<u64>, n: u64) {
    for i in 0..n {
        let response = client
            .post(format!("http://{addr}/v1/check"))
            .body(json!({"policy": "all", "key": "k"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        if let Some(from) = from {
            assert_eq!(body["remaining"], from - 1 - i, "check {i}: {body}");
        }
    }
}

/// What the bucket holds, as Redis alone says.
async fn remaining(redis: &TestRedis) -> u64 {
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let policy = Policy::token_bucket(100_000, 1, Duration::from_secs(3600)).unwrap();
    let peek = Check::new(policy, b"k", 0).named("all");
    store.decide(&[peek]).await.unwrap().decisions()[0].remaining()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_policy_is_decided_from_leases_and_they_go_back_at_shutdown() {
    let redis = TestRedis::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "tollgate.toml", &config(&redis, true));
    let (addr, shutdown, running) = serve(&file).await;
    let client = Client::new();
    let before = script_calls(&redis);
    // 16 clients at once, 40 checks each: hot enough to lease on a loaded machine too.
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { check_down(&client, addr, None, 40).await })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    let calls = script_calls(&redis) - before;
    // Without leases: a call per check, or per batch of the checks that wait together.
    assert!(calls <= 160, "{calls} script calls for 640 checks");
    let metrics = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let from_leases = support::metric(&metrics, "tollgate_lease_decisions_total");
    assert!(
        from_leases >= 320.0,
        "{from_leases} of 640 answered from leases"
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(remaining(&redis).await, 100_000 - 640);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_without_lease_decides_each_check_in_the_store() {
    let redis = TestRedis::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "tollgate.toml", &config(&redis, true));
    let (addr, shutdown, running) = serve(&file).await;
    let client = Client::new();
    check_down(&client, addr, Some(100_000), 100).await;
    support::write(dir.path(), "tollgate.toml", &config(&redis, false));
    // The file watch reloads within a second; then every check is a script call. (What the
    // lease held goes back within a lifetime, so `remaining` jumps by it meanwhile.)
    let mut reloaded = false;
    let mut checked = 100;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = script_calls(&redis);
        check_down(&client, addr, None, 20).await;
        checked += 20;
        if script_calls(&redis) - before == 20 {
            reloaded = true;
            break;
        }
    }
    assert!(reloaded, "leasing still on after the reload");
    shutdown.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(remaining(&redis).await, 100_000 - checked);
}
