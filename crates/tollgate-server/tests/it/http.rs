//! `POST /v1/check` over a real TCP socket, on the memory store under a manual clock: the burst,
//! the 429 and its headers, an honest `Retry-After`, and a 400 naming the field for every kind
//! of bad input, after which the server still answers.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tollgate::store::settle::DynSettle;
use tollgate::{ManualClock, MemoryStore, MemoryStoreBuilder, Nanos};
use tollgate_server::limiter::Limiter;
use tollgate_server::{api, web};

struct Server {
    addr: SocketAddr,
    clock: ManualClock,
    client: Client,
    shutdown: CancellationToken,
}

impl Server {
    async fn start() -> Server {
        Server::start_with(|store| store).await
    }

    /// A server on a memory store configured by `configure`.
    async fn start_with(
        configure: impl FnOnce(MemoryStoreBuilder<ManualClock>) -> MemoryStoreBuilder<ManualClock>,
    ) -> Server {
        let clock = ManualClock::new(Nanos::new(1_000_000_000));
        let store: Arc<dyn DynSettle> =
            Arc::new(configure(MemoryStore::builder().clock(clock.clone())).build());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let limiter = Limiter::builder(store)
            .clock(clock.clone())
            .reservation_ttl(Duration::from_secs(600))
            .build()
            .unwrap();
        let limiter = Arc::new(limiter);
        let listener = web::Listener::new(
            listener,
            "http",
            tollgate_server::net::limits::HTTP,
            limiter.metrics(),
        );
        // As the server serves it: `POST /v1/check` answered before the router.
        tokio::spawn(web::serve(listener, api::front(limiter), shutdown.clone()));
        Server {
            addr,
            clock,
            client: Client::new(),
            shutdown,
        }
    }

    async fn post(&self, body: impl Into<reqwest::Body>) -> Response {
        self.client
            .post(format!("http://{}/v1/check", self.addr))
            .body(body)
            .send()
            .await
            .unwrap()
    }

