//! The `tollgate` binary as a user runs it: it announces where it listens and on which store,
//! serves, finishes a request in flight when told to stop, and refuses bad arguments clearly.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::Tollgate;

const BODY: &str = r#"{"key": "alice", "capacity": 10, "refill": 10, "period_ms": 1000}"#;

fn request(body: &str) -> String {
    format!(
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn exchange(stream: &mut TcpStream, bytes: &[u8]) -> String {
    stream.write_all(bytes).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn serves_on_the_memory_store_and_says_so() {
    let server = Tollgate::start(&[]);
    assert!(server.banner.contains("store: memory"), "{}", server.banner);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let response = exchange(&mut stream, request(BODY).as_bytes());
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"remaining\":9"), "{response}");
}

#[test]
fn sigterm_finishes_the_request_in_flight_then_exits_cleanly() {
    let mut server = Tollgate::start(&[]);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let whole = request(BODY);
    let (head, tail) = whole.split_at(whole.len() - 10);
    stream.write_all(head.as_bytes()).unwrap();
    // Let the server read the head, so the request is in flight when the signal lands.
    std::thread::sleep(Duration::from_millis(200));
    server.terminate();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        server.wait(Duration::ZERO).is_none(),
        "exited with a request in flight"
    );
    let response = exchange(&mut stream, tail.as_bytes());
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let status = server
        .wait(Duration::from_secs(5))
        .expect("exits once the request is answered");
    assert!(status.success(), "{status}");
    // And it no longer accepts.
    assert!(TcpStream::connect(server.addr).is_err());
}

/// Runs the binary to its exit (killing it after 10 s: a refused argument must not leave a
/// server running); returns its exit code and stderr.
fn run(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if waited >= Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("`tollgate {}` still runs after 10 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
        waited += Duration::from_millis(20);
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code().unwrap_or(-1), stderr)
}

