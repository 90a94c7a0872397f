//! The command line, `tollgate-bench <benchmark> [ARGS]`: one subcommand per benchmark, each
//! with that benchmark's arguments, and `all`, every one of them in one run ([`crate::all`]).

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::BenchError;
use crate::all::AllArgs;
use crate::benchmark::{Benchmark, run_one};

/// tollgate-bench: tollgate's stores and servers measured beside the approaches teams publish
/// and copy, each run written up as a Markdown report with SVG charts.
#[derive(Debug, Parser)]
#[command(name = "tollgate-bench", version)]
pub struct Cli {
    /// The benchmark to run.
    #[command(subcommand)]
    pub bench: Bench,
}

/// The benchmarks: one, or all of them.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// One benchmark, with its arguments.
    #[command(flatten)]
    One(Benchmark),
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
    let bench = match bench {
        Bench::All(args) => return crate::all::run(args).await,
        Bench::One(bench) => bench,
    };
    let (report, out) = run_one(bench).await?;
    println!("{}", report.to_markdown());
    eprintln!("tollgate-bench: report written to {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_cuts_one_benchmark_short_but_for_the_arguments_given() {
        let cli = Cli::parse_from_args(["tollgate-bench", "memory", "--quick", "--keys", "1000"])
            .unwrap();
        let Bench::One(Benchmark::Memory(args)) = cli.bench else {
            panic!("memory parses as memory");
        };
        assert_eq!(args.keys, 1000, "given");
        assert_eq!(args.seconds, 0.05, "from all --quick");
        assert_eq!(args.rounds, 1, "from all --quick");
        let full = Cli::parse_from_args(["tollgate-bench", "memory"]).unwrap();
        let Bench::One(Benchmark::Memory(args)) = full.bench else {
            panic!("memory parses as memory");
        };
        assert_ne!(args.seconds, 0.05, "a full run by default");
        assert!(Cli::parse_from_args(["tollgate-bench", "all", "--quick"]).is_ok());
    }
}
