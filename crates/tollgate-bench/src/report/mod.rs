//! What a Redis run measured, the goals it is held to, and its renderings; and what the
//! PostgreSQL (`postgres::report`) and HTTP (`http`) reports share: [`Goal`], the number
//! formats, writing the files.

pub(crate) mod chart;
mod markdown;
mod svg;

use std::path::Path;
use std::time::Duration;

use crate::BenchError;
use crate::redis::{Approach, Scenario};

pub(crate) use markdown::{goals_table, micros};
pub(crate) use svg::{compact, escape, nice_ceiling};

/// The concurrency the ratio goals are stated at.
pub const GOAL_CONCURRENCY: usize = 64;

/// One run of `tollgate bench redis`.
#[derive(Debug, Clone)]
pub struct RedisReport {
    /// Unique to the run; part of every key it wrote.
    pub run_id: String,
    /// `redis_version` from `INFO server`.
    pub redis_version: String,
    /// Measured time per cell.
    pub seconds_per_cell: f64,
    /// The concurrencies measured.
    pub concurrency: Vec<usize>,
    /// One per scenario × concurrency × approach, in the order run.
    pub cells: Vec<Cell>,
    /// One per approach.
    pub over_grant: Vec<OverGrant>,
}

/// One approach under one scenario at one concurrency.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The load shape.
    pub scenario: Scenario,
    /// The approach.
    pub approach: Approach,
    /// Concurrent workers.
    pub concurrency: usize,
    /// Checks answered (allowed or denied).
    pub decisions: u64,
    /// Checks allowed.
    pub allowed: u64,
    /// Checks that failed (Redis errors, timeouts, `WATCH` giving up).
    pub errors: u64,
    /// Wall time from the first check to the last answer.
    pub elapsed: Duration,
    /// Median latency of a check (errors included).
    pub p50: Duration,
    /// 99th percentile latency of a check (errors included).
    pub p99: Duration,
    /// Commands the clients sent (round trips; see `commandstats`).
    pub client_calls: u64,
    /// Commands Redis executed, the ones scripts ran included.
    pub commands: u64,
}

impl Cell {
    /// Answered checks per second.
    pub fn decisions_per_sec(&self) -> f64 {
        per(self.decisions as f64, self.elapsed.as_secs_f64())
    }

    /// Client calls per check asked (answered or failed).
    pub fn calls_per_decision(&self) -> f64 {
        per(
            self.client_calls as f64,
            (self.decisions + self.errors) as f64,
        )
    }

    /// Commands Redis executed per check asked.
    pub fn commands_per_decision(&self) -> f64 {
        per(self.commands as f64, (self.decisions + self.errors) as f64)
    }
}

/// The over-grant test of one approach: many workers on one small bucket.
#[derive(Debug, Clone)]
pub struct OverGrant {
    /// The approach.
    pub approach: Approach,
    /// Concurrent workers, all on one key.
    pub workers: usize,
    /// How long they ran.
    pub seconds: f64,
    /// Bucket capacity.
    pub burst: u64,
    /// Tokens per second.
    pub rate: u64,
    /// Checks answered.
    pub decisions: u64,
    /// Checks allowed.
    pub allowed: u64,
    /// Checks that failed.
    pub errors: u64,
}

impl OverGrant {
    /// The most an exact limiter may allow: `burst + rate × seconds`.
    pub fn max_allowed(&self) -> u64 {
        self.burst + (self.rate as f64 * self.seconds).floor() as u64
    }

    /// `allowed / max_allowed - 1`: 0 for exact, positive when it let too many through.
    pub fn over_grant(&self) -> f64 {
        self.allowed as f64 / self.max_allowed() as f64 - 1.0
    }
}

/// A goal of the benchmark and whether this run met it.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    /// The goal, in words.
    pub goal: String,
    /// What was measured.
    pub measured: String,
    /// `None` when the run did not measure what the goal needs.
    pub met: Option<bool>,
}

