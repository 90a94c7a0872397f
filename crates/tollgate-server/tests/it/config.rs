//! The configured server, run as a black box: the config file, its errors, live reload, named
//! checks, shadow mode and the metrics.

use crate::support;

use std::path::Path;
use std::process::Command;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use support::{MINIMAL, Tollgate, check, config_check, get, metric, write};

#[tokio::test]
async fn the_minimal_file_works_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "tollgate.toml", MINIMAL);
    // The harness's `--listen 127.0.0.1:0` is a flag given: it overrides the file's address.
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    assert!(
        server.banner.contains("1 named policy"),
        "{}",
        server.banner
    );
    let client = Client::new();
    for i in 0..10 {
        let (status, body) =
            check(&client, &server, json!({"policy": "api", "key": "alice"})).await;
        assert_eq!(status, StatusCode::OK, "{i}: {body}");
        assert_eq!(body["policy"], "api");
    }
    let (status, body) = check(&client, &server, json!({"policy": "api", "key": "alice"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["remaining"], 0);
}

#[tokio::test]
async fn the_environment_names_the_file_and_only_flags_given_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{MINIMAL}\n");
    let text = text.replace("url = \"memory\"", "url = \"memory\"\non_error = \"deny\"");
    let file = write(dir.path(), "tollgate.toml", &text);
    let server = Tollgate::start_with_env(&[], &[("TOLLGATE_CONFIG", file.to_str().unwrap())]);
    assert!(
        server.banner.contains("on store error: deny"),
        "{}",
        server.banner
    );
    let server = Tollgate::start(&[
        "--config",
        file.to_str().unwrap(),
        "--on-store-error",
        "local",
    ]);
    assert!(
        server.banner.contains("on store error: local"),
        "{}",
        server.banner
    );
}

#[test]
fn config_check_prints_the_policies_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{MINIMAL}\n[policies.login]\nalgorithm = \"sliding_counter\"\ncapacity = 5\nperiod = \"1m\"\nshadow = true\n\n[policies.all]\ncapacity = 100000\nperiod = \"1s\"\nlease = true\n"
    );
    let file = write(dir.path(), "tollgate.toml", &text);
    let (ok, out, err) = config_check(&file);
    assert!(ok, "{err}");
    assert!(out.contains("ok, 3 policies"), "{out}");
    assert!(
        out.contains("all: token_bucket, capacity 100000, refill 100000 every 1s, leased"),
        "{out}"
    );
    assert!(
        out.contains("api: token_bucket, capacity 10, refill 10 every 1s"),
        "{out}"
    );
    assert!(
        out.contains("login: sliding_counter, capacity 5, window 1m, shadow"),
        "{out}"
    );
}

