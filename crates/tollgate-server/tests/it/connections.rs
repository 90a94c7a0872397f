//! No client starves the others of connections: silent, stalled and idle connections are
//! closed, and one over a listener's caps is told why at once instead of waiting in the
//! kernel's backlog, on the HTTP, gRPC and RESP listeners.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::support::{self, Stopwatch, Tollgate};

const CHECK: &str = r#"{"key": "k", "capacity": 100, "refill": 100, "period_ms": 1000}"#;

fn post_check() -> String {
    format!(
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{CHECK}",
        CHECK.len()
    )
}

/// Writes `request` and reads what comes back until the server closes or `within` passes.
fn exchange(stream: &mut TcpStream, request: &[u8], within: Duration) -> String {
    stream.set_read_timeout(Some(within)).unwrap();
    let _ = stream.write_all(request);
    read_some(stream)
}

/// What the stream has to read now (up to the read timeout set on it).
fn read_some(stream: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                // A whole HTTP answer with a body, or a RESP line: enough.
                let text = String::from_utf8_lossy(&got);
                if text.ends_with("\r\n") && text.starts_with('-')
                    || text.contains("\r\n\r\n") && text.ends_with('}')
                    || text.starts_with('+')
                {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Whether the server closed `stream` (a read sees the end) within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 64];
    // A server that closes with bytes of ours unread resets the connection.
    match stream.read(&mut buf) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

fn silent(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| TcpStream::connect(addr).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect()
}

fn started(config: &str, args: &[&str]) -> (tempfile::TempDir, Tollgate) {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "t.toml", config);
    let args = [&["--config", file.to_str().unwrap()][..], args].concat();
    (dir, Tollgate::start(&args))
}

/// Retries `ask` until it returns something, for at most `within`; how long it took.
fn served_within<T>(within: Duration, mut ask: impl FnMut() -> Option<T>) -> (T, Duration) {
    let start = Stopwatch::start();
    loop {
        if let Some(answer) = ask() {
            return (answer, start.elapsed());
        }
        assert!(start.elapsed() < within, "not served within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ten_thousand_silent_http_connections_do_not_lock_out_an_honest_client() {
    let (_dir, server) = started("[http]\nrequest_timeout = \"3s\"\n", &[]);
    // 3 s: opening 10,000 connections took over a second on a loaded CI machine, which closed
    // the first ones (silent past the timeout) before the one over the cap.
    let mut held = silent(server.addr, 10_000);
    let opened = Stopwatch::start();
    // The next one is over max_connections: told so at once, not left in the backlog.
    let mut over = TcpStream::connect(server.addr).unwrap();
    let answer = exchange(&mut over, post_check().as_bytes(), Duration::from_secs(1));
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("max_connections"), "{answer}");
    // The silent ones are closed after the request timeout, and an honest client gets in.
    let (answer, _) = served_within(Duration::from_secs(8), || {
        let mut honest = TcpStream::connect(server.addr).ok()?;
        let answer = exchange(&mut honest, post_check().as_bytes(), Duration::from_secs(1));
        answer.starts_with("HTTP/1.1 200").then_some(answer)
    });
    assert!(answer.contains("\"allowed\":true"), "{answer}");
    assert!(
        opened.elapsed() < Duration::from_secs(6),
        "{:?}",
        opened.elapsed()
    );
    assert!(closed_within(&mut held[0], Duration::from_secs(4)));
    assert!(closed_within(&mut held[9_999], Duration::from_secs(5)));
    // Every silent one is closed by the server, counted as timed out.
    let (metrics, _) = served_within(Duration::from_secs(5), || {
        let metrics = blocking_get(server.addr, "/metrics");
        let timed_out = support::metric(
            &metrics,
            r#"tollgate_connections_timed_out_total{listener="http"}"#,
        );
        (timed_out >= 10_000.0).then_some(metrics)
    });
    assert!(
        support::metric(
            &metrics,
            r#"tollgate_connections_refused_total{cap="max_connections",listener="http"}"#
        ) >= 1.0,
        "{metrics}"
    );
}

#[test]
fn a_client_over_its_per_address_cap_is_refused_and_others_are_not() {
    let (_dir, server) = started("[http]\nmax_connections_per_ip = 3\n", &[]);
    let _held = silent(server.addr, 3);
    let mut fourth = TcpStream::connect(server.addr).unwrap();
    let answer = exchange(&mut fourth, post_check().as_bytes(), Duration::from_secs(1));
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("max_connections_per_ip"), "{answer}");
    // Another address (127.0.0.2 is loopback too) is under its own cap.
    let other = SocketAddr::from(([127, 0, 0, 2], 0));
    let mut socket = connect_from(other, server.addr);
    let answer = exchange(&mut socket, post_check().as_bytes(), Duration::from_secs(2));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A TCP connection to `to` from the local address `from`.
fn connect_from(from: SocketAddr, to: SocketAddr) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(from).unwrap();
        let stream = socket.connect(to).await.unwrap().into_std().unwrap();
        // A runtime's socket is non-blocking; the tests read with timeouts.
        stream.set_nonblocking(false).unwrap();
        stream
    })
}

