//! The Redis protocol front end, driven by real clients: redis-cli (typed and `--pipe`), the
//! `redis` crate over RESP2 and RESP3, redis-benchmark, raw sockets that pipeline, split and
//! send garbage; and three servers on one Redis.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::Tollgate;
use tollgate::{Clock, MonotonicClock, Nanos};
use tollgate_testkit::TestRedis;

fn start(extra: &[&str]) -> Tollgate {
    let mut args = vec!["--resp-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    Tollgate::start(&args)
}

fn redis_cli(addr: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (scripts/test --install installs redis-tools)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Sends `bytes` and reads until `replies` lines starting a reply have come, or the server
/// closes.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn redis_cli_typed_commands_get_redis_cells_replies() {
    let server = start(&[]);
    let addr = server.resp_addr();
    assert_eq!(redis_cli(addr, &["PING"]), "PONG\n");
    assert_eq!(
        redis_cli(addr, &["CL.THROTTLE", "user", "15", "30", "60"]),
        "0\n16\n15\n-1\n2\n"
    );
    assert_eq!(
        redis_cli(addr, &["CL.THROTTLE", "user", "15", "30", "60", "15"]),
        "0\n16\n0\n-1\n32\n"
    );
    assert_eq!(
        redis_cli(addr, &["CL.THROTTLE", "user", "15", "30", "60"]),
        "1\n16\n0\n2\n32\n"
    );
    // redis-cli prints an error reply, then a blank line.
    assert_eq!(
        redis_cli(addr, &["CL.THROTTLE", "user", "x", "30", "60"]),
        "Cell error: Couldn't parse as integer: x\n\n"
    );
    assert_eq!(
        redis_cli(addr, &["NOSUCH", "a"]),
        "ERR unknown command 'NOSUCH', with args beginning with: 'a' \n\n"
    );
    assert_eq!(
        redis_cli(addr, &["ECHO"]),
        "ERR wrong number of arguments for 'echo' command\n\n"
    );
    assert!(redis_cli(addr, &["INFO"]).contains("redis_mode:standalone"));
    // throttlecrab's shape: allowed (1), limit, remaining, reset_after, retry_after.
    assert_eq!(
        redis_cli(addr, &["THROTTLE", "crab", "3", "3", "60"]),
        "1\n3\n2\n20\n0\n"
    );
}

#[test]
fn redis_cli_pipe_answers_every_command_in_order() {
    let server = start(&[]);
    let mut pipe = Command::new("redis-cli")
        .args(["-p", &server.resp_addr().port().to_string(), "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = String::new();
    for _ in 0..500 {
        input.push_str(
            "*5\r\n$11\r\nCL.THROTTLE\r\n$4\r\npipe\r\n$2\r\n99\r\n$1\r\n1\r\n$4\r\n3600\r\n",
        );
    }
    pipe.stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = pipe.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("errors: 0, replies: 500"), "{text}");
}

#[test]
fn a_pipelined_burst_of_1000_is_answered_in_order_and_exactly() {
    let server = start(&[]);
    let mut burst = Vec::new();
    for _ in 0..1000 {
        burst.extend_from_slice(b"CL.THROTTLE burst 99 1 3600\r\n");
    }
    let out = exchange(server.resp_addr(), &burst);
    let replies: Vec<&str> = out.split("*5\r\n").skip(1).collect();
    assert_eq!(replies.len(), 1000);
    // Limit 100: the first 100 allowed with 99, 98, ... 0 left, every later one limited.
    for (i, reply) in replies.iter().enumerate() {
        let numbers: Vec<i64> = reply
            .split("\r\n")
            .filter_map(|l| l.strip_prefix(':')?.parse().ok())
            .collect();
        if i < 100 {
            assert_eq!(&numbers[..3], [0, 100, 99 - i as i64], "reply {i}");
        } else {
            assert_eq!(numbers[0], 1, "reply {i}");
        }
    }
}

#[test]
fn a_request_split_byte_by_byte_is_answered_as_a_whole() {
    let server = start(&[]);
    let mut stream = TcpStream::connect(server.resp_addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    let request = b"*5\r\n$11\r\nCL.THROTTLE\r\n$5\r\nsplit\r\n$1\r\n4\r\n$1\r\n5\r\n$1\r\n1\r\n";
    for byte in request {
        stream.write_all(std::slice::from_ref(byte)).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    stream.write_all(b"QUIT\r\n").unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    assert_eq!(out, "*5\r\n:0\r\n:5\r\n:4\r\n:-1\r\n:1\r\n+OK\r\n");
}

#[test]
fn garbage_gets_a_protocol_error_then_the_connection_closes() {
    let server = start(&[]);
    let addr = server.resp_addr();
    assert_eq!(
        exchange(addr, b"*2\r\n:1\r\nPING\r\n"),
        "-ERR Protocol error: expected '$', got ':'\r\n"
    );
    assert_eq!(
        exchange(addr, b"*abc\r\n"),
        "-ERR Protocol error: invalid multibulk length\r\n"
    );
    // A bulk longer than 64 KiB is refused before it is read.
    assert_eq!(
        exchange(addr, b"*1\r\n$99999999\r\n"),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    assert_eq!(
        exchange(addr, &[b'A'; 70_000]),
        "-ERR Protocol error: too big inline request\r\n"
    );
    // A wrong command is not garbage: the connection goes on.
    assert_eq!(
        exchange(addr, b"SELECT 1\r\nPING\r\n"),
        "-ERR DB index is out of range\r\n+PONG\r\n"
    );
    // And the server still serves.
    assert_eq!(redis_cli(addr, &["PING"]), "PONG\n");
}

#[test]
fn auth_is_refused_without_a_password_and_required_with_one() {
    let server = start(&[]);
    assert!(
        redis_cli(server.resp_addr(), &["AUTH", "x"])
            .starts_with("ERR AUTH <password> called without any password configured")
    );
    // A client configured with a password still connects to a server without one, as to a
    // Redis whose default user has none.
    assert_eq!(
        exchange(server.resp_addr(), b"AUTH default anything\r\nPING\r\n"),
        "+OK\r\n+PONG\r\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "t.toml", "[resp]\npassword = \"s3cret\"\n");
    let server = start(&["--config", file.to_str().unwrap()]);
    let addr = server.resp_addr();
    assert_eq!(
        exchange(addr, b"PING\r\n"),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        exchange(addr, b"AUTH wrong\r\n"),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        exchange(addr, b"AUTH s3cret\r\nPING\r\n"),
        "+OK\r\n+PONG\r\n"
    );
    assert_eq!(
        redis_cli(addr, &["-a", "s3cret", "--no-auth-warning", "PING"]),
        "PONG\n"
    );
}

#[tokio::test]
async fn the_redis_crate_over_resp2_and_resp3() {
    let server = start(&[]);
    for protocol in ["resp2", "resp3"] {
        let url = format!("redis://{}/?protocol={protocol}", server.resp_addr());
        let client = redis::Client::open(url).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let key = format!("crate-{protocol}");
        let reply: Vec<i64> = redis::cmd("CL.THROTTLE")
            .arg(&key)
            .arg(2)
            .arg(3)
            .arg(60)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(reply, [0, 3, 2, -1, 20], "{protocol}");
        let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        assert_eq!(pong, "PONG");
        let name: Option<String> = redis::cmd("CLIENT")
            .arg("GETNAME")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(name, None);
        // Concurrent commands on the multiplexed connection, answered in order.
        let mut pipe = redis::pipe();
        for _ in 0..10 {
            pipe.cmd("CL.THROTTLE").arg(&key).arg(2).arg(3).arg(60);
        }
        let replies: Vec<Vec<i64>> = pipe.query_async(&mut conn).await.unwrap();
        assert_eq!(
            replies.iter().filter(|r| r[0] == 0).count(),
            2,
            "{protocol}"
        );
    }
}

#[test]
fn redis_benchmark_issues_cl_throttle_without_errors() {
    let server = start(&[]);
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &server.resp_addr().port().to_string(),
            "-n",
            "2000",
            "-c",
            "8",
            "-P",
            "4",
            "-q",
            "CL.THROTTLE",
            "bench",
            "100",
            "10",
            "1",
        ])
        .output()
        .expect("redis-benchmark runs (scripts/test --install installs redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("requests per second"), "{text}");
}

/// Three servers on one Redis: 64 clients on one key for 3 s, over RESP, never above the
/// bound (burst 10 + 10/s × 3 s: at most 41 with the limit max_burst + 1 = 11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_one_redis_never_exceed_the_bound() {
    let redis = TestRedis::start().unwrap();
    let args = [&["--store", redis.url()][..], &support::PATIENT].concat();
    let servers: Vec<Tollgate> = (0..3).map(|_| start(&args)).collect();
    let addrs: Vec<SocketAddr> = servers.iter().map(Tollgate::resp_addr).collect();
    let clock = MonotonicClock::new();
    let started = clock.now();
    let deadline = started + Nanos::new(3_000_000_000);
    let allowed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let addr = addrs[i % addrs.len()];
            let allowed = Arc::clone(&allowed);
            tokio::spawn(async move {
                let client = redis::Client::open(format!("redis://{addr}")).unwrap();
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                while clock.now() < deadline {
                    let reply: Vec<i64> = redis::cmd("CL.THROTTLE")
                        .arg("shared")
                        .arg(10)
                        .arg(10)
                        .arg(1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    if reply[0] == 0 {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // The bucket refills over the time Redis decided in, which lies within the time from the
    // first request to the last answer: 3 s and whatever the last answers took (on a loaded
    // machine, a tenth of a second is one token more). 11 at once, then 10 a second.
    let span = clock.now() - started;
    let bound = 11 + span.as_u64() / 100_000_000;
    let allowed = allowed.load(Ordering::Relaxed);
    assert!(
        (38..=bound).contains(&allowed),
        "allowed {allowed}, bound {bound} over {span:?}"
    );
}

/// A server whose connections close after `idle` of silence, and a connection to it.
fn idle_after(idle: &str) -> (tempfile::TempDir, Tollgate, TcpStream) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("[resp]\nidle_timeout = \"{idle}\"\n");
    let file = support::write(dir.path(), "t.toml", &config);
    let server = start(&["--config", file.to_str().unwrap()]);
    let stream = TcpStream::connect(server.resp_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    (dir, server, stream)
}

fn ping(stream: &mut TcpStream) {
    stream.write_all(b"PING\r\n").unwrap();
    let mut pong = [0u8; 7];
    stream.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
}

/// How long the server, sent nothing more, takes to close `stream` (a read answers end of
/// stream, not the read timeout).
fn closed_after(stream: &mut TcpStream) -> Duration {
    let clock = MonotonicClock::new();
    let start = clock.now();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    Duration::from(clock.now() - start)
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let (_dir, _server, mut stream) = idle_after("200ms");
    ping(&mut stream);
    let waited = closed_after(&mut stream);
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

/// An idle timeout too long to add to the time is one that never comes, not a panic.
#[test]
fn an_idle_timeout_past_the_end_of_time_never_comes() {
    let (_dir, _server, mut stream) = idle_after("10000000000000000000s");
    ping(&mut stream);
    ping(&mut stream);
}

/// A decision slower than the idle timeout (Redis held by `DEBUG SLEEP`, the store's timeout
/// longer) is answered, and the connection stays open after it: it is idle from its reply, not
/// from its request.
#[test]
fn a_decision_slower_than_the_idle_timeout_keeps_the_connection() {
    use std::io::BufRead;

    let redis = TestRedis::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[store]\nurl = \"{}\"\ntimeout = \"3s\"\non_error = \"deny\"\n\
         [resp]\nidle_timeout = \"200ms\"\n",
        redis.url()
    );
    let file = support::write(dir.path(), "t.toml", &config);
    let server = start(&["--config", file.to_str().unwrap()]);
    let mut stream = TcpStream::connect(server.resp_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut replies = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut throttle = |key: &str| {
        let command = format!("CL.THROTTLE {key} 10 10 1\r\n");
        stream.write_all(command.as_bytes()).unwrap();
        let mut reply = String::new();
        for _ in 0..6 {
            replies.read_line(&mut reply).unwrap();
        }
        assert!(reply.starts_with("*5\r\n:0\r\n:11\r\n"), "{reply:?}");
    };
    // The store's connection and script are ready.
    throttle("warm");
    let port = redis.port();
    let sleeper = std::thread::spawn(move || {
        tollgate_testkit::redis_cmd(port, &[b"DEBUG", b"SLEEP", b"0.6"]).unwrap();
    });
    std::thread::sleep(Duration::from_millis(100));
    throttle("slow");
    sleeper.join().unwrap();
    // At once after the slow reply: answered, not closed.
    ping(&mut stream);
}

/// The timeout runs from the last request, not from the connection's start: a client active
/// past the first deadline is answered, and closed only once it falls silent.
#[test]
fn the_idle_timeout_runs_from_the_last_request() {
    let (_dir, _server, mut stream) = idle_after("400ms");
    let clock = MonotonicClock::new();
    let start = clock.now();
    // A PING every 100 ms for a second: two and a half timeouts.
    while Duration::from(clock.now() - start) < Duration::from_secs(1) {
        ping(&mut stream);
        std::thread::sleep(Duration::from_millis(100));
    }
    let waited = closed_after(&mut stream);
    // The last PING went 100 ms before the silence began.
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

#[test]
fn client_chosen_limits_are_refused_where_inline_policies_are_off() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "t.toml",
        "[http]\ninline_policies = false\n[policies.api]\ncapacity = 2\nperiod = \"1h\"\n",
    );
    let server = start(&["--config", file.to_str().unwrap()]);
    let addr = server.resp_addr();
    let refused = exchange(addr, b"CL.THROTTLE k 1 1 1\r\nTHROTTLE k 1 1 1\r\n");
    assert!(
        refused.starts_with("-Cell error: limits chosen by the client are turned off"),
        "{refused}"
    );
    assert!(
        refused.contains("\r\n-ERR limits chosen by the client are turned off"),
        "{refused}"
    );
    assert_eq!(
        exchange(addr, b"TOLLGATE.CHECK api k\r\n"),
        "*5\r\n:1\r\n:2\r\n:1\r\n:0\r\n:1800000\r\n"
    );
}

/// `INFO` has the sections clients and tools read, and `INFO <section>` only that one.
#[test]
fn info_answers_the_server_clients_and_stats_sections() {
    let server = start(&[]);
    let all = exchange(server.resp_addr(), b"PING\r\nINFO\r\n");
    for line in [
        "# Server\r\n",
        "\r\n# Clients\r\nconnected_clients:1\r\n",
        "\r\n# Stats\r\n",
        "total_commands_processed:2\r\n",
    ] {
        assert!(all.contains(line), "{line:?} in {all:?}");
    }
    let clients = exchange(server.resp_addr(), b"INFO clients\r\n");
    assert!(clients.contains("# Clients\r\n"), "{clients:?}");
    assert!(!clients.contains("# Server"), "{clients:?}");
}

/// `TOLLGATE.CHECK` of a shadow policy that would deny answers allowed, with no wait: a shadow
/// is invisible to clients on every front end.
#[test]
fn tollgate_check_of_a_shadow_that_would_deny_answers_allowed_with_no_wait() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "t.toml",
        "[policies.tiny]\ncapacity = 1\nperiod = \"1h\"\nshadow = true\n",
    );
    let server = start(&["--config", file.to_str().unwrap()]);
    let replies = exchange(
        server.resp_addr(),
        b"TOLLGATE.CHECK tiny k\r\nTOLLGATE.CHECK tiny k\r\n",
    );
    let second = replies.split("*5\r\n").nth(2).unwrap_or_default();
    // allowed, limit 1, nothing left, no wait, then the time until the bucket is full again.
    assert!(
        second.starts_with(":1\r\n:1\r\n:0\r\n:0\r\n:"),
        "{replies:?}"
    );
}

/// A client that pipelines commands and stops reading its replies is dropped once it has not
/// read for the idle timeout: the server neither blocks on it forever nor keeps answering into
/// memory. So it gets fewer replies than the commands it managed to send.
#[test]
fn a_client_that_stops_reading_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "t.toml", "[resp]\nidle_timeout = \"300ms\"\n");
    let server = start(&["--config", file.to_str().unwrap()]);
    let mut stream = TcpStream::connect(server.resp_addr()).unwrap();
    stream
        .set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    // PINGs until the socket buffers are full both ways (the replies fill the client's, then
    // the server stops reading and the requests fill the server's).
    let chunk = b"PING\r\n".repeat(64 * 1024 / 6);
    let mut sent = 0;
    while sent < 64 * 1024 * 1024 {
        match stream.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    assert!(sent < 64 * 1024 * 1024, "the server never stopped reading");
    std::thread::sleep(Duration::from_millis(1000));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut replies = Vec::new();
    stream.read_to_end(&mut replies).unwrap();
    let answered = replies.len() / b"+PONG\r\n".len();
    assert!(
        answered < sent / 6,
        "{answered} replies to {} commands",
        sent / 6
    );
    // The server still answers others.
    assert_eq!(redis_cli(server.resp_addr(), &["PING"]), "PONG\n");
}

/// Issue 27: redis-cell 0.5.0 refuses no negative number; each is answered with the module's
/// reply, byte for byte (worked out through its source), and none gives tokens back.
#[test]
fn each_negative_cl_throttle_argument_is_answered_as_redis_cell_answers_it() {
    let server = start(&[]);
    let command = |args: &[&str]| {
        let mut bytes = format!("*{}\r\n", args.len() + 1);
        for arg in std::iter::once(&"CL.THROTTLE").chain(args) {
            bytes.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        exchange(server.resp_addr(), bytes.as_bytes())
    };
    let array = |n: [i64; 5]| {
        let items: String = n.iter().map(|i| format!(":{i}\r\n")).collect();
        format!("*5\r\n{items}")
    };
    let expire = "-Cell error: Error while setting key expire\r\n";
    // max_burst: a limit of 0 or below, every request limited, no wait given.
    assert_eq!(command(&["a", "-1", "1", "60"]), array([1, 0, 0, -1, 0]));
    assert_eq!(command(&["a", "-5", "1", "60"]), array([1, -4, 0, -1, 0]));
    // count, period: a negative emission interval, limited.
    assert_eq!(command(&["b", "5", "-1", "60"]), array([1, 6, 0, -1, 0]));
    assert_eq!(command(&["c", "5", "1", "-60"]), array([1, 6, 0, -1, 0]));
    // Both: a positive rate, 1 per 60 s.
    assert_eq!(command(&["d", "5", "-1", "-60"]), array([0, 6, 5, -1, 60]));
    // quantity: on a fresh key, the module writes an expiry in the past, which Redis refuses.
    assert_eq!(command(&["e", "5", "1", "60", "-1"]), expire);
    // On a key spent by 3, the module answers as if one came back; tollgate gives none back.
    assert_eq!(
        command(&["f", "5", "1", "60", "3"]),
        array([0, 6, 3, -1, 180])
    );
    assert_eq!(
        command(&["f", "5", "1", "60", "-1"]),
        array([0, 6, 4, -1, 120])
    );
    assert_eq!(
        command(&["f", "5", "1", "60", "0"]),
        array([0, 6, 3, -1, 180])
    );
}

/// Issue 27: an unknown command's reply echoes at most 128 bytes of its name and 128 of its
/// arguments, as Redis 7 words it (`'%.128s'`, then `'%.*s' ` per argument while under 128
/// bytes), raw bytes cut at a NUL and by byte, CR and LF as spaces; it once echoed 64 KiB.
#[test]
fn an_unknown_command_is_echoed_as_redis_7_cuts_it() {
    let server = start(&[]);
    let send = |args: &[&[u8]]| -> Vec<u8> {
        let mut bytes = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            bytes.extend(format!("${}\r\n", arg.len()).into_bytes());
            bytes.extend_from_slice(arg);
            bytes.extend_from_slice(b"\r\n");
        }
        let mut stream = TcpStream::connect(server.resp_addr()).unwrap();
        stream.write_all(&bytes).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).unwrap();
        out
    };
    let huge = vec![b'n'; 64 << 10];
    let (a100, b100) = (vec![b'a'; 100], vec![b'b'; 100]);
    let mut expected = b"-ERR unknown command '".to_vec();
    expected.extend(&huge[..128]);
    expected.extend(b"', with args beginning with: '");
    expected.extend(&a100);
    // 103 bytes so far: 25 left for the second argument, and none for a third.
    expected.extend(b"' '");
    expected.extend(&b100[..25]);
    expected.extend(b"' \r\n");
    assert_eq!(send(&[&huge, &a100, &b100, b"c"]), expected);
    // A NUL ends a name or an argument; a cut may split a UTF-8 character; CR and LF are spaces.
    let name = [&[b'x'; 127][..], "é".as_bytes()].concat();
    let mut expected = b"-ERR unknown command '".to_vec();
    expected.extend(&name[..128]);
    expected.extend(b"', with args beginning with: 'a' 'b c d' '' \r\n");
    assert_eq!(send(&[&name, b"a\0hidden", b"b\rc\nd", b""]), expected);
    assert_eq!(
        send(&[b"NOSUCH"]),
        b"-ERR unknown command 'NOSUCH', with args beginning with: \r\n"
    );
}
