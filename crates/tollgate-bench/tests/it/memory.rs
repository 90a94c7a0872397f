//! A short run of the memory benchmark: every scenario, thread count and contender timed in
//! every round, every goal judged, no check denied, memory per key measured, the report
//! written. Nothing here is about speed.
//!
//! The ignored test is the real run, at the default settings, in release:
//! `cargo test --release -p tollgate-bench --test memory -- --ignored --nocapture`.

use tollgate_bench::memory::{Contender, MemoryBenchArgs, run_memory};

#[test]
fn a_short_run_times_every_cell_and_judges_every_goal() {
    let out = tempfile::tempdir().unwrap();
    let args = MemoryBenchArgs {
        seconds: 0.05,
        rounds: 2,
        keys: 20_000,
        warmup: 0.01,
        out: out.path().join("report"),
    };
    let report = run_memory(&args).unwrap();

    assert_eq!(report.scenarios, [1, 2_000, 20_000]);
    assert_eq!(report.threads, [1, 2]);
    assert_eq!(report.runs.len(), 2 * 3 * 2 * Contender::ALL.len());
    for run in &report.runs {
        assert!(run.checks > 0, "{run:?}");
        assert!(run.ns_per_check() > 0.0, "{run:?}");
        if cfg!(target_os = "linux") {
            assert!(run.others_cpu.is_some(), "{run:?}");
        }
    }
    let rows = report.rows();
    let labels: Vec<String> = rows.iter().map(|r| r.label()).collect();
    assert_eq!(
        labels,
        [
            "hot key, 1 thread",
            "hot key, 2 threads",
            "2k keys, 1 thread",
            "2k keys, 2 threads",
            "20k keys, 1 thread",
            "20k keys, 2 threads",
        ]
    );
    for row in &rows {
        for contender in Contender::ALL {
            assert!(row.ns(contender).is_some_and(|ns| ns > 0.0), "{row:?}");
        }
    }

    // Every row's six ratios (two entry points on three clocks) and the top summary's cost,
    // the six hot-key times, and the denials: all judged.
    let goals = report.goals();
    assert_eq!(goals.len(), rows.len() * 7 + 7, "{goals:#?}");
    assert!(goals.iter().all(|g| g.met.is_some()), "{goals:#?}");
    assert_eq!(report.denied, 0);
    assert_eq!(report.precharges_denied, 0);
    // One per key per limiter (two limiters on three clocks), in every scenario.
    assert_eq!(report.precharges, 6 * (1 + 2_000 + 20_000));
    assert!(report.checks > report.runs.iter().map(|r| r.checks).sum::<u64>());
    assert_eq!(goals.last().and_then(|g| g.met), Some(true), "{goals:#?}");

    let footprint = report.footprint;
    assert_eq!(footprint.keys, 20_000);
    // Each key's slot, at least.
    assert!(
        footprint.per_key(footprint.tollgate_tables) >= 40.0,
        "{footprint:?}"
    );
    if cfg!(target_os = "linux") {
        assert!(footprint.tollgate_rss.is_some(), "{footprint:?}");
        assert!(footprint.governor_rss.is_some(), "{footprint:?}");
    }

    let md = std::fs::read_to_string(out.path().join("report/memory.md")).unwrap();
    assert_eq!(md, report.report().to_markdown());
    for needle in [
        "## Goals",
        "| scenario | threads | clock | tollgate limiter ns | tollgate store ns | governor ns | \
         ratio limiter | ratio store | key walk ns |",
        "| 20k keys | 2 | Instant |",
        "| 20k keys | 2 | TSC |",
        "| 20k keys | 2 | coarse |",
        "| tollgate `MemoryStore` | its tables (`allocated_bytes()`) |",
        "memory.svg",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from\n{md}");
    }
    let svg = std::fs::read_to_string(out.path().join("report/memory.svg")).unwrap();
    assert!(svg.contains("hot key, 2 threads"), "{svg}");
}

#[test]
fn arguments_that_cannot_make_a_run_are_refused() {
    for args in [
        MemoryBenchArgs {
            keys: 19,
            ..MemoryBenchArgs::default()
        },
        MemoryBenchArgs {
            rounds: 0,
            ..MemoryBenchArgs::default()
        },
        MemoryBenchArgs {
            seconds: f64::NAN,
            ..MemoryBenchArgs::default()
        },
        MemoryBenchArgs {
            warmup: 0.0,
            ..MemoryBenchArgs::default()
        },
    ] {
        assert!(run_memory(&args).is_err(), "{args:?}");
    }
}

/// The real run: the default settings, its Markdown printed. Only meaningful in release.
#[test]
#[ignore = "a benchmark: run it in release, with --ignored --nocapture"]
fn default_run() {
    let out = tempfile::tempdir().unwrap();
    let args = MemoryBenchArgs {
        out: out.path().to_owned(),
        ..MemoryBenchArgs::default()
    };
    let report = run_memory(&args).unwrap();
    println!("{}", report.report().to_markdown());
}
