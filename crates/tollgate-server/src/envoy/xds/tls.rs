//! TLS to the management server (`[grpc.xds.tls]`): the server's certificate checked against
//! the CA file (or the system's roots), and tollgate's client certificate offered when one is
//! given (mutual TLS, as Envoy Gateway's control plane requires). The files are read through
//! the server's one file reader, at start to refuse a config that can never work, and again
//! at every connection so that a rotated certificate is picked up.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::settings::XdsTls;
use crate::files::Kind;

/// Why the TLS settings cannot be used: the key (`grpc.xds.tls.cert`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsTlsError {
    /// The `[grpc.xds.tls]` key at fault.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for XdsTlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// The client config `tls` describes, offering HTTP/2 (gRPC) in ALPN.
pub fn client_config(tls: &XdsTls) -> Result<ClientConfig, XdsTlsError> {
    let fail = |key: &'static str| move |message: String| XdsTlsError { key, message };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match &tls.ca {
        Some(path) => {
            let pem = crate::files::read(path, Kind::ClientCa)
                .map_err(|e| fail("grpc.xds.tls.ca")(e.to_string()))?;
            for cert in certificates(&pem).map_err(fail("grpc.xds.tls.ca"))? {
                roots.add(cert).map_err(|e| {
                    fail("grpc.xds.tls.ca")(format!("a CA certificate is unusable: {e}"))
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(fail("grpc.xds.tls.ca")(
                    "no CA file is given and the system has no trusted roots; name the \
                     management server's CA"
                        .to_owned(),
                ));
            }
        }
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail("grpc.xds.tls")(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match (&tls.cert, &tls.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let pem = crate::files::read(cert, Kind::Certificate)
                .map_err(|e| fail("grpc.xds.tls.cert")(e.to_string()))?;
            let chain = certificates(&pem).map_err(fail("grpc.xds.tls.cert"))?;
            let pem = crate::files::read(key, Kind::Key)
                .map_err(|e| fail("grpc.xds.tls.key")(e.to_string()))?;
            let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
                fail("grpc.xds.tls.key")(format!("the file holds no usable private key: {e}"))
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                fail("grpc.xds.tls.key")(format!("the certificate and key do not go together: {e}"))
            })?
        }
        (Some(_), None) => {
            return Err(fail("grpc.xds.tls.key")(
                "a client certificate needs its key".to_owned(),
            ));
        }
        (None, Some(_)) => {
            return Err(fail("grpc.xds.tls.cert")(
                "a client key needs its certificate".to_owned(),
            ));
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the file is not PEM: {e}"))?;
    if certs.is_empty() {
        return Err("the file holds no certificate".to_owned());
    }
    Ok(certs)
}
