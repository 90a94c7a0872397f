//! The tower middleware over real TCP: an axum app served with `ConnectInfo`, a real HTTP
//! client, and the memory store under a manual clock (Redis for the store-failure cases).
#![cfg(all(feature = "tower", feature = "axum", feature = "redis"))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::request::Parts;
use axum::routing::{get, post};
use reqwest::{Client, Response, StatusCode};
use tokio::net::TcpListener;
use tollgate::middleware::{ClientIp, Header, MissingKey, NamedPolicy, TierTable, TollgateLayer};
use tollgate::store::guarded::FailPolicy;
use tollgate::{ManualClock, MemoryStore, Nanos, Policy, RedisStore};
use tollgate_testkit::TestRedis;

fn policy(capacity: u64, refill: u64) -> Policy {
    Policy::token_bucket(capacity, refill, Duration::from_secs(1)).unwrap()
}

fn clock() -> ManualClock {
    ManualClock::new(Nanos::new(1_000_000_000))
}

fn store(clock: &ManualClock) -> MemoryStore<ManualClock> {
    MemoryStore::builder().clock(clock.clone()).build()
}

/// Serves `/hello` (GET), `/upload` (POST) and `/status` behind `layer`; returns the base URL.
async fn serve(layer: TollgateLayer) -> String {
    let app = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route("/upload", post(|| async { "stored" }))
        .route("/status", get(|| async { "ok" }))
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}")
}

fn header<'r>(response: &'r Response, name: &str) -> Option<&'r str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