impl RedisReport {
    /// The cell of `approach` under `scenario` at `concurrency`.
    pub fn cell(
        &self,
        scenario: Scenario,
        approach: Approach,
        concurrency: usize,
    ) -> Option<&Cell> {
        self.cells.iter().find(|c| {
            c.scenario == scenario && c.approach == approach && c.concurrency == concurrency
        })
    }

    /// The over-grant test of `approach`.
    pub fn over_grant_of(&self, approach: Approach) -> Option<&OverGrant> {
        self.over_grant.iter().find(|o| o.approach == approach)
    }

    /// The concurrency the ratio goals are judged at: 64, or the largest measured if 64 was not.
    pub fn goal_concurrency(&self) -> Option<usize> {
        if self.concurrency.contains(&GOAL_CONCURRENCY) {
            Some(GOAL_CONCURRENCY)
        } else {
            self.concurrency.iter().copied().max()
        }
    }

    /// The goals of the issue, judged on this run.
    pub fn goals(&self) -> Vec<Goal> {
        let mut goals = Vec::new();
        goals.push(match self.over_grant_of(Approach::Tollgate) {
            Some(o) => Goal {
                goal: format!(
                    "tollgate over-grants 0 (burst {}, {}/s, {} workers, {} s: at most {} allowed)",
                    o.burst,
                    o.rate,
                    o.workers,
                    o.seconds,
                    o.max_allowed()
                ),
                measured: format!(
                    "{} allowed ({}), {} errors",
                    o.allowed,
                    percent(o.over_grant()),
                    o.errors
                ),
                met: Some(o.allowed <= o.max_allowed()),
            },
            None => unmeasured("tollgate over-grants 0", "over-grant test not run"),
        });
        let c = self.goal_concurrency().unwrap_or(GOAL_CONCURRENCY);
        goals.push(self.ratio_goal(Scenario::PerUser, c, 1.5));
        goals.push(self.ratio_goal(Scenario::HotKey, c, 2.0));
        let flood: Vec<&Cell> = self
            .cells
            .iter()
            .filter(|x| x.scenario == Scenario::HotKeyFlood && x.approach == Approach::Tollgate)
            .collect();
        let goal =
            "hot_key_flood: tollgate makes ≤ 0.1 Redis calls per decision (every concurrency)";
        goals.push(
            match flood
                .iter()
                .max_by(|a, b| a.calls_per_decision().total_cmp(&b.calls_per_decision()))
            {
                Some(worst) => Goal {
                    goal: goal.into(),
                    measured: format!(
                        "at most {} calls/decision (c={}: {} calls for {} decisions); {} \
                         commands/decision counting the script's own TIME/MGET/SET",
                        small(worst.calls_per_decision()),
                        worst.concurrency,
                        worst.client_calls,
                        thousands(worst.decisions as f64),
                        small(worst.commands_per_decision())
                    ),
                    met: Some(worst.calls_per_decision() <= 0.1 && worst.decisions > 0),
                },
                None => unmeasured(goal, "hot_key_flood not run"),
            },
        );
        goals
    }

    fn ratio_goal(&self, scenario: Scenario, c: usize, factor: f64) -> Goal {
        let goal = format!(
            "{scenario} c={c}: tollgate ≥ {factor}× the Lua-per-request approach's decisions/s"
        );
        match (
            self.cell(scenario, Approach::Tollgate, c),
            self.cell(scenario, Approach::Lua, c),
        ) {
            (Some(t), Some(l)) => {
                let ratio = per(t.decisions_per_sec(), l.decisions_per_sec());
                Goal {
                    goal,
                    measured: format!(
                        "{} vs {} decisions/s = {ratio:.2}×",
                        thousands(t.decisions_per_sec()),
                        thousands(l.decisions_per_sec())
                    ),
                    met: Some(ratio >= factor),
                }
            }
            _ => unmeasured(&goal, "a cell it needs was not run"),
        }
    }

