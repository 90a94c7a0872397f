//! `--store rediss://...`: the server reaches Redis over TLS and verifies its certificate.

use crate::support;

use reqwest::{Client, StatusCode};
use tollgate_testkit::{Reply, TestRedis};

use support::Tollgate;

const BODY: &str = r#"{"key": "alice", "capacity": 10, "refill": 10, "period_ms": 1000}"#;

async fn post(client: &Client, server: &Tollgate) -> reqwest::Response {
    let url = format!("http://{}/v1/check", server.addr);
    client.post(url).body(BODY).send().await.unwrap()
}

#[tokio::test]
async fn rediss_decides_in_redis_when_the_ca_is_trusted_and_refuses_otherwise() {
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

    // Without the CA, the certificate is refused: the store is down to this server.
    let doubting = Tollgate::start(&["--store", url, "--on-store-error", "deny"]);
    assert_eq!(
        post(&client, &doubting).await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    let ready = client
        .get(format!("http://{}/readyz", doubting.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
}