async fn get_with(client: &Client, url: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn the_eleventh_request_of_a_burst_of_ten_is_a_429_with_honest_headers() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("api", policy(10, 10))
        .legacy_headers(true)
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    for i in 0..10u64 {
        let response = get_with(&client, &format!("{base}/hello"), &[]).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        assert_eq!(
            header(&response, "ratelimit-policy"),
            Some(r#""api";q=10;w=1"#)
        );
        let expected = format!(r#""api";r={};t=1"#, 9 - i);
        assert_eq!(header(&response, "ratelimit"), Some(expected.as_str()));
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            Some(&*(9 - i).to_string())
        );
        assert_eq!(response.text().await.unwrap(), "hello");
    }
    let denied = get_with(&client, &format!("{base}/hello"), &[]).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), Some("1"));
    assert_eq!(header(&denied, "ratelimit"), Some(r#""api";r=0;t=1"#));
    assert_eq!(
        header(&denied, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(header(&denied, "x-ratelimit-limit"), Some("10"));
    let problem: serde_json::Value = serde_json::from_str(&denied.text().await.unwrap()).unwrap();
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["type"], "urn:tollgate:problem:rate-limited");

    // Retry-After is honest: after the wait (one token every 100 ms; 1 s covers it) it passes.
    clock.advance(Duration::from_millis(99));
    let early = get_with(&client, &format!("{base}/hello"), &[]).await;
    assert_eq!(early.status(), StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_millis(1));
    let on_time = get_with(&client, &format!("{base}/hello"), &[]).await;
    assert_eq!(on_time.status(), StatusCode::OK);
}

#[tokio::test]
async fn spoofed_forwarding_headers_from_an_untrusted_peer_change_nothing() {
    let clock = clock();
    // The test client connects from 127.0.0.1, which is not trusted here.
    let layer = TollgateLayer::builder(store(&clock))
        .policy("api", policy(2, 1))
        .key(ClientIp::new().trust(["10.0.0.0/8".parse().unwrap()]))
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    for spoof in ["203.0.113.1", "203.0.113.2"] {
        let r = get_with(
            &client,
            &format!("{base}/hello"),
            &[("x-forwarded-for", spoof)],
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = get_with(
        &client,
        &format!("{base}/hello"),
        &[("x-forwarded-for", "203.0.113.3")],
    )
    .await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "one budget: the peer's"
    );
}

#[tokio::test]
async fn behind_trusted_proxies_the_client_is_the_rightmost_untrusted_hop() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("api", policy(1, 1))
        .key(ClientIp::new().trust([
            "127.0.0.1/32".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ]))
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    let url = format!("{base}/hello");
    let via = |chain: &'static str| [("x-forwarded-for", chain)];
    assert_eq!(
        get_with(&client, &url, &via("203.0.113.9, 10.0.0.2"))
            .await
            .status(),
        StatusCode::OK
    );
    // The same client, with a spoofed entry of its own on the left: same budget, spent.
    let again = get_with(&client, &url, &via("6.6.6.6, 203.0.113.9, 10.0.0.2")).await;
    assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another client behind the same proxies has its own budget.
    assert_eq!(
        get_with(&client, &url, &via("198.51.100.4, 10.0.0.2"))
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn two_ipv6_addresses_in_one_64_share_a_budget() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("api", policy(1, 1))
        .key(ClientIp::new().trust(["127.0.0.1/32".parse().unwrap()]))
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    let url = format!("{base}/hello");
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    assert_eq!(
        get_with(&client, &url, &from("2001:db8:1:2::1"))
            .await
            .status(),
        StatusCode::OK
    );
    let same_64 = get_with(&client, &url, &from("2001:db8:1:2:ffff::7")).await;
    assert_eq!(same_64.status(), StatusCode::TOO_MANY_REQUESTS);
    let next_64 = get_with(&client, &url, &from("2001:db8:1:3::1")).await;
    assert_eq!(next_64.status(), StatusCode::OK);
}

#[tokio::test]
async fn tiers_costs_peeks_and_several_policies() {
    let clock = clock();
    let tiers = TierTable::new();
    tiers.insert(
        b"gold-key".to_vec(),
        vec![NamedPolicy::new("gold", policy(20, 20))],
    );
    let layer = TollgateLayer::builder(store(&clock))
        .policy("second", policy(10, 10))
        .policy(
            "hour",
            Policy::token_bucket(12, 12, Duration::from_secs(3600)).unwrap(),
        )
        .key(Header::new(axum::http::HeaderName::from_static(
            "x-api-key",
        )))
        .tiers(tiers.clone())
        .cost(
            |parts: &Parts| match (parts.method.as_str(), parts.uri.path()) {
                ("POST", _) => 5,
                (_, "/status") => 0,
                _ => 1,
            },
        )
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    let key = |k: &'static str| [("x-api-key", k)];

    // Both default policies in the headers; a POST costs 5.
    let r = client
        .post(format!("{base}/upload"))
        .header("x-api-key", "free")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some(r#""second";q=10;w=1, "hour";q=12;w=3600"#)
    );
    assert_eq!(
        header(&r, "ratelimit"),
        Some(r#""second";r=5;t=1, "hour";r=7;t=1500"#)
    );
    // A peek is free and tells the state.
    let peek = get_with(&client, &format!("{base}/status"), &key("free")).await;
    assert_eq!(
        header(&peek, "ratelimit"),
        Some(r#""second";r=5;t=1, "hour";r=7;t=1500"#)
    );
    // A second later another POST passes both (the hourly bucket keeps 2); the next one is
    // denied by the hourly bucket alone, and the per-second one is not charged (r=5).
    clock.advance(Duration::from_secs(1));
    let r = client
        .post(format!("{base}/upload"))
        .header("x-api-key", "free")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = client
        .post(format!("{base}/upload"))
        .header("x-api-key", "free")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&r, "ratelimit"),
        Some(r#""second";r=5;t=1, "hour";r=2;t=2999"#)
    );

    // The gold key has its own, larger tier.
    for _ in 0..4 {
        let r = client
            .post(format!("{base}/upload"))
            .header("x-api-key", "gold-key")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    // And a key without a header is refused, not guessed.
    let r = get_with(&client, &format!("{base}/hello"), &[]).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Tiers change at run time.
    tiers.remove(b"gold-key");
    let r = get_with(&client, &format!("{base}/hello"), &key("gold-key")).await;
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some(r#""second";q=10;w=1, "hour";q=12;w=3600"#)
    );
}

#[tokio::test]
async fn a_missing_key_can_be_let_through() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("api", policy(1, 1))
        .key(Header::new(axum::http::HeaderName::from_static(
            "x-api-key",
        )))
        .on_missing_key(MissingKey::Allow)
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    for _ in 0..3 {
        let r = get_with(&client, &format!("{base}/hello"), &[]).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, "ratelimit"), None, "unlimited, so no headers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_connections_share_one_budget() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("api", policy(10, 10))
        .build()
        .unwrap();
    let base = serve(layer).await;
    // A client per request: 50 separate connections, at once.
    let requests: Vec<_> = (0..50)
        .map(|_| {
            let url = format!("{base}/hello");
            tokio::spawn(async move {
                let client = Client::builder().pool_max_idle_per_host(0).build().unwrap();
                client.get(url).send().await.unwrap().status()
            })
        })
        .collect();
    let mut allowed = 0;
    for request in requests {
        let status = request.await.unwrap();
        assert!(status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS);
        allowed += u32::from(status == StatusCode::OK);
    }
    assert_eq!(allowed, 10, "the clock does not move: exactly the burst");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_and_fail_closed_when_redis_stops() {
    let mut redis = TestRedis::start().unwrap();
    if !redis.is_owned() {
        eprintln!("TOLLGATE_REDIS_URL names an external Redis, which this test cannot stop");
        return;
    }
    let layer = |fail: FailPolicy, store: RedisStore| {
        TollgateLayer::builder(store)
            .policy("api", policy(100, 100))
            .on_store_error(fail)
            .build()
            .unwrap()
    };
    let connect = || async {
        RedisStore::builder(redis.url())
            .timeout(Duration::from_millis(50))
            .build()
            .await
            .unwrap()
    };
    let open = serve(layer(FailPolicy::Allow, connect().await)).await;
    let closed = serve(layer(FailPolicy::Deny, connect().await)).await;
    let client = Client::new();
    for base in [&open, &closed] {
        assert_eq!(
            get_with(&client, &format!("{base}/hello"), &[])
                .await
                .status(),
            StatusCode::OK
        );
    }
    redis.stop().unwrap();
    let r = get_with(&client, &format!("{open}/hello"), &[]).await;
    assert_eq!(r.status(), StatusCode::OK, "fail open");
    let r = get_with(&client, &format!("{closed}/hello"), &[]).await;
    assert_eq!(
        r.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "fail closed, never 500"
    );
    assert_eq!(header(&r, "retry-after"), Some("1"));
    assert_eq!(header(&r, "content-type"), Some("application/problem+json"));
}

#[tokio::test]
async fn waiting_holds_a_request_until_its_token_arrives() {
    // Real time here: the layer sleeps; the store must see that time pass.
    let layer = TollgateLayer::builder(MemoryStore::new())
        .policy("api", policy(1, 10))
        .max_wait(Duration::from_millis(500))
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    assert_eq!(
        get_with(&client, &format!("{base}/hello"), &[])
            .await
            .status(),
        StatusCode::OK
    );
    // Denied now, but its token is 100 ms away, within the 500 ms it may wait.
    assert_eq!(
        get_with(&client, &format!("{base}/hello"), &[])
            .await
            .status(),
        StatusCode::OK
    );

    let strict = TollgateLayer::builder(MemoryStore::new())
        .policy(
            "api",
            Policy::token_bucket(1, 1, Duration::from_secs(10)).unwrap(),
        )
        .max_wait(Duration::from_millis(500))
        .build()
        .unwrap();
    let base = serve(strict).await;
    assert_eq!(
        get_with(&client, &format!("{base}/hello"), &[])
            .await
            .status(),
        StatusCode::OK
    );
    let r = get_with(&client, &format!("{base}/hello"), &[]).await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "10 s away: not worth waiting"
    );
    assert_eq!(header(&r, "retry-after"), Some("10"));
}

#[tokio::test]
async fn a_custom_rejection_keeps_the_headers() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("api", policy(1, 1))
        .rejection(|rejection, _| {
            let mut response = rejection.default_response();
            *response.body_mut() = "slow down".into();
            response
                .headers_mut()
                .insert("content-type", "text/plain".parse().unwrap());
            response
        })
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    get_with(&client, &format!("{base}/hello"), &[]).await;
    let r = get_with(&client, &format!("{base}/hello"), &[]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "ratelimit"), Some(r#""api";r=0;t=1"#));
    assert_eq!(r.text().await.unwrap(), "slow down");
}

#[tokio::test]
async fn a_custom_rejection_sees_the_policy_that_denied_and_its_decision() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("second", policy(10, 10))
        .policy("login", policy(1, 1))
        .rejection(|rejection, _| {
            let mut response = rejection.default_response();
            let (name, decision) = (rejection.policy(), rejection.decision());
            *response.body_mut() = format!(
                "{} allows {} ({} left)",
                name.unwrap_or("?"),
                decision.map_or(0, |d| d.limit()),
                decision.map_or(0, |d| d.remaining()),
            );
            response
        })
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    get_with(&client, &format!("{base}/hello"), &[]).await;
    let r = get_with(&client, &format!("{base}/hello"), &[]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.text().await.unwrap(), "login allows 1 (0 left)");
}

#[test]
fn layers_without_policies_or_with_duplicate_names_are_refused() {
    let none = TollgateLayer::builder(MemoryStore::new()).build();
    assert!(none.is_err());
    let twice = TollgateLayer::builder(MemoryStore::new())
        .policy("api", policy(1, 1))
        .policy("api", policy(2, 2))
        .build();
    assert_eq!(
        twice.err().unwrap().to_string(),
        r#"two policies are named "api""#
    );
    let _ = Arc::new(());
}

/// A layer with two policies on a Redis Cluster once answered every request `503` (the store refused checks whose bucket names differed, since the middleware put the
/// policy's name into the key). Buckets are now named by the policy and keyed by the client
/// alone, so both policies of a client share its hash slot: one atomic script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_policies_of_one_client_on_a_redis_cluster() {
    let cluster = tollgate_testkit::TestRedisCluster::start(3).expect("start a 3-master cluster");
    let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
    let store = RedisStore::builder("")
        .cluster(cluster.urls())
        .test_clock(clock.clone())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect to the cluster");
    let layer = TollgateLayer::builder(store)
        .policy("per_second", policy(5, 5))
        .policy(
            "per_hour",
            Policy::token_bucket(8, 8, Duration::from_secs(3600)).unwrap(),
        )
        .key(Header::new(axum::http::HeaderName::from_static(
            "x-api-key",
        )))
        .on_store_error(FailPolicy::Allow)
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    let burst = |key: &'static str| {
        let (client, url) = (client.clone(), format!("{base}/hello"));
        async move {
            let mut statuses = Vec::new();
            for _ in 0..7 {
                let r = get_with(&client, &url, &[("x-api-key", key)]).await;
                statuses.push(r.status());
            }
            statuses
        }
    };
    let allowed = |statuses: &[StatusCode]| {
        assert!(
            statuses
                .iter()
                .all(|s| *s == StatusCode::OK || *s == StatusCode::TOO_MANY_REQUESTS),
            "no 5xx: {statuses:?}"
        );
        statuses.iter().filter(|s| **s == StatusCode::OK).count()
    };
    for key in ["alice", "bob", "carol"] {
        assert_eq!(
            allowed(&burst(key).await),
            5,
            "{key}: the per-second bucket"
        );
    }
    // A second on, the per-second bucket is full again; the hourly one holds 3 of 8.
    clock.advance(Duration::from_secs(1));
    assert_eq!(allowed(&burst("alice").await), 3, "the hourly bucket");
}

/// The tokens a handler says it used, in `x-llm-tokens`.
fn llm_tokens(response: &axum::http::response::Parts) -> Option<u64> {
    response
        .headers
        .get("x-llm-tokens")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Serves `app` on a port of its own; returns its address.
async fn serve_app(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// `cost_after`: reserve an estimate, charge what the handler says it used.
#[tokio::test]
async fn cost_after_charges_the_actual_cost_from_the_response() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy(
            "llm",
            Policy::token_bucket(100, 100, Duration::from_secs(3600)).unwrap(),
        )
        .key(Header::new(axum::http::HeaderName::from_static(
            "x-api-key",
        )))
        .cost(|_| 40)
        .cost_after(llm_tokens)
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/complete",
            get(|query: axum::extract::RawQuery| async move {
                let used = query.0.unwrap_or_default();
                let mut response = axum::response::Response::new(axum::body::Body::from("done"));
                if let Ok(value) = used.parse::<axum::http::HeaderValue>()
                    && !used.is_empty()
                {
                    response.headers_mut().insert("x-llm-tokens", value);
                }
                response
            }),
        )
        .layer(layer);
    let addr = serve_app(app).await;
    let client = Client::new();
    let call = |used: &str| {
        let url = format!("http://{addr}/complete?{used}");
        let client = client.clone();
        async move { get_with(&client, &url, &[("x-api-key", "alice")]).await }
    };
    // 40 reserved of 100; the call used 10, so 30 come back. The headers describe the bucket
    // after that commit, not the reservation.
    let first = call("10").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "ratelimit"), Some("\"llm\";r=90;t=360"));
    // The next reservation sees the refund (100 - 10 - 40 = 50) and uses 70: 30 more than
    // reserved, taken without a denial, 100 - 10 - 70 = 20 left.
    let second = call("70").await;
    assert_eq!(header(&second, "ratelimit"), Some("\"llm\";r=20;t=2880"));
    // A response that says nothing keeps its whole reservation of 40: none left after.
    let third = call("").await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_secs(720)); // 20 tokens refill: 40 in all
    let fourth = call("").await;
    assert_eq!(fourth.status(), StatusCode::OK);
    assert_eq!(header(&fourth, "ratelimit"), Some("\"llm\";r=0;t=3600"));
    assert_eq!(
        call("").await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "kept"
    );
}

