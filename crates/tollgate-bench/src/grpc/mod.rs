//! gRPC: Envoy's `ShouldRateLimit` against tollgate's gRPC listener, on the memory store (in
//! plaintext, over TLS, and with OpenTelemetry tracing on, sampled at 1 and at 0.01) and on
//! Redis, with concurrent calls spread over a few HTTP/2 connections, as Envoy's pool sends
//! them. Decisions/s and latency per store, and what TLS and tracing cost, in one run on one
//! machine.
//!
//! The servers run in this process, started through the server's library on the config
//! [`CONFIG`] (`servers.rs`, which starts them); `measure.rs` drives them, `report/` writes the
//! report. The client runs in the same process and on the same cores, so the figures are the
//! whole round trip's cost.

mod dial;
mod measure;
mod report;
mod sink;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

pub use crate::servers::CONFIG;
pub use report::{GrpcReport, GrpcRun};

use crate::servers::Running;
use crate::tls::{Certificates, TlsClient};
use crate::{BenchError, servers};
use measure::measure;

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

/// Starts a server on the memory store, the same over TLS (a throwaway CA and certificate,
/// made with `openssl`), and (given `--redis`) one on Redis, in this process, answering
/// [`CONFIG`]; measures each in turn each round (each round starting one further on), stops
/// them, writes `grpc.md` and `grpc.svg` to `args.out`, and returns the report. A store not
/// measured is listed, and why. Progress goes to stderr, a line per run.
pub async fn run_grpc(args: &GrpcBenchArgs) -> Result<GrpcReport, BenchError> {
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
    let config = servers::EnvoyConfig::write()?;
    let certificates = Certificates::make("grpc")?;
    let shutdown = CancellationToken::new();
    let mut missing = Vec::new();
    // TLS on the memory store only: there the decision is cheapest, so TLS's share of a call
    // is the largest and the least blurred by a store's own latency.
    // Tracing likewise, at upstream's default rate (1) and a production-like one (0.01),
    // exporting to a receiver in this process that discards what it gets.
    let receiver = sink::start(&shutdown).await?;
    let mut stores = vec![
        ("memory", "memory", false, None),
        ("memory", "memory", true, None),
        ("memory", "memory", false, Some(1.0)),
        ("memory", "memory", false, Some(0.01)),
    ];
    match &args.redis {
        Some(url) => stores.push(("redis", url.as_str(), false, None)),
        None => missing.push(("redis".to_owned(), "no --redis URL given".to_owned())),
    }
    let mut targets = Vec::new();
    let mut started = Ok(());
    for (name, store, tls, tracing) in stores {
        let certs = tls.then_some(&certificates);
        let client = match tls {
            true => Some(certificates.client(b"h2")?),
            false => None,
        };
        let traced = tracing.map(|rate| (rate, receiver.as_str()));
        match servers::grpc_traced(store, &config, certs, traced, &shutdown).await {
            Ok(server) => targets.push(Target {
                store: name,
                client,
                tracing,
                server,
            }),
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    let measured = match started {
        Ok(()) => measure_all(args, &targets, missing).await,
        Err(e) => Err(e),
    };
    // The servers stop, measured or not, before their files go.
    shutdown.cancel();
    let mut stopped = Ok(());
    for target in targets {
        stopped = stopped.and(target.server.finished().await);
    }
    let report = measured?;
    stopped?;
    report.report().write(&args.out)?;
    Ok(report)
}

/// A server measured: its store's name, its client's TLS if it has one, its sampling rate if
/// it traces.
struct Target {
    store: &'static str,
    client: Option<TlsClient>,
    tracing: Option<f64>,
    server: Running,
}

/// Every round of every target.
async fn measure_all(
    args: &GrpcBenchArgs,
    targets: &[Target],
    missing: Vec<(String, String)>,
) -> Result<GrpcReport, BenchError> {
    for (store, why) in &missing {
        eprintln!("tollgate-bench grpc: NOT MEASURED {store}: {why}");
    }
    let mut tls = None;
    for target in targets {
        if let Some(client) = &target.client {
            tls = Some(client.describe(target.server.addr).await?);
        }
    }
    let mut report = GrpcReport {
        seconds: args.seconds,
        concurrency: args.concurrency,
        connections: args.connections,
        keys: args.keys,
        tls,
        runs: Vec::new(),
        missing,
    };
    let total = args.rounds * targets.len();
    for round in 1..=args.rounds {
        // Each round starts one target further on, so that none always runs first or right
        // after the same other.
        let start = (round - 1) % targets.len();
        for target in targets.iter().cycle().skip(start).take(targets.len()) {
            let run = measure(
                args,
                target.store,
                target.server.addr,
                target.client.as_ref(),
                target.tracing,
                round,
            )
            .await?;
            eprintln!(
                "[{}/{total}] round {round} {}: {:.0} decisions/s, p50 {:.0} µs, p99 {:.0} µs, {} errors",
                report.runs.len() + 1,
                run.target(),
                run.decisions_per_sec,
                run.p50_us,
                run.p99_us,
                run.errors
            );
            report.runs.push(run);
        }
    }
    Ok(report)
}
