//! A gRPC client of Envoy's rate-limit service, built from the Envoy v3 types, and config
//! directories to start servers with.

use std::net::SocketAddr;
use std::path::Path;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::transport::Channel;

/// A client of the server at `addr`.
pub async fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the gRPC listener")
}

/// A descriptor of `entries` (key, value).
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..Default::default()
    }
}

/// `descriptor` with its own hits_addend.
pub fn with_hits(mut descriptor: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    descriptor.hits_addend = Some(UInt64Value { value: hits });
    descriptor
}

/// A request to `domain` of `descriptors`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// Asks, and expects an answer (not a gRPC error).
pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

/// The response's codes: overall, then each descriptor's, as `OK` / `OVER`.
pub fn codes(response: &RateLimitResponse) -> (String, Vec<String>) {
    let name = |c: i32| match Code::try_from(c) {
        Ok(Code::Ok) => "OK".to_owned(),
        Ok(Code::OverLimit) => "OVER".to_owned(),
        _ => format!("code {c}"),
    };
    (
        name(response.overall_code),
        response.statuses.iter().map(|s| name(s.code)).collect(),
    )
}

/// Writes `files` (name, contents) into `dir`.
pub fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        // Written aside and renamed in, as editors and ConfigMap updates do: a reload never
        // reads half a file.
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write a config file");
        std::fs::rename(&tmp, dir.join(name)).expect("rename a config file in place");
    }
}
