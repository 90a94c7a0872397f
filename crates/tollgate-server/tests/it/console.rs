//! Issue 49: the operator's console, in a real headless Chromium (Debian's `chromium` and
//! `chromium-driver`, driven over WebDriver by the test kit) against a real server with an admin
//! listener and tokens. The page asks for a token, shows a policy's top denied key after a
//! burst (a key chosen to be markup shows as text), offers a reset only to an admin token, and
//! the reset, confirmed, empties the bucket; the browser's console stays free of errors (a
//! Content-Security-Policy violation would be one). The screenshot is kept in
//! `target/artifacts/console.png`, and `TOLLGATE_UPDATE_SCREENSHOT=1` writes it to
//! `docs/img/console.png` as well, for docs/operations.md.
//!
//! `GET /v1/status` and the page's headers are tested without a browser.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tollgate_testkit::webdriver::Browser;

use crate::support::{Stopwatch, Tollgate};

const APP: &str = "app-3b9e51c07d2a";
const VIEWER: &str = "viewer-7f14d2a8c6";
const OPS: &str = "ops-e60a9c3b17f5";

/// A key that would run a script if the page wrote it as markup.
const MARKUP: &str = "<img src=x onerror=\"window.pwned=1\">";

/// How long the page gets to show what the test waits for (it polls every second).
const WAIT: Duration = Duration::from_secs(15);

/// A config with an admin listener, the policy `api` (a burst of 5, 1 an hour: a burst of
/// checks is denied past 5), the Envoy domain `d` (2 a minute per value of `k`), and three
/// tokens: `app` decides, `viewer` reads, `ops` resets.
fn configured() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("envoy")).unwrap();
    std::fs::write(
        dir.path().join("envoy/d.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    )
    .unwrap();
    for (name, secret) in [("app", APP), ("viewer", VIEWER), ("ops", OPS)] {
        std::fs::write(dir.path().join(name), secret).unwrap();
    }
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        // Every decision recorded (`sample_every = 1`), so the page's counts are exact.
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n\
         [top]\nsample_every = 1\n\n\
         [grpc]\nlisten = \"127.0.0.1:0\"\nconfig_dir = \"envoy\"\n\n\
         [policies.api]\ncapacity = 5\nrefill = 1\nperiod = \"1h\"\n\n\
         [auth.tokens.app]\nsecret_file = \"app\"\nscopes = [\"check\"]\n\n\
         [auth.tokens.viewer]\nsecret_file = \"viewer\"\nscopes = [\"read\"]\n\n\
         [auth.tokens.ops]\nsecret_file = \"ops\"\nscopes = [\"read\", \"admin\"]\n",
    )
    .unwrap();
    (dir, path)
}

/// `POST /v1/check` of `key` under `api` on the data port: the status and the body.
async fn check(client: &Client, server: &Tollgate, key: &str) -> (StatusCode, Value) {
    let response = client
        .post(format!("http://{}/v1/check", server.addr))
        .bearer_auth(APP)
        .body(json!({"policy": "api", "key": key}).to_string())
        .send()
        .await
        .unwrap();
    let status = response.status();
    (
        status,
        serde_json::from_str(&response.text().await.unwrap()).unwrap(),
    )
}

/// The rows of `api`'s top denied keys, as the page shows them: key, count and error bound.
const TOP_ROWS: &str = "return [...document.querySelectorAll('[data-policy=\"api\"] tr.top-key')]\
    .map(r => ({key: r.cells[0].textContent, count: Number(r.cells[1].textContent), \
    error: Number(r.cells[2].textContent.replace('≤ ', '')), \
    reset: r.querySelector('button.reset') !== null}));";

async fn top_rows(browser: &Browser) -> Vec<Value> {
    let rows = browser.execute(TOP_ROWS, &[]).await.unwrap();
    rows.as_array().cloned().unwrap_or_default()
}

