//! Decisions/s as grouped bar charts, hand-written SVG: one panel per scenario (each with its own
//! scale, since a flood answered from a local cache and a WATCH retry storm differ by orders of
//! magnitude), a group per concurrency, a bar per approach.

use std::fmt::Write as _;

use super::RedisReport;
use crate::redis::{Approach, Scenario};

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 260.0;
const TOP: f64 = 70.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const PLOT_HEIGHT: f64 = 170.0;

fn color(approach: Approach) -> &'static str {
    match approach {
        Approach::Tollgate => "#2b7bb9",
        Approach::Lua => "#e08a2c",
        Approach::Multi => "#5a9e4b",
        Approach::Watch => "#b9474b",
    }
}

pub(super) fn render(report: &RedisReport) -> String {
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| report.cells.iter().any(|c| c.scenario == *s))
        .collect();
    let approaches: Vec<Approach> = Approach::ALL
        .into_iter()
        .filter(|a| report.cells.iter().any(|c| c.approach == *a))
        .collect();
    let height = TOP + PANEL_HEIGHT * scenarios.len() as f64;
    let mut svg = String::new();
    // `write!` to a String cannot fail.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="24" font-size="16" font-weight="bold">Redis token buckets: decisions/s (higher is better), run {}</text>"#,
        escape(&report.run_id)
    );
    for (i, approach) in approaches.iter().enumerate() {
        let x = LEFT + i as f64 * 130.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="38" width="12" height="12" fill="{}"/><text x="{}" y="49">{}</text>"#,
            color(*approach),
            x + 16.0,
            approach
        );
    }
    for (p, scenario) in scenarios.iter().enumerate() {
        panel(
            &mut svg,
            report,
            *scenario,
            &approaches,
            TOP + p as f64 * PANEL_HEIGHT,
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn panel(
    svg: &mut String,
    report: &RedisReport,
    scenario: Scenario,
    approaches: &[Approach],
    y0: f64,
) {
    let base = y0 + 30.0 + PLOT_HEIGHT;
    let max = report
        .cells
        .iter()
        .filter(|c| c.scenario == scenario)
        .map(|c| c.decisions_per_sec())
        .fold(0.0, f64::max);
    let top = nice_ceiling(max);
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text><text x="{}" y="{}" fill="#555">{}</text>"##,
        y0 + 18.0,
        scenario,
        LEFT + 130.0,
        y0 + 18.0,
        escape(scenario.describe())
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
    let groups = report.concurrency.len().max(1) as f64;
    let group_width = (WIDTH - LEFT - RIGHT) / groups;
    let bar_width = (group_width * 0.8) / approaches.len().max(1) as f64;
    for (g, &c) in report.concurrency.iter().enumerate() {
        let gx = LEFT + g as f64 * group_width + group_width * 0.1;
        for (b, approach) in approaches.iter().enumerate() {
            let Some(cell) = report.cell(scenario, *approach, c) else {
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
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{scenario} c={c} {approach}: {} decisions/s</title></rect><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                base - h,
                bar_width * 0.9,
                color(*approach),
                compact(value),
                x + bar_width * 0.45,
                base - h - 3.0,
                compact(value)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">c={c}</text>"#,
            gx + group_width * 0.4,
            base + 16.0
        );
    }
}

/// The smallest 1, 2 or 5 × 10^k at or above `x` (1 for 0), for a readable axis.
pub(crate) fn nice_ceiling(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&v| v >= x)
        .unwrap_or(10.0 * magnitude)
}

/// `950`, `12.3k`, `4.5M`.
pub(crate) fn compact(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_tops_are_round_and_cover_the_data() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(200.0), 200.0);
        assert_eq!(nice_ceiling(4_100_000.0), 5_000_000.0);
    }

    #[test]
    fn labels_are_short_and_text_is_escaped() {
        assert_eq!(compact(950.0), "950");
        assert_eq!(compact(12_345.0), "12.3k");
        assert_eq!(compact(4_500_000.0), "4.5M");
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