    async fn check(&self, body: &Value) -> Response {
        self.post(body.to_string()).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn header<'r>(response: &'r Response, name: &str) -> Option<&'r str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

async fn json_of(response: Response) -> Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

fn alice(cost: Option<u64>) -> Value {
    let mut body = json!({"key": "alice", "capacity": 10, "refill": 10, "period_ms": 1000});
    if let Some(cost) = cost {
        body["cost"] = cost.into();
    }
    body
}

#[tokio::test]
async fn ten_allowed_then_429_with_headers_then_allowed_after_retry_after() {
    let server = Server::start().await;
    for i in 0..10u64 {
        let response = server.check(&alice(None)).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        assert_eq!(header(&response, "content-type"), Some("application/json"));
        assert_eq!(
            header(&response, "ratelimit-policy"),
            Some(r#""inline";q=10;w=1"#)
        );
        assert_eq!(
            header(&response, "ratelimit"),
            Some(format!(r#""inline";r={};t=1"#, 9 - i).as_str())
        );
        assert_eq!(header(&response, "retry-after"), None);
        let body = json_of(response).await;
        assert_eq!(
            body,
            json!({
                "allowed": true, "limit": 10, "remaining": 9 - i,
                "retry_after_ms": 0, "reset_after_ms": (i + 1) * 100,
            })
        );
    }

    let denied = server.check(&alice(None)).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), Some("1"));
    assert_eq!(
        header(&denied, "ratelimit-policy"),
        Some(r#""inline";q=10;w=1"#)
    );
    assert_eq!(header(&denied, "ratelimit"), Some(r#""inline";r=0;t=1"#));
    let body = json_of(denied).await;
    assert_eq!(
        body,
        json!({
            "allowed": false, "limit": 10, "remaining": 0,
            "retry_after_ms": 100, "reset_after_ms": 1000,
        })
    );

    // One millisecond short of the advertised wait is still too early; the wait itself is enough.
    server.clock.advance(Duration::from_millis(99));
    assert_eq!(
        server.check(&alice(None)).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    server.clock.advance(Duration::from_millis(1));
    assert_eq!(server.check(&alice(None)).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn cost_is_optional_and_zero_peeks() {
    let server = Server::start().await;
    let body = json_of(server.check(&alice(Some(4))).await).await;
    assert_eq!(body["remaining"], 6);
    let peek = server.check(&alice(Some(0))).await;
    assert_eq!(peek.status(), StatusCode::OK);
    assert_eq!(json_of(peek).await["remaining"], 6);
    let body = json_of(server.check(&alice(None)).await).await;
    assert_eq!(body["remaining"], 5);
    // A key is its own bucket.
    let mut bob = alice(None);
    bob["key"] = "bob".into();
    assert_eq!(json_of(server.check(&bob).await).await["remaining"], 9);
}

/// Each bad body, and the field its 400 must name.
fn bad_inputs() -> Vec<(&'static str, String, &'static str)> {
    let with = |field: &str, value: Value| {
        let mut body = alice(None);
        body[field] = value;
        body.to_string()
    };
    let without = |field: &str| {
        let mut body = alice(None);
        body.as_object_mut().unwrap().remove(field);
        body.to_string()
    };
    vec![
        (
            "malformed JSON",
            r#"{"key": "alice", "capacity": 10,"#.into(),
            "body",
        ),
        ("not JSON at all", "key=alice".into(), "body"),
        ("an array", "[1, 2]".into(), "body"),
        ("empty body", String::new(), "body"),
        ("missing key", without("key"), "key"),
        ("missing capacity", without("capacity"), "capacity"),
        ("missing refill", without("refill"), "refill"),
        ("missing period_ms", without("period_ms"), "period_ms"),
        ("key not a string", with("key", json!(7)), "key"),
        (
            "capacity a string",
            with("capacity", json!("10")),
            "capacity",
        ),
        ("refill a float", with("refill", json!(1.5)), "refill"),
        (
            "period_ms negative",
            with("period_ms", json!(-1)),
            "period_ms",
        ),
        ("cost null", with("cost", Value::Null), "cost"),
        (
            "capacity over u64",
            r#"{"key":"a","capacity":18446744073709551616,"refill":1,"period_ms":1}"#.into(),
            "capacity",
        ),
        ("zero capacity", with("capacity", json!(0)), "capacity"),
        ("zero refill", with("refill", json!(0)), "refill"),
        ("zero period", with("period_ms", json!(0)), "period_ms"),
        ("cost over capacity", with("cost", json!(11)), "cost"),
        ("empty key", with("key", json!("")), "key"),
        (
            "key over 1 KiB",
            with("key", json!("k".repeat(1025))),
            "key",
        ),
        ("unknown field", with("burst", json!(5)), "burst"),
        (
            "body over 64 KiB",
            with("key", json!(" ".repeat(64 * 1024))),
            "body",
        ),
    ]
}

#[tokio::test]
async fn every_bad_input_gets_a_400_naming_its_field_and_the_server_stays_up() {
    let server = Server::start().await;
    for (case, body, field) in bad_inputs() {
        let response = server.post(body).await;
        // A body too long to read is 413, the status HTTP has for it.
        let expected = if case == "body over 64 KiB" {
            StatusCode::PAYLOAD_TOO_LARGE
        } else {
            StatusCode::BAD_REQUEST
        };
        assert_eq!(response.status(), expected, "{case}");
        assert_eq!(
            header(&response, "content-type"),
            Some("application/problem+json"),
            "{case}"
        );
        let problem = json_of(response).await;
        assert_eq!(problem["field"], field, "{case}: {problem}");
        assert_eq!(problem["status"], expected.as_u16(), "{case}");
        assert!(
            problem["type"]
                .as_str()
                .unwrap()
                .starts_with("urn:tollgate:problem:"),
            "{case}"
        );
        assert!(!problem["detail"].as_str().unwrap().is_empty(), "{case}");
    }
    // Nothing above took a token, and the server still answers.
    let body = json_of(server.check(&alice(None)).await).await;
    assert_eq!(body["remaining"], 9);
}

#[tokio::test]
async fn a_key_of_exactly_1_kib_is_accepted() {
    let server = Server::start().await;
    let mut body = alice(None);
    body["key"] = "k".repeat(1024).into();
    assert_eq!(server.check(&body).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn unknown_paths_and_methods_are_problems_too() {
    let server = Server::start().await;
    let base = format!("http://{}", server.addr);
    let missing = server
        .client
        .get(format!("{base}/v2/check"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        header(&missing, "content-type"),
        Some("application/problem+json")
    );
    let wrong = server
        .client
        .get(format!("{base}/v1/check"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(json_of(wrong).await["status"], 405);
}

/// A `HEAD` whose answer the problem layer rewrites (a path that is not UTF-8 once decoded:
/// axum's plain-text `400`) is the `GET`'s problem without a body, over HTTP/1 and over
/// HTTP/2, whose client takes a `HEAD`'s body for a protocol error.
#[tokio::test]
async fn a_head_rewritten_as_a_problem_has_no_body() {
    let server = Server::start().await;
    let url = format!("http://{}/v1/buckets/api/%FF", server.addr);
    let get = server.client.get(&url).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        header(&get, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(json_of(get).await["status"], 400);

    let head = server.client.head(&url).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        header(&head, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(header(&head, "content-length"), None);
    assert!(head.bytes().await.unwrap().is_empty());

    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut sender = h2.ready().await.unwrap();
    let request = axum::http::Request::head(&url).body(()).unwrap();
    let (answer, _) = sender.send_request(request, true).unwrap();
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    assert_eq!(answer.headers()["content-type"], "application/problem+json");
    assert_eq!(answer.headers().get("content-length"), None);
    // A DATA frame would be an error here (h2 holds a `HEAD`'s answer to no body).
    assert!(answer.into_body().data().await.is_none());
}

#[tokio::test]
async fn health_and_readiness() {
    let server = Server::start().await;
    let base = format!("http://{}", server.addr);
    let health = server
        .client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let ready = server
        .client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    assert_eq!(
        json_of(ready).await,
        json!({"status": "ready", "store": "memory"})
    );
}

impl Server {
    async fn to(&self, path: &str, body: &Value) -> Response {
        self.client
            .post(format!("http://{}{path}", self.addr))
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    fn bucket_url(&self, query: &str) -> String {
        format!("http://{}/v1/buckets/inline/alice?{query}", self.addr)
    }
}

const ALICE: &str = "capacity=10&refill=10&period_ms=1000";

/// An LLM-style gateway: reserve an estimate, then commit what the call used.
#[tokio::test]
async fn reserve_then_commit_gives_back_what_was_not_used() {
    let server = Server::start().await;
    let reserved = server.to("/v1/reserve", &alice(Some(8))).await;
    assert_eq!(reserved.status(), StatusCode::OK);
    let body = json_of(reserved).await;
    assert_eq!(body["remaining"], 2);
    let token = body["reservation"]
        .as_str()
        .expect("a reservation")
        .to_owned();
    // Used 3 of 8: 5 come back.
    let commit = json!({"reservation": token, "used": 3});
    let committed = server.to("/v1/commit", &commit).await;
    assert_eq!(committed.status(), StatusCode::OK);
    assert_eq!(json_of(committed).await["remaining"], 7);
    // The bucket says so without being charged.
    let peek = server
        .client
        .get(server.bucket_url(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(peek.status(), StatusCode::OK);
    assert_eq!(json_of(peek).await["remaining"], 7);
    // A second commit of the same reservation changes nothing.
    let again = server.to("/v1/commit", &commit).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(
        header(&again, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(json_of(again).await["field"], "reservation");
    let peek = server
        .client
        .get(server.bucket_url(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(peek).await["remaining"], 7);
    // Over the estimate: the extra is taken without a denial.
    let body = json_of(server.to("/v1/reserve", &alice(Some(2))).await).await;
    let over = json!({"reservation": body["reservation"], "used": 9});
    let committed = server.to("/v1/commit", &over).await;
    assert_eq!(committed.status(), StatusCode::OK);
    assert_eq!(json_of(committed).await["remaining"], 0);
    assert_eq!(
        server.check(&alice(None)).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // DELETE: the bucket is full again.
    let deleted = server
        .client
        .delete(server.bucket_url(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let peek = server
        .client
        .get(server.bucket_url(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(peek).await["remaining"], 10);
    // A denied reservation hands out nothing.
    server.to("/v1/check", &alice(Some(10))).await;
    let denied = server.to("/v1/reserve", &alice(Some(1))).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(json_of(denied).await.get("reservation").is_none());
}

/// `GET /v1/buckets/...` of an empty bucket is allowed (it peeks) and says when the next token
/// comes (issue 28, point 8: it said `retry_after_ms` 0).
#[tokio::test]
async fn a_peek_at_an_empty_bucket_says_when_the_next_token_comes() {
    let server = Server::start().await;
    assert_eq!(
        server.to("/v1/check", &alice(Some(10))).await.status(),
        StatusCode::OK
    );
    let peek = server
        .client
        .get(server.bucket_url(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(peek.status(), StatusCode::OK);
    assert!(header(&peek, "retry-after").is_none());
    let body = json_of(peek).await;
    assert_eq!(
        (
            &body["allowed"],
            &body["remaining"],
            &body["retry_after_ms"]
        ),
        (&json!(true), &json!(0), &json!(100))
    );
}

/// A commit puts a bucket at most one capacity into debt: a `used` beyond `reserved +
/// capacity` is a `400` naming `used`, nothing is settled, and the reservation still commits
/// with a sound number (issue 27, point 5: `used` 2^64 - 1 put alice in debt for 71 years).
#[tokio::test]
async fn a_commit_beyond_one_capacity_of_debt_is_refused_and_settles_nothing() {
    let server = Server::start().await;
    let body = json_of(server.to("/v1/reserve", &alice(Some(1))).await).await;
    let token = body["reservation"].as_str().unwrap().to_owned();
    let refused = server
        .to(
            "/v1/commit",
            &json!({"reservation": token, "used": u64::MAX}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let problem = json_of(refused).await;
    assert_eq!(problem["field"], "used");
    assert!(
        problem["detail"].as_str().unwrap().contains("at most 11"),
        "{problem}"
    );
    let peek = server
        .client
        .get(server.bucket_url(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(peek).await["remaining"], 9, "nothing was settled");
    // reserved + capacity is the most: 11 of the 10 tokens taken, one of debt, 200 ms until
    // the next token.
    let committed = server
        .to("/v1/commit", &json!({"reservation": token, "used": 11}))
        .await;
    assert_eq!(committed.status(), StatusCode::OK);
    let body = json_of(committed).await;
    assert_eq!(
        (&body["remaining"], &body["retry_after_ms"]),
        (&json!(0), &json!(200))
    );
}

/// The record of committed reservations has its own cap, apart from the key cap: a flood of
/// another client's reserve + commit pairs beyond it never fails an honest commit, which gets
/// its tokens back (issue 27, point 5: it got 503 "the store holds its maximum"), and an id
/// forgotten to make room is never refunded twice.
#[tokio::test]
async fn a_flood_of_commits_never_fails_an_honest_one_nor_refunds_twice() {
    let server = Server::start_with(|store| {
        store
            .max_keys(NonZeroUsize::new(4).unwrap())
            .max_settled(NonZeroUsize::new(16).unwrap())
    })
    .await;
    let mallory = json!({"key": "mallory", "capacity": 10, "refill": 10, "period_ms": 1000});
    let first = flood(&server, &mallory).await;
    for _ in 0..40 {
        flood(&server, &mallory).await;
    }
    // Alice reserves in the middle of the flood, which goes on past the cap.
    let body = json_of(server.to("/v1/reserve", &alice(Some(5))).await).await;
    let token = body["reservation"].as_str().unwrap().to_owned();
    for _ in 0..10 {
        flood(&server, &mallory).await;
    }
    let committed = server
        .to("/v1/commit", &json!({"reservation": token, "used": 0}))
        .await;
    assert_eq!(committed.status(), StatusCode::OK);
    assert_eq!(
        json_of(committed).await["remaining"],
        10,
        "her tokens came back"
    );
    let again = server
        .to("/v1/commit", &json!({"reservation": token, "used": 0}))
        .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    // Mallory's first commit was forgotten to make room: replayed, it refunds nothing.
    let mut spend = mallory.clone();
    spend["cost"] = 10.into();
    assert_eq!(server.check(&spend).await.status(), StatusCode::OK);
    let replayed = server.to("/v1/commit", &first).await;
    assert_eq!(json_of(replayed).await["remaining"], 0, "refunded twice");
}

/// One of mallory's reserve + commit pairs, a millisecond after the last: the commit's body.
async fn flood(server: &Server, mallory: &Value) -> Value {
    server.clock.advance(Duration::from_millis(1));
    let mut reserve = mallory.clone();
    reserve["cost"] = 1.into();
    let reserved = json_of(server.to("/v1/reserve", &reserve).await).await;
    let commit = json!({"reservation": reserved["reservation"], "used": 0});
    assert_eq!(
        server.to("/v1/commit", &commit).await.status(),
        StatusCode::OK
    );
    commit
}

/// Unknown, forged, expired or reused reservations are `409`s; bad input `400`s naming the
/// field; nothing changes.
#[tokio::test]
async fn bad_commits_and_bucket_requests_change_nothing() {
    let server = Server::start().await;
    let body = json_of(server.to("/v1/reserve", &alice(Some(4))).await).await;
    let token = body["reservation"].as_str().unwrap().to_owned();
    let mut forged = token.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    for (body, status, field) in [
        (
            json!({"reservation": forged, "used": 0}),
            409,
            "reservation",
        ),
        (
            json!({"reservation": "garbage", "used": 0}),
            409,
            "reservation",
        ),
        (json!({"reservation": token, "used": -1}), 400, "used"),
        (json!({"reservation": token, "used": 1.5}), 400, "used"),
        (json!({"reservation": token}), 400, "used"),
        (json!({"used": 1}), 400, "reservation"),
        (json!({"reservation": 7, "used": 1}), 400, "reservation"),
        (
            json!({"reservation": token, "used": 1, "extra": 1}),
            400,
            "extra",
        ),
    ] {
        let response = server.to("/v1/commit", &body).await;
        assert_eq!(response.status().as_u16(), status, "{body}");
        assert_eq!(json_of(response).await["field"], field, "{body}");
    }
    let peek = server
        .client
        .get(server.bucket_url(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(peek).await["remaining"], 6, "nothing was refunded");
    // Expired: ten minutes on, the reservation is refused.
    server.clock.advance(Duration::from_secs(600));
    let expired = server
        .to("/v1/commit", &json!({"reservation": token, "used": 0}))
        .await;
    assert_eq!(expired.status(), StatusCode::CONFLICT);
    assert!(
        json_of(expired).await["detail"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    // Buckets: an unknown policy, missing or bad numbers.
    for (path, field) in [
        (
            "/v1/buckets/api/alice?capacity=10&refill=10&period_ms=1000",
            "policy",
        ),
        (
            "/v1/buckets/inline/alice?capacity=10&refill=10",
            "period_ms",
        ),
        (
            "/v1/buckets/inline/alice?capacity=0&refill=10&period_ms=1",
            "capacity",
        ),
        (
            "/v1/buckets/inline/alice?capacity=x&refill=10&period_ms=1",
            "capacity",
        ),
        (
            "/v1/buckets/inline/alice?capacity=1&refill=1&period_ms=1&cost=1",
            "cost",
        ),
    ] {
        let url = format!("http://{}{path}", server.addr);
        for response in [
            server.client.get(&url).send().await.unwrap(),
            server.client.delete(&url).send().await.unwrap(),
        ] {
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
            assert_eq!(json_of(response).await["field"], field, "{path}");
        }
    }
}

/// Issue 27: the answers hyper gives requests it cannot parse (400, 414, 431, a path of bytes
/// that are not UTF-8) and an extractor's rejection (a path segment not UTF-8 once decoded)
/// had empty or text bodies; each is `application/problem+json` now, on a fresh connection and
/// after a request answered on a kept-alive one.
#[test]
fn http_errors_before_any_endpoint_are_problems_too() {
    use std::io::{Read, Write};
    let server = crate::support::Tollgate::start(&[]);
    let send = |bytes: &[u8]| -> String {
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(bytes).unwrap();
        let mut out = Vec::new();
        // The server closes after each of these answers.
        let _ = stream.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    let big_headers = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\n{}\r\n",
        (0..500)
            .map(|i| format!("X-H{i}: {}\r\n", "v".repeat(1000)))
            .collect::<String>()
    );
    let cases: [(&str, Vec<u8>, u16, &str); 6] = [
        (
            "a request line that is not HTTP",
            b"GARBAGE\r\n\r\n".to_vec(),
            400,
            "bad-request",
        ),
        (
            "a URI of 70,000 bytes",
            long_uri.into_bytes(),
            414,
            "uri-too-long",
        ),
        (
            "500 headers of 1,000 bytes",
            big_headers.into_bytes(),
            431,
            "headers-too-large",
        ),
        (
            "a path of bytes that are not UTF-8",
            b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            400,
            "bad-request",
        ),
        (
            "a path segment not UTF-8 once decoded",
            b"GET /v1/buckets/%ff/k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            400,
            "bad-request",
        ),
        (
            "a bad request after a good one on one connection",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n".to_vec(),
            400,
            "bad-request",
        ),
    ];
    for (what, request, status, kind) in cases {
        let answer = send(&request);
        // The last answer on the connection is the one about the bad request.
        let last = &answer[answer.rfind("HTTP/1.1 4").unwrap_or(0)..];
        let (head, body) = last
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{what}: no answer in {answer:?}"));
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status} ")),
            "{what}: {head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/problem+json"),
            "{what}: {head}"
        );
        let problem: Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e} in {body:?}"));
        assert_eq!(problem["status"], status, "{what}: {problem}");
        assert_eq!(
            problem["type"],
            format!("urn:tollgate:problem:{kind}"),
            "{what}: {problem}"
        );
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{what}: {problem}"
        );
    }
}

/// Issue 44, point 6: `"capacity": -1` was answered "must be an integer from 0 to …", while 0
/// is refused too. Each inline number says its real range; `cost` starts at 0 (a peek).
#[tokio::test]
async fn a_number_out_of_range_is_told_the_real_range() {
    use crate::support::{self, Tollgate};
    let server = Tollgate::start(&[]);
    let client = Client::new();
    let max = u64::MAX;
    for field in ["capacity", "refill", "period_ms"] {
        let mut body = json!({"key": "k", "capacity": 10, "refill": 10, "period_ms": 1000});
        body[field] = json!(-1);
        let (status, problem) = support::check(&client, &server, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(problem["field"], field);
        assert_eq!(
            problem["detail"],
            format!("{field} must be an integer from 1 to {max}, not a negative number")
        );
        body[field] = json!(0);
        let (status, problem) = support::check(&client, &server, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        assert_eq!(problem["field"], field, "{problem}");
    }
    let body = json!({"key": "k", "capacity": 10, "refill": 10, "period_ms": 1000, "cost": -1});
    let (_, problem) = support::check(&client, &server, body).await;
    assert_eq!(
        problem["detail"],
        format!("cost must be an integer from 0 to {max}, not a negative number")
    );
    // The bucket read takes the numbers in its query string, and says the same range.
    let response = client
        .get(format!(
            "http://{}/v1/buckets/inline/k?capacity=-1&refill=1&period_ms=1",
            server.addr
        ))
        .send()
        .await
        .unwrap();
    let problem: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(
        problem["detail"],
        format!("capacity must be an integer from 1 to {max}, not \"-1\"")
    );
}
