//! Decisions/s as grouped bar charts, hand-written SVG: a panel per scenario and isolation
//! (each with its own scale: a hot key under SERIALIZABLE and many keys at READ COMMITTED differ
//! by orders of magnitude), a group per connection count, a bar per approach.

use std::fmt::Write as _;

use super::PostgresReport;
use crate::postgres::{Approach, Isolation, Scenario};
use crate::report::{compact, escape, nice_ceiling};

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 260.0;
const TOP: f64 = 70.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const PLOT_HEIGHT: f64 = 170.0;

fn color(approach: Approach) -> &'static str {
    match approach {
        Approach::Tollgate => "#2b7bb9",
        Approach::Function => "#e08a2c",
        Approach::TollgatePool => "#7fb3dc",
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
    let height = TOP + PANEL_HEIGHT * panels.len() as f64;
    let mut svg = String::new();
    // `write!` to a String cannot fail.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="24" font-size="16" font-weight="bold">PostgreSQL token buckets: decisions/s (higher is better), run {}</text>"#,
        escape(&report.run_id)
    );
    for (i, approach) in Approach::ALL.iter().enumerate() {
        let x = LEFT + i as f64 * 130.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="38" width="12" height="12" fill="{}"/><text x="{}" y="49">{}</text>"#,
            color(*approach),
            x + 16.0,
            approach
        );
    }
    for (p, &(scenario, isolation)) in panels.iter().enumerate() {
        panel(
            &mut svg,
            report,
            scenario,
            isolation,
            TOP + p as f64 * PANEL_HEIGHT,
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn panel(
    svg: &mut String,
    report: &PostgresReport,
    scenario: Scenario,
    isolation: Isolation,
    y0: f64,
) {
    let base = y0 + 30.0 + PLOT_HEIGHT;
    let max = report
        .cells
        .iter()
        .filter(|c| c.scenario == scenario && c.isolation == isolation)
        .map(|c| c.decisions_per_sec())
        .fold(0.0, f64::max);
    let top = nice_ceiling(max);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{scenario}, {isolation}</text>"#,
        y0 + 18.0,
    );
    for tick in 0..=4 {
        let value = top * f64::from(tick) / 4.0;
        let y = base - PLOT_HEIGHT * f64::from(tick) / 4.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            compact(value)
        );
    }
    let groups = report.connections.len().max(1) as f64;
    let group_width = (WIDTH - LEFT - RIGHT) / groups;
    let bar_width = (group_width * 0.8) / Approach::ALL.len() as f64;
    for (g, &c) in report.connections.iter().enumerate() {
        let gx = LEFT + g as f64 * group_width + group_width * 0.1;
        for (b, &approach) in Approach::ALL.iter().enumerate() {
            let Some(cell) = report.cell(scenario, isolation, approach, c) else {
                continue;
            };
            let value = cell.decisions_per_sec();
            let h = if top > 0.0 {
                PLOT_HEIGHT * value / top
            } else {
                0.0
            };
            let x = gx + b as f64 * bar_width;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{scenario} {isolation} {c} connections {approach}: {} decisions/s</title></rect><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                base - h,
                bar_width * 0.9,
                color(approach),
                compact(value),
                x + bar_width * 0.45,
                base - h - 3.0,
                compact(value)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{c} connections</text>"#,
            gx + group_width * 0.4,
            base + 16.0
        );
    }
}
