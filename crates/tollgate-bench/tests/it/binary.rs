//! The `tollgate-bench` binary as a user runs it: each benchmark that needs the server's
//! library (servers started in its process), `all --quick` on the throwaway servers it starts
//! itself, its `--help`, and bad arguments refused naming the option.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs the binary to its exit (killing it after 10 s: a refused argument must not leave a
/// benchmark running); returns its exit code, stdout and stderr (short: the pipes are read at
/// the end).
fn run(args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-bench"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if waited >= Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("`tollgate-bench {}` still runs after 10 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
        waited += Duration::from_millis(20);
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let read = |pipe: &mut dyn Read, into: &mut String| pipe.read_to_string(into).unwrap();
    read(child.stdout.as_mut().unwrap(), &mut stdout);
    read(child.stderr.as_mut().unwrap(), &mut stderr);
    (status.code().unwrap_or(-1), stdout, stderr)
}

/// `--help` lists every benchmark, each with its line.
#[test]
fn help_lists_every_benchmark() {
    let (code, help, stderr) = run(&["--help"]);
    assert_eq!(code, 0, "{stderr}");
    for name in [
        "memory", "redis", "postgres", "http", "resp", "grpc", "soak", "tail", "all",
    ] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{name} "))),
            "{name} in {help}"
        );
    }
}

