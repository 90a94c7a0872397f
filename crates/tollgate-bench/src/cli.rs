//! The command line, `tollgate-bench <benchmark> [ARGS]`: one subcommand per benchmark, each
//! with that benchmark's arguments, and `all`, every one of them in one run ([`crate::all`]).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::all::AllArgs;
use crate::{BenchError, Report};

/// tollgate-bench: tollgate's stores and servers measured beside the approaches teams publish
/// and copy, each run written up as a Markdown report with SVG charts.
#[derive(Debug, Parser)]
#[command(name = "tollgate-bench", version)]
pub struct Cli {
    /// The benchmark to run.
    #[command(subcommand)]
    pub bench: Bench,
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// The memory store beside `governor`: ns per check on a hot key, 100k and 1M keys, at 1
    /// and 2 threads, and bytes per key.
    Memory(crate::MemoryBenchArgs),
    /// The Redis store beside a Lua script, several commands, and WATCH/MULTI.
    Redis(crate::RedisBenchArgs),
    /// The PostgreSQL store beside the published PL/pgSQL function.
    Postgres(crate::PostgresBenchArgs),
    /// The tower middleware (memory store) and the server's own router beside a bare axum
    /// handler.
    Http(crate::HttpBenchArgs),
    /// `CL.THROTTLE` on tollgate's Redis-protocol port beside redis-cell and throttlecrab.
    Resp(crate::RespBenchArgs),
    /// Envoy's `ShouldRateLimit` on tollgate's gRPC listener, memory store and Redis.
    Grpc(crate::GrpcBenchArgs),
    /// A long run on Redis with a fault every period: latency per period, and memory, file
    /// descriptors and tasks before and after.
    Soak(crate::SoakArgs),
    /// The servers' tail at a fixed rate (HTTP, gRPC, RESP), each beside a bare server of its
    /// protocol, idle and under CPU contention: p99, p99.9 and p99 per slice of time.
    Tail(crate::TailBenchArgs),
    /// Several server processes on one Redis, a Redis Cluster and PostgreSQL: a hot key with and
    /// without leases, at its limit, and many users batched per node and per slot.
    Scale(crate::ScaleBenchArgs),
    /// Every benchmark in one run, on throwaway servers it starts and stops itself, with an
    /// index (`index.md`) of the machine and of every goal, met or not.
    All(AllArgs),
}

impl Cli {
    /// Reads `argv` (the program's name first). `--quick`, which `all` has, also cuts one
    /// benchmark short, with the arguments `all --quick` gives it, but for those given here.
    pub fn parse_from_args<I, T>(argv: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
        let mut command = Cli::command();
        let names: Vec<String> = command
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .filter(|name| name != "all")
            .collect();
        for name in &names {
            command = command.mut_subcommand(name, |c| {
                c.arg(
                    Arg::new("quick")
                        .long("quick")
                        .action(ArgAction::SetTrue)
                        .help("A smoke run: cut short as `all --quick` runs it, but for the arguments given"),
                )
            });
        }
        let matches = command.clone().try_get_matches_from(&argv)?;
        let Some((name, given)) = matches.subcommand() else {
            return Cli::from_arg_matches(&matches);
        };
        if name == "all" || !given.get_flag("quick") {
            return Cli::from_arg_matches(&matches);
        }
        let mut argv: Vec<OsString> = argv.into_iter().filter(|a| a != "--quick").collect();
        for pair in crate::all::quick_args(name).chunks(2) {
            let [flag, value] = pair else { continue };
            let id = flag.trim_start_matches("--").replace('-', "_");
            if given.value_source(&id) != Some(ValueSource::CommandLine) {
                argv.extend([OsString::from(*flag), OsString::from(*value)]);
            }
        }
        Cli::from_arg_matches(&command.try_get_matches_from(argv)?)
    }
}

/// Runs the benchmark `bench` names, prints its Markdown report on stdout and says on stderr
/// where the report and its chart were written.
pub async fn run(bench: Bench) -> Result<(), BenchError> {
    if let Bench::All(args) = bench {
        return crate::all::run(args).await;
    }
    let (report, out) = run_one(bench).await?;
    println!("{}", report.to_markdown());
    eprintln!("tollgate-bench: report written to {}", out.display());
    Ok(())
}

/// Runs one benchmark, which writes its report into its `--out` directory: the report, and
/// that directory.
pub(crate) async fn run_one(bench: Bench) -> Result<(Report, PathBuf), BenchError> {
    Ok(match bench {
        Bench::Memory(args) => {
            // Threads of its own, timed: off the runtime's workers.
            let out = args.out.clone();
            let report = tokio::task::spawn_blocking(move || crate::run_memory(&args))
                .await
                .map_err(|e| BenchError::Args(format!("the benchmark died: {e}")))?;
            (report?.report(), out)
        }
        Bench::Redis(args) => (crate::run_redis(&args).await?.report(), args.out),
        Bench::Postgres(args) => (crate::run_postgres(&args).await?.report(), args.out),
        Bench::Http(args) => (crate::run_http(&args).await?.report(), args.out),
        Bench::Resp(args) => (crate::run_resp(&args).await?.report(), args.out),
        Bench::Grpc(args) => (crate::run_grpc(&args).await?.report(), args.out),
        Bench::Soak(args) => (crate::run_soak(&args).await?.report(), args.out),
        Bench::Tail(args) => (crate::run_tail(&args).await?.report(), args.out),
        Bench::Scale(args) => (crate::run_scale(&args).await?.report(), args.out),
        Bench::All(_) => return Err(BenchError::Args("`all` runs the others".into())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_cuts_one_benchmark_short_but_for_the_arguments_given() {
        let cli = Cli::parse_from_args(["tollgate-bench", "memory", "--quick", "--keys", "1000"])
            .unwrap();
        let Bench::Memory(args) = cli.bench else {
            panic!("memory parses as memory");
        };
        assert_eq!(args.keys, 1000, "given");
        assert_eq!(args.seconds, 0.05, "from all --quick");
        assert_eq!(args.rounds, 1, "from all --quick");
        let full = Cli::parse_from_args(["tollgate-bench", "memory"]).unwrap();
        let Bench::Memory(args) = full.bench else {
            panic!("memory parses as memory");
        };
        assert_ne!(args.seconds, 0.05, "a full run by default");
        assert!(Cli::parse_from_args(["tollgate-bench", "all", "--quick"]).is_ok());
    }
}