#[test]
fn every_class_of_bad_file_names_its_line_column_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let policy = |body: &str| format!("[store]\nurl = \"memory\"\n\n[policies.api]\n{body}\n");
    let cases = [
        // (what, file, expected error after the file's name)
        (
            "syntax",
            "[store\nurl = \"memory\"\n".to_owned(),
            ":1:7: ",
        ),
        (
            "unknown key",
            policy("capacity = 10\nperiod = \"1s\"\ncapacty = 3"),
            ":7:1: policies.api.capacty: unknown field `capacty`",
        ),
        (
            "unknown section",
            "[stor]\nurl = \"memory\"\n".to_owned(),
            ":1:2: stor: unknown field `stor`",
        ),
        (
            "wrong type",
            policy("capacity = \"ten\"\nperiod = \"1s\""),
            ":5:12: policies.api.capacity: invalid type: string \"ten\", expected u64",
        ),
        (
            "out of range",
            policy("capacity = 0\nperiod = \"1s\""),
            ":5:12: policies.api.capacity: must be at least 1, got 0",
        ),
        (
            "negative",
            policy("capacity = -1\nperiod = \"1s\""),
            ":5:12: policies.api.capacity: invalid value: integer `-1`, expected u64",
        ),
        (
            "unknown algorithm",
            policy("capacity = 10\nperiod = \"1s\"\nalgorithm = \"leaky_bucket\""),
            ":7:13: policies.api.algorithm: unknown variant `leaky_bucket`, expected one of `token_bucket`, `fixed_window`, `sliding_log`, `sliding_counter`",
        ),
        (
            "lease on a window",
            policy("capacity = 10\nperiod = \"1s\"\nalgorithm = \"fixed_window\"\nlease = true"),
            ":8:9: policies.api.lease: only a token bucket can be leased",
        ),
        (
            "bad duration",
            policy("capacity = 10\nperiod = \"1 fortnight\""),
            ":6:10: policies.api.period: \"1 fortnight\" is not a duration",
        ),
        (
            "missing key",
            policy("capacity = 10"),
            ":4:1: policies.api: missing field `period`",
        ),
        (
            "refill on a window",
            policy("algorithm = \"fixed_window\"\ncapacity = 10\nrefill = 5\nperiod = \"1s\""),
            ":7:10: policies.api.refill: a window policy has no refill",
        ),
        (
            "bad store",
            "[store]\nurl = \"mysql://db\"\n".to_owned(),
            ":2:7: store.url: ",
        ),
        (
            "bad name",
            "[policies.\"a b\"]\ncapacity = 1\nperiod = \"1s\"\n".to_owned(),
            ":1:1: policies.a b: ' ' in the name",
        ),
        (
            "a reserved name",
            "[policies.throttle]\ncapacity = 1\nperiod = \"1s\"\n".to_owned(),
            ":1:1: policies.throttle: \"throttle\" names the buckets of limits clients choose",
        ),
        (
            "a store's range",
            "[store]\nurl = \"redis://127.0.0.1:1\"\n[policies.api]\nalgorithm = \"sliding_counter\"\ncapacity = 100000000\nperiod = \"1d\"\n".to_owned(),
            ":3:1: policies.api.capacity: the store (redis at redis://127.0.0.1:1) cannot decide it",
        ),
        (
            "a wait for replicas without its timeout",
            "[store]\nurl = \"redis://127.0.0.1:1\"\nwait_replicas = 1\n".to_owned(),
            ":3:17: store.wait_replicas: needs store.wait_timeout_ms",
        ),
        (
            "a wait for replicas not below the store timeout",
            "[store]\nurl = \"redis://127.0.0.1:1\"\ntimeout = \"50ms\"\nwait_replicas = 1\nwait_timeout_ms = 50\n".to_owned(),
            ":5:19: store.wait_timeout_ms: 50 ms is not below store.timeout (50ms)",
        ),
        (
            "no replica to wait for",
            "[store]\nurl = \"redis://127.0.0.1:1\"\nwait_replicas = 0\nwait_timeout_ms = 10\n".to_owned(),
            ":3:17: store.wait_replicas: must be at least 1, got 0",
        ),
    ];
    for (what, text, expected) in cases {
        let file = write(dir.path(), "bad.toml", &text);
        let (ok, out, err) = config_check(&file);
        assert!(!ok, "{what}: accepted\n{out}");
        let expected = format!("{}{expected}", file.display());
        assert!(
            err.starts_with(&expected),
            "{what}:\n  {err}  does not start with\n  {expected}"
        );
        // A server never starts on it, and says the same.
        let status = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(!status.status.success(), "{what}: the server started");
        let said = String::from_utf8(status.stderr).unwrap();
        assert!(said.contains(&expected), "{what}: {said}");
    }
}

