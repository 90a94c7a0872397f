//! Tracing (`TRACING_*`, `OTEL_EXPORTER_OTLP_ENDPOINT`) as `[tracing]`, written only when
//! `TRACING_ENABLED` is true.

use super::doc::{Doc, Value};
use super::{Env, EnvError, Notes, ignored};

/// `[tracing]`.
pub(super) fn tracing(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<(), EnvError> {
    const T: &str = "tracing";
    const NAMES: [&str; 5] = [
        "TRACING_SERVICE_NAME",
        "TRACING_SERVICE_NAMESPACE",
        "TRACING_SERVICE_INSTANCE_ID",
        "TRACING_EXPORTER_PROTOCOL",
        "TRACING_SAMPLING_RATE",
    ];
    if !env.bool("TRACING_ENABLED")? {
        ignored(env, &NAMES, "TRACING_ENABLED is not true", notes);
        return Ok(());
    }
    doc.set(T, "enabled", Value::Bool(true), &["TRACING_ENABLED"]);
    let protocol = env.string("TRACING_EXPORTER_PROTOCOL")?;
    let protocol = match protocol.to_ascii_lowercase().as_str() {
        // Upstream takes an empty value as its default, HTTP.
        "http" | "" => "http",
        "grpc" => "grpc",
        _ => {
            return Err(EnvError::new(
                "TRACING_EXPORTER_PROTOCOL",
                format!("{protocol:?} is not an exporter protocol: http or grpc"),
            ));
        }
    };
    doc.set(
        T,
        "protocol",
        Value::Str(protocol.to_owned()),
        &["TRACING_EXPORTER_PROTOCOL"],
    );
    // Read by the OpenTelemetry exporter itself upstream; unset, the protocol's default. The
    // traces-only variable, when set, takes precedence there: left to the exporter, which
    // reads it (and checks it at start) the same way.
    let traces_only = env
        .raw("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")?
        .is_some_and(|v| !v.is_empty());
    if let Some(endpoint) = env.raw("OTEL_EXPORTER_OTLP_ENDPOINT")?
        && !endpoint.is_empty()
        && !traces_only
    {
        doc.set(
            T,
            "endpoint",
            Value::Str(endpoint.to_owned()),
            &["OTEL_EXPORTER_OTLP_ENDPOINT"],
        );
    }
    for (name, key) in [
        ("TRACING_SERVICE_NAME", "service_name"),
        ("TRACING_SERVICE_NAMESPACE", "service_namespace"),
        ("TRACING_SERVICE_INSTANCE_ID", "service_instance_id"),
    ] {
        doc.set(T, key, Value::Str(env.string(name)?), &[name]);
    }
    let rate = env.float("TRACING_SAMPLING_RATE")?;
    if rate.is_nan() {
        return Err(EnvError::new(
            "TRACING_SAMPLING_RATE",
            "NaN is not a share of traces: give a number from 0 to 1",
        ));
    }
    // Upstream's ratio sampler samples everything from 1 up and nothing from 0 down; the
    // config's key takes the same meaning within its bounds.
    doc.set(
        T,
        "sampling_rate",
        Value::Float(rate.clamp(0.0, 1.0)),
        &["TRACING_SAMPLING_RATE"],
    );
    Ok(())
}
