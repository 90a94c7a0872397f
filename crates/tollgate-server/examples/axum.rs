//! tollgate's middleware in an axum application:
//!
//! ```sh
//! cargo run --release --example axum                  # memory store, 127.0.0.1:3000
//! PORT=4000 REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example axum
//! curl -i localhost:3000/hello
//! curl -i -H 'x-api-key: gold-key' localhost:3000/api/data
//! ```
//!
//! - `GET /hello`: per client IP, a burst of 5 refilled at 1 per second. `127.0.0.1` is trusted
//!   as a proxy, so behind a local proxy `X-Forwarded-For` picks the client; from any other peer
//!   the header is ignored.
//! - `GET /api/data`: per API key (`x-api-key`), 10 per second and 100 per minute together;
//!   the key `gold-key` has its own tier of 50 per second.

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderName;
use axum::routing::get;
use tollgate::middleware::{ClientIp, Header, NamedPolicy, TierTable, TollgateLayer};
use tollgate::store::guarded::FailPolicy;
use tollgate::{MemoryStore, Policy, RedisStore, Store};

/// The application, rate-limited on `store`.
pub fn router<S: Store + Clone>(store: S) -> Result<Router, Box<dyn Error>> {
    let per_ip = TollgateLayer::builder(store.clone())
        .policy("hello", Policy::token_bucket(5, 1, Duration::from_secs(1))?)
        .key(ClientIp::new().trust(["127.0.0.1/32".parse()?]))
        .build()?;

    let tiers = TierTable::new();
    tiers.insert(
        b"gold-key".to_vec(),
        vec![NamedPolicy::new(
            "gold",
            Policy::token_bucket(50, 50, Duration::from_secs(1))?,
        )],
    );
    let per_key = TollgateLayer::builder(store)
        .policy(
            "second",
            Policy::token_bucket(10, 10, Duration::from_secs(1))?,
        )
        .policy(
            "minute",
            Policy::token_bucket(100, 100, Duration::from_secs(60))?,
        )
        .key(Header::new(HeaderName::from_static("x-api-key")))
        .tiers(tiers)
        // Availability over protection for this API if the store fails.
        .on_store_error(FailPolicy::Allow)
        .build()?;

    Ok(Router::new()
        .route("/hello", get(|| async { "hello\n" }).layer(per_ip))
        .route(
            "/api/data",
            get(|| async { "{\"data\": 42}\n" }).layer(per_key),
        ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse().map_err(|e| format!("PORT={port:?}: {e}"))?,
        Err(_) => 3000,
    };
    let (app, store) = match std::env::var("REDIS_URL") {
        Ok(url) => (router(RedisStore::builder(&url).build().await?)?, url),
        Err(_) => (router(MemoryStore::new())?, "memory".to_owned()),
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "listening on http://{} (store: {store})",
        listener.local_addr()?
    );
    // The peer address is what `ClientIp` keys by.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
