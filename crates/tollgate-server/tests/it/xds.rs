//! Configuration over xDS against the test kit's management server ([`XdsServer`]): tollgate
//! started with `[grpc.xds]` follows the versions it is sent, ACKs good ones and NACKs bad ones
//! (the running config kept), survives the management server's restart, talks mutual TLS,
//! sends its node and extra headers, refuses a response over its size cap, and starts at once
//! or after the first version as `force_start_without_initial_config` says.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{RateLimitConfig, RateLimitUnit};
use tollgate_testkit::{Seen, TestCa, XdsServer, XdsServerTls};
use tonic::transport::Channel;

use crate::support::envoy::{client, codes, descriptor, request};
use crate::support::{Logs, Stopwatch, Tollgate};
use crate::xds_fixtures::{self as fx, LISTENER, SHARED};

/// `[grpc.xds]` toward `xds`, waits short (the defaults are seconds), and `extra` keys.
pub fn xds_toml(xds: SocketAddr, extra: &str) -> String {
    format!(
        "[grpc]\nlisten = \"127.0.0.1:0\"\n\n[grpc.xds]\nurl = \"{xds}\"\nnode_id = \"envoy-ratelimit\"\n\
         node_metadata = {{ cluster = \"gateway\" }}\nretry_interval = \"50ms\"\n\
         backoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n{extra}\n"
    )
}

/// A scratch directory holding `toml` as `tollgate.toml`; the file's path.
pub fn write_toml(toml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, toml).expect("the TOML file");
    (dir, path)
}

/// How these tests start tollgate: with the config file `path`, its logs kept.
pub fn start(path: &Path) -> (Tollgate, Logs) {
    Tollgate::start_logged(
        &[
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    )
}

/// Whether a request to `domain` of the one descriptor `entries` is allowed.
async fn allowed(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
) -> bool {
    let response = client
        .should_rate_limit(request(domain, vec![descriptor(entries)]))
        .await
        .expect("ShouldRateLimit answers")
        .into_inner();
    codes(&response).0 == "OK"
}

const EXACT: [(&str, &str); 2] = [
    ("first-route", "first-route"),
    ("rule-0-match-0", "rule-0-match-0"),
];

/// Counts the requests allowed of `n` sent.
async fn allowed_of(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
    n: usize,
) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(allowed(client, domain, entries).await);
    }
    ok
}

fn acked(version: &'static str) -> impl Fn(&[Seen]) -> bool {
    move |seen: &[Seen]| seen.iter().any(|s| s.acks(version))
}

