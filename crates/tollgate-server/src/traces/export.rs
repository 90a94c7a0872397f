//! The OTLP exporter `[tracing]` asks for: OTLP/HTTP with a protobuf body (upstream's default
//! `TRACING_EXPORTER_PROTOCOL`) through hyper, or OTLP/gRPC through tonic.
//!
//! Without `endpoint`, the exporter resolves it as the OpenTelemetry SDKs (and so upstream's Go
//! SDK) do: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`, else
//! `http://localhost:4318` (HTTP) or `http://localhost:4317` (gRPC). It also reads the SDKs'
//! `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_TIMEOUT` (default 10 s: the longest one
//! export may take), and their `_TRACES_` forms.

use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig as _};

use super::{TracingProtocol, TracingSettings};

/// The path OTLP/HTTP serves traces on, under the base endpoint.
const TRACES_PATH: &str = "/v1/traces";

/// The SDKs' variables that name the receiver when `[tracing] endpoint` does not, the first
/// set taking precedence, as the exporter reads them.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The exporter, or why not.
pub(super) fn exporter(settings: &TracingSettings) -> Result<SpanExporter, String> {
    if settings.endpoint.is_none() {
        // The receiver the exporter will take from the environment is checked as the key is:
        // an `https://` one would fail every export, quietly, since it speaks no TLS.
        let chosen = ENDPOINT_VARIABLES.iter().find_map(|name| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (name, v))
        });
        if let Some((name, url)) = chosen {
            super::receiver(&url).map_err(|e| format!("{name}: {e}"))?;
        }
    }
    let builder = SpanExporter::builder();
    let built = match settings.protocol {
        TracingProtocol::Http => {
            let mut http = builder.with_http().with_protocol(Protocol::HttpBinary);
            if let Some(base) = &settings.endpoint {
                // A base endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT is: the signal's path is
                // added to it.
                http = http.with_endpoint(format!("{}{TRACES_PATH}", base.trim_end_matches('/')));
            }
            http.build()
        }
        TracingProtocol::Grpc => {
            let mut grpc = builder.with_tonic();
            if let Some(endpoint) = &settings.endpoint {
                grpc = grpc.with_endpoint(endpoint.clone());
            }
            grpc.build()
        }
    };
    built.map_err(|e| e.to_string())
}
