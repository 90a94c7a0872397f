//! `[tracing]` as the file sets it: the OTLP exporter's protocol and endpoint, the resource's
//! names, the sampling rate.

use super::file::TracingFile;
use super::policies::FaultAt;
use super::{ConfigError, checked};
use crate::traces::TracingProtocol;

/// What `[tracing]` sets; `None` where it is silent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TracingConfig {
    /// `enabled`.
    pub enabled: Option<bool>,
    /// `protocol`.
    pub protocol: Option<TracingProtocol>,
    /// `endpoint`, checked to be an `http://` URL with a host.
    pub endpoint: Option<String>,
    /// `service_name`.
    pub service_name: Option<String>,
    /// `service_namespace`.
    pub service_namespace: Option<String>,
    /// `service_instance_id`.
    pub service_instance_id: Option<String>,
    /// `sampling_rate`, 0 to 1.
    pub sampling_rate: Option<f64>,
}

/// `[tracing]`, checked.
pub(super) fn given(file: TracingFile, refuse: &FaultAt<'_>) -> Result<TracingConfig, ConfigError> {
    let endpoint = checked(file.endpoint, "tracing.endpoint", &endpoint, refuse)?;
    let sampling_rate = checked(
        file.sampling_rate,
        "tracing.sampling_rate",
        &|rate: &f64| {
            if (0.0..=1.0).contains(rate) {
                Ok(*rate)
            } else {
                Err(format!(
                    "must be from 0 (no root span sampled) to 1 (every one), got {rate}"
                ))
            }
        },
        refuse,
    )?;
    Ok(TracingConfig {
        enabled: file.enabled,
        protocol: file.protocol,
        endpoint,
        service_name: file.service_name,
        service_namespace: file.service_namespace,
        service_instance_id: file.service_instance_id,
        sampling_rate,
    })
}

/// An OTLP receiver's base URL: `http://host:port`, with no query.
fn endpoint(text: &String) -> Result<String, String> {
    let uri: http::Uri = text.parse().map_err(|e| {
        format!("{text:?} is not a URL ({e}); write one such as \"http://otel-collector:4318\"")
    })?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "{text:?}: TLS to the receiver is not supported; send to a collector on the \
                 same host or network over http://"
            ));
        }
        _ => {
            return Err(format!(
                "{text:?} needs the scheme http://, as in \"http://otel-collector:4318\""
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{text:?} has no host"));
    }
    if uri.query().is_some() {
        return Err(format!("{text:?}: a receiver's URL takes no query"));
    }
    Ok(text.clone())
}
