//! The HTTP benchmark's measurement: a warm-up on every variant, then the rounds, each
//! variant in turn.

use std::time::Duration;

use super::load::{self, Requests};
use super::server::Server;
use super::{HttpBenchArgs, HttpReport, Run};
use crate::BenchError;

/// Loads each of `servers` for `run_time` per round, after `warmup` on each, adding a run per
/// server and round to `report`. Progress goes to stderr, a line per run.
pub(super) async fn measure(
    args: &HttpBenchArgs,
    run_time: Duration,
    warmup: Option<Duration>,
    servers: &[Server],
    report: &mut HttpReport,
) -> Result<(), BenchError> {
    let requests: Vec<Requests> = servers
        .iter()
        .map(|s| Requests::new(s.addr, args.keys, s.variant))
        .collect::<Result<_, _>>()?;
    if let Some(warmup) = warmup {
        // Connections, the allocator, the store's cells for every key: none of that is what
        // the first round should measure.
        for (server, requests) in servers.iter().zip(&requests) {
            load::run(
                server.addr,
                server.tls.as_ref(),
                requests,
                args.connections,
                warmup,
            )
            .await?;
        }
    }
    let total = args.rounds * servers.len();
    for round in 1..=args.rounds {
        // Each round starts one variant further on, so that no variant always runs first (or
        // right after another): a place in the order that favours one would tilt its ratios.
        let start = (round - 1) % servers.len();
        let order = servers.iter().zip(&requests).cycle().skip(start);
        for (server, requests) in order.take(servers.len()) {
            let tally = load::run(
                server.addr,
                server.tls.as_ref(),
                requests,
                args.connections,
                run_time,
            )
            .await?;
            let run = Run {
                variant: server.variant,
                round,
                responses: tally.responses,
                non_200: tally.non_200,
                errors: tally.errors,
                with_ratelimit: tally.with_ratelimit,
                elapsed: tally.elapsed,
                p50: tally.histogram.quantile(0.5).unwrap_or_default(),
                p99: tally.histogram.quantile(0.99).unwrap_or_default(),
                cpu: tally.cpu,
                others_cpu: tally.others_cpu,
            };
            eprintln!(
                "[{}/{total}] round {round} {}: {:.0} requests/s, p50 {:?}, p99 {:?}, CPU {:.1} \
                 µs/request, others' CPU {:?}, {} non-200, {} errors{}",
                report.runs.len() + 1,
                run.variant,
                run.requests_per_sec(),
                run.p50,
                run.p99,
                run.cpu_per_request().unwrap_or(f64::NAN) * 1e6,
                run.others_cpu.unwrap_or_default(),
                run.non_200,
                run.errors,
                tally
                    .first_problem
                    .map(|p| format!(" (first: {p})"))
                    .unwrap_or_default()
            );
            report.runs.push(run);
        }
    }
    Ok(())
}
