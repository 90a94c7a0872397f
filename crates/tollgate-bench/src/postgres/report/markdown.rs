//! The report as Markdown.

use std::fmt::Write as _;

use super::{Cell, PostgresReport};
use crate::postgres::{Approach, Scenario, function, race};
use crate::report::{micros, percent, thousands};

pub(super) fn render(report: &PostgresReport) -> String {
    let mut md = String::new();
    // `write!` to a String cannot fail; the results are discarded for that reason only.
    let _ = writeln!(
        md,
        "# PostgreSQL: tollgate beside a PL/pgSQL function per call\n"
    );
    let _ = writeln!(
        md,
        "Run `{}` against PostgreSQL {} ({}), {} s per cell, {} connections, at {}. Both \
         approaches ran in the same process against the same server, one cell at a time, in \
         tables of their own in a schema made for the run: only the ratios mean anything.\n",
        report.run_id,
        report.server_version,
        report.durability,
        report.seconds_per_cell,
        list(report.connections.iter()),
        list(report.isolations.iter())
    );
    goals(&mut md, report);
    for scenario in Scenario::ALL {
        if report.cells.iter().any(|c| c.scenario == scenario) {
            cells(&mut md, report, scenario);
        }
    }
    over_grant(&mut md, report);
    flaws(&mut md, report);
    notes(&mut md);
    md
}

fn list<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
}

fn goals(md: &mut String, report: &PostgresReport) {
    let _ = writeln!(md, "## Goals\n");
    let _ = writeln!(md, "| goal | measured | met? |");
    let _ = writeln!(md, "|---|---|---|");
    for goal in report.goals() {
        let met = match goal.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(md, "| {} | {} | {met} |", goal.goal, goal.measured);
    }
    md.push('\n');
}

fn cells(md: &mut String, report: &PostgresReport, scenario: Scenario) {
    let _ = writeln!(md, "## {scenario}: {}\n", scenario.describe(report.keys));
    let _ = writeln!(
        md,
        "| isolation | connections | approach | decisions/s | × function | p50 µs | p99 µs | \
         errors | retried attempts |"
    );
    let _ = writeln!(md, "|---|---:|---|---:|---:|---:|---:|---:|---:|");
    for &isolation in &report.isolations {
        for &c in &report.connections {
            let function = report.cell(scenario, isolation, Approach::Function, c);
            for cell in report.cells.iter().filter(|x| {
                x.scenario == scenario && x.isolation == isolation && x.connections == c
            }) {
                row(md, cell, function);
            }
        }
    }
    md.push('\n');
}

fn row(md: &mut String, cell: &Cell, function: Option<&Cell>) {
    let vs = match function {
        Some(f) if f.decisions_per_sec() > 0.0 => {
            format!("{:.2}", cell.decisions_per_sec() / f.decisions_per_sec())
        }
        _ => "–".into(),
    };
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {vs} | {} | {} | {} | {} |",
        cell.isolation,
        cell.connections,
        cell.approach,
        thousands(cell.decisions_per_sec()),
        micros(cell.p50),
        micros(cell.p99),
        errors(cell.errors, cell.duplicate_key, cell.serialization),
        thousands(cell.retried as f64)
    );
}

/// `0`, or the count with what is known of its causes: `12 (10 × 40001, 2 × 23505)`.
fn errors(errors: u64, duplicate_key: u64, serialization: u64) -> String {
    let mut causes = Vec::new();
    if serialization > 0 {
        causes.push(format!("{} × 40001", thousands(serialization as f64)));
    }
    if duplicate_key > 0 {
        causes.push(format!("{} × 23505", thousands(duplicate_key as f64)));
    }
    let other = errors - serialization.min(errors) - duplicate_key.min(errors);
    if other > 0 && !causes.is_empty() {
        causes.push(format!("{} other", thousands(other as f64)));
    }
    if causes.is_empty() {
        thousands(errors as f64)
    } else {
        format!("{} ({})", thousands(errors as f64), causes.join(", "))
    }
}

fn over_grant(md: &mut String, report: &PostgresReport) {
    let Some(first) = report.over_grant.first() else {
        return;
    };
    let _ = writeln!(
        md,
        "## Over-grant: burst {}, {}/s, cost 1, {} workers on one key, {} s (at most {} may be \
         allowed)\n",
        first.capacity,
        first.rate,
        first.workers,
        first.seconds,
        first.max_allowed()
    );
    let _ = writeln!(
        md,
        "| isolation | approach | connections | decisions | allowed | errors | retried attempts \
         | over_grant |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|");
    for o in &report.over_grant {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            o.isolation,
            o.approach,
            o.connections,
            thousands(o.decisions as f64),
            o.allowed,
            thousands(o.errors as f64),
            thousands(o.retried as f64),
            percent(o.over_grant())
        );
    }
    let _ = writeln!(
        md,
        "\nover_grant = allowed / {} - 1. The function also *under*-grants here: every refused \
         call writes tk = -1 and ts = now, and the few microseconds of refill between two \
         calls round to nothing (flaw (b)).\n",
        first.max_allowed()
    );
}

