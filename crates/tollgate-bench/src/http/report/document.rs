//! The HTTP run as a [`Report`]: the goals, each variant's medians beside the bare handler's,
//! every run, and charts of requests/s (each round beside the median, so the spread shows) and
//! latency.

use super::{Comparison, HttpReport, Run, Summary, ratios, signed_micros};
use crate::http::Variant;
use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, micros, thousands, tls_table};

impl HttpReport {
    /// The report as written to `http.md` and `http.svg`.
    pub fn report(&self) -> Report {
        Report {
            name: "http",
            title: "HTTP: tollgate's middleware over a bare axum handler".into(),
            intro: vec![format!(
                "{} keep-alive HTTP/1.1 connections sending `GET /hello` (the server's variants \
                 and their JSON floors: `POST /v1/check`), {} s per run, {} rounds of the \
                 variants in turn (after {} s of unrecorded warm-up each); load generator \
                 and servers in one process on {} cores, so only the ratios mean anything.",
                self.connections,
                self.seconds_per_run,
                self.rounds,
                self.warmup_seconds,
                self.cores
            )],
            goals: self.goals(),
            sections: [
                Some(self.summaries()),
                self.floors_section(),
                self.tls_section(),
                Some(self.every_run()),
            ]
            .into_iter()
            .flatten()
            .collect(),
            notes: self.notes(),
            charts: vec![self.throughput(), self.latency()],
        }
    }

    fn summaries(&self) -> Section {
        let columns = [
            ("variant", Left),
            ("requests/s", Right),
            ("× bare", Right),
            ("× bare per round", Right),
            ("p50 µs", Right),
            ("p99 µs", Right),
            ("p50 added µs", Right),
            ("p99 added µs", Right),
            ("CPU µs/request", Right),
            ("CPU added µs", Right),
            ("responses", Right),
            ("non-200", Right),
            ("errors", Right),
        ];
        let rows = self.variants().into_iter().filter_map(|v| self.summary(v));
        let table = Table::new(&columns, rows.map(|s| self.summary_row(&s)));
        Section::table(
            format!("Median of {} rounds", self.rounds),
            Vec::new(),
            table,
        )
    }

    /// The server beside its floors (the JSON endpoint on axum and on the server's listener),
    /// when `bare_json` ran.
    fn floors_section(&self) -> Option<Section> {
        let floor = self.summary(Variant::BareJson)?;
        let columns = [
            ("variant", Left),
            ("requests/s", Right),
            ("× bare", Right),
            ("× bare_json", Right),
            ("× bare_json per round", Right),
            ("CPU µs/request", Right),
            ("CPU × bare_json", Right),
            ("CPU added µs over bare_json", Right),
        ];
        let rows = [
            Variant::BareJson,
            Variant::BareJsonListener,
            Variant::Server,
            Variant::ServerTopOff,
        ]
        .into_iter()
        .filter_map(|v| self.summary(v))
        .map(|s| {
            let to_bare = self
                .compare(s.variant)
                .map_or_else(|| "–".to_owned(), |c| format!("{:.3}", c.ratio));
            let cpu_ratio = match s.cpu_per_request.zip(floor.cpu_per_request) {
                Some(_) if s.variant == Variant::BareJson => "1".to_owned(),
                Some((c, f)) if f > 0.0 => format!("{:.3}", c / f),
                _ => "–".to_owned(),
            };
            let (ratio, per_round, cpu_added) = match self
                .compare_to(Variant::BareJson, s.variant)
                .filter(|_| s.variant != Variant::BareJson)
            {
                Some(c) => (
                    format!("{:.3}", c.ratio),
                    ratios(&c.round_ratios),
                    c.cpu_added.map_or_else(|| "–".to_owned(), signed_micros),
                ),
                None if s.variant == Variant::BareJson => {
                    ("1".to_owned(), "–".to_owned(), "–".to_owned())
                }
                None => ("–".to_owned(), "–".to_owned(), "–".to_owned()),
            };
            vec![
                s.variant.to_string(),
                thousands(s.requests_per_sec),
                to_bare,
                ratio,
                per_round,
                cpu_micros(s.cpu_per_request),
                cpu_ratio,
                cpu_added,
            ]
        });
        let goal = Variant::Server
            .goal()
            .map_or_else(String::new, |g| format!(" (≥ {g}× bare)"));
        let text = format!(
            "Measured in the same rounds as the rest. `bare_json` answers the server's requests \
             (`POST /v1/check`, the same bodies and keys) in the server's JSON with its headers, \
             on axum, and decides nothing; `bare_json_listener` is the same router on the \
             server's listener machinery. bare_json × bare is the most a server answering this \
             JSON on axum reaches, whatever decides: the server's goal{goal} is within a \
             limiter's reach only when this is above it, and the difference is what the goal \
             leaves for the limiter. server × bare_json is the server's own cost over a JSON \
             endpoint (its listener, routes, policy, decision, counting, summaries), and \
             bare_json_listener × bare_json the listener machinery's share of it. CPU × \
             bare_json compares CPU per request (load generator included, as everywhere here)."
        );
        Some(Section::table(
            "Floors: the server beside a JSON endpoint",
            vec![text],
            Table::new(&columns, rows),
        ))
    }