#[test]
fn bad_arguments_are_refused_naming_the_option() {
    let (code, _, stderr) = run(&["redis", "--concurrency", "many"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--concurrency"), "{stderr}");
    // Checked before anything connects: port 1 is never asked.
    let (code, _, stderr) = run(&["redis", "--redis", "redis://127.0.0.1:1", "--seconds", "0"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--seconds"), "{stderr}");
}

/// `tollgate-bench <args> --out DIR` run to its end: the report (stdout), stderr and the
/// output directory; fails the test when the run fails.
fn bench(args: &[&str]) -> (String, String, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_tollgate-bench"))
        .args(args)
        .arg("--out")
        .arg(out.path())
        .env_remove("TOLLGATE_REDIS_CELL")
        .env_remove("TOLLGATE_THROTTLECRAB")
        .output()
        .unwrap();
    let report = String::from_utf8(run.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{report}{stderr}");
    (report, stderr, out)
}

/// `memory --quick` runs one benchmark cut short, as `all --quick` runs it.
#[test]
fn one_benchmark_runs_quick() {
    let (report, _, out) = bench(&["memory", "--quick"]);
    assert!(report.contains("governor"), "{report}");
    assert!(out.path().join("memory.md").exists());
}

/// `all --only memory` starts no store it does not need: with no `redis-server` or PostgreSQL
/// to be found, it still runs, and its index says the stores were not used.
#[test]
fn all_only_memory_starts_no_store() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_tollgate-bench"))
        .args(["all", "--quick", "--only", "memory", "--out"])
        .arg(out.path())
        .env("PATH", "/nonexistent")
        .env_remove("TOLLGATE_REDIS_URL")
        .env_remove("TOLLGATE_DATABASE_URL")
        .env_remove("TOLLGATE_REDIS_CLUSTER_URLS")
        .output()
        .unwrap();
    let index = String::from_utf8(run.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{index}{stderr}");
    assert!(index.contains("[memory](memory.md)"), "{index}");
    assert!(index.contains("| Redis | not used |"), "{index}");
    assert!(index.contains("| PostgreSQL | not used |"), "{index}");
}

/// `all --quick --only X` starts every store X takes and no other, and X runs on them: `scale`
/// (one Redis, a Redis Cluster and PostgreSQL) and `grpc` (Redis only). Every other X is held to
/// the same by the unit test of what `all` starts (`all::stores`), which costs no run.
#[test]
fn all_only_starts_the_stores_the_benchmark_takes() {
    let (index, stderr, out) = bench(&["all", "--quick", "--only", "scale"]);
    assert!(index.contains("[scale](scale.md)"), "{index}{stderr}");
    assert!(out.path().join("scale.md").exists());
    assert!(index.contains("| Redis | 7"), "{index}");
    assert!(index.contains("| PostgreSQL | 1"), "{index}");
    assert!(!index.contains("**failed**"), "{index}");

    let (index, stderr, out) = bench(&["all", "--quick", "--only", "grpc"]);
    assert!(index.contains("[grpc](grpc.md)"), "{index}{stderr}");
    assert!(index.contains("| Redis | 7"), "{index}");
    assert!(index.contains("| PostgreSQL | not used |"), "{index}");
    // Given the Redis `all` started, the benchmark measured it.
    let report = std::fs::read_to_string(out.path().join("grpc.md")).unwrap();
    assert!(!report.contains("| redis | not measured"), "{report}");
    assert!(!stderr.contains("NOT MEASURED redis"), "{stderr}");
}

/// `tollgate-bench http` measures the server's own router beside the middleware: every check
/// by name answered 200 with the RateLimit headers.
#[test]
fn http_measures_the_server_variant() {
    let (report, _, out) = bench(&[
        "http",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
        "--connections",
        "4",
        "--keys",
        "20",
        "--warmup",
        "0",
    ]);
    let row = report
        .lines()
        .find(|l| l.starts_with("| server |"))
        .unwrap_or_else(|| panic!("no server row in\n{report}"));
    // | variant | requests/s | × bare | × bare per round | p50 | p99 | p50+ | p99+ | CPU | CPU+ |
    // responses | non-200 | errors |
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(&cells[12..14], ["0", "0"], "{row}");
    assert!(
        report.contains("server: ≥ 0.85× the bare handler"),
        "{report}"
    );
    // The same server over TLS, with its ratio to plaintext.
    let tls = report
        .lines()
        .find(|l| l.starts_with("| server_tls |"))
        .unwrap_or_else(|| panic!("no server_tls row in\n{report}"));
    let cells: Vec<&str> = tls.split('|').map(str::trim).collect();
    assert_eq!(&cells[12..14], ["0", "0"], "{tls}");
    assert!(report.contains("## TLS / plaintext"), "{report}");
    // And beside its floors, the JSON endpoint on axum and on the server's listener.
    for floor in ["bare_json", "bare_json_listener"] {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| {floor} |")))
            .unwrap_or_else(|| panic!("no {floor} row in\n{report}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(&cells[12..14], ["0", "0"], "{row}");
    }
    assert!(
        report.contains("## Floors: the server beside a JSON endpoint"),
        "{report}"
    );
    assert!(
        report.contains("; server ") && report.contains("× bare_json"),
        "{report}"
    );
    assert!(out.path().join("http.md").exists());
}

/// `tollgate-bench resp` without its peers measures tollgate and says, loudly, which peers are
/// missing and why: their goals are not measured, never silently met.
#[test]
fn resp_reports_missing_peers_loudly() {
    let (report, stderr, out) = bench(&[
        "resp",
        "--requests",
        "2000",
        "--rounds",
        "1",
        "--clients",
        "4",
        "--pipelines",
        "1,4",
    ]);
    assert!(stderr.contains("MISSING redis-cell"), "{stderr}");
    assert!(stderr.contains("MISSING throttlecrab"), "{stderr}");
    assert!(report.contains("| tollgate | 4 |"), "{report}");
    assert!(report.contains("redis-cell MISSING"), "{report}");
    assert!(report.contains("| not measured |"), "{report}");
    assert!(out.path().join("resp.svg").exists());
}

/// `tollgate-bench grpc` drives Envoy's `ShouldRateLimit` on the memory store (and on Redis
/// when given one), every call allowed; without a Redis, says so.
#[test]
fn grpc_measures_should_rate_limit() {
    let (report, stderr, out) = bench(&[
        "grpc",
        "--seconds",
        "1",
        "--rounds",
        "1",
        "--concurrency",
        "4",
    ]);
    assert!(stderr.contains("NOT MEASURED redis"), "{stderr}");
    assert!(report.contains("| redis | not measured"), "{report}");
    // Every call of the run was answered, and allowed.
    let row = report
        .lines()
        .find(|l| l.starts_with("| 1 | memory |"))
        .unwrap_or_else(|| panic!("a memory run in {report}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let (allowed, errors): (u64, u64) = (cells[6].parse().unwrap(), cells[7].parse().unwrap());
    assert!(allowed > 0 && errors == 0, "{row}");
    // The memory store over TLS too (h2 by ALPN), every call allowed, and the ratio.
    let row = report
        .lines()
        .find(|l| l.starts_with("| 1 | memory over TLS |"))
        .unwrap_or_else(|| panic!("a TLS run in {report}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let (allowed, errors): (u64, u64) = (cells[6].parse().unwrap(), cells[7].parse().unwrap());
    assert!(allowed > 0 && errors == 0, "{row}");
    assert!(report.contains("## TLS / plaintext"), "{report}");
    assert!(report.contains("ALPN h2"), "{report}");
    assert!(report.contains("| memory | "), "{report}");
    assert!(out.path().join("grpc.svg").exists());
}

/// `tollgate-bench soak` runs on a Redis with a fault each period, and reports each period and
/// what the process held before and after.
#[test]
fn soak_reports_each_period_and_what_was_held() {
    let redis = tollgate_testkit::TestRedis::start().expect("start redis-server");
    let (report, _, out) = bench(&[
        "soak",
        "--redis",
        redis.url(),
        "--seconds",
        "3",
        "--period",
        "1",
        "--rate",
        "200",
    ]);
    for fault in [
        "CLIENT KILL TYPE normal",
        "CLIENT PAUSE 300 ALL",
        "SCRIPT FLUSH",
    ] {
        assert!(
            report.contains(&format!("`{fault}`")),
            "{fault} in {report}"
        );
    }
    assert!(report.contains("| open file descriptors |"), "{report}");
    // Every period made its calls (200 a second), answered or failed, none lost.
    let calls: Vec<u64> = report
        .lines()
        .filter(|l| l.starts_with("| 1 |") || l.starts_with("| 2 |") || l.starts_with("| 3 |"))
        .map(|l| l.split('|').nth(3).unwrap().trim().parse().unwrap())
        .collect();
    assert_eq!(calls.len(), 3, "{report}");
    assert!(calls.iter().all(|&c| c >= 150), "{calls:?}");
    assert!(out.path().join("soak.md").exists());
}

/// `tollgate-bench all --quick` runs every benchmark on throwaway servers it starts itself,
/// and writes an index that describes the machine, links every report and judges every goal.
#[test]
fn all_quick_runs_every_benchmark_and_indexes_them() {
    let (index, stderr, out) = bench(&["all", "--quick"]);
    assert!(index.contains("**A quick run**"), "{index}");
    for name in [
        "memory", "redis", "postgres", "http", "resp", "grpc", "soak", "tail", "scale",
    ] {
        assert!(
            index.contains(&format!("[{name}]({name}.md)")),
            "{name} in {index}"
        );
        assert!(out.path().join(format!("{name}.md")).exists(), "{name}.md");
        assert!(
            stderr.contains(&format!("] {name}")),
            "{name}'s progress in {stderr}"
        );
    }
    for row in [
        "| CPU |",
        "| memory |",
        "| Redis | 7",
        "| PostgreSQL | 1",
        "| the run took |",
    ] {
        assert!(index.contains(row), "{row} in {index}");
    }
    // Every goal of every report is judged, each one way or the other.
    let goals: Vec<&str> = index.lines().filter(|l| l.starts_with("| **")).collect();
    assert!(goals.len() > 20, "{index}");
    for goal in &goals {
        assert!(
            goal.ends_with("| yes |")
                || goal.ends_with("| **no** |")
                || goal.ends_with("| not measured |"),
            "{goal}"
        );
    }
    assert!(
        index.contains(&format!("{} goals: ", goals.len())),
        "{index}"
    );
    assert!(!index.contains("**failed**"), "{index}");
    let written = std::fs::read_to_string(out.path().join("index.md")).unwrap();
    assert!(
        index.starts_with(&written),
        "stdout starts with the index written"
    );
}

/// `tollgate-bench grpc` measures tracing on, sampled at 1 and at 0.01, against off in the
/// same run, every call answered.
#[test]
fn grpc_reports_what_tracing_costs() {
    let (report, stderr, _out) =
        bench(&["grpc", "--seconds", "1", "--rounds", "1", "--keys", "20"]);
    assert!(report.contains("## Tracing on / off"), "{report}{stderr}");
    for rate in ["1", "0.01"] {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| memory traced at {rate} |")))
            .unwrap_or_else(|| panic!("no run traced at {rate} in\n{report}"));
        assert!(row.ends_with("| 0 |"), "errors: {row}");
        assert!(
            report
                .lines()
                .any(|l| l.starts_with(&format!("| {rate} | "))),
            "no ratio of {rate} in\n{report}"
        );
    }
}
