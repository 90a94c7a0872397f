//! The paragraphs beside the goals: what tollgate-sync did (it is shown, not judged), and for
//! each missed goal what we think it comes from, with the run's own numbers where it has them.

use super::{Cell, PostgresReport};
use crate::postgres::IsolationNames;
use crate::postgres::{Approach, Scenario};
use crate::report::{Goal, micros, small};

pub(super) fn beside_the_goals(report: &PostgresReport, goals: &[Goal]) -> Vec<String> {
    let mut text: Vec<String> = Scenario::ALL
        .into_iter()
        .filter_map(|s| sync_figures(report, s))
        .collect();
    let unmet = |needle: &str| {
        goals
            .iter()
            .any(|g| g.met == Some(false) && g.goal.contains(needle))
    };
    if unmet("many_keys") {
        text.push(format!(
            "**Why many_keys falls short (our reading).** Every call writes a different row, so \
             batching saves only what a statement costs beyond its rows: the server's start of \
             execution, the commit, the round trip and the wake-ups of a server process. That \
             gain grows with the batch: statements per tollgate call here: {}. The rest is CPU \
             on a machine the benchmark shares with the server: {}. Where the function's calls \
             wait for the disk, tollgate's do not (see tollgate-sync for the same with the \
             flush).",
            many_keys_statements(report),
            many_keys_cpu(report),
        ));
    }
    if unmet("hot_key") {
        text.push(format!(
            "**Why hot_key falls short (our reading).** On one row, tollgate gains on the \
             function only when waiting checks share a statement, so that the row's lock (and a \
             commit) serves a batch instead of one caller; a statement per check queues on the \
             row lock just as the function's calls do. Its batcher keeps at most two calls in \
             flight, so checks that arrive meanwhile wait and share the next. At 32 \
             connections: {}.",
            hot_key_figures(report),
        ));
    }
    if unmet("has 0 errors") {
        text.push(format!(
            "**Why there are errors at READ COMMITTED (our reading).** The statement itself \
             cannot fail at READ COMMITTED (no conflict, no duplicate key); a call fails when it \
             runs past the store's default 100 ms timeout, as counted in the goal above. The \
             machine ran at {} (start) and {} (end); a server process that waits 100 ms for a \
             CPU makes every caller waiting on that call time out.",
            report.host_at_start, report.host_at_end
        ));
    }
    text
}

/// What tollgate-sync (each commit waiting for its flush, as the function's do) did in
/// `scenario` at 8 and 32 connections, as a sentence; `None` when it did not run there.
fn sync_figures(report: &PostgresReport, scenario: Scenario) -> Option<String> {
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
            format!(
                "{vs}× at {}, {} connections",
                x.isolation.sql(),
                x.connections
            )
        })
        .collect();
    (!shown.is_empty()).then(|| {
        format!(
            "With the function's durability (tollgate-sync: every commit waits for its WAL \
             flush), {scenario}: {}.",
            shown.join("; ")
        )
    })
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
                x.isolation.sql(),
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

/// tollgate's hot_key cells at 32 connections: how much its calls shared, and what they cost.
fn hot_key_figures(report: &PostgresReport) -> String {
    report
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
                x.isolation.sql(),
                small(x.statements_per_call()),
                micros(x.p50),
                x.client_cpu_per_call()
                    .map_or_else(|| "?".into(), |us| format!("{us:.1}"))
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
