//! `tollgate`: parses the command line, turns SIGINT/SIGTERM into a graceful shutdown, runs.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;
use tollgate_server::cli::{Cli, Command};

/// How long requests in flight get to finish after a signal before the process exits anyway.
const GRACE: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Serve(args)) => args,
        Some(Command::Migrate(args)) => return report(tollgate_server::migrate(args).await),
        Some(Command::Bench(target)) => return report(tollgate_server::bench(target).await),
        None => cli.serve,
    };

    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let server = tollgate_server::serve(args, shutdown.clone());
    let outcome = tokio::select! {
        outcome = server => outcome,
        () = async { shutdown.cancelled().await; tokio::time::sleep(GRACE).await } => {
            eprintln!("tollgate: requests still in flight after {GRACE:?}; exiting anyway");
            return ExitCode::FAILURE;
        }
    };
    report(outcome)
}

fn report(outcome: Result<(), tollgate_server::ServeError>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                eprintln!("tollgate: cannot watch SIGTERM ({e}); stop me with SIGINT");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    eprintln!("tollgate: shutting down; finishing requests in flight");
    shutdown.cancel();
}