/// Polls `logs` until they hold `text`.
fn until_logged(logs: &Logs, text: &str) {
    let watch = Stopwatch::start();
    while !logs.text().contains(text) {
        assert!(
            watch.elapsed() < Duration::from_secs(30),
            "no {text:?} in the logs:\n{}",
            logs.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn xds_versions_are_followed_acked_and_keep_unchanged_buckets() {
    let xds = XdsServer::start(None).unwrap();
    xds.set("v1", &[fx::listener(3)]);
    let toml = xds_toml(
        xds.addr(),
        "headers = { x-tenant = \"acme\", Authorization = \"Bearer t0k\" }",
    );
    let (_dir, path) = write_toml(&toml);
    let (server, _logs) = start(&path);
    // Without force start, tollgate listens only once the first version is in force.
    let seen = xds.wait_for("v1 ACKed", acked("v1")).unwrap();
    let first = &seen[0];
    assert_eq!(first.node_id, "envoy-ratelimit");
    assert_eq!(
        first.node_metadata.get("cluster").map(String::as_str),
        Some("gateway")
    );
    assert_eq!(first.type_url, tollgate_testkit::xds::TYPE_URL);
    assert_eq!(
        (first.version_info.as_str(), first.response_nonce.as_str()),
        ("", "")
    );
    assert_eq!(
        first.headers.get("x-tenant").map(String::as_str),
        Some("acme")
    );
    assert_eq!(
        first.headers.get("authorization").map(String::as_str),
        Some("Bearer t0k")
    );

    let mut c = client(server.grpc_addr()).await;
    // The exact header match: 3 a minute.
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 4).await, 3);
    // The distinct match: each value its own bucket of 2 an hour.
    let alice = [("first-route", "first-route"), ("rule-0-match-1", "alice")];
    let bob = [("first-route", "first-route"), ("rule-0-match-1", "bob")];
    assert_eq!(allowed_of(&mut c, LISTENER, &alice, 3).await, 2);
    assert_eq!(allowed_of(&mut c, LISTENER, &bob, 1).await, 1);
    // A rule without matches, a masked remote address, MONTH and YEAR.
    let no_match = [
        ("first-route", "first-route"),
        ("rule-1-match--1", "rule-1-match--1"),
    ];
    assert_eq!(allowed_of(&mut c, LISTENER, &no_match, 5).await, 4);
    let masked = [
        ("first-route", "first-route"),
        ("masked_remote_address", "127.0.0.1/32"),
    ];
    assert_eq!(allowed_of(&mut c, LISTENER, &masked, 2).await, 1);
    let monthly = [
        ("second-route", "second-route"),
        ("rule-0-match-0", "rule-0-match-0"),
    ];
    assert_eq!(allowed_of(&mut c, LISTENER, &monthly, 3).await, 2);
    let yearly = [
        ("second-route", "second-route"),
        ("rule-0-match-1", "rule-0-match-1"),
    ];
    assert_eq!(allowed_of(&mut c, LISTENER, &yearly, 2).await, 1);
    // Shadowed: over its limit, never denied.
    let shadow = [
        ("third-route", "third-route"),
        ("rule-0-match-0", "rule-0-match-0"),
        ("masked_remote_address", "0.0.0.0/0"),
    ];
    assert_eq!(allowed_of(&mut c, LISTENER, &shadow, 3).await, 3);
    // A domain not configured yet: allowed (no rule applies).
    assert!(allowed(&mut c, SHARED, &[(&format!("{SHARED}/rule/0"), "x")]).await);

    // v2 while traffic flows: the exact match and the distinct one unchanged (their buckets
    // kept), the masked address raised, a shared policy added as a second resource.
    let mut listener = fx::listener(3);
    listener.descriptors[0].descriptors[3] = fx::leaf(
        "masked_remote_address",
        "127.0.0.1/32",
        5,
        RateLimitUnit::Hour,
    );
    xds.set("v2", &[listener, fx::shared(1)]);
    let seen = xds.wait_for("v2 ACKed", acked("v2")).unwrap();
    let ack = seen.iter().find(|s| s.acks("v2")).unwrap();
    assert!(!ack.response_nonce.is_empty());
    // The ACK goes once the version is in force: no polling needed.
    assert!(
        !allowed(&mut c, LISTENER, &EXACT).await,
        "the exact match's bucket was lost"
    );
    assert!(
        !allowed(&mut c, LISTENER, &alice).await,
        "the distinct match's bucket was lost"
    );
    assert_eq!(allowed_of(&mut c, LISTENER, &masked, 5).await, 4);
    let shared_key = format!("{SHARED}/rule/0");
    let carol = [
        (shared_key.as_str(), shared_key.as_str()),
        ("rule-0-match-0", "carol"),
    ];
    assert_eq!(allowed_of(&mut c, SHARED, &carol, 2).await, 1);
}

#[tokio::test]
async fn xds_a_bad_version_is_nacked_and_the_running_one_stays() {
    let xds = XdsServer::start(None).unwrap();
    xds.set("v1", &[fx::listener(2)]);
    let (_dir, path) = write_toml(&xds_toml(xds.addr(), ""));
    let (server, logs) = start(&path);
    xds.wait_for("v1 ACKed", acked("v1")).unwrap();
    let mut c = client(server.grpc_addr()).await;
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 1).await, 1);

    // The same route twice: the file loader's error, named by the resource.
    let mut bad = fx::listener(100);
    bad.descriptors.push(fx::route("first-route", vec![]));
    xds.set("v2", &[bad]);
    let seen = xds
        .wait_for("v2 NACKed", |seen| {
            seen.iter().any(|s| s.error_detail.is_some())
        })
        .unwrap();
    let nack = seen.iter().find(|s| s.error_detail.is_some()).unwrap();
    assert_eq!(nack.version_info, "v1", "a NACK names the version in force");
    assert!(!nack.response_nonce.is_empty());
    assert_eq!(
        nack.error_detail.as_deref(),
        Some(
            "first-listener: duplicate descriptor composite key 'first-listener.first-route_first-route'"
        )
    );
    assert!(!seen.iter().any(|s| s.acks("v2")));
    // v1 still decides: 2 a minute, one used.
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 3).await, 1);
    until_logged(&logs, "NACK");

    // A unit the protocol has no name for is refused as a file's would be.
    let mut unknown = fx::listener(2);
    unknown.descriptors[0].descriptors[0]
        .rate_limit
        .as_mut()
        .unwrap()
        .unit = 0;
    xds.set("v3", &[unknown]);
    let seen = xds
        .wait_for("v3 NACKed", |seen| {
            seen.iter().filter(|s| s.error_detail.is_some()).count() == 2
        })
        .unwrap();
    let nack = seen
        .iter()
        .rev()
        .find(|s| s.error_detail.is_some())
        .unwrap();
    assert_eq!(
        nack.error_detail.as_deref(),
        Some("first-listener: invalid rate limit unit 'UNKNOWN'")
    );

    // Then a good one is taken.
    xds.set("v4", &[fx::listener(10)]);
    xds.wait_for("v4 ACKed", acked("v4")).unwrap();
    assert!(allowed(&mut c, LISTENER, &EXACT).await);
    let metrics = crate::support::get(&reqwest::Client::new(), &server, "/metrics").await;
    assert!(
        crate::support::metric(
            &metrics,
            "tollgate_envoy_config_loads_total{result=\"failure\"}"
        ) >= 2.0
    );
    // The console's load history has each version, newest first, the refused ones as such.
    let status = crate::support::get(&reqwest::Client::new(), &server, "/v1/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let versions: Vec<(&str, bool)> = status["loads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|load| load["trigger"] == "xDS")
        .map(|load| (load["source"].as_str().unwrap(), load["ok"] == true))
        .collect();
    assert_eq!(
        versions,
        [
            ("xDS version \"v4\"", true),
            ("xDS version \"v3\"", false),
            ("xDS version \"v2\"", false),
            ("xDS version \"v1\"", true),
        ],
        "{status}"
    );
}

