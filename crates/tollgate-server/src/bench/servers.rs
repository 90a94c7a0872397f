//! The servers `tollgate bench` measures, in its own process: `tollgate serve`'s router, its
//! Redis-protocol listener, and its gRPC listener on the benchmark's Envoy config.

use std::sync::Arc;

use clap::Parser;

use crate::ServeError;
use crate::cli::Cli;
use crate::config::Config;
use crate::http::AppState;
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::store::StoreHealth;

/// `tollgate serve`'s router as the embedded default runs it (memory store, fail open, 50 ms
/// timeout), with the benchmark's policy configured by name, as a config file would.
pub(super) async fn server_router() -> Result<axum::Router, ServeError> {
    let allow_all = tollgate_bench::allow_all()?;
    let file = format!(
        "[policies.{}]\ncapacity = {}\nrefill = {}\nperiod = \"{}ns\"\n",
        tollgate_bench::POLICY_NAME,
        allow_all.capacity(),
        allow_all.refill(),
        allow_all.period().as_u64()
    );
    let config = Config::parse(std::path::Path::new("bench.toml"), &file)?;
    let args = Cli::try_parse_from(["tollgate"])
        .map_err(|e| tollgate_bench::BenchError::Args(e.to_string()))?
        .serve;
    let settings = Settings::resolve(&args, Some(&config));
    let metrics = Arc::new(Metrics::new()?);
    let health = Arc::new(StoreHealth::new(
        Arc::clone(&metrics),
        settings.on_store_error,
    ));
    let store = crate::store::open(&settings, Arc::clone(&health))
        .await
        .map_err(|source| ServeError::Store {
            store: settings.store.to_string(),
            source,
        })?;
    let state = AppState::new(store, settings.store_timeout, None)
        .map_err(|_| ServeError::Random)?
        .observed(metrics, health)
        .policies(settings.policies, settings.inline_policies);
    Ok(crate::http::router(Arc::new(state)))
}

/// `tollgate serve` on its embedded default with the Redis protocol on a free port, in this
/// process; its address.
pub(super) async fn resp_server(
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<std::net::SocketAddr, ServeError> {
    let args = Cli::try_parse_from([
        "tollgate",
        "--listen",
        "127.0.0.1:0",
        "--resp-listen",
        "127.0.0.1:0",
    ])
    .map_err(|e| tollgate_bench::BenchError::Args(e.to_string()))?
    .serve;
    let settings = Settings::resolve(&args, None);
    let server = crate::Server::bind(args, settings).await?;
    let addr = server
        .resp_addr()
        .ok_or_else(|| tollgate_bench::BenchError::Args("no RESP listener".into()))?;
    tokio::spawn(server.run(shutdown));
    Ok(addr)
}

/// The gRPC benchmark: servers on the memory store and (given `--redis`) on Redis, in this
/// process, answering the benchmark's Envoy config from a scratch directory.
pub(super) async fn grpc(
    args: &tollgate_bench::GrpcBenchArgs,
) -> Result<tollgate_bench::GrpcReport, ServeError> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let dir = BenchConfig::write()?;
    let mut stores = vec![("memory".to_owned(), "memory".to_owned())];
    let mut missing = Vec::new();
    match &args.redis {
        Some(url) => stores.push(("redis".to_owned(), url.clone())),
        None => missing.push(("redis".to_owned(), "no --redis URL given".to_owned())),
    }
    let mut targets = Vec::new();
    for (name, store) in stores {
        targets.push((name, grpc_server(&store, &dir, &shutdown).await?));
    }
    let report = tollgate_bench::run_grpc(args, &targets, missing).await;
    shutdown.cancel();
    Ok(report?)
}

/// The soak run: a server on `--redis`, its fail policy `deny` so that the faults show.
pub(super) async fn soak(
    args: &tollgate_bench::SoakArgs,
) -> Result<tollgate_bench::SoakReport, ServeError> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let dir = BenchConfig::write()?;
    let addr = grpc_server(&args.redis, &dir, &shutdown).await?;
    let report = tollgate_bench::run_soak(args, addr).await;
    shutdown.cancel();
    Ok(report?)
}

/// The benchmark's Envoy config in a scratch directory, removed when dropped.
struct BenchConfig(std::path::PathBuf);

impl BenchConfig {
    fn write() -> Result<BenchConfig, ServeError> {
        let dir = std::env::temp_dir().join(format!("tollgate-bench-grpc-{}", std::process::id()));
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("bench.yaml"), tollgate_bench::grpc::CONFIG));
        match written {
            Ok(()) => Ok(BenchConfig(dir)),
            Err(source) => Err(tollgate_bench::BenchError::Write { path: dir, source }.into()),
        }
    }
}

impl Drop for BenchConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server on `store` answering Envoy's gRPC API on `config`, in this process until
/// `shutdown`; its gRPC address.
async fn grpc_server(
    store: &str,
    config: &BenchConfig,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<std::net::SocketAddr, ServeError> {
    let dir = config.0.to_string_lossy().into_owned();
    let args = Cli::try_parse_from([
        "tollgate",
        "--listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "127.0.0.1:0",
        "--envoy-config-dir",
        &dir,
        "--store",
        store,
        "--on-store-error",
        "deny",
    ])
    .map_err(|e| tollgate_bench::BenchError::Args(e.to_string()))?
    .serve;
    let settings = Settings::resolve(&args, None);
    let server = crate::Server::bind(args, settings).await?;
    let addr = server
        .grpc_addr()
        .ok_or_else(|| tollgate_bench::BenchError::Args("no gRPC listener".into()))?;
    tokio::spawn(server.run(shutdown.clone()));
    Ok(addr)
}