/// Types `secret` into the token form and sends it.
async fn sign_in(browser: &Browser, secret: &str) {
    browser
        .until(
            WAIT,
            "return !document.getElementById('token-form').hidden;",
            &[],
        )
        .await
        .unwrap();
    let input = browser.find("#token").await.unwrap();
    browser.type_into(&input, secret).await.unwrap();
    browser
        .click(&browser.find("#token-use").await.unwrap())
        .await
        .unwrap();
}

/// Asserts the browser's console holds no error since the last look.
async fn no_console_errors(browser: &Browser, when: &str) {
    let severe = browser.severe_logs().await.unwrap();
    assert!(severe.is_empty(), "console errors {when}: {severe:#?}");
}

fn artifacts() -> PathBuf {
    // `target/tmp` for integration tests: the artifacts go beside it.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("artifacts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_who_is_denied_and_an_admin_resets_their_bucket_in_chromium() {
    let (_dir, config) = configured();
    let server = Tollgate::start(&["--config", config.to_str().unwrap()]);
    let admin = server.admin_addr();
    let client = Client::new();
    let browser = Browser::start().await.unwrap_or_else(|e| panic!("{e}"));
    browser.goto(&format!("http://{admin}/")).await.unwrap();

    // The page asks for a token before it asks the server anything: no request but the page's
    // own has reached the server.
    browser
        .until(
            WAIT,
            "return !document.getElementById('token-form').hidden;",
            &[],
        )
        .await
        .unwrap();
    let asked = browser
        .execute(
            "return performance.getEntriesByType('resource').map(e => e.name);",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(asked, json!([]), "requests before a token");
    sign_in(&browser, VIEWER).await;
    browser
        .until(
            WAIT,
            "return document.querySelector('[data-policy=\"api\"]') !== null \
             && document.getElementById('who').textContent;",
            &[],
        )
        .await
        .unwrap();

    // A burst: 20 checks of `mallory` (5 allowed, 15 denied), 7 of the markup key (2 denied),
    // 6 of `..` (1 denied: a key a URL path cannot carry).
    for (key, checks) in [("mallory", 20), (MARKUP, 7), ("..", 6)] {
        for i in 0..checks {
            let (status, body) = check(&client, &server, key).await;
            let expected = if i < 5 {
                StatusCode::OK
            } else {
                StatusCode::TOO_MANY_REQUESTS
            };
            assert_eq!(status, expected, "check {i} of {key}: {body}");
        }
    }
    // Envoy's JSON endpoint: 5 hits on k=v of domain d, 2 a minute: 3 over the limit, or 2
    // when the hits straddle a minute's end. The page shows the 429s the server gave.
    let mut over = 0;
    for _ in 0..5 {
        let hit = client
            .post(format!("http://{}/json", server.addr))
            .bearer_auth(APP)
            .body(
                json!({"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        let status = hit.status();
        assert!(
            status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS,
            "{status}"
        );
        over += usize::from(status == StatusCode::TOO_MANY_REQUESTS);
    }
    assert!((2..=3).contains(&over), "{over} of 5 hits over 2 a minute");
    let domain = browser
        .until(
            WAIT,
            &format!(
                "const rows = [...document.querySelectorAll('[data-domain=\"d\"] tr.top-key')]\
                 .map(r => [r.cells[0].textContent, r.cells[1].textContent]); \
                 return rows.length && rows[0][1] === '{over}' ? rows : null;"
            ),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(domain, json!([["k=v", over.to_string()]]));
    let shown = browser
        .until(
            WAIT,
            &format!(
                "const rows = (function () {{ {TOP_ROWS} }})(); \
                 return rows.some(r => r.key === 'mallory' && r.count >= 15) \
                 && rows.some(r => r.key === {MARKUP:?}) && rows.some(r => r.key === '..') \
                 ? rows : null;"
            ),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    println!("top denied keys of api, as the page shows them: {shown}");
    let rows = shown.as_array().unwrap();
    let mallory = rows.iter().find(|r| r["key"] == "mallory").unwrap();
    let (count, error) = (
        mallory["count"].as_u64().unwrap(),
        mallory["error"].as_u64().unwrap(),
    );
    assert!(
        count >= 15 && count - error <= 15,
        "15 denials shown as {count} ± {error}"
    );
    assert_eq!(rows[0]["key"], "mallory", "the most denied first: {shown}");
    // The markup key is text: no element was made of it, and its script never ran.
    let injected = browser
        .execute(
            "return document.querySelectorAll('img').length + (window.pwned ? 100 : 0);",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(injected, json!(0));
    // A read token may not reset: the page offers no button.
    assert!(rows.iter().all(|r| r["reset"] == false), "{shown}");
    // The rest of the page: the store, the admin listener with its cap, the load at start.
    let text = browser
        .execute("return document.querySelector('main').innerText;", &[])
        .await
        .unwrap();
    let text = text.as_str().unwrap();
    for expected in ["memory", "healthy", &admin.to_string(), "in force", "start"] {
        assert!(
            text.contains(expected),
            "{expected:?} not on the page:\n{text}"
        );
    }
    no_console_errors(&browser, "reading").await;

    // An admin token: each key gets a reset button, which asks first.
    browser
        .click(&browser.find("#token-forget").await.unwrap())
        .await
        .unwrap();
    sign_in(&browser, OPS).await;
    browser
        .until(
            WAIT,
            "return document.querySelector('[data-policy=\"api\"] tr.top-key button.reset') \
             !== null;",
            &[],
        )
        .await
        .unwrap();
    // Each key of `api` gets one, but `..`, which a URL would lose on its way.
    let resets: Vec<(String, bool)> = top_rows(&browser)
        .await
        .iter()
        .map(|r| (r["key"].as_str().unwrap().to_owned(), r["reset"] == true))
        .collect();
    assert_eq!(
        resets,
        [
            ("mallory".to_owned(), true),
            (MARKUP.to_owned(), true),
            ("..".to_owned(), false)
        ],
    );
    // A domain's bucket is not the key shown: no reset there.
    let domain_resets = browser
        .execute(
            "return document.querySelectorAll('[data-domain=\"d\"] button.reset').length;",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(domain_resets, json!(0));
    let png = browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a screenshot that is no PNG");
    let dir = artifacts();
    std::fs::create_dir_all(&dir).unwrap();
    let kept = dir.join("console.png");
    std::fs::write(&kept, &png).unwrap();
    println!("screenshot of the console: {}", kept.display());
    if std::env::var_os("TOLLGATE_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img/console.png");
        std::fs::write(&docs, &png).unwrap();
        println!("and in {}", docs.display());
    }

    let index = top_rows(&browser)
        .await
        .iter()
        .position(|r| r["key"] == "mallory")
        .unwrap();
    let selector = format!(
        "[data-policy=\"api\"] tr.top-key:nth-of-type({}) button.reset",
        index + 2
    );
    // The page polls every second and keeps its rows while the keys are the same: the
    // button an operator aims at is the one they click, two polls later.
    browser
        .execute(
            &format!("window.kept = document.querySelector({selector:?}); return true;"),
            &[],
        )
        .await
        .unwrap();
    for _ in 0..2 {
        let before = browser
            .execute("return document.getElementById('state').textContent;", &[])
            .await
            .unwrap();
        browser
            .until(
                WAIT,
                "return document.getElementById('state').textContent !== arguments[0];",
                &[before],
            )
            .await
            .unwrap();
    }
    let kept = browser
        .execute(
            "return window.kept.isConnected && window.kept.closest('tr').cells[0].textContent;",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(kept, json!("mallory"), "the reset button was built again");
    // Should the keys change between find and click (they do not here), the row is new: find
    // it again, once.
    let click = async || browser.click(&browser.find(&selector).await?).await;
    if let Err(e) = click().await {
        assert!(e.to_string().contains("stale element reference"), "{e}");
        click().await.unwrap();
    }
    let asked = browser.dialog_text().await.unwrap().unwrap_or_default();
    assert!(
        asked.contains("mallory") && asked.contains("api"),
        "the confirmation: {asked:?}"
    );
    browser.accept_dialog().await.unwrap();
    browser
        .until(
            WAIT,
            "const m = document.getElementById('message'); \
             return !m.hidden && m.textContent.startsWith('Reset') && m.textContent;",
            &[],
        )
        .await
        .unwrap();
    // The bucket is full again: the next check takes one of 5.
    let (status, body) = check(&client, &server, "mallory").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["remaining"], 4, "{body}");
    no_console_errors(&browser, "resetting").await;
    browser.quit().await.unwrap();
}

#[tokio::test]
async fn the_status_lists_policies_store_listeners_and_loads_for_a_read_token() {
    let (_dir, config) = configured();
    let server = Tollgate::start(&["--config", config.to_str().unwrap()]);
    let admin = server.admin_addr();
    let client = Client::new();
    for i in 0..7 {
        check(&client, &server, &format!("k{}", i % 6)).await;
    }
    for _ in 0..6 {
        check(&client, &server, "k0").await;
    }
    let status = |token: Option<&'static str>| {
        let mut request = client.get(format!("http://{admin}/v1/status"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap() }
    };
    assert_eq!(status(None).await.status(), StatusCode::UNAUTHORIZED);
    let asked = client
        .get(format!("http://{admin}/v1/status?policy=api"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), StatusCode::BAD_REQUEST);
    let problem: Value = serde_json::from_str(&asked.text().await.unwrap()).unwrap();
    assert_eq!(problem["field"], "policy", "{problem}");
    assert_eq!(status(Some(APP)).await.status(), StatusCode::FORBIDDEN);
    let answer = status(Some(VIEWER)).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let body: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    let api = &body["policies"][0];
    assert_eq!(api["name"], "api", "{body}");
    assert_eq!(
        (
            &api["capacity"],
            &api["refill"],
            &api["period_ms"],
            &api["algorithm"]
        ),
        (
            &json!(5),
            &json!(1),
            &json!(3_600_000),
            &json!("token_bucket")
        )
    );
    // k0 twice and k1..k5 once, all allowed; then k0 six times more: 3 allowed (5 in all).
    assert_eq!(
        (&api["allowed"], &api["denied"]),
        (&json!(10), &json!(3)),
        "{body}"
    );
    let store = &body["store"];
    assert_eq!(
        (&store["kind"], &store["healthy"]),
        (&json!("memory"), &json!(true))
    );
    assert_eq!(store["errors"], 0);
    assert_eq!(store["latency_ms"]["calls"], 13, "{body}");
    assert!(store["latency_ms"]["p99"].as_f64().is_some(), "{body}");
    let listeners = body["listeners"].as_array().unwrap();
    let named = |name: &str| listeners.iter().find(|l| l["name"] == name).cloned();
    let http = named("http").unwrap();
    assert_eq!(http["address"], server.addr.to_string());
    assert_eq!(http["cap"], 10_000);
    let admin_listener = named("admin").unwrap();
    assert_eq!(admin_listener["address"], admin.to_string());
    assert!(
        admin_listener["connections"].as_i64().unwrap() >= 1,
        "{body}"
    );
    // The config file at start, then the Envoy directory it names.
    let loads = body["loads"].as_array().unwrap();
    assert_eq!(loads.len(), 2, "{body}");
    assert!(
        loads
            .iter()
            .all(|l| l["trigger"] == "start" && l["ok"] == true)
    );
    assert_eq!(loads[1]["source"], config.display().to_string());
    assert_eq!(
        body["caller"],
        json!({"token": "viewer", "scopes": ["read"]})
    );

    // A refused reload is listed first, with its error; the good config stays.
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{good}\n[policies.broken]\ncapacity = 0\nrefill = 1\nperiod = \"1s\"\n"),
    )
    .unwrap();
    let stopwatch = Stopwatch::start();
    let refused = loop {
        let text = status(Some(VIEWER)).await.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap();
        if body["loads"].as_array().unwrap().len() == 3 {
            break body;
        }
        let waited = stopwatch.elapsed();
        assert!(waited < WAIT, "no second load after {waited:?}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let load = &refused["loads"][0];
    assert_eq!(load["ok"], false, "{refused}");
    let error = load["error"].as_str().unwrap();
    assert!(error.contains("capacity"), "{error}");
    assert_eq!(refused["loads"][2]["source"], config.display().to_string());

    // Refusals that quote a store URL, or the text a syntax error stops at, keep its password
    // out of the status a read token sees.
    for (loads, store) in [
        (4, "url = \"redi://:hunter2@h\""),
        (5, "url = \"redis://:hunter2@h\" hunter2"),
    ] {
        std::fs::write(&config, format!("{good}\n[store]\n{store}\n")).unwrap();
        let stopwatch = Stopwatch::start();
        let text = loop {
            let text = status(Some(VIEWER)).await.text().await.unwrap();
            let body: Value = serde_json::from_str(&text).unwrap();
            if body["loads"].as_array().unwrap().len() == loads {
                assert_eq!(body["loads"][0]["ok"], false, "{body}");
                break text;
            }
            let waited = stopwatch.elapsed();
            assert!(waited < WAIT, "no load {loads} after {waited:?}: {body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(!text.contains("hunter2"), "{text}");
    }

    // A reload put in force that leaves a setting for a restart says so.
    std::fs::write(&config, format!("{good}\n[store]\nmax_keys = 1234\n")).unwrap();
    let stopwatch = Stopwatch::start();
    let noted = loop {
        let text = status(Some(VIEWER)).await.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap();
        if body["loads"].as_array().unwrap().len() == 6 {
            break body["loads"][0].clone();
        }
        let waited = stopwatch.elapsed();
        assert!(waited < WAIT, "no load 6 after {waited:?}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(noted["ok"], true, "{noted}");
    assert_eq!(
        noted["notes"],
        json!(["store.max_keys takes effect on restart only; the running value stays"]),
        "{noted}"
    );
}

#[tokio::test]
async fn the_page_is_served_without_a_token_under_a_strict_policy() {
    let (_dir, config) = configured();
    let server = Tollgate::start(&["--config", config.to_str().unwrap()]);
    let client = Client::new();
    let page = client
        .get(format!("http://{}/", server.admin_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let header = |name: &str| {
        page.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let csp = header("content-security-policy");
    assert!(
        csp.starts_with("default-src 'none'; script-src 'sha256-"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(header("referrer-policy"), "no-referrer");
    assert_eq!(header("x-content-type-options"), "nosniff");
    assert_eq!(header("cache-control"), "no-store");
    assert!(header("content-type").starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(
        html.contains("data-tokens=\"required\""),
        "the page is told tokens are asked"
    );
    // On the data port, `/` is no page: without a token it is refused like any path, and
    // says nothing of the admin listener.
    let refused = client
        .get(format!("http://{}/", server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let body = refused.text().await.unwrap();
    assert!(!body.contains(&server.admin_addr().to_string()), "{body}");
    // With one, it points at the admin listener for the console's paths.
    for path in ["/", "/v1/status"] {
        let moved = client
            .get(format!("http://{}{path}", server.addr))
            .bearer_auth(VIEWER)
            .send()
            .await
            .unwrap();
        assert_eq!(moved.status(), StatusCode::NOT_FOUND);
        let body = moved.text().await.unwrap();
        assert!(
            body.contains(&server.admin_addr().to_string()),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn the_loads_of_the_envoy_directory_are_listed_good_and_refused() {
    let sockets = tempfile::tempdir().unwrap();
    let socket = sockets.path().join("g.sock");
    let (dir, path) = crate::support::envoy::configured(
        &format!(
            "listen = \"127.0.0.1:0\"\nunix_socket = \"{}\"",
            socket.display()
        ),
        &[(
            "a.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n",
        )],
    );
    let server = Tollgate::start(&["--config", path.to_str().unwrap()]);
    let client = Client::new();
    let envoy = dir.path().join("envoy");
    // gRPC's TCP listener and its Unix socket, each with its own count and cap.
    let status: Value = serde_json::from_str(
        &client
            .get(format!("http://{}/v1/status", server.addr))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let listed: Vec<(&Value, &Value)> = status["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["name"].as_str().unwrap().starts_with("grpc"))
        .map(|l| (&l["address"], &l["cap"]))
        .collect();
    assert_eq!(
        listed,
        [
            (&json!(server.grpc_addr().to_string()), &json!(10_000)),
            (&json!(format!("unix:{}", socket.display())), &json!(10_000)),
        ],
        "{status}"
    );
    let loads = || {
        let request = client
            .get(format!("http://{}/v1/status", server.addr))
            .send();
        async move {
            let text = request.await.unwrap().text().await.unwrap();
            let body: Value = serde_json::from_str(&text).unwrap();
            body["loads"].as_array().cloned().unwrap()
        }
    };
    let at_start = loads().await;
    let sources: Vec<&Value> = at_start.iter().map(|l| &l["source"]).collect();
    assert_eq!(
        sources,
        [
            &json!(envoy.display().to_string()),
            &json!(path.display().to_string())
        ]
    );
    std::fs::write(envoy.join("b.yaml"), "domain: e\ndescriptors: [oops\n").unwrap();
    let stopwatch = Stopwatch::start();
    let refused = loop {
        let now = loads().await;
        if now.len() == 3 {
            break now;
        }
        assert!(stopwatch.elapsed() < WAIT, "no refused load: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(refused[0]["source"], envoy.display().to_string());
    assert_eq!(refused[0]["ok"], false);
    let error = refused[0]["error"].as_str().unwrap();
    assert!(error.contains("b.yaml"), "{error}");
}

/// The check of the console's silence can fail: an error in a page's script, and one it
/// logs, are read back from the browser.
#[tokio::test]
async fn the_browser_console_reports_a_pages_errors() {
    let browser = Browser::start().await.unwrap_or_else(|e| panic!("{e}"));
    browser
        .goto("data:text/html,<script>console.error('logged'); undefined_name();</script>")
        .await
        .unwrap();
    let severe = browser.severe_logs().await.unwrap();
    let said: Vec<&str> = severe.iter().map(|e| e.message.as_str()).collect();
    assert!(said.iter().any(|m| m.contains("logged")), "{said:?}");
    assert!(
        said.iter().any(|m| m.contains("undefined_name")),
        "{said:?}"
    );
    browser.quit().await.unwrap();
}

/// The console's (inline) counts are every decision on a client's own numbers: inline
/// policies over HTTP, and RESP's `CL.THROTTLE` and `THROTTLE`, each counted under a label of
/// its own in the metrics.
#[tokio::test]
async fn the_inline_count_adds_the_resp_throttle_commands() {
    let server = Tollgate::start(&["--resp-listen", "127.0.0.1:0"]);
    let command = |args: &[&str]| {
        let mut bytes = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            bytes.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        bytes
    };
    // Buckets of 1 (`CL.THROTTLE`'s burst is the capacity less 1, `THROTTLE`'s the capacity):
    // the first of each pair is allowed, the second denied.
    for (name, burst) in [("CL.THROTTLE", "0"), ("THROTTLE", "1")] {
        let one = command(&[name, "k", burst, "1", "60"]);
        let replies = crate::support::auth::resp(server.resp_addr(), &[one.clone(), one].concat());
        assert_eq!(replies.matches("*5\r\n").count(), 2, "{name}: {replies:?}");
    }
    let client = Client::new();
    let http = client
        .post(format!("http://{}/v1/check", server.addr))
        .body(json!({"key": "k", "capacity": 1, "refill": 1, "period_ms": 60_000}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(http.status(), StatusCode::OK);
    let text = client
        .get(format!("http://{}/v1/status", server.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        body["inline"],
        json!({"enabled": true, "allowed": 3, "denied": 2}),
        "{body}"
    );
}
