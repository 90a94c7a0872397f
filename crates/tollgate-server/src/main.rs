//! `tollgate`: parses the command line, reads the config, sets up logging, turns SIGINT/SIGTERM
//! into a graceful shutdown, runs.

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};
use tokio_util::sync::CancellationToken;
use tollgate_server::cli::{Cli, Command, ConfigCommand, Given, LogFormat};

/// How long requests in flight get to finish after a signal before the process exits anyway.
const GRACE: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let mut args = match cli.command {
        Some(Command::Serve(args)) => args,
        Some(Command::Migrate(args)) => {
            init_logs(LogFormat::Text);
            return report(tollgate_server::migrate(args).await);
        }
        Some(Command::Bench(target)) => {
            init_logs(LogFormat::Text);
            return report(tollgate_server::bench(target).await);
        }
        Some(Command::Config(ConfigCommand::Check {
            file,
            envoy_merge_domain_config,
        })) => {
            return match tollgate_server::check_config(&file, envoy_merge_domain_config) {
                Ok(report) => {
                    print!("{report}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            };
        }
        None => cli.serve,
    };
    args.given = Given::of(matches.subcommand_matches("serve").unwrap_or(&matches));
    // A bad config file stops the server before anything starts.
    let settings = match tollgate_server::prepare(&args) {
        Ok(settings) => settings,
        Err(e) => return report(Err(e)),
    };
    init_logs(settings.log_format);
    // SIGHUP reloads the config file; without one (or before the watcher starts) it must not
    // do what it does by default, end the process. Tokio keeps its handler for good once set.
    if let Err(e) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        tracing::warn!(error = %e, "cannot handle SIGHUP; it would stop the server");
    }

    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let server = tollgate_server::serve(args, settings, shutdown.clone());
    let outcome = tokio::select! {
        outcome = server => outcome,
        () = async { shutdown.cancelled().await; tokio::time::sleep(GRACE).await } => {
            tracing::error!("requests still in flight after {GRACE:?}; exiting anyway");
            return ExitCode::FAILURE;
        }
    };
    report(outcome)
}

/// Logs to stderr, at `info` unless `RUST_LOG` says otherwise.
fn init_logs(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
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
                tracing::warn!(error = %e, "cannot watch SIGTERM; stop me with SIGINT");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutting down; finishing requests in flight");
    shutdown.cancel();
}
