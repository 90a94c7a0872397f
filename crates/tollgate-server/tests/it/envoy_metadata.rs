//! `[grpc] response_dynamic_metadata` (`RESPONSE_DYNAMIC_METADATA`): each answer's
//! `dynamic_metadata` carries what envoyproxy/ratelimit puts there — the domain, each
//! descriptor's entries (and its own limit and hits), the request's hits, the configured
//! metadata of the limits passed — read by a real gRPC client, and by a real Envoy, which logs
//! it with `%DYNAMIC_METADATA(...)%`.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, Value};

use crate::envoy_mtls::{free_port, start_envoy, status};
use crate::support::Tollgate;
use crate::support::envoy::{ask, client, configured, descriptor, request, with_hits};

const DOMAIN: &str = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
    metadata: {team: {name: edge, size: 3}, tier: gold}
  - key: m
    rate_limit: {unit: hour, requests_per_unit: 1}
    metadata:
      team: {region: eu, name: other}
      tier: silver
      list: [1, a, true, null, 0.5]
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
    metadata: {lost: true}
";

fn start(on: bool) -> (tempfile::TempDir, Tollgate) {
    let (dir, toml) = configured(
        &format!("listen = \"127.0.0.1:0\"\nresponse_dynamic_metadata = {on}"),
        &[("d.yaml", DOMAIN)],
    );
    let server = Tollgate::start(&["--config", toml.to_str().unwrap()]);
    (dir, server)
}

/// `value` as JSON, for comparing whole trees.
fn json(value: &Value) -> serde_json::Value {
    match &value.kind {
        Some(Kind::StringValue(s)) => serde_json::json!(s),
        Some(Kind::NumberValue(n)) => serde_json::json!(n),
        Some(Kind::BoolValue(b)) => serde_json::json!(b),
        Some(Kind::ListValue(l)) => l.values.iter().map(json).collect(),
        Some(Kind::StructValue(s)) => object(s),
        Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
    }
}

fn object(s: &Struct) -> serde_json::Value {
    s.fields.iter().map(|(k, v)| (k.clone(), json(v))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_carries_upstreams_dynamic_metadata_when_asked() {
    let (_dir, server) = start(true);
    let mut c = client(server.grpc_addr()).await;
    let mut own = descriptor(&[("a", "b"), ("c", "")]);
    own.limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: 2,
    });
    let mut asked = request("d", vec![with_hits(descriptor(&[("k", "v")]), 2), own]);
    let answer = ask(&mut c, asked.clone()).await;
    assert_eq!(
        object(answer.dynamic_metadata.as_ref().expect("dynamic metadata")),
        serde_json::json!({
            "domain": "d",
            "descriptors": [
                {"entries": ["k=v"], "hitsAddend": 2.0},
                {"entries": ["a=b", "c="], "limit": "requests_per_unit:5 unit:MINUTE"},
            ],
            "metadata": {"team": {"name": "edge", "size": 3.0}, "tier": "gold"},
        })
    );
    // The request's own hits, when not 0; an answer over the limit carries it too.
    asked.hits_addend = 20;
    asked.descriptors.truncate(1);
    asked.descriptors[0].hits_addend = None;
    let answer = ask(&mut c, asked).await;
    assert_eq!(answer.overall_code, 2, "over the limit");
    assert_eq!(
        object(answer.dynamic_metadata.as_ref().expect("dynamic metadata")),
        serde_json::json!({
            "domain": "d",
            "descriptors": [{"entries": ["k=v"]}],
            "hitsAddend": 20.0,
        })
    );
}

/// The metadata of every limit passed, merged: a key the first limit set stays, maps merge
/// key by key; a limit over is not passed, and one without metadata adds none. Nor does a
/// `detailed_metric` one: upstream makes it anew for the request, without its metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_of_the_limits_passed_is_merged() {
    let (_dir, server) = start(true);
    let mut c = client(server.grpc_addr()).await;
    let three = || {
        request(
            "d",
            vec![
                descriptor(&[("k", "v")]),
                descriptor(&[("m", "x")]),
                descriptor(&[("plain", "p")]),
                descriptor(&[("detailed", "d1")]),
            ],
        )
    };
    let metadata = |answer: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        object(answer.dynamic_metadata.as_ref().expect("dynamic metadata"))["metadata"].clone()
    };
    let first = ask(&mut c, three()).await;
    assert_eq!(first.overall_code, 1);
    assert_eq!(
        metadata(&first),
        serde_json::json!({
            "team": {"name": "edge", "size": 3.0, "region": "eu"},
            "tier": "gold",
            "list": [1.0, "a", true, null, 0.5],
        })
    );
    // `m` allows one an hour: now over, and its metadata is not passed.
    let second = ask(&mut c, three()).await;
    assert_eq!(second.overall_code, 2);
    assert_eq!(
        metadata(&second),
        serde_json::json!({"team": {"name": "edge", "size": 3.0}, "tier": "gold"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_dynamic_metadata_by_default() {
    let (_dir, server) = start(false);
    let mut c = client(server.grpc_addr()).await;
    let answer = ask(&mut c, request("d", vec![descriptor(&[("k", "v")])])).await;
    assert_eq!(answer.dynamic_metadata, None);
}

/// Envoy's bootstrap: every request on `port` asks the domain `d` about `k=v`, then goes to
/// tollgate's `/healthz` on `backend`; the access log at `log` holds the rate-limit filter's
/// dynamic metadata, one line a request.
fn bootstrap(port: u16, grpc: u16, backend: u16, log: &std::path::Path) -> String {
    format!(
        r#"static_resources:
  listeners:
  - address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: "{log}"
              log_format:
                text_format_source:
                  inline_string: "%RESPONSE_CODE% %DYNAMIC_METADATA(envoy.filters.http.ratelimit)%\n"
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route:
                  cluster: backend
                  prefix_rewrite: "/healthz"
                  rate_limits:
                  - actions:
                    - generic_key: {{descriptor_key: k, descriptor_value: v}}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: d
              failure_mode_deny: true
              timeout: 2s
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{cluster_name: ratelimit}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: backend
    type: STATIC
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {backend}}}}}}}
  - name: ratelimit
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: ratelimit
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {grpc}}}}}}}
"#,
        log = log.display(),
    )
}

#[test]
fn a_real_envoy_logs_the_dynamic_metadata() {
    use std::time::Duration;

    use crate::support::Stopwatch;

    let (dir, server) = start(true);
    let port = free_port();
    let log = dir.path().join("access.log");
    let config = bootstrap(port, server.grpc_addr().port(), server.addr.port(), &log);
    let _envoy = start_envoy(dir.path(), "envoy", &config, port);
    assert_eq!(status(port), 200);
    let watch = Stopwatch::start();
    let line = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text.lines().next() {
            break line.to_owned();
        }
        assert!(
            watch.elapsed() < Duration::from_secs(20),
            "no access log line: {}",
            std::fs::read_to_string(dir.path().join("envoy.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let (code, metadata) = line.split_once(' ').unwrap();
    assert_eq!(code, "200");
    let metadata: serde_json::Value = serde_json::from_str(metadata)
        .unwrap_or_else(|e| panic!("{e}: the logged metadata {metadata:?}"));
    assert_eq!(
        metadata,
        serde_json::json!({
            "domain": "d",
            "descriptors": [{"entries": ["k=v"]}],
            "metadata": {"team": {"name": "edge", "size": 3}, "tier": "gold"},
        })
    );
}
