//! The Grafana dashboard (ops/grafana/tollgate.json) and the Prometheus alerting rules
//! (ops/prometheus/alerts.yml) read only series the server exports: every metric name in every
//! query of a panel, of a template variable and of a rule is found in a scrape of the real
//! server's `/metrics`. A renamed metric, or a typo in a query, fails here rather than showing an
//! empty panel or an alert that can never fire.
//!
//! A labelled family appears in a scrape only once it has a series, so the server is started
//! with everything the queries read turned on (the Envoy gRPC listener on the example config
//! directory, a memory store of two keys so that the third is refused as `full` and answered by
//! the fail policy) and given a little traffic first; and a second one on Redis (leases), with
//! `[auth]` and a cap of one HTTP connection, is refused a request and a connection.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use reqwest::Client;
use serde_json::{Value, json};

use crate::support::envoy::{ask, client, descriptor, request};
use crate::support::{Tollgate, check, get};
use tollgate_testkit::TestRedis;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Words of PromQL that are neither metrics nor functions called with parentheses.
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
];

/// Words after which a parenthesized list holds label names, not expressions.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Aggregations, which may take `by (...)` between their name and their parentheses.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// The index just past the closing `close` of the bracket that opens at `open_at`, strings
/// inside skipped.
fn past(chars: &[char], open_at: usize, close: char) -> usize {
    let mut i = open_at + 1;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = past_string(chars, i),
            c if c == close => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index just past the string literal that opens at `at`.
fn past_string(chars: &[char], at: usize) -> usize {
    let quote = chars[at];
    let mut i = at + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The metric names a PromQL expression reads: its identifiers that are not functions,
/// aggregations, keywords, label names (inside `{...}`, or in the list after `by`, `on`, ...),
/// strings, durations (inside `[...]` or after `offset`), numbers or Grafana variables (`$x`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = past_string(&chars, i);
        } else if c == '{' {
            i = past(&chars, i, '}');
        } else if c == '[' {
            i = past(&chars, i, ']');
        } else if c == '$' {
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number, or a duration such as `5m` after `offset`.
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | ':')) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let called = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) {
                if called {
                    i = past(&chars, next, ')');
                }
            } else if called
                || KEYWORDS.contains(&word.as_str())
                || AGGREGATIONS.contains(&word.as_str())
            {
                // A function, an aggregation or an operator: what follows is read on.
            } else {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The expression a Grafana variable's query reads: `label_values(EXPR, label)` reads EXPR
/// (`label_values(label)` reads no metric), `query_result(EXPR)` and `metrics(...)` theirs.
fn variable_expr(query: &str) -> Option<String> {
    let query = query.trim();
    if let Some(args) = query
        .strip_prefix("label_values(")
        .and_then(|a| a.strip_suffix(')'))
    {
        // The last top-level comma separates the label.
        let chars: Vec<char> = args.chars().collect();
        let mut depth = 0i32;
        let mut split = None;
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '"' | '\'' => {
                    i = past_string(&chars, i);
                    continue;
                }
                '(' | '{' | '[' => depth += 1,
                ')' | '}' | ']' => depth -= 1,
                ',' if depth == 0 => split = Some(i),
                _ => {}
            }
            i += 1;
        }
        return split.map(|at| chars[..at].iter().collect());
    }
    if let Some(expr) = query
        .strip_prefix("query_result(")
        .and_then(|a| a.strip_suffix(')'))
    {
        return Some(expr.to_owned());
    }
    Some(query.to_owned())
}

/// Every query of the dashboard: the panels' targets (`expr`, however deeply nested in rows)
/// and the `query` variables' queries, each with where it is.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                let here = map
                    .get("title")
                    .and_then(Value::as_str)
                    .map_or_else(|| at.to_owned(), |t| format!("{at} / {t}"));
                if let Some(expr) = map.get("expr").and_then(Value::as_str) {
                    out.push((here.clone(), expr.to_owned()));
                }
                for (key, inner) in map {
                    walk(inner, &format!("{here}.{key}"), out);
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(item, at, out);
                }
            }
            _ => {}
        }
    }
    let mut queries = Vec::new();
    walk(&dashboard["panels"], "panels", &mut queries);
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("the dashboard's templating.list");
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = match &variable["query"] {
            Value::String(q) => q.clone(),
            other => other["query"].as_str().unwrap_or_default().to_owned(),
        };
        if let Some(expr) = variable_expr(&query) {
            queries.push((format!("variable {}", variable["name"]), expr));
        }
    }
    queries
}

