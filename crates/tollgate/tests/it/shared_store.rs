//! One store shared by the middleware and the application's own code: an `Arc<dyn DynStore>`
//! chosen at run time, and a `Guarded` whose clones count into one set of statistics.
#![cfg(all(feature = "tower", feature = "axum"))]

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use reqwest::StatusCode;
use tokio::net::TcpListener;
use tollgate::middleware::{Header, TollgateLayer};
use tollgate::store::DynStore;
use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::{Check, MemoryStore, Policy, Store};

fn policy() -> Policy {
    Policy::token_bucket(3, 3, Duration::from_secs(3600)).unwrap()
}

/// Serves `/hello` and `/bulk` behind `layer` (keyed by `x-user`, policy `api`); `/bulk` also
/// spends two more of the caller's tokens on `store`, from the handler.
async fn serve<S: Store + Clone>(store: S) -> String {
    let layer = TollgateLayer::builder(store.clone())
        .policy("api", policy())
        .key(Header::new(http::HeaderName::from_static("x-user")))
        .build()
        .unwrap();
    let bulk = move || {
        let store = store.clone();
        async move {
            let check = Check::new(policy(), b"alice", 2).named("api");
            let verdict = store.decide(&[check]).await.unwrap();
            if verdict.allowed() { "spent" } else { "over" }
        }
    };
    let app = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route("/bulk", get(bulk))
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    base
}

async fn fetch(base: &str, path: &str, user: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header("x-user", user)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_store_chosen_at_run_time_is_shared_by_the_middleware_and_the_handlers() {
    let store: Arc<dyn DynStore> = Arc::new(MemoryStore::new());
    let base = serve(Arc::clone(&store)).await;
    // The middleware takes 1 token, the handler 2: alice's bucket of 3 is empty.
    let r = fetch(&base, "/bulk", "alice").await;
    assert_eq!(r.text().await.unwrap(), "spent");
    let r = fetch(&base, "/hello", "alice").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // And the application sees the middleware's charges through its own handle.
    let peek = Check::new(policy(), b"alice", 0).named("api");
    assert_eq!(
        store.decide(&[peek]).await.unwrap().decisions()[0].remaining(),
        0
    );
}

#[tokio::test]
async fn clones_of_a_guarded_store_share_one_set_of_statistics() {
    // A store that holds one key: every other key is a transient failure, answered open.
    let guarded = Guarded::new(
        MemoryStore::builder()
            .max_keys(NonZeroUsize::new(1).unwrap())
            .build(),
        FailPolicy::Allow,
    );
    let base = serve(guarded.clone()).await;
    assert_eq!(
        fetch(&base, "/hello", "alice").await.status(),
        StatusCode::OK
    );
    assert_eq!(fetch(&base, "/hello", "bob").await.status(), StatusCode::OK);
    assert_eq!(
        fetch(&base, "/hello", "carol").await.status(),
        StatusCode::OK
    );
    // The layer's clone failed open twice; the application's handle counts it.
    assert_eq!(guarded.stats().failed_open(), 2);
    assert_eq!(guarded.stats().store_errors(), 2);
}
