//! The RESP benchmark's measurement: the peers started, then `redis-benchmark` against each
//! target in turn, each round and pipeline.

use std::net::SocketAddr;
use std::process::Command;

use super::{RespBenchArgs, RespReport, RespRun, Target, peers, report};
use crate::BenchError;

/// Measures `tollgate` (the address of a tollgate Redis-protocol listener, served on the
/// caller's runtime) beside the peers it starts: the report. Progress goes to stderr, a line
/// per run.
pub(super) async fn measure(
    args: &RespBenchArgs,
    tollgate: SocketAddr,
) -> Result<RespReport, BenchError> {
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
            eprintln!("tollgate-bench resp: MISSING redis-cell: {why}");
            report.missing.push((Target::RedisCell, why));
            None
        }
    };
    let crab = match peers::Peer::throttlecrab(args.throttlecrab.as_deref()) {
        Ok(peer) => Some(peer),
        Err(why) => {
            eprintln!("tollgate-bench resp: MISSING throttlecrab: {why}");
            report.missing.push((Target::Throttlecrab, why));
            None
        }
    };
    let ceiling = match peers::Peer::redis() {
        Ok(peer) => Some(peer),
        Err(why) => {
            eprintln!("tollgate-bench resp: MISSING the ceiling's redis-server: {why}");
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
    Ok(report)
}

pub(super) fn which_benchmark() -> Result<(), BenchError> {
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
