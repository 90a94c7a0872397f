//! `GET /metrics`: Prometheus's text format, from the `prometheus` crate's registry.
//!
//! Every series is bounded: decisions are labelled by the configured policies (at most
//! 4,096, the most a config file may name), and a policy's series go when a reload removes
//! it) plus one `inline` label for every client-chosen policy; errors by the store error's kind.

use std::time::SystemTime;

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// The label of decisions under an inline (client-chosen) policy.
pub const INLINE: &str = "inline";

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    decisions: IntCounterVec,
    /// Every store call's duration.
    pub store_latency: Histogram,
    store_errors: IntCounterVec,
    /// Requests the fail policy answered because the store failed.
    pub fail_policy_decisions: IntCounter,
    reloads: IntCounterVec,
    last_reload: Gauge,
    /// Every listener's connections.
    pub connections: ConnectionMetrics,
    auth_failures: IntCounterVec,
    auth_blocked: IntCounterVec,
}

/// Connections by listener (`http`, `grpc`, `resp`, `admin`).
pub struct ConnectionMetrics {
    /// Open now.
    pub open: IntGaugeVec,
    /// The listener's `max_connections`.
    pub max: IntGaugeVec,
    /// Accepted, refused ones included.
    pub accepted: IntCounterVec,
    /// Refused for being over a cap, by the cap (`max_connections`, `max_connections_per_ip`).
    pub refused: IntCounterVec,
    /// Failed accepts.
    pub accept_errors: IntCounterVec,
    /// Closed for staying silent or idle too long, or stalling a request.
    pub timed_out: IntCounterVec,
}

impl ConnectionMetrics {
    fn new() -> Result<ConnectionMetrics, prometheus::Error> {
        let by_listener =
            |name: &str, help: &str| IntCounterVec::new(Opts::new(name, help), &["listener"]);
        Ok(ConnectionMetrics {
            open: IntGaugeVec::new(
                Opts::new("tollgate_connections", "Connections open now, by listener."),
                &["listener"],
            )?,
            max: IntGaugeVec::new(
                Opts::new(
                    "tollgate_connections_max",
                    "The most connections a listener holds open at once (max_connections).",
                ),
                &["listener"],
            )?,
            accepted: by_listener(
                "tollgate_connections_total",
                "Connections accepted, by listener (those refused over a cap included).",
            )?,
            refused: IntCounterVec::new(
                Opts::new(
                    "tollgate_connections_refused_total",
                    "Connections refused for being over a cap, by listener and cap.",
                ),
                &["listener", "cap"],
            )?,
            accept_errors: by_listener(
                "tollgate_accept_errors_total",
                "Failed accepts (out of file descriptors, most often), by listener.",
            )?,
            timed_out: by_listener(
                "tollgate_connections_timed_out_total",
                "Connections closed for staying silent or idle too long, or stalling a request.",
            )?,
        })
    }

    fn collectors(&self) -> [Box<dyn prometheus::core::Collector>; 6] {
        [
            Box::new(self.open.clone()),
            Box::new(self.max.clone()),
            Box::new(self.accepted.clone()),
            Box::new(self.refused.clone()),
            Box::new(self.accept_errors.clone()),
            Box::new(self.timed_out.clone()),
        ]
    }
}

/// A policy's decision counters, looked up once per config rather than once per decision.
#[derive(Clone)]
pub struct PolicyCounters {
    /// Allowed.
    pub allowed: IntCounter,
    /// Denied.
    pub denied: IntCounter,
    /// Would have been denied, but the policy is in shadow mode.
    pub shadow_denied: IntCounter,
    /// Not decided: the store failed and the fail policy is to deny, or the check was refused.
    pub error: IntCounter,
}

