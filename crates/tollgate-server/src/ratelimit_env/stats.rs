//! The statistics sinks (`USE_STATSD`, `USE_DOG_STATSD`, `USE_PROMETHEUS`, ...): none of them
//! can change a decision, so each is checked as upstream checks it and otherwise ignored with
//! a note; tollgate's own metrics are on `/metrics` of the admin port (`DEBUG_PORT`).

use super::{Env, EnvError, Notes, ignored};

/// Refuses what upstream refuses (more than one sink), and notes the rest.
pub(super) fn stats(env: &Env, notes: &mut Notes) -> Result<(), EnvError> {
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
    let why = "tollgate sends no statsd and serves no statsd-named Prometheus exporter; its \
               metrics are on /metrics of the admin port (DEBUG_PORT), and no metric changes a \
               decision";
    if !disabled {
        for (name, on) in sinks {
            if on {
                notes.push(format!("{name}=true is ignored: {why}"));
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
            "PROMETHEUS_ADDR",
            "PROMETHEUS_PATH",
            "PROMETHEUS_MAPPER_YAML",
            "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        ],
        why,
        notes,
    );
    Ok(())
}
