//! The examples, run as tests: the axum one limits `/hello` per client IP behind a trusted
//! local proxy, the tonic one answers `RESOURCE_EXHAUSTED` past its limit, and the LLM gateway
//! charges the tokens each call used.
//!
//! And the examples the docs show: every TOML block of the README and of the pages under
//! `docs/` is a config file `tollgate config check` accepts; the config reference in
//! docs/configuration.md has a row for every key of `examples/tollgate.toml` (which shows every
//! key the file may hold: `the_example_file_is_good_and_shows_every_key`) and no other; and
//! every `--example` the docs run is one that exists, each of them shown somewhere.

#[allow(dead_code)]
#[path = "../../examples/axum.rs"]
mod axum_example;
#[allow(dead_code)]
#[path = "../../examples/llm_gateway.rs"]
mod llm_gateway;
#[allow(dead_code)]
#[path = "../../examples/tonic.rs"]
mod tonic_example;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::{Client, StatusCode};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tollgate::{ManualClock, MemoryStore, Nanos};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

#[tokio::test]
async fn axum_example_limits_hello_per_client_behind_a_trusted_local_proxy() {
    let app = axum_example::router(MemoryStore::new()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    let client = Client::new();
    let hello = |forwarded_for: &'static str| {
        let request = client.get(format!("{base}/hello"));
        async move {
            let request = if forwarded_for.is_empty() {
                request
            } else {
                request.header("x-forwarded-for", forwarded_for)
            };
            request.send().await.unwrap()
        }
    };
    // We connect from 127.0.0.1, the trusted proxy: the header names the client.
    for _ in 0..5 {
        assert_eq!(hello("203.0.113.7").await.status(), StatusCode::OK);
    }
    let denied = hello("203.0.113.7").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "1");
    assert_eq!(denied.headers()["ratelimit-policy"], r#""hello";q=5;w=5"#);
    // Another client behind the proxy, and the proxy itself, have their own budgets.
    assert_eq!(hello("198.51.100.1").await.status(), StatusCode::OK);
    assert_eq!(hello("").await.status(), StatusCode::OK);

    // The API is keyed by API key, with a tier for gold-key.
    let data = |key: &'static str| {
        client
            .get(format!("{base}/api/data"))
            .header("x-api-key", key)
            .send()
    };
    let free = data("free-key").await.unwrap();
    assert_eq!(
        free.headers()["ratelimit-policy"],
        r#""second";q=10;w=1, "minute";q=100;w=60"#
    );
    let gold = data("gold-key").await.unwrap();
    assert_eq!(gold.headers()["ratelimit-policy"], r#""gold";q=50;w=1"#);
}

