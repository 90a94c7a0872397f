//! The memory benchmark's measurement: every cell calibrated, then timed in turn, round by
//! round.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::contenders::Contender;
use super::report::cell_label;
use super::timing;
use super::{MemoryReport, Run, Scenario, THREADS, WARM_FRACTION};
use crate::clock;

/// Calibrates every cell, then times them all in turn, round by round.
pub(super) fn measure(
    scenarios: &[Scenario<'_>],
    warmup: Duration,
    run_time: Duration,
    report: &mut MemoryReport,
) {
    let denied = AtomicU64::new(0);
    let cells: Vec<(&Scenario<'_>, usize, Contender)> = scenarios
        .iter()
        .flat_map(|s| THREADS.map(|threads| (s, threads)))
        .flat_map(|(s, threads)| Contender::ALL.map(|c| (s, threads, c)))
        .collect();
    let mut checks = 0u64;
    let mut sizes = Vec::with_capacity(cells.len());
    for &(scenario, threads, contender) in &cells {
        let (iters, made) = timing::calibrate(warmup, run_time, |n| {
            scenario
                .contenders
                .time(contender, scenario.keys, threads, 0, n, &denied)
        });
        checks = checks.saturating_add(made.saturating_mul(threads as u64));
        sizes.push(iters);
    }
    let total = report.rounds.saturating_mul(cells.len());
    for round in 1..=report.rounds {
        for (&(scenario, threads, contender), &iters) in cells.iter().zip(&sizes) {
            let warm = iters / WARM_FRACTION;
            let (cpu, machine) = (clock::process_cpu(), clock::machine_cpu());
            let elapsed =
                scenario
                    .contenders
                    .time(contender, scenario.keys, threads, warm, iters, &denied);
            let run = Run {
                keys: scenario.keys.len(),
                threads,
                contender,
                round,
                checks: iters.saturating_mul(threads as u64),
                elapsed,
                others_cpu: others_since(cpu, machine),
            };
            checks =
                checks.saturating_add(iters.saturating_add(warm).saturating_mul(threads as u64));
            eprintln!(
                "[{}/{total}] round {round}, {}, {contender}: {:.1} ns per check",
                report.runs.len() + 1,
                cell_label(run.keys, threads),
                run.ns_per_check()
            );
            report.runs.push(run);
        }
    }
    report.checks = checks;
    report.denied = denied.load(Ordering::Relaxed);
}

/// CPU time the rest of the machine used since this process had used `cpu` and the machine
/// `machine`; `None` where either cannot be read.
fn others_since(cpu: Option<Duration>, machine: Option<Duration>) -> Option<Duration> {
    let ours = cpu
        .zip(clock::process_cpu())
        .map(|(a, b)| b.saturating_sub(a))?;
    let all = machine
        .zip(clock::machine_cpu())
        .map(|(a, b)| b.saturating_sub(a))?;
    Some(all.saturating_sub(ours))
}
