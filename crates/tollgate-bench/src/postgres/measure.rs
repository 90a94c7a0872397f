//! The PostgreSQL benchmark's measurement: the flaws on fresh keys, every many_keys key
//! created in both tables, the cells one at a time, the over-grant test at each isolation.

use std::time::Duration;

use super::approach::Crew;
use super::database::{Database, Target};
use super::limit::{ALLOW_ALL, SMALL};
use super::timed::Measured;
use super::tollgate::TollgatePg;
use super::{
    Approach, Cell, IsolationNames, OverGrant, PostgresBenchArgs, PostgresReport, race, rounding,
    scenario, timed,
};
use crate::BenchError;
use crate::args::seconds;

pub(super) async fn measure(
    args: &PostgresBenchArgs,
    cell_time: Duration,
    db: &Database,
    report: &mut PostgresReport,
) -> Result<(), BenchError> {
    let target = db.target();
    // The flaws first, while both tables are empty.
    for &isolation in &args.isolation {
        for approach in Approach::COMPARED {
            report
                .race
                .push(race::run(target, approach, isolation).await?);
        }
    }
    // Both schedules at once, each on its own table: they take 3 s of real time each.
    let function = tokio::spawn({
        let target = target.clone();
        async move { rounding::run(&target, Approach::Function).await }
    });
    let tollgate = rounding::run(target, Approach::Tollgate).await;
    report.rounding.push(function.await??);
    report.rounding.push(tollgate?);

    precreate(args, db).await?;

    let over_grant = args.over_grant_seconds > 0.0;
    let total =
        args.scenarios.len() * args.isolation.len() * args.connections.len() * Approach::ALL.len()
            + if over_grant {
                args.isolation.len() * Approach::COMPARED.len()
            } else {
                0
            };
    let mut done = 0;
    let space = scenario::key_space(args.keys);
    for &scenario in &args.scenarios {
        for &isolation in &args.isolation {
            for &c in &args.connections {
                for approach in Approach::ALL {
                    let mut crew = Crew::hire(approach, target, isolation, c, c, ALLOW_ALL).await?;
                    // The same seeds for both approaches: their workers ask for the same keys.
                    let keys = (0..c)
                        .map(|w| scenario.keys(&space, 0x5eed ^ c as u64, w))
                        .collect();
                    let Measured {
                        tally,
                        elapsed,
                        cpu,
                    } = timed::run(&mut crew, keys, cell_time).await?;
                    drop(crew);
                    let cell = Cell {
                        scenario,
                        isolation,
                        approach,
                        connections: c,
                        decisions: tally.decisions,
                        allowed: tally.allowed,
                        errors: tally.errors,
                        duplicate_key: tally.duplicate_key,
                        serialization: tally.serialization,
                        timeouts: tally.timeouts,
                        gave_up: tally.gave_up,
                        retried: tally.retried,
                        statements: tally.statements,
                        elapsed,
                        client_cpu: cpu,
                        p50: tally.histogram.quantile(0.5).unwrap_or_default(),
                        p99: tally.histogram.quantile(0.99).unwrap_or_default(),
                    };
                    done += 1;
                    let isolation = isolation.sql();
                    eprintln!(
                        "[{done}/{total}] {scenario} {isolation} c={c} {approach}: {:.0} \
                         decisions/s, p50 {:?}, p99 {:?}, {} allowed, {} errors, {} retried, \
                         {:.3} statements/call, client CPU {:.0} µs/call{}",
                        cell.decisions_per_sec(),
                        cell.p50,
                        cell.p99,
                        cell.allowed,
                        cell.errors,
                        cell.retried,
                        cell.statements_per_call(),
                        cell.client_cpu_per_call().unwrap_or(f64::NAN),
                        tally.first_error_note()
                    );
                    report.cells.push(cell);
                }
            }
        }
    }
    if !over_grant {
        return Ok(());
    }
    let time = seconds(args.over_grant_seconds, "--over-grant-seconds")?;
    let workers = args.over_grant_workers;
    // tollgate's store gets the most connections any cell gave it; the function a connection
    // per worker, as in the cells.
    let store_connections = args.connections.iter().copied().max().unwrap_or(1);
    for &isolation in &args.isolation {
        for approach in Approach::COMPARED {
            let connections = match approach {
                Approach::Function => workers,
                Approach::Tollgate | Approach::TollgateSync => store_connections,
            };
            let mut crew =
                Crew::hire(approach, target, isolation, workers, connections, SMALL).await?;
            let key = format!("over_grant:{}", isolation.name());
            let keys = (0..workers)
                .map(|_| scenario::Keys::One(key.clone()))
                .collect();
            let Measured { tally, .. } = timed::run(&mut crew, keys, time).await?;
            drop(crew);
            let o = OverGrant {
                isolation,
                approach,
                workers,
                connections,
                seconds: args.over_grant_seconds,
                capacity: SMALL.capacity(),
                rate: SMALL.rate(),
                decisions: tally.decisions,
                allowed: tally.allowed,
                errors: tally.errors,
                timeouts: tally.timeouts,
                gave_up: tally.gave_up,
                retried: tally.retried,
            };
            done += 1;
            let isolation = isolation.sql();
            eprintln!(
                "[{done}/{total}] over_grant {isolation} {approach}: {} allowed of at most {}, \
                 {} errors, {} retried{}",
                o.allowed,
                o.max_allowed(),
                o.errors,
                o.retried,
                tally.first_error_note()
            );
            report.over_grant.push(o);
        }
    }
    Ok(())
}

/// Creates the rows of the many_keys keys and the hot key in both tables, full buckets of the
/// allow-all limit, so that the cells measure calls on existing keys in both approaches.
pub(super) async fn precreate(args: &PostgresBenchArgs, db: &Database) -> Result<(), BenchError> {
    let target: &Target = db.target();
    let watch = crate::clock::Stopwatch::start();
    let rows = db.precreate_function_keys(args.keys, ALLOW_ALL).await?;
    let mut keys: Vec<String> = scenario::key_space(args.keys).to_vec();
    keys.push(scenario::HOT.into());
    TollgatePg::precreate(target, &keys, ALLOW_ALL.policy()?).await?;
    db.analyze().await?;
    eprintln!(
        "created {rows} rows in each table in {:.1} s",
        watch.elapsed().as_secs_f64()
    );
    Ok(())
}