#[tokio::test]
async fn named_checks_unknown_names_and_refused_inline_policies() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{MINIMAL}inline_policies = false\n[policies.hourly]\ncapacity = 3\nperiod = \"1h\"\n"
    )
    .replace("[http]\nlisten = \"127.0.0.1:8080\"\n", "");
    let text = text.replace("inline_policies = false\n", "") + "[http]\ninline_policies = false\n";
    let file = write(dir.path(), "tollgate.toml", &text);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();

    let (status, body) = check(&client, &server, json!({"policy": "nope", "key": "a"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["field"], "policy", "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("configured: api, hourly"),
        "{body}"
    );

    let inline = json!({"key": "a", "capacity": 5, "refill": 5, "period_ms": 1000});
    let (status, body) = check(&client, &server, inline).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["field"], "policy");

    // All or nothing: the hourly bucket binds after 3, and the per-second one is not charged
    // for the denied fourth.
    let both = json!({"policies": ["api", "hourly"], "key": "b"});
    for _ in 0..3 {
        let (status, body) = check(&client, &server, both.clone()).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = check(&client, &server, both.clone()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(
        body["policy"], "hourly",
        "the most restrictive is shown: {body}"
    );
    assert_eq!(body["policies"][0]["policy"], "api");
    assert_eq!(body["policies"][1]["allowed"], false);
    let (_, api) = check(
        &client,
        &server,
        json!({"policy": "api", "key": "b", "cost": 0}),
    )
    .await;
    assert_eq!(api["remaining"], 7, "{api}");

    let listed: Value = serde_json::from_str(&get(&client, &server, "/v1/policies").await).unwrap();
    assert_eq!(
        listed,
        json!({"inline_policies": false, "policies": [
            {"name": "api", "algorithm": "token_bucket", "capacity": 10, "refill": 10, "period_ms": 1000, "shadow": false},
            {"name": "hourly", "algorithm": "token_bucket", "capacity": 3, "refill": 3, "period_ms": 3600000, "shadow": false},
        ]})
    );
}

#[tokio::test]
async fn shadow_mode_never_denies_and_counts_what_it_would_have_denied() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{MINIMAL}\n[policies.new]\ncapacity = 2\nperiod = \"1h\"\nshadow = true\n");
    let file = write(dir.path(), "tollgate.toml", &text);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    for i in 0..5 {
        let (status, body) = check(&client, &server, json!({"policy": "new", "key": "a"})).await;
        assert_eq!(status, StatusCode::OK, "{i}: {body}");
        assert_eq!(body.get("shadow_denied").is_some(), i >= 2, "{i}: {body}");
    }
    // Beside an enforced policy, the shadow does not change what it decides: the enforced
    // bucket is charged each time, as if the shadow were not there.
    for i in 0..4 {
        let both = json!({"policies": ["api", "new"], "key": "b"});
        let (status, body) = check(&client, &server, both).await;
        assert_eq!(status, StatusCode::OK, "{i}: {body}");
        assert_eq!(body["policies"][0]["remaining"], 9 - i, "{i}: {body}");
        assert_eq!(body.get("shadow_denied").is_some(), i >= 2, "{i}: {body}");
    }
    let metrics = get(&client, &server, "/metrics").await;
    let series = |policy: &str, outcome: &str| {
        metric(
            &metrics,
            &format!("tollgate_decisions_total{{outcome=\"{outcome}\",policy=\"{policy}\"}}"),
        )
    };
    assert_eq!(series("new", "allowed"), 4.0);
    assert_eq!(series("new", "shadow_denied"), 5.0);
    assert_eq!(series("new", "denied"), 0.0);
    assert_eq!(series("api", "allowed"), 4.0);
}

/// Shadow policies beside an enforced one, one of them denying: the enforced policy is decided
/// again on its own, in a second store call and no more, and a shadow that allowed is not
/// charged by it (it was charged in the first call or not at all, as were it alone).
#[tokio::test]
async fn a_shadow_that_allows_is_not_charged_again_when_another_shadow_denies() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{MINIMAL}\n[policies.tiny]\ncapacity = 1\nperiod = \"1h\"\nshadow = true\n\
         [policies.big]\ncapacity = 100\nperiod = \"1h\"\nshadow = true\n"
    );
    let file = write(dir.path(), "tollgate.toml", &text);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    let calls = |metrics: &str| metric(metrics, "tollgate_store_call_duration_seconds_count");
    let before = calls(&get(&client, &server, "/metrics").await);
    for i in 0..3 {
        let all = json!({"policies": ["api", "tiny", "big"], "key": "c"});
        let (status, body) = check(&client, &server, all).await;
        assert_eq!(status, StatusCode::OK, "{i}: {body}");
        assert_eq!(body["policies"][0]["remaining"], 9 - i, "{i}: {body}");
        assert_eq!(body["policies"][2]["remaining"], 99, "{i}: {body}");
    }
    // One call for the first check, which every policy allowed; two for each of the others.
    let after = calls(&get(&client, &server, "/metrics").await);
    assert_eq!(after - before, 5.0);
    let (_, bucket) = check_bucket(&client, &server, "big", "c").await;
    assert_eq!(bucket["remaining"], 99, "{bucket}");
}

