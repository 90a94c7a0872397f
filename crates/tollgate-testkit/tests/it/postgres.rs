//! `TestPostgres` against a real PostgreSQL, checked with the `psql` beside its binaries.

use std::{net::TcpStream, path::Path, process::Command, time::Instant};

use tollgate_testkit::TestPostgres;

/// Runs `sql` through psql against the server; stdout on success, stderr on failure.
fn psql(pg: &TestPostgres, sql: &str) -> Result<String, String> {
    let out = Command::new(pg.bin_dir().unwrap().join("psql"))
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            pg.url(),
            "-c",
            sql,
        ])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
#[allow(clippy::disallowed_methods)] // timing the kit itself, not a decision
fn starts_and_answers_queries() {
    let started = Instant::now();
    let pg = TestPostgres::start().unwrap();
    eprintln!("TestPostgres::start took {:?}", started.elapsed());
    assert!(pg.is_owned());
    assert_eq!(
        pg.url(),
        format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port())
    );
    assert_eq!(psql(&pg, "select 1").unwrap(), "1");
    assert_eq!(psql(&pg, "show fsync").unwrap(), "off");
    assert_eq!(psql(&pg, "show max_connections").unwrap(), "200");
    assert_eq!(psql(&pg, "show server_encoding").unwrap(), "UTF8");
}

#[test]
fn stop_and_restart_keep_the_port_and_the_data() {
    let mut pg = TestPostgres::start().unwrap();
    let (port, pid) = (pg.port(), pg.pid().unwrap());
    // Immediate shutdown is a crash: only commits flushed to WAL survive, so make these so.
    psql(
        &pg,
        "set synchronous_commit = on; create table t (n int); insert into t values (42)",
    )
    .unwrap();

    pg.stop().unwrap();
    assert_eq!(pg.pid(), None);
    assert!(!process_exists(pid));
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(psql(&pg, "select 1").is_err());
    pg.stop().unwrap(); // stopping twice is fine

    pg.restart().unwrap();
    assert_eq!(pg.port(), port);
    assert_eq!(psql(&pg, "select n from t").unwrap(), "42");

    // Restarting a running server replaces it.
    let pid = pg.pid().unwrap();
    pg.restart().unwrap();
    assert!(!process_exists(pid));
    assert_eq!(psql(&pg, "select count(*) from t").unwrap(), "1");
}

#[test]
fn drop_stops_the_server_and_removes_its_directory() {
    let pg = TestPostgres::start().unwrap();
    let pid = pg.pid().unwrap();
    let port = pg.port();
    let dir = pg.dir().unwrap().to_owned();
    assert!(dir.join("data/PG_VERSION").is_file());
    assert!(dir.join("postgres.log").is_file());

    drop(pg);
    assert!(!process_exists(pid), "postmaster {pid} survived the drop");
    assert!(!dir.exists(), "{} survived the drop", dir.display());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn two_servers_at_once_are_independent() {
    let a = TestPostgres::start().unwrap();
    let b = TestPostgres::start().unwrap();
    assert_ne!(a.port(), b.port());
    psql(&a, "create table only_in_a (n int)").unwrap();
    assert_eq!(psql(&a, "select count(*) from only_in_a").unwrap(), "0");
    assert!(psql(&b, "select count(*) from only_in_a").is_err());
}
