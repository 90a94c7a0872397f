//! `[admin] listen`: the operators' endpoints move to their own port and are gone from the
//! data port, which keeps what a client needs to be limited.

use reqwest::{Client, StatusCode};

use crate::support::{self, Tollgate};

#[tokio::test]
async fn the_admin_listener_takes_the_operators_endpoints_off_the_data_port() {
    let (_dir, path) = support::envoy::configured(
        "listen = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[policies.api]\ncapacity = 5\nperiod = \"1h\"\n",
        &[(
            "a.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n",
        )],
    );
    let server = Tollgate::start(&["--config", path.to_str().unwrap()]);
    let (data, admin) = (server.addr, server.admin_addr());
    assert!(
        server.banner.contains(&format!("admin http://{admin}")),
        "{}",
        server.banner
    );
    let client = Client::new();
    let status = |addr, method: reqwest::Method, path: &str| {
        let request = client.request(method, format!("http://{addr}{path}"));
        async move { request.send().await.unwrap().status() }
    };
    let check = client
        .post(format!("http://{data}/v1/check"))
        .body(r#"{"policy": "api", "key": "alice"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(check.status(), StatusCode::OK);
    use reqwest::Method;
    for (method, path) in [
        (Method::GET, "/metrics"),
        (Method::GET, "/v1/policies"),
        (Method::GET, "/v1/buckets/api/alice"),
        (Method::DELETE, "/v1/buckets/api/alice"),
        (Method::GET, "/rlconfig"),
    ] {
        assert_eq!(
            status(data, method.clone(), path).await,
            StatusCode::NOT_FOUND,
            "data {method} {path}"
        );
        let answered = status(admin, method.clone(), path).await;
        assert!(answered.is_success(), "admin {method} {path}: {answered}");
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(status(data, Method::GET, path).await, StatusCode::OK);
        assert_eq!(status(admin, Method::GET, path).await, StatusCode::OK);
    }
    // The admin port decides nothing.
    assert_eq!(
        client
            .post(format!("http://{admin}/v1/check"))
            .body(r#"{"policy": "api", "key": "alice"}"#)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    // Its connections are counted under their own listener.
    let text = client
        .get(format!("http://{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(support::metric(&text, r#"tollgate_connections_total{listener="admin"}"#) >= 1.0);
}

/// Issue 44, point 6: with `examples/tollgate.toml`, a scraper pointed at the data port got a
/// bare 404 for `/metrics`, with no hint that it moved. The 404 says where it is served now.
#[tokio::test]
async fn the_data_port_says_where_the_operators_endpoints_moved() {
    let dir = tempfile::tempdir().unwrap();
    let path = support::write(
        dir.path(),
        "tollgate.toml",
        "[admin]\nlisten = \"127.0.0.1:0\"\n[policies.api]\ncapacity = 5\nperiod = \"1h\"\n",
    );
    let server = Tollgate::start(&["--config", path.to_str().unwrap()]);
    let admin = format!("http://{}", server.admin_addr());
    let client = Client::new();
    for path in ["/metrics", "/v1/policies", "/v1/buckets/api/alice"] {
        let response = client
            .get(format!("http://{}{path}", server.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: serde_json::Value =
            serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("served on the admin listener ({admin})")),
            "{path}: {detail}"
        );
    }
    // Other paths are just not found.
    let response = client
        .get(format!("http://{}/nothing", server.addr))
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(body["detail"], "nothing is served at /nothing");
}
