//! The PostgreSQL store's goals, judged on a run: tollgate over-grants 0, has 0 errors at READ
//! COMMITTED, is at least 2× the function at 8 and 32 connections on many keys and 5× on a hot
//! key at 32, and has neither of the function's two flaws. A goal whose cells were not run is
//! "not measured", never met.

use super::PostgresReport;
use crate::postgres::{Approach, Isolation, IsolationNames, Scenario};
use crate::report::{Goal, per, thousands};

pub(super) fn judge(report: &PostgresReport) -> Vec<Goal> {
    let mut goals = Vec::new();
    for &isolation in &report.isolations {
        goals.push(over_grant(report, isolation));
    }
    goals.push(no_errors_at_read_committed(report));
    goals.push(no_give_ups_on_a_hot_key(report));
    for &isolation in &report.isolations {
        for c in [8, 32] {
            goals.push(ratio(report, Scenario::ManyKeys, isolation, c, 2.0));
        }
        goals.push(ratio(report, Scenario::HotKey, isolation, 32, 5.0));
    }
    goals.push(no_duplicate_keys(report));
    goals.push(exact_refill(report));
    goals
}

fn over_grant(report: &PostgresReport, level: Isolation) -> Goal {
    let isolation = level.sql();
    match report.over_grant_of(level, Approach::Tollgate) {
        Some(o) => Goal::over_grant(
            format!(
                "{isolation}: tollgate over-grants 0 (burst {}, {}/s, {} workers on one key, {} s: \
                 at most {} allowed)",
                o.capacity,
                o.rate,
                o.workers,
                o.seconds,
                o.max_allowed()
            ),
            o.max_allowed(),
            o.allowed,
            o.errors,
        ),
        None => Goal::unmeasured(
            format!("{isolation}: tollgate over-grants 0"),
            "over-grant test not run",
        ),
    }
}

/// Calls on one row must not conflict with each other (a hot row's lock would otherwise
/// serialize every caller), so the hot key at SERIALIZABLE never runs out of retries.
fn no_give_ups_on_a_hot_key(report: &PostgresReport) -> Goal {
    // Worded without the scenario's name, which the readings of the ratio goals look for.
    let goal = "one hot row at SERIALIZABLE: tollgate's calls never give up on serialization \
                failures (every connection count)";
    let cells: Vec<_> = report
        .cells
        .iter()
        .filter(|c| {
            c.scenario == Scenario::HotKey
                && c.isolation == Isolation::Serializable
                && c.approach == Approach::Tollgate
        })
        .collect();
    if cells.is_empty() {
        return Goal::unmeasured(goal, "no hot_key cell at SERIALIZABLE was run");
    }
    let gave_up: u64 = cells.iter().map(|c| c.gave_up).sum();
    let retried: u64 = cells.iter().map(|c| c.retried).sum();
    let decisions: u64 = cells.iter().map(|c| c.decisions).sum();
    Goal {
        goal: goal.into(),
        measured: format!(
            "{gave_up} calls gave up, {retried} attempts retried, in {} decisions",
            thousands(decisions as f64)
        ),
        met: Some(gave_up == 0),
    }
}

fn no_errors_at_read_committed(report: &PostgresReport) -> Goal {
    let rc = Isolation::ReadCommitted;
    let tollgate = Approach::Tollgate;
    let mut calls = 0;
    let mut errors = 0;
    let mut timeouts = 0;
    for c in report
        .cells
        .iter()
        .filter(|c| c.isolation == rc && c.approach == tollgate)
    {
        calls += c.decisions + c.errors;
        errors += c.errors;
        timeouts += c.timeouts;
    }
    for o in report
        .over_grant
        .iter()
        .filter(|o| o.isolation == rc && o.approach == tollgate)
    {
        calls += o.decisions + o.errors;
        errors += o.errors;
        timeouts += o.timeouts;
    }
    for r in report
        .race
        .iter()
        .filter(|r| r.isolation == rc && r.approach == tollgate)
    {
        calls += r.calls;
        errors += r.errors;
        timeouts += r.timeouts;
    }
    // The rounding schedule runs at READ COMMITTED.
    for r in report.rounding.iter().filter(|r| r.approach == tollgate) {
        calls += r.burst_calls + r.calls;
        errors += r.errors;
    }
    let goal = "READ COMMITTED: tollgate has 0 errors (every cell, the over-grant test, the flaws)";
    if calls == 0 {
        return Goal::unmeasured(goal, "nothing ran at READ COMMITTED");
    }
    Goal {
        goal: goal.into(),
        measured: format!(
            "{} errors{} in {} calls",
            thousands(errors as f64),
            if timeouts > 0 {
                format!(" ({} past the store's timeout)", thousands(timeouts as f64))
            } else {
                String::new()
            },
            thousands(calls as f64)
        ),
        met: Some(errors == 0),
    }
}

fn ratio(
    report: &PostgresReport,
    scenario: Scenario,
    isolation: Isolation,
    connections: usize,
    factor: f64,
) -> Goal {
    let goal = format!(
        "{scenario}, {}, {connections} connections: tollgate ≥ {factor}× the function's \
         decisions/s",
        isolation.sql()
    );
    let (Some(t), Some(f)) = (
        report.cell(scenario, isolation, Approach::Tollgate, connections),
        report.cell(scenario, isolation, Approach::Function, connections),
    ) else {
        return Goal::unmeasured(goal, "a cell it needs was not run");
    };
    let (td, fd) = (t.decisions_per_sec(), f.decisions_per_sec());
    if fd == 0.0 {
        return Goal {
            goal,
            measured: format!(
                "{} vs 0 decisions/s (the function answered nothing)",
                thousands(td)
            ),
            met: Some(td > 0.0),
        };
    }
    let ratio = per(td, fd);
    Goal {
        goal,
        measured: format!(
            "{} vs {} decisions/s = {ratio:.2}×",
            thousands(td),
            thousands(fd)
        ),
        met: Some(ratio >= factor),
    }
}

