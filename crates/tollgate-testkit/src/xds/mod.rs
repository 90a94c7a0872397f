//! A test xDS management server ([`XdsServer`]): the aggregated discovery service, state of the
//! world, serving envoyproxy/ratelimit's `RateLimitConfig` resources, plain or over (mutual)
//! TLS. A test sets versions, sees the requests (ACKs, NACKs with their `error_detail`, the
//! node and the stream's metadata), and stops and restarts the server on the same port.
//!
//! It runs on a thread of its own with its own runtime, so a handle works in any test, async or
//! not, and dropping it stops the server.
//!
//! ```no_run
//! use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
//! use tollgate_testkit::XdsServer;
//!
//! let mut xds = XdsServer::start(None)?;
//! let config = RateLimitConfig { name: "a".into(), domain: "d".into(), ..Default::default() };
//! xds.set("v1", &[config]);
//! // ... start tollgate with `[grpc.xds] url` = xds.addr() ...
//! xds.wait_for("v1 ACKed", |seen| seen.iter().any(|s| s.acks("v1")))?;
//! xds.stop();
//! xds.restart()?;
//! # Ok::<(), tollgate_testkit::TestkitError>(())
//! ```

mod incoming;
mod service;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryServiceServer;
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use prost::Message;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;

use crate::TestkitError;
use service::{Ads, Shared};
pub use service::{Seen, TYPE_URL};

/// How long [`XdsServer::wait_for`] waits.
pub const WAIT: Duration = Duration::from_secs(30);

/// The server's TLS: its certificate, and the CA client certificates must chain to (none: no
/// client certificate asked for).
#[derive(Debug, Clone)]
pub struct XdsServerTls {
    /// The server's certificate chain, PEM.
    pub cert: PathBuf,
    /// Its key, PEM.
    pub key: PathBuf,
    /// The CA of client certificates: with it, TLS is mutual.
    pub client_ca: Option<PathBuf>,
}

/// A running test management server; stopped when dropped.
pub struct XdsServer {
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    shared: Arc<Shared>,
    pushed: watch::Sender<u64>,
    running: Option<(watch::Sender<bool>, JoinHandle<()>)>,
}

impl XdsServer {
    /// Starts a server on a free 127.0.0.1 port, with `tls` if given, serving no version yet
    /// (a stream's first request waits for one, as go-control-plane's cache holds it).
    pub fn start(tls: Option<XdsServerTls>) -> Result<XdsServer, TestkitError> {
        let tls = tls.map(|t| server_config(&t)).transpose()?.map(Arc::new);
        let (pushed, _) = watch::channel(0);
        let mut server = XdsServer {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls,
            shared: Arc::default(),
            pushed,
            running: None,
        };
        server.serve()?;
        Ok(server)
    }

    /// Where it listens (`127.0.0.1:PORT`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `version` of `resources` from now on: streams are sent it at once.
    pub fn set(&self, version: &str, resources: &[RateLimitConfig]) {
        let resources = resources
            .iter()
            .map(|r| Any {
                type_url: TYPE_URL.to_owned(),
                value: r.encode_to_vec(),
            })
            .collect();
        self.shared.lock().current = Some((version.to_owned(), resources));
        self.pushed.send_modify(|n| *n += 1);
    }

    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.lock().seen.clone()
    }

    /// Why TLS handshakes failed (a client certificate refused, say).
    pub fn handshake_failures(&self) -> Vec<String> {
        self.shared.lock().handshake_failures.clone()
    }

    /// Polls the requests until `done` holds of them, for up to [`WAIT`]; an error naming
    /// `what` and listing what was seen otherwise.
    pub fn wait_for(
        &self,
        what: &str,
        done: impl Fn(&[Seen]) -> bool,
    ) -> Result<Vec<Seen>, TestkitError> {
        let deadline = Instant::now() + WAIT;
        loop {
            let seen = self.seen();
            if done(&seen) {
                return Ok(seen);
            }
            if Instant::now() > deadline {
                return Err(TestkitError::io(
                    format!("the test xDS server waited {WAIT:?} for {what}; it saw {seen:#?}"),
                    std::io::Error::from(std::io::ErrorKind::TimedOut),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops it: open streams end with `UNAVAILABLE`, the port is closed.
    pub fn stop(&mut self) {
        if let Some((stopping, thread)) = self.running.take() {
            let _ = stopping.send(true);
            let _ = thread.join();
        }
    }

    /// Starts it again on the same port, serving the same version.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop();
        self.serve()
    }

    fn serve(&mut self) -> Result<(), TestkitError> {
        let listener = std::net::TcpListener::bind(self.addr).map_err(|e| {
            TestkitError::io(format!("binding the test xDS server on {}", self.addr), e)
        })?;
        self.addr = listener
            .local_addr()
            .map_err(|e| TestkitError::io("reading the test xDS server's address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TestkitError::io("setting the test xDS server's socket", e))?;
        let (stopping, stopped) = watch::channel(false);
        let ads = Ads {
            shared: Arc::clone(&self.shared),
            pushed: self.pushed.subscribe(),
            stopping: stopped.clone(),
        };
        let tls = self.tls.clone();
        let shared = Arc::clone(&self.shared);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TestkitError::io("building the test xDS server's runtime", e))?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let mut until = stopped.clone();
                let incoming = incoming::accept(listener, tls, shared, stopped);
                let _ = tonic::transport::Server::builder()
                    .add_service(AggregatedDiscoveryServiceServer::new(ads))
                    .serve_with_incoming_shutdown(incoming, async move {
                        let _ = until.wait_for(|stop| *stop).await;
                    })
                    .await;
            });
        });
        self.running = Some((stopping, thread));
        Ok(())
    }
}

impl Drop for XdsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn server_config(tls: &XdsServerTls) -> Result<rustls::ServerConfig, TestkitError> {
    let fail = |what: &str, e: String| TestkitError::io(what.to_owned(), std::io::Error::other(e));
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| fail("reading the test xDS server's certificate", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| fail("reading the test xDS server's key", e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| fail("building the test xDS server's TLS", e.to_string()))?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca)
                .map_err(|e| fail("reading the client CA", e.to_string()))?
            {
                let cert = cert.map_err(|e| fail("reading the client CA", e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| fail("reading the client CA", e.to_string()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| fail("building the client verifier", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| fail("building the test xDS server's TLS", e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
