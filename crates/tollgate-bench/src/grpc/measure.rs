//! One gRPC run: concurrent `ShouldRateLimit` calls over a few HTTP/2 connections (plaintext
//! or TLS), timed.

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

use super::dial::Dial;
use super::{GrpcBenchArgs, GrpcRun};
use crate::BenchError;
use crate::clock::Stopwatch;
use crate::stats::Histogram;
use crate::tls::TlsClient;

/// One run against `addr`, over TLS with `tls`, a server traced at `tracing`. The connections
/// are open (their handshakes done) before the clock starts.
pub(super) async fn measure(
    args: &GrpcBenchArgs,
    store: &str,
    addr: SocketAddr,
    tls: Option<&TlsClient>,
    tracing: Option<f64>,
    round: usize,
) -> Result<GrpcRun, BenchError> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| BenchError::Args(format!("the gRPC address {addr}: {e}")))?;
        let channel = match tls {
            Some(client) => {
                let dial = Dial {
                    client: client.clone(),
                    addr,
                };
                endpoint.connect_with_connector(dial).await
            }
            None => endpoint.connect().await,
        }
        .map_err(|e| BenchError::Args(format!("cannot connect to {scheme}://{addr}: {e}")))?;
        channels.push(channel);
    }
    let seconds = Duration::from_secs(args.seconds);
    let keys = args.keys;
    let clock = Stopwatch::start();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|worker| {
            let client = RateLimitServiceClient::new(channels[worker % channels.len()].clone());
            tokio::spawn(call_until(client, worker, keys, seconds, clock))
        })
        .collect();
    let mut latencies = Histogram::new();
    let (mut allowed, mut errors) = (0u64, 0u64);
    for task in tasks {
        let (histogram, ok, failed) = task
            .await
            .map_err(|e| BenchError::Args(format!("a gRPC worker failed: {e}")))?;
        latencies.merge(&histogram);
        allowed += ok;
        errors += failed;
    }
    let elapsed = clock.elapsed().as_secs_f64();
    let us = |q| {
        latencies
            .quantile(q)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    };
    Ok(GrpcRun {
        store: store.to_owned(),
        tls: tls.is_some(),
        round,
        decisions_per_sec: latencies.count() as f64 / elapsed,
        p50_us: us(0.5),
        p99_us: us(0.99),
        allowed,
        errors,
        tracing,
    })
}

/// Calls until `seconds` have passed on `clock`: the latencies, the calls allowed, the errors.
async fn call_until(
    mut client: RateLimitServiceClient<Channel>,
    worker: usize,
    keys: usize,
    seconds: Duration,
    clock: Stopwatch,
) -> (Histogram, u64, u64) {
    let mut latencies = Histogram::new();
    let (mut allowed, mut errors) = (0, 0);
    let mut n = worker;
    while clock.elapsed() < seconds {
        // A stride that visits every key, different for each worker.
        n = (n + 7_919) % keys;
        let request = RateLimitRequest {
            domain: "bench".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".to_owned(),
                    value: n.to_string(),
                }],
                ..Default::default()
            }],
            hits_addend: 0,
        };
        let started = clock.elapsed();
        let answer = client.should_rate_limit(request).await;
        latencies.record(clock.elapsed().saturating_sub(started));
        match answer {
            Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => allowed += 1,
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
    (latencies, allowed, errors)
}
