//! gRPC: Envoy's `ShouldRateLimit` against tollgate's gRPC listener, on the memory store and on
//! Redis, with concurrent calls spread over a few HTTP/2 connections, as Envoy's pool sends
//! them. Decisions/s and latency per store, in one run on one machine.
//!
//! The servers are the caller's (the server binary starts them in its process, on the config
//! [`CONFIG`]): this crate drives them and writes the report. The client runs in the same
//! process and on the same cores, so the figures are the whole round trip's cost.

mod report;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

pub use report::{GrpcReport, GrpcRun};

use crate::BenchError;
use crate::clock::Stopwatch;
use crate::stats::Histogram;

/// The envoyproxy/ratelimit config the servers answer: a limit per `user` that no run reaches,
/// so that every call takes the whole decision path and is allowed.
pub const CONFIG: &str = "\
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
";

/// Arguments of the gRPC benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct GrpcBenchArgs {
    /// seconds per run
    #[arg(long, default_value = "3")]
    pub seconds: u64,
    /// calls in flight at once
    #[arg(long, default_value = "64")]
    pub concurrency: usize,
    /// HTTP/2 connections the calls share
    #[arg(long, default_value = "4")]
    pub connections: usize,
    /// distinct descriptor values the calls spread over
    #[arg(long, default_value = "10000")]
    pub keys: usize,
    /// rounds: each store runs once per round
    #[arg(long, default_value = "2")]
    pub rounds: usize,
    /// a Redis for the Redis store's runs (without one they are reported as not measured)
    #[arg(long)]
    pub redis: Option<String>,
    /// directory to write grpc.md and grpc.svg to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
}

impl Default for GrpcBenchArgs {
    fn default() -> GrpcBenchArgs {
        GrpcBenchArgs {
            seconds: 3,
            concurrency: 64,
            connections: 4,
            keys: 10_000,
            rounds: 2,
            redis: None,
            out: PathBuf::from("bench-report"),
        }
    }
}

/// Measures each of `targets` (a store's name and the gRPC address of a server on it) in
/// turn each round, writes `grpc.md` and `grpc.svg` to `args.out`, and returns the report;
/// `missing` lists stores not measured, and why. Progress goes to stderr, a line per run.
pub async fn run_grpc(
    args: &GrpcBenchArgs,
    targets: &[(String, SocketAddr)],
    missing: Vec<(String, String)>,
) -> Result<GrpcReport, BenchError> {
    if args.seconds == 0
        || args.concurrency == 0
        || args.connections == 0
        || args.keys == 0
        || args.rounds == 0
    {
        return Err(BenchError::Args(
            "--seconds, --concurrency, --connections, --keys and --rounds must be at least 1"
                .into(),
        ));
    }
    for (store, why) in &missing {
        eprintln!("tollgate bench grpc: NOT MEASURED {store}: {why}");
    }
    let mut report = GrpcReport {
        seconds: args.seconds,
        concurrency: args.concurrency,
        connections: args.connections,
        keys: args.keys,
        runs: Vec::new(),
        missing,
    };
    let total = args.rounds * targets.len();
    for round in 1..=args.rounds {
        for (store, addr) in targets {
            let run = measure(args, store, *addr, round).await?;
            eprintln!(
                "[{}/{total}] round {round} {store}: {:.0} decisions/s, p50 {:.0} µs, p99 {:.0} µs, {} errors",
                report.runs.len() + 1,
                run.decisions_per_sec,
                run.p50_us,
                run.p99_us,
                run.errors
            );
            report.runs.push(run);
        }
    }
    report.report().write(&args.out)?;
    Ok(report)
}

/// One run against `addr`.
async fn measure(
    args: &GrpcBenchArgs,
    store: &str,
    addr: SocketAddr,
    round: usize,
) -> Result<GrpcRun, BenchError> {
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| BenchError::Args(format!("the gRPC address {addr}: {e}")))?
            .connect()
            .await
            .map_err(|e| BenchError::Args(format!("cannot connect to {addr}: {e}")))?;
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
        round,
        decisions_per_sec: latencies.count() as f64 / elapsed,
        p50_us: us(0.5),
        p99_us: us(0.99),
        allowed,
        errors,
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
