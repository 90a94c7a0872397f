//! `tollgate serve --store postgres://...` and `tollgate migrate`: exact across server processes
//! sharing one PostgreSQL, at READ COMMITTED and at SERIALIZABLE.

use crate::support;

use std::net::SocketAddr;
use std::process::Command;

use tollgate_testkit::TestPostgres;

use support::Tollgate;

fn body(key: &str) -> String {
    format!(r#"{{"key": "{key}", "capacity": 10, "refill": 10, "period_ms": 1000}}"#)
}

async fn three_servers_are_exact(isolation: &str, extra: &[&str]) {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let table = format!("exact_{}", isolation.replace('-', "_"));
    let mut args = vec![
        "--store",
        pg.url(),
        "--postgres-table",
        &table,
        "--postgres-isolation",
        isolation,
    ];
    args.extend_from_slice(&support::PATIENT);
    args.extend_from_slice(extra);
    let servers: Vec<Tollgate> = (0..3).map(|_| Tollgate::start(&args)).collect();
    assert!(
        servers[0].banner.contains("store: postgres"),
        "{}",
        servers[0].banner
    );
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let key = format!("exact-{}", std::process::id());
    let (allowed, other) = support::hammer(&addrs, &body(&key)).await;
    assert!(
        allowed <= 40,
        "{isolation}: allowed {allowed}, the bound is 40"
    );
    if isolation == "read-committed" {
        assert_eq!(
            other, 0,
            "READ COMMITTED needs no retries, so nothing fails"
        );
    }
    assert!(
        allowed >= 38,
        "{isolation}: allowed {allowed} ({other} failed)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_server_processes_sharing_one_postgres_allow_38_to_40_in_3_seconds() {
    three_servers_are_exact("read-committed", &[]).await;
}

/// Also with `--postgres-synchronous-commit`, which the server takes and hands to the store (the
/// test kit's server commits asynchronously whatever the sessions say; what the flag does to a
/// session is checked in the store's own tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_at_serializable_with_retries() {
    three_servers_are_exact("serializable", &["--postgres-synchronous-commit"]).await;
}

fn tollgate(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn migrate_creates_the_schema_and_refuses_stores_without_one() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let (ok, stdout, stderr) = tollgate(&[
        "migrate",
        "--store",
        pg.url(),
        "--postgres-schema",
        "limits",
        "--postgres-unlogged",
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("limits.buckets"), "{stdout}");
    let (ok, _, _) = tollgate(&[
        "migrate",
        "--store",
        pg.url(),
        "--postgres-schema",
        "limits",
    ]);
    assert!(ok, "migrating twice is fine");

    let (ok, _, stderr) = tollgate(&["migrate", "--store", "redis://127.0.0.1:6379"]);
    assert!(!ok);
    assert!(stderr.contains("postgres://"), "{stderr}");
    let (ok, _, stderr) = tollgate(&[
        "migrate",
        "--store",
        pg.url(),
        "--postgres-table",
        "Bad-Name",
    ]);
    assert!(!ok);
    assert!(stderr.contains("table name"), "{stderr}");
}

/// Reservations commit at most once across servers: three servers on one PostgreSQL, reservations made on one, committed on another,
/// replayed on the third: the bound holds and every replay is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_reserve_and_commit_within_the_bound() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let args = [
        &["--store", pg.url(), "--postgres-table", "reservations"][..],
        &support::PATIENT,
    ]
    .concat();
    let servers: Vec<Tollgate> = (0..3)
        .map(|_| Tollgate::start_with_env(&args, &[support::SECRET]))
        .collect();
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let key = format!("reserve-{}", std::process::id());
    let body = format!(
        r#"{{"key": "{key}", "capacity": 10, "refill": 10, "period_ms": 1000, "cost": 4}}"#
    );
    let settled = support::reserve_and_commit(&addrs, &body, 4).await;
    support::assert_settled_within_the_bound(&settled);
}
