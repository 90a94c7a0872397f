//! The examples, run as tests: the axum one limits `/hello` per client IP behind a trusted
//! local proxy, the tonic one answers `RESOURCE_EXHAUSTED` past its limit, and the LLM gateway
//! charges the tokens each call used.

#[allow(dead_code)]
#[path = "../../examples/axum.rs"]
mod axum_example;
#[allow(dead_code)]
#[path = "../../examples/llm_gateway.rs"]
mod llm_gateway;
#[allow(dead_code)]
#[path = "../../examples/tonic.rs"]
mod tonic_example;

use std::net::SocketAddr;

use reqwest::{Client, StatusCode};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tollgate::MemoryStore;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

#[tokio::test]
async fn axum_example_limits_hello_per_client_behind_a_trusted_local_proxy() {
    let app = axum_example::router(MemoryStore::new()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    let client = Client::new();
    let hello = |forwarded_for: &'static str| {
        let request = client.get(format!("{base}/hello"));
        async move {
            let request = if forwarded_for.is_empty() {
                request
            } else {
                request.header("x-forwarded-for", forwarded_for)
            };
            request.send().await.unwrap()
        }
    };
    // We connect from 127.0.0.1, the trusted proxy: the header names the client.
    for _ in 0..5 {
        assert_eq!(hello("203.0.113.7").await.status(), StatusCode::OK);
    }
    let denied = hello("203.0.113.7").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "1");
    assert_eq!(denied.headers()["ratelimit-policy"], r#""hello";q=5;w=5"#);
    // Another client behind the proxy, and the proxy itself, have their own budgets.
    assert_eq!(hello("198.51.100.1").await.status(), StatusCode::OK);
    assert_eq!(hello("").await.status(), StatusCode::OK);

    // The API is keyed by API key, with a tier for gold-key.
    let data = |key: &'static str| {
        client
            .get(format!("{base}/api/data"))
            .header("x-api-key", key)
            .send()
    };
    let free = data("free-key").await.unwrap();
    assert_eq!(
        free.headers()["ratelimit-policy"],
        r#""second";q=10;w=1, "minute";q=100;w=60"#
    );
    let gold = data("gold-key").await.unwrap();
    assert_eq!(gold.headers()["ratelimit-policy"], r#""gold";q=50;w=1"#);
}

#[tokio::test]
async fn tonic_example_answers_resource_exhausted_past_its_limit() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(tonic_example::serve(listener, shutdown.clone()));
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    for i in 0..3 {
        let answer = client.check(HealthCheckRequest::default()).await;
        assert!(answer.is_ok(), "call {i}: {answer:?}");
    }
    let status = client
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("retry in 1 s"), "{status:?}");
    shutdown.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn llm_gateway_charges_the_tokens_each_call_used() {
    let app = llm_gateway::router(MemoryStore::new()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = Client::new();
    let complete = |key: &'static str, max_tokens: u64, prompt: &'static str| {
        client
            .post(format!("{base}/v1/complete"))
            .header("x-api-key", key)
            .header("max-tokens", max_tokens.to_string())
            .body(prompt)
            .send()
    };
    // A 400-byte prompt uses 150 tokens: 4,000 reserved, 3,850 given back.
    let prompt = "x".repeat(400).leak();
    let first = complete("alice", 4_000, prompt).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["x-llm-tokens"], "150");
    // The RateLimit header was written before the commit: it shows the reservation.
    assert_eq!(first.headers()["ratelimit"], r#""llm-tokens";r=6000;t=24"#);
    // 10,000 - 150 are left: a reservation of 9,850 fits...
    let second = complete("alice", 9_850, prompt).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    // ...and after it, 9,700 (and what a few milliseconds refill, 1 token per 6 ms): 9,900
    // does not.
    let third = complete("alice", 9_900, prompt).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another key has its own budget.
    assert_eq!(
        complete("bob", 10_000, prompt).await.unwrap().status(),
        StatusCode::OK
    );
}
