//! What a RESP run measured (requests/s and latency per target and pipeline, the peers
//! missing), the goals it is held to, and the medians across rounds.

mod document;

use crate::report::{Goal, median, thousands};

/// What answers the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// tollgate's Redis-protocol port, memory store: `CL.THROTTLE`.
    Tollgate,
    /// `redis-server` with the redis-cell module: `CL.THROTTLE`.
    RedisCell,
    /// throttlecrab-server: `THROTTLE`.
    Throttlecrab,
    /// A plain `redis-server` answering `PING`: what a fast RESP server answers to the
    /// cheapest request under this load generator on this machine. Where the load generator is
    /// what holds every target back, it is about as fast as any target can go.
    Ceiling,
}

impl Target {
    /// Every target, in report order.
    pub const ALL: [Target; 4] = [
        Target::Tollgate,
        Target::RedisCell,
        Target::Throttlecrab,
        Target::Ceiling,
    ];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Target::Tollgate => "tollgate",
            Target::RedisCell => "redis-cell",
            Target::Throttlecrab => "throttlecrab",
            Target::Ceiling => "redis-server PING",
        }
    }

    /// The command redis-benchmark sends (`__rand_int__` spreads the keys): a burst of 1,000
    /// refilled at a million a second, so that every request takes the whole decision path
    /// and none is limited; the ceiling's `PING`.
    pub(super) fn command(self) -> &'static [&'static str] {
        match self {
            Target::Tollgate | Target::RedisCell => {
                &["CL.THROTTLE", "bench:__rand_int__", "1000", "1000000", "1"]
            }
            Target::Throttlecrab => &["THROTTLE", "bench:__rand_int__", "1000", "1000000", "1"],
            Target::Ceiling => &["PING"],
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

    /// tollgate ≥ 1.0× redis-cell and ≥ 1.5× throttlecrab, at each pipeline. A goal not met that
    /// asks for more than the ceiling at its pipeline says by how much. Then the same peers'
    /// server CPU per decision ([`RespReport::cpu_goals`]).
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
                    (Some((ours, _)), Some((theirs, _))) if theirs > 0.0 => {
                        let mut measured = format!(
                            "{} vs {} requests/s = {:.2}×",
                            thousands(ours),
                            thousands(theirs),
                            ours / theirs
                        );
                        let needed = ratio * theirs;
                        if let Some((ceiling, _)) = self.median(Target::Ceiling, pipeline)
                            && ours < needed
                            && needed > ceiling
                        {
                            measured.push_str(&format!(
                                "; {ratio}× would be {} requests/s, {:.2}× the ceiling \
                                 (redis-server answering PING: {})",
                                thousands(needed),
                                needed / ceiling,
                                thousands(ceiling)
                            ));
                        }
                        Goal {
                            goal,
                            measured,
                            met: Some(ours / theirs >= ratio),
                        }
                    }
                    _ => self.unmeasured(goal, peer),
                });
            }
        }
        goals.extend(self.cpu_goals());
        goals
    }

    /// tollgate's server CPU per decision ≤ 1.0× redis-cell's (redis-server and its module) and
    /// ≤ 0.67× throttlecrab's, at each pipeline: what throughput cannot show where every target
    /// runs at the load generator's speed, and what decides how many cores a fleet needs.
    pub fn cpu_goals(&self) -> Vec<Goal> {
        let mut goals = Vec::new();
        for &(peer, ratio) in &[(Target::RedisCell, 1.0), (Target::Throttlecrab, 0.67)] {
            for &pipeline in &self.pipelines {
                let goal = format!(
                    "tollgate's server CPU per decision ≤ {ratio}× {}'s at pipeline {pipeline} \
                     (median user + system µs per request, from /proc)",
                    peer.name()
                );
                let ours = self.median_cpu(Target::Tollgate, pipeline);
                let theirs = self.median_cpu(peer, pipeline);
                goals.push(match (ours, theirs) {
                    (Some(ours), Some(theirs)) if theirs > 0.0 => Goal {
                        goal,
                        measured: format!("{ours:.2} vs {theirs:.2} µs = {:.2}×", ours / theirs),
                        met: Some(ours / theirs <= ratio),
                    },
                    _ => self.unmeasured(goal, peer),
                });
            }
        }
        goals
    }

    /// A goal against `peer` that this run could not judge: the peer missing, or not run.
    fn unmeasured(&self, goal: String, peer: Target) -> Goal {
        Goal {
            goal,
            measured: if self.missing.iter().any(|(t, _)| *t == peer) {
                format!("{} MISSING (see below)", peer.name())
            } else {
                "not run".into()
            },
            met: None,
        }
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

    fn run(target: Target, requests_per_sec: f64) -> RespRun {
        RespRun {
            target,
            pipeline: 1,
            round: 1,
            requests_per_sec,
            p50_ms: 0.1,
            p99_ms: 0.2,
            server_cpu_us: None,
        }
    }

    /// A run of one round at pipeline 1.
    fn report(runs: Vec<RespRun>, missing: Vec<(Target, String)>) -> RespReport {
        RespReport {
            requests: 1,
            clients: 1,
            keys: 1,
            rounds: 1,
            pipelines: vec![1],
            runs,
            missing,
        }
    }

    #[test]
    fn a_goal_past_the_ceiling_says_so() {
        let report = report(
            vec![
                run(Target::Tollgate, 95.0),
                run(Target::RedisCell, 90.0),
                run(Target::Throttlecrab, 80.0),
                run(Target::Ceiling, 100.0),
            ],
            Vec::new(),
        );
        let goals = report.goals();
        // Met, or within the ceiling: nothing added.
        assert_eq!(goals[0].met, Some(true));
        assert!(
            !goals[0].measured.contains("ceiling"),
            "{}",
            goals[0].measured
        );
        // 1.5 × 80 = 120 > 100.
        assert_eq!(goals[1].met, Some(false));
        assert!(
            goals[1].measured.contains("1.20× the ceiling"),
            "{}",
            goals[1].measured
        );
        assert!(report.report().to_markdown().contains("redis-server PING"));
    }

    #[test]
    fn cpu_per_decision_is_held_to_each_peers() {
        let with_cpu = |target, cpu| RespRun {
            server_cpu_us: Some(cpu),
            ..run(target, 90.0)
        };
        let report = report(
            vec![
                with_cpu(Target::Tollgate, 4.0),
                with_cpu(Target::RedisCell, 5.0),
                with_cpu(Target::Throttlecrab, 5.0),
            ],
            Vec::new(),
        );
        let goals = report.cpu_goals();
        assert_eq!(goals.len(), 2);
        // 4 ≤ 1.0 × 5.
        assert_eq!(goals[0].met, Some(true), "{}", goals[0].measured);
        assert!(goals[0].measured.contains("4.00 vs 5.00 µs = 0.80×"));
        // 4 > 0.67 × 5.
        assert_eq!(goals[1].met, Some(false), "{}", goals[1].measured);
        assert!(goals[1].goal.contains("0.67× throttlecrab's at pipeline 1"));
        // Every goal of the report, the CPU's among them.
        assert_eq!(report.goals().len(), 4);
    }

    #[test]
    fn a_missing_peer_is_reported_not_judged() {
        let report = report(
            vec![run(Target::Tollgate, 10.0)],
            vec![(Target::RedisCell, "no module given".into())],
        );
        let goals = report.goals();
        assert_eq!(goals[0].met, None);
        assert!(goals[0].measured.contains("MISSING"));
        assert!(report.report().to_markdown().contains("no module given"));
    }
}
