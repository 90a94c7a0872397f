//! Issue 49: who is being limited. A burst through each front end shows its key in
//! `GET /v1/top` (HTTP `/v1/check` under a named policy, Envoy's `/json` under its domain,
//! `CL.THROTTLE` under the shared `(inline)` summary), with exact counts where nothing was
//! evicted, and the endpoint needs a `read` token.

use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::support::Tollgate;
use crate::support::auth::{command, resp};

const APP: &str = "app-5b1e9d07c2a4f8";
const VIEWER: &str = "viewer-0e6f3a9c81d2b7";

/// A server with the policy `api` (3 a hour), the Envoy domain `d` (2 a minute per value of
/// `k`), RESP, and the tokens `app` (check) and `viewer` (read).
fn start() -> (tempfile::TempDir, Tollgate) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("envoy")).unwrap();
    std::fs::write(
        dir.path().join("envoy/d.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("app"), APP).unwrap();
    std::fs::write(dir.path().join("viewer"), VIEWER).unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        "[resp]\nlisten = \"127.0.0.1:0\"\n\n\
         [grpc]\nlisten = \"127.0.0.1:0\"\nconfig_dir = \"envoy\"\n\n\
         [top]\nsample_every = 1\n\n\
         [policies.api]\ncapacity = 3\nrefill = 3\nperiod = \"1h\"\n\n\
         [auth.tokens.app]\nsecret_file = \"app\"\nscopes = [\"check\"]\n\n\
         [auth.tokens.viewer]\nsecret_file = \"viewer\"\nscopes = [\"read\"]\n",
    )
    .unwrap();
    let server = Tollgate::start(&["--config", path.to_str().unwrap()]);
    (dir, server)
}

