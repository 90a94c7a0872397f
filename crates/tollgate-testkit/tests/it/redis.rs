//! `TestRedis` against a real redis-server: readiness, round trips, faults and cleanup.

use std::{net::TcpStream, path::Path, thread};

use tollgate_testkit::{Reply, TestRedis, TestkitError, redis_cmd};

fn pong() -> Reply {
    Reply::Status("PONG".into())
}

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn starts_and_answers_ping() {
    let redis = TestRedis::start().unwrap();
    assert!(redis.is_owned());
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    assert_eq!(redis_cmd(redis.url(), &[b"PING"]).unwrap(), pong());
    assert_eq!(redis_cmd(redis.port(), &[b"PING"]).unwrap(), pong());
}

#[test]
fn set_then_get_round_trips() {
    let redis = TestRedis::start().unwrap();
    let value = b"binary\r\n\x00value";
    assert_eq!(
        redis.cmd(&[b"SET", b"key", value]).unwrap(),
        Reply::Status("OK".into())
    );
    assert_eq!(
        redis.cmd(&[b"GET", b"key"]).unwrap(),
        Reply::Bulk(value.to_vec())
    );
    assert_eq!(redis.cmd(&[b"GET", b"missing"]).unwrap(), Reply::Nil);
    assert_eq!(
        redis.cmd(&[b"INCRBY", b"n", b"5"]).unwrap(),
        Reply::Integer(5)
    );
    let err = redis.cmd(&[b"INCR", b"key"]).unwrap();
    assert!(
        matches!(err, Reply::Error(ref e) if e.starts_with("ERR")),
        "{err:?}"
    );
}

#[test]
fn fault_commands_are_allowed() {
    let redis = TestRedis::start().unwrap();
    assert_eq!(
        redis.cmd(&[b"DEBUG", b"SLEEP", b"0"]).unwrap(),
        Reply::Status("OK".into())
    );
    assert_eq!(
        redis.cmd(&[b"SCRIPT", b"FLUSH"]).unwrap(),
        Reply::Status("OK".into())
    );
}

#[test]
fn stop_kills_and_restart_comes_back_on_the_same_port_empty() {
    let mut redis = TestRedis::start().unwrap();
    redis.cmd(&[b"SET", b"key", b"v"]).unwrap();
    let (port, pid) = (redis.port(), redis.pid().unwrap());

    redis.stop().unwrap();
    assert_eq!(redis.pid(), None);
    assert!(!process_exists(pid));
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    let err = redis.cmd(&[b"PING"]).unwrap_err();
    assert!(matches!(err, TestkitError::Io { .. }), "{err}");
    redis.stop().unwrap(); // stopping twice is fine

    redis.restart().unwrap();
    assert_eq!(redis.port(), port);
    assert_ne!(redis.pid(), Some(pid));
    assert_eq!(redis.cmd(&[b"PING"]).unwrap(), pong());
    assert_eq!(redis.cmd(&[b"GET", b"key"]).unwrap(), Reply::Nil);

    // Restarting a running server replaces it.
    let pid = redis.pid().unwrap();
    redis.restart().unwrap();
    assert!(!process_exists(pid));
    assert_eq!(redis.cmd(&[b"PING"]).unwrap(), pong());
}

#[test]
fn two_instances_get_different_ports() {
    let a = TestRedis::start().unwrap();
    let b = TestRedis::start().unwrap();
    assert_ne!(a.port(), b.port());
    a.cmd(&[b"SET", b"owner", b"a"]).unwrap();
    assert_eq!(b.cmd(&[b"GET", b"owner"]).unwrap(), Reply::Nil);
}

#[test]
fn drop_kills_the_server_and_removes_its_directory() {
    let redis = TestRedis::start().unwrap();
    let pid = redis.pid().unwrap();
    let dir = redis.dir().unwrap().to_owned();
    let port = redis.port();
    assert!(process_exists(pid));
    assert!(dir.join("redis.log").is_file());

    drop(redis);
    assert!(!process_exists(pid), "redis-server {pid} survived the drop");
    assert!(!dir.exists(), "{} survived the drop", dir.display());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn a_handle_outlives_the_thread_that_created_it() {
    // PR_SET_PDEATHSIG fires when the forking thread exits; the kit forks from its own thread.
    let redis = thread::spawn(|| TestRedis::start().unwrap())
        .join()
        .unwrap();
    thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(redis.cmd(&[b"PING"]).unwrap(), pong());
}
