//! A typo never turns limiting off: a store that can never work as configured (no
//! such database or DB index, credentials refused, a URL the driver cannot use, a host name
//! that does not resolve, no trust roots, a certificate not trusted) stops the server at start,
//! fails `config check` and is refused by a reload, in plain words; a store that is merely down
//! is served with the fail policy, and only noted by `config check`.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tollgate::{Clock, MonotonicClock};

use tollgate_testkit::{TestPostgres, TestRedis};

use crate::support::{self, Tollgate, config_check};

/// Runs `tollgate args` to its exit (killed after 10 s: a store refused must not leave a server
/// running), with `env` set (and the machine's own `SSL_CERT_FILE` and `SSL_CERT_DIR` not:
/// the system's roots are then where the TLS client looks by itself); its exit code, its
/// stderr, and how long it ran.
fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, Duration) {
    let clock = MonotonicClock::new();
    let started = clock.now();
    let elapsed = || Duration::from(clock.now() - started);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("`tollgate {}` still runs after 10 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code().unwrap_or(-1), stderr, elapsed())
}

/// Starts the server on `store`: it must exit 1 within a few seconds, saying `says` and naming
/// what to fix.
fn refused_at_start(store: &str, says: &[&str]) {
    refused_at_start_with(store, &[], says);
}

/// [`refused_at_start`] with environment variables `env` set.
pub(crate) fn refused_at_start_with(store: &str, env: &[(&str, &str)], says: &[&str]) {
    let (code, stderr, took) = run(&["--listen", "127.0.0.1:0", "--store", store], env);
    assert_eq!(code, 1, "--store {store}: {stderr}");
    assert!(
        took < Duration::from_secs(5),
        "--store {store}: took {took:?}"
    );
    assert!(stderr.contains("cannot use the store"), "{stderr}");
    assert!(stderr.contains("--store or [store] url"), "{stderr}");
    for said in says {
        assert!(
            stderr.contains(said),
            "--store {store}: wanted {said:?} in {stderr}"
        );
    }
    assert!(!stderr.contains("disagree"), "{stderr}");
}

fn file_naming(dir: &Path, url: &str) -> std::path::PathBuf {
    support::write(
        dir,
        "tollgate.toml",
        &format!(
            "[store]\nurl = \"{url}\"\n\n[policies.api]\ncapacity = 10\nrefill = 10\nperiod = \"1s\"\n"
        ),
    )
}

#[test]
fn a_postgres_database_that_does_not_exist_is_refused_at_start() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let url = format!("postgres://postgres@127.0.0.1:{}/nosuchdb", pg.port());
    refused_at_start(&url, &["database \"nosuchdb\" does not exist"]);
    // A role that does not exist: authentication refused.
    let url = format!("postgres://nobody@127.0.0.1:{}/postgres", pg.port());
    refused_at_start(&url, &["role \"nobody\" does not exist"]);
}

#[test]
fn a_postgres_url_without_host_or_user_is_refused_at_start() {
    refused_at_start("postgres://", &["the PostgreSQL URL names no host"]);
    refused_at_start(
        "postgres://127.0.0.1:1/db",
        &["the PostgreSQL URL names no user"],
    );
}

#[test]
fn a_redis_db_index_out_of_range_is_refused_at_start() {
    let redis = TestRedis::start().expect("start redis-server");
    let url = format!("redis://127.0.0.1:{}/99", redis.port());
    refused_at_start(
        &url,
        &[
            "the Redis server has no such DB index",
            "DB index is out of range",
        ],
    );
}

#[test]
fn a_redis_password_missing_or_wrong_is_refused_at_start() {
    let redis = TestRedis::start().expect("start redis-server");
    redis
        .cmd(&[b"CONFIG", b"SET", b"requirepass", b"s3cret"])
        .expect("set a password");
    let port = redis.port();
    refused_at_start(
        &format!("redis://127.0.0.1:{port}/0"),
        &["Redis asks for a password and the URL gives none"],
    );
    refused_at_start(
        &format!("redis://:wrong@127.0.0.1:{port}/0"),
        &["Redis refused the user or password in the URL"],
    );
    // The right one serves.
    let server = Tollgate::start(&["--store", &format!("redis://:s3cret@127.0.0.1:{port}/0")]);
    assert!(server.banner.contains("store: redis"), "{}", server.banner);
}

