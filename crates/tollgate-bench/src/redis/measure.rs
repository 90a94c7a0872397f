//! The Redis benchmark's measurement: the cells one at a time, the over-grant test, the
//! cluster cells.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

use super::approach::{Setup, Worker};
use super::bucket::Limit;
use super::{
    Approach, Cell, GOAL_CONCURRENCY, OverGrant, RedisBenchArgs, RedisReport, Scenario, cluster,
    scenario,
};
use crate::BenchError;
use crate::args::seconds;
use crate::clock::Stopwatch;
use crate::commandstats::CommandStats;
use crate::stats::Histogram;

/// The cluster cells: per_user and hot_key, as asked, at the goal concurrency, each batched per
/// node and per slot.
pub(super) async fn on_cluster(
    args: &RedisBenchArgs,
    cell_time: Duration,
    report: &mut RedisReport,
) -> Result<(), BenchError> {
    let c = report.goal_concurrency().unwrap_or(GOAL_CONCURRENCY);
    for scenario in [Scenario::PerUser, Scenario::HotKey] {
        if !args.scenarios.contains(&scenario) {
            continue;
        }
        for per_node in [true, false] {
            let cell = cluster::run(
                &args.cluster,
                &report.run_id,
                scenario,
                c,
                cell_time,
                per_node,
            )
            .await?;
            eprintln!(
                "cluster: {scenario} c={c} per {}: {:.0} decisions/s, {:.3} calls/decision, \
                 {:.2} Redis µs/decision over {} masters",
                if cell.per_node { "node" } else { "slot" },
                cell.decisions_per_sec(),
                cell.calls_per_decision(),
                cell.redis_micros_per_decision(),
                cell.nodes.len()
            );
            report.cluster.push(cell);
        }
    }
    Ok(())
}

pub(super) async fn measure(
    args: &RedisBenchArgs,
    cell_time: Duration,
    setup: &Setup,
    admin: &mut MultiplexedConnection,
    report: &mut RedisReport,
) -> Result<(), BenchError> {
    let over_grant = args.over_grant_seconds > 0.0;
    let deciding: Vec<Approach> = args
        .approaches
        .iter()
        .copied()
        .filter(|a| a.decides())
        .collect();
    let total = args.scenarios.len() * args.concurrency.len() * args.approaches.len()
        + if over_grant { deciding.len() } else { 0 };
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
    for approach in deciding {
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

pub(super) async fn redis_version(admin: &mut MultiplexedConnection) -> Result<String, BenchError> {
    let info: String = redis::cmd("INFO").arg("server").query_async(admin).await?;
    info.lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))
        .map(str::to_owned)
        .ok_or_else(|| BenchError::Reply("INFO server has no redis_version".into()))
}
