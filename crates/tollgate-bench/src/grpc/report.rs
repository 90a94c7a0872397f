//! The gRPC benchmark's report: decisions/s and latency per store, and a chart.

use std::fmt::Write as _;

use crate::report::chart::{self, Bar, Group};
use crate::report::{median, thousands};

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

    /// The report in Markdown.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# gRPC: Envoy's ShouldRateLimit\n");
        let _ = writeln!(
            md,
            "{} calls in flight over {} HTTP/2 connections for {} s per run, one descriptor each \
             over {} values, every call allowed; client and server in one process on this \
             machine's cores. Medians of the rounds.\n",
            self.concurrency,
            self.connections,
            self.seconds,
            thousands(self.keys as f64)
        );
        let _ = writeln!(md, "| store | decisions/s | p50 (µs) | p99 (µs) | errors |");
        let _ = writeln!(md, "|---|---:|---:|---:|---:|");
        for store in self.stores() {
            if let Some((rate, p50, p99)) = self.median(store) {
                let errors: u64 = self
                    .runs
                    .iter()
                    .filter(|r| r.store == store)
                    .map(|r| r.errors)
                    .sum();
                let _ = writeln!(
                    md,
                    "| {store} | {} | {p50:.0} | {p99:.0} | {errors} |",
                    thousands(rate)
                );
            }
        }
        for (store, why) in &self.missing {
            let _ = writeln!(md, "| {store} | not measured: {why} | | | |");
        }
        let _ = writeln!(md, "\n## Runs\n");
        let _ = writeln!(
            md,
            "| round | store | decisions/s | p50 (µs) | p99 (µs) | allowed | errors |"
        );
        let _ = writeln!(md, "|---:|---|---:|---:|---:|---:|---:|");
        for r in &self.runs {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.0} | {:.0} | {} | {} |",
                r.round,
                r.store,
                thousands(r.decisions_per_sec),
                r.p50_us,
                r.p99_us,
                r.allowed,
                r.errors
            );
        }
        md
    }

    /// The report as an SVG chart: median decisions/s, a bar per store.
    pub fn to_svg(&self) -> String {
        let width = 520.0;
        let mut svg = String::new();
        chart::open(
            &mut svg,
            width,
            310.0,
            "gRPC ShouldRateLimit: decisions/s (higher is better)",
        );
        const COLORS: [&str; 3] = ["#2b7bb9", "#c0504d", "#888888"];
        let groups: Vec<Group> = self
            .stores()
            .iter()
            .enumerate()
            .map(|(i, store)| Group {
                label: (*store).to_owned(),
                bars: vec![self.median(store).map(|(rate, _, _)| Bar {
                    title: (*store).to_owned(),
                    value: rate,
                    color: COLORS[i % COLORS.len()],
                })],
            })
            .collect();
        chart::grouped_bars(
            &mut svg,
            width,
            60.0,
            ("median of the rounds", None),
            &groups,
            "decisions/s",
        );
        svg.push_str("</svg>\n");
        svg
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
        let md = report.to_markdown();
        assert!(md.contains("| memory | 20 | 100 | 900 | 0 |"), "{md}");
        assert!(md.contains("not measured: no database given"), "{md}");
        assert!(report.to_svg().contains("decisions/s"));
    }
}
