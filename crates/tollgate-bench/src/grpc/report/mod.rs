//! What a gRPC run measured (decisions/s and latency per store, the stores not measured) and
//! the medians across rounds.

mod document;

use crate::report::median;

/// One run against one store.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcRun {
    /// The store the server decided on.
    pub store: String,
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
    /// Every run, in order.
    pub runs: Vec<GrpcRun>,
    /// Stores not measured, and why.
    pub missing: Vec<(String, String)>,
}

impl GrpcReport {
    /// The stores measured, in the order first run.
    pub fn stores(&self) -> Vec<&str> {
        let mut stores: Vec<&str> = Vec::new();
        for run in &self.runs {
            if !stores.contains(&run.store.as_str()) {
                stores.push(&run.store);
            }
        }
        stores
    }

    /// The median decisions/s, p50 and p99 of `store`'s runs.
    pub fn median(&self, store: &str) -> Option<(f64, f64, f64)> {
        let runs: Vec<&GrpcRun> = self.runs.iter().filter(|r| r.store == store).collect();
        Some((
            median(runs.iter().map(|r| r.decisions_per_sec).collect())?,
            median(runs.iter().map(|r| r.p50_us).collect())?,
            median(runs.iter().map(|r| r.p99_us).collect())?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_missing_stores_are_reported() {
        let run = |store: &str, rate: f64| GrpcRun {
            store: store.to_owned(),
            round: 1,
            decisions_per_sec: rate,
            p50_us: 100.0,
            p99_us: 900.0,
            allowed: 10,
            errors: 0,
        };
        let report = GrpcReport {
            seconds: 1,
            concurrency: 64,
            connections: 4,
            keys: 10,
            runs: vec![run("memory", 10.0), run("memory", 30.0), run("redis", 5.0)],
            missing: vec![("postgres".into(), "no database given".into())],
        };
        assert_eq!(report.median("memory"), Some((20.0, 100.0, 900.0)));
        let written = report.report();
        let md = written.to_markdown();
        assert!(md.contains("| memory | 20 | 100 | 900 | 0 |"), "{md}");
        assert!(
            md.contains("| postgres | not measured: no database given |"),
            "{md}"
        );
        assert!(written.to_svg().unwrap().contains("decisions/s"));
    }
}
