//! `tollgate bench redis`: tollgate's Redis store beside the three approaches of a widely read
//! token-bucket benchmark (see `/work/shared/BASELINES.md`), in one run, on one Redis.
//!
//! Cells run one at a time: for each scenario and concurrency, each approach in turn, so that
//! slow drift of the machine hits every approach alike. A cell spawns its workers as tasks on
//! the caller's runtime, each checking one token in a loop for the cell's duration, and counts
//! Redis's own `INFO commandstats` before and after. Then the over-grant test runs per approach.
//! Every key is under `bench:<approach>:<run-id>:` (tollgate's under
//! `tollgate:v2:{bench:tollgate:<run-id>:...}`) and deleted at the end.

mod approach;
mod baseline_lua;
mod baseline_multi;
mod baseline_watch;
mod bucket;
mod cleanup;
mod cluster;
mod document;
mod report;
mod scenario;
mod tollgate;

use std::path::PathBuf;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

pub use approach::Approach;
pub use cluster::{ClusterCell, NodeCell};
pub use report::{Cell, GOAL_CONCURRENCY, OverGrant, RedisReport};
pub use scenario::Scenario;

use crate::BenchError;
use crate::args::seconds;
use crate::clock::{self, Stopwatch};
use crate::commandstats::CommandStats;
use crate::stats::Histogram;
use approach::{Setup, Worker};
use bucket::Limit;

/// Arguments of `tollgate bench redis`.
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
        default_value = "tollgate,lua,multi,watch"
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

/// The cluster cells: per_user and hot_key, as asked, at the goal concurrency.
async fn on_cluster(
    args: &RedisBenchArgs,
    cell_time: Duration,
    report: &mut RedisReport,
) -> Result<(), BenchError> {
    let c = report.goal_concurrency().unwrap_or(GOAL_CONCURRENCY);
    for scenario in [Scenario::PerUser, Scenario::HotKey] {
        if !args.scenarios.contains(&scenario) {
            continue;
        }
        let cell = cluster::run(&args.cluster, &report.run_id, scenario, c, cell_time).await?;
        eprintln!(
            "cluster: {scenario} c={c}: {:.0} decisions/s, {:.3} calls/decision, {:.2} Redis \
             µs/decision over {} masters",
            cell.decisions_per_sec(),
            cell.calls_per_decision(),
            cell.redis_micros_per_decision(),
            cell.nodes.len()
        );
        report.cluster.push(cell);
    }
    Ok(())
}

async fn measure(
    args: &RedisBenchArgs,
    cell_time: Duration,
    setup: &Setup,
    admin: &mut MultiplexedConnection,
    report: &mut RedisReport,
) -> Result<(), BenchError> {
    let over_grant = args.over_grant_seconds > 0.0;
    let total = args.scenarios.len() * args.concurrency.len() * args.approaches.len()
        + if over_grant { args.approaches.len() } else { 0 };
    let mut done = 0;
    for &scenario in &args.scenarios {
        for &c in &args.concurrency {
            for &approach in &args.approaches {
                let prefix = format!("bench:{approach}:{}:{scenario}:c{c}", report.run_id);
                let keys = scenario.keys(&prefix, c);
                let m = run_cell(setup, admin, approach, keys, scenario.limit(), cell_time).await?;
                let cell = Cell {
                    scenario,
                    approach,
                    concurrency: c,
                    decisions: m.tally.decisions,
                    allowed: m.tally.allowed,
                    errors: m.tally.errors,
                    elapsed: m.elapsed,
                    p50: m.tally.histogram.quantile(0.5).unwrap_or_default(),
                    p99: m.tally.histogram.quantile(0.99).unwrap_or_default(),
                    client_calls: m.client_calls,
                    redis_usec: m.redis_usec,
                    commands: m.commands,
                };
                done += 1;
                eprintln!(
                    "[{done}/{total}] {scenario} c={c} {approach}: {:.0} decisions/s, p50 {:?}, \
                     p99 {:?}, {:.3} calls/decision, {} allowed, {} errors{}",
                    cell.decisions_per_sec(),
                    cell.p50,
                    cell.p99,
                    cell.calls_per_decision(),
                    cell.allowed,
                    cell.errors,
                    first_error(&m.tally)
                );
                report.cells.push(cell);
            }
        }
    }
    if !over_grant {
        return Ok(());
    }
    let time = seconds(args.over_grant_seconds, "--over-grant-seconds")?;
    for &approach in &args.approaches {
        let key = format!("bench:{approach}:{}:over_grant:hot", report.run_id);
        let keys = vec![key; args.over_grant_workers.max(1)];
        let m = run_cell(setup, admin, approach, keys, scenario::SMALL, time).await?;
        let o = OverGrant {
            approach,
            workers: args.over_grant_workers.max(1),
            seconds: args.over_grant_seconds,
            burst: scenario::SMALL.burst,
            rate: scenario::SMALL.rate,
            decisions: m.tally.decisions,
            allowed: m.tally.allowed,
            errors: m.tally.errors,
        };
        done += 1;
        eprintln!(
            "[{done}/{total}] over_grant {approach}: {} allowed of at most {}, {} errors{}",
            o.allowed,
            o.max_allowed(),
            o.errors,
            first_error(&m.tally)
        );
        report.over_grant.push(o);
    }
    Ok(())
}

