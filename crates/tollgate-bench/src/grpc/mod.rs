//! gRPC: Envoy's `ShouldRateLimit` against tollgate's gRPC listener, on the memory store and on
//! Redis, with concurrent calls spread over a few HTTP/2 connections, as Envoy's pool sends
//! them. Decisions/s and latency per store, in one run on one machine.
//!
//! The servers run in this process, started through the server's library on the config
//! [`CONFIG`] (`mod.rs`); `measure.rs` drives them, `report/` writes the report. The client runs in the same
//! process and on the same cores, so the figures are the whole round trip's cost.

mod measure;
mod report;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

pub use report::{GrpcReport, GrpcRun};

use crate::{BenchError, servers};
use measure::measure;

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

/// Starts a server on the memory store and (given `--redis`) one on Redis, in this process,
/// answering [`CONFIG`]; measures each in turn each round, stops them, writes `grpc.md` and
/// `grpc.svg` to `args.out`, and returns the report. A store not measured is listed, and why.
/// Progress goes to stderr, a line per run.
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
    let shutdown = CancellationToken::new();
    // The servers stop when this returns, measured or not.
    let _stop = shutdown.clone().drop_guard();
    let config = servers::EnvoyConfig::write()?;
    let mut stores = vec![("memory".to_owned(), "memory".to_owned())];
    let mut missing = Vec::new();
    match &args.redis {
        Some(url) => stores.push(("redis".to_owned(), url.clone())),
        None => missing.push(("redis".to_owned(), "no --redis URL given".to_owned())),
    }
    let mut targets = Vec::new();
    for (name, store) in stores {
        targets.push((name, servers::grpc(&store, &config, &shutdown).await?));
    }
    for (store, why) in &missing {
        eprintln!("tollgate-bench grpc: NOT MEASURED {store}: {why}");
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
        for (store, addr) in &targets {
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
