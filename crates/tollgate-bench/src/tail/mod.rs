//! The servers' tail at a fixed rate: tollgate's HTTP `/v1/check`, its gRPC `ShouldRateLimit`
//! and its Redis-protocol `CL.THROTTLE`, each beside a bare server of the same protocol (a bare
//! axum handler on hyper, a bare tonic service answering `OK`, `redis-server` answering `PING`),
//! at the same offered load, idle and with the machine's other cores kept busy.
//!
//! The closed-loop benchmarks (`http`, `grpc`, `resp`) send a request when the last one is
//! answered: a server that stalls for 4 ms is sent nothing meanwhile, and the requests that
//! would have waited are never counted (coordinated omission). Here a pacer thread schedules
//! request `i` at `i / rate` seconds and the workers send them; each latency is counted from
//! the *scheduled* time, so a stall shows in every request scheduled during it. Each run keeps
//! every latency with its scheduled time, so the report gives, beside p50, p99 and p99.9, the
//! p99 of each slice of time (100 ms by default): a periodic stall shows as a row of spikes
//! at its period, in tollgate's runs and not the bare server's.
//!
//! The bare server and tollgate alternate within each round and condition (the order turned
//! each round), so that the machine's drift hits both alike; the goal is judged on their ratio
//! in each pair of runs.

mod busy;
mod clients;
mod measure;
mod pace;
mod report;
mod targets;

use std::path::PathBuf;

pub use report::{Condition, GOAL_RATIO, Pairing, Protocol, QUANTILES, SPIKE, TailReport, TailRun};

use crate::BenchError;
use crate::args::seconds;

/// Arguments of the tail benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct TailBenchArgs {
    /// seconds per run (one target, one condition, one round)
    #[arg(long, default_value = "3")]
    pub seconds: f64,
    /// requests per second offered to every target, scheduled at a fixed interval (below what
    /// the slowest pair sustains on a shared 2-vCPU VM, so that a run measures a tail, not a queue)
    #[arg(long, default_value = "2000")]
    pub rate: u32,
    /// connections (HTTP/1.1 and RESP: one request in flight on each; gRPC: calls in flight,
    /// over 4 HTTP/2 connections)
    #[arg(long, default_value = "32")]
    pub connections: usize,
    /// rounds: each pair runs once per round and condition
    #[arg(long, default_value = "2")]
    pub rounds: usize,
    /// the width of a slice of the latency-over-time series, in milliseconds
    #[arg(long, default_value = "100")]
    pub slice_ms: u64,
    /// protocols, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "http,grpc,resp")]
    pub protocols: Vec<Protocol>,
    /// conditions, comma-separated: idle, or busy (a busy-loop process per other core)
    #[arg(long, value_delimiter = ',', default_value = "idle,busy")]
    pub conditions: Vec<Condition>,
    /// directory to write tail.md and tail.svg to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
}

impl Default for TailBenchArgs {
    fn default() -> TailBenchArgs {
        TailBenchArgs {
            seconds: 3.0,
            rate: 2_000,
            connections: 32,
            rounds: 2,
            slice_ms: 100,
            protocols: Protocol::ALL.to_vec(),
            conditions: Condition::ALL.to_vec(),
            out: PathBuf::from("bench-report"),
        }
    }
}

/// Runs every protocol's pair, each condition and round, writes `tail.md` and `tail.svg` to
/// `args.out`, and returns the report. A pair that cannot start (no `redis-server` for RESP)
/// is reported as not measured. Progress goes to stderr, a line per run.
pub async fn run_tail(args: &TailBenchArgs) -> Result<TailReport, BenchError> {
    let run_time = seconds(args.seconds, "--seconds")?;
    if args.rate == 0 || args.connections == 0 || args.rounds == 0 || args.slice_ms == 0 {
        return Err(BenchError::Args(
            "--rate, --connections, --rounds and --slice-ms must be at least 1".into(),
        ));
    }
    if args.protocols.is_empty() || args.conditions.is_empty() {
        return Err(BenchError::Args(
            "--protocols and --conditions must name at least one".into(),
        ));
    }
    let report = measure::measure(args, run_time).await?;
    report.report().write(&args.out)?;
    Ok(report)
}
