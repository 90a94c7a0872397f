//! The gRPC benchmark's report: decisions/s and latency per store, and a chart.

use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, median, thousands};

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

    /// The report as written to `grpc.md` and `grpc.svg`.
    pub fn report(&self) -> Report {
        Report {
            name: "grpc",
            title: "gRPC: Envoy's ShouldRateLimit".into(),
            intro: vec![format!(
                "{} calls in flight over {} HTTP/2 connections for {} s per run, one descriptor \
                 each over {} values, every call allowed; client and server in one process on \
                 this machine's cores.",
                self.concurrency,
                self.connections,
                self.seconds,
                thousands(self.keys as f64)
            )],
            goals: Vec::new(),
            sections: vec![self.medians(), self.every_run()],
            notes: Vec::new(),
            charts: vec![self.chart()],
        }
    }

    fn medians(&self) -> Section {
        let measured = self.stores().into_iter().filter_map(|store| {
            let (rate, p50, p99) = self.median(store)?;
            let runs = self.runs.iter().filter(|r| r.store == store);
            let errors: u64 = runs.map(|r| r.errors).sum();
            Some(vec![
                store.to_owned(),
                thousands(rate),
                format!("{p50:.0}"),
                format!("{p99:.0}"),
                errors.to_string(),
            ])
        });
        let missing = self.missing.iter().map(|(store, why)| {
            let blank = String::new;
            vec![
                store.clone(),
                format!("not measured: {why}"),
                blank(),
                blank(),
                blank(),
            ]
        });
        let columns = [
            ("store", Left),
            ("decisions/s", Right),
            ("p50 (µs)", Right),
            ("p99 (µs)", Right),
            ("errors", Right),
        ];
        let table = Table::new(&columns, measured.chain(missing));
        Section::table("Median of the rounds", Vec::new(), table)
    }

    fn every_run(&self) -> Section {
        let rows = self.runs.iter().map(|r| {
            vec![
                r.round.to_string(),
                r.store.clone(),
                thousands(r.decisions_per_sec),
                format!("{:.0}", r.p50_us),
                format!("{:.0}", r.p99_us),
                r.allowed.to_string(),
                r.errors.to_string(),
            ]
        });
        let columns = [
            ("round", Right),
            ("store", Left),
            ("decisions/s", Right),
            ("p50 (µs)", Right),
            ("p99 (µs)", Right),
            ("allowed", Right),
            ("errors", Right),
        ];
        Section::table("Runs", Vec::new(), Table::new(&columns, rows))
    }

    /// Median decisions/s, a bar per store.
    fn chart(&self) -> Chart {
        Chart {
            title: "ShouldRateLimit per store".into(),
            y_label: "decisions/s (higher is better)".into(),
            series: vec!["median of the rounds".into()],
            groups: self
                .stores()
                .into_iter()
                .map(|store| Group {
                    label: store.to_owned(),
                    values: vec![self.median(store).map(|(rate, _, _)| rate)],
                })
                .collect(),
        }
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
