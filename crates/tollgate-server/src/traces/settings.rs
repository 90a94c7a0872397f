//! What `[tracing]` runs with, and the resource every span is reported under.

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use serde::Deserialize;

use super::TracesError;

/// `[tracing] service_name`'s default (envoyproxy/ratelimit's is `RateLimit`, which its
/// environment's `TRACING_SERVICE_NAME` keeps).
pub const DEFAULT_SERVICE_NAME: &str = "tollgate";

/// The schema of the resource's attribute names (upstream reports under semconv 1.7.0's).
const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.7.0";

/// How spans are sent (`[tracing] protocol`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TracingProtocol {
    /// OTLP/HTTP with a protobuf body, to `ENDPOINT/v1/traces`.
    #[default]
    Http,
    /// OTLP/gRPC.
    Grpc,
}

/// `[tracing]`, resolved (present only when `enabled`).
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    /// How spans are sent.
    pub protocol: TracingProtocol,
    /// The collector's base URL (`http://host:port`); `None`: the OpenTelemetry variables,
    /// else the protocol's default.
    pub endpoint: Option<String>,
    /// `service.name`.
    pub service_name: String,
    /// `service.namespace`.
    pub service_namespace: String,
    /// `service.instance.id`; empty: a random UUID, drawn at start.
    pub service_instance_id: String,
    /// The fraction of root spans sampled, 0 to 1; a caller's sampled flag decides for its
    /// children.
    pub sampling_rate: f64,
}

/// The resource: `service.name`, `service.namespace` and `service.instance.id`, as upstream
/// reports them (the namespace even when empty).
pub(super) fn resource(settings: &TracingSettings) -> Result<Resource, TracesError> {
    let instance = if settings.service_instance_id.is_empty() {
        random_uuid()?
    } else {
        settings.service_instance_id.clone()
    };
    Ok(Resource::builder_empty()
        .with_schema_url(
            [
                KeyValue::new("service.name", settings.service_name.clone()),
                KeyValue::new("service.namespace", settings.service_namespace.clone()),
                KeyValue::new("service.instance.id", instance),
            ],
            SCHEMA_URL,
        )
        .build())
}

/// A random (version 4) UUID, as upstream draws one for an unset instance id.
fn random_uuid() -> Result<String, TracesError> {
    use ring::rand::{SecureRandom as _, SystemRandom};
    let mut b = [0u8; 16];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| TracesError::Random)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// An OTLP receiver's URL, as `[tracing] endpoint` or the SDKs' variables give it: `http://`
/// with a host and no query (the exporter speaks no TLS).
pub fn receiver(text: &str) -> Result<String, String> {
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
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_random_instance_id_is_a_version_4_uuid() {
        let id = random_uuid().unwrap();
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{id}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(id, random_uuid().unwrap());
    }
}