/// Every rule's expression in a Prometheus rules file.
fn rule_queries(yaml: &str) -> Vec<(String, String)> {
    let docs = yaml_rust2::YamlLoader::load_from_str(yaml).expect("the rules file is YAML");
    let mut queries = Vec::new();
    for group in docs[0]["groups"].as_vec().expect("groups") {
        for rule in group["rules"].as_vec().expect("rules") {
            let name = rule["alert"]
                .as_str()
                .or(rule["record"].as_str())
                .unwrap_or("?");
            let expr = rule["expr"].as_str().expect("every rule has an expr");
            queries.push((format!("rule {name}"), expr.to_owned()));
        }
    }
    queries
}

/// The series names a scrape holds: every `# TYPE` family (with `_bucket`, `_sum` and `_count`
/// for a histogram or a summary) and every sample's name.
fn exported(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            names.insert(name.to_owned());
            if matches!(kind, "histogram" | "summary") {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

/// The queries (where, expression) that read a name `exported` lacks, or no metric at all.
fn unexported(queries: &[(String, String)], exported: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for (at, expr) in queries {
        let names = metric_names(expr);
        if names.is_empty() {
            problems.push(format!("{at}: {expr:?} reads no metric"));
        }
        for name in names.iter().filter(|n| !exported.contains(*n)) {
            problems.push(format!(
                "{at}: {name} is not a series the server exports (in {expr:?})"
            ));
        }
    }
    problems
}

/// A scrape of a server with every family the queries read made to appear.
async fn scrape_of_a_busy_server() -> String {
    let envoy_dir = root().join("examples/ratelimit");
    let server = Tollgate::start(&[
        "--grpc-listen",
        "127.0.0.1:0",
        "--envoy-config-dir",
        envoy_dir.to_str().unwrap(),
        "--max-keys",
        "2",
    ]);
    let http = Client::new();
    // Four keys of buckets that stay part-spent: the last two do not fit under the cap, so the
    // store fails as `full` and the fail policy (allow) answers.
    for key in ["a", "b", "c", "d"] {
        let body = json!({"key": key, "capacity": 10, "refill": 1, "period_ms": 3_600_000});
        let (status, answer) = check(&http, &server, body).await;
        assert!(status.is_success(), "{status}: {answer}");
    }
    let mut grpc = client(server.grpc_addr()).await;
    ask(
        &mut grpc,
        request("edge", vec![descriptor(&[("remote_address", "10.1.2.3")])]),
    )
    .await;
    get(&http, &server, "/metrics").await
}

/// A connection the server has answered on, so that it holds the listener's one slot: the
/// closed client before it may still be counted for a moment, and a connection opened then
/// would be the one refused.
async fn holding_the_only_slot(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for _ in 0..100 {
        let mut held = tokio::net::TcpStream::connect(addr).await.unwrap();
        held.write_all(b"GET /healthz HTTP/1.1\r\nhost: tollgate\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        if held.read_exact(&mut head).await.is_ok() && head.ends_with(b" 200") {
            return held;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no connection to {addr} was served within 2 s");
}

/// A scrape of a server on Redis (whose leases' counters are exported), with `[auth]` and an
/// HTTP listener of one connection, after a request without a token and a connection over the
/// cap: the families of auth failures and refused connections appear.
async fn scrape_of_a_guarded_server(redis: &TestRedis) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::write(
        dir.path(),
        "tollgate.toml",
        "[http]\nmax_connections = 1\n\n[auth.tokens.ops]\nsecret_env = \"OPS_TOKEN\"\n\
         scopes = [\"check\", \"read\", \"admin\"]\n\n[policies.hot]\ncapacity = 100\n\
         period = \"1s\"\nlease = true\n",
    );
    let server = Tollgate::start_with_env(
        &["--config", config.to_str().unwrap(), "--store", redis.url()],
        &[("OPS_TOKEN", "s3cret-ops-token")],
    );
    let http = Client::new();
    let anonymous = http
        .post(format!("http://{}/v1/check", server.addr))
        .body(r#"{"policy": "hot", "key": "a"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), reqwest::StatusCode::UNAUTHORIZED);
    drop(http);
    // One connection held open, and one more: refused over the cap.
    let held = holding_the_only_slot(server.addr).await;
    let over = reqwest::get(format!("http://{}/healthz", server.addr)).await;
    assert!(
        over.is_err() || over.unwrap().status() == reqwest::StatusCode::SERVICE_UNAVAILABLE,
        "a connection over the cap was served"
    );
    drop(held);
    // The held connection's slot comes back once the server sees it closed.
    for _ in 0..100 {
        let scrape = Client::new()
            .get(format!("http://{}/metrics", server.addr))
            .bearer_auth("s3cret-ops-token")
            .send()
            .await;
        if let Ok(scrape) = scrape
            && scrape.status().is_success()
        {
            return scrape.text().await.unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no scrape of the guarded server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_alerts_query_only_exported_series() {
    let redis = TestRedis::start().expect("start redis-server");
    let scrape = scrape_of_a_busy_server().await + &scrape_of_a_guarded_server(&redis).await;
    let exported = exported(&scrape);
    // The traffic made the families that only show once used.
    for family in [
        "tollgate_store_errors_total",
        "tollgate_fail_policy_decisions_total",
        "tollgate_envoy_total_hits_total",
        "tollgate_store_call_duration_seconds_bucket",
        "tollgate_auth_failures_total",
        "tollgate_connections_refused_total",
        "tollgate_lease_decisions_total",
    ] {
        assert!(exported.contains(family), "no {family} in\n{scrape}");
    }

    let dashboard: Value = serde_json::from_str(&read(&root().join("ops/grafana/tollgate.json")))
        .expect("the dashboard is JSON");
    let panels = dashboard_queries(&dashboard);
    assert!(
        panels.len() >= 20,
        "only {} queries in the dashboard",
        panels.len()
    );
    let problems = unexported(&panels, &exported);
    assert!(
        problems.is_empty(),
        "ops/grafana/tollgate.json:\n- {}",
        problems.join("\n- ")
    );
    // The families an operator watches most each have a panel.
    let read_by_panels: BTreeSet<String> = panels
        .iter()
        .flat_map(|(_, expr)| metric_names(expr))
        .collect();
    for family in [
        "tollgate_decisions_total",
        "tollgate_store_call_duration_seconds_bucket",
        "tollgate_store_errors_total",
        "tollgate_fail_policy_decisions_total",
        "tollgate_config_reloads_total",
        "tollgate_connections",
        "tollgate_connections_max",
        "tollgate_connections_refused_total",
        "tollgate_auth_failures_total",
        "tollgate_lease_decisions_total",
        "tollgate_lease_tokens_lost_total",
        "tollgate_envoy_over_limit_total",
        "tollgate_envoy_config_loads_total",
    ] {
        assert!(read_by_panels.contains(family), "no panel reads {family}");
    }

    let rules = rule_queries(&read(&root().join("ops/prometheus/alerts.yml")));
    assert!(rules.len() >= 4, "{rules:?}");
    let problems = unexported(&rules, &exported);
    assert!(
        problems.is_empty(),
        "ops/prometheus/alerts.yml:\n- {}",
        problems.join("\n- ")
    );
}

#[test]
fn a_misspelt_series_is_caught() {
    let exported = exported(
        "# HELP tollgate_store_call_duration_seconds How long.\n\
         # TYPE tollgate_store_call_duration_seconds histogram\n\
         tollgate_store_call_duration_seconds_bucket{le=\"0.001\"} 3\n\
         # TYPE tollgate_decisions_total counter\n\
         tollgate_decisions_total{outcome=\"allowed\",policy=\"api\"} 10\n",
    );
    let good = [(
        "good".to_owned(),
        "histogram_quantile(0.99, sum by (le) (rate(tollgate_store_call_duration_seconds_bucket{instance=~\"$instance\"}[$__rate_interval])))"
            .to_owned(),
    )];
    assert_eq!(unexported(&good, &exported), Vec::<String>::new());
    for typo in [
        "sum(rate(tollgate_decisions_totl[5m]))",
        "sum(rate(tolgate_decisions_total[5m]))",
        "sum by (policy) (rate(tollgate_decisions_total[5m])) / on(policy) tollgate_decision_total",
        "rate(tollgate_store_call_duration_seconds_buckets[5m])",
    ] {
        let problems = unexported(&[("typo".to_owned(), typo.to_owned())], &exported);
        assert_eq!(problems.len(), 1, "{typo}: {problems:?}");
    }
    let none = [("none".to_owned(), "vector(1)".to_owned())];
    assert_eq!(unexported(&none, &exported).len(), 1);

    // The reader of PromQL: functions, aggregations, label names, strings, durations, numbers
    // and Grafana variables are not metrics.
    let names = metric_names(
        "time() - max by (instance) (a_b{instance=~\"$instance\", x=\"y{z}\"}) \
         + sum without (le) (rate(c:d[5m] offset 1h)) * on (job) group_left (kind) e > bool 0.9 * 10000 \
         or topk(20, f) unless count_values(\"v\", g) and $var",
    );
    let expected: BTreeSet<String> = ["a_b", "c:d", "e", "f", "g"].map(String::from).into();
    assert_eq!(names, expected);
    assert_eq!(
        variable_expr("label_values(tollgate_decisions_total{instance=~\"$instance\"}, policy)"),
        Some("tollgate_decisions_total{instance=~\"$instance\"}".to_owned())
    );
    assert_eq!(variable_expr("label_values(instance)"), None);
}
