//! What an HTTP run measured, the goal it is held to, and the summaries across rounds.

mod cost;
mod document;

use std::time::Duration;

use super::variant::{GOAL_RATIO, GOAL_TOP_CPU, Variant};
use crate::report::{Goal, Medians, TlsCost, median, thousands};

/// One run of `run_http`.
#[derive(Debug, Clone)]
pub struct HttpReport {
    /// Measured time per run.
    pub seconds_per_run: f64,
    /// Keep-alive connections of the load generator.
    pub connections: usize,
    /// Rounds: each variant ran once per round.
    pub rounds: usize,
    /// Distinct API keys the requests carry (what `tollgate_keys` keys by).
    pub keys: usize,
    /// Unrecorded load on each variant before the rounds.
    pub warmup_seconds: f64,
    /// Cores the process could use, shared by the load generator and the servers.
    pub cores: usize,
    /// What the TLS variant's handshake settled on (protocol, cipher suite, key exchange,
    /// ALPN); `None` when it did not run.
    pub tls: Option<String>,
    /// Every run, in the order run (round by round, the variants in turn).
    pub runs: Vec<Run>,
}

/// One variant under load for one round.
#[derive(Debug, Clone)]
pub struct Run {
    /// What served the requests.
    pub variant: Variant,
    /// 1-based.
    pub round: usize,
    /// Responses read to the end, whatever their status.
    pub responses: u64,
    /// Responses whose status was not 200 (the middleware's 429, 503, 400 among them).
    pub non_200: u64,
    /// Exchanges that failed at the transport.
    pub errors: u64,
    /// Responses carrying the `RateLimit` header.
    pub with_ratelimit: u64,
    /// From the first request sent to the last response read.
    pub elapsed: Duration,
    /// Median latency of an exchange.
    pub p50: Duration,
    /// 99th percentile latency of an exchange.
    pub p99: Duration,
    /// CPU time of the whole process during the run (load generator, servers, and the
    /// kernel's work on their behalf); `None` where it cannot be read.
    pub cpu: Option<Duration>,
    /// CPU time the rest of the machine used during the run: near zero when the run had the
    /// machine to itself, which its figures need.
    pub others_cpu: Option<Duration>,
}

impl Run {
    /// Responses per second.
    pub fn requests_per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.responses as f64 / secs
        } else {
            0.0
        }
    }

    /// CPU time per response, in seconds: less sensitive than requests/s to whatever else
    /// the machine runs, since time spent waiting for a core is not counted.
    pub fn cpu_per_request(&self) -> Option<f64> {
        let cpu = self.cpu?;
        (self.responses > 0).then(|| cpu.as_secs_f64() / self.responses as f64)
    }
}

/// A variant across its rounds: the median of each figure (medians taken separately), and the
/// totals of the counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The variant.
    pub variant: Variant,
    /// Rounds it ran.
    pub runs: usize,
    /// Median requests/s.
    pub requests_per_sec: f64,
    /// Median of the rounds' p50.
    pub p50: Duration,
    /// Median of the rounds' p99.
    pub p99: Duration,
    /// Median CPU seconds per request, if every round could read it.
    pub cpu_per_request: Option<f64>,
    /// Responses, all rounds.
    pub responses: u64,
    /// Non-200 responses, all rounds.
    pub non_200: u64,
    /// Transport errors, all rounds.
    pub errors: u64,
    /// Responses with the `RateLimit` header, all rounds.
    pub with_ratelimit: u64,
}

/// A variant beside a reference: the bare handler (for the goals), or a floor of the server
/// ([`HttpReport::compare_to`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The variant compared.
    pub variant: Variant,
    /// What it is compared with: [`Variant::Bare`] unless compared with a floor.
    pub reference: Variant,
    /// Its median requests/s over the reference's.
    pub ratio: f64,
    /// Its median p50 minus the reference's, in seconds (negative when lower).
    pub p50_added: f64,
    /// Its median p99 minus the reference's, in seconds (negative when lower).
    pub p99_added: f64,
    /// Its median CPU per request minus the reference's, in seconds: what the middleware
    /// costs per request, if CPU time could be read.
    pub cpu_added: Option<f64>,
    /// Each round's requests/s over the reference's in the same round. Runs of one round
    /// are seconds apart, so these pairs see the same state of the machine; when its speed
    /// shifts between rounds (a shared host does that), they show it where the medians hide it.
    pub round_ratios: Vec<f64>,
}

