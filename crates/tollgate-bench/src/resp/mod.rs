//! RESP: `redis-benchmark -c 64` issuing rate-limit commands at tollgate's Redis-protocol port
//! (`CL.THROTTLE`), at `redis-server` with the redis-cell module loaded (`CL.THROTTLE`), and at
//! throttlecrab-server (`THROTTLE`), pipelines 1 and 16, the targets in turn each round
//! (starting one further on each round), in one run on one machine; and a plain `redis-server`
//! answering `PING` to the same load generator (the ceiling).
//!
//! The peers are not built here: the module's shared library and throttlecrab's binary are
//! given by path (`--redis-cell`, `--throttlecrab`, or their environment variables;
//! `scripts/bench resp` builds both into `target/peers`). A peer that is missing is reported as
//! missing, in the report and on stderr, and its goals as not measured, never skipped silently.

mod measure;
pub(crate) mod peers;
mod report;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

pub use report::{RespReport, RespRun, Target};

use crate::{BenchError, servers};
use measure::{measure, which_benchmark};

/// Arguments of the RESP benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct RespBenchArgs {
    /// requests per run (redis-benchmark's -n)
    #[arg(long, default_value = "200000")]
    pub requests: usize,
    /// concurrent connections (redis-benchmark's -c)
    #[arg(long, default_value = "64")]
    pub clients: usize,
    /// pipeline depths, comma-separated (redis-benchmark's -P)
    #[arg(long, default_value = "1,16", value_delimiter = ',')]
    pub pipelines: Vec<usize>,
    /// distinct keys the requests spread over (redis-benchmark's -r)
    #[arg(long, default_value = "10000")]
    pub keys: usize,
    /// rounds: each target runs once per round and pipeline
    #[arg(long, default_value = "2")]
    pub rounds: usize,
    /// the redis-cell module's shared library (libredis_cell.so)
    #[arg(long, env = "TOLLGATE_REDIS_CELL")]
    pub redis_cell: Option<PathBuf>,
    /// the throttlecrab-server binary
    #[arg(long, env = "TOLLGATE_THROTTLECRAB")]
    pub throttlecrab: Option<PathBuf>,
    /// directory to write resp.md and resp.svg to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
}

impl Default for RespBenchArgs {
    fn default() -> RespBenchArgs {
        RespBenchArgs {
            requests: 200_000,
            clients: 64,
            pipelines: vec![1, 16],
            keys: 10_000,
            rounds: 2,
            redis_cell: None,
            throttlecrab: None,
            out: PathBuf::from("bench-report"),
        }
    }
}

/// Starts tollgate's Redis-protocol listener in this process, measures it beside the peers,
/// stops it, writes `resp.md` and `resp.svg` to `args.out`, and returns the report. Progress
/// goes to stderr, a line per run.
pub async fn run_resp(args: &RespBenchArgs) -> Result<RespReport, BenchError> {
    if args.requests == 0 || args.clients == 0 || args.rounds == 0 || args.keys == 0 {
        return Err(BenchError::Args(
            "--requests, --clients, --rounds and --keys must be at least 1".into(),
        ));
    }
    if args.pipelines.is_empty() || args.pipelines.contains(&0) {
        return Err(BenchError::Args(
            "--pipelines must list depths of at least 1".into(),
        ));
    }
    which_benchmark()?;
    let shutdown = CancellationToken::new();
    // The server stops when this returns, measured or not.
    let _stop = shutdown.clone().drop_guard();
    let tollgate = servers::resp(&shutdown).await?;
    let report = measure(args, tollgate).await?;
    report.report().write(&args.out)?;
    Ok(report)
}