#[test]
fn bad_arguments_are_refused_naming_the_option() {
    let (code, stderr) = run(&["--listen", "localhost"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--listen"), "{stderr}");

    let (code, stderr) = run(&["serve", "--store", "mysql://db"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--store") && stderr.contains("mysql"),
        "{stderr}"
    );

    let (code, stderr) = run(&["--on-store-error", "maybe"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--on-store-error"), "{stderr}");

    let (code, stderr) = run(&["bench", "redis", "--concurrency", "many"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--concurrency"), "{stderr}");
    // Checked before anything connects: port 1 is never asked.
    let (code, stderr) = run(&[
        "bench",
        "redis",
        "--redis",
        "redis://127.0.0.1:1",
        "--seconds",
        "0",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--seconds"), "{stderr}");
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let server = Tollgate::start(&[]);
    let addr = server.addr.to_string();
    let (code, stderr) = run(&["serve", "--listen", &addr]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
}

/// `tollgate bench <args> --out DIR` run to its end: the report (stdout), stderr and the
/// output directory; fails the test when the run fails.
fn bench(args: &[&str]) -> (String, String, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out.path())
        .env_remove("TOLLGATE_REDIS_CELL")
        .env_remove("TOLLGATE_THROTTLECRAB")
        .output()
        .unwrap();
    let report = String::from_utf8(run.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{report}{stderr}");
    (report, stderr, out)
}

/// `tollgate bench http` measures the server's own router beside the middleware: every check
/// by name answered 200 with the RateLimit headers.
#[test]
fn bench_http_measures_the_server_variant() {
    let (report, _, out) = bench(&[
        "http",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
        "--connections",
        "4",
        "--keys",
        "20",
        "--warmup",
        "0",
    ]);
    let row = report
        .lines()
        .find(|l| l.starts_with("| server |"))
        .unwrap_or_else(|| panic!("no server row in\n{report}"));
    // | variant | requests/s | × bare | × bare per round | p50 | p99 | p50+ | p99+ | CPU | CPU+ |
    // responses | non-200 | errors |
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(&cells[12..14], ["0", "0"], "{row}");
    assert!(
        report.contains("server: ≥ 0.8× the bare handler"),
        "{report}"
    );
    assert!(out.path().join("http.md").exists());
}

/// `tollgate bench resp` without its peers measures tollgate and says, loudly, which peers are
/// missing and why: their goals are not measured, never silently met.
#[test]
fn bench_resp_reports_missing_peers_loudly() {
    let (report, stderr, out) = bench(&[
        "resp",
        "--requests",
        "2000",
        "--rounds",
        "1",
        "--clients",
        "4",
        "--pipelines",
        "1,4",
    ]);
    assert!(stderr.contains("MISSING redis-cell"), "{stderr}");
    assert!(stderr.contains("MISSING throttlecrab"), "{stderr}");
    assert!(report.contains("| tollgate | 4 |"), "{report}");
    assert!(report.contains("redis-cell MISSING"), "{report}");
    assert!(report.contains("| not measured |"), "{report}");
    assert!(out.path().join("resp.svg").exists());
}

/// `tollgate bench grpc` drives Envoy's `ShouldRateLimit` on the memory store (and on Redis
/// when given one), every call allowed; without a Redis, says so.
#[test]
fn bench_grpc_measures_should_rate_limit() {
    let (report, stderr, out) = bench(&[
        "grpc",
        "--seconds",
        "1",
        "--rounds",
        "1",
        "--concurrency",
        "4",
    ]);
    assert!(stderr.contains("NOT MEASURED redis"), "{stderr}");
    assert!(report.contains("| redis | not measured"), "{report}");
    // Every call of the run was answered, and allowed.
    let row = report
        .lines()
        .find(|l| l.starts_with("| 1 | memory |"))
        .unwrap_or_else(|| panic!("a memory run in {report}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let (allowed, errors): (u64, u64) = (cells[6].parse().unwrap(), cells[7].parse().unwrap());
    assert!(allowed > 0 && errors == 0, "{row}");
    assert!(out.path().join("grpc.svg").exists());
}

/// `tollgate bench soak` runs on a Redis with a fault each period, and reports each period and
/// what the process held before and after.
#[test]
fn bench_soak_reports_each_period_and_what_was_held() {
    let redis = tollgate_testkit::TestRedis::start().expect("start redis-server");
    let (report, _, out) = bench(&[
        "soak",
        "--redis",
        redis.url(),
        "--seconds",
        "3",
        "--period",
        "1",
        "--rate",
        "200",
    ]);
    for fault in [
        "CLIENT KILL TYPE normal",
        "CLIENT PAUSE 300 ALL",
        "SCRIPT FLUSH",
    ] {
        assert!(
            report.contains(&format!("`{fault}`")),
            "{fault} in {report}"
        );
    }
    assert!(report.contains("| open file descriptors |"), "{report}");
    // Every period made its calls (200 a second), answered or failed, none lost.
    let calls: Vec<u64> = report
        .lines()
        .filter(|l| l.starts_with("| 1 |") || l.starts_with("| 2 |") || l.starts_with("| 3 |"))
        .map(|l| l.split('|').nth(3).unwrap().trim().parse().unwrap())
        .collect();
    assert_eq!(calls.len(), 3, "{report}");
    assert!(calls.iter().all(|&c| c >= 150), "{calls:?}");
    assert!(out.path().join("soak.md").exists());
}

/// `tollgate bench all --quick` runs every benchmark on throwaway servers it starts itself,
/// and writes an index that describes the machine, links every report and judges every goal.
#[test]
fn bench_all_quick_runs_every_benchmark_and_indexes_them() {
    let (index, stderr, out) = bench(&["all", "--quick"]);
    assert!(index.contains("**A quick run**"), "{index}");
    for name in [
        "memory", "redis", "postgres", "http", "resp", "grpc", "soak",
    ] {
        assert!(
            index.contains(&format!("[{name}]({name}.md)")),
            "{name} in {index}"
        );
        assert!(out.path().join(format!("{name}.md")).exists(), "{name}.md");
        assert!(
            stderr.contains(&format!("] {name}")),
            "{name}'s progress in {stderr}"
        );
    }
    for row in [
        "| CPU |",
        "| memory |",
        "| Redis | 7",
        "| PostgreSQL | 1",
        "| the run took |",
    ] {
        assert!(index.contains(row), "{row} in {index}");
    }
    // Every goal of every report is judged, each one way or the other.
    let goals: Vec<&str> = index.lines().filter(|l| l.starts_with("| **")).collect();
    assert!(goals.len() > 20, "{index}");
    for goal in &goals {
        assert!(
            goal.ends_with("| yes |")
                || goal.ends_with("| **no** |")
                || goal.ends_with("| not measured |"),
            "{goal}"
        );
    }
    assert!(
        index.contains(&format!("{} goals: ", goals.len())),
        "{index}"
    );
    assert!(!index.contains("**failed**"), "{index}");
    let written = std::fs::read_to_string(out.path().join("index.md")).unwrap();
    assert!(
        index.starts_with(&written),
        "stdout starts with the index written"
    );
}

/// A client that sends its request's head a byte at a time (slowloris) is cut off after the
/// header timeout, however often it sends; other clients are served meanwhile.
#[test]
fn a_slow_head_is_cut_off_after_the_header_timeout() {
    let server = Tollgate::start(&[]);
    let mut slow = TcpStream::connect(server.addr).unwrap();
    slow.write_all(b"POST /v1/check HTTP/1.1\r\nHost: tollgate\r\nX-Slow: ")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let timeout = tollgate_server::web::HEADER_READ_TIMEOUT;
    let mut closed_after = None;
    // One more byte of the header every half second, and a reply (or a close) looked for.
    for half in 0..2 * (timeout.as_secs() + 5) {
        if slow.write_all(b"a").is_err() {
            closed_after = Some(half);
            break;
        }
        let mut buf = [0u8; 256];
        match slow.read(&mut buf) {
            Ok(_) => {
                closed_after = Some(half);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                closed_after = Some(half);
                break;
            }
        }
        if half == 2 {
            // Meanwhile, another client is answered.
            let mut other = TcpStream::connect(server.addr).unwrap();
            let answer = exchange(
                &mut other,
                request(r#"{"key": "k", "capacity": 1, "refill": 1, "period_ms": 1000}"#)
                    .as_bytes(),
            );
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
    }
    let half_seconds = closed_after.expect("the slow client was never cut off");
    assert!(
        half_seconds + 2 >= 2 * timeout.as_secs(),
        "cut off after {half_seconds} half-seconds, before the timeout"
    );
}
