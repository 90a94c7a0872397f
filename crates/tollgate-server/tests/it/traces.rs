//! OpenTelemetry spans from the real binary (`[tracing] enabled = true`), received by an OTLP
//! receiver inside the test and decoded with the official protobuf types: a `ShouldRateLimit`,
//! an HTTP check and a RESP command each make a span, parented by the caller's `traceparent`,
//! with the store call as its child; the sampler is upstream's (the parent's flag, else the
//! ratio); and a receiver that is down or never answers costs spans (counted), not decisions.

mod receiver;

use std::path::PathBuf;

use reqwest::{Client, StatusCode};
use serde_json::json;
use tonic::metadata::MetadataValue;

use crate::support::envoy::{client, descriptor, request};
use crate::support::{self, Stopwatch, Tollgate};
use receiver::Received;

/// The trace and parent span ids the callers send.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// The rate-limit span's name.
const SHOULD_RATE_LIMIT: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

fn traceparent(trace: &str, parent: &str, sampled: bool) -> String {
    format!("00-{trace}-{parent}-{}", if sampled { "01" } else { "00" })
}

/// A server with HTTP, RESP and gRPC (the domain `d`: `k` once an hour), whose `[tracing]`
/// section is `tracing`.
fn start(tracing: &str, env: &[(&str, &str)]) -> (tempfile::TempDir, Tollgate) {
    let (dir, toml) = support::envoy::configured(
        "listen = \"127.0.0.1:0\"",
        &[(
            "d.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
        )],
    );
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        format!(
            "[resp]\nlisten = \"127.0.0.1:0\"\n\n{text}\n[tracing]\nenabled = true\n{tracing}\n"
        ),
    )
    .unwrap();
    let path: PathBuf = toml;
    let server = Tollgate::start_with_env(&["--config", path.to_str().unwrap()], env);
    (dir, server)
}

/// `ShouldRateLimit` of `domain` with `descriptors` descriptors, carrying `traceparent`.
async fn should_rate_limit(server: &Tollgate, traceparent: &str, descriptors: usize) -> i32 {
    let mut c = client(server.grpc_addr()).await;
    let mut call = tonic::Request::new(request(
        "d",
        (0..descriptors)
            .map(|_| descriptor(&[("k", "v")]))
            .collect(),
    ));
    call.metadata_mut()
        .insert("traceparent", MetadataValue::try_from(traceparent).unwrap());
    call.metadata_mut()
        .insert("tracestate", MetadataValue::from_static("vendor=value"));
    c.should_rate_limit(call)
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
        .overall_code
}

/// `POST /v1/check` of an inline bucket, carrying `traceparent` if given.
async fn check(server: &Tollgate, traceparent: Option<&str>) -> StatusCode {
    let mut post = Client::new()
        .post(format!("http://{}/v1/check", server.addr))
        .body(
            json!({"key": "user", "capacity": 1000000, "refill": 1, "period_ms": 1000}).to_string(),
        );
    if let Some(parent) = traceparent {
        post = post.header("traceparent", parent);
    }
    // Bounded, so that a decision held up by the export fails the test rather than hanging it.
    tokio::time::timeout(std::time::Duration::from_secs(10), post.send())
        .await
        .expect("a check answers within 10 s, traced or not")
        .expect("the check answers")
        .status()
}

fn named<'a>(spans: &'a [Received], name: &str) -> Vec<&'a Received> {
    spans.iter().filter(|s| s.span.name == name).collect()
}

