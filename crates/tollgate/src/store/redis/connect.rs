//! What [`RedisStoreBuilder::build`](super::RedisStoreBuilder::build) checks before it hands
//! out a store, so that settings that can never work are a [`StoreError::Config`] there rather
//! than an outage the fail policy would answer for good: host names that do not resolve, no
//! root certificates to check a `rediss://` server's with, and what one connection tried now
//! finds (a certificate not trusted, a password or DB index refused). A Redis that is merely
//! down is no error here: the store connects when it is back.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};

use super::error;
use crate::StoreError;

/// The host names of `infos` resolve, one of them at least (a Unix socket needs none).
pub(super) async fn hosts_resolve(
    infos: &[ConnectionInfo],
    within: Duration,
) -> Result<(), StoreError> {
    let mut hosts = Vec::with_capacity(infos.len());
    for info in infos {
        match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                hosts.push((host.clone(), *port));
            }
            _ => return Ok(()),
        }
    }
    crate::store::reach::some_host_resolves("Redis", &hosts, within).await
}

/// Whether any of `infos` is a `rediss://` URL.
pub(super) fn any_tls(infos: &[ConnectionInfo]) -> bool {
    infos
        .iter()
        .any(|info| matches!(info.addr(), ConnectionAddr::TcpTls { .. }))
}

/// The system's root certificates can be read and hold one at least: the client reads them
/// (`SSL_CERT_FILE` and `SSL_CERT_DIR` first, else the usual places) for each connection, and
/// fails every one when they cannot be read, or trusts no server when there are none.
#[cfg(feature = "redis-tls")]
pub(super) fn trust_roots() -> Result<(), StoreError> {
    let found = rustls_native_certs::load_native_certs();
    let remedy = "install the system's CA certificates (Debian: ca-certificates), or name a \
                  PEM file of them with SSL_CERT_FILE";
    if let Some(e) = found.errors.first() {
        return Err(StoreError::Config(format!(
            "the Redis URL asks for TLS (rediss://), and the root certificates to check the \
             server's with cannot be read ({e}): {remedy}"
        )));
    }
    if found.certs.is_empty() {
        return Err(StoreError::Config(format!(
            "the Redis URL asks for TLS (rediss://), and this system has no root certificate to \
             check the server's with: {remedy}"
        )));
    }
    Ok(())
}

/// Without TLS built in, the client refuses a `rediss://` URL itself.
#[cfg(not(feature = "redis-tls"))]
pub(super) fn trust_roots() -> Result<(), StoreError> {
    Ok(())
}

/// Connects once, within `within`, and keeps nothing: an error that says the settings can
/// never work (a certificate not trusted, a password or DB index refused) is returned; any
/// other (refused, unreachable, slow) is an outage the store outlives, and is not.
pub(super) async fn first_connection(
    client: &redis::Client,
    within: Duration,
) -> Result<(), StoreError> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(within))
        .set_response_timeout(Some(within));
    let connect = client.get_multiplexed_async_connection_with_config(&config);
    match tokio::time::timeout(within, connect).await {
        Ok(Err(e)) => match error::setup_error(e) {
            never @ StoreError::Config(_) => Err(never),
            _ => Ok(()),
        },
        Ok(Ok(_)) | Err(_) => Ok(()),
    }
}
