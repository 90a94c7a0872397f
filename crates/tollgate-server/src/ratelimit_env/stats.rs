//! The statistics sinks (`USE_STATSD`, `USE_DOG_STATSD`, `USE_PROMETHEUS`, ...): upstream's
//! rule that one sink at most is on; `USE_PROMETHEUS` as `[grpc.prometheus]` (its exporter,
//! with `PROMETHEUS_ADDR`, `PROMETHEUS_PATH` and `PROMETHEUS_MAPPER_YAML`); the statsd sinks,
//! which cannot change a decision, ignored with a note (tollgate sends no statsd; its own
//! metrics are on `/metrics` of the admin port, `DEBUG_PORT`).

use super::doc::{Doc, Value};
use super::{Env, EnvError, Notes, ignored};

/// Refuses what upstream refuses (more than one sink), maps the Prometheus exporter, and
/// notes the rest.
pub(super) fn stats(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<(), EnvError> {
    let disabled = env.bool("DISABLE_STATS")?;
    let sinks = [
        ("USE_DOG_STATSD", env.bool("USE_DOG_STATSD")?),
        ("USE_STATSD", env.bool("USE_STATSD")?),
        ("USE_PROMETHEUS", env.bool("USE_PROMETHEUS")?),
    ];
    let on: Vec<&str> = sinks.iter().filter(|s| s.1).map(|s| s.0).collect();
    if !disabled && on.len() > 1 {
        return Err(EnvError::new(
            &on.join(", "),
            "are true together, and upstream refuses more than one stats sink at the same \
             time: set one of USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS (USE_STATSD is true \
             unless set to false)",
        ));
    }
    let statsd = "tollgate sends no statsd; its metrics are on /metrics of the admin port \
                  (DEBUG_PORT), and no metric changes a decision";
    if !disabled {
        for (name, on) in &sinks[..2] {
            if *on {
                notes.push(format!("{name}=true is ignored: {statsd}"));
            }
        }
    }
    ignored(
        env,
        &[
            "USE_DOG_STATSD_MOGRIFIERS",
            "STATSD_HOST",
            "STATSD_PORT",
            "EXTRA_TAGS",
            "STATS_FLUSH_INTERVAL",
        ],
        statsd,
        notes,
    );
    let exporter = [
        "PROMETHEUS_ADDR",
        "PROMETHEUS_PATH",
        "PROMETHEUS_MAPPER_YAML",
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    ];
    if disabled || !sinks[2].1 {
        let why = if disabled {
            "DISABLE_STATS is true, and upstream then serves no exporter"
        } else {
            "USE_PROMETHEUS is not true"
        };
        ignored(env, &exporter, why, notes);
        return Ok(());
    }
    prometheus(env, doc, notes)
}

/// `[grpc.prometheus]`, from `PROMETHEUS_*`.
fn prometheus(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<(), EnvError> {
    let table = "grpc.prometheus";
    let addr = env.string("PROMETHEUS_ADDR")?;
    // Go listens on every interface for an empty host; upstream takes `:9090` for nothing.
    let listen = match addr.rsplit_once(':') {
        _ if addr.is_empty() => "0.0.0.0:9090".to_owned(),
        Some(("", port)) => format!("0.0.0.0:{port}"),
        _ => addr,
    };
    doc.set(
        table,
        "listen",
        Value::Str(listen),
        &["PROMETHEUS_ADDR", "USE_PROMETHEUS"],
    );
    let path = env.string("PROMETHEUS_PATH")?;
    let path = if path.is_empty() {
        "/metrics".to_owned()
    } else {
        path
    };
    doc.set(table, "path", Value::Str(path), &["PROMETHEUS_PATH"]);
    let mapper = env.string("PROMETHEUS_MAPPER_YAML")?;
    if !mapper.is_empty() {
        // Go opens a relative path from the working directory.
        let absolute = std::path::absolute(&mapper).map_err(|e| {
            EnvError::new(
                "PROMETHEUS_MAPPER_YAML",
                format!("{mapper:?} cannot be made absolute: {e}"),
            )
        })?;
        doc.set(
            table,
            "mapper",
            Value::Str(absolute.to_string_lossy().into_owned()),
            &["PROMETHEUS_MAPPER_YAML"],
        );
    }
    if env.bool("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS")? {
        notes.push(
            "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true is ignored: it changes the scale of \
             upstream's ratelimit_server.*.response_time timer alone, which tollgate does not \
             produce"
                .to_owned(),
        );
    }
    Ok(())
}
