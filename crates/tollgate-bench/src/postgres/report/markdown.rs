//! The report as Markdown.

use std::fmt::Write as _;

use super::{Cell, PostgresReport};
use crate::postgres::{Approach, Scenario, function, race};
use crate::report::Goal;
use crate::report::{goals_table, micros, percent, small, thousands};

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
    let goals = report.goals();
    goals_table(md, &goals);
    for scenario in Scenario::ALL {
        let figures = sync_figures(report, scenario);
        if !figures.is_empty() {
            let _ = writeln!(md, "{figures}\n");
        }
    }
    missed(md, report, &goals);
}

/// tollgate's statements per call in each many_keys cell at 8 and 32 connections.
fn many_keys_statements(report: &PostgresReport) -> String {
    let shown: Vec<String> = report
        .cells
        .iter()
        .filter(|x| {
            x.scenario == Scenario::ManyKeys
                && x.approach == Approach::Tollgate
                && [8, 32].contains(&x.connections)
        })
        .map(|x| {
            format!(
                "{} statements per call at {}, {} connections",
                small(x.statements_per_call()),
                x.isolation,
                x.connections
            )
        })
        .collect();
    if shown.is_empty() {
        "no cell at 8 or 32 connections".into()
    } else {
        shown.join("; ")
    }
}

/// What tollgate-sync (each commit waiting for its flush, as the function's do) did in
/// `scenario`, as a sentence, or nothing when it did not run.
fn sync_figures(report: &PostgresReport, scenario: Scenario) -> String {
    let shown: Vec<String> = report
        .cells
        .iter()
        .filter(|x| {
            x.scenario == scenario
                && x.approach == Approach::TollgateSync
                && [8, 32].contains(&x.connections)
        })
        .map(|x| {
            let vs = report
                .cell(scenario, x.isolation, Approach::Function, x.connections)
                .filter(|f| f.decisions_per_sec() > 0.0)
                .map_or_else(
                    || "–".into(),
                    |f| format!("{:.2}", x.decisions_per_sec() / f.decisions_per_sec()),
                );
            format!("{vs}× at {}, {} connections", x.isolation, x.connections)
        })
        .collect();
    if shown.is_empty() {
        return String::new();
    }
    format!(
        "With the function's durability (tollgate-sync: every commit waits for its WAL flush), \
         {scenario}: {}.",
        shown.join("; ")
    )
}

