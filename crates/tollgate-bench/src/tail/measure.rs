//! The tail benchmark's measurement: each protocol's pair started, then, per condition and
//! round, the bare server and tollgate's in turn at the same offered rate.

use std::time::Duration;

use super::busy::Busy;
use super::targets::Pair;
use super::{Condition, TailBenchArgs, TailReport, TailRun};
use crate::BenchError;

/// Every protocol, condition and round of `args`, `run_time` per run: the report. Progress
/// goes to stderr, a line per run.
pub(super) async fn measure(
    args: &TailBenchArgs,
    run_time: Duration,
) -> Result<TailReport, BenchError> {
    let mut report = TailReport {
        rate: args.rate,
        seconds: args.seconds,
        connections: args.connections,
        rounds: args.rounds,
        slice_ms: args.slice_ms,
        busy_loops: 0,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load: (load_average(), String::new()),
        runs: Vec::new(),
        missing: Vec::new(),
    };
    let slice = Duration::from_millis(args.slice_ms);
    let mut protocols = args.protocols.clone();
    protocols.sort();
    protocols.dedup();
    let mut conditions = args.conditions.clone();
    conditions.sort();
    conditions.dedup();
    let total = protocols.len() * conditions.len() * args.rounds * 2;
    for protocol in protocols {
        let pair = match Pair::start(protocol).await {
            Ok(pair) => pair,
            Err(e) => {
                eprintln!("tollgate-bench tail: NOT MEASURED {protocol}: {e}");
                report.missing.push((protocol, e.to_string()));
                continue;
            }
        };
        // Connections, allocators, the store's cells: not what the first run should measure.
        let warmup = Duration::from_millis(200);
        let warmed = async {
            pair.bare.run(args.connections, args.rate, warmup).await?;
            pair.tollgate.run(args.connections, args.rate, warmup).await
        };
        let measured = match warmed.await {
            Ok(_) => {
                measure_pair(
                    args,
                    &pair,
                    &conditions,
                    run_time,
                    slice,
                    total,
                    &mut report,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let stopped = pair.stop().await;
        measured?;
        stopped?;
    }
    report.load.1 = load_average();
    Ok(report)
}

/// Every condition and round of one pair.
async fn measure_pair(
    args: &TailBenchArgs,
    pair: &Pair,
    conditions: &[Condition],
    run_time: Duration,
    slice: Duration,
    total: usize,
    report: &mut TailReport,
) -> Result<(), BenchError> {
    for &condition in conditions {
        // The busy loops run for the condition's every round, and stop when dropped.
        let busy = match condition {
            Condition::Idle => None,
            Condition::Busy => Some(Busy::start()?),
        };
        if let Some(busy) = &busy {
            report.busy_loops = busy.count();
        }
        for round in 1..=args.rounds {
            // Each round the other server goes first.
            let order = if round % 2 == 1 {
                [false, true]
            } else {
                [true, false]
            };
            for tollgate in order {
                let endpoint = if tollgate { &pair.tollgate } else { &pair.bare };
                let outcome = endpoint.run(args.connections, args.rate, run_time).await?;
                let run = TailRun::of(
                    pair.protocol,
                    condition,
                    round,
                    tollgate,
                    &outcome.samples,
                    outcome.errors,
                    outcome.elapsed,
                    slice,
                );
                eprintln!(
                    "[{}/{total}] {} {condition} round {round} {}: {:.0} answers/s, p50 {:.0} µs, \
                     p99 {:.0} µs, p99.9 {:.0} µs, max {:.0} µs, worst {} ms slice p99 {:.0} µs, \
                     {} errors{}",
                    report.runs.len() + 1,
                    pair.protocol,
                    run.target(),
                    run.per_sec,
                    run.percentiles[0],
                    run.p99(),
                    run.p999(),
                    run.percentiles[5],
                    args.slice_ms,
                    run.slices_p99.iter().copied().fold(f64::NAN, f64::max),
                    run.errors,
                    outcome
                        .first_error
                        .map(|e| format!(" (first: {e})"))
                        .unwrap_or_default()
                );
                report.runs.push(run);
            }
        }
    }
    Ok(())
}

/// `/proc/loadavg`'s first three fields, or `unknown`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
