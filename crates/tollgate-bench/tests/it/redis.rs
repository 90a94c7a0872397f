//! A short run of `tollgate-bench redis` against a throwaway redis-server: every cell is there,
//! Redis's own counts match what each approach is known to send, tollgate does not over-grant,
//! the run deletes its keys and nothing else, and the report renders.

use crate::support;

use tollgate_bench::{Approach, RedisBenchArgs, Scenario, run_redis};
use tollgate_testkit::{Reply, TestRedis};

fn within(x: f64, expected: f64, tolerance: f64) -> bool {
    (x - expected).abs() <= tolerance
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_measures_every_cell_faithfully() {
    let redis = TestRedis::start().unwrap();
    // Someone else's key: the bench must leave it alone.
    redis.cmd(&[b"SET", b"not:the:bench", b"v"]).unwrap();
    let out = tempfile::tempdir().unwrap();
    let args = RedisBenchArgs {
        redis: redis.url().into(),
        seconds: 0.2,
        concurrency: vec![1, 4],
        out: out.path().join("report"),
        over_grant_seconds: 1.0,
        over_grant_workers: 64,
        // This checks the harness, on a machine that runs other tests at once: a 50 ms bound
        // would count their stalls of the CPU as tollgate's errors.
        store_timeout_ms: Some(1000),
        ..RedisBenchArgs::default()
    };
    let report = run_redis(&args).await.unwrap();

    let approaches = Approach::ALL.len();
    assert_eq!(report.cells.len(), 3 * 2 * approaches);
    for scenario in Scenario::ALL {
        for approach in Approach::ALL {
            for c in [1, 4] {
                let cell = report
                    .cell(scenario, approach, c)
                    .unwrap_or_else(|| panic!("no cell {scenario} {approach} c={c}"));
                assert!(cell.decisions > 0, "{cell:?}");
                assert!(cell.p50 <= cell.p99, "{cell:?}");
                assert!(!cell.p99.is_zero(), "{cell:?}");
            }
        }
    }

    for scenario in [Scenario::HotKey, Scenario::PerUser] {
        for c in [1, 4] {
            for approach in [Approach::Tollgate, Approach::Lua] {
                let cell = report.cell(scenario, approach, c).unwrap();
                assert_eq!(cell.errors, 0, "{cell:?}");
                assert_eq!(
                    cell.allowed, cell.decisions,
                    "allow-all allows all: {cell:?}"
                );
            }
            let lua = report.cell(scenario, Approach::Lua, c).unwrap();
            assert!(within(lua.calls_per_decision(), 1.0, 0.05), "{lua:?}");
            // EVALSHA plus the script's HMGET, HMSET and PEXPIRE.
            assert!(within(lua.commands_per_decision(), 4.0, 0.2), "{lua:?}");
            let multi = report.cell(scenario, Approach::Multi, c).unwrap();
            assert_eq!(multi.errors, 0, "{multi:?}");
            assert!(within(multi.calls_per_decision(), 3.0, 0.1), "{multi:?}");
            assert_eq!(multi.client_calls, multi.commands, "no scripts: {multi:?}");
        }
    }
    // The floor: an EVALSHA a batch, and in it TIME, one MGET, and a SET a decision. Alone, a
    // worker's batches hold its one check.
    for scenario in Scenario::ALL {
        for c in [1, 4] {
            let floor = report.cell(scenario, Approach::Floor, c).unwrap();
            assert_eq!(floor.errors, 0, "{floor:?}");
            assert_eq!(
                floor.allowed, floor.decisions,
                "it decides nothing: {floor:?}"
            );
            assert_eq!(
                floor.commands,
                3 * floor.client_calls + floor.decisions,
                "{floor:?}"
            );
            assert!(floor.client_calls <= floor.decisions, "{floor:?}");
            if c == 1 {
                assert_eq!(floor.client_calls, floor.decisions, "{floor:?}");
            }
        }
    }
    // Alone on its key, WATCH never aborts: WATCH, HMGET, MULTI, HMSET, PEXPIRE, EXEC.
    let watch = report.cell(Scenario::PerUser, Approach::Watch, 1).unwrap();
    assert!(within(watch.calls_per_decision(), 6.0, 0.1), "{watch:?}");

    for c in [1, 4] {
        let flood = report
            .cell(Scenario::HotKeyFlood, Approach::Tollgate, c)
            .unwrap();
        assert!(flood.calls_per_decision() <= 0.1, "deny cache: {flood:?}");
        let bound = 10.0 + 10.0 * flood.elapsed.as_secs_f64();
        assert!(flood.allowed as f64 <= bound.ceil(), "{flood:?}");
        assert!(flood.allowed >= 10, "the burst is allowed: {flood:?}");
    }

    // Every approach but the floor, which decides nothing.
    assert_eq!(report.over_grant.len(), approaches - 1);
    assert!(report.over_grant_of(Approach::Floor).is_none());
    let tollgate = report.over_grant_of(Approach::Tollgate).unwrap();
    assert_eq!(tollgate.max_allowed(), 20);
    assert!(tollgate.allowed <= tollgate.max_allowed(), "{tollgate:?}");
    assert!(tollgate.allowed >= 10, "{tollgate:?}");
    assert_eq!(tollgate.errors, 0, "{tollgate:?}");
    let goals = report.goals();
    assert_eq!(goals.len(), 8);
    assert_eq!(goals[0].met, Some(true), "{goals:?}");
    // Redis's time per decision is measured: the per_user cell at the largest concurrency.
    assert!(goals[5].met.is_some(), "{goals:?}");
    assert!(goals[5].measured.contains(" µs for "), "{goals:?}");
    // And over MULTI's, with the floor's beside it.
    let ratio = |approach| {
        report
            .redis_vs_multi(Scenario::PerUser, approach, 4)
            .unwrap()
    };
    assert!(
        goals[6].measured.starts_with(&format!(
            "{:.2}",
            report
                .cell(Scenario::PerUser, Approach::Tollgate, 4)
                .unwrap()
                .redis_micros_per_decision()
        )),
        "{goals:?}"
    );
    for needle in [
        format!("= {:.2}×", ratio(Approach::Tollgate)),
        format!("= {:.2}× MULTI's", ratio(Approach::Floor)),
    ] {
        assert!(goals[6].measured.contains(&needle), "{needle} in {goals:?}");
    }

    // Only the bench's keys are gone.
    assert_eq!(redis.cmd(&[b"DBSIZE"]).unwrap(), Reply::Integer(1));
    assert_eq!(
        redis.cmd(&[b"GET", b"not:the:bench"]).unwrap(),
        Reply::Bulk(b"v".to_vec())
    );

    let doc = report.report();
    let md = doc.to_markdown();
    for needle in [
        "## Goals",
        "| goal | measured | met? |",
        "## hot_key:",
        "## per_user:",
        "## hot_key_flood:",
        "## Over-grant",
        "| 4 | watch |",
        "redis.svg",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from\n{md}");
    }
    // One row per cell.
    let rows = md
        .lines()
        .filter(|l| l.starts_with("| 1 |") || l.starts_with("| 4 |"));
    assert_eq!(rows.count(), 3 * 2 * approaches, "{md}");
    assert!(md.contains("| 4 | floor |"), "{md}");
    support::written_with_its_chart(&doc, &out.path().join("report"), 3 * 2 * approaches);
}

#[tokio::test]
async fn bad_arguments_are_refused_before_connecting() {
    let args = RedisBenchArgs {
        redis: "redis://127.0.0.1:1".into(),
        seconds: 0.0,
        ..RedisBenchArgs::default()
    };
    let err = run_redis(&args).await.unwrap_err();
    assert!(err.to_string().contains("--seconds"), "{err}");
    let args = RedisBenchArgs {
        concurrency: vec![4, 0],
        ..args
    };
    let args = RedisBenchArgs {
        seconds: 1.0,
        ..args
    };
    let err = run_redis(&args).await.unwrap_err();
    assert!(err.to_string().contains("--concurrency"), "{err}");
}

/// The real measurement, with the default settings: against `TOLLGATE_BENCH_REDIS` (a scratch
/// Redis), writing to `TOLLGATE_BENCH_OUT` (default: a `tollgate-bench-report` temp directory).
/// `cargo test --release -p tollgate-bench -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a two-minute measurement against a scratch Redis named by TOLLGATE_BENCH_REDIS"]
async fn full_run() {
    let mut args = RedisBenchArgs::default();
    if let Ok(url) = std::env::var("TOLLGATE_BENCH_REDIS") {
        args.redis = url;
    }
    args.out = std::env::var_os("TOLLGATE_BENCH_OUT")
        .map(Into::into)
        .unwrap_or_else(|| std::env::temp_dir().join("tollgate-bench-report"));
    let report = run_redis(&args).await.unwrap();
    println!("{}", report.report().to_markdown());
    eprintln!("written to {}", args.out.display());
}
