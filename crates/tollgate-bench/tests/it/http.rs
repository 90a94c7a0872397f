//! A short run of the HTTP benchmark: every variant served requests, all of them 200 through
//! the middleware (none rejected, each with its RateLimit headers), the figures are coherent and
//! the report is written with its ratio. Nothing here is about speed.

use tollgate_bench::{HttpBenchArgs, Variant, run_http, run_http_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_measures_every_variant_without_a_rejection() {
    let out = tempfile::tempdir().unwrap();
    let args = HttpBenchArgs {
        seconds: 0.3,
        rounds: 2,
        connections: 8,
        keys: 50,
        warmup: 0.1,
        out: out.path().join("report"),
    };
    let report = run_http_with(&args, &Variant::MIDDLEWARE).await.unwrap();

    // The server's variants are left out here: `tollgate-bench http` runs them (tested in
    // `binary.rs`, and below).
    let variants = Variant::MIDDLEWARE.to_vec();
    assert_eq!(report.runs.len(), 2 * variants.len());
    assert_eq!(report.variants(), variants);
    // Alternated: each round runs every variant in turn, starting one further on each round.
    let order: Vec<(usize, Variant)> = report.runs.iter().map(|r| (r.round, r.variant)).collect();
    let n = variants.len();
    let expected: Vec<(usize, Variant)> = [1, 2]
        .into_iter()
        .flat_map(|round| (0..n).map(move |i| (round, (round - 1 + i) % n)))
        .map(|(round, i)| (round, variants[i]))
        .collect();
    assert_eq!(order, expected);
    for run in &report.runs {
        assert!(run.responses > 0, "{run:?}");
        assert_eq!(run.non_200, 0, "{run:?}");
        assert_eq!(run.errors, 0, "{run:?}");
        assert!(run.p50 <= run.p99, "{run:?}");
        assert!(!run.p99.is_zero(), "{run:?}");
        // The middleware's variants send the headers, and so does the handler that shows what
        // sending them costs.
        let expected = if run.variant != Variant::Bare {
            run.responses
        } else {
            0
        };
        assert_eq!(run.with_ratelimit, expected, "{run:?}");
        if cfg!(target_os = "linux") {
            assert!(run.cpu_per_request().is_some(), "{run:?}");
        }
    }
    for &variant in &variants {
        let s = report.summary(variant).unwrap();
        assert_eq!(s.runs, 2);
        assert!(s.requests_per_sec > 0.0, "{s:?}");
        assert!(s.p50 <= s.p99, "{s:?}");
    }
    let ratio = report.compare(Variant::Tollgate).unwrap().ratio;
    assert!(ratio > 0.0);
    let goals = report.goals();
    // tollgate, tollgate_keys, bare_headers (issue 50's: what the headers' bytes cost), and
    // every request answered: the server's goals only when it ran.
    assert_eq!(goals.len(), 4, "{goals:?}");
    assert!(
        goals[2].goal.starts_with("bare_headers: ≥ 0.98×"),
        "{goals:?}"
    );
    assert!(goals[2].met.is_some(), "{goals:?}");
    assert_eq!(goals[3].met, Some(true), "{goals:?}");

    let md = std::fs::read_to_string(out.path().join("report/http.md")).unwrap();
    assert_eq!(md, report.report().to_markdown());
    for needle in [
        "## Goals",
        "| variant | requests/s | × bare |",
        "| 2 | tollgate_keys |",
        "http.svg",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from\n{md}");
    }
    // The middleware's goals say what the headers alone reach.
    assert!(
        goals[0]
            .measured
            .contains("the headers alone (bare_headers): "),
        "{goals:?}"
    );
    // The summary row of tollgate carries its ratio to bare.
    let row = md
        .lines()
        .find(|l| l.starts_with("| tollgate | "))
        .unwrap_or_else(|| panic!("no tollgate row in\n{md}"));
    assert!(row.contains(&format!(" | {ratio:.3} | ")), "{row}");
    let svg = std::fs::read_to_string(out.path().join("report/http.svg")).unwrap();
    assert!(svg.starts_with("<svg "), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_the_keyed_variant_is_left_out() {
    let out = tempfile::tempdir().unwrap();
    let args = HttpBenchArgs {
        seconds: 0.1,
        rounds: 1,
        connections: 2,
        keys: 0,
        warmup: 0.0,
        out: out.path().to_owned(),
    };
    let report = run_http_with(&args, &Variant::MIDDLEWARE).await.unwrap();
    assert_eq!(
        report.variants(),
        [Variant::Bare, Variant::BareHeaders, Variant::Tollgate]
    );
    assert_eq!(report.goals()[1].met, None);
    assert!(out.path().join("http.md").exists());
}

/// The server on its own listener over TLS, beside the same in plaintext in the same rounds:
/// every check answered 200 over an `http/1.1` TLS session, and the report gives the ratios.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_over_tls_is_measured_beside_itself_in_plaintext() {
    let out = tempfile::tempdir().unwrap();
    let args = two_short_rounds(out.path());
    let report = run_http_with(&args, &[Variant::ServerTls, Variant::Server])
        .await
        .unwrap();
    assert_eq!(report.variants(), [Variant::Server, Variant::ServerTls]);
    let order: Vec<(usize, Variant)> = report.runs.iter().map(|r| (r.round, r.variant)).collect();
    assert_eq!(
        order,
        [
            (1, Variant::Server),
            (1, Variant::ServerTls),
            (2, Variant::ServerTls),
            (2, Variant::Server)
        ]
    );
    for run in &report.runs {
        assert!(run.responses > 0, "{run:?}");
        assert_eq!((run.non_200, run.errors), (0, 0), "{run:?}");
        assert_eq!(run.with_ratelimit, run.responses, "{run:?}");
    }
    let tls = report.tls.as_deref().unwrap();
    assert!(tls.ends_with("ALPN http/1.1"), "{tls}");
    assert!(tls.starts_with("TLSv1_3, "), "{tls}");
    let cost = report.tls_cost().unwrap();
    assert!(cost.throughput() > 0.0 && cost.p99() > 0.0, "{cost:?}");
    assert_eq!(cost.round_ratios.len(), 2);
    let md = std::fs::read_to_string(out.path().join("http.md")).unwrap();
    assert!(md.contains("## TLS / plaintext"), "{md}");
    let row = md
        .lines()
        .find(|l| l.starts_with("| server | ") && l.contains(&format!("| {:.3} |", cost.p99())))
        .unwrap_or_else(|| panic!("no TLS / plaintext row in\n{md}"));
    assert!(
        row.contains(&format!(" | {:.3} | ", cost.throughput())),
        "{row}"
    );
}

/// The server's floors in the same rounds as the server: the JSON endpoint on axum and on the
/// server's listener answer every check 200 with the RateLimit headers, and the report gives
/// the server's ratio to bare_json and bare_json's to bare, in its goal and in a table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_measured_beside_its_json_floors() {
    let out = tempfile::tempdir().unwrap();
    let args = two_short_rounds(out.path());
    let variants = [
        Variant::Bare,
        Variant::BareJson,
        Variant::BareJsonListener,
        Variant::Server,
    ];
    let report = run_http_with(&args, &variants).await.unwrap();
    assert_eq!(report.variants(), variants);
    assert_eq!(report.runs.len(), 2 * variants.len());
    for run in &report.runs {
        assert!(run.responses > 0, "{run:?}");
        assert_eq!((run.non_200, run.errors), (0, 0), "{run:?}");
        let headed = if run.variant == Variant::Bare {
            0
        } else {
            run.responses
        };
        assert_eq!(run.with_ratelimit, headed, "{run:?}");
    }
    let server = report
        .compare_to(Variant::BareJson, Variant::Server)
        .unwrap();
    assert_eq!(server.reference, Variant::BareJson);
    assert_eq!(server.round_ratios.len(), 2);
    let floor = report.compare(Variant::BareJson).unwrap();
    let listener = report
        .compare_to(Variant::BareJson, Variant::BareJsonListener)
        .unwrap();
    // The floors are held to no goal; the server's says what they reach.
    let goals = report.goals();
    let server_goal = goals
        .iter()
        .find(|g| g.goal.starts_with("server: "))
        .unwrap_or_else(|| panic!("no server goal in {goals:?}"));
    for needle in [
        format!("; server {:.3}× bare_json", server.ratio),
        format!("; bare_json {:.3}× bare", floor.ratio),
        format!("; bare_json_listener {:.3}× bare_json", listener.ratio),
    ] {
        assert!(
            server_goal.measured.contains(&needle),
            "{needle} in {goals:?}"
        );
    }
    assert!(
        !goals.iter().any(|g| g.goal.starts_with("bare_json")),
        "{goals:?}"
    );
    for goal in [
        "server: CPU per request ≤ 1.12×",
        "server: p99 ≤ the bare handler's + 100 µs",
    ] {
        assert!(
            goals
                .iter()
                .any(|g| g.goal.starts_with(goal) && g.met.is_some()),
            "{goal} in {goals:?}"
        );
    }
    assert_eq!(goals.last().unwrap().met, Some(true), "{goals:?}");
    let md = std::fs::read_to_string(out.path().join("http.md")).unwrap();
    let floors = md
        .split("## Floors: the server beside a JSON endpoint")
        .nth(1)
        .unwrap_or_else(|| panic!("no floors section in\n{md}"));
    let row = |name: &str| {
        floors
            .lines()
            .find(|l| l.starts_with(&format!("| {name} | ")))
            .unwrap_or_else(|| panic!("no {name} row in\n{floors}"))
            .split('|')
            .map(str::trim)
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    // | variant | requests/s | × bare | × bare_json | per round | CPU | CPU × | CPU added |
    let bare_json = row("bare_json");
    assert_eq!(
        [&bare_json[3], &bare_json[4], &bare_json[7]],
        [&format!("{:.3}", floor.ratio), "1", "1"]
    );
    assert_eq!(row("server")[4], format!("{:.3}", server.ratio));
    assert_eq!(
        row("bare_json_listener")[5],
        listener
            .round_ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[tokio::test]
async fn bad_arguments_are_refused() {
    for (args, name) in [
        (
            HttpBenchArgs {
                seconds: 0.0,
                ..HttpBenchArgs::default()
            },
            "--seconds",
        ),
        (
            HttpBenchArgs {
                connections: 0,
                ..HttpBenchArgs::default()
            },
            "--connections",
        ),
        (
            HttpBenchArgs {
                rounds: 0,
                ..HttpBenchArgs::default()
            },
            "--rounds",
        ),
        (
            HttpBenchArgs {
                warmup: -1.0,
                ..HttpBenchArgs::default()
            },
            "--warmup",
        ),
    ] {
        let err = run_http_with(&args, &Variant::MIDDLEWARE)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
    }
}

/// The real measurement: 3 s per run, 3 rounds, 64 connections, written to
/// `TOLLGATE_BENCH_OUT` (default: a `tollgate-bench-report` temp directory).
/// `cargo test --release -p tollgate-bench --test http full_run -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a half-minute measurement that wants the machine to itself"]
async fn full_run() {
    let args = HttpBenchArgs {
        seconds: 3.0,
        rounds: 3,
        connections: 64,
        out: std::env::var_os("TOLLGATE_BENCH_OUT")
            .map(Into::into)
            .unwrap_or_else(|| std::env::temp_dir().join("tollgate-bench-report")),
        ..HttpBenchArgs::default()
    };
    let report = run_http(&args).await.unwrap();
    println!("{}", report.report().to_markdown());
    eprintln!("written to {}", args.out.display());
    let goals = report.goals();
    assert_eq!(goals[2].met, Some(true), "{goals:?}");
}

/// Two rounds of 0.3 s on 4 connections over 20 keys, no warm-up, the report written to `out`:
/// the server's tests, which run its variants beside their references.
fn two_short_rounds(out: &std::path::Path) -> HttpBenchArgs {
    HttpBenchArgs {
        seconds: 0.3,
        rounds: 2,
        connections: 4,
        keys: 20,
        warmup: 0.0,
        out: out.to_owned(),
    }
}
