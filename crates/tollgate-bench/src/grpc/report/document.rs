//! The gRPC run as a [`Report`]: the medians per store, every run, and a chart.

use super::GrpcReport;
use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, thousands};

impl GrpcReport {
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
