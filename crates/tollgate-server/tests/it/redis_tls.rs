//! `--store rediss://...`: the server reaches Redis over TLS and verifies its certificate, and
//! refuses to start when it never could.

use crate::support;

use reqwest::{Client, StatusCode};
use tollgate_testkit::{Reply, TestRedis};

use crate::store_config::refused_at_start_with;
use support::Tollgate;

const BODY: &str = r#"{"key": "alice", "capacity": 10, "refill": 10, "period_ms": 1000}"#;

async fn post(client: &Client, server: &Tollgate) -> reqwest::Response {
    let url = format!("http://{}/v1/check", server.addr);
    client.post(url).body(BODY).send().await.unwrap()
}

#[tokio::test]
async fn rediss_decides_in_redis_when_the_ca_is_trusted() {
    let redis = TestRedis::start_tls().expect("start redis-server with TLS");
    let url = redis.tls_url().unwrap();
    let ca = redis.ca_file().unwrap().to_str().unwrap();
    let client = Client::new();

    // rustls reads its roots from the system store, or from the file SSL_CERT_FILE names.
    let trusting = Tollgate::start_with_env(
        &["--store", url, "--on-store-error", "deny"],
        &[("SSL_CERT_FILE", ca)],
    );
    assert!(
        trusting.banner.contains("rediss://localhost"),
        "{}",
        trusting.banner
    );
    let response = post(&client, &trusting).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(body["remaining"], 9);
    // The bucket is in Redis, not in the server's memory.
    let keys = redis.cmd(&[b"KEYS", b"tollgate:v3:*"]).unwrap();
    assert!(
        matches!(&keys, Reply::Array(items) if items.len() == 1),
        "{keys:?}"
    );
}

/// Issue 44, point 3: without the CA, the server used to start and answer every decision with
/// its fail policy (the certificate refused, the store down to it, for good). Settings that can
/// never work stop it at start now, saying what to fix.
#[test]
fn rediss_refuses_to_start_on_a_certificate_not_trusted_or_no_trust_roots() {
    let redis = TestRedis::start_tls().expect("start redis-server with TLS");
    let url = redis.tls_url().unwrap();
    // The system's roots: they do not hold the test's CA.
    refused_at_start_with(
        url,
        &[],
        &[
            "the Redis server's TLS certificate is not trusted",
            "UnknownIssuer",
        ],
    );
    // An empty directory of roots, as a root filesystem with an empty /etc/ssl/certs.
    let empty = tempfile::tempdir().unwrap();
    let empty = empty.path().to_str().unwrap();
    refused_at_start_with(
        url,
        &[("SSL_CERT_DIR", empty)],
        &[
            "no root certificate to check the server's with",
            "SSL_CERT_FILE",
        ],
    );
    // Roots that cannot be read.
    refused_at_start_with(
        url,
        &[("SSL_CERT_FILE", "/nonexistent/ca.pem")],
        &[
            "the root certificates to check the server's with cannot be read",
            "/nonexistent/ca.pem",
        ],
    );
}