async fn send(
    client: &Client,
    server: &Tollgate,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = client.request(method, format!("http://{}{path}", server.addr));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `GET /v1/top?QUERY` as the viewer; its JSON, which must be a 200.
async fn top(client: &Client, server: &Tollgate, query: &str) -> Value {
    let path = format!("/v1/top?{query}");
    let (status, body) = send(client, server, Method::GET, &path, Some(VIEWER), None).await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    body
}

fn keys(summary: &Value) -> Vec<(String, u64, u64)> {
    summary["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let key = k["key"].as_str().unwrap().to_owned();
            (
                key,
                k["count"].as_u64().unwrap(),
                k["error"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_burst_on_each_front_end_shows_its_key_in_the_top_denied_to_a_read_token() {
    let (_dir, server) = start();
    let client = Client::new();
    // HTTP: mallory asks 10 times (3 allowed, 7 denied), alice once.
    for (key, times) in [("mallory", 10), ("alice", 1)] {
        for _ in 0..times {
            let body = json!({"policy": "api", "key": key});
            send(
                &client,
                &server,
                Method::POST,
                "/v1/check",
                Some(APP),
                Some(body),
            )
            .await;
        }
    }
    // A look at a bucket is no decision: it is not counted.
    send(
        &client,
        &server,
        Method::GET,
        "/v1/buckets/api/eve",
        Some(VIEWER),
        None,
    )
    .await;
    let path = "/v1/top?policy=api";
    assert_eq!(
        send(&client, &server, Method::GET, path, None, None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&client, &server, Method::GET, path, Some(APP), None)
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    let denied = top(&client, &server, "policy=api").await;
    assert_eq!(denied["policy"], "api");
    assert_eq!(denied["window"], "1m");
    assert_eq!(denied["by"], "denied");
    assert_eq!(denied["capacity"], 1000);
    assert_eq!(denied["sample_every"], 1);
    assert_eq!(denied["dropped"], 0);
    assert_eq!(denied["keys"][0]["sample_error"], 0);
    assert_eq!(keys(&denied), [("mallory".to_owned(), 7, 0)]);
    let allowed = top(&client, &server, "policy=api&by=allowed&window=1h").await;
    assert_eq!(allowed["window"], "1h");
    assert_eq!(
        keys(&allowed),
        [("mallory".to_owned(), 3, 0), ("alice".to_owned(), 1, 0)]
    );
    assert_eq!(
        keys(&top(&client, &server, "policy=api&by=allowed&limit=1").await).len(),
        1
    );

    // Envoy's JSON endpoint: 5 hits on k=v of domain d (2 a minute): 3 over the limit.
    for _ in 0..5 {
        let body =
            json!({"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]});
        let (status, _) = send(
            &client,
            &server,
            Method::POST,
            "/json",
            Some(APP),
            Some(body),
        )
        .await;
        assert!(
            status.is_success() || status == StatusCode::TOO_MANY_REQUESTS,
            "{status}"
        );
    }
    let domain = top(&client, &server, "domain=d").await;
    assert_eq!(domain["domain"], "d");
    assert_eq!(keys(&domain), [("k\u{1f}v\u{1e}".to_owned(), 3, 0)]);

    // CL.THROTTLE: the client's numbers (a burst of 1 + 1) land in the shared summary.
    let mut script = command(&["AUTH", "app", APP]);
    for _ in 0..4 {
        script.push_str(&command(&["CL.THROTTLE", "u1", "1", "1", "60"]));
    }
    let replies = resp(server.resp_addr(), script.as_bytes());
    assert!(replies.starts_with("+OK"), "{replies}");
    let inline = top(&client, &server, "policy=(inline)").await;
    assert_eq!(inline["policy"], "(inline)");
    assert_eq!(keys(&inline), [("u1".to_owned(), 2, 0)]);

    // Every summary at once: the policies, the shared one, the domains.
    let all = top(&client, &server, "").await;
    assert_eq!(all["window"], "1m");
    let names: Vec<String> = all["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["policy"]
                .as_str()
                .or(s["domain"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(names, ["api", "(inline)", "d"]);

    // Bad parameters name themselves; unknown names are 404s naming them.
    for (query, status, field) in [
        ("policy=api&window=5m", StatusCode::BAD_REQUEST, "window"),
        ("by=maybe", StatusCode::BAD_REQUEST, "by"),
        ("limit=0", StatusCode::BAD_REQUEST, "limit"),
        ("limit=1001", StatusCode::BAD_REQUEST, "limit"),
        ("policy=api&domain=d", StatusCode::BAD_REQUEST, "domain"),
        ("color=red", StatusCode::BAD_REQUEST, "color"),
        ("policy=nope", StatusCode::NOT_FOUND, "policy"),
        ("domain=nope", StatusCode::NOT_FOUND, "domain"),
    ] {
        let path = format!("/v1/top?{query}");
        let (got, body) = send(&client, &server, Method::GET, &path, Some(VIEWER), None).await;
        assert_eq!(got, status, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains(field.trim_end_matches('=')),
            "{body}"
        );
    }
}

/// `tmux ARGS` on the test's own tmux server (`-L socket`): its stdout, or `None` if it
/// failed.
fn tmux(socket: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("tmux cannot run ({e}): install it with `apt-get install -y tmux` (scripts/test --install does)")
        });
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls `what` every 100 ms for up to 20 s (a busy machine is slow to start a process).
async fn eventually(mut what: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if what() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

/// `tollgate top` in a terminal (tmux's): after a burst its table shows the key denied, with
/// its count and error, refreshed; `q` quits.
#[tokio::test]
async fn tollgate_top_shows_the_burst_in_a_terminal_and_q_quits() {
    let (dir, server) = start();
    let client = Client::new();
    for _ in 0..6 {
        let body = json!({"policy": "api", "key": "mallory"});
        send(
            &client,
            &server,
            Method::POST,
            "/v1/check",
            Some(APP),
            Some(body),
        )
        .await;
    }
    let socket = format!("tollgate-top-{}", std::process::id());
    let command = format!(
        "{} top --url http://{} --token-file {}",
        env!("CARGO_BIN_EXE_tollgate"),
        server.addr,
        dir.path().join("viewer").display()
    );
    tmux(
        &socket,
        &["new-session", "-d", "-x", "160", "-y", "48", &command],
    )
    .expect("tmux starts a session");
    let pane = || tmux(&socket, &["capture-pane", "-p"]).unwrap_or_default();
    let shown = eventually(|| pane().contains("mallory")).await;
    let screen = pane();
    if !shown {
        tmux(&socket, &["kill-server"]);
        panic!("the key never showed:\n{screen}");
    }
    let line = screen.lines().find(|l| l.contains("mallory")).unwrap();
    assert!(line.contains("denied 3") && line.contains("±0"), "{screen}");
    assert!(
        screen.contains("tollgate top") && screen.contains("3/1h"),
        "{screen}"
    );
    // More denials show at the next refresh.
    for _ in 0..2 {
        let body = json!({"policy": "api", "key": "mallory"});
        send(
            &client,
            &server,
            Method::POST,
            "/v1/check",
            Some(APP),
            Some(body),
        )
        .await;
    }
    let refreshed = eventually(|| pane().contains("denied 5")).await;
    let screen = pane();
    tmux(&socket, &["send-keys", "q"]);
    let quit = eventually(|| tmux(&socket, &["has-session"]).is_none()).await;
    if !quit {
        tmux(&socket, &["kill-server"]);
    }
    assert!(refreshed, "the table was not refreshed:\n{screen}");
    assert!(quit, "q did not quit");
}

#[tokio::test]
async fn tollgate_top_at_a_data_port_says_where_the_operators_paths_are() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n[policies.api]\ncapacity = 3\nperiod = \"1h\"\n",
    )
    .unwrap();
    let server = Tollgate::start(&["--config", path.to_str().unwrap()]);
    let top = |addr: std::net::SocketAddr| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["top", "--once", "--url", &format!("http://{addr}")])
            .env_remove("TOLLGATE_TOKEN")
            .output()
            .unwrap()
    };
    // The data port serves neither /v1/status nor /v1/policies: an error naming the admin
    // listener, not an empty table.
    let data = top(server.addr);
    let stderr = String::from_utf8_lossy(&data.stderr);
    assert!(!data.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("admin listener (http://{})", server.admin_addr())),
        "{stderr}"
    );
    let admin = top(server.admin_addr());
    let stdout = String::from_utf8_lossy(&admin.stdout);
    assert!(
        admin.status.success(),
        "{}",
        String::from_utf8_lossy(&admin.stderr)
    );
    assert!(
        stdout.contains("api") && stdout.contains("3/1h"),
        "{stdout}"
    );
}
