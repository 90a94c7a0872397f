//! A short fixed-rate run of the tail benchmark on HTTP and gRPC (RESP needs `redis-server`,
//! which `binary.rs`'s quick run of `all` covers): every run sent its scheduled requests and
//! reports a latency distribution and a p99 per slice of time, the pairs are alternated, and
//! the report is written with a goal per protocol. Nothing here is about speed.

use tollgate_bench::tail::{Condition, Protocol, QUANTILES};
use tollgate_bench::{TailBenchArgs, run_tail};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_fixed_rate_run_reports_a_histogram_per_run_and_slice() {
    let out = tempfile::tempdir().unwrap();
    let args = TailBenchArgs {
        seconds: 0.3,
        rate: 500,
        connections: 4,
        rounds: 2,
        slice_ms: 100,
        protocols: vec![Protocol::Http, Protocol::Grpc],
        conditions: vec![Condition::Idle, Condition::Busy],
        out: out.path().join("report"),
    };
    let report = run_tail(&args).await.unwrap();

    assert_eq!(report.runs.len(), 2 * 2 * 2 * 2, "{:?}", report.runs);
    assert_eq!(report.busy_loops, report.cores.saturating_sub(1).max(1));
    assert!(report.missing.is_empty(), "{:?}", report.missing);
    for run in &report.runs {
        // 500/s for 0.3 s: 150 requests scheduled, every one sent and answered.
        assert_eq!(run.requests, 150, "{run:?}");
        assert_eq!(run.errors, 0, "{run:?}");
        // A histogram: the percentiles in order, none missing.
        assert_eq!(run.percentiles.len(), QUANTILES.len());
        assert!(run.percentiles[0] > 0.0, "{run:?}");
        assert!(run.percentiles.windows(2).all(|w| w[0] <= w[1]), "{run:?}");
        // Three 100 ms slices of scheduled send times, each with its p99.
        assert_eq!(run.slices_p99.len(), 3, "{run:?}");
        assert!(
            run.slices_p99.iter().all(|p| p.is_finite() && *p > 0.0),
            "{run:?}"
        );
    }
    for protocol in [Protocol::Http, Protocol::Grpc] {
        let pairs = report.pairs(protocol);
        assert_eq!(pairs.len(), 4, "two conditions, two rounds");
        // The bare server goes first in round 1, tollgate in round 2.
        for pair in &pairs {
            let bare_at = report.runs.iter().position(|r| std::ptr::eq(r, pair.bare));
            let tollgate_at = report
                .runs
                .iter()
                .position(|r| std::ptr::eq(r, pair.tollgate));
            assert_eq!(
                bare_at < tollgate_at,
                pair.bare.round == 1,
                "{bare_at:?} {tollgate_at:?}"
            );
        }
    }
    let goals = report.goals();
    assert_eq!(goals.len(), 2, "{goals:?}");
    assert!(goals.iter().all(|g| g.met.is_some()), "{goals:?}");

    let md = std::fs::read_to_string(out.path().join("report/tail.md")).unwrap();
    assert_eq!(md, report.report().to_markdown());
    for needle in [
        "## Goals",
        "p99.9",
        "p99 per 100 ms over time",
        "| http | busy | 2 | tollgate |",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from\n{md}");
    }
    assert!(out.path().join("report/tail.svg").exists());
}
