//! What a tail run measured (per run: the latency distribution from the scheduled send times,
//! and p99 per slice of time), the goals it is held to, and the pairs they are judged on.

mod document;

use std::fmt;
use std::time::Duration;

use clap::ValueEnum;

use super::pace::Sample;
use crate::report::Goal;
use crate::stats::Histogram;

/// The goal: tollgate's p99 at most this many times the bare server's, in every pair of runs.
pub const GOAL_RATIO: f64 = 1.5;

/// A slice whose p99 is above this many times the run's median slice p99 is a spike.
pub const SPIKE: f64 = 3.0;

/// The protocols measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Protocol {
    /// `POST /v1/check` on `tollgate serve`'s HTTP listener beside a bare axum handler (on
    /// hyper) answering `GET /hello`.
    Http,
    /// `ShouldRateLimit` on tollgate's gRPC listener (memory store) beside a bare tonic service
    /// answering `OK`.
    Grpc,
    /// `CL.THROTTLE` on tollgate's Redis-protocol listener beside `redis-server` answering
    /// `PING`.
    Resp,
}

impl Protocol {
    /// Every protocol, in report order.
    pub const ALL: [Protocol; 3] = [Protocol::Http, Protocol::Grpc, Protocol::Resp];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
            Protocol::Resp => "resp",
        }
    }

    /// What the bare server is, and what tollgate answers, in words.
    pub fn pair(self) -> (&'static str, &'static str) {
        match self {
            Protocol::Http => (
                "bare axum handler on hyper, GET /hello",
                "tollgate serve, POST /v1/check (memory store)",
            ),
            Protocol::Grpc => (
                "bare tonic service answering OK",
                "tollgate serve's gRPC listener, ShouldRateLimit (memory store)",
            ),
            Protocol::Resp => (
                "redis-server answering PING",
                "tollgate serve's RESP listener, CL.THROTTLE (memory store)",
            ),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What else the machine does during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Condition {
    /// Nothing the benchmark starts (other work on the machine goes on).
    Idle,
    /// A busy-loop process per core but one, started by the benchmark.
    Busy,
}

impl Condition {
    /// Every condition, in report order.
    pub const ALL: [Condition; 2] = [Condition::Idle, Condition::Busy];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Idle => "idle",
            Condition::Busy => "busy",
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One run: one server, one condition, one round.
#[derive(Debug, Clone, PartialEq)]
pub struct TailRun {
    /// The protocol.
    pub protocol: Protocol,
    /// The condition.
    pub condition: Condition,
    /// The round.
    pub round: usize,
    /// tollgate's server (`false`: the bare one).
    pub tollgate: bool,
    /// Requests sent (every one scheduled).
    pub requests: u64,
    /// Requests that failed or were not answered as expected.
    pub errors: u64,
    /// Answers per second over the run.
    pub per_sec: f64,
    /// Latency percentiles from the scheduled send time, in µs: p50, p90, p99, p99.9, p99.99,
    /// and the largest.
    pub percentiles: [f64; 6],
    /// p99 of each slice of the run (by scheduled send time), in µs, in order.
    pub slices_p99: Vec<f64>,
}

/// The quantiles of [`TailRun::percentiles`], and their names.
pub const QUANTILES: [(f64, &str); 6] = [
    (0.5, "p50"),
    (0.9, "p90"),
    (0.99, "p99"),
    (0.999, "p99.9"),
    (0.9999, "p99.99"),
    (1.0, "max"),
];

impl TailRun {
    /// The run of `samples` scheduled over `slice`-wide slices.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn of(
        protocol: Protocol,
        condition: Condition,
        round: usize,
        tollgate: bool,
        samples: &[Sample],
        errors: u64,
        elapsed: Duration,
        slice: Duration,
    ) -> TailRun {
        let mut whole = Histogram::new();
        let slices = samples
            .iter()
            .map(|s| slice_of(s.scheduled, slice) + 1)
            .max()
            .unwrap_or(0);
        let mut sliced = vec![Histogram::new(); slices];
        for s in samples {
            whole.record(s.latency);
            sliced[slice_of(s.scheduled, slice)].record(s.latency);
        }
        let us = |h: &Histogram, q| h.quantile(q).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
        TailRun {
            protocol,
            condition,
            round,
            tollgate,
            requests: whole.count(),
            errors,
            per_sec: whole.count() as f64 / elapsed.as_secs_f64().max(1e-9),
            percentiles: QUANTILES.map(|(q, _)| us(&whole, q)),
            slices_p99: sliced.iter().map(|h| us(h, 0.99)).collect(),
        }
    }

    /// p99, in µs.
    pub fn p99(&self) -> f64 {
        self.percentiles[2]
    }

    /// p99.9, in µs.
    pub fn p999(&self) -> f64 {
        self.percentiles[3]
    }

    /// The median of the slices' p99, in µs.
    pub fn typical_slice(&self) -> f64 {
        crate::report::median(
            self.slices_p99
                .iter()
                .copied()
                .filter(|x| x.is_finite())
                .collect(),
        )
        .unwrap_or(f64::NAN)
    }

    /// The slices (their indexes) whose p99 is above [`SPIKE`] times the median slice's.
    pub fn spikes(&self) -> Vec<usize> {
        let typical = self.typical_slice();
        self.slices_p99
            .iter()
            .enumerate()
            .filter(|(_, p99)| **p99 > SPIKE * typical)
            .map(|(i, _)| i)
            .collect()
    }

    /// The name of the server in the report.
    pub fn target(&self) -> &'static str {
        if self.tollgate { "tollgate" } else { "bare" }
    }
}

fn slice_of(at: Duration, slice: Duration) -> usize {
    (at.as_nanos() / slice.as_nanos().max(1)) as usize
}

/// The whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct TailReport {
    /// Requests per second offered.
    pub rate: u32,
    /// Seconds per run.
    pub seconds: f64,
    /// Connections (calls in flight for gRPC).
    pub connections: usize,
    /// Rounds.
    pub rounds: usize,
    /// The slices' width, in milliseconds.
    pub slice_ms: u64,
    /// Busy loops started for the busy condition.
    pub busy_loops: usize,
    /// The machine's cores.
    pub cores: usize,
    /// `/proc/loadavg`'s three load averages before the first run and after the last.
    pub load: (String, String),
    /// Every run, in the order run.
    pub runs: Vec<TailRun>,
    /// Protocols not measured, and why.
    pub missing: Vec<(Protocol, String)>,
}

