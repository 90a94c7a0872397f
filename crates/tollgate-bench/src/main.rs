//! `tollgate-bench`: parses the command line, sets up logging (the servers it starts in its
//! process log as `tollgate serve` does), runs the benchmark.

use std::process::ExitCode;

use tollgate_bench::cli::{self, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    // A server process of the scale benchmark: its spec is in the environment.
    if let Ok(spec) = std::env::var(tollgate_bench::scale::worker::WORKER_ENV) {
        return match tollgate_bench::scale::worker::run(&spec).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tollgate-bench scale worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = Cli::parse_from_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .init();
    match cli::run(cli.bench).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
