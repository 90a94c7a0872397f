//! The report as Markdown.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Cell, Goal, RedisReport, percent, small, thousands};
use crate::redis::{Approach, Scenario};

pub(super) fn render(report: &RedisReport) -> String {
    let mut md = String::new();
    // `write!` to a String cannot fail; the results are discarded for that reason only.
    let _ = writeln!(
        md,
        "# Redis: tollgate beside three published token-bucket approaches\n"
    );
    let _ = writeln!(
        md,
        "Run `{}` against Redis {}, {} s per cell, concurrency {}. Every approach ran in the same \
         process against the same Redis, one cell at a time: only the ratios mean anything.\n",
        report.run_id,
        report.redis_version,
        report.seconds_per_cell,
        report
            .concurrency
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    goals_table(&mut md, &report.goals());
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| report.cells.iter().any(|c| c.scenario == *s))
        .collect();
    for scenario in scenarios {
        let _ = writeln!(md, "## {scenario}: {}\n", scenario.describe());
        let _ = writeln!(
            md,
            "| c | approach | decisions/s | × lua | p50 µs | p99 µs | calls/decision | \
             commands/decision | allowed | errors |"
        );
        let _ = writeln!(md, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &c in &report.concurrency {
            let lua = report.cell(scenario, Approach::Lua, c);
            for cell in report
                .cells
                .iter()
                .filter(|x| x.scenario == scenario && x.concurrency == c)
            {
                row(&mut md, cell, lua);
            }
        }
        md.push('\n');
    }
    over_grant(&mut md, report);
    notes(&mut md);
    md
}

/// The `## Goals` table every report opens with.
pub(crate) fn goals_table(md: &mut String, goals: &[Goal]) {
    let _ = writeln!(md, "## Goals\n");
    let _ = writeln!(md, "| goal | measured | met? |");
    let _ = writeln!(md, "|---|---|---|");
    for goal in goals {
        let met = match goal.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(md, "| {} | {} | {met} |", goal.goal, goal.measured);
    }
    md.push('\n');
}

fn row(md: &mut String, cell: &Cell, lua: Option<&Cell>) {
    let vs_lua = match lua {
        Some(l) if l.decisions_per_sec() > 0.0 => {
            format!("{:.2}", cell.decisions_per_sec() / l.decisions_per_sec())
        }
        _ => "–".into(),
    };
    let _ = writeln!(
        md,
        "| {} | {} | {} | {vs_lua} | {} | {} | {} | {} | {} | {} |",
        cell.concurrency,
        cell.approach,
        thousands(cell.decisions_per_sec()),
        micros(cell.p50),
        micros(cell.p99),
        small(cell.calls_per_decision()),
        small(cell.commands_per_decision()),
        thousands(cell.allowed as f64),
        thousands(cell.errors as f64),
    );
}

fn over_grant(md: &mut String, report: &RedisReport) {
    let Some(first) = report.over_grant.first() else {
        return;
    };
    let _ = writeln!(
        md,
        "## Over-grant: burst {}, {}/s, cost 1, {} workers on one key, {} s (at most {} may be \
         allowed)\n",
        first.burst,
        first.rate,
        first.workers,
        first.seconds,
        first.max_allowed()
    );
    let _ = writeln!(
        md,
        "| approach | decisions | allowed | errors | over_grant |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    for o in &report.over_grant {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            o.approach,
            thousands(o.decisions as f64),
            o.allowed,
            thousands(o.errors as f64),
            percent(o.over_grant())
        );
    }
    md.push('\n');
}

fn notes(md: &mut String) {
    let _ = writeln!(md, "## How to read it\n");
    for approach in Approach::ALL {
        let _ = writeln!(md, "- **{approach}**: {}.", approach.describe());
    }
    let _ = writeln!(
        md,
        "- **calls/decision**: commands the clients sent (round trips), from `INFO commandstats` \
         before and after the cell, per check asked (errors included). Redis also counts the \
         commands a script runs; **commands/decision** includes those (the Lua baseline's \
         HMGET/HMSET/PEXPIRE, tollgate's TIME/MGET/SET), the `INFO` calls excluded from both.\n\
         - Latency is per check as the caller sees it (a tollgate check answered by the deny \
         cache never reaches Redis); percentiles by nearest rank, at most 1.6% high.\n\
         - The baselines take `now_ms` from the client's clock; tollgate uses Redis's `TIME`.\n\
         \n![decisions per second](redis.svg)"
    );
}

/// Microseconds: one decimal below 100 µs, whole above.
pub(crate) fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_keep_useful_digits() {
        assert_eq!(micros(Duration::from_nanos(1_240)), "1.2");
        assert_eq!(micros(Duration::from_nanos(99_940)), "99.9");
        assert_eq!(micros(Duration::from_micros(1_234)), "1234");
    }
}