#[tokio::test]
async fn xds_the_management_server_restarted_tollgate_keeps_serving_and_reconnects() {
    let mut xds = XdsServer::start(None).unwrap();
    xds.set("v1", &[fx::listener(2)]);
    let (_dir, path) = write_toml(&xds_toml(xds.addr(), ""));
    let (server, logs) = start(&path);
    xds.wait_for("v1 ACKed", acked("v1")).unwrap();
    let mut c = client(server.grpc_addr()).await;
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 1).await, 1);

    xds.stop();
    until_logged(&logs, "the xDS stream ended");
    // Serving on, from v1, its bucket as it was.
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 2).await, 1);
    xds.set("v2", &[fx::listener(2), fx::shared(1)]);
    xds.restart().unwrap();
    let seen = xds
        .wait_for("v2 ACKed after the restart", acked("v2"))
        .unwrap();
    // The new stream's first request names the version in force.
    let reopened = seen.iter().find(|s| s.stream > 1).unwrap();
    assert_eq!(
        (
            reopened.version_info.as_str(),
            reopened.response_nonce.as_str()
        ),
        ("v1", "")
    );
    assert!(
        !allowed(&mut c, LISTENER, &EXACT).await,
        "the bucket survived"
    );
    let shared_key = format!("{SHARED}/rule/0");
    let dan = [
        (shared_key.as_str(), shared_key.as_str()),
        ("rule-0-match-0", "dan"),
    ];
    assert_eq!(allowed_of(&mut c, SHARED, &dan, 2).await, 1);
}

/// A CA, the management server's certificate (for `localhost` and 127.0.0.1), and a client
/// certificate of `client_ca` (the same CA, or another).
fn certificates(dir: &Path, other_client_ca: bool) -> (XdsServerTls, TestCa, PathBuf, PathBuf) {
    let ca = TestCa::new(dir, "xds-ca").unwrap();
    let (cert, key) = ca
        .sign(dir, "xds-server", "localhost", "DNS:localhost,IP:127.0.0.1")
        .unwrap();
    let signer = if other_client_ca {
        TestCa::new(dir, "stranger-ca").unwrap()
    } else {
        ca.clone()
    };
    let (client_cert, client_key) = signer
        .sign(dir, "ratelimit", "envoy-ratelimit", "DNS:envoy-ratelimit")
        .unwrap();
    let tls = XdsServerTls {
        cert,
        key,
        client_ca: Some(ca.cert.clone()),
    };
    (tls, ca, client_cert, client_key)
}

