//! The rejection hook (any body, the request's parts, `Retry-After` added) and where the
//! client's address comes from: axum without `ConnectInfo` (a 400 naming the fix), plain hyper
//! with `PeerAddrLayer`, and a server's own connection type (tonic's `TcpConnectInfo`) through
//! `ClientIp::peer_addr`. Real servers on loopback; clients from 127.0.0.1 and 127.0.0.2 are
//! two clients.
#![cfg(all(feature = "tower", feature = "axum"))]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate::middleware::{ClientIp, MissingKey, PeerAddrLayer, TollgateLayer};
use tollgate::{ManualClock, MemoryStore, Nanos, Policy};
use tower::{Layer, ServiceBuilder, ServiceExt, service_fn};

/// A layer allowing one request per key and second, on a clock that does not move.
fn one_per_key(key: ClientIp) -> TollgateLayer {
    let clock = ManualClock::new(Nanos::new(1_000_000_000));
    TollgateLayer::builder(MemoryStore::builder().clock(clock).build())
        .policy("ip", Policy::per_second(1).unwrap())
        .key(key)
        .build()
        .unwrap()
}

/// A client whose connections come from `ip` (any 127.x.y.z on Linux's loopback).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

async fn status(client: &reqwest::Client, url: &str) -> StatusCode {
    let status = client.get(url).send().await.unwrap().status();
    StatusCode::from_u16(status.as_u16()).unwrap()
}

/// Serves `hello` on plain hyper (HTTP/1), each connection's service made by `service` from
/// the connection's peer address.
async fn serve_hyper<F, S, B>(service: F) -> String
where
    F: Fn(SocketAddr) -> S + Send + 'static,
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let connection = hyper::server::conn::http1::Builder::new().serve_connection(
                TokioIo::new(stream),
                TowerToHyperService::new(service(peer)),
            );
            tokio::spawn(connection);
        }
    });
    format!("http://{addr}/")
}

fn hello() -> impl tower::Service<
    Request<Incoming>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send {
    service_fn(|_: Request<Incoming>| async { Ok(Response::new(String::from("hello"))) })
}

#[tokio::test]
async fn a_hyper_server_with_peer_addr_layer_keys_each_client_by_its_address() {
    let limit = one_per_key(ClientIp::new());
    let url = serve_hyper(move |peer| PeerAddrLayer::new(peer).layer(limit.layer(hello()))).await;
    let (ann, bob) = (client_from("127.0.0.1"), client_from("127.0.0.2"));
    assert_eq!(status(&ann, &url).await, StatusCode::OK);
    assert_eq!(status(&ann, &url).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        status(&bob, &url).await,
        StatusCode::OK,
        "another address, another budget"
    );
}

#[tokio::test]
async fn without_a_peer_address_the_400_names_the_fix() {
    // hyper without PeerAddrLayer: no request can have a client address.
    let limit = one_per_key(ClientIp::new());
    let url = serve_hyper(move |_| limit.layer(hello())).await;
    let response = reqwest::get(&url).await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let problem: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let detail = problem["detail"].as_str().unwrap();
    for fix in [
        "into_make_service_with_connect_info",
        "TcpConnectInfo",
        "PeerAddrLayer",
    ] {
        assert!(detail.contains(fix), "{fix} in {detail:?}");
    }

    // axum served without `into_make_service_with_connect_info`, the usual mistake.
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(one_per_key(
            ClientIp::new().trust(["10.0.0.0/8".parse().unwrap()]),
        ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let response = reqwest::get(&url).await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let text = response.text().await.unwrap();
    assert!(
        text.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{text}"
    );

    // A request that lacks a key of another kind keeps the plain detail.
    let by_header = TollgateLayer::builder(MemoryStore::new())
        .policy("api", Policy::per_second(1).unwrap())
        .key(tollgate::middleware::Header::new(
            http::HeaderName::from_static("x-api-key"),
        ))
        .build()
        .unwrap();
    let response = by_header
        .layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }))
        .oneshot(Request::new(()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(body.contains("client address or key header"), "{body}");
    assert!(
        !body.contains("into_make_service_with_connect_info"),
        "{body}"
    );
}

/// What tonic records for each connection (`tonic::transport::server::TcpConnectInfo`, read
/// with `remote_addr()`): a type of the server's own, not a bare `SocketAddr`.
#[derive(Clone)]
struct TcpConnectInfo {
    remote_addr: Option<SocketAddr>,
}

impl TcpConnectInfo {
    fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote_addr
    }
}

