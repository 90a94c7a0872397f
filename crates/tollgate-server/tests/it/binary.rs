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
}

/// Every listen option takes a host name or a port alone, as most servers do: `localhost:0`
/// and `0` both listen on 127.0.0.1 (0: a free port).
#[test]
fn listen_options_take_a_host_name_or_a_port_alone() {
    let server = Tollgate::start_exactly(&["--listen", "localhost:0", "--resp-listen", "0"], &[]);
    assert!(server.addr.ip().is_loopback(), "{}", server.addr);
    let resp = server.resp_addr();
    assert_eq!(resp.ip().to_string(), "127.0.0.1");
}

/// The help reads well: a misspelt option gets clap's suggestion, the top help names every
/// front end, `migrate` lists only the options that mean something to it, and the timeout says
/// its unit.
#[test]
fn help_suggests_and_says_only_what_applies() {
    let (code, stderr) = run(&["--lisen", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("similar argument exists: '--listen'"),
        "{stderr}"
    );
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(help(&["--help"]).contains("Envoy"));
    let migrate = help(&["migrate", "--help"]);
    assert!(migrate.contains("--postgres-table"), "{migrate}");
    for meaningless in [
        "--postgres-isolation",
        "--postgres-connections",
        "--postgres-synchronous-commit",
    ] {
        assert!(!migrate.contains(meaningless), "{meaningless} in {migrate}");
    }
    assert!(help(&["serve", "--help"]).contains("--store-timeout-ms <MS>"));
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

/// A client that sends its first request's head a byte at a time (slowloris) is cut off after
/// the request timeout, however often it sends; other clients are served meanwhile.
#[test]
fn a_slow_head_is_cut_off_after_the_header_timeout() {
    let server = Tollgate::start(&[]);
    let mut slow = TcpStream::connect(server.addr).unwrap();
    slow.write_all(b"POST /v1/check HTTP/1.1\r\nHost: tollgate\r\nX-Slow: ")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let timeout = tollgate_server::net::limits::HTTP.request_timeout;
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
