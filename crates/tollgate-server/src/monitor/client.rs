//! A small HTTP/1.1 client for the admin listener: `GET` with a bearer token, over TLS when
//! the URL is `https`, on a new connection each time (once a second is nothing to save), each
//! answer bounded in size and time.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::MonitorError;

/// The longest an answer may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer read.
const MOST_BYTES: usize = 4 << 20;

/// Where to ask, and with what.
pub(super) struct Client {
    host: String,
    port: u16,
    authority: String,
    tls: Option<TlsConnector>,
    token: Option<String>,
}

impl Client {
    /// A client of the server at `url` (`http://HOST:PORT` or `https://...`, trusting the
    /// system's roots or the PEM file `ca`), showing `token`.
    pub(super) fn new(
        url: &str,
        token: Option<String>,
        ca: Option<&std::path::Path>,
    ) -> Result<Client, MonitorError> {
        let bad = |why: &str| MonitorError::Url(format!("{url:?}: {why}"));
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("the scheme must be http or https")),
        };
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let tls = https.then(|| connector(ca)).transpose()?;
        Ok(Client {
            host,
            port,
            authority,
            tls,
            token,
        })
    }

    /// `GET path`: the status and the body.
    pub(super) async fn get(&self, path: &str) -> Result<(StatusCode, Bytes), MonitorError> {
        let failed = |e: String| MonitorError::Request(format!("GET {path}: {e}"));
        tokio::time::timeout(TIMEOUT, self.send(path))
            .await
            .map_err(|_| failed(format!("no answer within {} s", TIMEOUT.as_secs())))?
            .map_err(failed)
    }

    async fn send(&self, path: &str) -> Result<(StatusCode, Bytes), String> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("cannot connect to {}:{}: {e}", self.host, self.port))?;
        match &self.tls {
            None => self.exchange(tcp, path).await,
            Some(tls) => {
                let name = ServerName::try_from(self.host.clone())
                    .map_err(|e| format!("{:?} is no server name: {e}", self.host))?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                self.exchange(stream, path).await
            }
        }
    }

    async fn exchange<S>(&self, stream: S, path: &str) -> Result<(StatusCode, Bytes), String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let mut request = Request::get(path).header(header::HOST, &self.authority);
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MOST_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    }
}

/// TLS trusting `ca`'s certificates, or the system's roots.
fn connector(ca: Option<&std::path::Path>) -> Result<TlsConnector, MonitorError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let unusable = |e: String| MonitorError::Url(format!("--ca {}: {e}", path.display()));
            let pem = std::fs::read(path).map_err(|e| unusable(e.to_string()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| unusable(format!("not PEM: {e}")))?;
                roots.add(cert).map_err(|e| unusable(e.to_string()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    if roots.is_empty() {
        return Err(MonitorError::Url(
            "no trusted root certificates: give the server's CA with --ca FILE".to_owned(),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| MonitorError::Url(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}
