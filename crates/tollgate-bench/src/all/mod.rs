//! `tollgate-bench all`: every benchmark in one run, on throwaway servers it starts and stops
//! itself, then one index (`index.md`) that describes the machine, links every report, and
//! lists every goal of every benchmark, met or not.
//!
//! Each benchmark runs as its own command line would (`tollgate-bench redis --redis URL ...`),
//! parsed by the same parser, so the index can print the command that reproduces each one
//! ([`steps`](self)). A benchmark that fails is reported in the index, and the run goes on; the
//! command exits non-zero at the end if any failed.

mod index;
mod machine;
mod progress;
mod start;
mod steps;
mod stores;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};
use tokio::time::Instant;
use tollgate_testkit::{Reply, TestPostgres, TestRedis, TestRedisCluster, redis_cmd};

use crate::benchmark::{OneBenchmark, run_one};
use crate::{BenchError, Report};
use machine::Machine;
use progress::Progress;
pub(crate) use steps::quick_args;
use steps::{Step, steps};
use stores::Store;

/// `tollgate-bench all`.
#[derive(Debug, Clone, Args)]
pub struct AllArgs {
    /// A smoke run: every benchmark cut short (about a minute and a half in all); its figures
    /// are not for quoting.
    #[arg(long)]
    pub quick: bool,
    /// Where every report and the index are written.
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
    /// A Redis to use instead of starting one (the benchmarks write their own keys into it).
    #[arg(long)]
    pub redis: Option<String>,
    /// A PostgreSQL to use instead of starting one (the benchmarks make their own schemas).
    #[arg(long)]
    pub postgres: Option<String>,
    /// The nodes of a Redis Cluster to use instead of starting one of three masters
    /// (comma-separated URLs).
    #[arg(long, value_delimiter = ',')]
    pub cluster: Vec<String>,
    /// Only these benchmarks, comma-separated (default: every one), and only the stores they
    /// take are started.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<BenchName>,
}

/// The benchmarks `tollgate-bench all` runs, in the order it runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchName {
    /// `tollgate-bench memory`.
    Memory,
    /// `tollgate-bench redis`.
    Redis,
    /// `tollgate-bench postgres`.
    Postgres,
    /// `tollgate-bench http`.
    Http,
    /// `tollgate-bench resp`.
    Resp,
    /// `tollgate-bench grpc`.
    Grpc,
    /// `tollgate-bench soak`.
    Soak,
    /// `tollgate-bench tail`.
    Tail,
    /// `tollgate-bench scale`.
    Scale,
    /// `tollgate-bench failover`.
    Failover,
}

/// How one step ended.
struct Done {
    step: Step,
    took: Duration,
    report: Result<Report, String>,
}

/// Runs every benchmark (or those of `--only`), writes the index and prints it.
pub(crate) async fn run(args: AllArgs) -> Result<(), BenchError> {
    let machine = Machine::read();
    let started = Instant::now();
    // The throwaway servers live until the end of the run; a URL given is used as it is, and a
    // server no benchmark of the run needs is not started (its URL is left empty: no step is
    // handed it).
    let start = start::to_start(&args);
    let (redis_url, _redis) = match &args.redis {
        Some(url) => (url.clone(), None),
        None if !start.contains(&Store::Redis) => (String::new(), None),
        None => {
            let redis = TestRedis::start().map_err(unavailable("Redis"))?;
            (redis.url().to_owned(), Some(redis))
        }
    };
    let (postgres_url, _postgres) = match &args.postgres {
        Some(url) => (url.clone(), None),
        None if !start.contains(&Store::Postgres) => (String::new(), None),
        None => {
            // Commits wait for the disk, as in production: the PostgreSQL benchmark compares
            // what each approach's commits cost.
            let postgres = TestPostgres::start_durable().map_err(unavailable("PostgreSQL"))?;
            (postgres.url().to_owned(), Some(postgres))
        }
    };
    let (cluster_urls, _cluster) = if !args.cluster.is_empty() {
        (args.cluster.join(","), None)
    } else if start.contains(&Store::Cluster) {
        let cluster = TestRedisCluster::start(3).map_err(unavailable("Redis Cluster"))?;
        (cluster.urls().join(","), Some(cluster))
    } else {
        (String::new(), None)
    };
    let steps = steps(&args, &redis_url, &postgres_url, &cluster_urls);
    let progress = Progress::start(&steps);
    let mut done = Vec::new();
    for (i, step) in steps.into_iter().enumerate() {
        progress.at(i);
        let began = Instant::now();
        let report = run_step(&step).await.map_err(|e| e.to_string());
        if let Err(e) = &report {
            progress.say(&format!("{}: failed: {e}", step.args[0]));
        }
        done.push(Done {
            took: began.elapsed(),
            step,
            report,
        });
    }
    progress.finish();
    let versions = (
        redis_version(&redis_url).await,
        postgres_version(&postgres_url).await,
    );
    let index = index::index(&args, &machine, &versions, &done, started.elapsed());
    index.write(&args.out)?;
    println!("{}", index.to_markdown());
    eprintln!(
        "tollgate-bench all: reports and their index written to {}",
        args.out.join("index.md").display()
    );
    let failed: Vec<&str> = done
        .iter()
        .filter(|d| d.report.is_err())
        .map(|d| d.step.args[0].as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Args(format!(
            "these benchmarks failed: {}",
            failed.join(", ")
        )))
    }
}

fn unavailable(what: &'static str) -> impl Fn(tollgate_testkit::TestkitError) -> BenchError {
    move |e| BenchError::Args(format!("could not start a throwaway {what}: {e}"))
}

/// Runs one step through the command-line parser, as `tollgate-bench ARGS` would.
async fn run_step(step: &Step) -> Result<Report, BenchError> {
    let argv = std::iter::once("tollgate-bench").chain(step.args.iter().map(String::as_str));
    let cli = OneBenchmark::try_parse_from(argv).map_err(|e| BenchError::Args(e.to_string()))?;
    let (report, _) = run_one(cli.bench).await?;
    Ok(report)
}

/// `redis_version` from `INFO server`.
async fn redis_version(url: &str) -> String {
    if url.is_empty() {
        return "not used".into();
    }
    let url = url.to_owned();
    let info = tokio::task::spawn_blocking(move || redis_cmd(url.as_str(), &[b"INFO", b"server"]))
        .await
        .ok()
        .and_then(Result::ok);
    let Some(Reply::Bulk(text)) = info else {
        return "unknown".into();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map_or_else(|| "unknown".into(), |v| v.trim().to_owned())
}

/// `server_version`.
async fn postgres_version(url: &str) -> String {
    if url.is_empty() {
        return "not used".into();
    }
    let Ok((client, connection)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await else {
        return "unknown".into();
    };
    let connection = tokio::spawn(connection);
    let version = client
        .query_one("SHOW server_version", &[])
        .await
        .ok()
        .and_then(|row| row.try_get::<_, String>(0).ok())
        .unwrap_or_else(|| "unknown".into());
    drop(client);
    let _ = connection.await;
    version
}
