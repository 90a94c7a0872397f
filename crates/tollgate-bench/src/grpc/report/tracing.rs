//! What tracing costs: the memory store's runs with `[tracing]` on, at each sampling rate,
//! beside its runs with tracing off, measured in the same rounds.

use super::GrpcReport;
use crate::report::Align::{Left, Right};
use crate::report::{Medians, Section, Table, TlsCost, thousands};

impl GrpcReport {
    /// The sampling rates measured on `store` (plaintext), in the order first run.
    fn traced_rates(&self, store: &str) -> Vec<f64> {
        self.targets()
            .into_iter()
            .filter(|(s, tls, _)| *s == store && !tls)
            .filter_map(|(_, _, tracing)| tracing)
            .collect()
    }

    /// `store` traced at `rate` beside itself untraced, in plaintext: the ratios of
    /// [`TlsCost`] with tracing on in place of TLS; `None` unless both ran.
    pub fn tracing_cost(&self, store: &str, rate: f64) -> Option<TlsCost> {
        let off = |round| {
            self.runs
                .iter()
                .find(|r| r.store == store && !r.tls && r.tracing.is_none() && r.round == round)
        };
        Some(TlsCost {
            plaintext: self.median(store, false, None)?,
            tls: self.median(store, false, Some(rate))?,
            round_ratios: self
                .runs
                .iter()
                .filter(|r| r.store == store && !r.tls && r.tracing == Some(rate))
                .filter_map(|on| {
                    let off = off(on.round)?;
                    (off.decisions_per_sec > 0.0)
                        .then(|| on.decisions_per_sec / off.decisions_per_sec)
                })
                .collect(),
        })
    }

    /// Each sampling rate's cost on the memory store; `None` when no traced run ran.
    pub(super) fn tracing_section(&self) -> Option<Section> {
        let store = "memory";
        let rows: Vec<Vec<String>> = self
            .traced_rates(store)
            .into_iter()
            .filter_map(|rate| {
                let cost = self.tracing_cost(store, rate)?;
                let Medians { per_sec, .. } = cost.tls;
                Some(vec![
                    format!("{rate}"),
                    thousands(cost.plaintext.per_sec),
                    thousands(per_sec),
                    format!("{:.3}", cost.throughput()),
                    cost.round_ratios
                        .iter()
                        .map(|r| format!("{r:.3}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    format!("{:.3}", cost.p50()),
                    format!("{:.3}", cost.p99()),
                ])
            })
            .collect();
        if rows.is_empty() {
            return None;
        }
        let columns = [
            ("sampling rate", Left),
            ("off decisions/s", Right),
            ("on decisions/s", Right),
            ("throughput on / off", Right),
            ("per round", Right),
            ("p50 on / off", Right),
            ("p99 on / off", Right),
        ];
        let text = "The same server on the memory store with `[tracing] enabled = true` at each \
                    sampling rate, beside it with tracing off: a span per call and one per store \
                    call, exported over OTLP/HTTP (protobuf) to a receiver in this process that \
                    decodes nothing and answers 200, so the exporter does its whole work. \
                    Throughput ratios below 1 and latency ratios above 1 are what tracing costs."
            .to_owned();
        Some(Section::table(
            "Tracing on / off",
            vec![text],
            Table::new(&columns, rows),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::GrpcRun;
    use super::*;

    #[test]
    fn each_sampling_rate_is_compared_with_tracing_off_round_by_round() {
        let run = |tracing: Option<f64>, round: usize, rate: f64| GrpcRun {
            store: "memory".to_owned(),
            tls: false,
            round,
            decisions_per_sec: rate,
            p50_us: 100.0,
            p99_us: 400.0,
            allowed: 10,
            errors: 0,
            tracing,
        };
        let report = GrpcReport {
            seconds: 1,
            concurrency: 64,
            connections: 4,
            keys: 10,
            tls: None,
            runs: vec![
                run(None, 1, 40_000.0),
                run(Some(1.0), 1, 30_000.0),
                run(Some(0.01), 1, 39_000.0),
                run(None, 2, 40_000.0),
                run(Some(1.0), 2, 32_000.0),
                run(Some(0.01), 2, 38_000.0),
            ],
            missing: Vec::new(),
        };
        let cost = report.tracing_cost("memory", 1.0).unwrap();
        assert!((cost.throughput() - 0.775).abs() < 1e-12, "{cost:?}");
        assert_eq!(cost.round_ratios, [0.75, 0.8]);
        let md = report.report().to_markdown();
        assert!(
            md.contains("| 1 | 40,000 | 31,000 | 0.775 | 0.750, 0.800 | 1.000 | 1.000 |"),
            "{md}"
        );
        assert!(md.contains("| 0.01 | 40,000 | 38,500 | 0.963 |"), "{md}");
        assert!(md.contains("| memory traced at 0.01 | 38,500 |"), "{md}");
    }
}
