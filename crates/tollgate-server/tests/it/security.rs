//! Issue 45, security round two: no file, reload or guess can switch authentication off, hang
//! the server or guess a token. Each test names the point of the issue it pins, and fails on
//! the code before it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

use crate::support::auth::{
    APP, OPS, VIEWER, VIEWER_ENV, WRONG, command, configured, grpc, resp, send, start,
};
use crate::support::envoy::{descriptor, request};
use crate::support::{Tollgate, config_check, metric};

/// Another address of the loopback network: an honest client beside the guesser at 127.0.0.1.
const ELSEWHERE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// Polls `ready` every 50 ms until it holds, for at most `limit`.
async fn until(what: &str, limit: Duration, mut ready: impl AsyncFnMut() -> bool) {
    let clock = tollgate::MonotonicClock::new();
    let started = tollgate::Clock::now(&clock);
    while !ready().await {
        let waited = Duration::from(tollgate::Clock::now(&clock) - started);
        assert!(waited < limit, "{what} never came within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn hangup(server: &Tollgate) {
    let status = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// A client that gives up after 2 s, and opens a new connection for every request.
fn impatient(from: Option<IpAddr>) -> Client {
    Client::builder()
        .timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(0)
        .local_address(from)
        .build()
        .unwrap()
}

/// The server's metrics, asked with `ops`'s token.
async fn metrics(server: &Tollgate) -> String {
    let client = impatient(Some(ELSEWHERE));
    let (status, _, text) = send(&client, server, Method::GET, "/metrics", Some(OPS), None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    text
}

/// Sends SIGTERM and expects the process to be gone within 5 s.
fn terminates(mut server: Tollgate) {
    server.terminate();
    assert!(
        server.wait(Duration::from_secs(5)).is_some(),
        "SIGTERM did not end the server within 5 s"
    );
}

/// The value of `series`, 0 when the server does not have it.
fn count(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// 1: a secret file that becomes a FIFO, then SIGHUP: the reload reads it on the file reader's
/// thread, refuses it by path and reason, and counts it; `/healthz` answers all along and
/// SIGTERM ends the server. It once hung every request, and SIGTERM never ended it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_file_become_a_fifo_neither_hangs_the_server_nor_its_shutdown() {
    let (dir, config) = configured();
    let (server, logs) = Tollgate::start_logged(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
        &[(VIEWER_ENV, VIEWER)],
    );
    let ops = dir.path().join("secrets/ops");
    std::fs::remove_file(&ops).unwrap();
    mkfifo(&ops);
    // Signalled every 50 ms for 2 s, and asked `/healthz` (on a new connection each time)
    // meanwhile: each answers within its 2 s.
    let clock = tollgate::MonotonicClock::new();
    let started = tollgate::Clock::now(&clock);
    while Duration::from(tollgate::Clock::now(&clock) - started) < Duration::from_secs(2) {
        hangup(&server);
        let client = impatient(None);
        let (status, _, _) = send(&client, &server, Method::GET, "/healthz", None, None).await;
        assert_eq!(status, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The tokens in force stay: app still decides, and the refusal is counted.
    let check = Some(json!({"policy": "api", "key": "k"}));
    let client = impatient(None);
    let (status, _, _) = send(
        &client,
        &server,
        Method::POST,
        "/v1/check",
        Some(APP),
        check,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let refused = count(
        &metrics(&server).await,
        "tollgate_file_refusals_total{kind=\"secret\"}",
    );
    terminates(server);
    assert!(refused >= 1.0, "the FIFO's refusal was not counted");
    let text = logs.text();
    assert!(
        text.contains(&format!(
            "the secret file {} is refused: it must be a regular file; this is a FIFO",
            ops.display()
        )),
        "{text}"
    );
}

/// 1, the Envoy directory: a FIFO put in it is refused by path and reason (it was skipped
/// unsaid), the running Envoy config stays, and SIGTERM ends the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_the_envoy_directory_is_refused_and_the_config_stays() {
    let (dir, config) = configured();
    let server = start(&config);
    mkfifo(&dir.path().join("envoy/more.yaml"));
    let refused = "tollgate_file_refusals_total{kind=\"envoy_yaml\"}";
    until("the FIFO's refusal", Duration::from_secs(10), async || {
        hangup(&server);
        count(&metrics(&server).await, refused) >= 1.0
    })
    .await;
    // d.yaml still decides (100 a minute): an unknown domain would be answered without a limit.
    let decided = grpc(
        server.grpc_addr(),
        request("d", vec![descriptor(&[("k", "v")])]),
        Some(APP),
    )
    .await
    .unwrap();
    let limit = decided.statuses[0].current_limit.as_ref().expect("a limit");
    assert_eq!(limit.requests_per_unit, 100);
    assert_eq!(decided.statuses[0].limit_remaining, 99);
    terminates(server);
}

/// 2: an emptied config file, or one whose `[auth]` is deleted, is refused (logged at error,
/// counted): every front end keeps asking for a token. It once served everything unasked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_never_switches_authentication_off() {
    let (_dir, config) = configured();
    let server = start(&config);
    let text = std::fs::read_to_string(&config).unwrap();
    let without_auth = text[..text.find("[auth.tokens.app]").unwrap()].to_owned();
    let failures = "tollgate_config_reloads_total{result=\"failure\"}";
    for (what, edit) in [("emptied", String::new()), ("[auth] deleted", without_auth)] {
        let before = metric(&metrics(&server).await, failures);
        std::fs::write(&config, &edit).unwrap();
        until(
            &format!("the refusal of the {what} file"),
            Duration::from_secs(10),
            async || metric(&metrics(&server).await, failures) > before,
        )
        .await;
        let client = impatient(None);
        let (status, _, _) = send(&client, &server, Method::GET, "/metrics", None, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
        let inline = "/v1/buckets/api/k";
        let (status, _, _) = send(&client, &server, Method::DELETE, inline, None, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
        let refused = grpc(
            server.grpc_addr(),
            request("d", vec![descriptor(&[("k", "v")])]),
            None,
        )
        .await
        .unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{what}");
        let decide = command(&["TOLLGATE.CHECK", "api", "k"]);
        assert_eq!(
            resp(server.resp_addr(), decide.as_bytes()),
            "-NOAUTH Authentication required.\r\n",
            "{what}"
        );
    }
}

/// 2, the password: a RESP-only server with `[resp] password` refuses a reload that leaves
/// neither a password nor a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_drops_the_only_password_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let with = "[resp]\nlisten = \"127.0.0.1:0\"\npassword = \"pw-for-default-0123\"\n";
    let config = crate::support::write(dir.path(), "tollgate.toml", with);
    let server = Tollgate::start(&["--config", config.to_str().unwrap()]);
    std::fs::write(&config, "[resp]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let failures = "tollgate_config_reloads_total{result=\"failure\"}";
    until("the refusal", Duration::from_secs(10), async || {
        let text = crate::support::get(&impatient(None), &server, "/metrics").await;
        metric(&text, failures) >= 1.0
    })
    .await;
    // The password is still asked for, and still taken.
    let decide = command(&["TOLLGATE.CHECK", "api", "k"]);
    assert_eq!(
        resp(server.resp_addr(), decide.as_bytes()),
        "-NOAUTH Authentication required.\r\n"
    );
    let auth = command(&["AUTH", "pw-for-default-0123"]);
    assert_eq!(resp(server.resp_addr(), auth.as_bytes()), "+OK\r\n");
}

/// 3: wrong secrets count per address, across new connections and all three front ends: each
/// is answered later than the last, and the 20th refuses the address (429 with Retry-After,
/// RESOURCE_EXHAUSTED, -ERR) even with a right secret; another address is untouched. A new
/// connection per guess was once never slowed down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guesses_are_counted_per_address_across_connections_and_front_ends() {
    let (_dir, config) = configured();
    let server = start(&config);
    let clock = tollgate::MonotonicClock::new();
    let started = tollgate::Clock::now(&clock);
    let check = || Some(json!({"policy": "api", "key": "k"}));
    let guesser = impatient(None);
    let decide = || request("d", vec![descriptor(&[("k", "v")])]);
    // 19 wrong secrets, each on a new connection: 7 over HTTP, 6 over gRPC, 6 over RESP.
    for _ in 0..7 {
        let (status, _, text) = send(
            &guesser,
            &server,
            Method::POST,
            "/v1/check",
            Some(WRONG),
            check(),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    }
    for _ in 0..6 {
        let refused = grpc(server.grpc_addr(), decide(), Some(WRONG))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated);
    }
    for _ in 0..6 {
        let replies = resp(
            server.resp_addr(),
            command(&["AUTH", "app", WRONG]).as_bytes(),
        );
        assert!(replies.starts_with("-WRONGPASS"), "{replies}");
    }
    // The n-th failure waited (n - 1) * 10 ms: 1.71 s in all.
    let took = Duration::from(tollgate::Clock::now(&clock) - started);
    assert!(
        took >= Duration::from_millis(1710),
        "19 guesses took {took:?}"
    );

    // The 20th blocks the address: HTTP says so, with how long.
    let (status, headers, text) = send(
        &guesser,
        &server,
        Method::POST,
        "/v1/check",
        Some(WRONG),
        check(),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After: {retry}");
    assert!(text.contains("too many failed authentications"), "{text}");
    // Right secrets from the blocked address are refused too, unchecked.
    let (status, _, _) = send(
        &guesser,
        &server,
        Method::POST,
        "/v1/check",
        Some(APP),
        check(),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let refused = grpc(server.grpc_addr(), decide(), Some(APP))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let replies = resp(
        server.resp_addr(),
        format!("{}PING\r\n", command(&["AUTH", "app", APP])).as_bytes(),
    );
    assert!(
        replies.starts_with("-ERR too many failed authentications from this address"),
        "{replies}"
    );
    // Another address is untouched, on HTTP and on RESP.
    let honest = impatient(Some(ELSEWHERE));
    let (status, _, _) = send(
        &honest,
        &server,
        Method::POST,
        "/v1/check",
        Some(APP),
        check(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let replies = resp_from(
        ELSEWHERE,
        server.resp_addr(),
        format!("{}PING\r\n", command(&["AUTH", "app", APP])).as_bytes(),
    )
    .await;
    assert_eq!(replies, "+OK\r\n+PONG\r\n");
    let text = metrics(&server).await;
    assert!(metric(&text, "tollgate_auth_blocked_total{frontend=\"http\"}") >= 1.0);
    assert!(metric(&text, "tollgate_auth_blocked_total{frontend=\"grpc\"}") >= 1.0);
    assert!(metric(&text, "tollgate_auth_blocked_total{frontend=\"resp\"}") >= 1.0);
}

/// `bytes` on a new RESP connection from `from`, read until the server closes it.
async fn resp_from(from: IpAddr, to: SocketAddr, bytes: &[u8]) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

/// 3: a token secret shorter than 16 bytes is refused, by `config check` and at start; a
/// short `[resp] password` is taken (Redis takes any) with a warning.
#[test]
fn short_token_secrets_are_refused_and_a_short_password_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("short"), "x\n").unwrap();
    let file = crate::support::write(
        dir.path(),
        "short.toml",
        "[auth.tokens.admin]\nsecret_file = \"short\"\nscopes = [\"admin\"]\n",
    );
    let (ok, _, err) = config_check(&file);
    assert!(!ok);
    assert!(
        err.contains("auth.tokens.admin.secret_file") && err.contains("at least 16"),
        "{err}"
    );
    let started = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        !started.status.success(),
        "a one-byte admin secret started a server"
    );
    let file = crate::support::write(
        dir.path(),
        "password.toml",
        "[resp]\nlisten = \"127.0.0.1:0\"\npassword = \"short\"\n",
    );
    let (ok, out, _) = config_check(&file);
    assert!(ok, "{out}");
    assert!(out.contains("warning: resp.password is 5 bytes"), "{out}");
}

/// 4: a certificate file that becomes a FIFO is refused, and a valid new pair after it is
/// served: rotation goes on, and SIGTERM ends the server. It once stopped rotation for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_become_a_fifo_does_not_stop_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = tollgate_testkit::TestCa::new(d, "ca").unwrap();
    let (cert, key) = ca.sign(d, "one", "localhost", "IP:127.0.0.1").unwrap();
    let config = crate::support::write(
        d,
        "tollgate.toml",
        &format!(
            "[http.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            cert.display(),
            key.display()
        ),
    );
    let server = Tollgate::start(&["--config", config.to_str().unwrap()]);
    let served = || peer_certificate(server.addr, &ca.cert);
    let first = served().await;
    std::fs::remove_file(&cert).unwrap();
    mkfifo(&cert);
    hangup(&server);
    // A valid new pair, renamed into place: served once it is read.
    let (new_cert, new_key) = ca.sign(d, "two", "localhost", "IP:127.0.0.1").unwrap();
    std::fs::rename(&new_key, &key).unwrap();
    std::fs::remove_file(&cert).unwrap();
    std::fs::rename(&new_cert, &cert).unwrap();
    until("the new certificate", Duration::from_secs(10), async || {
        hangup(&server);
        served().await != first
    })
    .await;
    let text = https_get(server.addr, &ca.cert, "/metrics", None).await;
    assert!(count(&text, "tollgate_file_refusals_total{kind=\"certificate\"}") >= 1.0);
    terminates(server);
}

/// 5: a 100 MB certificate and a secret file linked to /dev/zero are refused before they are
/// read, and the server's memory stays put. The certificate once took it from 17 MB to
/// 1.3 GB; /dev/zero grew it until memory ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_files_are_refused_with_bounded_memory() {
    let (dir, config) = configured();
    let d = dir.path();
    let ca = tollgate_testkit::TestCa::new(d, "ca").unwrap();
    let (cert, key) = ca.sign(d, "one", "localhost", "IP:127.0.0.1").unwrap();
    // Four listeners on one certificate, as the issue's server had.
    let text = std::fs::read_to_string(&config).unwrap();
    let tls = |name: &str| {
        format!(
            "[{name}.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            cert.display(),
            key.display()
        )
    };
    let text = text.replace("[resp]\n", &format!("{}[resp]\n", tls("http")))
        + &tls("resp")
        + &tls("grpc")
        + "[admin]\nlisten = \"127.0.0.1:0\"\n"
        + &tls("admin");
    std::fs::write(&config, text).unwrap();
    let server = start(&config);
    let before = rss(server.pid());
    let metrics = || https_get(server.admin_addr(), &ca.cert, "/metrics", Some(OPS));
    let staged = d.join("staged");
    std::fs::write(&staged, vec![b'A'; 100 << 20]).unwrap();
    std::fs::rename(&staged, &cert).unwrap();
    // Until it is refused, or the server has read it (and grown).
    let bound = 32 << 20;
    let grew = || rss(server.pid()).saturating_sub(before);
    let refused = "tollgate_file_refusals_total{kind=\"certificate\"}";
    until(
        "the certificate's refusal",
        Duration::from_secs(10),
        async || count(&metrics().await, refused) >= 1.0 || grew() >= bound,
    )
    .await;
    assert!(
        grew() < bound,
        "the server's RSS grew by {} MiB",
        grew() >> 20
    );
    let secret = d.join("secrets/ops");
    std::fs::remove_file(&secret).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &secret).unwrap();
    let refused = "tollgate_file_refusals_total{kind=\"secret\"}";
    until(
        "the secret's refusal",
        Duration::from_secs(10),
        async || {
            hangup(&server);
            count(&metrics().await, refused) >= 1.0 || grew() >= bound
        },
    )
    .await;
    assert!(
        grew() < bound,
        "the server's RSS grew by {} MiB",
        grew() >> 20
    );
    terminates(server);
}

/// 6: with `[auth]`, gRPC reflection needs a token (any scope); health stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_needs_a_token_and_health_does_not() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;

    let (_dir, config) = configured();
    let server = start(&config);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let list = |token: Option<&str>| {
        let mut call = tonic::Request::new(tonic::codegen::tokio_stream::iter([
            ServerReflectionRequest {
                host: String::new(),
                message_request: Some(MessageRequest::ListServices(String::new())),
            },
        ]));
        if let Some(token) = token {
            let bearer = format!("Bearer {token}").parse().unwrap();
            call.metadata_mut().insert("authorization", bearer);
        }
        let mut client = ServerReflectionClient::new(channel.clone());
        async move {
            let mut answers = client.server_reflection_info(call).await?.into_inner();
            answers.message().await.map(|answer| answer.is_some())
        }
    };
    let refused = list(None).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    let refused = list(Some(WRONG)).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    // `viewer` may only read: any scope lists.
    assert!(list(Some(VIEWER)).await.unwrap());
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.status, 1, "SERVING, asked without a token");
}

/// 6: nothing of an `[auth]` table shows in a config error, `config check`'s or a reload's.
#[test]
fn no_auth_value_is_echoed_by_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    for (i, text) in [
        "[auth.tokens.app]\nsecret = LITERALSECRET\nscopes = [\"check\"]\n",
        "[auth.tokens.app]\nsecret_file = \"x\"\nscopes = [\"LITERALSECRET\"]\n",
        "[auth]\ntokens = \"LITERALSECRET\"\n",
        "auth.tokens.app.secret_env = LITERALSECRET\n",
    ]
    .iter()
    .enumerate()
    {
        let file = crate::support::write(dir.path(), &format!("c{i}.toml"), text);
        let (ok, out, err) = config_check(&file);
        assert!(!ok, "{text}");
        assert!(err.contains(&format!("c{i}.toml:")), "{err}");
        assert!(
            !err.contains("LITERALSECRET") && !out.contains("LITERALSECRET"),
            "{err}"
        );
    }
}

/// 6: with `inline_policies = false`, a descriptor's own `limit` (a limit the client
/// chooses) is refused, over gRPC and `/json`; allowed otherwise, as envoyproxy/ratelimit does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_limit_overrides_follow_inline_policies() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;

    let (_dir, config) = configured();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("[http]\ninline_policies = false\n\n{text}"),
    )
    .unwrap();
    let server = start(&config);
    let mut own = descriptor(&[("k", "v")]);
    own.limit = Some(RateLimitOverride {
        requests_per_unit: 1_000_000,
        unit: 1,
    });
    let refused = grpc(
        server.grpc_addr(),
        request("d", vec![own.clone()]),
        Some(APP),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("descriptors[0].limit"),
        "{refused:?}"
    );
    let body = json!({"domain": "d", "descriptors": [{
        "entries": [{"key": "k", "value": "v"}],
        "limit": {"requestsPerUnit": 1000000, "unit": "SECOND"}
    }]});
    let client = impatient(None);
    let (status, _, text) = send(
        &client,
        &server,
        Method::POST,
        "/json",
        Some(APP),
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    // Without the override, the configured limit decides.
    grpc(
        server.grpc_addr(),
        request("d", vec![descriptor(&[("k", "v")])]),
        Some(APP),
    )
    .await
    .unwrap();
}

/// 6: a key given twice in a body is refused with a 400 naming it, never taken last-wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_json_keys_are_refused_naming_the_key() {
    let server = Tollgate::start(&[]);
    let client = impatient(None);
    let post = async |path: &str, body: &str| {
        let response = client
            .post(format!("http://{}{path}", server.addr))
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str::<Value>(&text).unwrap())
    };
    let inline = r#"{"key": "a", "capacity": 10, "refill": 1, "period_ms": 1000"#;
    let (status, reserved) = post("/v1/reserve", &format!("{inline}, \"cost\": 5}}")).await;
    assert_eq!(status, StatusCode::OK, "{reserved}");
    let token = reserved["reservation"].as_str().unwrap();
    let (status, problem) = post(
        "/v1/commit",
        &format!(r#"{{"reservation": "{token}", "used": 999999, "used": 0}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(problem["field"], "used", "{problem}");
    let (status, problem) = post(
        "/v1/check",
        &format!("{inline}, \"cost\": 1, \"cost\": 0}}"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(problem["field"], "cost", "{problem}");
    let (status, problem) = post("/v1/check", r#"{"policy": "x", "key": "a", "key": "b"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(problem["field"], "key", "{problem}");
}

/// 6: a reservation made before `[auth]` existed cannot be committed by any token once it
/// does: who made it is unknown, so no token owns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_from_before_auth_is_committed_by_no_token() {
    let (_dir, config) = configured();
    let with_auth = std::fs::read_to_string(&config).unwrap();
    let without = with_auth[..with_auth.find("[auth.tokens.app]").unwrap()].to_owned();
    std::fs::write(&config, &without).unwrap();
    let server = start(&config);
    let client = impatient(None);
    let body = Some(json!({"policy": "api", "key": "early", "cost": 5}));
    let (status, _, text) = send(&client, &server, Method::POST, "/v1/reserve", None, body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let reserved: Value = serde_json::from_str(&text).unwrap();
    let token = reserved["reservation"].as_str().unwrap().to_owned();
    std::fs::write(&config, &with_auth).unwrap();
    let commit = || Some(json!({"reservation": token, "used": 0}));
    until("[auth] in force", Duration::from_secs(10), async || {
        let (status, _, _) = send(&client, &server, Method::GET, "/v1/policies", None, None).await;
        status == StatusCode::UNAUTHORIZED
    })
    .await;
    for secret in [APP, OPS] {
        let (status, _, text) = send(
            &client,
            &server,
            Method::POST,
            "/v1/commit",
            Some(secret),
            commit(),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
        assert!(
            text.contains("before this server asked for tokens"),
            "{text}"
        );
    }
}

/// A TLS connection to `addr`, trusting the CA at `ca`.
async fn tls(
    addr: SocketAddr,
    ca: &Path,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    tokio::time::timeout(Duration::from_secs(5), connector.connect(name, stream))
        .await
        .expect("the TLS handshake ends within 5 s")
        .unwrap()
}

/// The certificate the server at `addr` presents.
async fn peer_certificate(addr: SocketAddr, ca: &Path) -> Vec<u8> {
    let stream = tls(addr, ca).await;
    let (_, connection) = stream.get_ref();
    connection.peer_certificates().unwrap()[0].to_vec()
}

/// `GET path` over HTTPS/1.1 with `token`; the body.
async fn https_get(addr: SocketAddr, ca: &Path, path: &str, token: Option<&str>) -> String {
    let mut stream = tls(addr, ca).await;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out))
        .await
        .expect("an answer within 5 s")
        .ok();
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}