/// Issue 43, point 1: requests per minute and tokens per minute in one layer. Each call costs
/// one request and reserves its estimate of tokens; the commit charges the tokens what the
/// call used and the requests one (the layer charged one `cost` to every policy before).
#[tokio::test]
async fn rpm_and_tpm_in_one_layer_each_charged_its_own() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy(
            "requests",
            Policy::token_bucket(3, 3, Duration::from_secs(60)).unwrap(),
        )
        .policy(
            "tokens",
            Policy::token_bucket(1_000, 1_000, Duration::from_secs(60)).unwrap(),
        )
        .key(Header::new(axum::http::HeaderName::from_static(
            "x-api-key",
        )))
        .cost_for("tokens", |_| 400)
        .cost_after_for("tokens", llm_tokens)
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/complete",
            get(|| async { ([("x-llm-tokens", "100")], "done") }),
        )
        .layer(layer);
    let addr = serve_app(app).await;
    let client = Client::new();
    let url = format!("http://{addr}/complete");
    let call = || get_with(&client, &url, &[("x-api-key", "alice")]);
    let first = call().await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        header(&first, "ratelimit"),
        Some("\"requests\";r=2;t=20, \"tokens\";r=900;t=6")
    );
    assert_eq!(
        header(&call().await, "ratelimit"),
        Some("\"requests\";r=1;t=40, \"tokens\";r=800;t=12")
    );
    assert_eq!(call().await.status(), StatusCode::OK);
    // Three requests made: the requests bucket denies, though 700 tokens are left.
    let fourth = call().await;
    assert_eq!(fourth.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&fourth, "retry-after"), Some("20"));
}

