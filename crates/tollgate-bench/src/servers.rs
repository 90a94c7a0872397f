//! The servers the benchmarks measure, in this process, started through the server's library
//! as `tollgate serve ARGS` would start them: its HTTP listener, its Redis-protocol listener,
//! and its gRPC listener on the benchmark's Envoy config, HTTP and gRPC in plaintext or TLS.

use std::net::SocketAddr;

use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tollgate::Policy;
use tollgate_server::{ServeError, Server, cli::serve_settings};

use crate::BenchError;
use crate::scratch::scratch;
use crate::tls::Certificates;

/// `tollgate serve` as the embedded default runs it (memory store, fail open, 50 ms timeout)
/// on its own HTTP listener, a free port of `127.0.0.1`, over TLS with `tls`'s certificate
/// when given one, with `policy` configured under `name`, as a config file would; in this
/// process until `shutdown`.
pub(crate) async fn http(
    name: &str,
    policy: &Policy,
    tls: Option<&Certificates>,
    top: bool,
    shutdown: &CancellationToken,
) -> Result<Running, BenchError> {
    let dir = scratch("http")?;
    let file = dir.path().join("bench.toml");
    let mut config = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n\n[policies.{}]\ncapacity = {}\nrefill = {}\nperiod = \"{}ns\"\n",
        name,
        policy.capacity(),
        policy.refill(),
        policy.period().as_nanos()
    );
    if let Some(tls) = tls {
        config.push('\n');
        config.push_str(&tls_table("http", tls));
    }
    if !top {
        config.push_str("\n[top]\nenabled = false\n");
    }
    write(&file, &config)?;
    let settings = serve_settings([std::ffi::OsStr::new("--config"), file.as_os_str()])?;
    let server = Server::bind(settings).await?;
    Ok(Running {
        addr: server.local_addr(),
        task: tokio::spawn(server.run(shutdown.clone())),
        _config: Some(dir),
    })
}

/// A server started by [`http`] or [`grpc`].
pub(crate) struct Running {
    /// The address of the listener measured.
    pub(crate) addr: SocketAddr,
    task: JoinHandle<Result<(), ServeError>>,
    /// The config file, kept while the server watches it.
    _config: Option<TempDir>,
}

impl Running {
    /// Waits for the server to stop (after its shutdown) and reports how serving ended.
    pub(crate) async fn finished(self) -> Result<(), BenchError> {
        Ok(self.task.await??)
    }
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

/// The envoyproxy/ratelimit config the gRPC servers answer (in the gRPC, soak and tail
/// benchmarks): a limit per `user` that no run reaches, so that every call takes the whole
/// decision path and is allowed.
pub const CONFIG: &str = "\
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
";

/// [`CONFIG`] in a scratch directory, removed when dropped.
pub(crate) struct EnvoyConfig(TempDir);

impl EnvoyConfig {
    pub(crate) fn write() -> Result<EnvoyConfig, BenchError> {
        let dir = scratch("grpc")?;
        write(&dir.path().join("bench.yaml"), CONFIG)?;
        Ok(EnvoyConfig(dir))
    }
}

/// A server on `store` answering Envoy's gRPC API on `config`, its fail policy `deny`, over
/// TLS with `tls`'s certificate when given one, in this process until `shutdown`.
pub(crate) async fn grpc(
    store: &str,
    config: &EnvoyConfig,
    tls: Option<&Certificates>,
    shutdown: &CancellationToken,
) -> Result<Running, BenchError> {
    grpc_traced(store, config, tls, None, shutdown).await
}

/// [`grpc`], with `[tracing]` on when `tracing` gives a sampling rate and the OTLP/HTTP
/// receiver's base URL.
pub(crate) async fn grpc_traced(
    store: &str,
    config: &EnvoyConfig,
    tls: Option<&Certificates>,
    tracing: Option<(f64, &str)>,
    shutdown: &CancellationToken,
) -> Result<Running, BenchError> {
    let dir = config.0.path().to_string_lossy().into_owned();
    let mut args = vec![
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--grpc-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--envoy-config-dir".to_owned(),
        dir,
        "--store".to_owned(),
        store.to_owned(),
        "--on-store-error".to_owned(),
        "deny".to_owned(),
    ];
    // The flags say the rest; the file only what no flag can: the listener's TLS, tracing.
    let mut file_text = tls.map(|tls| tls_table("grpc", tls)).unwrap_or_default();
    if let Some((rate, endpoint)) = tracing {
        file_text.push_str(&format!(
            "[tracing]\nenabled = true\nendpoint = {endpoint:?}\nsampling_rate = {rate:?}\n"
        ));
    }
    let scratch_dir = if file_text.is_empty() {
        None
    } else {
        let dir = scratch("grpc")?;
        let file = dir.path().join("bench.toml");
        write(&file, &file_text)?;
        args.extend(["--config".to_owned(), file.to_string_lossy().into_owned()]);
        Some(dir)
    };
    let settings = serve_settings(args)?;
    let server = Server::bind(settings).await?;
    let addr = server
        .grpc_addr()
        .ok_or_else(|| BenchError::Args("no gRPC listener".into()))?;
    Ok(Running {
        addr,
        task: tokio::spawn(server.run(shutdown.clone())),
        _config: scratch_dir,
    })
}

/// `[LISTENER.tls]` with `tls`'s certificate and key.
fn tls_table(listener: &str, tls: &Certificates) -> String {
    format!(
        "[{listener}.tls]\ncert = {:?}\nkey = {:?}\n",
        tls.cert.to_string_lossy(),
        tls.key.to_string_lossy()
    )
}

fn write(path: &std::path::Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text).map_err(|source| BenchError::Write {
        path: path.to_owned(),
        source,
    })
}