    /// The server over TLS beside itself in plaintext, when both ran.
    fn tls_section(&self) -> Option<Section> {
        let cost = self.tls_cost()?;
        let text = format!(
            "`tollgate serve` on its own listener, the same requests (`POST /v1/check`) on the \
             same {} keep-alive connections, in plaintext (`server`) and over TLS \
             (`server_tls`: {}). Every connection is open, its handshake done, before a run's \
             clock starts, so the handshake is amortized away: what is measured is the record \
             layer (encrypting and decrypting every request and response) and the TLS stream's \
             buffering. Latency ratios above 1 and a throughput ratio below 1 are what TLS \
             costs.",
            self.connections,
            self.tls.as_deref().unwrap_or("TLS")
        );
        Some(Section::table(
            "TLS / plaintext",
            vec![text],
            tls_table("front end", "requests/s", &[("server".to_owned(), cost)]),
        ))
    }

    fn summary_row(&self, s: &Summary) -> Vec<String> {
        // Bare is the reference: its own ratio is 1 and nothing is added to it.
        let c = self
            .compare(s.variant)
            .filter(|_| s.variant != Variant::Bare);
        let field = |f: &dyn Fn(&Comparison) -> String, bare: &str| match &c {
            Some(c) => f(c),
            None if s.variant == Variant::Bare => bare.to_owned(),
            None => "–".to_owned(),
        };
        vec![
            s.variant.to_string(),
            thousands(s.requests_per_sec),
            field(&|c| format!("{:.3}", c.ratio), "1"),
            field(&|c| ratios(&c.round_ratios), "–"),
            micros(s.p50),
            micros(s.p99),
            field(&|c| signed_micros(c.p50_added), "–"),
            field(&|c| signed_micros(c.p99_added), "–"),
            cpu_micros(s.cpu_per_request),
            field(
                &|c| c.cpu_added.map_or_else(|| "–".to_owned(), signed_micros),
                "–",
            ),
            thousands(s.responses as f64),
            thousands(s.non_200 as f64),
            thousands(s.errors as f64),
        ]
    }

    fn every_run(&self) -> Section {
        let columns = [
            ("round", Right),
            ("variant", Left),
            ("requests/s", Right),
            ("p50 µs", Right),
            ("p99 µs", Right),
            ("CPU µs/request", Right),
            ("others' CPU s", Right),
            ("responses", Right),
            ("non-200", Right),
            ("errors", Right),
            ("with RateLimit", Right),
        ];
        let table = Table::new(&columns, self.runs.iter().map(row));
        Section::table("Every run, in the order run", Vec::new(), table)
    }

