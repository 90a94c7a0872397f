//! The RESP benchmark's report: requests/s and latency per target and pipeline, the goals, and
//! a chart.

use std::fmt::Write as _;

use crate::report::chart::{self, Bar, Group};
use crate::report::{Goal, goals_table, median, thousands};

/// What answers the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// tollgate's Redis-protocol port, memory store: `CL.THROTTLE`.
    Tollgate,
    /// `redis-server` with the redis-cell module: `CL.THROTTLE`.
    RedisCell,
    /// throttlecrab-server: `THROTTLE`.
    Throttlecrab,
}

impl Target {
    /// Every target, in report order.
    pub const ALL: [Target; 3] = [Target::Tollgate, Target::RedisCell, Target::Throttlecrab];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Target::Tollgate => "tollgate",
            Target::RedisCell => "redis-cell",
            Target::Throttlecrab => "throttlecrab",
        }
    }

    /// The command redis-benchmark sends (`__rand_int__` spreads the keys): a burst of 1,000
    /// refilled at a million a second, so that every request takes the whole decision path
    /// and none is limited.
    pub(super) fn command(self) -> [&'static str; 5] {
        let name = match self {
            Target::Throttlecrab => "THROTTLE",
            _ => "CL.THROTTLE",
        };
        [name, "bench:__rand_int__", "1000", "1000000", "1"]
    }

    fn color(self) -> &'static str {
        match self {
            Target::Tollgate => "#2b7bb9",
            Target::RedisCell => "#c0504d",
            Target::Throttlecrab => "#888888",
        }
    }
}

/// One redis-benchmark run.
#[derive(Debug, Clone, PartialEq)]
pub struct RespRun {
    /// The target.
    pub target: Target,
    /// Its pipeline depth.
    pub pipeline: usize,
    /// Its round.
    pub round: usize,
    /// Requests per second.
    pub requests_per_sec: f64,
    /// Median latency, in milliseconds, as redis-benchmark prints it.
    pub p50_ms: f64,
    /// 99th percentile latency, in milliseconds.
    pub p99_ms: f64,
    /// CPU time the server's process spent per request, in microseconds (from
    /// `/proc/<pid>/stat`, 10 ms ticks), if known.
    pub server_cpu_us: Option<f64>,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct RespReport {
    /// Requests per run.
    pub requests: usize,
    /// Connections.
    pub clients: usize,
    /// Keys.
    pub keys: usize,
    /// Rounds.
    pub rounds: usize,
    /// Pipeline depths.
    pub pipelines: Vec<usize>,
    /// Every run, in the order run.
    pub runs: Vec<RespRun>,
    /// The peers that could not run, and why.
    pub missing: Vec<(Target, String)>,
}

/// Reads redis-benchmark's `--csv` line: `"test","rps","avg","min","p50","p95","p99","max"`.
pub(super) fn parse_csv(
    text: &str,
    target: Target,
    pipeline: usize,
    round: usize,
) -> Option<RespRun> {
    let line = text
        .lines()
        .find(|l| l.starts_with('"') && !l.starts_with("\"test\""))?;
    let fields: Vec<f64> = line
        .split("\",\"")
        .skip(1)
        .map(|f| f.trim_matches('"').parse().ok())
        .collect::<Option<_>>()?;
    let [rps, _avg, _min, p50, _p95, p99, _max] = fields[..] else {
        return None;
    };
    Some(RespRun {
        target,
        pipeline,
        round,
        requests_per_sec: rps,
        p50_ms: p50,
        p99_ms: p99,
        server_cpu_us: None,
    })
}

impl RespReport {
    /// The median requests/s and p99 of `target` at `pipeline` across rounds.
    pub fn median(&self, target: Target, pipeline: usize) -> Option<(f64, f64)> {
        let runs = self.runs_of(target, pipeline);
        Some((
            median(runs.iter().map(|r| r.requests_per_sec).collect())?,
            median(runs.iter().map(|r| r.p99_ms).collect())?,
        ))
    }

    /// The median server CPU per request of `target` at `pipeline`, in microseconds.
    pub fn median_cpu(&self, target: Target, pipeline: usize) -> Option<f64> {
        let runs = self.runs_of(target, pipeline);
        median(
            runs.iter()
                .map(|r| r.server_cpu_us)
                .collect::<Option<Vec<f64>>>()?,
        )
    }

    fn runs_of(&self, target: Target, pipeline: usize) -> Vec<&RespRun> {
        self.runs
            .iter()
            .filter(|r| r.target == target && r.pipeline == pipeline)
            .collect()
    }

    /// tollgate ≥ 1.0× redis-cell and ≥ 1.5× throttlecrab, at each pipeline.
    pub fn goals(&self) -> Vec<Goal> {
        let mut goals = Vec::new();
        for &(peer, ratio) in &[(Target::RedisCell, 1.0), (Target::Throttlecrab, 1.5)] {
            for &pipeline in &self.pipelines {
                let goal = format!(
                    "tollgate ≥ {ratio}× {} at pipeline {pipeline} (median requests/s)",
                    peer.name()
                );
                let ours = self.median(Target::Tollgate, pipeline);
                let theirs = self.median(peer, pipeline);
                goals.push(match (ours, theirs) {
                    (Some((ours, _)), Some((theirs, _))) if theirs > 0.0 => Goal {
                        goal,
                        measured: format!(
                            "{} vs {} requests/s = {:.2}×",
                            thousands(ours),
                            thousands(theirs),
                            ours / theirs
                        ),
                        met: Some(ours / theirs >= ratio),
                    },
                    _ => Goal {
                        goal,
                        measured: if self.missing.iter().any(|(t, _)| *t == peer) {
                            format!("{} MISSING (see below)", peer.name())
                        } else {
                            "not run".into()
                        },
                        met: None,
                    },
                });
            }
        }
        goals
    }

