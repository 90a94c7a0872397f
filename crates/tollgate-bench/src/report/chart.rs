//! What every benchmark's hand-written SVG is drawn with: the page, a legend, a panel's axes,
//! and a panel of grouped bars. Each report decides what its panels hold; the drawing is here.

use std::fmt::Write as _;

use super::{compact, escape};

/// Room left of the plot, for the axis labels.
pub(crate) const LEFT: f64 = 90.0;
/// Room right of the plot.
pub(crate) const RIGHT: f64 = 20.0;
/// The height of a panel's plot area.
pub(crate) const PLOT_HEIGHT: f64 = 170.0;

/// Opens an SVG of `width` × `height` on a white page, with `title` at the top. `write!` to a
/// String cannot fail, here and below.
pub(crate) fn open(svg: &mut String, width: f64, height: f64, title: &str) {
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
}

/// A row of colour swatches and names under the title.
pub(crate) fn legend<'a>(svg: &mut String, items: impl IntoIterator<Item = (String, &'a str)>) {
    for (i, (name, color)) in items.into_iter().enumerate() {
        let x = LEFT + i as f64 * 130.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="38" width="12" height="12" fill="{color}"/><text x="{}" y="49">{}</text>"#,
            x + 16.0,
            escape(&name)
        );
    }
}

/// A panel's title (and a grey note beside it), grid and axis labels from 0 to `top`; returns
/// the y of the baseline.
pub(crate) fn axes(
    svg: &mut String,
    width: f64,
    y0: f64,
    title: &str,
    note: Option<&str>,
    top: f64,
    unit: &str,
) -> f64 {
    let base = y0 + 30.0 + PLOT_HEIGHT;
    let _ = write!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"#,
        y0 + 18.0,
        escape(title)
    );
    if let Some(note) = note {
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" fill="#555">{}</text>"##,
            LEFT + 130.0,
            y0 + 18.0,
            escape(note)
        );
    }
    svg.push('\n');
    for tick in 0..=4 {
        let value = top * f64::from(tick) / 4.0;
        let y = base - PLOT_HEIGHT * f64::from(tick) / 4.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}{unit}</text>"##,
            width - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            compact(value)
        );
    }
    base
}

/// One bar: its value, colour, and what its tooltip says before the value.
pub(crate) struct Bar {
    pub(crate) value: f64,
    pub(crate) color: &'static str,
    pub(crate) title: String,
}

/// A group of bars under one label; a missing bar leaves its place empty.
pub(crate) struct Group {
    pub(crate) label: String,
    pub(crate) bars: Vec<Option<Bar>>,
}

/// A panel of grouped bars on its own scale: title and axes, then each group's bars labelled
/// with their values (`unit` in the tooltips).
pub(crate) fn grouped_bars(
    svg: &mut String,
    width: f64,
    y0: f64,
    (title, note): (&str, Option<&str>),
    groups: &[Group],
    unit: &str,
) {
    let max = groups
        .iter()
        .flat_map(|g| g.bars.iter().flatten())
        .map(|b| b.value)
        .fold(0.0, f64::max);
    let top = super::nice_ceiling(max);
    let base = axes(svg, width, y0, title, note, top, "");
    let slots = groups
        .iter()
        .map(|g| g.bars.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let group_width = (width - LEFT - RIGHT) / groups.len().max(1) as f64;
    let bar_width = (group_width * 0.8) / slots as f64;
    for (g, group) in groups.iter().enumerate() {
        let gx = LEFT + g as f64 * group_width + group_width * 0.1;
        for (b, bar) in group.bars.iter().enumerate() {
            let Some(bar) = bar else {
                continue;
            };
            let h = PLOT_HEIGHT * bar.value / top;
            let x = gx + b as f64 * bar_width;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {} {unit}</title></rect><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                base - h,
                bar_width * 0.9,
                bar.color,
                escape(&bar.title),
                compact(bar.value),
                x + bar_width * 0.45,
                base - h - 3.0,
                compact(bar.value)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            gx + group_width * 0.4,
            base + 16.0,
            escape(&group.label)
        );
    }
}
