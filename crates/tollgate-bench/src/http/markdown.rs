//! The report as Markdown.

use std::fmt::Write as _;

use super::report::{Comparison, HttpReport, Run, ratios, signed_micros};
use super::variant::Variant;
use crate::report::{goals_table, micros, thousands};

pub(super) fn render(report: &HttpReport) -> String {
    let mut md = String::new();
    // `write!` to a String cannot fail; the results are discarded for that reason only.
    let _ = writeln!(
        md,
        "# HTTP: tollgate's middleware over a bare axum handler\n"
    );
    let _ = writeln!(
        md,
        "{} keep-alive HTTP/1.1 connections sending `GET /hello`, {} s per run, {} rounds of \
         the variants in turn (after {} s of unrecorded warm-up each); load generator and \
         servers in one process on {} cores, so only the ratios mean anything.\n",
        report.connections,
        report.seconds_per_run,
        report.rounds,
        report.warmup_seconds,
        report.cores
    );
    goals_table(&mut md, &report.goals());
    summary(&mut md, report);
    runs(&mut md, report);
    notes(&mut md, report);
    md
}

fn summary(md: &mut String, report: &HttpReport) {
    let _ = writeln!(md, "## Median of {} rounds\n", report.rounds);
    let _ = writeln!(
        md,
        "| variant | requests/s | × bare | × bare per round | p50 µs | p99 µs | p50 added µs | p99 added µs | \
         CPU µs/request | CPU added µs | responses | non-200 | errors |"
    );
    let _ = writeln!(
        md,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for variant in report.variants() {
        let Some(s) = report.summary(variant) else {
            continue;
        };
        // Bare is the reference: its own ratio is 1 and nothing is added to it.
        let c = report.compare(variant).filter(|_| variant.is_limited());
        let field = |f: &dyn Fn(&Comparison) -> String, bare: &str| match &c {
            Some(c) => f(c),
            None if variant == Variant::Bare => bare.to_owned(),
            None => "–".to_owned(),
        };
        let ratio = field(&|c| format!("{:.3}", c.ratio), "1");
        let per_round = field(&|c| ratios(&c.round_ratios), "–");
        let p50_added = field(&|c| signed_micros(c.p50_added), "–");
        let p99_added = field(&|c| signed_micros(c.p99_added), "–");
        let cpu_added = field(
            &|c| c.cpu_added.map_or_else(|| "–".to_owned(), signed_micros),
            "–",
        );
        let _ = writeln!(
            md,
            "| {variant} | {} | {ratio} | {per_round} | {} | {} | {p50_added} | {p99_added} | \
             {} | {cpu_added} | {} | {} | {} |",
            thousands(s.requests_per_sec),
            micros(s.p50),
            micros(s.p99),
            cpu_micros(s.cpu_per_request),
            thousands(s.responses as f64),
            thousands(s.non_200 as f64),
            thousands(s.errors as f64),
        );
    }
    md.push('\n');
}

fn runs(md: &mut String, report: &HttpReport) {
    let _ = writeln!(md, "## Every run, in the order run\n");
    let _ = writeln!(
        md,
        "| round | variant | requests/s | p50 µs | p99 µs | CPU µs/request | others' CPU s | \
         responses | non-200 | errors | with RateLimit |"
    );
    let _ = writeln!(
        md,
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for run in &report.runs {
        row(md, run);
    }
    md.push('\n');
}

fn row(md: &mut String, run: &Run) {
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        run.round,
        run.variant,
        thousands(run.requests_per_sec()),
        micros(run.p50),
        micros(run.p99),
        cpu_micros(run.cpu_per_request()),
        run.others_cpu
            .map_or_else(|| "–".into(), |d| format!("{:.2}", d.as_secs_f64())),
        thousands(run.responses as f64),
        thousands(run.non_200 as f64),
        thousands(run.errors as f64),
        thousands(run.with_ratelimit as f64),
    );
}

fn notes(md: &mut String, report: &HttpReport) {
    let _ = writeln!(md, "## How to read it\n");
    for variant in report.variants() {
        let _ = writeln!(md, "- **{variant}**: {}.", variant.describe());
    }
    let keys = if report.variants().contains(&Variant::TollgateKeys) {
        format!(
            " The requests carry `x-api-key` from {} distinct values in turn (every variant \
             gets the same requests; only tollgate_keys reads the header).",
            thousands(report.keys as f64)
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        md,
        "- The policy (`allow_all`, 10⁹ tokens refilled at 10⁹/s) never denies: every request \
         takes the whole decision path (key, store, headers) and reaches the handler.{keys}\n\
         - Closed loop: each connection sends its next request when the previous response has \
         been read. requests/s = responses / time; latency from sending to the end of the \
         body; percentiles by nearest rank, at most 1.6% high. Medians are taken per column, \
         across rounds; × bare and the added latencies compare medians. × bare per round \
         divides each round's runs, made seconds apart: when the machine's speed shifts \
         between rounds (this host's does), the pairs still compare like with like.\n\
         - CPU µs/request: the CPU time of the whole process (load generator, servers and the \
         kernel's TCP work for both, counted in 10 ms ticks) per response. Time spent waiting \
         for a core is not in it, so it moves less than requests/s when other work shares the \
         machine; CPU added is the middleware's own cost per request.\n\
         - others' CPU s: CPU time the rest of the machine used during the run (from \
         `/proc/stat`). A run that shared the cores with other work has lower requests/s and \
         higher latency for reasons that are not its variant's; judge the ratios on runs where \
         this is near 0.\n\
         \n![requests per second and latency](http.svg)"
    );
}

/// CPU seconds per request as microseconds with one decimal, `–` when unknown.
fn cpu_micros(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "–".into(), |s| format!("{:.1}", s * 1e6))
}
