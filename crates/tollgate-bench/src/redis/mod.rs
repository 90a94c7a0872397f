//! `tollgate-bench redis`: tollgate's Redis store beside the three approaches of a widely read
//! token-bucket benchmark (see `/work/shared/BASELINES.md`), and beside the floor of any batched
//! script (`floor.lua`, which decides nothing), in one run, on one Redis.
//!
//! Cells run one at a time: for each scenario and concurrency, each approach in turn, so that
//! slow drift of the machine hits every approach alike. A cell spawns its workers as tasks on
//! the caller's runtime, each checking one token in a loop for the cell's duration, and counts
//! Redis's own `INFO commandstats` before and after. Then the over-grant test runs per approach
//! that decides (all but the floor).
//! Every key is under `bench:<approach>:<run-id>:` (tollgate's under
//! `tollgate:v3:{bench:tollgate:<run-id>:...}`) and deleted at the end.

mod approach;
mod baseline_lua;
mod baseline_multi;
mod baseline_watch;
mod bucket;
mod cleanup;
mod cluster;
mod floor;
mod measure;
mod report;
mod scenario;
mod tollgate;

use std::path::PathBuf;
use std::time::Duration;

pub use approach::Approach;
pub use cluster::{ClusterCell, NodeCell};
pub use report::{Cell, GOAL_CONCURRENCY, GOAL_REDIS_VS_MULTI, OverGrant, RedisReport};
pub use scenario::Scenario;

use crate::BenchError;
use crate::args::seconds;
use crate::clock::{self};
use approach::Setup;
use measure::{measure, on_cluster, redis_version};

/// Arguments of `tollgate-bench redis`.
#[derive(clap::Args, Debug, Clone)]
pub struct RedisBenchArgs {
    /// Redis to run against (a scratch Redis: the bench flushes its keys under its own prefix only)
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis: String,
    /// seconds per cell
    #[arg(long, default_value = "2")]
    pub seconds: f64,
    /// concurrent workers, one cell per value
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    pub concurrency: Vec<usize>,
    /// directory to write redis.md and redis.svg to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
    /// approaches to measure
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tollgate,lua,multi,watch,floor"
    )]
    pub approaches: Vec<Approach>,
    /// scenarios to measure
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "hot_key,per_user,hot_key_flood"
    )]
    pub scenarios: Vec<Scenario>,
    /// seconds of the over-grant test (burst 10, 10/s, one key); 0 skips it
    #[arg(long, default_value = "3")]
    pub over_grant_seconds: f64,
    /// workers of the over-grant test
    #[arg(long, default_value = "64")]
    pub over_grant_workers: usize,
    /// the bound on one decision of tollgate's store, in milliseconds [default: the store's own]
    #[arg(long)]
    pub store_timeout_ms: Option<u64>,
    /// the nodes of a Redis Cluster (comma-separated URLs): adds tollgate's per_user and
    /// hot_key cells at the goal concurrency on it, with what each master spent
    #[arg(long, value_delimiter = ',')]
    pub cluster: Vec<String>,
}

impl Default for RedisBenchArgs {
    fn default() -> RedisBenchArgs {
        RedisBenchArgs {
            redis: "redis://127.0.0.1:6379".into(),
            seconds: 2.0,
            concurrency: vec![1, 16, 64, 256],
            out: PathBuf::from("bench-report"),
            approaches: Approach::ALL.to_vec(),
            scenarios: Scenario::ALL.to_vec(),
            over_grant_seconds: 3.0,
            over_grant_workers: 64,
            store_timeout_ms: None,
            cluster: Vec::new(),
        }
    }
}

/// Runs every cell and the over-grant test, deletes the run's keys, writes `redis.md` and
/// `redis.svg` to `args.out`, and returns the report. Progress goes to stderr, a line per cell.
pub async fn run_redis(args: &RedisBenchArgs) -> Result<RedisReport, BenchError> {
    let cell_time = seconds(args.seconds, "--seconds")?;
    if args.concurrency.is_empty() || args.concurrency.contains(&0) {
        return Err(BenchError::Args(
            "--concurrency needs values of at least 1".into(),
        ));
    }
    let run_id = format!("{:x}{:04x}", clock::unix_ms(), std::process::id() & 0xffff);
    let timeout = args
        .store_timeout_ms
        .map(|ms| Duration::from_millis(ms.max(1)));
    let setup = Setup::connect(&args.redis, timeout).await?;
    let mut admin = redis::Client::open(args.redis.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let redis_version = redis_version(&mut admin).await?;
    let mut report = RedisReport {
        run_id: run_id.clone(),
        redis_version,
        seconds_per_cell: args.seconds,
        concurrency: args.concurrency.clone(),
        cells: Vec::new(),
        over_grant: Vec::new(),
        cluster: Vec::new(),
    };
    let mut measured = measure(args, cell_time, &setup, &mut admin, &mut report).await;
    if measured.is_ok() && !args.cluster.is_empty() {
        measured = on_cluster(args, cell_time, &mut report).await;
    }
    // Delete the run's keys even when a cell failed, then report the first failure.
    let deleted = cleanup::delete_run(&mut admin, &run_id).await;
    measured?;
    eprintln!("deleted {} keys of run {run_id}", deleted?);
    report.report().write(&args.out)?;
    Ok(report)
}
