//! One ADS stream, state of the world: the first request (node, type, the last version put in
//! force), then, for each response, the resources loaded and put in force and the version
//! ACKed (`version_info` and `response_nonce` of the response), or refused and NACKed (the
//! version in force, the response's nonce, and `error_detail` with the loader's message)
//! while the running config stays.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value};
use envoy_types::pb::google::rpc;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tonic::codegen::tokio_stream::Stream;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::Channel;

use super::convert::{self, TYPE_URL};
use super::settings::XdsSettings;
use crate::descriptors::config::LoadError;
use crate::envoy::Envoy;

/// What outlives a stream: the version in force, and who waits for the first response.
pub(super) struct State {
    /// The last version ACKed (empty before the first).
    pub(super) version: String,
    /// Told once the first response is handled, good or bad.
    pub(super) first: Option<oneshot::Sender<()>>,
}

/// How a stream ended.
pub(super) enum Ended {
    /// The server is shutting down.
    Shutdown,
    /// The stream broke: why, and whether it brought any response.
    Broken { error: String, responded: bool },
}

/// gRPC's code for a NACK's `error_detail`: the config is invalid.
const INVALID_ARGUMENT: i32 = 3;

/// Runs one stream over `channel` until it breaks or `stop`.
pub(super) async fn run(
    channel: Channel,
    settings: &XdsSettings,
    merge_domains: bool,
    envoy: &Arc<Envoy>,
    state: &mut State,
    stop: &CancellationToken,
) -> Ended {
    let node = node(settings);
    // Two in flight at most: the first request, then one reply per response read.
    let (requests, outgoing) = mpsc::channel(2);
    let first = DiscoveryRequest {
        version_info: state.version.clone(),
        node: Some(node.clone()),
        type_url: TYPE_URL.to_owned(),
        ..DiscoveryRequest::default()
    };
    if requests.try_send(first).is_err() {
        return broken("the request queue is closed".to_owned(), false);
    }
    let mut request = tonic::Request::new(Outgoing(outgoing));
    for (name, value) in &settings.headers {
        // Checked when the config was read: both parse.
        if let (Ok(name), Ok(value)) = (
            AsciiMetadataKey::from_bytes(name.as_bytes()),
            AsciiMetadataValue::try_from(value.as_str()),
        ) {
            request.metadata_mut().insert(name, value);
        }
    }
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(settings.max_message_size);
    let opened = tokio::select! {
        () = stop.cancelled() => return Ended::Shutdown,
        opened = client.stream_aggregated_resources(request) => opened,
    };
    let mut responses = match opened {
        Ok(response) => response.into_inner(),
        Err(status) => return broken(describe(&status), false),
    };
    let mut responded = false;
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return Ended::Shutdown,
            next = responses.message() => next,
        };
        let response = match next {
            Ok(Some(response)) => response,
            Ok(None) => {
                return broken(
                    "the management server ended the stream".to_owned(),
                    responded,
                );
            }
            Err(status) => return broken(describe(&status), responded),
        };
        responded = true;
        // Decoding and checking up to max_message_size of rules is work for a blocking
        // thread, not for a worker that decisions are queued on.
        let applied = {
            let envoy = Arc::clone(envoy);
            tokio::task::spawn_blocking(move || {
                let loaded = load(&response, merge_domains, &envoy);
                (response, loaded)
            })
        };
        let (response, loaded) = tokio::select! {
            () = stop.cancelled() => return Ended::Shutdown,
            applied = applied => match applied {
                Ok(applied) => applied,
                Err(e) => return broken(format!("loading the config failed: {e}"), responded),
            },
        };
        let reply = reply(&response, loaded, envoy, state, &node);
        if let Some(first) = state.first.take() {
            let _ = first.send(());
        }
        // A management server that stops reading its side must not hold the client.
        tokio::select! {
            () = stop.cancelled() => return Ended::Shutdown,
            sent = requests.send(reply) => if sent.is_err() {
                return broken(
                    "the stream closed before the reply went".to_owned(),
                    responded,
                );
            },
        }
    }
}

fn broken(error: String, responded: bool) -> Ended {
    Ended::Broken { error, responded }
}

/// Loads `response`'s resources and puts them in force: the number of resources and domains,
/// or why they were refused.
fn load(
    response: &DiscoveryResponse,
    merge_domains: bool,
    envoy: &Envoy,
) -> Result<(usize, usize), LoadError> {
    convert::load(response, merge_domains).and_then(|config| {
        let (resources, domains) = (config.files(), config.domains());
        envoy.reload(config).map(|()| (resources, domains))
    })
}

/// Says so of a load (ACK), or refuses it (NACK) with the reason, which is logged and counted
/// as a refused file reload is.
fn reply(
    response: &DiscoveryResponse,
    loaded: Result<(usize, usize), LoadError>,
    envoy: &Envoy,
    state: &mut State,
    node: &Node,
) -> DiscoveryRequest {
    let source = || format!("xDS version {:?}", response.version_info);
    let error_detail = match loaded {
        Ok((resources, domains)) => {
            envoy.loaded_from(source, "xDS", Ok(()));
            tracing::info!(
                version = %response.version_info,
                resources,
                domains,
                "envoy config loaded over xDS"
            );
            state.version.clone_from(&response.version_info);
            None
        }
        Err(error) => {
            envoy.loaded_from(source, "xDS", Err(&error));
            tracing::error!(
                %error,
                version = %response.version_info,
                "envoy config over xDS refused (NACK); the running config stays in force"
            );
            Some(rpc::Status {
                code: INVALID_ARGUMENT,
                message: error.to_string(),
                details: Vec::new(),
            })
        }
    };
    DiscoveryRequest {
        version_info: state.version.clone(),
        node: Some(node.clone()),
        type_url: TYPE_URL.to_owned(),
        response_nonce: response.nonce.clone(),
        error_detail,
        ..DiscoveryRequest::default()
    }
}

/// The node tollgate says it is: its id, and its metadata as string values.
fn node(settings: &XdsSettings) -> Node {
    let fields = settings
        .node_metadata
        .iter()
        .map(|(k, v)| {
            let value = Value {
                kind: Some(value::Kind::StringValue(v.clone())),
            };
            (k.clone(), value)
        })
        .collect();
    Node {
        id: settings.node_id.clone(),
        metadata: Some(Struct { fields }),
        ..Node::default()
    }
}

/// A status the stream ended with, its cause included.
fn describe(status: &tonic::Status) -> String {
    let cause = std::error::Error::source(status).map(super::connect::chain);
    match cause {
        // tonic's message is the cause's outermost words: said once.
        Some(cause) if cause.starts_with(status.message()) => {
            format!("{:?}: {cause}", status.code())
        }
        Some(cause) => format!("{:?}: {}: {cause}", status.code(), status.message()),
        None => format!("{:?}: {}", status.code(), status.message()),
    }
}

/// The requests of a stream, as tonic reads them.
struct Outgoing(mpsc::Receiver<DiscoveryRequest>);

impl Stream for Outgoing {
    type Item = DiscoveryRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<DiscoveryRequest>> {
        self.0.poll_recv(cx)
    }
}
