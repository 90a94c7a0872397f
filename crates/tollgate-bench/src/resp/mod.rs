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

mod peers;
mod report;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

pub use report::{RespReport, RespRun, Target};

use crate::BenchError;

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

/// Measures `tollgate` (the address of a tollgate Redis-protocol listener, served on the
/// caller's runtime) beside the peers, writes `resp.md` and `resp.svg` to `args.out`, and
/// returns the report. Progress goes to stderr, a line per run.
pub async fn run_resp(
    args: &RespBenchArgs,
    tollgate: SocketAddr,
) -> Result<RespReport, BenchError> {
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
    let mut report = RespReport {
        requests: args.requests,
        clients: args.clients,
        keys: args.keys,
        rounds: args.rounds,
        pipelines: args.pipelines.clone(),
        runs: Vec::new(),
        missing: Vec::new(),
    };
    // The peers run for the whole benchmark; dropping them stops them.
    let cell = match peers::Peer::redis_cell(args.redis_cell.as_deref()) {
        Ok(peer) => Some(peer),
        Err(why) => {
            eprintln!("tollgate bench resp: MISSING redis-cell: {why}");
            report.missing.push((Target::RedisCell, why));
            None
        }
    };
    let crab = match peers::Peer::throttlecrab(args.throttlecrab.as_deref()) {
        Ok(peer) => Some(peer),
        Err(why) => {
            eprintln!("tollgate bench resp: MISSING throttlecrab: {why}");
            report.missing.push((Target::Throttlecrab, why));
            None
        }
    };
    let ceiling = match peers::Peer::redis() {
        Ok(peer) => Some(peer),
        Err(why) => {
            eprintln!("tollgate bench resp: MISSING the ceiling's redis-server: {why}");
            report.missing.push((Target::Ceiling, why));
            None
        }
    };
    // Each target with the process whose CPU time it spends: tollgate's is this one.
    let mut targets = vec![(Target::Tollgate, tollgate, "self".to_owned())];
    if let Some(cell) = &cell {
        targets.push((Target::RedisCell, cell.addr, cell.pid().to_string()));
    }
    if let Some(crab) = &crab {
        targets.push((Target::Throttlecrab, crab.addr, crab.pid().to_string()));
    }
    if let Some(ceiling) = &ceiling {
        targets.push((Target::Ceiling, ceiling.addr, ceiling.pid().to_string()));
    }
    let total = args.rounds * args.pipelines.len() * targets.len();
    for round in 1..=args.rounds {
        for &pipeline in &args.pipelines {
            // Each round starts one target further on: no target always runs first.
            let start = (round - 1) % targets.len();
            for (target, addr, pid) in targets.iter().cycle().skip(start).take(targets.len()) {
                let before = crate::clock::cpu_of(pid);
                let mut run = benchmark(args, *target, *addr, pipeline, round).await?;
                run.server_cpu_us = before
                    .zip(crate::clock::cpu_of(pid))
                    .map(|(b, a)| (a - b).as_secs_f64() * 1e6 / args.requests as f64);
                eprintln!(
                    "[{}/{total}] round {round} pipeline {pipeline} {}: {:.0} requests/s, p50 {} ms, p99 {} ms, server CPU {:.2} µs/request",
                    report.runs.len() + 1,
                    target.name(),
                    run.requests_per_sec,
                    run.p50_ms,
                    run.p99_ms,
                    run.server_cpu_us.unwrap_or(f64::NAN),
                );
                report.runs.push(run);
            }
        }
    }
    drop((cell, crab, ceiling));
    report.report().write(&args.out)?;
    Ok(report)
}

fn which_benchmark() -> Result<(), BenchError> {
    match Command::new("redis-benchmark").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        _ => Err(BenchError::Args(
            "redis-benchmark is needed: apt-get install redis-tools".into(),
        )),
    }
}

/// One `redis-benchmark` run of `target`'s command at `pipeline`.
async fn benchmark(
    args: &RespBenchArgs,
    target: Target,
    addr: SocketAddr,
    pipeline: usize,
    round: usize,
) -> Result<RespRun, BenchError> {
    let mut command = Command::new("redis-benchmark");
    command
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-c", &args.clients.to_string()])
        .args(["-n", &args.requests.to_string()])
        .args(["-P", &pipeline.to_string()])
        .args(["-r", &args.keys.to_string()])
        .arg("--csv")
        .args(target.command());
    // The servers may share this process's runtime: wait on another thread.
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(|e| BenchError::Args(format!("redis-benchmark's thread: {e}")))??;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(BenchError::Args(format!(
            "redis-benchmark against {} failed: {}{}",
            target.name(),
            text,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    report::parse_csv(&text, target, pipeline, round).ok_or_else(|| {
        BenchError::Args(format!(
            "redis-benchmark against {} answered no result: {text}",
            target.name()
        ))
    })
}
