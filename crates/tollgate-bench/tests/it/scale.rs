//! A short run of the scale benchmark: every cell ran its server processes, each counted its
//! decisions, the store counted its calls, no cell allowed above its bound, leases took almost
//! no calls, and the report is written with every goal. Nothing here is about speed.

use std::path::PathBuf;

use tollgate_bench::scale::{Backend, Scenario};
use tollgate_bench::{ScaleBenchArgs, run_scale};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_counts_every_process_and_never_exceeds_a_bound() {
    let out = tempfile::tempdir().unwrap();
    let args = ScaleBenchArgs {
        seconds: 0.3,
        processes: 2,
        workers: 8,
        out: out.path().join("report"),
        exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_tollgate-bench"))),
        ..ScaleBenchArgs::default()
    };
    let report = run_scale(&args).await.unwrap();
    assert_eq!(report.cells.len(), 12);
    for cell in &report.cells {
        assert_eq!(cell.processes.len(), 2, "{cell:?}");
        assert!(cell.processes.iter().all(|p| p.decisions > 0), "{cell:?}");
        assert_eq!(cell.errors(), 0, "{cell:?}");
        if let Some(bound) = cell.bound() {
            assert!(cell.allowed() <= bound, "{cell:?}");
        }
        // Without leases every decision is a call or shares one; with them, hot keys take
        // almost none.
        assert!(cell.store_calls > 0, "{cell:?}");
        if cell.lease && cell.scenario == Scenario::Hot {
            assert!(cell.processes.iter().all(|p| p.local > 0), "{cell:?}");
            assert!(cell.calls_per_decision() < 0.05, "{cell:?}");
        }
        if cell.backend != Backend::Postgres {
            assert!(cell.store_cpu.is_some_and(|cpu| cpu > 0.0), "{cell:?}");
        }
    }
    let goals = report.goals();
    assert_eq!(goals.len(), 9, "{goals:?}");
    assert!(goals.iter().all(|g| g.met.is_some()), "{goals:?}");
    let md = std::fs::read_to_string(out.path().join("report/scale.md")).unwrap();
    assert_eq!(md, report.report().to_markdown());
    assert!(md.contains("| redis | hot | leased |"), "{md}");
    assert!(out.path().join("report/scale.svg").exists());
}
