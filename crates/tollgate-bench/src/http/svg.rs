//! The report as a hand-written SVG: requests/s per variant (the median as a bar, each round as
//! a dot, so the spread is visible), and the median p50 and p99 beside each other.

use std::fmt::Write as _;

use super::report::HttpReport;
use super::variant::Variant;
use crate::report::{compact, escape, nice_ceiling};

const WIDTH: f64 = 720.0;
const TOP: f64 = 40.0;
const PANEL_HEIGHT: f64 = 250.0;
const PLOT_HEIGHT: f64 = 170.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;

fn color(variant: Variant) -> &'static str {
    match variant {
        Variant::Bare => "#888888",
        Variant::Tollgate => "#2b7bb9",
        Variant::TollgateKeys => "#5a9e4b",
    }
}

pub(super) fn render(report: &HttpReport) -> String {
    let height = TOP + 2.0 * PANEL_HEIGHT;
    let mut svg = String::new();
    // `write!` to a String cannot fail.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="24" font-size="16" font-weight="bold">GET /hello, {} connections: bare axum vs tollgate's middleware</text>"#,
        report.connections
    );
    throughput(&mut svg, report, TOP);
    latency(&mut svg, report, TOP + PANEL_HEIGHT);
    svg.push_str("</svg>\n");
    svg
}

/// Axis, grid and panel title; returns the y of the baseline.
fn axes(svg: &mut String, y0: f64, title: &str, top: f64, unit: &str) -> f64 {
    let base = y0 + 30.0 + PLOT_HEIGHT;
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"#,
        y0 + 18.0,
        escape(title)
    );
    for tick in 0..=4 {
        let value = top * f64::from(tick) / 4.0;
        let y = base - PLOT_HEIGHT * f64::from(tick) / 4.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}{unit}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            compact(value)
        );
    }
    base
}

fn throughput(svg: &mut String, report: &HttpReport, y0: f64) {
    let variants = report.variants();
    let max = report
        .runs
        .iter()
        .map(|r| r.requests_per_sec())
        .fold(0.0, f64::max);
    let top = nice_ceiling(max);
    let base = axes(
        svg,
        y0,
        "requests/s (bar: median of rounds; dots: each round)",
        top,
        "",
    );
    let slot = (WIDTH - LEFT - RIGHT) / variants.len().max(1) as f64;
    for (i, &variant) in variants.iter().enumerate() {
        let Some(s) = report.summary(variant) else {
            continue;
        };
        let x = LEFT + i as f64 * slot + slot * 0.2;
        let w = slot * 0.6;
        let h = PLOT_HEIGHT * s.requests_per_sec / top;
        let label = match report.compare(variant) {
            Some(c) if variant.is_limited() => {
                format!("{} ({:.2}×)", compact(s.requests_per_sec), c.ratio)
            }
            _ => compact(s.requests_per_sec),
        };
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="{:.1}" width="{w:.1}" height="{h:.1}" fill="{}"><title>{variant}: {} requests/s</title></rect><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{label}</text><text x="{:.1}" y="{:.1}" text-anchor="middle">{variant}</text>"#,
            base - h,
            color(variant),
            compact(s.requests_per_sec),
            x + w / 2.0,
            base - h - 4.0,
            x + w / 2.0,
            base + 16.0
        );
        for run in report.runs_of(variant) {
            let y = base - PLOT_HEIGHT * run.requests_per_sec() / top;
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{y:.1}" r="3" fill="black" fill-opacity="0.6"><title>round {}: {} requests/s</title></circle>"#,
                x + w / 2.0,
                run.round,
                compact(run.requests_per_sec())
            );
        }
    }
}

fn latency(svg: &mut String, report: &HttpReport, y0: f64) {
    let summaries: Vec<_> = report
        .variants()
        .into_iter()
        .filter_map(|v| report.summary(v))
        .collect();
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let max = summaries.iter().map(|s| us(s.p99)).fold(0.0, f64::max);
    let top = nice_ceiling(max);
    let base = axes(
        svg,
        y0,
        "latency, median of rounds (left bar p50, right bar p99)",
        top,
        " µs",
    );
    let slot = (WIDTH - LEFT - RIGHT) / summaries.len().max(1) as f64;
    for (i, s) in summaries.iter().enumerate() {
        let w = slot * 0.3;
        for (j, (what, value, opacity)) in [("p50", us(s.p50), 0.55), ("p99", us(s.p99), 1.0)]
            .into_iter()
            .enumerate()
        {
            let x = LEFT + i as f64 * slot + slot * 0.2 + j as f64 * w;
            let h = PLOT_HEIGHT * value / top;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}" fill-opacity="{opacity}"><title>{} {what}: {value:.1} µs</title></rect><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{what} {}</text>"#,
                base - h,
                w * 0.95,
                color(s.variant),
                s.variant,
                x + w * 0.475,
                base - h - 3.0,
                compact(value)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + i as f64 * slot + slot * 0.5,
            base + 16.0,
            s.variant
        );
    }
}