/// A shadow policy is invisible to clients: beside an enforced policy, the top-level fields and
/// the RateLimit headers are the enforced policy's, even where the shadow has less left or
/// would deny; alone, it answers allowed with no wait and no RateLimit headers. Its own entry
/// under `"policies"` says what it would have done.
#[tokio::test]
async fn a_shadow_policy_never_shapes_the_top_level_fields_nor_the_headers() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        format!("{MINIMAL}\n[policies.tiny]\ncapacity = 1\nperiod = \"1h\"\nshadow = true\n");
    let file = write(dir.path(), "tollgate.toml", &text);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    for i in 0..2 {
        let both = json!({"policies": ["api", "tiny"], "key": "dave"});
        let (status, headers, body) = post_check(&client, &server, both).await;
        assert_eq!(status, StatusCode::OK, "{i}: {body}");
        assert_eq!(
            header(&headers, "ratelimit-policy"),
            "\"api\";q=10;w=1",
            "{i}"
        );
        assert!(header(&headers, "ratelimit").starts_with("\"api\";"), "{i}");
        assert_eq!(body["policy"], "api", "{i}: {body}");
        assert_eq!(body["remaining"], 9 - i, "{i}: {body}");
        assert_eq!(body["retry_after_ms"], 0, "{i}: {body}");
        assert_eq!(body["policies"][1]["allowed"], i == 0, "{i}: {body}");
    }
    for i in 0..2 {
        let alone = json!({"policy": "tiny", "key": "erin"});
        let (status, headers, body) = post_check(&client, &server, alone).await;
        assert_eq!(status, StatusCode::OK, "{i}: {body}");
        assert_eq!(body["allowed"], true, "{i}: {body}");
        assert_eq!(body["retry_after_ms"], 0, "{i}: {body}");
        assert!(headers.get("ratelimit").is_none(), "{i}: {headers:?}");
        assert!(
            headers.get("ratelimit-policy").is_none(),
            "{i}: {headers:?}"
        );
        assert!(headers.get("retry-after").is_none(), "{i}: {headers:?}");
        assert_eq!(body.get("shadow_denied").is_some(), i == 1, "{i}: {body}");
    }
}

/// `POST /v1/check` with `body`: its status, headers and body.
async fn post_check(
    client: &Client,
    server: &Tollgate,
    body: Value,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let response = client
        .post(format!("http://{}/v1/check", server.addr))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let body = response.text().await.unwrap();
    (status, headers, serde_json::from_str(&body).unwrap())
}

/// The text of header `name`, or empty.
fn header<'h>(headers: &'h reqwest::header::HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// `GET /v1/buckets/{policy}/{key}`: its status and body.
async fn check_bucket(
    client: &Client,
    server: &Tollgate,
    policy: &str,
    key: &str,
) -> (StatusCode, Value) {
    let response = client
        .get(format!("http://{}/v1/buckets/{policy}/{key}", server.addr))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    (status, serde_json::from_str(&body).unwrap())
}

#[tokio::test]
async fn metrics_pass_promtool_and_count_the_decisions_made() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "tollgate.toml", MINIMAL);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    for _ in 0..12 {
        check(&client, &server, json!({"policy": "api", "key": "m"})).await;
    }
    check(
        &client,
        &server,
        json!({"key": "m", "capacity": 1, "refill": 1, "period_ms": 1000}),
    )
    .await;
    let text = get(&client, &server, "/metrics").await;
    let series = |s: &str| metric(&text, s);
    assert_eq!(
        series("tollgate_decisions_total{outcome=\"allowed\",policy=\"api\"}"),
        10.0
    );
    assert_eq!(
        series("tollgate_decisions_total{outcome=\"denied\",policy=\"api\"}"),
        2.0
    );
    assert_eq!(
        series("tollgate_decisions_total{outcome=\"allowed\",policy=\"inline\"}"),
        1.0
    );
    assert_eq!(series("tollgate_store_call_duration_seconds_count"), 13.0);
    assert_eq!(series("tollgate_fail_policy_decisions_total"), 0.0);
    assert_eq!(series("tollgate_build_info{version=\"0.1.0\"}"), 1.0);
    assert!(series("tollgate_connections_total{listener=\"http\"}") >= 1.0);
    assert!(series("tollgate_config_last_reload_success_timestamp_seconds") > 1.7e9);

    support::promtool_check(&text);
}