impl Comparison {
    /// Whether the ratio reaches the variant's goal ([`Variant::goal`]), which is stated
    /// beside the bare handler.
    pub fn met(&self) -> bool {
        self.ratio >= self.variant.goal().unwrap_or(GOAL_RATIO)
    }
}

impl HttpReport {
    /// The variants that ran, in report order.
    pub fn variants(&self) -> Vec<Variant> {
        Variant::ALL
            .into_iter()
            .filter(|v| self.runs.iter().any(|r| r.variant == *v))
            .collect()
    }

    /// The runs of `variant`, in order.
    pub fn runs_of(&self, variant: Variant) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(move |r| r.variant == variant)
    }

    /// `variant` across its rounds; `None` if it did not run.
    pub fn summary(&self, variant: Variant) -> Option<Summary> {
        let runs: Vec<&Run> = self.runs_of(variant).collect();
        if runs.is_empty() {
            return None;
        }
        let seconds =
            |f: fn(&Run) -> f64| median(runs.iter().map(|r| f(r)).collect()).unwrap_or(0.0);
        Some(Summary {
            variant,
            runs: runs.len(),
            requests_per_sec: seconds(Run::requests_per_sec),
            p50: Duration::from_secs_f64(seconds(|r| r.p50.as_secs_f64())),
            p99: Duration::from_secs_f64(seconds(|r| r.p99.as_secs_f64())),
            cpu_per_request: runs
                .iter()
                .map(|r| r.cpu_per_request())
                .collect::<Option<Vec<f64>>>()
                .and_then(median),
            responses: runs.iter().map(|r| r.responses).sum(),
            non_200: runs.iter().map(|r| r.non_200).sum(),
            errors: runs.iter().map(|r| r.errors).sum(),
            with_ratelimit: runs.iter().map(|r| r.with_ratelimit).sum(),
        })
    }

    /// `variant` beside the bare handler; `None` unless both ran and bare served.
    pub fn compare(&self, variant: Variant) -> Option<Comparison> {
        self.compare_to(Variant::Bare, variant)
    }

    /// `variant` beside `reference` (the server beside its floor `bare_json`, say); `None`
    /// unless both ran and the reference served.
    pub fn compare_to(&self, reference: Variant, variant: Variant) -> Option<Comparison> {
        let base = self.summary(reference)?;
        let compared = self.summary(variant)?;
        if base.requests_per_sec <= 0.0 {
            return None;
        }
        Some(Comparison {
            variant,
            reference,
            ratio: compared.requests_per_sec / base.requests_per_sec,
            p50_added: compared.p50.as_secs_f64() - base.p50.as_secs_f64(),
            p99_added: compared.p99.as_secs_f64() - base.p99.as_secs_f64(),
            cpu_added: compared
                .cpu_per_request
                .zip(base.cpu_per_request)
                .map(|(c, b)| c - b),
            round_ratios: self
                .runs_of(variant)
                .filter_map(|c| {
                    let b = self.runs_of(reference).find(|b| b.round == c.round)?;
                    let base = b.requests_per_sec();
                    (base > 0.0).then(|| c.requests_per_sec() / base)
                })
                .collect(),
        })
    }

    /// The server over TLS beside the server in plaintext; `None` unless both ran.
    pub fn tls_cost(&self) -> Option<TlsCost> {
        let medians = |variant| {
            self.summary(variant).map(|s| Medians {
                per_sec: s.requests_per_sec,
                p50: s.p50.as_secs_f64(),
                p99: s.p99.as_secs_f64(),
            })
        };
        Some(TlsCost {
            plaintext: medians(Variant::Server)?,
            tls: medians(Variant::ServerTls)?,
            round_ratios: self
                .runs_of(Variant::ServerTls)
                .filter_map(|tls| {
                    let plain = self
                        .runs_of(Variant::Server)
                        .find(|p| p.round == tls.round)?;
                    let plain = plain.requests_per_sec();
                    (plain > 0.0).then(|| tls.requests_per_sec() / plain)
                })
                .collect(),
        })
    }

    /// The summaries' goal ([`GOAL_TOP_CPU`]): the server beside itself with `[top] enabled =
    /// false`, in CPU per request; `None` unless both ran.
    fn top_goal(&self) -> Option<Goal> {
        let (on, off) = (
            self.summary(Variant::Server)?,
            self.summary(Variant::ServerTopOff)?,
        );
        let goal = format!(
            "server: the top summary costs ≤ {:.0}% of its CPU per request (beside server_top_off)",
            GOAL_TOP_CPU * 100.0
        );
        let rates = format!(
            "{} vs {} requests/s",
            thousands(on.requests_per_sec),
            thousands(off.requests_per_sec)
        );
        Some(match (on.cpu_per_request, off.cpu_per_request) {
            (Some(on_cpu), Some(off_cpu)) if off_cpu > 0.0 => {
                let added = on_cpu / off_cpu - 1.0;
                Goal {
                    goal,
                    measured: format!(
                        "CPU {:.1} vs {:.1} µs/request: {:+.1}%; {rates}",
                        on_cpu * 1e6,
                        off_cpu * 1e6,
                        added * 100.0
                    ),
                    met: Some(added <= GOAL_TOP_CPU),
                }
            }
            _ => Goal {
                goal,
                measured: format!("CPU per request not measured; {rates}"),
                met: None,
            },
        })
    }

    /// For the middleware's variants, what the bare handler sending the same headers reaches:
    /// the part of the ratio that is the headers' bytes, not the deciding.
    fn headers_alone(&self, variant: Variant) -> String {
        if !matches!(variant, Variant::Tollgate | Variant::TollgateKeys) {
            return String::new();
        }
        self.compare(Variant::BareHeaders)
            .map(|c| format!("; the headers alone (bare_headers): {:.3}×", c.ratio))
            .unwrap_or_default()
    }

    /// For the server, its floors: its ratio to `bare_json` (its own cost over a JSON
    /// endpoint), `bare_json`'s to bare (the most the goal's JSON can reach, whatever decides
    /// it), and `bare_json_listener`'s to `bare_json` (what the server's listener machinery
    /// takes); each that ran.
    fn over_floors(&self, variant: Variant) -> String {
        if variant != Variant::Server {
            return String::new();
        }
        let cpu = |c: &Comparison| {
            c.cpu_added
                .map(|cpu| format!(", CPU {} µs/request", signed_micros(cpu)))
                .unwrap_or_default()
        };
        [
            self.compare_to(Variant::BareJson, Variant::Server)
                .map(|c| format!("server {:.3}× bare_json{}", c.ratio, cpu(&c))),
            self.compare(Variant::BareJson)
                .map(|c| format!("bare_json {:.3}× bare{}", c.ratio, cpu(&c))),
            self.compare_to(Variant::BareJson, Variant::BareJsonListener)
                .map(|c| format!("bare_json_listener {:.3}× bare_json{}", c.ratio, cpu(&c))),
        ]
        .into_iter()
        .flatten()
        .map(|floor| format!("; {floor}"))
        .collect()
    }

    /// The goals of the benchmark, judged on this run: the ratio for each limited variant, and
    /// that every request was answered 200 (by the handler, through the middleware).
    pub fn goals(&self) -> Vec<Goal> {
        let mut goals = Vec::new();
        for variant in [Variant::Tollgate, Variant::TollgateKeys, Variant::Server] {
            let Some(target) = variant.goal() else {
                continue;
            };
            if variant == Variant::Server && self.summary(variant).is_none() {
                // Left out by `run_http_with` without the server's router.
                continue;
            }
            let goal =
                format!("{variant}: ≥ {target}× the bare handler's requests/s (median of rounds)");
            goals.push(match (self.compare(variant), self.summary(variant)) {
                (Some(c), Some(s)) => Goal {
                    goal,
                    measured: format!(
                        "{} vs {} requests/s = {:.3}× (per round: {}), p99 {} µs{}",
                        thousands(s.requests_per_sec),
                        thousands(
                            self.summary(Variant::Bare)
                                .map_or(0.0, |b| b.requests_per_sec)
                        ),
                        c.ratio,
                        ratios(&c.round_ratios),
                        signed_micros(c.p99_added),
                        c.cpu_added
                            .map(|cpu| format!(", CPU {} µs/request", signed_micros(cpu)))
                            .unwrap_or_default()
                    ) + &self.headers_alone(variant)
                        + &self.over_floors(variant),
                    met: Some(c.met()),
                },
                _ => Goal {
                    goal,
                    measured: "not run".into(),
                    met: None,
                },
            });
        }
        goals.extend(self.cost_goals());
        if let Some(goal) = self.top_goal() {
            goals.push(goal);
        }
        let summaries: Vec<Summary> = self
            .variants()
            .into_iter()
            .filter_map(|v| self.summary(v))
            .collect();
        let responses: u64 = summaries.iter().map(|s| s.responses).sum();
        let non_200: u64 = summaries.iter().map(|s| s.non_200).sum();
        let errors: u64 = summaries.iter().map(|s| s.errors).sum();
        let limited: Vec<&Summary> = summaries
            .iter()
            .filter(|s| s.variant.is_limited())
            .collect();
        let limited_responses: u64 = limited.iter().map(|s| s.responses).sum();
        let headed: u64 = limited.iter().map(|s| s.with_ratelimit).sum();
        goals.push(Goal {
            goal: "every request answered 200 (none rejected, no transport error), every \
                   limited response with RateLimit headers"
                .into(),
            measured: format!(
                "{} responses: {} non-200, {} errors; RateLimit on {} of {} limited responses",
                thousands(responses as f64),
                thousands(non_200 as f64),
                thousands(errors as f64),
                thousands(headed as f64),
                thousands(limited_responses as f64)
            ),
            met: Some(responses > 0 && non_200 == 0 && errors == 0 && headed == limited_responses),
        });
        goals
    }
}