/// A bare run and tollgate's, of one protocol, condition and round.
pub struct Pairing<'a> {
    /// The bare server's run.
    pub bare: &'a TailRun,
    /// tollgate's.
    pub tollgate: &'a TailRun,
}

impl Pairing<'_> {
    /// tollgate's p99 over the bare server's.
    pub fn p99_ratio(&self) -> f64 {
        self.tollgate.p99() / self.bare.p99()
    }

    /// tollgate's p99.9 over the bare server's.
    pub fn p999_ratio(&self) -> f64 {
        self.tollgate.p999() / self.bare.p999()
    }
}

impl TailReport {
    /// The protocols measured, in report order.
    pub fn protocols(&self) -> Vec<Protocol> {
        Protocol::ALL
            .into_iter()
            .filter(|p| self.runs.iter().any(|r| r.protocol == *p))
            .collect()
    }

    /// Every pair of runs of `protocol`, by condition then round.
    pub fn pairs(&self, protocol: Protocol) -> Vec<Pairing<'_>> {
        let mut pairs: Vec<Pairing<'_>> = self
            .runs
            .iter()
            .filter(|r| r.protocol == protocol && r.tollgate)
            .filter_map(|tollgate| {
                let bare = self.runs.iter().find(|b| {
                    !b.tollgate
                        && b.protocol == protocol
                        && b.condition == tollgate.condition
                        && b.round == tollgate.round
                })?;
                Some(Pairing { bare, tollgate })
            })
            .collect();
        pairs.sort_by_key(|p| (p.tollgate.condition, p.tollgate.round));
        pairs
    }

    /// The goals: per protocol, tollgate's p99 at most [`GOAL_RATIO`] times the bare
    /// server's in every pair of runs, p99.9 beside it.
    pub fn goals(&self) -> Vec<Goal> {
        Protocol::ALL
            .into_iter()
            .filter_map(|protocol| {
                let (bare, tollgate) = protocol.pair();
                let goal = format!(
                    "{}: tollgate's p99 ({tollgate}) ≤ {GOAL_RATIO}× the bare server's ({bare}) \
                     at {} requests/s, in every run; p99.9 reported",
                    protocol.name().to_uppercase(),
                    crate::report::thousands(f64::from(self.rate)),
                );
                if let Some((_, why)) = self.missing.iter().find(|(p, _)| *p == protocol) {
                    return Some(Goal::unmeasured(goal, format!("not measured: {why}")));
                }
                let pairs = self.pairs(protocol);
                if pairs.is_empty() {
                    return None;
                }
                let ratios = |f: &dyn Fn(&Pairing<'_>) -> f64| {
                    pairs
                        .iter()
                        .map(|p| format!("{:.2}", f(p)))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let errors: u64 = pairs
                    .iter()
                    .map(|p| p.tollgate.errors + p.bare.errors)
                    .sum();
                Some(Goal {
                    goal,
                    measured: format!(
                        "p99 ratios {}; p99.9 ratios {}; {errors} errors",
                        ratios(&|p| p.p99_ratio()),
                        ratios(&|p| p.p999_ratio())
                    ),
                    met: Some(errors == 0 && pairs.iter().all(|p| p.p99_ratio() <= GOAL_RATIO)),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, latency_us: u64) -> Sample {
        Sample {
            scheduled: Duration::from_millis(ms),
            latency: Duration::from_micros(latency_us),
        }
    }

    #[test]
    fn a_stall_shows_in_its_slice_and_the_goal_compares_pairs() {
        // 100 requests per 100 ms slice for 1 s; the sixth slice stalls.
        let samples: Vec<Sample> = (0..1000)
            .map(|i| sample(i, if (500..600).contains(&i) { 5_000 } else { 100 }))
            .collect();
        let run = |tollgate| {
            TailRun::of(
                Protocol::Http,
                Condition::Idle,
                1,
                tollgate,
                &samples,
                0,
                Duration::from_secs(1),
                Duration::from_millis(100),
            )
        };
        let stalled = run(true);
        assert_eq!(stalled.requests, 1000);
        assert_eq!(stalled.slices_p99.len(), 10);
        assert_eq!(stalled.spikes(), vec![5]);
        assert!(
            stalled.typical_slice() < 110.0,
            "{}",
            stalled.typical_slice()
        );
        let mut bare = run(false);
        bare.percentiles[2] = stalled.p99() / 2.0;
        let report = TailReport {
            rate: 1000,
            seconds: 1.0,
            connections: 1,
            rounds: 1,
            slice_ms: 100,
            busy_loops: 1,
            cores: 2,
            load: (String::new(), String::new()),
            runs: vec![bare, stalled],
            missing: vec![(Protocol::Resp, "no redis-server".into())],
        };
        let goals = report.goals();
        assert_eq!(goals.len(), 2, "{goals:?}");
        assert_eq!(goals[0].met, Some(false), "{goals:?}");
        assert!(
            goals[0].measured.starts_with("p99 ratios 2.00"),
            "{goals:?}"
        );
        assert_eq!(goals[1].met, None);
    }
}
