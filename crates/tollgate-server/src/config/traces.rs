//! `[tracing]` as the file sets it: the OTLP exporter's protocol and endpoint, the resource's
//! names, the sampling rate.

use super::file::TracingFile;
use super::policies::FaultAt;
use super::{ConfigError, checked};
use crate::traces::{TracingProtocol, receiver};

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
    let endpoint = checked(
        file.endpoint,
        "tracing.endpoint",
        &|text: &String| receiver(text),
        refuse,
    )?;
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