    /// The report as Markdown.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# RESP: CL.THROTTLE on tollgate, redis-cell and throttlecrab\n"
        );
        let _ = writeln!(
            md,
            "`redis-benchmark -c {} -n {} -r {}` at pipelines {}, {} rounds of the targets in \
             turn; `CL.THROTTLE bench:__rand_int__ 1000 1000000 1` (throttlecrab: `THROTTLE`, \
             the same numbers), so no request is limited. tollgate serves its memory store in \
             the benchmark's process; the peers run as their own processes.\n",
            self.clients,
            self.requests,
            self.keys,
            self.pipelines
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" and "),
            self.rounds
        );
        goals_table(&mut md, &self.goals());
        let _ = writeln!(md, "## Median of the rounds\n");
        let _ = writeln!(
            md,
            "| target | pipeline | requests/s | × redis-cell | p99 ms | server CPU µs/request |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
        for &pipeline in &self.pipelines {
            let cell = self.median(Target::RedisCell, pipeline).map(|m| m.0);
            for target in Target::ALL {
                let Some((rps, p99)) = self.median(target, pipeline) else {
                    continue;
                };
                let ratio = cell
                    .filter(|c| *c > 0.0)
                    .map_or_else(|| "–".to_owned(), |c| format!("{:.2}", rps / c));
                let cpu = self
                    .median_cpu(target, pipeline)
                    .map_or_else(|| "–".to_owned(), |c| format!("{c:.2}"));
                let _ = writeln!(
                    md,
                    "| {} | {pipeline} | {} | {ratio} | {p99:.3} | {cpu} |",
                    target.name(),
                    thousands(rps)
                );
            }
        }
        md.push('\n');
        let _ = writeln!(md, "## Every run\n");
        let _ = writeln!(
            md,
            "| round | pipeline | target | requests/s | p50 ms | p99 ms |"
        );
        let _ = writeln!(md, "|---:|---:|---|---:|---:|---:|");
        for r in &self.runs {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.3} | {:.3} |",
                r.round,
                r.pipeline,
                r.target.name(),
                thousands(r.requests_per_sec),
                r.p50_ms,
                r.p99_ms
            );
        }
        if !self.missing.is_empty() {
            let _ = writeln!(md, "\n## Missing peers\n");
            for (target, why) in &self.missing {
                let _ = writeln!(md, "- **{}**: {why}", target.name());
            }
        }
        md
    }

    /// The report as an SVG chart: median requests/s per pipeline, a bar per target.
    pub fn to_svg(&self) -> String {
        let width = 720.0;
        let mut svg = String::new();
        chart::open(
            &mut svg,
            width,
            310.0,
            "RESP rate-limit commands: requests/s (higher is better)",
        );
        chart::legend(
            &mut svg,
            Target::ALL.iter().map(|t| (t.name().to_owned(), t.color())),
        );
        let groups: Vec<Group> = self
            .pipelines
            .iter()
            .map(|&pipeline| Group {
                label: format!("pipeline {pipeline}"),
                bars: Target::ALL
                    .iter()
                    .map(|&t| {
                        self.median(t, pipeline).map(|(rps, _)| Bar {
                            title: t.name().to_owned(),
                            value: rps,
                            color: t.color(),
                        })
                    })
                    .collect(),
            })
            .collect();
        chart::grouped_bars(
            &mut svg,
            width,
            60.0,
            ("median of the rounds", None),
            &groups,
            "requests/s",
        );
        svg.push_str("</svg>\n");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_redis_benchmarks_csv() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"CL.THROTTLE bench:__rand_int__ 1000 1000000 1\",\"93457.95\",\"0.377\",\"0.136\",\"0.327\",\"0.511\",\"1.663\",\"6.239\"\n";
        let run = parse_csv(text, Target::RedisCell, 1, 1).unwrap();
        assert_eq!(run.requests_per_sec, 93457.95);
        assert_eq!((run.p50_ms, run.p99_ms), (0.327, 1.663));
        assert_eq!(parse_csv("garbage", Target::RedisCell, 1, 1), None);
    }

    #[test]
    fn a_missing_peer_is_reported_not_judged() {
        let report = RespReport {
            requests: 1,
            clients: 1,
            keys: 1,
            rounds: 1,
            pipelines: vec![1],
            runs: vec![RespRun {
                target: Target::Tollgate,
                pipeline: 1,
                round: 1,
                requests_per_sec: 10.0,
                p50_ms: 0.1,
                p99_ms: 0.2,
                server_cpu_us: None,
            }],
            missing: vec![(Target::RedisCell, "no module given".into())],
        };
        let goals = report.goals();
        assert_eq!(goals[0].met, None);
        assert!(goals[0].measured.contains("MISSING"));
        assert!(report.to_markdown().contains("no module given"));
    }
}
