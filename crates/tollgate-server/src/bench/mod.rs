//! `tollgate bench`: runs a benchmark of `tollgate-bench` and prints its report; `bench all`
//! runs every one of them ([`all`]).

mod all;
mod machine;
mod servers;

use std::path::PathBuf;

use tollgate_bench::Report;

use crate::ServeError;
use crate::cli::BenchTarget;

/// Runs the benchmark `target` names, prints its Markdown report on stdout and says on stderr
/// where the report and its chart were written.
pub async fn bench(target: BenchTarget) -> Result<(), ServeError> {
    if let BenchTarget::All(args) = target {
        return all::run(args).await;
    }
    let (report, out) = run(target).await?;
    println!("{}", report.to_markdown());
    eprintln!("tollgate bench: report written to {}", out.display());
    Ok(())
}

/// Runs one benchmark, which writes its report into its `--out` directory: the report, and
/// that directory.
async fn run(target: BenchTarget) -> Result<(Report, PathBuf), ServeError> {
    Ok(match target {
        BenchTarget::Memory(args) => {
            // Threads of its own, timed: off the runtime's workers.
            let out = args.out.clone();
            let report = tokio::task::spawn_blocking(move || tollgate_bench::run_memory(&args))
                .await
                .map_err(|e| {
                    tollgate_bench::BenchError::Args(format!("the benchmark died: {e}"))
                })?;
            (report?.report(), out)
        }
        BenchTarget::Redis(args) => {
            let report = tollgate_bench::run_redis(&args).await?;
            (report.report(), args.out)
        }
        BenchTarget::Postgres(args) => {
            let report = tollgate_bench::run_postgres(&args).await?;
            (report.report(), args.out)
        }
        BenchTarget::Resp(args) => {
            let shutdown = tokio_util::sync::CancellationToken::new();
            let addr = servers::resp_server(shutdown.clone()).await?;
            let report = tollgate_bench::run_resp(&args, addr).await;
            shutdown.cancel();
            (report?.report(), args.out)
        }
        BenchTarget::Grpc(args) => {
            let report = servers::grpc(&args).await?;
            (report.report(), args.out)
        }
        BenchTarget::Soak(args) => {
            let report = servers::soak(&args).await?;
            (report.report(), args.out)
        }
        BenchTarget::Http(args) => {
            let router = servers::server_router().await?;
            let report = tollgate_bench::run_http_with(&args, Some(router)).await?;
            (report.report(), args.out)
        }
        BenchTarget::All(_) => {
            return Err(tollgate_bench::BenchError::Args("`all` runs the others".into()).into());
        }
    })
}