#[tokio::test]
async fn tonic_example_answers_resource_exhausted_past_its_limit() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(tonic_example::serve(listener, shutdown.clone()));
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    for i in 0..3 {
        let answer = client.check(HealthCheckRequest::default()).await;
        assert!(answer.is_ok(), "call {i}: {answer:?}");
    }
    let status = client
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("retry in 1 s"), "{status:?}");
    shutdown.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn llm_gateway_charges_the_tokens_each_call_used() {
    // A clock that stands still: at 10,000 tokens a minute one comes back every 6 ms, which a
    // busy machine can take between two requests (a CI run saw 9,851 left for 9,850).
    let store = MemoryStore::builder()
        .clock(ManualClock::new(Nanos::new(1_000_000_000)))
        .build();
    let app = llm_gateway::router(store).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = Client::new();
    let complete = |key: &'static str, max_tokens: u64, prompt: &'static str| {
        client
            .post(format!("{base}/v1/complete"))
            .header("x-api-key", key)
            .header("max-tokens", max_tokens.to_string())
            .body(prompt)
            .send()
    };
    // A 400-byte prompt uses 150 tokens: 4,000 reserved, 3,850 given back; the call is one
    // request, not 150 (issue 43: each reserved bucket was charged the tokens used).
    let prompt = "x".repeat(400).leak();
    let first = complete("alice", 4_000, prompt).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["x-llm-tokens"], "150");
    // The RateLimit header describes the buckets after the commit, not the reservation: one
    // request and 150 tokens taken, which the refill would pay back within a second.
    assert_eq!(
        first.headers()["ratelimit"],
        r#""requests";r=59;t=1, "llm-tokens";r=9850;t=1"#
    );
    // 10,000 - 150 are left: a reservation of 9,850 fits...
    let second = complete("alice", 9_850, prompt).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(
        second.headers()["ratelimit"],
        r#""requests";r=58;t=2, "llm-tokens";r=9700;t=2"#
    );
    // ...and after it, 9,700: 9,900 does not, and the denial takes no request either.
    let third = complete("alice", 9_900, prompt).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    // More tokens than the budget ever holds: a 400 naming the cost and the limit, not a 429
    // a client would retry (issue 44, point 6).
    let never = complete("alice", 10_001, prompt).await.unwrap();
    assert_eq!(never.status(), StatusCode::BAD_REQUEST);
    let problem: serde_json::Value = serde_json::from_str(&never.text().await.unwrap()).unwrap();
    assert_eq!(
        problem["detail"],
        "cost 10001 exceeds the capacity 10000 of the policy \"llm-tokens\": it can never be \
         allowed"
    );
    // Another key has its own budgets.
    let bob = complete("bob", 10_000, prompt).await.unwrap();
    assert_eq!(bob.status(), StatusCode::OK);
    assert_eq!(
        bob.headers()["ratelimit"],
        r#""requests";r=59;t=1, "llm-tokens";r=9850;t=1"#
    );
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README and every Markdown page under `docs/`, with their paths from the root.
fn doc_pages() -> Vec<(String, String)> {
    let mut pages = vec![("README.md".to_owned(), read(&root().join("README.md")))];
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    for file in files {
        let name = format!("docs/{}", file.file_name().unwrap().to_str().unwrap());
        pages.push((name, read(&file)));
    }
    pages
}

/// The fenced code blocks of `markdown` whose info string is `lang`.
fn blocks(markdown: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    // Inside a fence: `Some(block)` when it is one of ours, `None` when it is another language.
    let mut inside: Option<Option<String>> = None;
    for line in markdown.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (inside.take(), fence) {
            (None, Some(info)) => inside = Some((info.trim() == lang).then(String::new)),
            (None, None) => {}
            (Some(block), Some(_)) => blocks.extend(block),
            (Some(mut block), None) => {
                if let Some(block) = &mut block {
                    block.push_str(line);
                    block.push('\n');
                }
                inside = Some(block);
            }
        }
    }
    blocks
}

#[test]
fn every_toml_block_in_the_docs_is_a_good_config() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (page, text) in doc_pages() {
        for (i, block) in blocks(&text, "toml").into_iter().enumerate() {
            let file = dir.path().join(format!("block{checked}.toml"));
            std::fs::write(&file, &block).unwrap();
            let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args(["config", "check"])
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{page}, TOML block {}: `tollgate config check` refuses it:\n{}\n{block}",
                i + 1,
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "only {checked} TOML blocks found");
}

/// The dotted keys of a TOML table, with the names a user chooses (of policies and Envoy
/// domains) written `NAME`: `policies.NAME.capacity`.
fn dotted_keys(table: &toml::Table, prefix: &str, out: &mut BTreeSet<String>) {
    for (key, value) in table {
        let key = match prefix {
            "policies." | "grpc.domains." | "grpc.xds.node_metadata." | "grpc.xds.headers." => {
                "NAME"
            }
            _ => key.as_str(),
        };
        let path = format!("{prefix}{key}");
        match value {
            toml::Value::Table(inner) => dotted_keys(inner, &format!("{path}."), out),
            _ => {
                out.insert(path);
            }
        }
    }
}

