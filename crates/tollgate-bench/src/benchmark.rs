//! One benchmark's command line, `tollgate-bench <benchmark> [ARGS]` for every benchmark but
//! `all`, and its run: each benchmark the command line offers on its own, and each step `all`
//! runs.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{BenchError, Report};

/// The command line of one benchmark, as `all` builds it for each of its steps.
#[derive(Debug, Parser)]
#[command(name = "tollgate-bench")]
pub(crate) struct OneBenchmark {
    /// The benchmark to run.
    #[command(subcommand)]
    pub(crate) bench: Benchmark,
}

/// The benchmarks, each on its own.
#[derive(Debug, Subcommand)]
pub enum Benchmark {
    /// The memory store beside `governor`: ns per check on a hot key, 100k and 1M keys, at 1
    /// and 2 threads, and bytes per key.
    Memory(crate::MemoryBenchArgs),
    /// The Redis store beside a Lua script, several commands, and WATCH/MULTI.
    Redis(crate::RedisBenchArgs),
    /// The PostgreSQL store beside the published PL/pgSQL function.
    Postgres(crate::PostgresBenchArgs),
    /// The tower middleware (memory store) and the server's own router beside a bare axum
    /// handler.
    Http(crate::HttpBenchArgs),
    /// `CL.THROTTLE` on tollgate's Redis-protocol port beside redis-cell and throttlecrab.
    Resp(crate::RespBenchArgs),
    /// Envoy's `ShouldRateLimit` on tollgate's gRPC listener, memory store and Redis.
    Grpc(crate::GrpcBenchArgs),
    /// A long run on Redis with a fault every period: latency per period, and memory, file
    /// descriptors and tasks before and after.
    Soak(crate::SoakArgs),
    /// The servers' tail at a fixed rate (HTTP, gRPC, RESP), each beside a bare server of its
    /// protocol, idle and under CPU contention: p99, p99.9 and p99 per slice of time.
    Tail(crate::TailBenchArgs),
    /// Several server processes on one Redis, a Redis Cluster and PostgreSQL: a hot key with and
    /// without leases, at its limit, and many users batched per node and per slot.
    Scale(crate::ScaleBenchArgs),
    /// A replicated store's failover (PostgreSQL with a streaming standby): seconds until
    /// decisions are exact again, the fail policy's answers meanwhile, and the tokens granted
    /// twice.
    Failover(crate::FailoverArgs),
}

/// Runs one benchmark, which writes its report into its `--out` directory: the report, and
/// that directory.
pub(crate) async fn run_one(bench: Benchmark) -> Result<(Report, PathBuf), BenchError> {
    Ok(match bench {
        Benchmark::Memory(args) => {
            // Threads of its own, timed: off the runtime's workers.
            let out = args.out.clone();
            let report = tokio::task::spawn_blocking(move || crate::run_memory(&args))
                .await
                .map_err(|e| BenchError::Args(format!("the benchmark died: {e}")))?;
            (report?.report(), out)
        }
        Benchmark::Redis(args) => (crate::run_redis(&args).await?.report(), args.out),
        Benchmark::Postgres(args) => (crate::run_postgres(&args).await?.report(), args.out),
        Benchmark::Http(args) => (crate::run_http(&args).await?.report(), args.out),
        Benchmark::Resp(args) => (crate::run_resp(&args).await?.report(), args.out),
        Benchmark::Grpc(args) => (crate::run_grpc(&args).await?.report(), args.out),
        Benchmark::Soak(args) => (crate::run_soak(&args).await?.report(), args.out),
        Benchmark::Tail(args) => (crate::run_tail(&args).await?.report(), args.out),
        Benchmark::Scale(args) => (crate::run_scale(&args).await?.report(), args.out),
        Benchmark::Failover(args) => (crate::run_failover(&args).await?.report(), args.out),
    })
}
