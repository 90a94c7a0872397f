//! The tail run as a [`Report`]: the goals, each pair's percentiles and ratios, the p99 of
//! every slice of every run, and charts of the medians.

use super::{Condition, GOAL_RATIO, QUANTILES, SPIKE, TailReport, TailRun};
use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, median, thousands};

impl TailReport {
    /// The report as written to `tail.md` and `tail.svg`.
    pub fn report(&self) -> Report {
        let mut intro = vec![
            format!(
                "Each server is offered {} requests/s for {} s per run: request *i* is \
                 scheduled at *i* / rate and its latency counted from then (not from when a \
                 worker sent it), over {} connections with one request in flight each (gRPC: \
                 {} calls in flight over 4 HTTP/2 connections). Client and in-process servers \
                 share this machine's {} cores; the bare server and tollgate alternate in each \
                 round and condition, the order turned each round, {} rounds.",
                thousands(f64::from(self.rate)),
                self.seconds,
                self.connections,
                self.connections,
                self.cores,
                self.rounds,
            ),
            format!(
                "Conditions: idle (nothing started by the benchmark), busy ({} busy-loop \
                 process{} started by the benchmark). Load average (1, 5, 15 min) before the \
                 first run: {}; after the last: {}.",
                self.busy_loops,
                if self.busy_loops == 1 { "" } else { "es" },
                self.load.0,
                self.load.1
            ),
        ];
        for (protocol, why) in &self.missing {
            intro.push(format!("**{protocol} not measured**: {why}."));
        }
        Report {
            name: "tail",
            title: "The servers' tail at a fixed rate".into(),
            intro,
            goals: self.goals(),
            sections: vec![self.percentiles(), self.over_time()],
            notes: vec![
                "A closed loop (the `http`, `grpc` and `resp` reports) sends nothing while a \
                 server stalls, so a stall costs it one slow request per connection; here every \
                 request scheduled during a stall waits, and counts."
                    .into(),
                format!(
                    "A spike is a slice whose p99 is above {SPIKE}× the run's median slice p99. \
                     A stall of the server's shows as spikes in tollgate's runs at a steady \
                     period and not in the bare server's; spikes in both are the machine's."
                ),
                "The bare HTTP handler answers `GET /hello`; the server parses a JSON body, \
                 decides and writes one: part of its ratio is that work, not a stall."
                    .into(),
                "On a busy machine the scheduler's time slices (a few ms) show in every \
                 server's p99: only the ratio within a pair means anything."
                    .into(),
            ],
            charts: self.charts(),
        }
    }

    fn percentiles(&self) -> Section {
        let mut columns: Vec<(&str, _)> = vec![
            ("protocol", Left),
            ("condition", Left),
            ("round", Right),
            ("server", Left),
            ("answers/s", Right),
        ];
        columns.extend(QUANTILES.iter().map(|(_, name)| (*name, Right)));
        columns.extend([
            ("errors", Right),
            ("p99 ×bare", Right),
            ("p99.9 ×bare", Right),
        ]);
        let mut rows = Vec::new();
        for protocol in self.protocols() {
            for pair in self.pairs(protocol) {
                for run in [pair.bare, pair.tollgate] {
                    let mut row = vec![
                        protocol.name().to_owned(),
                        run.condition.name().to_owned(),
                        run.round.to_string(),
                        run.target().to_owned(),
                        thousands(run.per_sec),
                    ];
                    row.extend(run.percentiles.iter().map(|us| format!("{us:.0}")));
                    row.push(run.errors.to_string());
                    if run.tollgate {
                        let ratio = pair.p99_ratio();
                        let mark = if ratio <= GOAL_RATIO { "" } else { " ✗" };
                        row.push(format!("{ratio:.2}{mark}"));
                        row.push(format!("{:.2}", pair.p999_ratio()));
                    } else {
                        row.extend([String::new(), String::new()]);
                    }
                    rows.push(row);
                }
            }
        }
        Section::table(
            "Latency from the scheduled send time (µs)",
            Vec::new(),
            Table::new(&columns, rows),
        )
    }

    fn over_time(&self) -> Section {
        let columns = [
            ("protocol", Left),
            ("condition", Left),
            ("round", Right),
            ("server", Left),
            ("median slice p99", Right),
            ("worst slice p99", Right),
            ("spikes at (s)", Left),
            ("p99 of each slice (µs)", Left),
        ];
        let slice = self.slice_ms as f64 / 1000.0;
        let rows = self.protocols().into_iter().flat_map(|protocol| {
            self.pairs(protocol)
                .into_iter()
                .flat_map(|pair| [pair.bare, pair.tollgate])
                .map(move |run| {
                    let worst = run.slices_p99.iter().copied().fold(f64::NAN, f64::max);
                    let spikes: Vec<String> = run
                        .spikes()
                        .iter()
                        .map(|&i| format!("{:.1}", i as f64 * slice))
                        .collect();
                    vec![
                        protocol.name().to_owned(),
                        run.condition.name().to_owned(),
                        run.round.to_string(),
                        run.target().to_owned(),
                        format!("{:.0}", run.typical_slice()),
                        format!("{worst:.0}"),
                        if spikes.is_empty() {
                            "none".to_owned()
                        } else {
                            spikes.join(" ")
                        },
                        run.slices_p99
                            .iter()
                            .map(|us| format!("{us:.0}"))
                            .collect::<Vec<_>>()
                            .join(" "),
                    ]
                })
        });
        Section::table(
            format!("p99 per {} ms over time", self.slice_ms),
            vec![
                "Each run's requests by scheduled send time, a slice each; the p99 of every \
                 slice in order. A periodic stall shows as spikes at a steady spacing."
                    .into(),
            ],
            Table::new(&columns, rows),
        )
    }

    fn charts(&self) -> Vec<Chart> {
        let groups = |value: fn(&TailRun) -> f64| -> Vec<Group> {
            let mut groups = Vec::new();
            for protocol in self.protocols() {
                for condition in Condition::ALL {
                    let of = |tollgate: bool| {
                        median(
                            self.runs
                                .iter()
                                .filter(|r| {
                                    r.protocol == protocol
                                        && r.condition == condition
                                        && r.tollgate == tollgate
                                })
                                .map(value)
                                .collect(),
                        )
                    };
                    if of(true).is_some() || of(false).is_some() {
                        groups.push(Group {
                            label: format!("{protocol} {condition}"),
                            values: vec![of(false), of(true)],
                        });
                    }
                }
            }
            groups
        };
        let series = vec!["bare".to_owned(), "tollgate".to_owned()];
        vec![
            Chart {
                title: "p99 from the scheduled send time, median of the rounds".into(),
                y_label: "µs".into(),
                series: series.clone(),
                groups: groups(TailRun::p99),
            },
            Chart {
                title: "p99.9, median of the rounds".into(),
                y_label: "µs".into(),
                series: series.clone(),
                groups: groups(TailRun::p999),
            },
            Chart {
                title: format!(
                    "The worst {} ms slice's p99, median of the rounds",
                    self.slice_ms
                ),
                y_label: "µs".into(),
                series,
                groups: groups(|r| r.slices_p99.iter().copied().fold(f64::NAN, f64::max)),
            },
        ]
    }
}
