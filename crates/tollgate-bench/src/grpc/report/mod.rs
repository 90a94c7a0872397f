//! What a gRPC run measured (decisions/s and latency per store, in plaintext and over TLS,
//! with tracing off and on, the stores not measured) and the medians across rounds.

mod document;
mod tracing;

use crate::report::{Medians, TlsCost, median};

/// One run against one store.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcRun {
    /// The store the server decided on.
    pub store: String,
    /// Whether the calls went over TLS (`[grpc.tls]`).
    pub tls: bool,
    /// Its round.
    pub round: usize,
    /// Calls answered per second.
    pub decisions_per_sec: f64,
    /// Median latency of a call, in microseconds.
    pub p50_us: f64,
    /// 99th percentile, in microseconds.
    pub p99_us: f64,
    /// Calls answered OK.
    pub allowed: u64,
    /// Calls that failed.
    pub errors: u64,
    /// With `[tracing]` on, its sampling rate (every span exported over OTLP/HTTP to a
    /// receiver that discards it); `None`: tracing off.
    pub tracing: Option<f64>,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcReport {
    /// Seconds per run.
    pub seconds: u64,
    /// Calls in flight.
    pub concurrency: usize,
    /// HTTP/2 connections.
    pub connections: usize,
    /// Distinct descriptor values.
    pub keys: usize,
    /// What the TLS runs' handshake settled on (protocol, cipher suite, key exchange, ALPN);
    /// `None` when none ran.
    pub tls: Option<String>,
    /// Every run, in order.
    pub runs: Vec<GrpcRun>,
    /// Stores not measured, and why.
    pub missing: Vec<(String, String)>,
}

impl GrpcRun {
    /// What it ran against, as the report names it: `memory`, `memory over TLS`,
    /// `memory traced at 0.01`.
    pub fn target(&self) -> String {
        target(&self.store, self.tls, self.tracing)
    }
}

/// `store`, and `over TLS` when `tls`, `traced at RATE` when `tracing`.
pub(crate) fn target(store: &str, tls: bool, tracing: Option<f64>) -> String {
    let mut name = store.to_owned();
    if tls {
        name.push_str(" over TLS");
    }
    if let Some(rate) = tracing {
        name.push_str(&format!(" traced at {rate}"));
    }
    name
}

impl GrpcReport {
    /// The stores measured, whether over TLS, and at which sampling rate traced, in the
    /// order first run.
    pub fn targets(&self) -> Vec<(&str, bool, Option<f64>)> {
        let mut targets: Vec<(&str, bool, Option<f64>)> = Vec::new();
        for run in &self.runs {
            let target = (run.store.as_str(), run.tls, run.tracing);
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
        targets
    }

    fn runs_of(
        &self,
        store: &str,
        tls: bool,
        tracing: Option<f64>,
    ) -> impl Iterator<Item = &GrpcRun> {
        self.runs
            .iter()
            .filter(move |r| r.store == store && r.tls == tls && r.tracing == tracing)
    }

    /// The median decisions/s, p50 and p99 (µs) of `store`'s runs, over TLS or not, traced
    /// at `tracing` or not.
    pub fn median(&self, store: &str, tls: bool, tracing: Option<f64>) -> Option<Medians> {
        let runs: Vec<&GrpcRun> = self.runs_of(store, tls, tracing).collect();
        Some(Medians {
            per_sec: median(runs.iter().map(|r| r.decisions_per_sec).collect())?,
            p50: median(runs.iter().map(|r| r.p50_us).collect())?,
            p99: median(runs.iter().map(|r| r.p99_us).collect())?,
        })
    }

    /// `store` over TLS beside itself in plaintext (both untraced); `None` unless both ran.
    pub fn tls_cost(&self, store: &str) -> Option<TlsCost> {
        Some(TlsCost {
            plaintext: self.median(store, false, None)?,
            tls: self.median(store, true, None)?,
            round_ratios: self
                .runs_of(store, true, None)
                .filter_map(|tls| {
                    let plain = self
                        .runs_of(store, false, None)
                        .find(|p| p.round == tls.round)?;
                    (plain.decisions_per_sec > 0.0)
                        .then(|| tls.decisions_per_sec / plain.decisions_per_sec)
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_missing_stores_are_reported() {
        let run = |store: &str, rate: f64| GrpcRun {
            store: store.to_owned(),
            tls: false,
            round: 1,
            decisions_per_sec: rate,
            p50_us: 100.0,
            p99_us: 900.0,
            allowed: 10,
            errors: 0,
            tracing: None,
        };
        let report = GrpcReport {
            seconds: 1,
            concurrency: 64,
            connections: 4,
            keys: 10,
            tls: None,
            runs: vec![run("memory", 10.0), run("memory", 30.0), run("redis", 5.0)],
            missing: vec![("postgres".into(), "no database given".into())],
        };
        assert_eq!(
            report.median("memory", false, None),
            Some(Medians {
                per_sec: 20.0,
                p50: 100.0,
                p99: 900.0
            })
        );
        assert_eq!(report.tls_cost("memory"), None);
        let written = report.report();
        let md = written.to_markdown();
        assert!(md.contains("| memory | 20 | 100 | 900 | 0 |"), "{md}");
        assert!(
            md.contains("| postgres | not measured: no database given |"),
            "{md}"
        );
        assert!(written.to_svg().unwrap().contains("decisions/s"));
    }

    #[test]
    fn a_store_over_tls_is_compared_with_itself_in_plaintext_round_by_round() {
        let run = |tls: bool, round: usize, rate: f64, p99_us: f64| GrpcRun {
            store: "memory".to_owned(),
            tls,
            round,
            decisions_per_sec: rate,
            p50_us: p99_us / 2.0,
            p99_us,
            allowed: 10,
            errors: 0,
            tracing: None,
        };
        let report = GrpcReport {
            seconds: 1,
            concurrency: 64,
            connections: 4,
            keys: 10,
            tls: Some("TLSv1_3, TLS13_AES_256_GCM_SHA384, X25519, ALPN h2".into()),
            runs: vec![
                run(false, 1, 40_000.0, 2_000.0),
                run(true, 1, 30_000.0, 3_000.0),
                run(true, 2, 36_000.0, 2_400.0),
                run(false, 2, 40_000.0, 2_000.0),
            ],
            missing: Vec::new(),
        };
        assert_eq!(
            report.targets(),
            [("memory", false, None), ("memory", true, None)]
        );
        let cost = report.tls_cost("memory").unwrap();
        assert!((cost.throughput() - 0.825).abs() < 1e-12, "{cost:?}");
        assert!((cost.p99() - 1.35).abs() < 1e-12, "{cost:?}");
        assert_eq!(cost.round_ratios, [0.75, 0.9]);
        let md = report.report().to_markdown();
        assert!(md.contains("| 2 | memory over TLS | 36,000 |"), "{md}");
        assert!(
            md.contains("| memory | 40,000 | 33,000 | 0.825 | 0.750, 0.900 | 1.350 | 1.350 |"),
            "{md}"
        );
        assert!(md.contains("ALPN h2"), "{md}");
    }
}