/// `GET path`, on a connection of its own.
fn blocking_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

#[test]
fn a_stalled_body_is_answered_408_after_the_request_timeout() {
    let (_dir, server) = started("[http]\nrequest_timeout = \"500ms\"\n", &[]);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let start = Stopwatch::start();
    let head = "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"key\":";
    let answer = exchange(&mut stream, head.as_bytes(), Duration::from_secs(3));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request-timeout"), "{answer}");
    assert!(
        start.elapsed() >= Duration::from_millis(450),
        "{:?}",
        start.elapsed()
    );
    assert!(closed_within(&mut stream, Duration::from_secs(2)));
}

#[test]
fn a_keep_alive_connection_lives_for_the_idle_timeout_not_the_request_timeout() {
    let (_dir, server) = started(
        "[http]\nrequest_timeout = \"300ms\"\nidle_timeout = \"1500ms\"\n",
        &[],
    );
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let answer = exchange(&mut stream, post_check().as_bytes(), Duration::from_secs(1));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Past the request timeout, within the idle timeout: still served on the same connection.
    std::thread::sleep(Duration::from_millis(700));
    let answer = exchange(&mut stream, post_check().as_bytes(), Duration::from_secs(1));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Idle past the idle timeout: closed.
    assert!(closed_within(&mut stream, Duration::from_secs(3)));
}

#[test]
fn a_silent_grpc_flood_leaves_room_and_a_call_over_the_cap_is_unavailable() {
    let (_dir, path) = support::envoy::configured(
        // 3 s: opening 10,000 connections took over a second on a loaded CI machine, which
        // closed the first ones (silent past the timeout) before the call over the cap.
        "listen = \"127.0.0.1:0\"\nmax_connections = 10000\nrequest_timeout = \"3s\"\n",
        &[(
            "a.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n",
        )],
    );
    let server = Tollgate::start(&["--config", path.to_str().unwrap()]);
    let grpc = server.grpc_addr();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _held = silent(grpc, 10_000);
    // Over the cap: UNAVAILABLE, naming the cap, at once.
    let refused = runtime.block_on(async {
        let mut client = support::envoy::client(grpc).await;
        let request = support::envoy::request("d", vec![support::envoy::descriptor(&[("k", "v")])]);
        tokio::time::timeout(Duration::from_secs(2), client.should_rate_limit(request))
            .await
            .expect("answered at once")
    });
    let status = refused.expect_err("over the cap");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("max_connections"), "{status:?}");
    // The silent ones go after the request timeout; then a call is served.
    let (code, _) = served_within(Duration::from_secs(8), || {
        runtime.block_on(async {
            let mut client = support::envoy::client(grpc).await;
            let request =
                support::envoy::request("d", vec![support::envoy::descriptor(&[("k", "v")])]);
            let answer = client.should_rate_limit(request).await.ok()?;
            Some(answer.into_inner().overall_code)
        })
    });
    assert_eq!(code, 1, "OK");
}

#[test]
fn four_thousand_silent_resp_connections_do_not_lock_out_ping() {
    let (_dir, server) = started(
        "[resp]\nlisten = \"127.0.0.1:0\"\nrequest_timeout = \"1s\"\n",
        &[],
    );
    let resp = server.resp_addr();
    let _held = silent(resp, 4_096);
    let mut over = TcpStream::connect(resp).unwrap();
    let answer = exchange(&mut over, b"PING\r\n", Duration::from_secs(1));
    assert_eq!(answer, "-ERR max number of clients reached\r\n");
    let (answer, _) = served_within(Duration::from_secs(5), || {
        let mut honest = TcpStream::connect(resp).ok()?;
        let answer = exchange(&mut honest, b"PING\r\n", Duration::from_secs(1));
        (answer == "+PONG\r\n").then_some(answer)
    });
    assert_eq!(answer, "+PONG\r\n");
}

