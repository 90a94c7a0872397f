//! Every report's charts as one SVG, drawn with plotters: the report's title, then a panel per
//! chart, each on its own scale (a flood answered from a local cache and a retry storm differ
//! by orders of magnitude), a group of bars per label, each bar labelled with its value, and
//! the legend to the right of the bars.

use std::ops::Range;

use plotters::backend::SVGBackend;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Chart, Report, compact};
use crate::BenchError;

const WIDTH: u32 = 960;
const TITLE: u32 = 40;
const PANEL: u32 = 280;
/// Room right of each panel's bars for its legend.
const LEGEND: u32 = 170;
const FONT: &str = "sans-serif";

/// The series' colours, in order.
const PALETTE: [RGBColor; 6] = [
    RGBColor(43, 123, 185),
    RGBColor(224, 138, 44),
    RGBColor(90, 158, 75),
    RGBColor(185, 71, 75),
    RGBColor(127, 179, 220),
    RGBColor(136, 136, 136),
];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;

impl Report {
    /// The report's charts as a standalone SVG document, a panel per chart.
    pub fn to_svg(&self) -> Result<String, BenchError> {
        let mut svg = String::new();
        draw(&mut svg, self).map_err(|e| BenchError::Chart(e.to_string()))?;
        Ok(svg)
    }
}

fn draw(svg: &mut String, report: &Report) -> Drawn {
    let panels = report.charts.len();
    let height = TITLE + PANEL * panels as u32;
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let body = root.titled(&report.title, (FONT, 20))?;
    if panels > 0 {
        for (area, chart) in body.split_evenly((panels, 1)).iter().zip(&report.charts) {
            panel(area, chart)?;
        }
    }
    root.present()?;
    Ok(())
}

fn panel(area: &Area<'_>, chart: &Chart) -> Drawn {
    let (plot, legend_area) = area.split_horizontally(WIDTH - LEGEND);
    let max = chart
        .groups
        .iter()
        .flat_map(|g| g.values.iter().flatten())
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    // Room above the tallest bar for its label; an empty or all-zero chart still has a scale.
    let top = if max > 0.0 { max * 1.15 } else { 1.0 };
    let mut ctx = ChartBuilder::on(&plot)
        .caption(&chart.title, (FONT, 19))
        .margin(10)
        .x_label_area_size(24)
        .y_label_area_size(80)
        .build_cartesian_2d(Groups(chart.groups.len().max(1)), 0.0..top)?;
    let group_label = |x: &f64| {
        chart
            .groups
            .get(x.floor() as usize)
            .map_or_else(String::new, |g| g.label.clone())
    };
    ctx.configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .y_labels(6)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .y_desc(&chart.y_label)
        .x_label_formatter(&group_label)
        .y_label_formatter(&|y| compact(*y))
        .draw()?;
    let slot = 0.8 / chart.series.len().max(1) as f64;
    let above = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (g, group) in chart.groups.iter().enumerate() {
        for (s, value) in group.values.iter().enumerate() {
            let Some(v) = value.filter(|v| v.is_finite()) else {
                continue;
            };
            let x = g as f64 + 0.1 + s as f64 * slot;
            let bar = Rectangle::new([(x, 0.0), (x + slot * 0.9, v)], color(s).filled());
            ctx.draw_series([bar])?;
            ctx.draw_series([Text::new(compact(v), (x + slot * 0.45, v), above.clone())])?;
        }
    }
    legend(&legend_area, &chart.series)
}

fn legend(area: &Area<'_>, series: &[String]) -> Drawn {
    let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (s, name) in series.iter().enumerate() {
        let y = 40 + 22 * s as i32;
        area.draw(&Rectangle::new(
            [(6, y - 6), (18, y + 6)],
            color(s).filled(),
        ))?;
        area.draw(&Text::new(name.as_str(), (24, y), style.clone()))?;
    }
    Ok(())
}

/// The x axis of `n` groups side by side: group `g` spans `[g, g + 1)`, its label under the
/// middle. (plotters' own f64 axis picks round numbers for its ticks, not the groups.)
struct Groups(usize);

impl Ranged for Groups {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, (start, end): (i32, i32)) -> i32 {
        start + (f64::from(end - start) * value / self.0 as f64).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _: Hint) -> Vec<f64> {
        (0..self.0).map(|g| g as f64 + 0.5).collect()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.0 as f64
    }
}

fn color(series: usize) -> RGBColor {
    PALETTE[series % PALETTE.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Group;

    /// A group's label and its two bars.
    type Bars<'a> = (&'a str, [Option<f64>; 2]);

    /// A report of one chart per `(title, groups)`.
    fn report(charts: &[(&str, &[Bars<'_>])]) -> Report {
        let chart = |&(title, groups): &(&str, &[Bars<'_>])| Chart {
            title: title.into(),
            y_label: "decisions/s".into(),
            series: vec!["tollgate".into(), "lua".into()],
            groups: groups
                .iter()
                .map(|(label, values)| Group {
                    label: (*label).into(),
                    values: values.to_vec(),
                })
                .collect(),
        };
        Report {
            name: "sample",
            title: "Sample <run>".into(),
            intro: Vec::new(),
            goals: Vec::new(),
            sections: Vec::new(),
            notes: Vec::new(),
            charts: charts.iter().map(chart).collect(),
        }
    }

    #[test]
    fn a_panel_per_chart_with_its_values_labelled() {
        let svg = report(&[
            (
                "hot_key",
                &[
                    ("c=1", [Some(12_345.0), Some(950.0)]),
                    ("c=64", [Some(4_500_000.0), None]),
                ],
            ),
            ("per_user", &[("c=1", [Some(7.0), Some(2.5)])]),
        ])
        .to_svg()
        .unwrap();
        assert!(svg.starts_with("<svg "), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
        // The title (escaped), each panel's title, groups, bars' values and legend. plotters
        // writes a text's content on a line of its own.
        let text = |t: &str| format!(">\n{t}\n</text>");
        for t in "Sample &lt;run&gt;|hot_key|per_user|c=1|c=64|12.3k|950|4.5M|7|2.5|tollgate|lua"
            .split('|')
        {
            assert!(svg.contains(&text(t)), "{t} missing from\n{svg}");
        }
        assert_eq!(svg.matches(&text("decisions/s")).count(), 2, "{svg}");
    }

    #[test]
    fn empty_and_all_zero_charts_still_draw() {
        let zero: &[_] = &[("c=1", [Some(0.0), Some(0.0)])];
        let nan: &[_] = &[("c=1", [Some(f64::NAN), None])];
        for charts in [
            &[][..],
            &[("empty", &[][..])],
            &[("zero", zero)],
            &[("nan", nan)],
        ] {
            let svg = report(charts).to_svg().unwrap();
            assert!(svg.starts_with("<svg ") && svg.contains("</svg>"), "{svg}");
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        }
    }
}
