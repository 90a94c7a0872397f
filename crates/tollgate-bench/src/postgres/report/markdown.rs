//! The report as Markdown.

use std::fmt::Write as _;

use super::{Cell, PostgresReport};
use crate::postgres::{Approach, Scenario, function, race};
use crate::report::Goal;
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
        "Run `{}` against PostgreSQL {} ({}), {} s per cell, {} connections, at {}; the \
         machine: {} at the start, {} at the end. Both approaches ran in the same process \
         against the same server, one cell at a time, in tables of their own in a schema made \
         for the run: only the ratios mean anything.\n",
        report.run_id,
        report.server_version,
        report.durability,
        report.seconds_per_cell,
        list(report.connections.iter()),
        list(report.isolations.iter()),
        report.host_at_start,
        report.host_at_end.rsplit(", ").next().unwrap_or_default(),
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
    let goals = report.goals();
    for goal in &goals {
        let met = match goal.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(md, "| {} | {} | {met} |", goal.goal, goal.measured);
    }
    md.push('\n');
    missed(md, report, &goals);
}

/// What we think a missed goal comes from, with the run's own numbers where it has them.
fn missed(md: &mut String, report: &PostgresReport, goals: &[Goal]) {
    let unmet = |needle: &str| {
        goals
            .iter()
            .any(|g| g.met == Some(false) && g.goal.contains(needle))
    };
    if unmet("many_keys") {
        let cpu = |approach| {
            let c = report.connections.iter().copied().max()?;
            report
                .cells
                .iter()
                .find(|x| {
                    x.scenario == Scenario::ManyKeys && x.approach == approach && x.connections == c
                })?
                .client_cpu_per_call()
                .map(|us| format!("{us:.0}"))
        };
        let measured = match (cpu(Approach::Tollgate), cpu(Approach::Function)) {
            (Some(t), Some(f)) => format!(
                " In this run the benchmark process spent {t} µs of CPU per tollgate call and {f} \
                 µs per function call at the most connections, on the same machine as the \
                 server."
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            md,
            "**Why many_keys falls short (our reading).** With many keys no two concurrent calls \
             share a row, so coalescing has nothing to merge, and both approaches make one write \
             transaction — one statement, one commit — per decision: PostgreSQL does about the \
             same work for tollgate's upsert as for the function's UPDATE, and with the server on \
             the same few CPUs as the clients, that work sets the pace for both. What is left to \
             win is client CPU.{measured} Twice the function's rate on many keys needs fewer \
             transactions per decision (for example, the checks waiting for a connection decided \
             together, whatever their keys, in one call of the store's multi-check function), \
             which the store does not do today.\n"
        );
    }
    if unmet("hot_key") {
        let waits: Vec<String> = report
            .cells
            .iter()
            .filter(|x| {
                x.scenario == Scenario::HotKey
                    && x.approach == Approach::Tollgate
                    && x.connections == 32
            })
            .map(|x| {
                format!(
                    "{}: p50 {} µs, {} µs of client CPU per call",
                    x.isolation,
                    micros(x.p50),
                    x.client_cpu_per_call()
                        .map_or_else(|| "?".into(), |us| format!("{us:.1}"))
                )
            })
            .collect();
        let _ = writeln!(
            md,
            "**Why hot_key falls short (our reading).** With 32 callers and no pause between \
             calls, decisions/s is 32 over the mean latency. Coalescing keeps one call of the \
             store in flight per key and decides every check waiting on the key in the next \
             one, so a caller waits for the call in flight and then its own. At 32 connections \
             tollgate's callers waited milliseconds while the process spent microseconds of CPU \
             per call ({}): the time went to PostgreSQL round trips — a busy machine (see its \
             load above) delays each one — not to tollgate's code. The function's rate is set \
             by how long each caller holds the row lock instead.\n",
            waits.join("; ")
        );
    }
    if unmet("has 0 errors") {
        let _ = writeln!(
            md,
            "**Why there are errors at READ COMMITTED (our reading).** The statement itself \
             cannot fail at READ COMMITTED (no conflict, no duplicate key); a call fails when it \
             runs past the store's default 100 ms timeout, as counted in the goal above. The \
             machine ran at {} (start) and {} (end); a server process that waits 100 ms for a \
             CPU makes every caller waiting on that call time out.\n",
            report.host_at_start, report.host_at_end
        );
    }
}

fn cells(md: &mut String, report: &PostgresReport, scenario: Scenario) {
    let _ = writeln!(md, "## {scenario}: {}\n", scenario.describe(report.keys));
    let _ = writeln!(
        md,
        "| isolation | connections | approach | decisions/s | × function | p50 µs | p99 µs | \
         errors | retried attempts | client CPU µs/call |"
    );
    let _ = writeln!(md, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|");
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
        "| {} | {} | {} | {} | {vs} | {} | {} | {} | {} | {} |",
        cell.isolation,
        cell.connections,
        cell.approach,
        thousands(cell.decisions_per_sec()),
        micros(cell.p50),
        micros(cell.p99),
        errors(
            cell.errors,
            cell.duplicate_key,
            cell.serialization,
            cell.timeouts
        ),
        thousands(cell.retried as f64),
        cell.client_cpu_per_call()
            .map_or_else(|| "–".into(), |us| format!("{us:.1}"))
    );
}

/// `0`, or the count with what is known of its causes: `12 (10 × 40001, 2 × 23505)`.
fn errors(errors: u64, duplicate_key: u64, serialization: u64, timeouts: u64) -> String {
    let mut causes = Vec::new();
    if serialization > 0 {
        causes.push(format!("{} × 40001", thousands(serialization as f64)));
    }
    if duplicate_key > 0 {
        causes.push(format!("{} × 23505", thousands(duplicate_key as f64)));
    }
    if timeouts > 0 {
        causes.push(format!("{} timeouts", thousands(timeouts as f64)));
    }
    let other = errors.saturating_sub(serialization + duplicate_key + timeouts);
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
            errors(o.errors, 0, 0, o.timeouts),
            thousands(o.retried as f64),
            percent(o.over_grant())
        );
    }
    let _ = writeln!(
        md,
        "\nover_grant = allowed / {} - 1; the function's errors here are its first calls' \
         duplicate keys and, under SERIALIZABLE, calls that still failed to serialize after {} \
         attempts. How the function goes wrong depends on the isolation:\n\n\
         - At READ COMMITTED callers queue on the row lock, and the function sets `ts = now()`, \
         the time its *transaction started* — before it waited for the lock — while it measures \
         the refill as `clock_timestamp() - ts`. So each caller is refilled for the time since \
         the previous caller started waiting, not since the previous call: with n callers in \
         the queue every stretch of time is counted about n times over, and once a wait is \
         longer than half a token's interval, `tk - 1 + refill` rounds back up to `tk` and the \
         bucket stops draining. (Setting `ts = clock_timestamp()` instead removes this, and \
         leaves flaw (b).)\n\
         - At SERIALIZABLE concurrent updates of the row fail with 40001 instead, and every \
         refused call writes tk = -1 and moves ts to now, so the refill between two calls (a \
         fraction of a token) rounds to nothing (flaw (b)): it under-grants.\n",
        first.max_allowed(),
        function::MAX_ATTEMPTS
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
             fail on the primary key (23505); under SERIALIZABLE PostgreSQL reports that \
             collision as a serialization failure (40001), which the function's client retries.\n",
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
                errors(r.errors, r.duplicate_key, r.serialization, r.timeouts),
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
         - **client CPU µs/call** is the CPU time of the benchmark process during the cell \
         (user and system, all threads, in 10 ms ticks) per call: the clients' work, and for \
         tollgate the store's, which runs in the caller's process. PostgreSQL's own CPU is \
         not in it.\n\
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
        assert_eq!(errors(0, 0, 0, 0), "0");
        assert_eq!(errors(5, 0, 0, 0), "5");
        assert_eq!(errors(12, 2, 10, 0), "12 (10 × 40001, 2 × 23505)");
        assert_eq!(errors(13, 2, 10, 0), "13 (10 × 40001, 2 × 23505, 1 other)");
        assert_eq!(errors(4, 0, 0, 4), "4 (4 timeouts)");
    }
}