#[tokio::test]
async fn a_servers_own_connection_info_is_read_through_peer_addr() {
    let key =
        ClientIp::new().peer_addr(|parts| parts.extensions.get::<TcpConnectInfo>()?.remote_addr());
    let limit = one_per_key(key);
    let url = serve_hyper(move |peer| {
        // As tonic's server does: its connection type in every request's extensions.
        ServiceBuilder::new()
            .map_request(move |mut request: Request<Incoming>| {
                let info = TcpConnectInfo {
                    remote_addr: Some(peer),
                };
                request.extensions_mut().insert(info);
                request
            })
            .layer(limit.clone())
            .service(hello())
    })
    .await;
    let (ann, bob) = (client_from("127.0.0.1"), client_from("127.0.0.3"));
    assert_eq!(status(&ann, &url).await, StatusCode::OK);
    assert_eq!(status(&ann, &url).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status(&bob, &url).await, StatusCode::OK);
}

#[tokio::test]
async fn a_rejection_hook_reads_the_request_and_returns_its_own_body_and_status() {
    let limit = TollgateLayer::builder(MemoryStore::new())
        .policy(
            "login",
            Policy::token_bucket(1, 1, Duration::from_secs(60)).unwrap(),
        )
        .rejection(|rejection, parts| {
            let user = parts.headers.get("x-user").and_then(|v| v.to_str().ok());
            let text = format!(
                "{} is over the {} limit",
                user.unwrap_or("someone"),
                rejection.policy().unwrap_or("?")
            );
            let mut response = Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header("content-type", "text/plain");
            if parts.headers.contains_key("x-own-retry") {
                response = response.header("retry-after", "120");
            }
            response.body(text).unwrap()
        })
        .build()
        .unwrap();
    let url = serve_hyper(move |peer| PeerAddrLayer::new(peer).layer(limit.layer(hello()))).await;
    let client = reqwest::Client::new();
    let send = |own_retry: bool| {
        let mut request = client.get(&url).header("x-user", "ann");
        if own_retry {
            request = request.header("x-own-retry", "1");
        }
        request.send()
    };
    assert_eq!(send(false).await.unwrap().status().as_u16(), 200);
    let denied = send(false).await.unwrap();
    assert_eq!(denied.status().as_u16(), 503);
    let header = |name: &str| {
        denied
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(header("content-type").as_deref(), Some("text/plain"));
    assert_eq!(
        header("retry-after").as_deref(),
        Some("60"),
        "set by the layer"
    );
    assert_eq!(header("ratelimit").as_deref(), Some(r#""login";r=0;t=60"#));
    assert_eq!(denied.text().await.unwrap(), "ann is over the login limit");
    // A Retry-After of the hook's own is kept.
    let own = send(true).await.unwrap();
    assert_eq!(own.headers()["retry-after"], "120");
}

/// Collects the messages of error events.
struct Errors(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Errors {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text<'t>(&'t mut String);
        impl tracing::field::Visit for Text<'_> {
            fn record_debug(&mut self, _: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{value:?}"));
            }
        }
        if *event.metadata().level() == tracing::Level::ERROR {
            let mut text = String::new();
            event.record(&mut Text(&mut text));
            self.0.lock().unwrap().push(text);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The misconfiguration is logged where the operator looks, once per layer, not per request.
#[tokio::test(flavor = "current_thread")]
async fn a_missing_peer_address_is_logged_once_at_error_level() {
    let errors = std::sync::Arc::default();
    let _guard = tracing::subscriber::set_default(Errors(std::sync::Arc::clone(&errors)));
    let service = one_per_key(ClientIp::new()).layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    for _ in 0..3 {
        let response = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
    let errors = errors.lock().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("into_make_service_with_connect_info"),
        "{errors:?}"
    );
}

/// With `MissingKey::Allow`, requests without a peer address pass unlimited: that is said too,
/// or a server served without addresses would turn limiting off in silence.
#[tokio::test(flavor = "current_thread")]
async fn a_missing_peer_address_let_through_is_logged_once_too() {
    let errors = std::sync::Arc::default();
    let _guard = tracing::subscriber::set_default(Errors(std::sync::Arc::clone(&errors)));
    let layer = TollgateLayer::builder(MemoryStore::new())
        .policy("ip", Policy::per_second(1).unwrap())
        .key(ClientIp::new())
        .on_missing_key(MissingKey::Allow)
        .build()
        .unwrap();
    let service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    for _ in 0..3 {
        let response = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let errors = errors.lock().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("without a client address"), "{errors:?}");
}