/// The commented example shows every key, and is a good file.
/// Each refusal blames the key the file got wrong, in the file's terms: a capacity too large
/// for a bucket with no `refill` is the capacity's, a period too long the period's; a duration
/// written as a number says how to write one; a name is told which letters; a number beyond
/// every integer says the largest.
#[test]
fn config_errors_blame_the_key_the_file_got_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[policies.a]\ncapacity = 18446744073709551615\nperiod = \"1s\"\n",
            "policies.a.capacity: with no `refill`",
        ),
        (
            "[policies.a]\ncapacity = 10\nperiod = \"200y\"\n",
            "policies.a.period: with no `refill`",
        ),
        (
            "[store]\ntimeout = 50\n",
            "store.timeout: invalid type: integer `50`, expected a string; write a duration such as \"50ms\"",
        ),
        (
            "[policies.\"ключ\"]\ncapacity = 10\nperiod = \"1s\"\n",
            "may hold ASCII letters and digits",
        ),
        (
            "[policies.a]\ncapacity = 1000000000000000000000000000000\nperiod = \"1s\"\n",
            "policies.a.capacity: 1000000000000000000000000000000 is larger than the largest number accepted",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let file = write(dir.path(), &format!("c{i}.toml"), text);
        let (ok, _, err) = config_check(&file);
        assert!(!ok, "{text}");
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn the_example_file_is_good_and_shows_every_key() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tollgate.toml");
    let (ok, out, err) = config_check(&example);
    assert!(ok, "{err}");
    assert!(out.contains("ok, 3 policies"), "{out}");
    assert!(
        out.contains("1 file, 1 domain"),
        "the Envoy directory loads: {out}"
    );
    let text = std::fs::read_to_string(&example).unwrap();
    for key in [
        "[store]",
        "url =",
        "timeout =",
        "on_error =",
        "max_keys =",
        "[store.postgres]",
        "schema =",
        "table =",
        "unlogged =",
        "synchronous_commit =",
        "isolation =",
        "connections =",
        "[http]",
        "listen =",
        "inline_policies =",
        "[log]",
        "format =",
        "[resp]",
        "password =",
        "idle_timeout =",
        "[grpc]",
        "config_dir =",
        "merge_domain_config =",
        "algorithm =",
        "shadow_mode =",
        "response_headers =",
        "ietf_headers =",
        "limit_header =",
        "remaining_header =",
        "reset_header =",
        "near_limit_ratio =",
        "response_dynamic_metadata =",
        "[tracing]",
        "enabled =",
        "protocol =",
        "endpoint =",
        "service_name =",
        "service_namespace =",
        "service_instance_id =",
        "sampling_rate =",
        "[grpc.domains.edge]",
        "max_connections =",
        "capacity =",
        "refill =",
        "period =",
        "algorithm =",
        "shadow =",
        "lease =",
    ] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(key)),
            "the example lacks {key}"
        );
    }
}

/// A store that does not answer: the fail policy answers, and the metrics say so by kind.
#[tokio::test]
async fn metrics_count_store_errors_by_kind_and_the_fail_policy_answers() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace("url = \"memory\"", "url = \"redis://127.0.0.1:1\"");
    let file = write(dir.path(), "tollgate.toml", &text);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    for _ in 0..3 {
        let (status, body) = check(&client, &server, json!({"policy": "api", "key": "a"})).await;
        assert_eq!(status, StatusCode::OK, "fail open: {body}");
    }
    let text = get(&client, &server, "/metrics").await;
    assert_eq!(metric(&text, "tollgate_fail_policy_decisions_total"), 3.0);
    assert!(
        metric(&text, "tollgate_store_errors_total{kind=\"unavailable\"}") >= 3.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "tollgate_decisions_total{outcome=\"allowed\",policy=\"api\"}"
        ),
        3.0
    );
}

/// `body` posted to `path`: the status and the JSON answer.
async fn post_json(
    client: &Client,
    server: &Tollgate,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let response = client
        .post(format!("http://{}{path}", server.addr))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    (status, body)
}