/// Issue 44, point 3: a host name that does not resolve used to start, serving every decision
/// with the fail policy (`allow` by default) and a WARN line.
#[test]
fn a_host_name_that_does_not_resolve_is_refused_at_start() {
    // `.invalid` is reserved never to exist (RFC 2606).
    let says = ["\"nonexistent.invalid\"", "does not resolve"];
    refused_at_start("redis://nonexistent.invalid:6379/0", &says);
    refused_at_start("postgres://postgres@nonexistent.invalid/postgres", &says);
    // Of several hosts, none resolves.
    let none = ["none of the Redis host names resolves", "\"b.invalid\""];
    refused_at_start("redis://a.invalid:6379,redis://b.invalid:6379", &none);
    refused_at_start(
        "postgres://postgres@a.invalid:5432,b.invalid:5432/postgres",
        &["none of the PostgreSQL host names resolves"],
    );
    // One resolves (and is down): an outage, served with the fail policy.
    let server = Tollgate::start(&[
        "--store",
        "postgres://postgres@a.invalid:1,127.0.0.1:1/postgres",
    ]);
    assert!(
        server.banner.contains("store: postgres"),
        "{}",
        server.banner
    );
}

#[test]
fn config_check_refuses_a_host_name_that_does_not_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let file = file_naming(dir.path(), "redis://nonexistent.invalid:6379/0");
    let (ok, out, err) = config_check(&file);
    assert!(!ok, "{out}");
    assert!(err.contains("\"nonexistent.invalid\" "), "{err}");
    assert!(err.contains("does not resolve"), "{err}");
}

#[test]
fn a_store_that_is_down_is_served_with_the_fail_policy() {
    let server = Tollgate::start(&["--store", "redis://127.0.0.1:1/0"]);
    assert!(
        server.banner.contains("on store error: allow"),
        "{}",
        server.banner
    );
    let server = Tollgate::start(&["--store", "postgres://postgres@127.0.0.1:1/postgres"]);
    assert!(
        server.banner.contains("store: postgres"),
        "{}",
        server.banner
    );
}

#[test]
fn config_check_refuses_a_store_that_can_never_work() {
    let dir = tempfile::tempdir().unwrap();
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let file = file_naming(
        dir.path(),
        &format!("postgres://postgres@127.0.0.1:{}/nosuchdb", pg.port()),
    );
    let (ok, out, err) = config_check(&file);
    assert!(!ok, "{out}");
    assert!(
        err.contains("database \"nosuchdb\" does not exist"),
        "{err}"
    );

    let redis = TestRedis::start().expect("start redis-server");
    let file = file_naming(
        dir.path(),
        &format!("redis://127.0.0.1:{}/99", redis.port()),
    );
    let (ok, out, err) = config_check(&file);
    assert!(!ok, "{out}");
    assert!(err.contains("DB index is out of range"), "{err}");

    // A store that answers: said so.
    let file = file_naming(dir.path(), redis.url());
    let (ok, out, err) = config_check(&file);
    assert!(ok, "{err}");
    assert!(out.contains("answers"), "{out}");
}

#[test]
fn config_check_passes_when_the_store_is_merely_down() {
    let dir = tempfile::tempdir().unwrap();
    let file = file_naming(dir.path(), "redis://127.0.0.1:1/0");
    let (ok, out, err) = config_check(&file);
    assert!(ok, "{err}");
    assert!(out.contains("ok, 1 policy"), "{out}");
    assert!(out.contains("not reachable from here"), "{out}");
}

/// Issue 44, point 3: such a reload used to log the store as an error and put the rest of the
/// file (its policies) in force anyway; it is refused whole now, as a bad edit is.
#[test]
fn a_reload_naming_a_store_that_can_never_work_is_refused() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let redis = TestRedis::start().expect("start redis-server");
    let file = file_naming(dir.path(), redis.url());
    let log = dir.path().join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    assert!(banner.contains("store: redis"), "{banner}");
    let addr: String = banner
        .split("listening on http://")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    // Another store that can never work, and a policy raised.
    support::write(
        dir.path(),
        "tollgate.toml",
        &format!(
            "[store]\nurl = \"redis://127.0.0.1:{}/99\"\n\n[policies.api]\ncapacity = 20\n\
             refill = 10\nperiod = \"1s\"\n",
            redis.port()
        ),
    );
    let clock = MonotonicClock::new();
    let started = clock.now();
    let said = loop {
        let said = std::fs::read_to_string(&log).unwrap();
        if said.contains("can never work")
            || Duration::from(clock.now() - started) > Duration::from_secs(8)
        {
            break said;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Still serving, on the store and the policies it started with.
    assert!(child.try_wait().unwrap().is_none(), "{said}");
    let policies = get(&addr, "/v1/policies");
    child.kill().unwrap();
    let _ = child.wait();
    assert!(said.contains("config reload refused"), "{said}");
    assert!(said.contains("can never work"), "{said}");
    assert!(said.contains("DB index is out of range"), "{said}");
    assert!(policies.contains("\"capacity\":10"), "{policies}");
}

/// The response to `GET path` from the HTTP server at `addr`, head and body.
fn get(addr: &str, path: &str) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}
