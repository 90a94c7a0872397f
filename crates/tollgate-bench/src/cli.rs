//! The command line, `tollgate-bench <benchmark> [ARGS]`: one subcommand per benchmark, each
//! with that benchmark's arguments, and `all`, every one of them in one run ([`crate::all`]).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::all::AllArgs;
use crate::{BenchError, Report};

/// tollgate-bench: tollgate's stores and servers measured beside the approaches teams publish
/// and copy, each run written up as a Markdown report with SVG charts.
#[derive(Debug, Parser)]
#[command(name = "tollgate-bench", version)]
pub struct Cli {
    /// The benchmark to run.
    #[command(subcommand)]
    pub bench: Bench,
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Bench {
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
    /// Every benchmark in one run, on throwaway servers it starts and stops itself, with an
    /// index (`index.md`) of the machine and of every goal, met or not.
    All(AllArgs),
}

/// Runs the benchmark `bench` names, prints its Markdown report on stdout and says on stderr
/// where the report and its chart were written.
pub async fn run(bench: Bench) -> Result<(), BenchError> {
    if let Bench::All(args) = bench {
        return crate::all::run(args).await;
    }
    let (report, out) = run_one(bench).await?;
    println!("{}", report.to_markdown());
    eprintln!("tollgate-bench: report written to {}", out.display());
    Ok(())
}

/// Runs one benchmark, which writes its report into its `--out` directory: the report, and
/// that directory.
pub(crate) async fn run_one(bench: Bench) -> Result<(Report, PathBuf), BenchError> {
    Ok(match bench {
        Bench::Memory(args) => {
            // Threads of its own, timed: off the runtime's workers.
            let out = args.out.clone();
            let report = tokio::task::spawn_blocking(move || crate::run_memory(&args))
                .await
                .map_err(|e| BenchError::Args(format!("the benchmark died: {e}")))?;
            (report?.report(), out)
        }
        Bench::Redis(args) => (crate::run_redis(&args).await?.report(), args.out),
        Bench::Postgres(args) => (crate::run_postgres(&args).await?.report(), args.out),
        Bench::Http(args) => (crate::run_http(&args).await?.report(), args.out),
        Bench::Resp(args) => (crate::run_resp(&args).await?.report(), args.out),
        Bench::Grpc(args) => (crate::run_grpc(&args).await?.report(), args.out),
        Bench::Soak(args) => (crate::run_soak(&args).await?.report(), args.out),
        Bench::All(_) => return Err(BenchError::Args("`all` runs the others".into())),
    })
}
