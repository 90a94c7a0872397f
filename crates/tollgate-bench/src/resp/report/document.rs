//! The RESP run as a [`Report`]: the goals, the medians per target and pipeline, every run,
//! and a chart.

use super::{RespReport, Target};
use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, thousands};

impl RespReport {
    /// The report as written to `resp.md` and `resp.svg`.
    pub fn report(&self) -> Report {
        let mut sections = vec![self.medians(), self.every_run()];
        if !self.missing.is_empty() {
            let list = self
                .missing
                .iter()
                .map(|(target, why)| format!("- **{}**: {why}", target.name()))
                .collect::<Vec<_>>()
                .join("\n");
            sections.push(Section::text("Missing peers", vec![list]));
        }
        Report {
            name: "resp",
            title: "RESP: CL.THROTTLE on tollgate, redis-cell and throttlecrab".into(),
            intro: vec![format!(
                "`redis-benchmark -c {} -n {} -r {}` at pipelines {}, {} rounds of the targets in \
                 turn; `CL.THROTTLE bench:__rand_int__ 1000 1000000 1` (throttlecrab: \
                 `THROTTLE`, the same numbers), so no request is limited. tollgate serves its \
                 memory store in the benchmark's process; the peers run as their own processes. \
                 The ceiling is a plain redis-server answering `PING` to the same load \
                 generator: where the load generator holds every target back, about as fast \
                 as any can go.",
                self.clients,
                self.requests,
                self.keys,
                self.pipelines
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" and "),
                self.rounds
            )],
            goals: self.goals(),
            sections,
            notes: Vec::new(),
            charts: vec![self.chart()],
        }
    }

    fn medians(&self) -> Section {
        let rows = self.pipelines.iter().flat_map(|&pipeline| {
            let cell = self.median(Target::RedisCell, pipeline).map(|m| m.0);
            Target::ALL.into_iter().filter_map(move |target| {
                let (rps, p99) = self.median(target, pipeline)?;
                Some(vec![
                    target.name().into(),
                    pipeline.to_string(),
                    thousands(rps),
                    cell.filter(|c| *c > 0.0)
                        .map_or_else(|| "–".to_owned(), |c| format!("{:.2}", rps / c)),
                    format!("{p99:.3}"),
                    self.median_cpu(target, pipeline)
                        .map_or_else(|| "–".to_owned(), |c| format!("{c:.2}")),
                ])
            })
        });
        let columns = [
            ("target", Left),
            ("pipeline", Right),
            ("requests/s", Right),
            ("× redis-cell", Right),
            ("p99 ms", Right),
            ("server CPU µs/request", Right),
        ];
        Section::table(
            "Median of the rounds",
            Vec::new(),
            Table::new(&columns, rows),
        )
    }

    fn every_run(&self) -> Section {
        let rows = self.runs.iter().map(|r| {
            vec![
                r.round.to_string(),
                r.pipeline.to_string(),
                r.target.name().into(),
                thousands(r.requests_per_sec),
                format!("{:.3}", r.p50_ms),
                format!("{:.3}", r.p99_ms),
            ]
        });
        let columns = [
            ("round", Right),
            ("pipeline", Right),
            ("target", Left),
            ("requests/s", Right),
            ("p50 ms", Right),
            ("p99 ms", Right),
        ];
        Section::table("Every run", Vec::new(), Table::new(&columns, rows))
    }

    /// Median requests/s: a group per pipeline, a bar per target that ran.
    fn chart(&self) -> Chart {
        let targets: Vec<Target> = Target::ALL
            .into_iter()
            .filter(|t| self.runs.iter().any(|r| r.target == *t))
            .collect();
        Chart {
            title: "CL.THROTTLE, median of the rounds".into(),
            y_label: "requests/s (higher is better)".into(),
            series: targets.iter().map(|t| t.name().to_owned()).collect(),
            groups: self
                .pipelines
                .iter()
                .map(|&pipeline| Group {
                    label: format!("pipeline {pipeline}"),
                    values: targets
                        .iter()
                        .map(|&t| self.median(t, pipeline).map(|(rps, _)| rps))
                        .collect(),
                })
                .collect(),
        }
    }
}