fn tls_toml(xds: SocketAddr, ca: &Path, cert: &Path, key: &Path, extra: &str) -> String {
    xds_toml(
        xds,
        &format!(
            "{extra}\n[grpc.xds.tls]\nca = {:?}\ncert = {:?}\nkey = {:?}\nserver_name = \"localhost\"\n",
            ca.to_str().unwrap(),
            cert.to_str().unwrap(),
            key.to_str().unwrap()
        ),
    )
}

#[tokio::test]
async fn xds_over_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (tls, ca, cert, key) = certificates(dir.path(), false);
    let xds = XdsServer::start(Some(tls)).unwrap();
    xds.set("v1", &[fx::listener(1)]);
    let (_toml_dir, path) = write_toml(&tls_toml(xds.addr(), &ca.cert, &cert, &key, ""));
    let (server, _logs) = start(&path);
    xds.wait_for("v1 ACKed over mutual TLS", acked("v1"))
        .unwrap();
    let mut c = client(server.grpc_addr()).await;
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 2).await, 1);
    assert!(xds.handshake_failures().is_empty());
}

#[tokio::test]
async fn xds_a_client_certificate_the_server_refuses_gets_no_config() {
    let dir = tempfile::tempdir().unwrap();
    let (tls, ca, cert, key) = certificates(dir.path(), true);
    let xds = XdsServer::start(Some(tls)).unwrap();
    xds.set("v1", &[fx::listener(1)]);
    let toml = tls_toml(
        xds.addr(),
        &ca.cert,
        &cert,
        &key,
        "force_start_without_initial_config = true",
    );
    let (_toml_dir, path) = write_toml(&toml);
    let (server, logs) = start(&path);
    until_logged(&logs, "xDS management server");
    let watch = Stopwatch::start();
    while xds.handshake_failures().is_empty() {
        assert!(
            watch.elapsed() < Duration::from_secs(30),
            "the server never refused the handshake"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        xds.seen().is_empty(),
        "a refused client was served: {:?}",
        xds.seen()
    );
    // The TLS alert the management server sent, in the log.
    until_logged(&logs, "received fatal alert");
    let mut c = client(server.grpc_addr()).await;
    let status = c
        .should_rate_limit(request(LISTENER, vec![descriptor(&EXACT)]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unknown);
    assert_eq!(status.message(), "no rate limit configuration loaded");
}

#[tokio::test]
async fn xds_force_start_serves_at_once_and_answers_an_error_until_the_first_version() {
    let xds = XdsServer::start(None).unwrap();
    let (_dir, path) = write_toml(&xds_toml(
        xds.addr(),
        "force_start_without_initial_config = true",
    ));
    // No version yet: the banner comes anyway.
    let (server, _logs) = start(&path);
    assert!(server.banner.contains("none yet"), "{}", server.banner);
    xds.wait_for("the first request", |seen| !seen.is_empty())
        .unwrap();
    let mut c = client(server.grpc_addr()).await;
    // Any domain, known or not, gets upstream's error meanwhile.
    for domain in [LISTENER, "never-configured"] {
        let status = c
            .should_rate_limit(request(domain, vec![descriptor(&EXACT)]))
            .await
            .unwrap_err();
        assert_eq!(
            (status.code(), status.message()),
            (tonic::Code::Unknown, "no rate limit configuration loaded")
        );
    }
    let json = reqwest::Client::new()
        .post(format!("http://{}/json", server.addr))
        .body(
            r#"{"domain":"first-listener","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    xds.set("v1", &[fx::listener(1)]);
    xds.wait_for("v1 ACKed", acked("v1")).unwrap();
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 2).await, 1);
    assert!(allowed(&mut c, "never-configured", &EXACT).await);
}

#[tokio::test]
async fn xds_without_force_start_listens_only_once_the_first_version_is_handled() {
    let xds = XdsServer::start(None).unwrap();
    let (_dir, path) = write_toml(&xds_toml(xds.addr(), ""));
    let starting = std::thread::spawn(move || start(&path));
    xds.wait_for("the first request", |seen| !seen.is_empty())
        .unwrap();
    // Asked, not answered: no banner, nothing listens.
    assert!(
        !starting.is_finished(),
        "tollgate started before any config came"
    );
    xds.set("v1", &[fx::listener(1)]);
    let (server, _logs) = starting.join().unwrap();
    assert!(!server.banner.contains("none yet"), "{}", server.banner);
    let mut c = client(server.grpc_addr()).await;
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 2).await, 1);
}

