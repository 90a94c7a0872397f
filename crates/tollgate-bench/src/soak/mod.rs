//! Soak: a long run at a steady rate through a server on Redis, with a fault every period
//! (connections killed, Redis paused, its scripts flushed, in turn), reporting latency per
//! period and what the process holds before and after: resident memory, open file
//! descriptors, live tasks. A leak shows as a trend; a fault as one period's tail.
//!
//! The server runs in this process, started through the server's library on the Redis named,
//! answering Envoy's gRPC API on [`crate::grpc::CONFIG`] (`servers.rs`); `measure.rs` paces the
//! calls and injects the faults, `report/` writes the report.

mod measure;
mod report;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

pub use report::{Held, Period, SoakReport};

use crate::{BenchError, servers};
use measure::measure;

/// Arguments of the soak run.
#[derive(clap::Args, Debug, Clone)]
pub struct SoakArgs {
    /// the Redis the server decides on, and the faults are injected into
    #[arg(long)]
    pub redis: String,
    /// seconds the run lasts
    #[arg(long, default_value = "600")]
    pub seconds: u64,
    /// seconds per period: a fault in the middle of each, a row of the report per period
    #[arg(long, default_value = "60")]
    pub period: u64,
    /// calls per second, steady (a fraction of what the machine can do)
    #[arg(long, default_value = "2000")]
    pub rate: u64,
    /// calls in flight at most
    #[arg(long, default_value = "32")]
    pub concurrency: usize,
    /// directory to write soak.md to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
}

/// Starts a server on `args.redis` in this process (answering Envoy's gRPC API on
/// [`crate::grpc::CONFIG`], its fail policy `deny` so that the faults show), runs the soak
/// against it, stops it, writes `soak.md`, and returns the report. A line per period goes to
/// stderr.
pub async fn run_soak(args: &SoakArgs) -> Result<SoakReport, BenchError> {
    if args.seconds == 0 || args.period == 0 || args.rate == 0 || args.concurrency == 0 {
        return Err(BenchError::Args(
            "--seconds, --period, --rate and --concurrency must be at least 1".into(),
        ));
    }
    let shutdown = CancellationToken::new();
    // The server stops when this returns, measured or not.
    let _stop = shutdown.clone().drop_guard();
    let config = servers::EnvoyConfig::write()?;
    let addr = servers::grpc(&args.redis, &config, None, &shutdown)
        .await?
        .addr;
    let report = measure(args, addr).await?;
    report.report().write(&args.out)?;
    Ok(report)
}
