//! OTLP receivers inside the test, decoding with the official protobuf types
//! (`opentelemetry-proto`): OTLP/HTTP (`POST /v1/traces`, a protobuf body) and OTLP/gRPC (the
//! `TraceService` of the collector's proto, served by tonic); and one that accepts connections
//! and never answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use tokio::net::TcpListener;

use crate::support::Stopwatch;

/// A span received, with its resource's attributes.
#[derive(Debug, Clone)]
pub struct Received {
    pub span: Span,
    pub resource: HashMap<String, String>,
    pub scope: String,
}

impl Received {
    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    pub fn parent_span_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    /// The attribute `name`, as text (numbers and flags written out).
    pub fn attribute(&self, name: &str) -> Option<String> {
        text_of(&self.span.attributes, name)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text_of(attributes: &[KeyValue], name: &str) -> Option<String> {
    let value = attributes
        .iter()
        .find(|kv| kv.key == name)?
        .value
        .as_ref()?;
    Some(match value.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

/// What a receiver got, in order.
#[derive(Clone, Default)]
pub struct Spans(Arc<Mutex<Vec<Received>>>);

impl Spans {
    fn take(&self, request: ExportTraceServiceRequest) {
        let mut spans = self.0.lock().unwrap();
        for resource_spans in request.resource_spans {
            let resource: HashMap<String, String> = resource_spans
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .filter_map(|kv| {
                    Some((kv.key.clone(), text_of(std::slice::from_ref(kv), &kv.key)?))
                })
                .collect();
            for scope_spans in resource_spans.scope_spans {
                let scope = scope_spans.scope.map(|s| s.name).unwrap_or_default();
                for span in scope_spans.spans {
                    spans.push(Received {
                        span,
                        resource: resource.clone(),
                        scope: scope.clone(),
                    });
                }
            }
        }
    }

    /// Everything received so far.
    pub fn all(&self) -> Vec<Received> {
        self.0.lock().unwrap().clone()
    }

    /// Polls until `done` holds of what was received (a minute at most: the exporter sends
    /// within a second of a span's end), and returns it.
    pub async fn until(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let watch = Stopwatch::start();
        loop {
            let all = self.all();
            if done(&all) {
                return all;
            }
            assert!(
                watch.elapsed() < Duration::from_secs(60),
                "no {what} within a minute; received {all:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An OTLP/HTTP receiver: its base URL and what it receives.
pub async fn http() -> (String, Spans) {
    let spans = Spans::default();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(http_export))
        .with_state(spans.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), spans)
}

async fn http_export(State(spans): State<Spans>, body: Bytes) -> impl IntoResponse {
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            spans.take(request);
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/x-protobuf")],
                ExportTraceServiceResponse::default().encode_to_vec(),
            )
        }
        Err(e) => (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "text/plain")],
            e.to_string().into_bytes(),
        ),
    }
}

struct Grpc(Spans);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/gRPC receiver: its URL and what it receives.
pub async fn grpc() -> (String, Spans) {
    let spans = Spans::default();
    let router = tonic::service::Routes::new(TraceServiceServer::new(Grpc(spans.clone())))
        .prepare()
        .into_axum_router();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("http://{addr}"), spans)
}

/// A receiver that accepts connections, reads what is sent, and never answers: its URL.
pub async fn stalled() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut sink = tokio::io::sink();
                let _ = tokio::io::copy(&mut stream, &mut sink).await;
            });
        }
    });
    format!("http://{addr}")
}