    /// The report as Markdown: goals, a table per scenario, the over-grant test.
    pub fn to_markdown(&self) -> String {
        markdown::render(self)
    }

    /// Bar charts of decisions/s, one panel per scenario, as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        svg::render(self)
    }
}

fn unmeasured(goal: &str, why: &str) -> Goal {
    Goal {
        goal: goal.into(),
        measured: why.into(),
        met: None,
    }
}

/// Writes a report file, creating its directory.
pub(crate) fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    let io = |source| BenchError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    std::fs::write(path, text).map_err(io)
}

/// `a / b`, 0 when `b` is 0 (an empty cell has no rate).
fn per(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// A signed percentage with two decimals: `+207.50%`, `0.00%`, `-5.00%`.
pub(crate) fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p.abs() < 0.005 {
        "0.00%".into()
    } else {
        format!("{p:+.2}%")
    }
}

/// A ratio that may be tiny: three decimals from 0.1 up, three significant digits below.
pub(crate) fn small(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    if x >= 0.1 {
        return format!("{x:.3}");
    }
    let decimals = (2.0 - x.abs().log10().floor()) as usize;
    format!("{x:.decimals$}")
}

/// A whole number with thousands separators: `1,234,567`.
/// The median of `values` (the mean of the middle two for an even count); `None` for none.
pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

pub(crate) fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(percent(0.0), "0.00%");
        assert_eq!(small(0.0), "0");
        assert_eq!(small(3.0), "3.000");
        assert_eq!(small(0.1), "0.100");
        assert_eq!(small(0.0123), "0.0123");
        assert_eq!(small(0.0000214), "0.0000214");
        assert_eq!(percent(123.0 / 40.0 - 1.0), "+207.50%");
        assert_eq!(percent(38.0 / 40.0 - 1.0), "-5.00%");
    }

    fn cell(scenario: Scenario, approach: Approach, decisions: u64, calls: u64) -> Cell {
        Cell {
            scenario,
            approach,
            concurrency: 64,
            decisions,
            allowed: decisions,
            errors: 0,
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(10),
            p99: Duration::from_micros(20),
            client_calls: calls,
            commands: calls * 4,
        }
    }

    #[test]
    fn goals_are_judged_on_the_cells_they_name() {
        let report = RedisReport {
            run_id: "r".into(),
            redis_version: "7".into(),
            seconds_per_cell: 1.0,
            concurrency: vec![1, 64],
            cells: vec![
                cell(Scenario::PerUser, Approach::Tollgate, 150, 150),
                cell(Scenario::PerUser, Approach::Lua, 100, 100),
                cell(Scenario::HotKey, Approach::Tollgate, 199, 10),
                cell(Scenario::HotKey, Approach::Lua, 100, 100),
                cell(Scenario::HotKeyFlood, Approach::Tollgate, 1000, 101),
            ],
            over_grant: vec![],
        };
        let goals = report.goals();
        let met: Vec<Option<bool>> = goals.iter().map(|g| g.met).collect();
        assert_eq!(
            met,
            [None, Some(true), Some(false), Some(false)],
            "{goals:?}"
        );
        assert!(goals[1].measured.contains("1.50×"), "{goals:?}");
        assert!(goals[3].measured.contains("0.101"), "{goals:?}");
        let md = report.to_markdown();
        assert!(
            md.contains("| **no** |") && md.contains("| not measured |"),
            "{md}"
        );
    }

    #[test]
    fn over_grant_is_relative_to_burst_plus_refill() {
        let o = OverGrant {
            approach: Approach::Multi,
            workers: 64,
            seconds: 3.0,
            burst: 10,
            rate: 10,
            decisions: 1000,
            allowed: 123,
            errors: 0,
        };
        assert_eq!(o.max_allowed(), 40);
        assert!((o.over_grant() - 2.075).abs() < 1e-9);
    }
}