/// Client CPU per call of both approaches in the many_keys cells with the most connections.
fn many_keys_cpu(report: &PostgresReport) -> String {
    let Some(c) = report.connections.iter().copied().max() else {
        return "not measured".into();
    };
    let cpu = |approach| {
        report
            .cells
            .iter()
            .filter(|x| {
                x.scenario == Scenario::ManyKeys && x.approach == approach && x.connections == c
            })
            .filter_map(Cell::client_cpu_per_call)
            .map(|us| format!("{us:.0}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    format!(
        "at {c} connections the benchmark process spent {} µs of CPU per tollgate call and {} \
         µs per function call (per isolation measured)",
        cpu(Approach::Tollgate),
        cpu(Approach::Function)
    )
}

/// What we think a missed goal comes from, with the run's own numbers where it has them.
fn missed(md: &mut String, report: &PostgresReport, goals: &[Goal]) {
    let unmet = |needle: &str| {
        goals
            .iter()
            .any(|g| g.met == Some(false) && g.goal.contains(needle))
    };
    if unmet("many_keys") {
        let _ = writeln!(
            md,
            "**Why many_keys falls short (our reading).** Every call writes a different row, so \
             batching saves only what a statement costs beyond its rows: the server's start of \
             execution, the commit, the round trip and the wake-ups of a server process. That \
             gain grows with the batch: statements per tollgate call here: {}. The rest is CPU \
             on a machine the benchmark shares with the server: {}. Where the function's calls \
             wait for the disk, tollgate's do not (see tollgate-sync for the same with \
             the flush).\n",
            many_keys_statements(report),
            many_keys_cpu(report),
        );
    }
    if unmet("hot_key") {
        let figures: Vec<String> = report
            .cells
            .iter()
            .filter(|x| {
                x.scenario == Scenario::HotKey
                    && x.approach == Approach::Tollgate
                    && x.connections == 32
            })
            .map(|x| {
                format!(
                    "{}: {} statements per call, p50 {} µs, {} µs of client CPU per call",
                    x.isolation,
                    small(x.statements_per_call()),
                    micros(x.p50),
                    x.client_cpu_per_call()
                        .map_or_else(|| "?".into(), |us| format!("{us:.1}"))
                )
            })
            .collect();
        let _ = writeln!(
            md,
            "**Why hot_key falls short (our reading).** On one row, tollgate gains on the \
             function only when waiting checks share a statement, so that the row's lock (and a \
             commit) serves a batch instead of one caller; a statement per check queues on the \
             row lock just as the function's calls do. Its batcher keeps at most two calls in \
             flight, so checks that arrive meanwhile wait and share the next. At 32 connections: {}.\n",
            figures.join("; "),
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
         errors | retried attempts | statements/call | client CPU µs/call |"
    );
    let _ = writeln!(md, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
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
        "| {} | {} | {} | {} | {vs} | {} | {} | {} | {} | {} | {} |",
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
            cell.timeouts,
            cell.gave_up
        ),
        thousands(cell.retried as f64),
        small(cell.statements_per_call()),
        cell.client_cpu_per_call()
            .map_or_else(|| "–".into(), |us| format!("{us:.1}"))
    );
}

/// `0`, or the count with what is known of its causes: `12 (10 × 40001, 2 × 23505)`, and
/// how many of tollgate's statements gave up on 40001 (each fails all the checks it decided).
fn errors(
    errors: u64,
    duplicate_key: u64,
    serialization: u64,
    timeouts: u64,
    gave_up: u64,
) -> String {
    let mut causes = Vec::new();
    if serialization > 0 {
        causes.push(format!("{} × 40001", thousands(serialization as f64)));
    }
    if duplicate_key > 0 {
        causes.push(format!("{} × 23505", thousands(duplicate_key as f64)));
    }
    if timeouts > 0 {
        let s = if timeouts == 1 { "" } else { "s" };
        causes.push(format!("{} timeout{s}", thousands(timeouts as f64)));
    }
    let other = errors.saturating_sub(serialization + duplicate_key + timeouts);
    if other > 0 && !causes.is_empty() {
        causes.push(format!("{} other", thousands(other as f64)));
    }
    let mut text = if causes.is_empty() {
        thousands(errors as f64)
    } else {
        format!("{} ({})", thousands(errors as f64), causes.join(", "))
    };
    if gave_up > 0 {
        let _ = write!(
            text,
            "; {} statements gave up on 40001",
            thousands(gave_up as f64)
        );
    }
    text
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
            errors(o.errors, 0, 0, o.timeouts, o.gave_up),
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
                errors(
                    r.errors,
                    r.duplicate_key,
                    r.serialization,
                    r.timeouts,
                    r.gave_up
                ),
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
         - **statements/call** counts what was sent to PostgreSQL per call: the function's \
         calls, retries included; tollgate's statements (a single upsert, or one call of its \
         decide function for a batch of waiting checks) from its store's own count. Below 1, \
         calls shared statements (and transactions).\n\
         - **client CPU µs/call** is the CPU time of the benchmark process during the cell \
         (user and system, all threads, in 10 ms ticks) per call: the clients' work, and for \
         tollgate the store's, which runs in the caller's process. PostgreSQL's own CPU is \
         not in it.\n\
         - Each cell runs for its time with n workers: the function's have a connection each, \
         tollgate's and tollgate-sync's n tasks share one store of n connections. The over-grant test gives tollgate's store as many connections as the \
         largest cell. Connections are opened (and \
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
        assert_eq!(errors(0, 0, 0, 0, 0), "0");
        assert_eq!(errors(5, 0, 0, 0, 0), "5");
        assert_eq!(errors(12, 2, 10, 0, 0), "12 (10 × 40001, 2 × 23505)");
        assert_eq!(
            errors(13, 2, 10, 0, 0),
            "13 (10 × 40001, 2 × 23505, 1 other)"
        );
        assert_eq!(errors(4, 0, 0, 4, 0), "4 (4 timeouts)");
        assert_eq!(
            errors(9, 0, 0, 4, 5),
            "9 (4 timeouts, 5 other); 5 statements gave up on 40001"
        );
    }
}
