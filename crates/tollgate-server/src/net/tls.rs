//! TLS on a listener, with rustls: a certificate and key, and optionally a client CA (then
//! every client must present a certificate it signed) and the subject alternative names a
//! client certificate may carry. The files are read again when they change on disk (as
//! cert-manager rotates them) and on SIGHUP: a good new set is used for the next handshakes,
//! connections open keep theirs; a bad one is logged and the old set stays.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::files::Kind;

/// `[LISTENER.tls]`: where the files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM, the server's own first.
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates, PEM: when set, a client must present a certificate one of them signed.
    pub client_ca: Option<PathBuf>,
    /// The subject alternative names (DNS names or IP addresses) a client certificate may
    /// carry, any one of them, exactly (a wildcard certificate matches none); empty: any the CA
    /// signed.
    pub client_san: Vec<String>,
}

/// Why a set of TLS files cannot be used.
#[derive(Debug)]
pub struct TlsError(String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

/// A listener's TLS, reloaded when its files change.
pub struct Tls {
    files: TlsFiles,
    alpn: Vec<Vec<u8>>,
    current: ArcSwap<ServerConfig>,
    allowed: Vec<ServerName<'static>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Loads `files`, offering the ALPN protocols `alpn` (`h2`, `http/1.1` for HTTP; none
    /// for RESP). A set that cannot be used is an error: the server does not start.
    pub fn load(files: TlsFiles, alpn: &[&[u8]]) -> Result<Tls, TlsError> {
        let allowed = files
            .client_san
            .iter()
            .map(|san| {
                ServerName::try_from(san.clone()).map_err(|_| {
                    TlsError(format!(
                        "client_san {san:?} is neither a DNS name nor an IP address"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !allowed.is_empty() && files.client_ca.is_none() {
            return Err(TlsError(
                "client_san needs client_ca: without a CA no client certificate is asked for"
                    .to_owned(),
            ));
        }
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let config = build(&read(&files)?, &alpn)?;
        Ok(Tls {
            files,
            alpn,
            current: ArcSwap::from_pointee(config),
            allowed,
        })
    }

    /// Handshakes on `stream`, and checks the client certificate's names when some are set.
    pub async fn accept(&self, stream: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        let stream = TlsAcceptor::from(self.current.load_full())
            .accept(stream)
            .await?;
        if !self.allowed.is_empty() {
            let (_, connection) = stream.get_ref();
            let leaf = connection.peer_certificates().and_then(|c| c.first());
            if !leaf.is_some_and(|leaf| self.names_allowed(leaf)) {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "the client certificate carries none of client_san",
                ));
            }
        }
        Ok(stream)
    }

    /// Whether `leaf` carries one of the allowed names, exactly: webpki matches names as a
    /// server's, where `*.svc.local` covers `billing.svc.local`, so a DNS name that a made-up
    /// sibling matches as well is taken to be a wildcard's match and refused.
    fn names_allowed(&self, leaf: &CertificateDer<'_>) -> bool {
        let Ok(cert) = webpki::EndEntityCert::try_from(leaf) else {
            return false;
        };
        let valid = |name: &ServerName<'_>| cert.verify_is_valid_for_subject_name(name).is_ok();
        self.allowed.iter().any(|name| {
            valid(name)
                && match name {
                    ServerName::DnsName(dns) => dns
                        .as_ref()
                        .split_once('.')
                        .and_then(|(_, parent)| {
                            ServerName::try_from(format!("tollgate-wildcard-probe.{parent}")).ok()
                        })
                        .is_none_or(|sibling| !valid(&sibling)),
                    _ => true,
                }
        })
    }

    /// Reads the files again every 250 ms (as the config file is watched) and on SIGHUP until
    /// `shutdown`, on the file reader's thread ([`crate::files`]: a FIFO or an oversized file
    /// at a path is refused, a stuck read is given up on), and uses a changed set once it
    /// builds.
    pub async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        let read_all = || {
            let files = self.files.clone();
            async move {
                crate::files::off_workers(move || read(&files))
                    .await
                    .unwrap_or_else(|stuck| Err(TlsError(stuck.to_string())))
                    .map_err(|e| e.0)
            }
        };
        let applied = read_all().await;
        crate::watch::on_change(read_all, applied, shutdown, |now, _| {
            self.apply(now);
            std::future::ready(())
        })
        .await;
    }

    /// Puts `now`, the files as just read (or why they could not be), in use if they build.
    fn apply(&self, now: Result<Pems, String>) {
        let pems = match now {
            Ok(pems) => pems,
            Err(error) => {
                tracing::error!(cert = %self.files.cert.display(), %error, "the TLS files cannot be read; keeping the ones in use");
                return;
            }
        };
        match build(&pems, &self.alpn) {
            Ok(config) => {
                self.current.store(Arc::new(config));
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
            }
            Err(e) => tracing::warn!(
                cert = %self.files.cert.display(),
                error = %e,
                "the new TLS files are refused; keeping the ones in use"
            ),
        }
    }
}

/// The files' contents: certificate, key, client CA.
#[derive(Clone, PartialEq)]
struct Pems {
    cert: Arc<[u8]>,
    key: Arc<[u8]>,
    client_ca: Option<Arc<[u8]>>,
}

/// The files, through the server's one file reader: regular files within their caps, each read
/// once per change however many listeners share it.
fn read(files: &TlsFiles) -> Result<Pems, TlsError> {
    let read =
        |path: &Path, kind| crate::files::read(path, kind).map_err(|e| TlsError(e.to_string()));
    Ok(Pems {
        cert: read(&files.cert, Kind::Certificate)?,
        key: read(&files.key, Kind::Key)?,
        client_ca: match &files.client_ca {
            Some(path) => Some(read(path, Kind::ClientCa)?),
            None => None,
        },
    })
}

fn build(pems: &Pems, alpn: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
    let certs = certificates(&pems.cert, "certificate")?;
    let key = PrivateKeyDer::from_pem_slice(&pems.key)
        .map_err(|e| TlsError(format!("the key file holds no usable private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match &pems.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca, "client CA")? {
                roots
                    .add(cert)
                    .map_err(|e| TlsError(format!("a client CA certificate is unusable: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError(format!("the client CA is unusable: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError(format!("the certificate and key do not go together: {e}")))?;
    config.alpn_protocols = alpn.to_vec();
    Ok(config)
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("the {what} file is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError(format!("the {what} file holds no certificate")));
    }
    Ok(certs)
}
