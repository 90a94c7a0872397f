//! `tollgate bench`: runs a benchmark of `tollgate-bench` and prints its report.

use crate::ServeError;
use crate::cli::BenchTarget;

/// Runs the benchmark `target` names, prints its Markdown report on stdout and says on stderr
/// where the report and its chart were written.
pub async fn bench(target: BenchTarget) -> Result<(), ServeError> {
    let (markdown, out) = match target {
        BenchTarget::Redis(args) => {
            let report = tollgate_bench::run_redis(&args).await?;
            (report.to_markdown(), args.out)
        }
        BenchTarget::Postgres(args) => {
            let report = tollgate_bench::run_postgres(&args).await?;
            (report.to_markdown(), args.out)
        }
        BenchTarget::Http(args) => {
            let report = tollgate_bench::run_http(&args).await?;
            (report.to_markdown(), args.out)
        }
    };
    println!("{markdown}");
    eprintln!("tollgate bench: report written to {}", out.display());
    Ok(())
}