/// Issue 43, point 1: a cost for a policy the layer does not have is refused at build.
#[test]
fn a_cost_for_an_unknown_policy_is_refused_at_build() {
    let built = TollgateLayer::builder(MemoryStore::new())
        .policy("requests", policy(10, 10))
        .cost_for("tokenz", |_| 5)
        .build();
    assert_eq!(
        built.err(),
        Some(tollgate::middleware::LayerError::UnknownPolicy(
            "tokenz".into()
        ))
    );
}

/// Issue 43, point 3: a policy the store cannot decide (a 100,000-a-day sliding counter on
/// Redis) is refused when the layer is built, naming it, instead of a 503 on every request.
#[tokio::test]
async fn a_policy_the_store_cannot_decide_is_refused_at_build() {
    let redis = TestRedis::start().expect("start redis-server");
    let store = RedisStore::builder(redis.url()).build().await.unwrap();
    let daily = Policy::sliding_window_counter(100_000, Duration::from_secs(86_400)).unwrap();
    let built = TollgateLayer::builder(store)
        .policy("per-second", policy(10, 10))
        .policy("daily", daily)
        .build();
    match built.err() {
        Some(tollgate::middleware::LayerError::Unsupported { policy, reason }) => {
            assert_eq!(policy, "daily");
            assert_eq!(reason.field(), "capacity");
        }
        other => panic!("built: {other:?}"),
    }
}

