//! Decisions/s as grouped bar charts, hand-written SVG: one panel per scenario (each with its own
//! scale, since a flood answered from a local cache and a WATCH retry storm differ by orders of
//! magnitude), a group per concurrency, a bar per approach.

use super::RedisReport;
use super::chart::{self, Bar, Group};
use crate::redis::{Approach, Scenario};

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 260.0;
const TOP: f64 = 70.0;

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
    let mut svg = String::new();
    chart::open(
        &mut svg,
        WIDTH,
        TOP + PANEL_HEIGHT * scenarios.len() as f64,
        &format!(
            "Redis token buckets: decisions/s (higher is better), run {}",
            report.run_id
        ),
    );
    chart::legend(
        &mut svg,
        approaches.iter().map(|&a| (a.to_string(), color(a))),
    );
    for (p, &scenario) in scenarios.iter().enumerate() {
        let groups: Vec<Group> = report
            .concurrency
            .iter()
            .map(|&c| Group {
                label: format!("c={c}"),
                bars: approaches
                    .iter()
                    .map(|&approach| {
                        report.cell(scenario, approach, c).map(|cell| Bar {
                            value: cell.decisions_per_sec(),
                            color: color(approach),
                            title: format!("{scenario} c={c} {approach}"),
                        })
                    })
                    .collect(),
            })
            .collect();
        chart::grouped_bars(
            &mut svg,
            WIDTH,
            TOP + p as f64 * PANEL_HEIGHT,
            (&scenario.to_string(), Some(scenario.describe())),
            &groups,
            "decisions/s",
        );
    }
    svg.push_str("</svg>\n");
    svg
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