/// The store span whose parent is `parent`.
fn store_child<'a>(spans: &'a [Received], parent: &Received) -> Option<&'a Received> {
    spans
        .iter()
        .find(|s| s.span.name == "store" && s.parent_span_id() == parent.span_id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_should_rate_limit_span_is_the_callers_child_and_the_store_call_its_own() {
    let (url, spans) = receiver::http().await;
    let (_dir, server) = start(
        &format!(
            "endpoint = \"{url}\"\nservice_name = \"edge-limits\"\nservice_namespace = \"team\"\nservice_instance_id = \"pod-1\""
        ),
        &[],
    );
    // Two descriptors of a limit of one: over.
    assert_eq!(
        should_rate_limit(&server, &traceparent(TRACE, PARENT, true), 2).await,
        2
    );
    let all = spans
        .until("ShouldRateLimit span and its store child", |all| {
            named(all, SHOULD_RATE_LIMIT)
                .first()
                .is_some_and(|s| store_child(all, s).is_some())
        })
        .await;
    let call = named(&all, SHOULD_RATE_LIMIT)[0];
    assert_eq!(call.trace_id(), TRACE);
    assert_eq!(call.parent_span_id(), PARENT);
    assert_eq!(call.span.trace_state, "vendor=value");
    assert_eq!(call.attribute("domain").as_deref(), Some("d"));
    assert_eq!(call.attribute("descriptors").as_deref(), Some("2"));
    assert_eq!(
        call.attribute("overall_code").as_deref(),
        Some("OVER_LIMIT")
    );
    assert_eq!(call.attribute("rpc.system").as_deref(), Some("grpc"));
    // SERVER.
    assert_eq!(call.span.kind, 2);
    assert_eq!(call.scope, "tollgate");
    for (key, value) in [
        ("service.name", "edge-limits"),
        ("service.namespace", "team"),
        ("service.instance.id", "pod-1"),
    ] {
        assert_eq!(
            call.resource.get(key).map(String::as_str),
            Some(value),
            "{key}"
        );
    }
    let store = store_child(&all, call).unwrap();
    assert_eq!(store.trace_id(), TRACE);
    assert_eq!(store.attribute("store").as_deref(), Some("memory"));
    assert!(store.span.start_time_unix_nano >= call.span.start_time_unix_nano);
    assert!(store.span.end_time_unix_nano <= call.span.end_time_unix_nano);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_check_and_a_resp_command_make_their_spans() {
    let (url, spans) = receiver::http().await;
    let (_dir, server) = start(&format!("endpoint = \"{url}/\""), &[]);
    let parent = "1111111111111111";
    assert_eq!(
        check(&server, Some(&traceparent(TRACE, parent, true))).await,
        StatusCode::OK
    );
    let redis = redis::Client::open(format!("redis://{}", server.resp_addr())).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let reply: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg("user")
        .arg(10)
        .arg(10)
        .arg(60)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(reply[0], 0, "allowed");
    let all = spans
        .until(
            "the check's and the command's spans with their store calls",
            |all| {
                let done = |name| {
                    named(all, name)
                        .first()
                        .is_some_and(|s| store_child(all, s).is_some())
                };
                done("POST /v1/check") && done("CL.THROTTLE")
            },
        )
        .await;
    let http = named(&all, "POST /v1/check")[0];
    assert_eq!(http.trace_id(), TRACE);
    assert_eq!(http.parent_span_id(), parent);
    assert_eq!(
        http.attribute("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(http.attribute("allowed").as_deref(), Some("true"));
    let resp = named(&all, "CL.THROTTLE")[0];
    assert!(resp.span.parent_span_id.is_empty(), "a root: {resp:?}");
    assert_ne!(resp.trace_id(), TRACE);
    assert_eq!(store_child(&all, resp).unwrap().trace_id(), resp.trace_id());
    // The default service name, and a random instance id.
    assert_eq!(http.resource["service.name"], "tollgate");
    assert_eq!(http.resource["service.instance.id"].len(), 36);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_over_otlp_grpc_when_the_protocol_says_so() {
    let (url, spans) = receiver::grpc().await;
    let (_dir, server) = start(&format!("protocol = \"grpc\"\nendpoint = \"{url}\""), &[]);
    assert_eq!(
        should_rate_limit(&server, &traceparent(TRACE, PARENT, true), 1).await,
        1
    );
    let all = spans
        .until("the ShouldRateLimit span over gRPC", |all| {
            !named(all, SHOULD_RATE_LIMIT).is_empty()
        })
        .await;
    let call = named(&all, SHOULD_RATE_LIMIT)[0];
    assert_eq!(
        (call.trace_id().as_str(), call.parent_span_id().as_str()),
        (TRACE, PARENT)
    );
    assert_eq!(call.attribute("overall_code").as_deref(), Some("OK"));
}

/// Upstream's sampler: `ParentBased(TraceIDRatioBased(rate))`. At 0 a root is never sampled,
/// nor is a caller's unsampled trace; a caller's sampled trace is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_sampling_rate_zero_only_a_sampled_parent_is_followed() {
    let (url, spans) = receiver::http().await;
    let (_dir, server) = start(&format!("endpoint = \"{url}\"\nsampling_rate = 0.0"), &[]);
    let unsampled = "22222222222222222222222222222222";
    assert_eq!(check(&server, None).await, StatusCode::OK);
    assert_eq!(
        check(&server, Some(&traceparent(unsampled, PARENT, false))).await,
        StatusCode::OK
    );
    // Sent last: once its spans are in, anything sampled before them would be too (the queue
    // exports in order).
    assert_eq!(
        check(&server, Some(&traceparent(TRACE, PARENT, true))).await,
        StatusCode::OK
    );
    let all = spans
        .until("the sampled parent's spans", |all| {
            named(all, "POST /v1/check")
                .first()
                .is_some_and(|s| store_child(all, s).is_some())
        })
        .await;
    assert_eq!(all.len(), 2, "{all:#?}");
    assert!(all.iter().all(|s| s.trace_id() == TRACE), "{all:#?}");
    // Counted once the receiver's answer is in, a moment after it kept the spans.
    let client = Client::new();
    let watch = Stopwatch::start();
    loop {
        let metrics = support::get(&client, &server, "/metrics").await;
        let exported = support::metric(&metrics, "tollgate_trace_spans_exported_total");
        assert!(exported <= 2.0, "{exported} spans exported");
        if exported == 2.0 {
            break;
        }
        assert!(
            watch.elapsed() < std::time::Duration::from_secs(60),
            "the two spans not counted as exported"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(spans.all().len(), 2);
}

/// A receiver that takes the connection and never answers holds the exporter in its first
/// export; the queue fills, and the spans beyond it are dropped and counted, while every check
/// is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_costs_spans_not_decisions() {
    let url = receiver::stalled().await;
    // The exporter waits for the receiver as long as an export may take: here, ten minutes.
    let (_dir, server) = start(
        &format!("endpoint = \"{url}\""),
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "600000")],
    );
    let client = Client::new();
    let full = "tollgate_trace_spans_dropped_total{reason=\"queue_full\"}";
    let watch = Stopwatch::start();
    let mut checks = 0;
    loop {
        for _ in 0..200 {
            assert_eq!(check(&server, None).await, StatusCode::OK);
            checks += 1;
        }
        let metrics = support::get(&client, &server, "/metrics").await;
        if support::metric(&metrics, full) > 0.0 {
            break;
        }
        assert!(
            watch.elapsed() < std::time::Duration::from_secs(120),
            "no span dropped after {checks} checks (two spans each)"
        );
    }
    // Two spans a check, the queue's and one batch's worth: at least that many were made.
    assert!(checks * 2 > 2048, "{checks} checks");
}

/// A receiver that is down: every export fails, the spans are counted as lost, and the checks
/// are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_is_down_costs_spans_not_decisions() {
    // Port 1 (tcpmux): privileged, so no other test can be listening there; refused.
    let url = "http://127.0.0.1:1";
    let (_dir, server) = start(&format!("endpoint = \"{url}\""), &[]);
    for _ in 0..10 {
        assert_eq!(check(&server, None).await, StatusCode::OK);
    }
    let client = Client::new();
    let failed = "tollgate_trace_spans_dropped_total{reason=\"export_failed\"}";
    let watch = Stopwatch::start();
    while support::metric(&support::get(&client, &server, "/metrics").await, failed) < 20.0 {
        assert!(
            watch.elapsed() < std::time::Duration::from_secs(60),
            "the 20 spans of 10 checks not counted as failed exports"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(check(&server, None).await, StatusCode::OK);
}

/// A `[tracing]` that can never work is refused at the start, naming the key.
#[test]
fn a_bad_tracing_section_is_refused_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    for (section, key, says) in [
        ("sampling_rate = 1.5", "tracing.sampling_rate", "from 0"),
        ("sampling_rate = -0.1", "tracing.sampling_rate", "from 0"),
        (
            "protocol = \"thrift\"",
            "tracing.protocol",
            "unknown variant",
        ),
        (
            "endpoint = \"https://collector:4318\"",
            "tracing.endpoint",
            "TLS",
        ),
        (
            "endpoint = \"collector:4318\"",
            "tracing.endpoint",
            "http://",
        ),
        (
            "endpoint = \"http://collector:4318/?a=b\"",
            "tracing.endpoint",
            "no query",
        ),
        ("endpoint = \"http://\"", "tracing.endpoint", "not a URL"),
        ("sample = 1", "tracing", "unknown field"),
    ] {
        let file = support::write(
            dir.path(),
            "tollgate.toml",
            &format!("[tracing]\nenabled = true\n{section}\n"),
        );
        let (ok, _, err) = support::config_check(&file);
        assert!(!ok, "{section} accepted");
        assert!(err.contains(key) && err.contains(says), "{section}: {err}");
    }
}

/// Spans still queued when the server is told to stop are exported before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spans_queued_at_a_stop_are_exported_before_the_exit() {
    let (url, spans) = receiver::http().await;
    let (_dir, mut server) = start(&format!("endpoint = \"{url}\""), &[]);
    assert_eq!(check(&server, None).await, StatusCode::OK);
    server.terminate();
    let status = tokio::task::spawn_blocking(move || {
        let status = server.wait(std::time::Duration::from_secs(30));
        (server, status)
    })
    .await
    .unwrap()
    .1;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let all = spans.all();
    let http = named(&all, "POST /v1/check");
    assert_eq!(http.len(), 1, "{all:#?}");
    assert!(store_child(&all, http[0]).is_some(), "{all:#?}");
}
