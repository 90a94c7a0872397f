//! `tollgate-bench postgres`: tollgate's PostgreSQL store beside the per-call PL/pgSQL function
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
mod limit;
mod measure;
mod outcome;
mod race;
pub mod report;
mod rng;
mod rounding;
mod scenario;
mod timed;
mod tollgate;

use std::path::PathBuf;

pub use ::tollgate::store::postgres::Isolation;
pub use approach::Approach;
pub use race::Race;
pub use report::{Cell, OverGrant, PostgresReport, Rounding};
pub use scenario::Scenario;

use crate::BenchError;
use crate::args::seconds;
use crate::clock;
use database::Database;
use measure::measure;

/// Arguments of `tollgate-bench postgres`.
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
        default_value = "read-committed,serializable",
        value_parser = isolation_parser()
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

/// Both isolation levels, in report order.
pub const ISOLATIONS: [Isolation; 2] = [Isolation::ReadCommitted, Isolation::Serializable];

/// How the arguments and the report name an isolation level of tollgate's store, which the
/// function's cells run at too.
pub trait IsolationNames {
    /// The name used in arguments: `read-committed`, `serializable`.
    fn name(self) -> &'static str;
    /// The level as SQL spells it (and as the report shows it).
    fn sql(self) -> &'static str;
}

impl IsolationNames for Isolation {
    fn name(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read-committed",
            Isolation::Serializable => "serializable",
            // `Isolation` may gain levels; the bench measures the two of `ISOLATIONS`.
            _ => "other",
        }
    }

    fn sql(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "READ COMMITTED",
            Isolation::Serializable => "SERIALIZABLE",
            _ => "another level",
        }
    }
}

/// `--isolation`'s values, by [`IsolationNames::name`].
fn isolation_parser() -> impl clap::builder::TypedValueParser<Value = Isolation> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(ISOLATIONS.map(IsolationNames::name)).map(|name| {
        ISOLATIONS
            .into_iter()
            .find(|level| level.name() == name)
            .unwrap_or_default()
    })
}

impl Default for PostgresBenchArgs {
    fn default() -> PostgresBenchArgs {
        PostgresBenchArgs {
            postgres: "postgres://postgres@127.0.0.1:5432/test".into(),
            seconds: 2.0,
            connections: vec![1, 8, 32],
            isolation: ISOLATIONS.to_vec(),
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