/// Issue 43, point 3: a tier's policy the store cannot decide is known only per request: it is
/// refused as the store unavailable (503), and the other keys go on.
#[tokio::test]
async fn a_tier_the_store_cannot_decide_is_refused_per_request() {
    let redis = TestRedis::start().expect("start redis-server");
    let store = RedisStore::builder(redis.url()).build().await.unwrap();
    let daily = Policy::sliding_window_counter(100_000, Duration::from_secs(86_400)).unwrap();
    let tiers = TierTable::new();
    tiers.insert(b"big".to_vec(), vec![NamedPolicy::new("daily", daily)]);
    let layer = TollgateLayer::builder(store)
        .policy("api", policy(10, 10))
        .key(Header::new(axum::http::HeaderName::from_static(
            "x-api-key",
        )))
        .tiers(tiers)
        .on_store_error(FailPolicy::Allow)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    let url = format!("{base}/hello");
    for _ in 0..2 {
        let big = get_with(&client, &url, &[("x-api-key", "big")]).await;
        assert_eq!(big.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let small = get_with(&client, &url, &[("x-api-key", "small")]).await;
    assert_eq!(small.status(), StatusCode::OK);
}

/// Issue 44, point 6: a request that costs more than a capacity can never pass: a 400 naming
/// the cost and the limit (a 429 made clients retry it), and `INVALID_ARGUMENT` for gRPC.
#[tokio::test]
async fn a_cost_above_the_capacity_is_a_400_naming_it() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("uploads", policy(10, 10))
        .key(|_: &Parts| Some("everyone"))
        .cost(|parts| {
            if parts.method == axum::http::Method::POST {
                11
            } else {
                1
            }
        })
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    let response = client.post(format!("{base}/upload")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        header(&response, "retry-after"),
        None,
        "retrying changes nothing"
    );
    let problem: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(
        problem["type"],
        "urn:tollgate:problem:cost-exceeds-capacity"
    );
    assert_eq!(
        problem["detail"],
        "cost 11 exceeds the capacity 10 of the policy \"uploads\": it can never be allowed"
    );
    let grpc = client
        .post(format!("{base}/upload"))
        .header("content-type", "application/grpc")
        .send()
        .await
        .unwrap();
    assert_eq!(header(&grpc, "grpc-status"), Some("3"));
    // Nothing was taken.
    let hello = get_with(&client, &format!("{base}/hello"), &[]).await;
    assert_eq!(header(&hello, "ratelimit"), Some("\"uploads\";r=9;t=1"));
}

/// Issue 43, point 8: a rejection hook answers anything axum turns into a response.
#[tokio::test]
async fn a_rejection_hook_answers_with_into_response() {
    let clock = clock();
    let layer = TollgateLayer::builder(store(&clock))
        .policy("api", policy(1, 1))
        .key(|_: &Parts| Some("everyone"))
        .rejection_with(|rejection, _| {
            let body = serde_json::json!({ "error": "slow down", "policy": rejection.policy() });
            (StatusCode::TOO_MANY_REQUESTS, axum::Json(body))
        })
        .build()
        .unwrap();
    let base = serve(layer).await;
    let client = Client::new();
    let url = format!("{base}/hello");
    assert_eq!(get_with(&client, &url, &[]).await.status(), StatusCode::OK);
    let denied = get_with(&client, &url, &[]).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), Some("1"));
    assert_eq!(
        denied.text().await.unwrap(),
        r#"{"error":"slow down","policy":"api"}"#
    );
}
