//! TLS of the store's own for `rediss://` URLs ([`RedisTls`]): a CA to trust instead of the
//! system's roots, a client certificate for a Redis that asks for one (`tls-auth-clients yes`),
//! and the certificate's host name left unchecked while its chain still is.

use std::fmt;

use redis::{ClientTlsConfig, TlsCertificates};

use crate::StoreError;

/// TLS settings beyond the URL's `rediss://` scheme, for
/// [`RedisStoreBuilder::tls`](super::RedisStoreBuilder::tls).
///
/// ```
/// use tollgate::store::redis::RedisTls;
/// # fn files() -> (Vec<u8>, Vec<u8>, Vec<u8>) { (vec![], vec![], vec![]) }
/// let (ca, cert, key) = files(); // PEM, as read from their files
/// let tls = RedisTls::new().ca_pem(ca).client_pem(cert, key);
/// # drop(tls);
/// ```
#[derive(Clone, Default)]
pub struct RedisTls {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
    skip_hostname_verification: bool,
}

impl RedisTls {
    /// No CA of its own (the system's roots), no client certificate, host names checked.
    pub fn new() -> RedisTls {
        RedisTls::default()
    }

    /// Trusts the CA certificates of `pem` (PEM), and only them.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> RedisTls {
        self.ca = Some(pem.into());
        self
    }

    /// Presents the certificate chain `cert` with its private key `key` (both PEM).
    pub fn client_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> RedisTls {
        self.client = Some((cert.into(), key.into()));
        self
    }

    /// Accepts a server certificate whatever host name it names, its chain still checked
    /// (envoyproxy/ratelimit's `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`). One Redis only: a
    /// cluster's client has no such setting.
    pub fn skip_hostname_verification(mut self, on: bool) -> RedisTls {
        self.skip_hostname_verification = on;
        self
    }

    /// Whether a CA of its own is given (then the system's roots are not needed).
    pub(super) fn has_ca(&self) -> bool {
        self.ca.is_some()
    }

    /// Whether host names go unchecked.
    pub(super) fn skips_hostnames(&self) -> bool {
        self.skip_hostname_verification
    }

    /// The certificates as the Redis client takes them, each checked to hold a PEM block.
    pub(super) fn certificates(&self) -> Result<TlsCertificates, StoreError> {
        let pem = |what: &str, bytes: &[u8]| {
            if bytes.windows(11).any(|w| w == b"-----BEGIN ") {
                Ok(())
            } else {
                Err(StoreError::Config(format!(
                    "the Redis TLS {what} holds no PEM block (-----BEGIN ...)"
                )))
            }
        };
        if let Some(ca) = &self.ca {
            pem("CA", ca)?;
        }
        if let Some((cert, key)) = &self.client {
            pem("client certificate", cert)?;
            pem("client key", key)?;
        }
        Ok(TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
        })
    }
}

impl fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A private key is never printed.
        f.debug_struct("RedisTls")
            .field("ca", &self.ca.is_some())
            .field("client_certificate", &self.client.is_some())
            .field(
                "skip_hostname_verification",
                &self.skip_hostname_verification,
            )
            .finish()
    }
}

/// A client of the one Redis at `url` using `tls`.
pub(super) fn client(
    url: impl redis::IntoConnectionInfo,
    tls: &RedisTls,
) -> Result<redis::Client, redis::RedisError> {
    let certificates = tls.certificates().map_err(|e| {
        redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "unusable TLS files",
            e.to_string(),
        ))
    })?;
    let client = redis::Client::build_with_tls(url, certificates)?;
    if !tls.skip_hostname_verification {
        return Ok(client);
    }
    let info = client.get_connection_info().clone();
    let mut addr = info.addr().clone();
    addr.set_danger_accept_invalid_hostnames(true);
    redis::Client::open(info.set_addr(addr))
}