impl Metrics {
    /// The metrics, registered.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let decisions = IntCounterVec::new(
            Opts::new(
                "tollgate_decisions_total",
                "Decisions by policy and outcome (allowed, denied, shadow_denied, error).",
            ),
            &["policy", "outcome"],
        )?;
        let store_latency = Histogram::with_opts(
            HistogramOpts::new(
                "tollgate_store_call_duration_seconds",
                "How long each call to the store took, fail policy included.",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                0.1, 0.25, 0.5, 1.0,
            ]),
        )?;
        let store_errors = IntCounterVec::new(
            Opts::new(
                "tollgate_store_errors_total",
                "Store calls that failed, by kind (timeout, unavailable, full, incompatible).",
            ),
            &["kind"],
        )?;
        let fail_policy_decisions = IntCounter::new(
            "tollgate_fail_policy_decisions_total",
            "Requests answered by the fail policy (allow or local) because the store failed.",
        )?;
        let reloads = IntCounterVec::new(
            Opts::new(
                "tollgate_config_reloads_total",
                "Config reloads by result (success, failure).",
            ),
            &["result"],
        )?;
        let last_reload = Gauge::new(
            "tollgate_config_last_reload_success_timestamp_seconds",
            "When the config in force was loaded, in seconds since the UNIX epoch.",
        )?;
        let connections = ConnectionMetrics::new()?;
        let auth_failures = IntCounterVec::new(
            Opts::new(
                "tollgate_auth_failures_total",
                "Requests refused for want of a valid token (none, or a wrong one), by front end \
                 (http, grpc, resp).",
            ),
            &["frontend"],
        )?;
        let auth_blocked = IntCounterVec::new(
            Opts::new(
                "tollgate_auth_blocked_total",
                "Requests refused because their address failed authentication too often, by \
                 front end (http, grpc, resp).",
            ),
            &["frontend"],
        )?;
        let build_info = IntGaugeVec::new(
            Opts::new("tollgate_build_info", "The running version; always 1."),
            &["version"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        for c in [
            Box::new(decisions.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(store_latency.clone()),
            Box::new(store_errors.clone()),
            Box::new(fail_policy_decisions.clone()),
            Box::new(reloads.clone()),
            Box::new(last_reload.clone()),
            Box::new(auth_failures.clone()),
            Box::new(auth_blocked.clone()),
            Box::new(crate::files::refusals().clone()),
            Box::new(build_info),
        ]
        .into_iter()
        .chain(connections.collectors())
        {
            registry.register(c)?;
        }
        // Both results show from the start, so a rate over them is defined before any reload.
        for result in ["success", "failure"] {
            reloads.with_label_values(&[result]);
        }
        Ok(Metrics {
            registry,
            decisions,
            store_latency,
            store_errors,
            fail_policy_decisions,
            reloads,
            last_reload,
            connections,
            auth_failures,
            auth_blocked,
        })
    }

    /// The counter of failed authentications on `frontend`; it shows from the start at 0.
    pub fn auth_failures(&self, frontend: &str) -> IntCounter {
        self.auth_failures.with_label_values(&[frontend])
    }

    /// The count of requests of `frontend` refused because their address is blocked.
    pub fn auth_blocked(&self, frontend: &str) -> IntCounter {
        self.auth_blocked.with_label_values(&[frontend])
    }

    /// Adds `collector` to what a scrape gets (a front end's own series).
    pub fn register(
        &self,
        collector: Box<dyn prometheus::core::Collector>,
    ) -> Result<(), prometheus::Error> {
        self.registry.register(collector)
    }

    /// The counters of the policy labelled `policy`.
    pub fn policy(&self, policy: &str) -> PolicyCounters {
        let counter = |outcome: &str| self.decisions.with_label_values(&[policy, outcome]);
        PolicyCounters {
            allowed: counter("allowed"),
            denied: counter("denied"),
            shadow_denied: counter("shadow_denied"),
            error: counter("error"),
        }
    }

    /// Drops the series of a policy a reload removed.
    pub fn forget_policy(&self, policy: &str) {
        for outcome in ["allowed", "denied", "shadow_denied", "error"] {
            let _ = self.decisions.remove_label_values(&[policy, outcome]);
        }
    }

    /// Counts a store failure of `kind`.
    pub fn store_error(&self, kind: tollgate::ErrorKind) {
        self.store_errors.with_label_values(&[kind.as_str()]).inc();
    }

    /// Store calls that failed since start, of every kind.
    pub fn store_errors_total(&self) -> u64 {
        use prometheus::core::Collector;
        let families = self.store_errors.collect();
        families
            .iter()
            .flat_map(|f| f.get_metric())
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    }

    /// Counts a reload, and stamps the time of a good one.
    pub fn reloaded(&self, ok: bool) {
        if ok {
            self.reloads.with_label_values(&["success"]).inc();
            self.stamp_config();
        } else {
            self.reloads.with_label_values(&["failure"]).inc();
        }
    }

    /// Stamps now as the time the config in force was loaded.
    pub fn stamp_config(&self) {
        // Wall-clock time is what this gauge means: operators compare it with the file's.
        #[allow(clippy::disallowed_methods)]
        let now = SystemTime::now();
        let since_epoch = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        self.last_reload.set(since_epoch.as_secs_f64());
    }

    /// The text a scrape gets.
    pub fn render(&self) -> String {
        let mut out = Vec::with_capacity(8 * 1024);
        // Encoding into memory fails only for a metric the registry itself refused.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}
