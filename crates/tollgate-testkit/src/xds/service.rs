//! The ADS service: every stream gets the version set last (once per version, as
//! go-control-plane's snapshot cache answers), and every request a stream sends is recorded
//! with the stream's metadata.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::{Any, value};
use tokio::sync::{mpsc, watch};
use tonic::codegen::tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// The resource type served.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// A request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Which stream it came on, counting from 1 over the server's life (restarts included).
    pub stream: u64,
    /// `version_info`: the version the client has in force.
    pub version_info: String,
    /// `response_nonce`: the response it answers (empty on a stream's first request).
    pub response_nonce: String,
    /// `error_detail`'s message: a NACK.
    pub error_detail: Option<String>,
    /// `type_url`.
    pub type_url: String,
    /// The node's id.
    pub node_id: String,
    /// The node's metadata, string values only.
    pub node_metadata: BTreeMap<String, String>,
    /// The stream's gRPC metadata (ASCII entries).
    pub headers: BTreeMap<String, String>,
}

impl Seen {
    /// Whether it ACKs `version`.
    pub fn acks(&self, version: &str) -> bool {
        self.error_detail.is_none()
            && !self.response_nonce.is_empty()
            && self.version_info == version
    }
}

/// What the handle and the streams share.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
}

/// The version served, what was seen.
#[derive(Default)]
pub(super) struct State {
    pub(super) current: Option<(String, Vec<Any>)>,
    pub(super) seen: Vec<Seen>,
    pub(super) streams: u64,
    pub(super) nonces: u64,
    pub(super) handshake_failures: Vec<String>,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The service: the shared state, a signal of new versions, and of the server stopping.
pub(super) struct Ads {
    pub(super) shared: Arc<Shared>,
    pub(super) pushed: watch::Receiver<u64>,
    pub(super) stopping: watch::Receiver<bool>,
}

/// A stream's responses.
pub(super) struct Responses(mpsc::Receiver<Result<DiscoveryResponse, Status>>);

impl Stream for Responses {
    type Item = Result<DiscoveryResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// Delta xDS is not served.
pub(super) struct NoDelta;

impl Stream for NoDelta {
    type Item = Result<DeltaDiscoveryResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(None)
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream = NoDelta;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let headers = request
            .metadata()
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        let stream = {
            let mut state = self.shared.lock();
            state.streams += 1;
            state.streams
        };
        let (out, responses) = mpsc::channel(4);
        tokio::spawn(serve_stream(
            Arc::clone(&self.shared),
            request.into_inner(),
            out,
            Peer {
                id: stream,
                headers,
                pushed: self.pushed.clone(),
                stopping: self.stopping.clone(),
            },
        ));
        Ok(Response::new(Responses(responses)))
    }

    async fn delta_aggregated_resources(
        &self,
        _: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<NoDelta>, Status> {
        Err(Status::unimplemented(
            "the test xDS server serves state of the world only",
        ))
    }
}

/// One stream's own state.
struct Peer {
    id: u64,
    headers: BTreeMap<String, String>,
    pushed: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
}

async fn serve_stream(
    shared: Arc<Shared>,
    mut incoming: Streaming<DiscoveryRequest>,
    out: mpsc::Sender<Result<DiscoveryResponse, Status>>,
    mut stream: Peer,
) {
    // The version this stream was sent last; none before its first request.
    let mut sent: Option<String> = None;
    let mut asked = false;
    loop {
        let Peer {
            id,
            headers,
            stopping,
            pushed,
        } = &mut stream;
        tokio::select! {
            () = stopped(stopping) => {
                let _ = out.send(Err(Status::unavailable("the test xDS server stopped"))).await;
                return;
            }
            request = incoming.message() => match request {
                Ok(Some(request)) => {
                    record(&shared, *id, headers, &request);
                    asked = true;
                }
                Ok(None) | Err(_) => return,
            },
            changed = pushed.changed() => if changed.is_err() { return },
        }
        if !asked {
            continue;
        }
        let response = {
            let mut state = shared.lock();
            match &state.current {
                Some((version, resources)) if sent.as_deref() != Some(version) => {
                    let response = DiscoveryResponse {
                        version_info: version.clone(),
                        resources: resources.clone(),
                        type_url: TYPE_URL.to_owned(),
                        ..DiscoveryResponse::default()
                    };
                    state.nonces += 1;
                    Some(DiscoveryResponse {
                        nonce: state.nonces.to_string(),
                        ..response
                    })
                }
                _ => None,
            }
        };
        if let Some(response) = response {
            sent = Some(response.version_info.clone());
            if out.send(Ok(response)).await.is_err() {
                return;
            }
        }
    }
}

fn record(
    shared: &Shared,
    stream: u64,
    headers: &BTreeMap<String, String>,
    request: &DiscoveryRequest,
) {
    let node = request.node.clone().unwrap_or_default();
    let node_metadata = node
        .metadata
        .map(|m| {
            m.fields
                .into_iter()
                .filter_map(|(k, v)| match v.kind {
                    Some(value::Kind::StringValue(s)) => Some((k, s)),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    shared.lock().seen.push(Seen {
        stream,
        version_info: request.version_info.clone(),
        response_nonce: request.response_nonce.clone(),
        error_detail: request.error_detail.as_ref().map(|s| s.message.clone()),
        type_url: request.type_url.clone(),
        node_id: node.id,
        node_metadata,
        headers: headers.clone(),
    });
}

/// Resolves once the server is stopping.
pub(super) async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}
