//! The servers the benchmarks measure, in this process, started through the server's library
//! as `tollgate serve ARGS` would start them: its router, its Redis-protocol listener, and its
//! gRPC listener on the benchmark's Envoy config.

use std::net::SocketAddr;

use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use tollgate_server::{App, Server, cli::serve_settings};

use crate::BenchError;

/// `tollgate serve`'s router as the embedded default runs it (memory store, fail open, 50 ms
/// timeout), with the HTTP benchmark's policy configured by name, as a config file would.
pub(crate) async fn router() -> Result<axum::Router, BenchError> {
    let allow_all = crate::http::allow_all()?;
    let dir = scratch("http")?;
    let file = dir.path().join("bench.toml");
    write(
        &file,
        &format!(
            "[policies.{}]\ncapacity = {}\nrefill = {}\nperiod = \"{}ns\"\n",
            crate::http::POLICY_NAME,
            allow_all.capacity(),
            allow_all.refill(),
            allow_all.period().as_nanos()
        ),
    )?;
    let settings = serve_settings([std::ffi::OsStr::new("--config"), file.as_os_str()])?;
    Ok(App::open(settings).await?.router())
}

/// `tollgate serve` on its embedded default with the Redis protocol on a free port, in this
/// process until `shutdown`; its address.
pub(crate) async fn resp(shutdown: &CancellationToken) -> Result<SocketAddr, BenchError> {
    let settings = serve_settings(["--listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0"])?;
    let server = Server::bind(settings).await?;
    let addr = server
        .resp_addr()
        .ok_or_else(|| BenchError::Args("no RESP listener".into()))?;
    tokio::spawn(server.run(shutdown.clone()));
    Ok(addr)
}

/// The gRPC benchmark's Envoy config ([`crate::grpc::CONFIG`]) in a scratch directory,
/// removed when dropped.
pub(crate) struct EnvoyConfig(TempDir);

impl EnvoyConfig {
    pub(crate) fn write() -> Result<EnvoyConfig, BenchError> {
        let dir = scratch("grpc")?;
        write(&dir.path().join("bench.yaml"), crate::grpc::CONFIG)?;
        Ok(EnvoyConfig(dir))
    }
}

/// A server on `store` answering Envoy's gRPC API on `config`, its fail policy `deny`, in
/// this process until `shutdown`; its gRPC address.
pub(crate) async fn grpc(
    store: &str,
    config: &EnvoyConfig,
    shutdown: &CancellationToken,
) -> Result<SocketAddr, BenchError> {
    let dir = config.0.path().to_string_lossy().into_owned();
    let settings = serve_settings([
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
    ])?;
    let server = Server::bind(settings).await?;
    let addr = server
        .grpc_addr()
        .ok_or_else(|| BenchError::Args("no gRPC listener".into()))?;
    tokio::spawn(server.run(shutdown.clone()));
    Ok(addr)
}

/// A scratch directory for one benchmark's config files.
fn scratch(bench: &str) -> Result<TempDir, BenchError> {
    tempfile::Builder::new()
        .prefix(&format!("tollgate-bench-{bench}-"))
        .tempdir()
        .map_err(|source| BenchError::Write {
            path: std::env::temp_dir(),
            source,
        })
}

fn write(path: &std::path::Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text).map_err(|source| BenchError::Write {
        path: path.to_owned(),
        source,
    })
}