#[tokio::test]
async fn xds_a_response_over_the_size_cap_is_refused_and_the_stream_reopened() {
    let xds = XdsServer::start(None).unwrap();
    xds.set("v1", &[fx::listener(1)]);
    let (_dir, path) = write_toml(&xds_toml(xds.addr(), "max_message_size = 4096"));
    let (server, logs) = start(&path);
    xds.wait_for("v1 ACKed", acked("v1")).unwrap();
    // Two hundred routes: well over 4 KiB.
    let mut big: RateLimitConfig = fx::listener(1);
    for i in 0..200 {
        big.descriptors.push(fx::route(
            &format!("route-{i}"),
            vec![fx::leaf("rule-0-match-0", "", 1, RateLimitUnit::Minute)],
        ));
    }
    xds.set("v2", &[big]);
    let seen = xds
        .wait_for("a new stream after the refused response", |seen| {
            seen.iter().any(|s| s.stream > 1)
        })
        .unwrap();
    let reopened = seen.iter().find(|s| s.stream > 1).unwrap();
    assert_eq!(reopened.version_info, "v1");
    assert!(
        !seen
            .iter()
            .any(|s| s.acks("v2") || s.error_detail.is_some())
    );
    until_logged(&logs, "message length too large");
    let mut c = client(server.grpc_addr()).await;
    assert_eq!(allowed_of(&mut c, LISTENER, &EXACT, 2).await, 1);
}

#[test]
fn xds_settings_that_can_never_work_stop_the_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let cases = [
        ("[grpc.xds]\nurl = \"no-port\"\n".to_owned(), "grpc.xds.url"),
        (
            format!(
                "[grpc.xds]\nurl = \"127.0.0.1:1\"\n[grpc.xds.tls]\nca = {:?}\n",
                missing.to_str().unwrap()
            ),
            "grpc.xds.tls.ca",
        ),
        (
            "[grpc.xds]\nurl = \"127.0.0.1:1\"\nheaders = { \"bad header\" = \"v\" }\n".to_owned(),
            "grpc.xds.headers.bad header",
        ),
        (
            "[grpc.xds]\nmax_message_size = 0\n".to_owned(),
            "grpc.xds.max_message_size",
        ),
        (
            "[grpc]\nconfig_dir = \"envoy\"\n[grpc.xds]\nurl = \"127.0.0.1:1\"\n".to_owned(),
            "grpc.xds",
        ),
        (
            "[grpc.xds]\nbackoff_max = \"soon\"\n".to_owned(),
            "grpc.xds.backoff_max",
        ),
    ];
    for (toml, key) in cases {
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, &toml).unwrap();
        let (ok, _, stderr) = crate::support::config_check(&path);
        assert!(!ok, "{toml} was accepted");
        assert!(
            stderr.contains(&format!(": {key}: ")),
            "{key} not named in {stderr}"
        );
    }
    // And a start is refused alike, before anything listens.
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        format!(
            "[grpc.xds]\nurl = \"127.0.0.1:1\"\n[grpc.xds.tls]\nca = {:?}\n",
            missing.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("grpc.xds.tls.ca"), "{stderr}");
    // A directory on the command line and [grpc.xds] in the file: two sources, refused.
    std::fs::write(&path, "[grpc.xds]\nurl = \"127.0.0.1:1\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--envoy-config-dir", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("grpc.xds: --envoy-config-dir and [grpc.xds]"),
        "{stderr}"
    );
}

#[test]
fn xds_a_signal_while_waiting_for_the_first_version_ends_tollgate_cleanly() {
    let xds = XdsServer::start(None).unwrap();
    let (_dir, path) = write_toml(&xds_toml(xds.addr(), ""));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    xds.wait_for("the first request", |seen| !seen.is_empty())
        .unwrap();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let watch = Stopwatch::start();
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            watch.elapsed() < Duration::from_secs(30),
            "tollgate kept waiting after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exited.success(), "{exited}");
    let mut banner = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut banner).unwrap();
    assert_eq!(banner, "", "nothing listened");
}
