//! The report as a hand-written SVG: requests/s per variant (the median as a bar, each round as
//! a dot, so the spread is visible), and the median p50 and p99 beside each other.

use std::fmt::Write as _;

use super::report::HttpReport;
use super::variant::Variant;
use crate::report::chart::{self, LEFT, PLOT_HEIGHT, RIGHT};
use crate::report::{compact, nice_ceiling};

const WIDTH: f64 = 720.0;
const TOP: f64 = 40.0;
const PANEL_HEIGHT: f64 = 250.0;

fn color(variant: Variant) -> &'static str {
    match variant {
        Variant::Bare => "#888888",
        Variant::Tollgate => "#2b7bb9",
        Variant::TollgateKeys => "#5a9e4b",
        Variant::Server => "#c0504d",
    }
}

pub(super) fn render(report: &HttpReport) -> String {
    let height = TOP + 2.0 * PANEL_HEIGHT;
    let mut svg = String::new();
    chart::open(
        &mut svg,
        WIDTH,
        height,
        &format!(
            "GET /hello, {} connections: bare axum vs tollgate's middleware",
            report.connections
        ),
    );
    throughput(&mut svg, report, TOP);
    latency(&mut svg, report, TOP + PANEL_HEIGHT);
    svg.push_str("</svg>\n");
    svg
}

fn throughput(svg: &mut String, report: &HttpReport, y0: f64) {
    let variants = report.variants();
    let max = report
        .runs
        .iter()
        .map(|r| r.requests_per_sec())
        .fold(0.0, f64::max);
    let top = nice_ceiling(max);
    let base = chart::axes(
        svg,
        WIDTH,
        y0,
        "requests/s (bar: median of rounds; dots: each round)",
        None,
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
    let base = chart::axes(
        svg,
        WIDTH,
        y0,
        "latency, median of rounds (left bar p50, right bar p99)",
        None,
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
