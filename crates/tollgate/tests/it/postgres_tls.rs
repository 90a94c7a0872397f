//! The PostgreSQL store over TLS (issue 29, point 14): `sslmode` and `sslrootcert` in the URL,
//! as libpq reads them, against the test kit's PostgreSQL serving TLS with a certificate its
//! own CA signed.
#![cfg(feature = "postgres-tls")]

use std::time::Duration;

use tokio_postgres::NoTls;
use tollgate::{Check, ErrorKind, Policy, PostgresStore, Store, StoreError};
use tollgate_testkit::{TestCa, TestPostgres};

/// `url` with `query` appended.
fn with(pg: &TestPostgres, query: &str) -> String {
    format!("{}?{query}", pg.url())
}

async fn built(url: &str) -> Result<PostgresStore, StoreError> {
    PostgresStore::builder(url)
        .timeout(Duration::from_secs(5))
        .build()
        .await
}

async fn store(url: &str) -> PostgresStore {
    built(url).await.expect("the store builds")
}

/// Building the store at `url` is refused as settings that can never work: the error.
async fn refused(url: &str) -> StoreError {
    let Err(error) = built(url).await else {
        panic!("{url}: built, and every decision would be left to the fail policy");
    };
    assert_eq!(error.kind(), ErrorKind::Config, "{url}: {error}");
    error
}

/// How many of the store's sessions (application name `tollgate`) are over TLS, and in all.
async fn sessions(pg: &TestPostgres) -> (i64, i64) {
    let (client, connection) = tokio_postgres::connect(pg.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'tollgate'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn verify_full_with_the_servers_ca_connects_over_tls_and_decides() {
    let pg = TestPostgres::start_tls().expect("start PostgreSQL with TLS");
    let ca = pg.ca_cert().unwrap().display().to_string();
    let store = store(&with(&pg, &format!("sslmode=verify-full&sslrootcert={ca}"))).await;
    store
        .ready()
        .await
        .expect("verify-full against the server's own CA");
    let policy = Policy::token_bucket(1, 1, Duration::from_secs(60)).unwrap();
    let check = [Check::new(policy, b"alice", 1)];
    assert!(store.decide(&check).await.unwrap().allowed());
    assert!(!store.decide(&check).await.unwrap().allowed());
    let (over_tls, all) = sessions(&pg).await;
    assert!(all > 0, "the store has sessions");
    assert_eq!(over_tls, all, "every session of the store is over TLS");
}

/// A certificate that can never pass is refused when the store is built (issue 44, point 3),
/// not found by the first decision and served with the fail policy.
#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_plainly() {
    let pg = TestPostgres::start_tls().expect("start PostgreSQL with TLS");
    let other = TestCa::new(pg.dir().unwrap(), "other").unwrap();
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = with(
            &pg,
            &format!("sslmode={mode}&sslrootcert={}", other.cert.display()),
        );
        let error = refused(&url).await;
        assert!(error.to_string().contains("not trusted"), "{mode}: {error}");
        assert!(
            error.to_string().contains("UnknownIssuer"),
            "{mode}: {error}"
        );
    }
}

#[tokio::test]
async fn verify_ca_ignores_the_name_and_verify_full_does_not() {
    let pg = TestPostgres::start_tls().expect("start PostgreSQL with TLS");
    let ca = pg.ca_cert().unwrap().display().to_string();
    // The certificate names localhost and 127.0.0.1; `hostaddr` reaches the server under a
    // host name it does not name.
    let url = format!(
        "postgres://postgres@db.invalid:{}/postgres?hostaddr=127.0.0.1&sslrootcert={ca}",
        pg.port()
    );
    store(&format!("{url}&sslmode=verify-ca"))
        .await
        .ready()
        .await
        .expect("verify-ca does not check the name");
    let error = refused(&format!("{url}&sslmode=verify-full")).await;
    assert!(error.to_string().contains("not valid for name"), "{error}");
}

#[tokio::test]
async fn require_against_a_server_without_tls_fails_plainly() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    let error = refused(&with(&pg, "sslmode=require")).await;
    assert!(error.to_string().contains("does not offer TLS"), "{error}");
    // prefer (libpq's default) goes on in the clear.
    store(&with(&pg, "sslmode=prefer"))
        .await
        .ready()
        .await
        .unwrap();
}

#[tokio::test]
async fn an_unknown_sslmode_is_refused_when_built() {
    let error = PostgresStore::builder("postgres://u@127.0.0.1:1/db?sslmode=verify")
        .build()
        .await
        .err()
        .unwrap();
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(error.to_string().contains("verify-full"), "{error}");
}

/// No root certificate to check the server's with: refused when built, naming sslrootcert.
#[tokio::test]
async fn no_trust_roots_are_refused_when_built() {
    let empty = std::env::temp_dir().join(format!("tollgate-no-roots-{}.pem", std::process::id()));
    std::fs::write(&empty, "").unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:1/postgres?sslmode=verify-full&sslrootcert={}",
        empty.display()
    );
    let error = refused(&url).await;
    let _ = std::fs::remove_file(&empty);
    assert!(error.to_string().contains("no root certificate"), "{error}");
    assert!(error.to_string().contains("sslrootcert"), "{error}");
}

/// A host name that does not resolve is refused when built (issue 44, point 3); of several
/// hosts, only when none resolves.
#[tokio::test]
async fn a_host_name_that_does_not_resolve_is_refused_when_built() {
    let error = refused("postgres://postgres@nonexistent.invalid:5432/postgres").await;
    assert!(
        error.to_string().contains("\"nonexistent.invalid\""),
        "{error}"
    );
    assert!(error.to_string().contains("does not resolve"), "{error}");
    let error = refused("postgres://postgres@a.invalid,b.invalid/postgres").await;
    assert!(
        error
            .to_string()
            .contains("none of the PostgreSQL host names"),
        "{error}"
    );
    // One that resolves (and is down): an outage, not a typo.
    store("postgres://postgres@a.invalid:1,127.0.0.1:1/postgres").await;
}
