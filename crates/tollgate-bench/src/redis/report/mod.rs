//! What a Redis run measured and the goals it is held to.

mod document;

use std::time::Duration;

use super::{Approach, ClusterCell, Scenario};
use crate::report::{Goal, per, small, thousands};

/// The concurrency the ratio goals are stated at.
pub const GOAL_CONCURRENCY: usize = 64;

/// Redis's time per tollgate decision at most this many times MULTI's (three native commands a
/// decision), in `per_user` at the goal concurrency.
pub const GOAL_REDIS_VS_MULTI: f64 = 1.6;

/// One run of `tollgate-bench redis`.
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
    /// tollgate on a Redis Cluster, when one was given.
    pub cluster: Vec<ClusterCell>,
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
    /// Microseconds Redis spent executing the commands the clients sent, script bodies
    /// included (`INFO commandstats`).
    pub redis_usec: u64,
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

    /// Microseconds of Redis's time per check asked.
    pub fn redis_micros_per_decision(&self) -> f64 {
        per(
            self.redis_usec as f64,
            (self.decisions + self.errors) as f64,
        )
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
            Some(o) => Goal::over_grant(
                format!(
                    "tollgate over-grants 0 (burst {}, {}/s, {} workers, {} s: at most {} allowed)",
                    o.burst,
                    o.rate,
                    o.workers,
                    o.seconds,
                    o.max_allowed()
                ),
                o.max_allowed(),
                o.allowed,
                o.errors,
            ),
            None => Goal::unmeasured("tollgate over-grants 0", "over-grant test not run"),
        });
        let c = self.goal_concurrency().unwrap_or(GOAL_CONCURRENCY);
        goals.push(self.ratio_goal(Scenario::PerUser, c, 2.5));
        goals.push(self.ratio_goal(Scenario::HotKey, c, 4.0));
        // A decision that finds nothing to batch with costs no more than a plain EVALSHA.
        goals.push(self.ratio_goal(Scenario::PerUser, 1, 1.0));
        goals.push(self.ratio_goal(Scenario::HotKey, 1, 1.0));
        goals.push(self.redis_time_goal(Scenario::PerUser, c, 2.0));
        goals.push(self.redis_vs_multi_goal(Scenario::PerUser, c));
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
                None => Goal::unmeasured(goal, "hot_key_flood not run"),
            },
        );
        goals
    }

    /// tollgate's Redis time per decision in `scenario` at `c`, against `most` µs.
    fn redis_time_goal(&self, scenario: Scenario, c: usize, most: f64) -> Goal {
        let goal = format!(
            "{scenario} c={c}: Redis spends ≤ {most} µs per tollgate decision (`INFO commandstats`; the redis-cell module spends 1.9–2.4 µs a call)"
        );
        match self.cell(scenario, Approach::Tollgate, c) {
            Some(t) => {
                let lua = self
                    .cell(scenario, Approach::Lua, c)
                    .map(|l| {
                        format!(
                            " (the Lua approach: {:.2} µs)",
                            l.redis_micros_per_decision()
                        )
                    })
                    .unwrap_or_default();
                Goal {
                    goal,
                    measured: format!(
                        "{:.2} µs: {} µs for {} decisions{lua}",
                        t.redis_micros_per_decision(),
                        thousands(t.redis_usec as f64),
                        thousands((t.decisions + t.errors) as f64)
                    ),
                    met: Some(t.decisions > 0 && t.redis_micros_per_decision() <= most),
                }
            }
            None => Goal::unmeasured(goal, "the cell it needs was not run"),
        }
    }

    /// `approach`'s Redis time per decision over MULTI's in `scenario` at `c`; `None` unless
    /// both ran and MULTI's was above zero.
    pub fn redis_vs_multi(&self, scenario: Scenario, approach: Approach, c: usize) -> Option<f64> {
        let multi = self.cell(scenario, Approach::Multi, c)?;
        let cell = self.cell(scenario, approach, c)?;
        let multi = multi.redis_micros_per_decision();
        (multi > 0.0).then(|| cell.redis_micros_per_decision() / multi)
    }

    /// tollgate's Redis time per decision over MULTI's, against [`GOAL_REDIS_VS_MULTI`], with
    /// the floor's beside it: the part of the gap that any batched script reading and writing a
    /// bucket a decision pays.
    fn redis_vs_multi_goal(&self, scenario: Scenario, c: usize) -> Goal {
        let goal = format!(
            "{scenario} c={c}: Redis's time per tollgate decision ≤ {GOAL_REDIS_VS_MULTI}× MULTI's \
             (3 native commands a decision; `INFO commandstats`)"
        );
        let (Some(t), Some(m), Some(ratio)) = (
            self.cell(scenario, Approach::Tollgate, c),
            self.cell(scenario, Approach::Multi, c),
            self.redis_vs_multi(scenario, Approach::Tollgate, c),
        ) else {
            return Goal::unmeasured(goal, "a cell it needs was not run");
        };
        let floor = match (
            self.cell(scenario, Approach::Floor, c),
            self.redis_vs_multi(scenario, Approach::Floor, c),
        ) {
            (Some(f), Some(floor)) => format!(
                "; the floor (TIME, MGET, a SET a decision, batched alike): {:.2} µs = \
                 {floor:.2}× MULTI's at {} calls/decision (tollgate's: {})",
                f.redis_micros_per_decision(),
                small(f.calls_per_decision()),
                small(t.calls_per_decision())
            ),
            _ => String::new(),
        };
        Goal {
            goal,
            measured: format!(
                "{:.2} vs {:.2} µs = {ratio:.2}×{floor}",
                t.redis_micros_per_decision(),
                m.redis_micros_per_decision()
            ),
            met: Some(t.decisions > 0 && ratio <= GOAL_REDIS_VS_MULTI),
        }
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
            _ => Goal::unmeasured(goal, "a cell it needs was not run"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            redis_usec: calls * 10,
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
                // 260 decisions in 52 calls of 10 µs: 2 µs of Redis a decision.
                cell(Scenario::PerUser, Approach::Tollgate, 260, 52),
                cell(Scenario::PerUser, Approach::Lua, 100, 100),
                cell(Scenario::HotKey, Approach::Tollgate, 399, 10),
                cell(Scenario::HotKey, Approach::Lua, 100, 100),
                cell(Scenario::HotKeyFlood, Approach::Tollgate, 1000, 101),
            ],
            over_grant: vec![],
            cluster: vec![],
        };
        let goals = report.goals();
        let met: Vec<Option<bool>> = goals.iter().map(|g| g.met).collect();
        // Over-grant not run; per user 2.6× (≥ 2.5), hot key 3.99× (< 4); nothing at c=1;
        // 2 µs of Redis a decision (≤ 2); no MULTI to compare it with; the flood's 0.101 calls
        // a decision (> 0.1).
        assert_eq!(
            met,
            [
                None,
                Some(true),
                Some(false),
                None,
                None,
                Some(true),
                None,
                Some(false)
            ],
            "{goals:?}"
        );
        assert!(goals[1].measured.contains("2.60×"), "{goals:?}");
        assert!(goals[5].measured.starts_with("2.00 µs"), "{goals:?}");
        assert_eq!(goals[6].measured, "a cell it needs was not run");
        assert!(goals[7].measured.contains("0.101"), "{goals:?}");
        let md = report.report().to_markdown();
        assert!(
            md.contains("| **no** |") && md.contains("| not measured |"),
            "{md}"
        );
    }

    #[test]
    fn redis_time_is_compared_with_multis_and_the_floors_beside_it() {
        let mut report = RedisReport {
            run_id: "r".into(),
            redis_version: "7".into(),
            seconds_per_cell: 1.0,
            concurrency: vec![64],
            cells: vec![
                // 2 µs a decision at 0.2 calls a decision.
                cell(Scenario::PerUser, Approach::Tollgate, 260, 52),
                // 1 µs a decision: 3 commands of 1/3 µs each.
                cell(Scenario::PerUser, Approach::Multi, 500, 50),
                // 1.5 µs a decision at 0.15 calls a decision.
                cell(Scenario::PerUser, Approach::Floor, 300, 45),
            ],
            over_grant: vec![],
            cluster: vec![],
        };
        let goal = report.redis_vs_multi_goal(Scenario::PerUser, 64);
        assert_eq!(goal.met, Some(false), "{goal:?}");
        assert_eq!(
            goal.measured,
            "2.00 vs 1.00 µs = 2.00×; the floor (TIME, MGET, a SET a decision, batched alike): \
             1.50 µs = 1.50× MULTI's at 0.150 calls/decision (tollgate's: 0.200)"
        );
        let md = report.report().to_markdown();
        assert!(md.contains("| 64 | floor | 300 | – |"), "{md}");
        assert!(md.contains("| 1.50 | 1.50 |"), "{md}");
        // At 1.6× MULTI's, met; without the floor, nothing is said of it.
        report.cells[0].redis_usec = 416;
        report.cells.pop();
        let goal = report.redis_vs_multi_goal(Scenario::PerUser, 64);
        assert_eq!(goal.met, Some(true), "{goal:?}");
        assert_eq!(goal.measured, "1.60 vs 1.00 µs = 1.60×");
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
