//! TLS for the variants that measure it: a throwaway CA and a server certificate it signed for
//! `localhost` and `127.0.0.1` (made by the test kit with the `openssl` command, in a scratch
//! directory), and the load generators' side, rustls on ring (the server's provider) trusting
//! only that CA and offering one ALPN protocol.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::BenchError;
use crate::scratch::scratch;

/// The name the clients ask for, one the certificate carries.
const SERVER_NAME: &str = "localhost";

/// A server certificate and the CA that signed it, removed when dropped.
pub(crate) struct Certificates {
    _dir: TempDir,
    /// The server's certificate, PEM.
    pub(crate) cert: PathBuf,
    /// Its key, PEM.
    pub(crate) key: PathBuf,
    ca: PathBuf,
}

impl Certificates {
    /// A new CA and a certificate it signed, in a scratch directory named after `bench`.
    pub(crate) fn make(bench: &str) -> Result<Certificates, BenchError> {
        let dir = scratch(&format!("{bench}-tls"))?;
        let failed = |e: tollgate_testkit::TestkitError| {
            BenchError::Tls(format!("cannot make the test certificates: {e}"))
        };
        let ca = tollgate_testkit::TestCa::new(dir.path(), "ca").map_err(failed)?;
        let (cert, key) = ca
            .sign(
                dir.path(),
                "server",
                SERVER_NAME,
                "DNS:localhost,IP:127.0.0.1",
            )
            .map_err(failed)?;
        Ok(Certificates {
            _dir: dir,
            cert,
            key,
            ca: ca.cert,
        })
    }

    /// A client that trusts only this CA and offers `alpn` (`h2`, `http/1.1`).
    pub(crate) fn client(&self, alpn: &'static [u8]) -> Result<TlsClient, BenchError> {
        let pem = std::fs::read(&self.ca).map_err(|e| {
            BenchError::Tls(format!("cannot read the CA {}: {e}", self.ca.display()))
        })?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| BenchError::Tls(format!("the CA is not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| BenchError::Tls(format!("the CA certificate is unusable: {e}")))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| BenchError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
            alpn,
        })
    }
}

/// Opens TLS connections to the benchmark's servers; cheap to clone.
#[derive(Clone)]
pub(crate) struct TlsClient {
    connector: TlsConnector,
    alpn: &'static [u8],
}

impl TlsClient {
    /// A TCP connection to `addr` (`TCP_NODELAY`, as the plaintext clients set it) and its
    /// handshake, which must settle on this client's ALPN protocol: a server that fell back to
    /// another would be measured on the wrong protocol.
    pub(crate) async fn connect(
        &self,
        addr: SocketAddr,
    ) -> Result<TlsStream<TcpStream>, BenchError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(SERVER_NAME)
            .map_err(|e| BenchError::Tls(format!("server name {SERVER_NAME}: {e}")))?;
        let stream = self
            .connector
            .connect(name, tcp)
            .await
            .map_err(|e| BenchError::Tls(format!("the handshake with {addr} failed: {e}")))?;
        let (_, session) = stream.get_ref();
        if session.alpn_protocol() != Some(self.alpn) {
            return Err(BenchError::Tls(format!(
                "{addr} did not agree to ALPN {}",
                String::from_utf8_lossy(self.alpn)
            )));
        }
        Ok(stream)
    }

    /// What a handshake with `addr` settles on, for the report: `TLSv1_3,
    /// TLS13_AES_256_GCM_SHA384, X25519, ALPN h2`.
    pub(crate) async fn describe(&self, addr: SocketAddr) -> Result<String, BenchError> {
        let stream = self.connect(addr).await?;
        let (_, session) = stream.get_ref();
        let known = |value: Option<String>| value.unwrap_or_else(|| "?".to_owned());
        Ok(format!(
            "{}, {}, {}, ALPN {}",
            known(session.protocol_version().map(|v| format!("{v:?}"))),
            known(
                session
                    .negotiated_cipher_suite()
                    .map(|s| format!("{:?}", s.suite()))
            ),
            known(
                session
                    .negotiated_key_exchange_group()
                    .map(|g| format!("{:?}", g.name()))
            ),
            String::from_utf8_lossy(self.alpn)
        ))
    }
}
