//! `tollgate bench postgres`: tollgate's PostgreSQL store beside the per-call PL/pgSQL function
//! of a widely read PostgreSQL / YugabyteDB write-up (see `/work/shared/BASELINES.md`), in one
//! run, on one server.
//!
//! A run works in a schema of its own, `tollgate_bench_<run id>` (`database.rs`), dropped at the
//! end: the function's table and tollgate's table start empty. First the function's two flaws
//! are shown on fresh keys — concurrent first calls (`race.rs`) and refill rounded to whole
//! tokens (`rounding.rs`) — with tollgate beside. Then every many_keys key is created in both
//! tables, and the cells run one at a time: for each scenario, isolation and connection count,
//! each approach in turn, so that slow drift of the machine hits both alike (`timed.rs`).
//! Beside tollgate as it ships runs `tollgate-sync`, the same store waiting for each commit's
//! flush as the function does; the goals judge `tollgate` alone. Last, the over-grant test at
//! each isolation.

mod approach;
mod database;
mod function;
mod host;
mod isolation;
mod limit;
mod outcome;
mod race;
pub mod report;
mod rng;
mod rounding;
mod scenario;
mod timed;
mod tollgate;

use std::path::PathBuf;
use std::time::Duration;

pub use approach::Approach;
pub use isolation::Isolation;
pub use report::{Cell, OverGrant, PostgresReport, Race, Rounding};
pub use scenario::Scenario;

use crate::BenchError;
use crate::args::seconds;
use crate::clock;
use approach::Crew;
use database::{Database, Target};
use limit::{ALLOW_ALL, SMALL};
use timed::Measured;

/// Arguments of `tollgate bench postgres`.
#[derive(clap::Args, Debug, Clone)]
pub struct PostgresBenchArgs {
    /// PostgreSQL to run against (the bench works in a schema of its own and drops it at the end)
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
    pub postgres: String,
    /// seconds per cell
    #[arg(long, default_value = "2")]
    pub seconds: f64,
    /// connections (and as many concurrent workers), one cell per value
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub connections: Vec<usize>,
    /// isolation levels, one cell per value
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "read-committed,serializable"
    )]
    pub isolation: Vec<Isolation>,
    /// scenarios to measure
    #[arg(long, value_delimiter = ',', default_value = "many_keys,hot_key")]
    pub scenarios: Vec<Scenario>,
    /// keys of the many_keys scenario, all created before the cells in both approaches' tables
    #[arg(long, default_value = "100000")]
    pub keys: usize,
    /// directory to write postgres.md and postgres.svg to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
    /// seconds of the over-grant test (burst 10, 10/s, one key); 0 skips it
    #[arg(long, default_value = "3")]
    pub over_grant_seconds: f64,
    /// workers of the over-grant test
    #[arg(long, default_value = "64")]
    pub over_grant_workers: usize,
    /// make tollgate's table UNLOGGED (the server's --postgres-unlogged): no WAL, so its commits
    /// wait for no flush, and a crash empties it; the function's table stays as published
    #[arg(long)]
    pub tollgate_unlogged: bool,
}

impl Default for PostgresBenchArgs {
    fn default() -> PostgresBenchArgs {
        PostgresBenchArgs {
            postgres: "postgres://postgres@127.0.0.1:5432/test".into(),
            seconds: 2.0,
            connections: vec![1, 8, 32],
            isolation: Isolation::ALL.to_vec(),
            scenarios: Scenario::ALL.to_vec(),
            keys: 100_000,
            out: PathBuf::from("bench-report"),
            over_grant_seconds: 3.0,
            over_grant_workers: 64,
            tollgate_unlogged: false,
        }
    }
}

/// Runs the flaws, every cell and the over-grant test, drops the run's schema, writes
/// `postgres.md` and `postgres.svg` to `args.out`, and returns the report. Progress goes to
/// stderr, a line per measurement.
pub async fn run_postgres(args: &PostgresBenchArgs) -> Result<PostgresReport, BenchError> {
    let cell_time = seconds(args.seconds, "--seconds")?;
    if args.connections.is_empty() || args.connections.contains(&0) {
        return Err(BenchError::Args(
            "--connections needs values of at least 1".into(),
        ));
    }
    if args.isolation.is_empty() {
        return Err(BenchError::Args("--isolation needs a level".into()));
    }
    if args.keys == 0 {
        return Err(BenchError::Args("--keys must be at least 1".into()));
    }
    if args.over_grant_seconds > 0.0 && args.over_grant_workers == 0 {
        return Err(BenchError::Args(
            "--over-grant-workers must be at least 1".into(),
        ));
    }
    let host_at_start = host::describe();
    let run_id = format!("{:x}{:04x}", clock::unix_ms(), std::process::id() & 0xffff);
    let db = Database::connect(&args.postgres, &run_id, args.tollgate_unlogged).await?;
    let server = db.server().await?;
    let mut report = PostgresReport {
        run_id: run_id.clone(),
        server_version: server.version,
        durability: format!(
            "fsync {}, synchronous_commit {}{}",
            server.fsync,
            server.synchronous_commit,
            if args.tollgate_unlogged {
                "; tollgate's table UNLOGGED, the function's logged"
            } else {
                ""
            }
        ),
        host_at_start,
        host_at_end: String::new(),
        seconds_per_cell: args.seconds,
        connections: args.connections.clone(),
        isolations: args.isolation.clone(),
        keys: args.keys,
        cells: Vec::new(),
        over_grant: Vec::new(),
        race: Vec::new(),
        rounding: Vec::new(),
    };
    db.create().await?;
    let measured = measure(args, cell_time, &db, &mut report).await;
    // Drop the run's schema even when a measurement failed, then report the first failure.
    let dropped = db.drop_schema().await;
    report.host_at_end = host::describe();
    measured?;
    dropped?;
    eprintln!("dropped schema {}", db.target().schema);
    report.report().write(&args.out)?;
    Ok(report)
}

async fn measure(
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
async fn precreate(args: &PostgresBenchArgs, db: &Database) -> Result<(), BenchError> {
    let target: &Target = db.target();
    let watch = crate::clock::Stopwatch::start();
    let rows = db.precreate_function_keys(args.keys, ALLOW_ALL).await?;
    let mut keys: Vec<String> = scenario::key_space(args.keys).to_vec();
    keys.push(scenario::HOT.into());
    tollgate::TollgatePg::precreate(target, &keys, ALLOW_ALL.policy()?).await?;
    db.analyze().await?;
    eprintln!(
        "created {rows} rows in each table in {:.1} s",
        watch.elapsed().as_secs_f64()
    );
    Ok(())
}