/// Reservations take configured policies by name, and settle under the numbers in force.
#[tokio::test]
async fn a_named_reservation_commits_under_its_policy() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "tollgate.toml",
        &MINIMAL.replace("period = \"1s\"", "period = \"1h\""),
    );
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    let post = |path: &'static str, body: Value| post_json(&client, &server, path, body);
    let (status, reserved) = post(
        "/v1/reserve",
        json!({"policy": "api", "key": "r", "cost": 6}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{reserved}");
    assert_eq!(reserved["remaining"], 4);
    let token = reserved["reservation"].clone();
    let (status, committed) = post("/v1/commit", json!({"reservation": token, "used": 2})).await;
    assert_eq!(status, StatusCode::OK, "{committed}");
    assert_eq!(
        (
            committed["policy"].as_str(),
            committed["remaining"].as_u64()
        ),
        (Some("api"), Some(8))
    );
    let bucket = get(&client, &server, "/v1/buckets/api/r").await;
    assert!(bucket.contains("\"remaining\":8"), "{bucket}");
    let (status, _) = post("/v1/commit", json!({"reservation": token, "used": 2})).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

/// Issue 43: requests per minute and tokens per minute reserved together, each with its own
/// cost, commit what each used: one request and 1,200 tokens, never 1,200 of each. One `used`
/// for different costs, a policy left out or one not reserved: a 400 naming the field, and
/// nothing settled.
#[tokio::test]
async fn a_reservation_of_several_policies_commits_each_its_own_amount() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[store]\nurl = \"memory\"\n[http]\nlisten = \"127.0.0.1:8080\"\n\
                [policies.requests]\ncapacity = 60\nrefill = 60\nperiod = \"1h\"\n\
                [policies.tokens]\ncapacity = 10000\nrefill = 10000\nperiod = \"1h\"\n";
    let file = write(dir.path(), "tollgate.toml", text);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    let post = |path: &'static str, body: Value| post_json(&client, &server, path, body);
    // A cost per policy must name each of them.
    let (status, refused) = post(
        "/v1/reserve",
        json!({"policies": ["requests", "tokens"], "key": "k", "cost": {"requests": 1}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["field"], "cost.tokens", "{refused}");
    let (status, reserved) = post(
        "/v1/reserve",
        json!({"policies": ["requests", "tokens"], "key": "k",
               "cost": {"requests": 1, "tokens": 2000}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{reserved}");
    assert_eq!(reserved["policies"][0]["remaining"], 59);
    assert_eq!(reserved["policies"][1]["remaining"], 8000);
    let token = reserved["reservation"].clone();
    let refusals = [
        (json!(1200), "used"),
        (json!({"tokens": 1200}), "used.requests"),
        (
            json!({"requests": 1, "tokens": 1200, "other": 1}),
            "used.other",
        ),
        (json!({"requests": 1, "tokens": 12001}), "used.tokens"),
    ];
    for (used, field) in refusals {
        let (status, refused) =
            post("/v1/commit", json!({"reservation": token, "used": used})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert_eq!(refused["field"], field, "{refused}");
    }
    let bucket = get(&client, &server, "/v1/buckets/requests/k").await;
    assert!(
        bucket.contains("\"remaining\":59"),
        "nothing settled: {bucket}"
    );
    let (status, committed) = post(
        "/v1/commit",
        json!({"reservation": token, "used": {"requests": 1, "tokens": 1200}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{committed}");
    assert_eq!(committed["policies"][0]["policy"], "requests");
    assert_eq!(committed["policies"][0]["remaining"], 59, "{committed}");
    assert_eq!(committed["policies"][1]["remaining"], 8800, "{committed}");
    let bucket = get(&client, &server, "/v1/buckets/tokens/k").await;
    assert!(bucket.contains("\"remaining\":8800"), "{bucket}");
    let (status, _) = post(
        "/v1/commit",
        json!({"reservation": token, "used": {"requests": 1, "tokens": 1200}}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "once");
    // A check may give each policy its cost too.
    let (status, checked) = check(
        &client,
        &server,
        json!({"policies": ["requests", "tokens"], "key": "k",
               "cost": {"requests": 1, "tokens": 800}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{checked}");
    assert_eq!(checked["policies"][0]["remaining"], 58);
    assert_eq!(checked["policies"][1]["remaining"], 8000);
}

/// A reservation in which a shadow policy would have denied: the enforced policies were charged
/// (decided without the shadow) and get their refunds at the commit; the shadow, charged
/// nothing, gets nothing back. Policies that reserved alike commit with one number.
#[tokio::test]
async fn a_reservation_beside_a_denying_shadow_gives_the_enforced_policies_their_refunds() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[store]\nurl = \"memory\"\n[http]\nlisten = \"127.0.0.1:8080\"\n\
                [policies.trial]\ncapacity = 1\nrefill = 1\nperiod = \"1h\"\nshadow = true\n\
                [policies.tokens]\ncapacity = 10000\nrefill = 10000\nperiod = \"1h\"\n";
    let file = write(dir.path(), "tollgate.toml", text);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    let post = |path: &'static str, body: Value| post_json(&client, &server, path, body);
    let both = json!(["trial", "tokens"]);
    let (status, _) = post("/v1/check", json!({"policies": both, "key": "k"})).await;
    assert_eq!(status, StatusCode::OK);
    // The trial bucket is empty: it would deny, the tokens are charged 2,000 all the same.
    let (status, reserved) = post(
        "/v1/reserve",
        json!({"policies": both, "key": "k", "cost": {"trial": 1, "tokens": 2000}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{reserved}");
    assert_eq!(reserved["shadow_denied"], true, "{reserved}");
    assert_eq!(reserved["policies"][1]["remaining"], 7999, "{reserved}");
    let token = reserved["reservation"].clone();
    let (status, committed) = post(
        "/v1/commit",
        json!({"reservation": token, "used": {"trial": 0, "tokens": 1200}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{committed}");
    assert_eq!(
        committed["policies"][1]["remaining"], 8799,
        "800 back: {committed}"
    );
    assert_eq!(
        committed["policies"][0]["remaining"], 0,
        "nothing back: {committed}"
    );
    // Alike costs: one number for both.
    let (status, reserved) = post(
        "/v1/reserve",
        json!({"policies": both, "key": "j", "cost": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{reserved}");
    let token = reserved["reservation"].clone();
    let (status, committed) = post("/v1/commit", json!({"reservation": token, "used": 0})).await;
    assert_eq!(status, StatusCode::OK, "{committed}");
    assert_eq!(committed["policies"][0]["remaining"], 1, "{committed}");
    assert_eq!(committed["policies"][1]["remaining"], 10000, "{committed}");
}

/// Issue 27: the bounds on what is read hold at start and in `config check` as on reload, each
/// refusal naming the path and what is wrong, before the file is read (a FIFO would block the
/// reader for good) or parsed whole.
#[test]
fn files_too_large_too_many_policies_or_not_regular_are_refused_at_start_and_in_check() {
    let dir = tempfile::tempdir().unwrap();
    let big = write(
        dir.path(),
        "big.toml",
        &crate::reload::many_policies(1_000_000),
    );
    let many = write(
        dir.path(),
        "many.toml",
        &crate::reload::many_policies(180_000),
    );
    let fifo = dir.path().join("fifo.toml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let zero = dir.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let cases = [
        (&big, ": the config file is larger than 16 MiB"),
        (&many, ":12289:1: policies.p4096: more than 4096 policies"),
        (
            &fifo,
            ": the config file must be a regular file; this is a FIFO",
        ),
        (
            &zero,
            ": the config file must be a regular file; this is a character device",
        ),
    ];
    for (path, refusal) in cases {
        let expected = format!("{}{refusal}", path.display());
        let run = |args: &[&str]| {
            let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args(args)
                .arg(path)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            for _ in 0..250 {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let Some(status) = child.try_wait().unwrap() else {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!(
                    "`tollgate {args:?} {}` still runs after 5 s",
                    path.display()
                );
            };
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            (status, err)
        };
        for args in [
            &["config", "check"][..],
            &["serve", "--listen", "127.0.0.1:0", "--config"],
        ] {
            let (status, err) = run(args);
            assert_eq!(status.code(), Some(1), "{args:?} {}: {err}", path.display());
            assert!(
                err.contains(&expected),
                "{args:?}: {err}\nwants: {expected}"
            );
        }
    }
}

/// Issue 27: `tollgate config check big.toml | head -1` panicked (`failed printing to stdout:
/// Broken pipe`, exit 101); a reader that stops early ends the command quietly.
#[test]
fn config_check_into_a_reader_that_stops_early_exits_quietly() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    // 4,096 lines of report: far more than a pipe holds, so the writer meets the closed end.
    let file = write(dir.path(), "big.toml", &crate::reload::many_policies(4096));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["config", "check"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.ends_with("ok, 4096 policies\n"), "{first}");
    // The reader is gone (as `head -1` exits after one line).
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}
