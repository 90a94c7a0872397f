//! An axum app behind a reverse proxy on this machine (nginx, say): every client IP gets 10
//! requests a second (bursts of 20), and `POST /login` 5 a minute on top of that.
//!
//! ```sh
//! cargo run -p tollgate --features axum --example axum_per_route
//! curl -i -X POST -H 'x-forwarded-for: 203.0.113.9' localhost:3000/login   # the 6th is a 429
//! ```

use std::net::SocketAddr;

use axum::Router;
use axum::routing::{get, post};
use tollgate::middleware::{ClientIp, TollgateLayer};
use tollgate::{MemoryStore, Policy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The client is the address the proxy appended to X-Forwarded-For; from any other peer the
    // header is ignored.
    let client_ip = ClientIp::new().trust(["127.0.0.1/32".parse()?]);
    let store = MemoryStore::new();
    let per_ip = TollgateLayer::builder(store.clone())
        .policy("ip", Policy::per_second(10)?.burst(20)?)
        .key(client_ip.clone())
        .build()?;
    let login = TollgateLayer::builder(store)
        .policy("login", Policy::per_minute(5)?)
        .key(client_ip)
        .build()?;
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/login", post(|| async { "welcome\n" }).layer(login))
        .layer(per_ip);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
