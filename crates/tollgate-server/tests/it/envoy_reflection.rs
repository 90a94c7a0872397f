//! gRPC server reflection on the Envoy port: what `grpcurl -plaintext HOST:PORT list` and
//! `describe` ask, through tonic-reflection's own client, in both protocol versions; the
//! descriptors served are those of the types the server decodes.

use crate::support;

use prost::Message;
use prost_types::{FileDescriptorProto, field_descriptor_proto::Type};
use support::Tollgate;
use support::envoy::{ask, client, descriptor, request};
use tonic::transport::Channel;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use tonic_reflection::pb::v1alpha;

const RLS: &str = "envoy.service.ratelimit.v3.RateLimitService";

async fn channel(server: &Tollgate) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr()))
        .expect("an endpoint")
        .connect()
        .await
        .expect("connect to the gRPC listener")
}

/// One request on a v1 reflection stream, and its answer.
async fn reflect(channel: &Channel, request: MessageRequest) -> MessageResponse {
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let mut answers = ServerReflectionClient::new(channel.clone())
        .server_reflection_info(tonic::codegen::tokio_stream::iter([request]))
        .await
        .expect("the reflection service answers")
        .into_inner();
    let answer: ServerReflectionResponse = answers
        .message()
        .await
        .expect("a reflection answer")
        .expect("one answer");
    answer.message_response.expect("an answer of some kind")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_the_services_and_describes_the_rate_limit_service() {
    let server = Tollgate::start(&["--grpc-listen", "127.0.0.1:0"]);
    let channel = channel(&server).await;

    // `grpcurl list`.
    let MessageResponse::ListServicesResponse(list) =
        reflect(&channel, MessageRequest::ListServices(String::new())).await
    else {
        panic!("not a list of services");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            RLS,
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        ]
    );

    // `grpcurl describe RLS`: the file that declares it, then every file it needs.
    let MessageResponse::FileDescriptorResponse(files) = reflect(
        &channel,
        MessageRequest::FileContainingSymbol(RLS.to_owned()),
    )
    .await
    else {
        panic!("no file declares {RLS}");
    };
    let files: Vec<FileDescriptorProto> = files
        .file_descriptor_proto
        .iter()
        .map(|bytes| FileDescriptorProto::decode(bytes.as_slice()).expect("a file descriptor"))
        .collect();
    let rls = files
        .iter()
        .find(|f| f.name() == "envoy/service/ratelimit/v3/rls.proto")
        .expect("rls.proto is served");
    let service = rls
        .service
        .iter()
        .find(|s| s.name() == "RateLimitService")
        .expect("the service is in rls.proto");
    let method = &service.method[0];
    assert_eq!(
        (method.name(), method.input_type(), method.output_type()),
        (
            "ShouldRateLimit",
            ".envoy.service.ratelimit.v3.RateLimitRequest",
            ".envoy.service.ratelimit.v3.RateLimitResponse"
        )
    );
    for dependency in &rls.dependency {
        let MessageResponse::FileDescriptorResponse(_) =
            reflect(&channel, MessageRequest::FileByFilename(dependency.clone())).await
        else {
            panic!("{dependency}, imported by rls.proto, is not served");
        };
    }

    // The request message as served is the one the server's types encode: field for field.
    let request_type = rls
        .message_type
        .iter()
        .find(|m| m.name() == "RateLimitRequest")
        .expect("RateLimitRequest is in rls.proto");
    let fields: Vec<(&str, i32, Type)> = request_type
        .field
        .iter()
        .map(|f| (f.name(), f.number(), f.r#type()))
        .collect();
    assert_eq!(
        fields,
        [
            ("domain", 1, Type::String),
            ("descriptors", 2, Type::Message),
            ("hits_addend", 3, Type::Uint32)
        ]
    );
    let encoded = envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
        domain: "d".to_owned(),
        descriptors: vec![descriptor(&[("k", "v")])],
        hits_addend: 7,
    }
    .encode_to_vec();
    // Tags 1 (length-delimited), 2 (length-delimited), 3 (varint), as the fields above say.
    assert_eq!(encoded[0], 1 << 3 | 2);
    assert_eq!(encoded[3], 2 << 3 | 2);
    assert_eq!(encoded[encoded.len() - 2..], [3 << 3, 7]);

    // The service described is the one that answers.
    let mut rls_client = client(server.grpc_addr()).await;
    ask(
        &mut rls_client,
        request("no-such-domain", vec![descriptor(&[("k", "v")])]),
    )
    .await;
}

/// grpcurl asks v1alpha of servers that have no v1; it is served too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_v1alpha_lists_the_services_too() {
    use v1alpha::server_reflection_client::ServerReflectionClient;
    use v1alpha::server_reflection_request::MessageRequest;
    use v1alpha::server_reflection_response::MessageResponse;
    let server = Tollgate::start(&["--grpc-listen", "127.0.0.1:0"]);
    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = ServerReflectionClient::new(channel(&server).await)
        .server_reflection_info(tonic::codegen::tokio_stream::iter([request]))
        .await
        .expect("the v1alpha reflection service answers")
        .into_inner();
    let answer = answers
        .message()
        .await
        .expect("an answer")
        .expect("one answer");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("not a list of services");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&RLS) && names.contains(&"grpc.reflection.v1.ServerReflection"),
        "{names:?}"
    );
}