fn no_duplicate_keys(report: &PostgresReport) -> Goal {
    let goal = "flaw (a): tollgate has no duplicate-key errors when first calls race".to_owned();
    let races: Vec<_> = report
        .race
        .iter()
        .filter(|r| r.approach == Approach::Tollgate)
        .collect();
    if races.is_empty() {
        return Goal::unmeasured(goal, "race not run");
    }
    let function: u64 = report
        .race
        .iter()
        .filter(|r| r.approach == Approach::Function)
        .map(|r| r.duplicate_key)
        .sum();
    let duplicate: u64 = races.iter().map(|r| r.duplicate_key).sum();
    let calls: u64 = races.iter().map(|r| r.calls).sum();
    Goal {
        goal,
        measured: format!(
            "tollgate {duplicate} in {} calls (the function: {})",
            thousands(calls as f64),
            thousands(function as f64)
        ),
        met: Some(duplicate == 0),
    }
}

fn exact_refill(report: &PostgresReport) -> Goal {
    let goal = "flaw (b): tollgate's refill is exact (allowed within ±1 of the exact token bucket)"
        .to_owned();
    let Some(t) = report.rounding_of(Approach::Tollgate) else {
        return Goal::unmeasured(goal, "rounding schedule not run");
    };
    let function = report
        .rounding_of(Approach::Function)
        .map(|f| format!(" (the function: {})", f.allowed))
        .unwrap_or_default();
    Goal {
        goal,
        measured: format!(
            "{} allowed of {} calls, exact {}{function}",
            t.allowed, t.calls, t.expected
        ),
        met: Some(t.allowed.abs_diff(t.expected) <= 1 && t.errors == 0),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::postgres::{Cell, Rounding};

    fn cell(scenario: Scenario, approach: Approach, connections: usize, decisions: u64) -> Cell {
        Cell {
            scenario,
            isolation: Isolation::ReadCommitted,
            approach,
            connections,
            decisions,
            allowed: decisions,
            errors: 0,
            duplicate_key: 0,
            serialization: 0,
            timeouts: 0,
            gave_up: 0,
            retried: 0,
            statements: decisions,
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(100),
            p99: Duration::from_micros(900),
            client_cpu: Some(Duration::from_millis(10)),
        }
    }

    #[test]
    fn goals_are_judged_on_the_cells_they_name() {
        let report = PostgresReport {
            run_id: "r".into(),
            server_version: "15".into(),
            durability: "fsync on".into(),
            host_at_start: "2 CPUs".into(),
            host_at_end: "2 CPUs".into(),
            seconds_per_cell: 1.0,
            connections: vec![8, 32],
            isolations: vec![Isolation::ReadCommitted],
            keys: 10,
            cells: vec![
                cell(Scenario::ManyKeys, Approach::Function, 8, 100),
                cell(Scenario::ManyKeys, Approach::Tollgate, 8, 200),
                cell(Scenario::ManyKeys, Approach::Function, 32, 100),
                cell(Scenario::ManyKeys, Approach::Tollgate, 32, 199),
                cell(Scenario::HotKey, Approach::Function, 32, 0),
                Cell {
                    errors: 2,
                    timeouts: 2,
                    ..cell(Scenario::HotKey, Approach::Tollgate, 32, 50)
                },
            ],
            over_grant: vec![],
            race: vec![],
            rounding: vec![Rounding {
                approach: Approach::Tollgate,
                capacity: 10,
                rate: 2,
                interval: Duration::from_millis(100),
                burst_calls: 10,
                burst_allowed: 10,
                calls: 30,
                allowed: 5,
                expected: 6,
                errors: 0,
            }],
        };
        let goals = report.goals();
        let met: Vec<Option<bool>> = goals.iter().map(|g| g.met).collect();
        // over-grant, errors, give-ups, many 8, many 32, hot 32, duplicate keys, refill.
        assert_eq!(
            met,
            [
                None,
                Some(false),
                None,
                Some(true),
                Some(false),
                Some(true),
                None,
                Some(true)
            ],
            "{goals:?}"
        );
        assert!(goals[1].measured.contains("2 errors (2 past"), "{goals:?}");
        assert!(goals[3].measured.contains("2.00×"), "{goals:?}");
        assert!(goals[5].measured.contains("answered nothing"), "{goals:?}");
        let md = report.report().to_markdown();
        for needle in [
            "| **no** |",
            "| not measured |",
            "**Why many_keys falls short",
            "**Why there are errors at READ COMMITTED",
        ] {
            assert!(md.contains(needle), "{needle:?} missing from\n{md}");
        }
        assert!(!md.contains("**Why hot_key"), "{md}");
        // A hot key's calls at SERIALIZABLE that gave up fail the goal.
        let mut serializable = cell(Scenario::HotKey, Approach::Tollgate, 32, 1000);
        serializable.isolation = Isolation::Serializable;
        serializable.gave_up = 3;
        let report = PostgresReport {
            cells: vec![serializable],
            ..report
        };
        let goal = no_give_ups_on_a_hot_key(&report);
        assert_eq!(goal.met, Some(false), "{goal:?}");
        assert!(goal.measured.starts_with("3 calls gave up"), "{goal:?}");
    }
}