    fn notes(&self) -> Vec<String> {
        let variants = self.variants();
        let mut notes: Vec<String> = variants
            .iter()
            .map(|v| format!("**{v}**: {}.", v.describe()))
            .collect();
        let keys = if variants.contains(&Variant::TollgateKeys) {
            format!(
                " The requests carry `x-api-key` from {} distinct values in turn (every variant \
                 gets the same requests; only tollgate_keys reads the header).",
                thousands(self.keys as f64)
            )
        } else {
            String::new()
        };
        notes.push(format!(
            "The policy (`allow_all`, 10⁹ tokens refilled at 10⁹/s) never denies: every request \
             takes the whole decision path (key, store, headers) and reaches the handler.{keys}"
        ));
        notes.extend(
            [
            "Closed loop: each connection sends its next request when the previous response has \
             been read. requests/s = responses / time; latency from sending to the end of the \
             body; percentiles by nearest rank, at most 1.6% high. Medians are taken per column, \
             across rounds; × bare and the added latencies compare medians. × bare per round \
             divides each round's runs, made seconds apart: when the machine's speed shifts \
             between rounds (this host's does), the pairs still compare like with like.",
            "CPU µs/request: the CPU time of the whole process (load generator, servers and the \
             kernel's TCP work for both, counted in 10 ms ticks) per response. Time spent \
             waiting for a core is not in it, so it moves less than requests/s when other work \
             shares the machine; CPU added is the middleware's own cost per request.",
            "others' CPU s: CPU time the rest of the machine used during the run (from \
             `/proc/stat`). A run that shared the cores with other work has lower requests/s and \
             higher latency for reasons that are not its variant's; judge the ratios on runs \
             where this is near 0.",
            ]
            .map(String::from),
        );
        notes
    }

    /// Requests/s per variant: the median of the rounds, then each round, so the spread shows.
    fn throughput(&self) -> Chart {
        let mut series = vec!["median of rounds".to_owned()];
        series.extend((1..=self.rounds).map(|r| format!("round {r}")));
        let groups = self
            .variants()
            .into_iter()
            .filter_map(|variant| {
                let s = self.summary(variant)?;
                let label = match (self.compare(variant), self.tls_cost()) {
                    // Beside the plaintext server, the ratio it is there for.
                    (_, Some(cost)) if variant == Variant::ServerTls => {
                        format!("{variant} ({:.2}× server)", cost.throughput())
                    }
                    (Some(c), _) if variant != Variant::Bare => {
                        format!("{variant} ({:.2}× bare)", c.ratio)
                    }
                    _ => variant.to_string(),
                };
                let mut values = vec![Some(s.requests_per_sec)];
                values.extend((1..=self.rounds).map(|round| {
                    self.runs_of(variant)
                        .find(|r| r.round == round)
                        .map(Run::requests_per_sec)
                }));
                Some(Group { label, values })
            })
            .collect();
        Chart {
            title: format!("GET /hello, {} connections", self.connections),
            y_label: "requests/s (higher is better)".into(),
            series,
            groups,
        }
    }

    /// The median p50 and p99 of each variant, beside each other.
    fn latency(&self) -> Chart {
        let us = |d: std::time::Duration| Some(d.as_secs_f64() * 1e6);
        Chart {
            title: "Latency, median of rounds".into(),
            y_label: "µs (lower is better)".into(),
            series: vec!["p50".into(), "p99".into()],
            groups: self
                .variants()
                .into_iter()
                .filter_map(|v| self.summary(v))
                .map(|s| Group {
                    label: s.variant.to_string(),
                    values: vec![us(s.p50), us(s.p99)],
                })
                .collect(),
        }
    }
}

fn row(run: &Run) -> Vec<String> {
    vec![
        run.round.to_string(),
        run.variant.to_string(),
        thousands(run.requests_per_sec()),
        micros(run.p50),
        micros(run.p99),
        cpu_micros(run.cpu_per_request()),
        run.others_cpu
            .map_or_else(|| "–".into(), |d| format!("{:.2}", d.as_secs_f64())),
        thousands(run.responses as f64),
        thousands(run.non_200 as f64),
        thousands(run.errors as f64),
        thousands(run.with_ratelimit as f64),
    ]
}

/// CPU seconds per request as microseconds with one decimal, `–` when unknown.
fn cpu_micros(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "–".into(), |s| format!("{:.1}", s * 1e6))
}
