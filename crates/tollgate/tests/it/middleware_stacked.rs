//! Stacked layers (a global layer around per-route ones, as the README recommends): every
//! layer's `RateLimit-Policy` and `RateLimit` items reach the client, on allowed answers and on
//! 429s alike, and the inner layer's `Retry-After` stays.
#![cfg(all(feature = "tower", feature = "axum"))]

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use reqwest::{Client, Response, StatusCode};
use tokio::net::TcpListener;
use tollgate::middleware::TollgateLayer;
use tollgate::{ManualClock, MemoryStore, Nanos, Policy};

fn header<'r>(response: &'r Response, name: &str) -> Option<&'r str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

fn layer(store: &MemoryStore<ManualClock>, policies: &[(&str, Policy)]) -> TollgateLayer {
    let mut builder = TollgateLayer::builder(store.clone()).legacy_headers(true);
    for (name, policy) in policies {
        builder = builder.policy(name, *policy);
    }
    builder.build().unwrap()
}

#[tokio::test]
async fn stacked_layers_merge_their_headers_on_allowed_answers_and_on_429s() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000));
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let per_second = |n| Policy::token_bucket(n, n, Duration::from_secs(1)).unwrap();
    let hourly = Policy::token_bucket(5, 5, Duration::from_secs(3600)).unwrap();
    let app = Router::new()
        .route(
            "/login",
            get(|| async { "welcome" }).layer(layer(&store, &[("login", per_second(1))])),
        )
        .route(
            "/api",
            get(|| async { "data" })
                .layer(layer(&store, &[("burst", per_second(2)), ("hour", hourly)])),
        )
        .layer(layer(&store, &[("ip", per_second(100))]));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    let client = Client::new();
    let get = |path: &str| client.get(format!("{base}{path}")).send();

    // Allowed: the route's two policies, then the global one.
    let r = get("/api").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some(r#""burst";q=2;w=1, "hour";q=5;w=3600, "ip";q=100;w=1"#)
    );
    assert_eq!(
        header(&r, "ratelimit"),
        Some(r#""burst";r=1;t=1, "hour";r=4;t=720, "ip";r=99;t=1"#)
    );
    // The legacy single-number fields speak for the strictest layer.
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("1"));
    assert_eq!(header(&r, "x-ratelimit-limit"), Some("2"));

    // A 429 from the inner layer keeps its own items and Retry-After, and carries the outer's.
    assert_eq!(get("/login").await.unwrap().status(), StatusCode::OK);
    let r = get("/login").await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "retry-after"), Some("1"));
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some(r#""login";q=1;w=1, "ip";q=100;w=1"#)
    );
    assert_eq!(
        header(&r, "ratelimit"),
        Some(r#""login";r=0;t=1, "ip";r=97;t=1"#)
    );
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(header(&r, "x-ratelimit-limit"), Some("1"));
}
