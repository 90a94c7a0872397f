//! `tollgate`: parses the command line (or, started as `ratelimit`, reads envoyproxy/ratelimit's
//! environment), reads the config, sets up logging, turns SIGINT/SIGTERM into a graceful
//! shutdown, runs.

use std::process::ExitCode;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tollgate_server::Settings;
use tollgate_server::cli::Invocation;
use tollgate_server::options::LogFormat;
use tollgate_server::ratelimit_env;

/// How long requests in flight get to finish after a signal before the process exits anyway.
const GRACE: Duration = Duration::from_secs(10);

/// How long blocking work still running at exit (a host name lookup the resolver has not
/// answered) is waited for before the process exits anyway; file reads run on a thread of
/// their own, which exit does not wait for.
const BLOCKING_GRACE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tollgate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run());
    // Dropping a runtime waits for its blocking work without end; SIGTERM must not.
    runtime.shutdown_timeout(BLOCKING_GRACE);
    code
}

async fn run() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if ratelimit_env::requested(&argv) {
        return run_env(&argv).await;
    }
    let overrides = match Invocation::parse(argv) {
        Ok(Invocation::Serve(overrides)) => *overrides,
        Ok(Invocation::Migrate { store, postgres }) => {
            init_logs(LogFormat::Text, None);
            return report(tollgate_server::migrate(store, postgres).await);
        }
        Ok(Invocation::Top(options)) => {
            return match tollgate_server::monitor::run(options).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tollgate top: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Ok(Invocation::CheckConfig {
            path,
            merge_domains,
        }) => {
            return match tollgate_server::check_config(&path, merge_domains) {
                Ok(report) => print_out(&report),
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            };
        }
        Err(e) => e.exit(),
    };
    // A bad config file stops the server before anything starts.
    let settings = match Settings::load(overrides) {
        Ok(settings) => settings,
        Err(e) => return report(Err(e)),
    };
    init_logs(settings.log_format, None);
    serve(settings).await
}

/// Serves as envoyproxy/ratelimit would with this process's environment.
async fn run_env(argv: &[std::ffi::OsString]) -> ExitCode {
    let named = usize::from(argv.get(1).is_some_and(|a| a == ratelimit_env::FLAG));
    if argv.len() > 1 + named {
        eprintln!(
            "tollgate: started as {} (or with {}), the settings come from the environment \
             alone, as envoyproxy/ratelimit's do; no other argument is taken",
            ratelimit_env::PROGRAM,
            ratelimit_env::FLAG
        );
        return ExitCode::from(2);
    }
    let env = ratelimit_env::Env::new(std::env::vars_os());
    let loaded = match ratelimit_env::load(&env) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    init_logs(loaded.settings.log_format, Some(loaded.log_filter));
    for note in &loaded.notes {
        tracing::warn!("{note}");
    }
    serve(loaded.settings).await
}

/// Serves with `settings` until SIGINT or SIGTERM.
async fn serve(settings: Settings) -> ExitCode {
    // SIGHUP reloads the config file; without one (or before the watcher starts) it must not
    // do what it does by default, end the process. Tokio keeps its handler for good once set.
    if let Err(e) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        tracing::warn!(error = %e, "cannot handle SIGHUP; it would stop the server");
    }

    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let server = tollgate_server::serve(settings, shutdown.clone());
    let outcome = tokio::select! {
        outcome = server => outcome,
        () = async { shutdown.cancelled().await; tokio::time::sleep(GRACE).await } => {
            tracing::error!("requests still in flight after {GRACE:?}; exiting anyway");
            return ExitCode::FAILURE;
        }
    };
    report(outcome)
}

/// Writes `text` to stdout. A reader that stops reading early (`tollgate config check FILE |
/// head -1`) ends the command quietly, as Unix tools end, where `print!` would panic.
fn print_out(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr: at `level` when given (`LOG_LEVEL` in the environment mode), else at `info`
/// unless `RUST_LOG` says otherwise.
fn init_logs(format: LogFormat, level: Option<&str>) {
    let filter = match level {
        // The level is tollgate's own, as upstream's LOG_LEVEL is its own: the libraries
        // below (h2, hyper, tonic, rustls, redis) stay at `warn` at most, not trace frames.
        Some(level) => {
            let others = match level {
                "trace" | "debug" | "info" => "warn",
                quieter => quieter,
            };
            tracing_subscriber::EnvFilter::new(format!(
                "{others},tollgate={level},tollgate_server={level}"
            ))
        }
        None => {
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into())
        }
    };
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