#[test]
fn a_half_sent_resp_command_is_closed_after_the_request_timeout_however_it_trickles() {
    let (_dir, server) = started(
        "[resp]\nlisten = \"127.0.0.1:0\"\nrequest_timeout = \"600ms\"\nidle_timeout = \"1h\"\n",
        &[],
    );
    let mut stream = TcpStream::connect(server.resp_addr()).unwrap();
    let answer = exchange(&mut stream, b"PING\r\n", Duration::from_secs(1));
    assert_eq!(answer, "+PONG\r\n");
    // Idle between commands is fine for the idle timeout (an hour here).
    std::thread::sleep(Duration::from_millis(900));
    // A command a byte at a time, every 150 ms: never whole.
    let mut reader = stream.try_clone().unwrap();
    let watcher = std::thread::spawn(move || {
        let start = Stopwatch::start();
        let closed = closed_within(&mut reader, Duration::from_secs(5));
        (closed, start.elapsed())
    });
    for byte in b"*2\r\n$4\r\nECHO\r\n$5\r\nhel" {
        if stream.write_all(&[*byte]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let (closed, after) = watcher.join().unwrap();
    assert!(closed, "still open after {after:?}");
    assert!(
        after >= Duration::from_millis(550) && after < Duration::from_secs(2),
        "{after:?}"
    );
}

#[test]
fn a_connection_limit_of_zero_and_limits_on_the_wrong_listener_are_refused() {
    for (config, field) in [
        ("[http]\nmax_connections = 0\n", "http.max_connections"),
        (
            "[grpc]\nmax_connections_per_ip = 0\n",
            "grpc.max_connections_per_ip",
        ),
        (
            "[resp]\nmax_connection_age = \"1h\"\n",
            "resp.max_connection_age",
        ),
        ("[admin]\nrequest_timeout = 5\n", "admin.request_timeout"),
        (
            "[http.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nclient_san = [\"a\"]\n",
            "http.tls.client_san",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = support::write(dir.path(), "t.toml", config);
        let (ok, _, stderr) = support::config_check(&file);
        assert!(!ok, "{config}");
        assert!(stderr.contains(field), "{config}: {stderr}");
    }
}

/// The frames in `bytes` (HTTP/2, after the preface): (type, flags, payload).
fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        if bytes.len() < 9 + len {
            break;
        }
        out.push((bytes[3], bytes[4], bytes[9..9 + len].to_vec()));
        bytes = &bytes[9 + len..];
    }
    out
}

#[test]
fn a_ping_flood_is_answered_goaway_enhance_your_calm() {
    let server = Tollgate::start(&[]);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let mut flood = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    flood.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS, empty
    for i in 0..1_000u64 {
        flood.extend_from_slice(&[0, 0, 8, 6, 0, 0, 0, 0, 0]); // PING
        flood.extend_from_slice(&i.to_be_bytes());
    }
    let _ = stream.write_all(&flood);
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    let frames = frames(&got);
    let goaway = frames
        .iter()
        .find(|(kind, _, _)| *kind == 7)
        .unwrap_or_else(|| panic!("no GOAWAY in {} frames", frames.len()));
    assert_eq!(goaway.2[4..8], 0xb_u32.to_be_bytes(), "ENHANCE_YOUR_CALM");
    let acks = frames
        .iter()
        .filter(|(kind, flags, _)| *kind == 6 && flags & 1 == 1)
        .count();
    assert!(acks <= 101, "{acks} PINGs acknowledged");
    // The server is still there for others.
    let mut other = TcpStream::connect(server.addr).unwrap();
    let answer = exchange(&mut other, post_check().as_bytes(), Duration::from_secs(2));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn running_out_of_file_descriptors_is_logged_once_counted_and_survived() {
    let (server, logs) = Tollgate::start_logged(&["--listen", "127.0.0.1:0"], &[]);
    // The server may hold 64 descriptors from now on: fewer than the connections below.
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &server.pid().to_string(), "--nofile=64:64"])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success());
    let held = silent(server.addr, 200);
    let (_, _) = served_within(Duration::from_secs(5), || {
        logs.text()
            .contains("accepting a connection failed")
            .then_some(())
    });
    drop(held);
    // Once descriptors are free again, clients are served and the failures were counted.
    let (metrics, _) = served_within(Duration::from_secs(5), || {
        let mut stream = TcpStream::connect(server.addr).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.1 200").then_some(answer)
    });
    assert!(
        support::metric(&metrics, r#"tollgate_accept_errors_total{listener="http"}"#) >= 1.0,
        "{metrics}"
    );
    let warnings = logs.text().matches("accepting a connection failed").count();
    assert_eq!(warnings, 1, "logged at most once per 10 s: {}", logs.text());
    assert!(logs.text().contains("WARN"), "{}", logs.text());
}

/// Timeouts too long to add to the time are ones that never come, not a panic.
#[test]
fn http_timeouts_past_the_end_of_time_never_come() {
    let forever = "\"10000000000000000000s\"";
    let (_dir, server) = started(
        &format!(
            "[http]\nrequest_timeout = {forever}\nidle_timeout = {forever}\n\
             max_connection_age = {forever}\nmax_connection_age_grace = {forever}\n\
             keepalive_interval = {forever}\n"
        ),
        &[],
    );
    let mut stream = TcpStream::connect(server.addr).unwrap();
    for _ in 0..2 {
        let answer = exchange(&mut stream, post_check().as_bytes(), Duration::from_secs(2));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

#[test]
fn an_http2_connection_is_asked_to_go_away_at_its_maximum_age_then_closed() {
    let (_dir, server) = started(
        "[http]\nmax_connection_age = \"1s\"\nmax_connection_age_grace = \"1s\"\n",
        &[],
    );
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let watch = Stopwatch::start();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS, empty
    stream.write_all(&hello).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(6)))
        .unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    let closed_after = watch.elapsed();
    let goaway = frames(&got)
        .into_iter()
        .find(|(kind, _, _)| *kind == 7)
        .expect("a GOAWAY");
    assert_eq!(goaway.2[4..8], [0, 0, 0, 0], "NO_ERROR: a graceful goodbye");
    assert!(
        closed_after >= Duration::from_millis(900) && closed_after < Duration::from_secs(4),
        "closed after {closed_after:?}"
    );
}