/// What one cell measured.
struct Measured {
    tally: Tally,
    elapsed: Duration,
    client_calls: u64,
    redis_usec: u64,
    commands: u64,
}

async fn run_cell(
    setup: &Setup,
    admin: &mut MultiplexedConnection,
    approach: Approach,
    keys: Vec<String>,
    limit: Limit,
    duration: Duration,
) -> Result<Measured, BenchError> {
    let workers = setup.workers(approach, keys, limit).await?;
    let before = CommandStats::fetch(admin).await?;
    let start = Stopwatch::start();
    let mut tasks = JoinSet::new();
    for worker in workers {
        tasks.spawn(drive(worker, start, duration));
    }
    let mut tally = Tally::default();
    while let Some(worker) = tasks.join_next().await {
        tally.merge(worker?);
    }
    let elapsed = start.elapsed();
    let delta = CommandStats::fetch(admin).await?.since(&before)?;
    Ok(Measured {
        tally,
        elapsed,
        client_calls: delta.client_calls(),
        redis_usec: delta.client_usec(),
        commands: delta.commands(),
    })
}

/// One worker's counts.
#[derive(Default)]
struct Tally {
    histogram: Histogram,
    decisions: u64,
    allowed: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.histogram.merge(&other.histogram);
        self.decisions += other.decisions;
        self.allowed += other.allowed;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
    }
}

/// Checks in a loop until `duration` has passed since `start`; no check starts after that.
async fn drive(mut worker: Worker, start: Stopwatch, duration: Duration) -> Tally {
    let mut tally = Tally::default();
    loop {
        let call = Stopwatch::start();
        let outcome = worker.check().await;
        tally.histogram.record(call.elapsed());
        match outcome {
            Ok(allowed) => {
                tally.decisions += 1;
                tally.allowed += u64::from(allowed);
            }
            Err(e) => {
                tally.errors += 1;
                if tally.first_error.is_none() {
                    tally.first_error = Some(e.to_string());
                }
            }
        }
        if start.elapsed() >= duration {
            return tally;
        }
        // A check answered locally (tollgate's deny cache) completes without yielding; spending
        // cooperative budget lets the runtime interleave the workers, as real requests would.
        tokio::task::coop::consume_budget().await;
    }
}

fn first_error(tally: &Tally) -> String {
    tally
        .first_error
        .as_ref()
        .map(|e| format!(" (first: {e})"))
        .unwrap_or_default()
}

async fn redis_version(admin: &mut MultiplexedConnection) -> Result<String, BenchError> {
    let info: String = redis::cmd("INFO").arg("server").query_async(admin).await?;
    info.lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))
        .map(str::to_owned)
        .ok_or_else(|| BenchError::Reply("INFO server has no redis_version".into()))
}