/// `0.912, 0.887, 0.930`.
pub(crate) fn ratios(values: &[f64]) -> String {
    values
        .iter()
        .map(|r| format!("{r:.3}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Seconds as signed microseconds with one decimal: `+12.3`, `-0.4`, and `0.0` for what rounds
/// to zero either way.
pub(crate) fn signed_micros(seconds: f64) -> String {
    let us = seconds * 1e6;
    if us.abs() < 0.05 {
        "0.0".into()
    } else {
        format!("{us:+.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(variant: Variant, round: usize, responses: u64, p99_us: u64) -> Run {
        Run {
            variant,
            round,
            responses,
            non_200: 0,
            errors: 0,
            with_ratelimit: if variant.is_limited() { responses } else { 0 },
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(p99_us / 2),
            p99: Duration::from_micros(p99_us),
            cpu: Some(Duration::from_millis(responses / 100)),
            others_cpu: Some(Duration::ZERO),
        }
    }

    #[test]
    fn the_ratio_is_of_medians_and_the_goal_is_judged_on_it() {
        let report = HttpReport {
            seconds_per_run: 1.0,
            connections: 64,
            rounds: 3,
            keys: 1000,
            warmup_seconds: 0.0,
            cores: 2,
            tls: None,
            runs: vec![
                run(Variant::Bare, 1, 100_000, 500),
                run(Variant::Tollgate, 1, 95_000, 520),
                run(Variant::Bare, 2, 90_000, 700),
                run(Variant::Tollgate, 2, 80_000, 800),
                // An outlier round moves neither median.
                run(Variant::Bare, 3, 10_000, 9_000),
                run(Variant::Tollgate, 3, 99_000, 600),
            ],
        };
        let bare = report.summary(Variant::Bare).unwrap();
        assert_eq!(bare.requests_per_sec, 90_000.0);
        assert_eq!(bare.p99, Duration::from_micros(700));
        let c = report.compare(Variant::Tollgate).unwrap();
        assert!((c.ratio - 95_000.0 / 90_000.0).abs() < 1e-12, "{c:?}");
        assert!((c.p99_added - (-100e-6)).abs() < 1e-9, "{c:?}");
        assert!(c.met());
        assert_eq!(report.compare(Variant::TollgateKeys), None);
        let goals = report.goals();
        let met: Vec<Option<bool>> = goals.iter().map(|g| g.met).collect();
        assert_eq!(met, [Some(true), None, Some(true)], "{goals:?}");
        assert!(goals[0].measured.contains("1.056×"), "{goals:?}");
        // Paired by round: 0.95, 0.889, 9.9 (bare's bad round).
        assert_eq!(ratios(&c.round_ratios), "0.950, 0.889, 9.900");
        assert!(
            goals[0]
                .measured
                .contains("(per round: 0.950, 0.889, 9.900)"),
            "{goals:?}"
        );
        assert!(goals[0].measured.contains("p99 -100.0 µs"), "{goals:?}");
        // 10 µs of CPU per request in every run: nothing added.
        assert!(c.cpu_added.is_some_and(|cpu| cpu.abs() < 1e-12), "{c:?}");
        assert!(
            goals[0].measured.contains("CPU 0.0 µs/request"),
            "{goals:?}"
        );
    }

    #[test]
    fn a_rejected_request_or_a_missing_header_fails_the_run() {
        let mut limited = run(Variant::Tollgate, 1, 100, 10);
        limited.non_200 = 1;
        let report = HttpReport {
            seconds_per_run: 1.0,
            connections: 1,
            rounds: 1,
            keys: 1,
            warmup_seconds: 0.0,
            cores: 2,
            tls: None,
            runs: vec![run(Variant::Bare, 1, 100, 10), limited.clone()],
        };
        assert_eq!(report.goals()[2].met, Some(false));
        limited.non_200 = 0;
        limited.with_ratelimit = 99;
        let report = HttpReport {
            runs: vec![run(Variant::Bare, 1, 100, 10), limited],
            ..report
        };
        assert_eq!(report.goals()[2].met, Some(false));
        assert_eq!(signed_micros(12.34e-6), "+12.3");
        assert_eq!(signed_micros(-1e-21), "0.0");
    }

    #[test]
    fn the_server_over_tls_is_compared_with_itself_in_plaintext() {
        let report = HttpReport {
            seconds_per_run: 1.0,
            connections: 64,
            rounds: 2,
            keys: 1000,
            warmup_seconds: 0.0,
            cores: 2,
            tls: Some("TLSv1_3, TLS13_AES_256_GCM_SHA384, X25519, ALPN http/1.1".into()),
            runs: vec![
                run(Variant::Server, 1, 100_000, 800),
                run(Variant::ServerTls, 1, 80_000, 1_000),
                run(Variant::ServerTls, 2, 90_000, 1_200),
                run(Variant::Server, 2, 100_000, 800),
            ],
        };
        let cost = report.tls_cost().unwrap();
        assert!((cost.throughput() - 0.85).abs() < 1e-12, "{cost:?}");
        assert!((cost.p50() - 1.375).abs() < 1e-12, "{cost:?}");
        assert!((cost.p99() - 1.375).abs() < 1e-12, "{cost:?}");
        assert_eq!(cost.round_ratios, [0.8, 0.9]);
        // Not held to the server's goal (it has none), and not run without its pair.
        assert_eq!(Variant::ServerTls.goal(), None);
        let plain_only = HttpReport {
            runs: vec![run(Variant::Server, 1, 100_000, 800)],
            ..report.clone()
        };
        assert_eq!(plain_only.tls_cost(), None);
        let md = report.report().to_markdown();
        assert!(md.contains("## TLS / plaintext"), "{md}");
        assert!(
            md.contains("| server | 100,000 | 85,000 | 0.850 | 0.800, 0.900 | 1.375 | 1.375 |"),
            "{md}"
        );
        assert!(md.contains("ALPN http/1.1"), "{md}");
        assert!(
            !plain_only
                .report()
                .to_markdown()
                .contains("TLS / plaintext")
        );
    }
}
