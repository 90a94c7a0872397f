//! An LLM gateway with the two limits LLM APIs set, requests per minute and tokens per minute,
//! in one layer: each call costs one request, and the tokens it actually used, known only once
//! the model has answered: the middleware reserves an estimate before the handler runs, and
//! commits what the response says, each policy its own amount.
//!
//! ```sh
//! cargo run --release --example llm_gateway         # memory store, 127.0.0.1:3000
//! curl -i -H 'x-api-key: alice' -d 'How tall is the Eiffel tower?' localhost:3000/v1/complete
//! ```
//!
//! Each API key may make 60 calls and spend 10,000 tokens a minute. A call reserves one
//! request and the client's `max-tokens` header (the most the model may use; 2,000 when
//! absent), and is denied with `429` when either budget cannot hold it (`400` when `max-tokens`
//! exceeds what the budget ever holds). The handler sets `x-llm-tokens` to what the model
//! used, and the middleware gives back the rest of the tokens; the request stays charged one.
//! A response without that header keeps the whole reservation: the safe side.

use std::error::Error;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderName};
use axum::response::IntoResponse;
use axum::routing::post;
use tollgate::middleware::{Header, TollgateLayer};
use tollgate::store::settle::Settle;
use tollgate::{MemoryStore, Policy};

/// What a call may reserve when it does not say.
const DEFAULT_MAX_TOKENS: u64 = 2_000;

/// The gateway, its budgets kept in `store`.
pub fn router<S: Settle + Clone>(store: S) -> Result<Router, Box<dyn Error>> {
    let budget = TollgateLayer::builder(store)
        // Every call costs one request (the default cost)...
        .policy("requests", Policy::per_minute(60)?)
        .policy(
            "llm-tokens",
            Policy::token_bucket(10_000, 10_000, Duration::from_secs(60))?,
        )
        .key(Header::new(HeaderName::from_static("x-api-key")))
        // ...and reserves the most tokens it may use...
        .cost_for("llm-tokens", |request| {
            request
                .headers
                .get("max-tokens")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(DEFAULT_MAX_TOKENS)
        })
        // ...of which it is charged what it used.
        .cost_after_for("llm-tokens", |response| {
            response
                .headers
                .get("x-llm-tokens")?
                .to_str()
                .ok()?
                .parse()
                .ok()
        })
        .build()?;
    Ok(Router::new().route("/v1/complete", post(complete).layer(budget)))
}

/// Stands in for the model: one token per four bytes of prompt, plus a short answer.
async fn complete(headers: HeaderMap, prompt: String) -> impl IntoResponse {
    let max = headers
        .get("max-tokens")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(DEFAULT_MAX_TOKENS);
    let used = (prompt.len() as u64 / 4 + 50).min(max);
    ([("x-llm-tokens", used.to_string())], "330 metres.\n")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let app = router(MemoryStore::new())?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 3000)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
