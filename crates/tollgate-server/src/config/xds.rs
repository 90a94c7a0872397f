//! `[grpc.xds]` checked and resolved: every key refused at its own place when it cannot work
//! (a URL that is not `host:port`, a header gRPC cannot carry, a TLS file that cannot be read
//! or used), and the defaults (envoyproxy/ratelimit's) filled in.

use std::ops::Range;
use std::path::Path;

use toml::Spanned;

use super::file::XdsFile;
use super::policies::FaultAt;
use super::{ConfigError, checked, duration};
use crate::envoy::xds::settings::{
    DEFAULT_BACKOFF, DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_NODE_ID, DEFAULT_RETRY_INTERVAL,
    MAX_MESSAGE_SIZE,
};
use crate::envoy::xds::{Backoff, XdsSettings, XdsTls};

/// The management server when `url` is not given (`CONFIG_GRPC_XDS_SERVER_URL`'s default).
pub(crate) const DEFAULT_URL: &str = "localhost:18000";

/// The settings `[grpc.xds]` gives, and where the table is; `None` when there is none.
pub(super) fn resolve(
    file: Option<Spanned<XdsFile>>,
    dir: &Path,
    refuse: &FaultAt<'_>,
) -> Result<Option<(XdsSettings, Range<usize>)>, ConfigError> {
    let Some(file) = file else {
        return Ok(None);
    };
    let span = file.span();
    let file = file.into_inner();
    let (host, port) = match &file.url {
        Some(url) => XdsSettings::parse_url(url.get_ref())
            .map_err(|e| refuse(Some(url.span()), "grpc.xds.url", e))?,
        None => XdsSettings::parse_url(DEFAULT_URL).map_err(|e| refuse(None, "grpc.xds.url", e))?,
    };
    let node_id = match file.node_id {
        Some(id) if id.get_ref().is_empty() => {
            return Err(refuse(
                Some(id.span()),
                "grpc.xds.node_id",
                "must not be empty: the management server finds tollgate's configs by it"
                    .to_owned(),
            ));
        }
        Some(id) => id.into_inner(),
        None => DEFAULT_NODE_ID.to_owned(),
    };
    let headers_span = file.headers.as_ref().map_or(span.clone(), Spanned::span);
    let mut headers = std::collections::BTreeMap::new();
    for (name, value) in file.headers.map(Spanned::into_inner).unwrap_or_default() {
        let lower = name.to_ascii_lowercase();
        let field = format!("grpc.xds.headers.{name}");
        if lower.ends_with("-bin")
            || tonic::metadata::AsciiMetadataKey::from_bytes(lower.as_bytes()).is_err()
        {
            return Err(refuse(
                Some(headers_span.clone()),
                &field,
                format!(
                    "{name:?} is not a gRPC metadata name (letters, digits, '-', '_', '.'; not ending in -bin)"
                ),
            ));
        }
        if tonic::metadata::AsciiMetadataValue::try_from(value.as_str()).is_err() {
            return Err(refuse(
                Some(headers_span.clone()),
                &field,
                "the value must be visible ASCII (and spaces)".to_owned(),
            ));
        }
        headers.insert(lower, value);
    }
    let max_message_size = checked(
        file.max_message_size,
        "grpc.xds.max_message_size",
        &|n: &u64| match usize::try_from(*n) {
            Ok(n) if (1..=MAX_MESSAGE_SIZE).contains(&n) => Ok(n),
            _ => Err(format!("must be 1 to {MAX_MESSAGE_SIZE} bytes, got {n}")),
        },
        refuse,
    )?
    .unwrap_or(DEFAULT_MAX_MESSAGE_SIZE);
    let retry_interval = checked(
        file.retry_interval,
        "grpc.xds.retry_interval",
        &duration,
        refuse,
    )?
    .unwrap_or(DEFAULT_RETRY_INTERVAL);
    let initial = checked(
        file.backoff_initial,
        "grpc.xds.backoff_initial",
        &duration,
        refuse,
    )?
    .unwrap_or(DEFAULT_BACKOFF.initial);
    let max = checked(file.backoff_max, "grpc.xds.backoff_max", &duration, refuse)?
        .unwrap_or(DEFAULT_BACKOFF.max);
    let factor = checked(
        file.backoff_random_factor,
        "grpc.xds.backoff_random_factor",
        &|f: &f64| {
            if f.is_finite() {
                Ok(*f)
            } else {
                Err(format!("must be a finite number, got {f}"))
            }
        },
        refuse,
    )?
    .unwrap_or(DEFAULT_BACKOFF.factor);
    let tls = match file.tls {
        None => None,
        Some(tls) => {
            let tls_span = tls.span();
            let tls = tls.into_inner();
            let server_name = match tls.server_name {
                Some(name) => {
                    if rustls::pki_types::ServerName::try_from(name.get_ref().as_str()).is_err() {
                        return Err(refuse(
                            Some(name.span()),
                            "grpc.xds.tls.server_name",
                            format!("{:?} is not a DNS name or an IP address", name.get_ref()),
                        ));
                    }
                    Some(name.into_inner())
                }
                None => None,
            };
            let tls = XdsTls {
                ca: tls.ca.map(|p| dir.join(p)),
                cert: tls.cert.map(|p| dir.join(p)),
                key: tls.key.map(|p| dir.join(p)),
                server_name,
            };
            // Read now so that a file that can never work stops the start, naming its key;
            // read again at every connection.
            if let Err(e) = crate::envoy::xds::tls::client_config(&tls) {
                return Err(refuse(Some(tls_span), e.key, e.message));
            }
            Some(tls)
        }
    };
    let settings = XdsSettings {
        host,
        port,
        node_id,
        node_metadata: file.node_metadata,
        headers,
        max_message_size,
        force_start_without_initial_config: file
            .force_start_without_initial_config
            .unwrap_or(false),
        retry_interval,
        backoff: Backoff {
            initial,
            max,
            factor,
            jitter: file.backoff_jitter.unwrap_or(DEFAULT_BACKOFF.jitter),
        },
        tls,
    };
    Ok(Some((settings, span)))
}