/// The keys of the reference table in docs/configuration.md's section "## Every key": the first
/// cell of each row, in backticks.
fn reference_keys(page: &str) -> BTreeSet<String> {
    let start = page
        .find("\n## Every key\n")
        .expect("docs/configuration.md has a section \"## Every key\"");
    let section = &page[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |e| e + 1)];
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(key, _)| key.to_owned()))
        .collect()
}

/// How the reference's keys and the example file's differ, one message each.
fn reference_problems(reference: &BTreeSet<String>, example: &BTreeSet<String>) -> Vec<String> {
    let missing = example
        .difference(reference)
        .map(|k| format!("`{k}` is in examples/tollgate.toml but has no row in the reference"));
    let extra = reference
        .difference(example)
        .map(|k| format!("the reference has a row for `{k}`, which the config file does not take"));
    missing.chain(extra).collect()
}

#[test]
fn every_key_of_the_example_file_is_in_the_reference() {
    let text = read(&root().join("examples/tollgate.toml"));
    let example: toml::Table = text.parse().expect("examples/tollgate.toml is TOML");
    let mut keys = BTreeSet::new();
    dotted_keys(&example, "", &mut keys);
    // Keys shown but off (TLS needs files of one's own) are in lines `#: `, TOML once uncovered
    // where they stand: under their own `#: [table]`, or else under the table they sit in.
    let mut shown = String::new();
    let (mut table, mut emitted) = (String::new(), String::new());
    for line in text.lines() {
        if line.starts_with('[') {
            table = line.to_owned();
        } else if let Some(l) = line.strip_prefix("#: ") {
            if l.starts_with('[') {
                table = l.to_owned();
                emitted = l.to_owned();
            } else if emitted != table {
                shown.push_str(&format!("{table}\n"));
                emitted = table.clone();
            }
            shown.push_str(&format!("{l}\n"));
        }
    }
    let shown: toml::Table = shown.parse().expect("the `#: ` lines are TOML");
    dotted_keys(&shown, "", &mut keys);
    assert!(keys.contains("http.tls.client_san"), "{keys:?}");
    assert!(keys.contains("store.wait_replicas"), "{keys:?}");
    assert!(keys.contains("policies.NAME.capacity"), "{keys:?}");
    assert!(keys.contains("grpc.domains.NAME.algorithm"), "{keys:?}");
    let page = read(&root().join("docs/configuration.md"));
    let reference = reference_keys(&page);
    let problems = reference_problems(&reference, &keys);
    assert!(
        problems.is_empty(),
        "docs/configuration.md:\n- {}",
        problems.join("\n- ")
    );

    // A row lost, and a row for a key that does not exist, are caught.
    let row = page
        .lines()
        .find(|l| l.starts_with("| `resp.idle_timeout`"))
        .expect("a row for resp.idle_timeout");
    let lost = reference_keys(&page.replace(&format!("{row}\n"), ""));
    assert!(reference_problems(&lost, &keys)[0].contains("`resp.idle_timeout`"));
    let invented = page.replace(row, &format!("{row}\n| `resp.idle_timeot` | | | |"));
    let problems = reference_problems(&reference_keys(&invented), &keys);
    assert!(problems[0].contains("`resp.idle_timeot`"), "{problems:?}");
}

#[test]
fn every_example_the_docs_run_exists() {
    let examples = root().join("crates/tollgate-server/examples");
    let mut texts: Vec<(String, String)> = doc_pages();
    let guide = root().join("crates/tollgate/src/guide");
    for entry in std::fs::read_dir(&guide).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "md") {
            texts.push((path.display().to_string(), read(&path)));
        }
    }
    let mut shown = BTreeSet::new();
    for (page, text) in &texts {
        for name in text.split("--example ").skip(1).filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        }) {
            assert!(
                examples.join(format!("{name}.rs")).exists(),
                "{page} runs `--example {name}`, which crates/tollgate-server/examples/ lacks"
            );
            shown.insert(name);
        }
    }
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        assert!(
            shown.contains(&name),
            "no page shows how to run the example {name} (`cargo run --release --example {name}`)"
        );
    }
}
