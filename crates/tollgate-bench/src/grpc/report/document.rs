//! The gRPC run as a [`Report`]: the medians per store, every run, and a chart.

use super::{GrpcReport, target};
use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, thousands, tls_table};

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
            sections: [
                Some(self.medians()),
                self.tls_section(),
                self.tracing_section(),
                Some(self.every_run()),
            ]
            .into_iter()
            .flatten()
            .collect(),
            notes: Vec::new(),
            charts: vec![self.chart()],
        }
    }

    fn medians(&self) -> Section {
        let measured = self
            .targets()
            .into_iter()
            .filter_map(|(store, tls, tracing)| {
                let m = self.median(store, tls, tracing)?;
                let runs = self
                    .runs
                    .iter()
                    .filter(|r| r.store == store && r.tls == tls && r.tracing == tracing);
                let errors: u64 = runs.map(|r| r.errors).sum();
                Some(vec![
                    target(store, tls, tracing),
                    thousands(m.per_sec),
                    format!("{:.0}", m.p50),
                    format!("{:.0}", m.p99),
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
            ("target", Left),
            ("decisions/s", Right),
            ("p50 (µs)", Right),
            ("p99 (µs)", Right),
            ("errors", Right),
        ];
        let table = Table::new(&columns, measured.chain(missing));
        Section::table("Median of the rounds", Vec::new(), table)
    }

    /// Each store measured over TLS beside itself in plaintext.
    fn tls_section(&self) -> Option<Section> {
        let rows: Vec<(String, _)> = self
            .targets()
            .into_iter()
            .filter(|(_, tls, _)| *tls)
            .filter_map(|(store, _, _)| Some((store.to_owned(), self.tls_cost(store)?)))
            .collect();
        if rows.is_empty() {
            return None;
        }
        let text = format!(
            "The same server, store and calls over the same {} HTTP/2 connections, in \
             plaintext and over TLS ({}). The connections are open, their handshakes done, \
             before a run's clock starts, so the handshake is amortized away: what is measured \
             is the record layer on every frame. Latency ratios above 1 and a throughput ratio \
             below 1 are what TLS costs.",
            self.connections,
            self.tls.as_deref().unwrap_or("TLS")
        );
        Some(Section::table(
            "TLS / plaintext",
            vec![text],
            tls_table("store", "decisions/s", &rows),
        ))
    }

    fn every_run(&self) -> Section {
        let rows = self.runs.iter().map(|r| {
            vec![
                r.round.to_string(),
                r.target(),
                thousands(r.decisions_per_sec),
                format!("{:.0}", r.p50_us),
                format!("{:.0}", r.p99_us),
                r.allowed.to_string(),
                r.errors.to_string(),
            ]
        });
        let columns = [
            ("round", Right),
            ("target", Left),
            ("decisions/s", Right),
            ("p50 (µs)", Right),
            ("p99 (µs)", Right),
            ("allowed", Right),
            ("errors", Right),
        ];
        Section::table("Runs", Vec::new(), Table::new(&columns, rows))
    }

    /// Median decisions/s, a bar per store in plaintext and over TLS.
    fn chart(&self) -> Chart {
        Chart {
            title: "ShouldRateLimit per store".into(),
            y_label: "decisions/s (higher is better)".into(),
            series: vec!["median of the rounds".into()],
            groups: self
                .targets()
                .into_iter()
                .map(|(store, tls, tracing)| Group {
                    label: match (self.tls_cost(store).filter(|_| tls), tracing) {
                        (Some(cost), _) => {
                            format!(
                                "{} ({:.2}× plaintext)",
                                target(store, tls, tracing),
                                cost.throughput()
                            )
                        }
                        (None, Some(rate)) => match self.tracing_cost(store, rate) {
                            Some(cost) => format!(
                                "{} ({:.2}× off)",
                                target(store, tls, tracing),
                                cost.throughput()
                            ),
                            None => target(store, tls, tracing),
                        },
                        (None, None) => target(store, tls, tracing),
                    },
                    values: vec![self.median(store, tls, tracing).map(|m| m.per_sec)],
                })
                .collect(),
        }
    }
}