fn flaws(md: &mut String, report: &PostgresReport) {
    if report.race.is_empty() && report.rounding.is_empty() {
        return;
    }
    let _ = writeln!(md, "## The function's two flaws, tollgate beside\n");
    if !report.race.is_empty() {
        let _ = writeln!(
            md,
            "### (a) Concurrent first calls: {} workers × {} fresh keys\n\nEvery worker calls \
             every key once, all in the same order, starting together, under the function's \
             default limit (2/s, 60 s window: 120 tokens, so every call should be allowed). \
             The function's UPDATE finds no row in each racer, each INSERTs, and all but one \
             fail on the primary key.\n",
            race::WORKERS,
            race::KEYS
        );
        let _ = writeln!(
            md,
            "| isolation | approach | calls | allowed | errors | duplicate key (23505) | \
             retried attempts |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|");
        for r in &report.race {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.isolation,
                r.approach,
                thousands(r.calls as f64),
                thousands(r.allowed as f64),
                errors(r.errors, r.duplicate_key, r.serialization),
                thousands(r.duplicate_key as f64),
                thousands(r.retried as f64)
            );
        }
        md.push('\n');
    }
    if let Some(first) = report.rounding.first() {
        let _ = writeln!(
            md,
            "### (b) Refill rounded to whole tokens: a bucket of {}, {} tokens/s; the burst spent \
             by {} calls back to back, then a call every {} ms for {} calls\n\nEach call of the \
             function adds {} × {:.1} s = {:.1} of a token, rounds `tk - 1 + {:.1}` to a whole \
             token and moves `ts` to now: the fraction is lost on every call. The exact \
             expectation is an exact token bucket at the times the calls were sent.\n",
            first.capacity,
            first.rate,
            first.burst_calls,
            first.interval.as_millis(),
            first.calls,
            first.rate,
            first.interval.as_secs_f64(),
            first.rate as f64 * first.interval.as_secs_f64(),
            first.rate as f64 * first.interval.as_secs_f64(),
        );
        let _ = writeln!(
            md,
            "| approach | burst allowed | calls after the burst | allowed | exact token bucket | \
             errors |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
        for r in &report.rounding {
            let _ = writeln!(
                md,
                "| {} | {} of {} | {} | {} | {} | {} |",
                r.approach,
                r.burst_allowed,
                r.burst_calls,
                r.calls,
                r.allowed,
                r.expected,
                r.errors
            );
        }
        let _ = writeln!(
            md,
            "\nCalled less often, the same rounding goes the other way (arithmetic, not measured \
             here): at a call every 300 ms each adds 0.6, `tk - 1 + 0.6` rounds back to `tk`, \
             and a bucket that is not empty never drains: every call is allowed.\n"
        );
    }
}

fn notes(md: &mut String) {
    let _ = writeln!(md, "## How to read it\n");
    for approach in Approach::ALL {
        let _ = writeln!(md, "- **{approach}**: {}.", approach.describe());
    }
    let _ = writeln!(
        md,
        "- Limits are the function's parameters, given to tollgate as the same bucket: \
         capacity = window_seconds × refill_per_sec, refill_per_sec per second. Throughput \
         cells use 1,000,000/s with a 1,000 s window (a bucket of a billion tokens), so every \
         call is allowed and both approaches write on every call.\n\
         - **decisions/s** counts answered calls (allowed or refused); a call that ended in an \
         error is not a decision. **errors** are calls that failed after any retries, with the \
         SQLSTATEs counted: 40001 (serialization failure, the function gave up after {} \
         attempts, tollgate after its 10) and 23505 (duplicate key). **retried attempts** are \
         attempts that failed to serialize and were run again, by the function's client or \
         inside tollgate's store.\n\
         - Latency is per call as the caller sees it, retries and failures included; \
         percentiles by nearest rank, at most 1.6% high.\n\
         - Each cell runs for its time with n workers: the function's have a connection each, \
         tollgate's n tasks share one store of n connections. Connections are opened (and \
         statements prepared) before a cell's clock starts.\n\
         \n![decisions per second](postgres.svg)",
        function::MAX_ATTEMPTS
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_their_causes() {
        assert_eq!(errors(0, 0, 0), "0");
        assert_eq!(errors(5, 0, 0), "5");
        assert_eq!(errors(12, 2, 10), "12 (10 × 40001, 2 × 23505)");
        assert_eq!(errors(13, 2, 10), "13 (10 × 40001, 2 × 23505, 1 other)");
    }
}
