//! Decisions/s as grouped bar charts, hand-written SVG: a panel per scenario and isolation
//! (each with its own scale: a hot key under SERIALIZABLE and many keys at READ COMMITTED differ
//! by orders of magnitude), a group per connection count, a bar per approach.

use super::PostgresReport;
use crate::postgres::{Approach, Isolation, Scenario};
use crate::report::chart::{self, Bar, Group};

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 260.0;
const TOP: f64 = 70.0;

fn color(approach: Approach) -> &'static str {
    match approach {
        Approach::Tollgate => "#2b7bb9",
        Approach::Function => "#e08a2c",
        Approach::TollgateSync => "#7fb3dc",
    }
}

pub(super) fn render(report: &PostgresReport) -> String {
    let panels: Vec<(Scenario, Isolation)> = Scenario::ALL
        .into_iter()
        .flat_map(|s| report.isolations.iter().map(move |&i| (s, i)))
        .filter(|&(s, i)| {
            report
                .cells
                .iter()
                .any(|c| c.scenario == s && c.isolation == i)
        })
        .collect();
    let mut svg = String::new();
    chart::open(
        &mut svg,
        WIDTH,
        TOP + PANEL_HEIGHT * panels.len() as f64,
        &format!(
            "PostgreSQL token buckets: decisions/s (higher is better), run {}",
            report.run_id
        ),
    );
    chart::legend(
        &mut svg,
        Approach::ALL.iter().map(|&a| (a.to_string(), color(a))),
    );
    for (p, &(scenario, isolation)) in panels.iter().enumerate() {
        let groups: Vec<Group> = report
            .connections
            .iter()
            .map(|&c| Group {
                label: format!("{c} connections"),
                bars: Approach::ALL
                    .iter()
                    .map(|&approach| {
                        report
                            .cell(scenario, isolation, approach, c)
                            .map(|cell| Bar {
                                value: cell.decisions_per_sec(),
                                color: color(approach),
                                title: format!("{scenario} {isolation} {c} connections {approach}"),
                            })
                    })
                    .collect(),
            })
            .collect();
        chart::grouped_bars(
            &mut svg,
            WIDTH,
            TOP + p as f64 * PANEL_HEIGHT,
            (&format!("{scenario}, {isolation}"), None),
            &groups,
            "decisions/s",
        );
    }
    svg.push_str("</svg>\n");
    svg
}
