//! The real binary as Envoy's rate-limit service: a config directory of envoyproxy/ratelimit
//! YAML, driven by a gRPC client built from the Envoy v3 types. Every feature of the matching
//! and the answers, the load errors at start, reload, and bad requests.

use crate::support;

use std::process::Command;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use support::Tollgate;
use support::envoy::{ask, client, codes, descriptor, request, with_hits, write};
use tollgate::{Clock, MonotonicClock};
use tonic::Code as GrpcCode;

/// Every limit is per hour, so that no window ends while a test runs (but the one that tests
/// a window's end, per second).
const EDGE: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: remote_address
    value: 10.0.0.99
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: client
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 5}
      - key: path
        value: /login
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: client
    value: internal
  - key: file
    value: img/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: route
    value: /api/*/users
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: bucket
    value: shared-*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: plan
    value: premium
    rate_limit:
      name: premium
      unit: hour
      requests_per_unit: 100
      replaces:
        - name: standard
  - key: user
    rate_limit:
      name: standard
      unit: hour
      requests_per_unit: 1
  - key: health
    rate_limit:
      unlimited: true
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tick
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: qa
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: qb
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: qc
    rate_limit: {unit: hour, requests_per_unit: 1}
";

fn start_edge() -> (tempfile::TempDir, Tollgate) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(dir.path(), &[("edge.yaml", EDGE)]);
    let server = Tollgate::start(&[
        "--grpc-listen",
        "127.0.0.1:0",
        "--envoy-config-dir",
        dir.path().to_str().expect("a UTF-8 path"),
    ]);
    (dir, server)
}

/// The remaining of each descriptor.
fn remaining(response: &RateLimitResponse) -> Vec<u32> {
    response
        .statuses
        .iter()
        .map(|s| s.limit_remaining)
        .collect()
}

fn ok(n: usize) -> (String, Vec<String>) {
    ("OK".to_owned(), vec!["OK".to_owned(); n])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_match_and_answer_as_envoyproxy_ratelimit_does() {
    let (_dir, server) = start_edge();
    let mut c = client(server.grpc_addr()).await;
    let one = |entries: &[(&str, &str)]| request("edge", vec![descriptor(entries)]);

    // A key-only entry is the default for any value, each value counted apart.
    for left in [2, 1, 0] {
        let r = ask(&mut c, one(&[("remote_address", "1.1.1.1")])).await;
        assert_eq!((codes(&r), remaining(&r)), (ok(1), vec![left]));
        let limit = r.statuses[0].current_limit.as_ref().expect("a limit");
        assert_eq!((limit.requests_per_unit, limit.unit), (3, 3), "3 per HOUR");
    }
    let r = ask(&mut c, one(&[("remote_address", "1.1.1.1")])).await;
    assert_eq!(codes(&r), ("OVER".into(), vec!["OVER".into()]));
    let r = ask(&mut c, one(&[("remote_address", "2.2.2.2")])).await;
    assert_eq!(remaining(&r), vec![2], "another value, another counter");

    // key + value beats the key alone.
    let r = ask(&mut c, one(&[("remote_address", "10.0.0.99")])).await;
    assert_eq!((codes(&r), remaining(&r)), (ok(1), vec![0]));
    let r = ask(&mut c, one(&[("remote_address", "10.0.0.99")])).await;
    assert_eq!(codes(&r).0, "OVER");

    // Nested: the limit at the request's last entry; none above or below it.
    let r = ask(&mut c, one(&[("client", "acme"), ("path", "/x")])).await;
    assert_eq!(remaining(&r), vec![4]);
    let r = ask(&mut c, one(&[("client", "acme"), ("path", "/login")])).await;
    assert_eq!(remaining(&r), vec![1]);
    for shallow_or_deep in [
        one(&[("client", "acme")]),
        one(&[("client", "acme"), ("path", "/x"), ("extra", "1")]),
        one(&[("client", "internal")]),
        one(&[("nothing", "configured")]),
        request(
            "no-such-domain",
            vec![descriptor(&[("remote_address", "1.1.1.1")])],
        ),
    ] {
        let r = ask(&mut c, shallow_or_deep).await;
        assert_eq!(codes(&r), ok(1));
        assert!(r.statuses[0].current_limit.is_none(), "no limit: {r:?}");
    }

    // Wildcards, trailing and in the middle: each value its own counter.
    let r = ask(&mut c, one(&[("file", "img/a")])).await;
    assert_eq!(remaining(&r), vec![1]);
    let r = ask(&mut c, one(&[("file", "img/a")])).await;
    assert_eq!(remaining(&r), vec![0]);
    let r = ask(&mut c, one(&[("file", "img/b")])).await;
    assert_eq!(remaining(&r), vec![1]);
    let r = ask(&mut c, one(&[("file", "doc/a")])).await;
    assert!(r.statuses[0].current_limit.is_none());
    for route in ["/api/v1/users", "/api/v2/users"] {
        let r = ask(&mut c, one(&[("route", route)])).await;
        assert_eq!((codes(&r), remaining(&r)), (ok(1), vec![0]), "{route}");
    }
    let r = ask(&mut c, one(&[("route", "/api/v1/orders")])).await;
    assert!(r.statuses[0].current_limit.is_none());

    // share_threshold: every value the wildcard matches shares one counter.
    let r = ask(&mut c, one(&[("bucket", "shared-a")])).await;
    assert_eq!(remaining(&r), vec![1]);
    let r = ask(&mut c, one(&[("bucket", "shared-b")])).await;
    assert_eq!(remaining(&r), vec![0]);
    let r = ask(&mut c, one(&[("bucket", "shared-c")])).await;
    assert_eq!(codes(&r).0, "OVER");

    // replaces: a premium plan lifts the standard limit from the same request.
    for _ in 0..3 {
        let r = ask(
            &mut c,
            request(
                "edge",
                vec![
                    descriptor(&[("plan", "premium")]),
                    descriptor(&[("user", "bob")]),
                ],
            ),
        )
        .await;
        assert_eq!(codes(&r), ok(2));
        assert!(r.statuses[1].current_limit.is_none(), "replaced: {r:?}");
    }
    let r = ask(&mut c, one(&[("user", "carol")])).await;
    assert_eq!(codes(&r), ok(1));
    let r = ask(&mut c, one(&[("user", "carol")])).await;
    assert_eq!(codes(&r).0, "OVER", "the standard limit without the plan");

    // The request's own limit overrides the config's.
    let mut over = descriptor(&[("remote_address", "3.3.3.3")]);
    over.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 3,
    });
    let r = ask(&mut c, request("edge", vec![over.clone()])).await;
    let limit = r.statuses[0].current_limit.clone().expect("a limit");
    assert_eq!(
        (limit.requests_per_unit, limit.unit, &*limit.name),
        (1, 3, "")
    );
    assert_eq!(remaining(&r), vec![0]);
    let r = ask(&mut c, request("edge", vec![over])).await;
    assert_eq!(codes(&r).0, "OVER");

    // hits_addend: the request's counts for each descriptor; a descriptor's own 0 only looks.
    let mut two = one(&[("remote_address", "4.4.4.4")]);
    two.hits_addend = 2;
    let r = ask(&mut c, two.clone()).await;
    assert_eq!(remaining(&r), vec![1]);
    let r = ask(&mut c, two).await;
    assert_eq!(codes(&r).0, "OVER", "2 more do not fit in 1");
    for _ in 0..2 {
        let look = with_hits(descriptor(&[("remote_address", "4.4.4.4")]), 0);
        let r = ask(&mut c, request("edge", vec![look])).await;
        assert_eq!(
            (codes(&r), remaining(&r)),
            (ok(1), vec![1]),
            "a denial took nothing"
        );
    }

    // All-or-nothing: one descriptor over, the other is not charged.
    let r = ask(
        &mut c,
        request(
            "edge",
            vec![
                descriptor(&[("remote_address", "5.5.5.5")]),
                descriptor(&[("remote_address", "10.0.0.99")]),
            ],
        ),
    )
    .await;
    assert_eq!(codes(&r), ("OVER".into(), vec!["OK".into(), "OVER".into()]));
    assert_eq!(remaining(&r), vec![3, 0], "the first did not move");
    let r = ask(&mut c, one(&[("remote_address", "5.5.5.5")])).await;
    assert_eq!(remaining(&r), vec![2]);

    // Unlimited.
    let r = ask(&mut c, one(&[("health", "x")])).await;
    assert_eq!((codes(&r), remaining(&r)), (ok(1), vec![u32::MAX]));
    assert!(r.statuses[0].current_limit.is_none());

    // Shadow mode: over, but OK; and it keeps nothing else from being charged.
    let r = ask(&mut c, one(&[("trial", "t")])).await;
    assert_eq!((codes(&r), remaining(&r)), (ok(1), vec![0]));
    let r = ask(
        &mut c,
        request(
            "edge",
            vec![
                descriptor(&[("trial", "t")]),
                descriptor(&[("remote_address", "6.6.6.6")]),
            ],
        ),
    )
    .await;
    assert_eq!((codes(&r), remaining(&r)), (ok(2), vec![0, 2]));
    let r = ask(&mut c, one(&[("remote_address", "6.6.6.6")])).await;
    assert_eq!(remaining(&r), vec![1], "charged beside the shadow denial");

    // Quota mode: over only when every quota descriptor is over.
    let quotas = |a: &str, b: &str| {
        request(
            "edge",
            vec![descriptor(&[("quota_a", a)]), descriptor(&[("quota_b", b)])],
        )
    };
    assert_eq!(codes(&ask(&mut c, quotas("1", "1")).await), ok(2));
    let r = ask(&mut c, quotas("1", "1")).await;
    assert_eq!(
        codes(&r),
        ("OVER".into(), vec!["OVER".into(), "OVER".into()])
    );
    let r = ask(&mut c, quotas("2", "1")).await;
    assert_eq!(codes(&r), ("OK".into(), vec!["OK".into(), "OVER".into()]));
    let r = ask(
        &mut c,
        request("edge", vec![descriptor(&[("quota_a", "2")])]),
    )
    .await;
    assert_eq!(
        codes(&r).1,
        vec!["OVER".to_owned()],
        "quota_a=2 was charged"
    );

    // A quota descriptor in shadow mode is never over, so one other quota descriptor over
    // does not make the request over, and the rest is charged.
    let three = |c: &str| {
        request(
            "edge",
            vec![
                descriptor(&[("qa", "1")]),
                descriptor(&[("qb", "1")]),
                descriptor(&[("qc", c)]),
            ],
        )
    };
    assert_eq!(codes(&ask(&mut c, three("1")).await), ok(3));
    let r = ask(&mut c, three("2")).await;
    assert_eq!(
        codes(&r),
        ("OK".into(), vec!["OK".into(), "OVER".into(), "OK".into()])
    );
    let r = ask(&mut c, request("edge", vec![descriptor(&[("qc", "2")])])).await;
    assert_eq!(
        codes(&r).0,
        "OVER",
        "qc=2 was charged beside the quota denial"
    );

    // The same values twice, one with a stricter override: one count, the stricter limit.
    let mut strict = descriptor(&[("remote_address", "8.8.8.8")]);
    strict.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 3,
    });
    let r = ask(
        &mut c,
        request(
            "edge",
            vec![descriptor(&[("remote_address", "8.8.8.8")]), strict],
        ),
    )
    .await;
    assert_eq!(codes(&r).0, "OVER", "2 hits under a limit of 1");
    let r = ask(&mut c, one(&[("remote_address", "8.8.8.8")])).await;
    assert_eq!(remaining(&r), vec![2], "nothing was taken");

    // The metrics count by domain and descriptor key.
    let metrics = reqwest::get(format!("http://{}/metrics", server.addr))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("a body");
    for series in [
        r#"tollgate_envoy_over_limit_total{domain="edge",key="remote_address"} "#,
        r#"tollgate_envoy_total_hits_total{domain="edge",key="client_acme.path_/login"} 1"#,
        r#"tollgate_envoy_shadow_mode_total{domain="edge",key="trial"} 1"#,
        r#"tollgate_envoy_domain_not_found_total 1"#,
    ] {
        assert!(metrics.contains(series), "{series} in\n{metrics}");
    }
    support::promtool_check(&metrics);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_ends_at_the_units_boundary() {
    let (_dir, server) = start_edge();
    let mut c = client(server.grpc_addr()).await;
    let tick = || request("edge", vec![descriptor(&[("tick", "t")])]);
    // Start early in a second, so that two calls land in the same window.
    let clock = MonotonicClock::new();
    let now = || Duration::from(clock.now());
    let into_second = now().subsec_millis();
    tokio::time::sleep(Duration::from_millis(u64::from(1_020 - into_second))).await;
    let second = now().as_secs();
    assert_eq!(remaining(&ask(&mut c, tick()).await), vec![1]);
    assert_eq!(remaining(&ask(&mut c, tick()).await), vec![0]);
    let r = ask(&mut c, tick()).await;
    if now().as_secs() == second {
        assert_eq!(codes(&r).0, "OVER");
        let reset = r.statuses[0].duration_until_reset.expect("a reset");
        assert_eq!(
            (reset.seconds, reset.nanos),
            (1, 0),
            "the window ends within the second"
        );
    }
    let into_second = now().subsec_millis();
    tokio::time::sleep(Duration::from_millis(u64::from(1_020 - into_second))).await;
    let r = ask(&mut c, tick()).await;
    assert_eq!((codes(&r), remaining(&r)), (ok(1), vec![1]), "a new window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_invalid_argument_with_a_message() {
    let (_dir, server) = start_edge();
    let mut c = client(server.grpc_addr()).await;
    let mut no_unit = descriptor(&[("remote_address", "7.7.7.7")]);
    no_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 0,
    });
    let mut negative = descriptor(&[("remote_address", "7.7.7.7")]);
    negative.is_negative_hits = true;
    let cases = [
        (
            request("", vec![descriptor(&[("a", "b")])]),
            "rate limit domain must not be empty",
        ),
        (
            request("edge", vec![]),
            "rate limit descriptor list must not be empty",
        ),
        (
            request("edge", vec![descriptor(&[("a", "b"), ("", "c")])]),
            "descriptors[0].entries[1].key must not be empty",
        ),
        (
            request("edge", vec![no_unit]),
            "descriptors[0]: limit.unit must be",
        ),
        (
            request("edge", vec![negative]),
            "only the token_bucket algorithm",
        ),
        (
            request("edge", vec![descriptor(&[("a", "b")]); 65]),
            "at most 64 are accepted",
        ),
    ];
    for (bad, message) in cases {
        let status = c.should_rate_limit(bad).await.expect_err("refused");
        assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains(message),
            "{message:?} in {status:?}"
        );
    }
    // The connection goes on.
    let r = ask(
        &mut c,
        request("edge", vec![descriptor(&[("health", "x")])]),
    )
    .await;
    assert_eq!(codes(&r), ok(1));
}

/// A server with a TOML config whose `[grpc]` section is `grpc`, and `files` in its Envoy
/// directory.
fn start_configured(grpc: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, Tollgate) {
    let (dir, toml) =
        support::envoy::configured(&format!("listen = \"127.0.0.1:0\"\n{grpc}"), files);
    let server = Tollgate::start(&["--config", toml.to_str().expect("a UTF-8 path")]);
    (dir, server)
}

/// A request over one descriptor's limit charges none of them by default (all-or-nothing);
/// with `charge = "per_descriptor"`, as envoyproxy/ratelimit counts, the others are charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_descriptor_charging_charges_the_others_when_one_is_over() {
    let two = "domain: c\ndescriptors:\n  - key: one\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: ten\n    rate_limit: {unit: hour, requests_per_unit: 10}\n";
    for (charge, left_after_the_second) in [("all_or_nothing", 9), ("per_descriptor", 8)] {
        let (_dir, server) =
            start_configured(&format!("charge = \"{charge}\""), &[("c.yaml", two)]);
        let mut c = client(server.grpc_addr()).await;
        let both = || {
            request(
                "c",
                vec![descriptor(&[("one", "x")]), descriptor(&[("ten", "x")])],
            )
        };
        assert_eq!(
            remaining(&ask(&mut c, both()).await),
            vec![0, 9],
            "{charge}"
        );
        let second = ask(&mut c, both()).await;
        assert_eq!(codes(&second).0, "OVER", "{charge}");
        let ten = request("c", vec![descriptor(&[("ten", "x")])]);
        assert_eq!(
            remaining(&ask(&mut c, ten).await),
            vec![left_after_the_second - 1],
            "{charge}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bucket_domain_refills_and_takes_negative_hits_back() {
    let tb = "domain: tb\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";
    let (_dir, server) = start_configured(
        "[grpc.domains.tb]\nalgorithm = \"token_bucket\"",
        &[("tb.yaml", tb)],
    );
    let mut c = client(server.grpc_addr()).await;
    let k = || request("tb", vec![descriptor(&[("k", "v")])]);
    for left in [2, 1, 0] {
        assert_eq!(remaining(&ask(&mut c, k()).await), vec![left]);
    }
    let r = ask(&mut c, k()).await;
    assert_eq!(codes(&r).0, "OVER");
    // Until the bucket is full again: 3 tokens at one per 20 s.
    let reset = r.statuses[0].duration_until_reset.expect("a reset").seconds;
    assert!((59..=60).contains(&reset), "{reset}");
    let mut back = descriptor(&[("k", "v")]);
    back.is_negative_hits = true;
    let r = ask(&mut c, request("tb", vec![back.clone()])).await;
    assert_eq!(
        (codes(&r), remaining(&r)),
        (ok(1), vec![1]),
        "one hit given back"
    );
    assert_eq!(remaining(&ask(&mut c, k()).await), vec![0]);
    // Given back and taken in one request: the refund is of the negative hits only.
    let r = ask(&mut c, request("tb", vec![back, descriptor(&[("k", "v")])])).await;
    assert_eq!(codes(&r), ok(2));
    assert_eq!(
        codes(&ask(&mut c, k()).await).0,
        "OVER",
        "nothing more was given"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_lets_everything_through_and_headers_tell() {
    let h = "domain: h\ndescriptors:\n  - key: k\n    rate_limit: {name: per-k, unit: hour, requests_per_unit: 1}\n";
    let (_dir, server) = start_configured(
        "shadow_mode = true\nresponse_headers = true\nietf_headers = true\n\
         limit_header = \"X-RateLimit-Limit\"",
        &[("h.yaml", h)],
    );
    let mut c = client(server.grpc_addr()).await;
    let k = || request("h", vec![descriptor(&[("k", "v")])]);
    let header = |r: &RateLimitResponse, name: &str| {
        r.response_headers_to_add
            .iter()
            .find(|h| h.key == name)
            .map(|h| h.value.clone())
            .unwrap_or_else(|| panic!("no {name} in {r:?}"))
    };
    let r = ask(&mut c, k()).await;
    assert_eq!(codes(&r), ok(1));
    assert_eq!(header(&r, "X-RateLimit-Limit"), "1", "a name configured");
    assert_eq!(header(&r, "RateLimit-Remaining"), "0");
    let reset: u64 = header(&r, "RateLimit-Reset").parse().expect("seconds");
    assert!((1..=3600).contains(&reset), "{reset}");
    assert_eq!(header(&r, "RateLimit-Policy"), r#""per-k";q=1;w=3600"#);
    assert_eq!(header(&r, "RateLimit"), format!(r#""per-k";r=0;t={reset}"#));
    let r = ask(&mut c, k()).await;
    assert_eq!(
        codes(&r),
        ("OK".into(), vec!["OVER".into()]),
        "the descriptor says over; the shadow switch lets it through"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_applies_within_a_second_and_a_bad_one_is_refused() {
    let v1 =
        "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    let v2 =
        "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(dir.path(), &[("r.yaml", v1)]);
    let server = Tollgate::start(&[
        "--grpc-listen",
        "127.0.0.1:0",
        "--envoy-config-dir",
        dir.path().to_str().expect("a UTF-8 path"),
    ]);
    let mut c = client(server.grpc_addr()).await;
    let clock = MonotonicClock::new();
    let k = || request("r", vec![descriptor(&[("k", "v")])]);
    let limit = |r: &RateLimitResponse| {
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    assert_eq!(limit(&ask(&mut c, k()).await), Some(1));

    write(dir.path(), &[("r.yaml", v2)]);
    let deadline = Duration::from(clock.now()) + Duration::from_secs(3);
    let applied_after = loop {
        let r = ask(
            &mut c,
            request("r", vec![with_hits(descriptor(&[("k", "v")]), 0)]),
        )
        .await;
        if limit(&r) == Some(5) {
            // The bucket carried over: 1 of 5 was spent under the old numbers.
            assert_eq!(remaining(&r), vec![4]);
            break Duration::from(clock.now());
        }
        assert!(
            Duration::from(clock.now()) < deadline,
            "the edit never applied"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(applied_after <= deadline);

    write(
        dir.path(),
        &[(
            "r.yaml",
            "domain: r\ndescriptors:\n  - key: k\n    ratelimit: {}\n",
        )],
    );
    let url = format!("http://{}", server.addr);
    let deadline = Duration::from(clock.now()) + Duration::from_secs(3);
    loop {
        let metrics = reqwest::get(format!("{url}/metrics"))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        if metrics.contains("tollgate_envoy_config_loads_total{result=\"failure\"} 1") {
            break;
        }
        assert!(
            Duration::from(clock.now()) < deadline,
            "the bad edit was never refused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        limit(&ask(&mut c, k()).await),
        Some(5),
        "the running config stays"
    );
    let dump = reqwest::get(format!("{url}/rlconfig"))
        .await
        .expect("rlconfig")
        .text()
        .await
        .expect("text");
    assert_eq!(
        dump,
        "r.k: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false\n"
    );
    let json = reqwest::Client::new()
        .post(format!("{url}/json"))
        .body(r#"{"domain": "r", "descriptors": [{"entries": [{"key": "k", "value": "v"}], "hitsAddend": "0"}]}"#)
        .send()
        .await
        .expect("POST /json");
    assert_eq!(json.status(), reqwest::StatusCode::OK);
    let body: serde_json::Value =
        serde_json::from_slice(&json.bytes().await.expect("a body")).expect("JSON");
    assert_eq!(body["overallCode"], "OK");
    assert_eq!(body["statuses"][0]["currentLimit"]["unit"], "HOUR");
    assert_eq!(body["statuses"][0]["limitRemaining"], 3);
}

/// `tollgate <args>` run to its end: whether it succeeded, and its stderr.
fn run_to_exit(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"])
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A server that answers from an Envoy config directory says so when it starts: the directory,
/// its domains and limits (not only "0 named policies").
#[test]
fn the_start_line_names_the_envoy_directory_and_what_it_holds() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let one = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    write(dir.path(), &[("d.yaml", one)]);
    let path = dir.path().to_str().expect("a UTF-8 path");
    let server = Tollgate::start(&["--grpc-listen", "127.0.0.1:0", "--envoy-config-dir", path]);
    assert!(
        server
            .banner
            .contains(&format!("Envoy config {path}: 1 domain, 2 limits")),
        "{}",
        server.banner
    );
}

#[test]
fn a_bad_file_or_a_domain_twice_stops_the_server_naming_the_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(
        dir.path(),
        &[("bad.yaml", "domain: d\ndescriptors:\n  - value: v\n")],
    );
    let path = dir.path().to_str().expect("a UTF-8 path");
    let (ok, stderr) = run_to_exit(&["--envoy-config-dir", path]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!("{path}/bad.yaml: descriptor has empty key")),
        "{stderr}"
    );

    let one = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let other = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(dir.path(), &[("a.yaml", one), ("b.yaml", other)]);
    let path = dir.path().to_str().expect("a UTF-8 path");
    let (ok, stderr) = run_to_exit(&["--envoy-config-dir", path]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{path}/b.yaml: duplicate domain 'd' in config file"
        )),
        "{stderr}"
    );
    let merged = Tollgate::start(&[
        "--grpc-listen",
        "127.0.0.1:0",
        "--envoy-config-dir",
        path,
        "--envoy-merge-domain-config",
    ]);
    assert!(merged.banner.contains("grpc://"), "{}", merged.banner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_service_answers_serving() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let (_dir, server) = start_edge();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr()))
        .expect("an endpoint")
        .connect()
        .await
        .expect("connect");
    let mut health = HealthClient::new(channel);
    for service in [
        "",
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        let answer = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("a health answer")
            .into_inner();
        assert_eq!(answer.status, 1, "{service:?} is SERVING");
    }
}

/// A gRPC client that sends calls and never reads their answers (over raw HTTP/2) holds no more
/// of the server than its connection's flow-control windows and stream limit allow: the
/// server's memory stays put, and other clients are answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_that_never_reads_holds_no_more_than_its_connection() {
    use prost::Message;
    let (_dir, server) = start_edge();
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
            .expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
    };
    let mut c = client(server.grpc_addr()).await;
    ask(
        &mut c,
        request("edge", vec![descriptor(&[("health", "x")])]),
    )
    .await;
    let before = rss();

    let tcp = tokio::net::TcpStream::connect(server.grpc_addr())
        .await
        .expect("connect");
    let (h2, connection) = h2::client::handshake(tcp)
        .await
        .expect("an HTTP/2 handshake");
    tokio::spawn(connection);
    // One call, framed as gRPC frames it: a flag byte, the length, the message.
    let message = request("edge", vec![descriptor(&[("health", "x")])]).encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    let frame = bytes::Bytes::from(frame);
    let (mut unread, mut refused, mut stopped) = (Vec::new(), 0usize, false);
    let clock = MonotonicClock::new();
    let deadline = clock.now() + tollgate::Nanos::new(2_000_000_000);
    while clock.now() < deadline && unread.len() + refused < 20_000 {
        let ready = tokio::time::timeout(Duration::from_millis(200), h2.clone().ready()).await;
        let Ok(Ok(mut sender)) = ready else {
            stopped = true; // the connection takes no more calls
            break;
        };
        let call = axum::http::Request::post(format!(
            "http://{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            server.grpc_addr()
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a request");
        let Ok((answer, mut body)) = sender.send_request(call, false) else {
            stopped = true;
            break;
        };
        // Past the server's limit of streams its answers cannot leave (the client's window
        // is full), new streams are refused.
        match body.send_data(frame.clone(), true) {
            Ok(()) => unread.push(answer),
            Err(_) => refused += 1,
        }
    }
    // Meanwhile, another client is answered.
    let r = ask(
        &mut c,
        request("edge", vec![descriptor(&[("health", "y")])]),
    )
    .await;
    assert_eq!(codes(&r), ok(1));
    let after = rss();
    eprintln!(
        "{} calls sent and never read, {refused} refused; server RSS {before} KiB before, \
         {after} KiB after",
        unread.len()
    );
    assert!(!unread.is_empty());
    assert!(
        stopped || refused > 0,
        "the server kept taking calls it could not answer"
    );
    assert!(
        after.saturating_sub(before) < 8 * 1024,
        "the server grew {} KiB",
        after - before
    );
}
