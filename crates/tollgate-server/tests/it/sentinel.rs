//! `tollgate serve --store redis+sentinel://...`: the primary found through the sentinels,
//! followed across a failover, the durability keys of `[store]` read, and what can never work
//! refused at start and by `config check`, naming the field.

use crate::store_config::refused_at_start_with;
use crate::support::{self, Tollgate, config_check};

use std::time::Duration;

use reqwest::{Client, StatusCode};
use tollgate_testkit::SentinelSet;

/// Burst 5, refilled at 5 an hour: no token comes back while the test runs.
fn body(key: &str) -> String {
    format!(r#"{{"key": "{key}", "capacity": 5, "refill": 5, "period_ms": 3600000}}"#)
}

/// Sends `tries` checks of `key`; how many were allowed (200), and how many answered otherwise
/// than 200 or 429.
async fn allowed(client: &Client, server: &Tollgate, key: &str, tries: usize) -> (usize, usize) {
    let (mut allowed, mut other) = (0, 0);
    for _ in 0..tries {
        let status = client
            .post(format!("http://{}/v1/check", server.addr))
            .body(body(key))
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap()
            .status();
        match status {
            StatusCode::OK => allowed += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            _ => other += 1,
        }
    }
    (allowed, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_decides_on_the_primary_and_follows_a_failover() {
    let mut set = SentinelSet::start(2, 3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "tollgate.toml",
        &format!(
            "[store]\nurl = \"{}\"\ntimeout = \"1s\"\non_error = \"deny\"\nwait_replicas = 1\n\
             wait_timeout_ms = 500\n",
            set.url()
        ),
    );
    let (ok, out, err) = config_check(&file);
    assert!(ok, "{out}{err}");
    let config = file.to_str().unwrap();
    // Logged: a server that does not start says why in the panic.
    let (server, _logs) =
        Tollgate::start_logged(&["--config", config, "--listen", "127.0.0.1:0"], &[]);
    assert!(
        server.banner.contains("redis+sentinel://"),
        "{}",
        server.banner
    );
    let client = Client::new();
    assert_eq!(allowed(&client, &server, "before", 7).await, (5, 0));

    set.kill_primary().unwrap();
    tokio::task::block_in_place(|| set.wait_for_new_primary(Duration::from_secs(60))).unwrap();
    // Exact again once the server follows (the fail policy, deny, answers meanwhile).
    let mut waited = 0;
    while allowed(&client, &server, "probe", 1).await != (1, 0) {
        waited += 1;
        assert!(waited < 600, "the server never followed the failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(allowed(&client, &server, "after", 7).await, (5, 0));
    // What was acknowledged by a replica survived: the bucket of "before" is still empty.
    assert_eq!(allowed(&client, &server, "before", 2).await, (0, 0));
}

#[test]
fn an_unknown_master_name_is_refused_at_start_and_by_config_check() {
    let set = SentinelSet::start(1, 1).unwrap();
    let port = set.sentinel_ports()[0];
    // Redis's own password (never sent to the sentinels) is never shown either.
    let url = format!("redis+sentinel://:s3cret@127.0.0.1:{port}/nobody");
    refused_at_start_with(&url, &[], &["knows a master named \"nobody\""]);
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "tollgate.toml",
        &format!("[store]\nurl = \"{url}\"\n"),
    );
    let (ok, out, err) = config_check(&file);
    assert!(!ok, "{out}");
    assert!(err.contains("\"nobody\""), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}
