//! `[auth]`: named bearer tokens with scopes, on every front end. Without a token, with a
//! wrong one, and with one lacking the scope, each front end refuses in its protocol's words
//! (HTTP 401/403 problem+json, gRPC UNAUTHENTICATED/PERMISSION_DENIED, RESP
//! NOAUTH/WRONGPASS/NOPERM); with the scope it answers. Reloads change scopes, secrets never
//! show, and an address that keeps guessing is refused for a while (tests/it/security.rs).

use std::time::Duration;

use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use tollgate::Clock;
use tonic::Code;

use crate::support::auth::{
    APP, OPS, VIEWER, VIEWER_ENV, WRONG, command, config_text, configured, grpc, resp, send, start,
};
use crate::support::envoy::{descriptor, request};
use crate::support::{Tollgate, config_check, metric};

const NOT_AUTHENTICATED: [Option<&str>; 2] = [None, Some(WRONG)];

#[tokio::test]
async fn http_endpoints_need_a_token_with_their_scope() {
    let (_dir, config) = configured();
    let server = start(&config);
    let client = Client::new();
    let check = json!({"policy": "api", "key": "alice"});
    let refund = json!({"domain": "d", "descriptors": [
        {"entries": [{"key": "k", "value": "v"}], "isNegativeHits": true}
    ]});
    // (method, path, body, the token lacking the scope, the token holding it)
    let cases: [(Method, &str, Option<Value>, &str, &str); 8] = [
        (Method::POST, "/v1/check", Some(check.clone()), VIEWER, APP),
        (Method::POST, "/v1/reserve", Some(check), VIEWER, APP),
        (Method::GET, "/v1/buckets/api/alice", None, APP, VIEWER),
        (Method::GET, "/v1/policies", None, APP, VIEWER),
        (Method::DELETE, "/v1/buckets/api/alice", None, APP, OPS),
        (Method::GET, "/metrics", None, VIEWER, OPS),
        (Method::GET, "/rlconfig", None, APP, OPS),
        (Method::POST, "/json", Some(refund), APP, OPS),
    ];
    for (method, path, body, lacking, holding) in cases {
        for token in NOT_AUTHENTICATED {
            let (status, headers, text) =
                send(&client, &server, method.clone(), path, token, body.clone()).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} {token:?}: {text}"
            );
            assert!(
                headers["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .starts_with("Bearer"),
                "{headers:?}"
            );
            assert_eq!(headers["content-type"], "application/problem+json");
            let problem: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(problem["status"], 401, "{problem}");
        }
        let (status, headers, text) = send(
            &client,
            &server,
            method.clone(),
            path,
            Some(lacking),
            body.clone(),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {text}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert!(text.contains("scope"), "{text}");
        let (status, _, text) =
            send(&client, &server, method.clone(), path, Some(holding), body).await;
        assert!(
            status.is_success(),
            "{method} {path} as allowed: {status} {text}"
        );
    }
    // A commit that gives back part of its own reservation is deciding, not a refund.
    let (_, _, reserved) = send(
        &client,
        &server,
        Method::POST,
        "/v1/reserve",
        Some(APP),
        Some(json!({"policy": "api", "key": "bob", "cost": 5})),
    )
    .await;
    let reservation = serde_json::from_str::<Value>(&reserved).unwrap()["reservation"].clone();
    let (status, _, text) = send(
        &client,
        &server,
        Method::POST,
        "/v1/commit",
        Some(APP),
        Some(json!({"reservation": reservation, "used": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // Another token's reservation is not to commit, even for a token that may decide.
    let (_, _, reserved) = send(
        &client,
        &server,
        Method::POST,
        "/v1/reserve",
        Some(APP),
        Some(json!({"policy": "api", "key": "carol", "cost": 5})),
    )
    .await;
    let reservation = serde_json::from_str::<Value>(&reserved).unwrap()["reservation"].clone();
    let commit = json!({"reservation": reservation, "used": 0});
    let (status, _, text) = send(
        &client,
        &server,
        Method::POST,
        "/v1/commit",
        Some(OPS),
        Some(commit.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("only it may commit it"), "{text}");
    let (status, _, text) = send(
        &client,
        &server,
        Method::POST,
        "/v1/commit",
        Some(APP),
        Some(commit),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "its own token commits it: {text}");
    // Probes need no token, and a wrong one there is neither refused nor counted.
    for path in ["/healthz", "/readyz"] {
        for token in [None, Some(WRONG)] {
            let (status, _, _) = send(&client, &server, Method::GET, path, token, None).await;
            assert_eq!(status, StatusCode::OK, "{path} {token:?}");
        }
    }
    // A path that does not exist, or a method a path does not take, is refused before it is
    // told so: without a token nothing about the routes shows.
    for (method, path) in [(Method::GET, "/nope"), (Method::PUT, "/v1/check")] {
        let (status, _, text) = send(&client, &server, method.clone(), path, None, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {text}");
    }
    // Every refusal for want of a valid token was counted.
    let (_, _, metrics) = send(&client, &server, Method::GET, "/metrics", Some(OPS), None).await;
    assert_eq!(
        metric(&metrics, "tollgate_auth_failures_total{frontend=\"http\"}"),
        18.0
    );
    assert_eq!(
        metric(&metrics, "tollgate_auth_failures_total{frontend=\"grpc\"}"),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_need_a_token_with_their_scope() {
    let (_dir, config) = configured();
    let server = start(&config);
    let addr = server.grpc_addr();
    let check = || request("d", vec![descriptor(&[("k", "v")])]);
    let refund = || {
        let mut back = descriptor(&[("k", "v")]);
        back.is_negative_hits = true;
        request("d", vec![back])
    };
    for token in NOT_AUTHENTICATED {
        let refused = grpc(addr, check(), token).await.unwrap_err();
        assert_eq!(
            refused.code(),
            Code::Unauthenticated,
            "{token:?}: {refused:?}"
        );
    }
    let refused = grpc(addr, check(), Some(VIEWER)).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("check"), "{refused:?}");
    let decided = grpc(addr, check(), Some(APP)).await.unwrap();
    assert_eq!(decided.statuses[0].limit_remaining, 99);
    // Giving hits back is a refund: an administrator's.
    for token in [None, Some(WRONG)] {
        let refused = grpc(addr, refund(), token).await.unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    }
    let refused = grpc(addr, refund(), Some(APP)).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    grpc(addr, refund(), Some(OPS)).await.unwrap();
    let decided = grpc(addr, check(), Some(APP)).await.unwrap();
    assert_eq!(
        decided.statuses[0].limit_remaining, 99,
        "the refund gave one back"
    );

    // The health service, as /healthz, needs no token.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: "ratelimit".to_owned(),
        })
        .await
        .expect("a health answer without a token");
    assert_eq!(health.into_inner().status, 1, "SERVING");

    let client = Client::new();
    let (_, _, metrics) = send(&client, &server, Method::GET, "/metrics", Some(OPS), None).await;
    assert_eq!(
        metric(&metrics, "tollgate_auth_failures_total{frontend=\"grpc\"}"),
        4.0
    );
}

#[test]
fn resp_commands_need_a_token_with_their_scope() {
    let (_dir, config) = configured();
    let server = start(&config);
    let addr = server.resp_addr();
    let decide = command(&["TOLLGATE.CHECK", "api", "carol"]);
    assert_eq!(
        resp(addr, decide.as_bytes()),
        "-NOAUTH Authentication required.\r\n"
    );
    // The Redis 6 ACL form, the single-password form and HELLO's, each with a wrong secret.
    for auth in [
        command(&["AUTH", "app", WRONG]),
        command(&["AUTH", "ops", APP]),
        command(&["AUTH", WRONG]),
        command(&["HELLO", "3", "AUTH", "app", WRONG]),
    ] {
        assert_eq!(
            resp(addr, format!("{auth}{decide}").as_bytes()),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n\
             -NOAUTH Authentication required.\r\n",
            "{auth}"
        );
    }
    // A token without `check` may connect, not decide: Redis 7.0's NOPERM.
    let viewer = command(&["AUTH", "viewer", VIEWER]);
    let throttle = command(&["CL.THROTTLE", "carol", "5", "5", "1"]);
    assert_eq!(
        resp(
            addr,
            format!("{viewer}{decide}{throttle}PING\r\n").as_bytes()
        ),
        "+OK\r\n\
         -NOPERM this user has no permissions to run the 'tollgate.check' command\r\n\
         -NOPERM this user has no permissions to run the 'cl.throttle' command\r\n\
         +PONG\r\n"
    );
    for auth in [
        command(&["AUTH", "app", APP]),
        command(&["AUTH", APP]),
        command(&["AUTH", "ops", OPS]),
    ] {
        let replies = resp(addr, format!("{auth}{decide}").as_bytes());
        assert!(replies.starts_with("+OK\r\n*5\r\n"), "{auth}: {replies}");
    }
    // redis-cli's --user/--pass send the ACL form.
    let cli = |user: &str, pass: &str| {
        let out = std::process::Command::new("redis-cli")
            .args([
                "-p",
                &addr.port().to_string(),
                "--user",
                user,
                "--pass",
                pass,
            ])
            .args(["--no-auth-warning", "TOLLGATE.CHECK", "api", "carol"])
            .output()
            .expect("redis-cli runs (scripts/test --install installs redis-tools)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        cli("app", APP).starts_with("1\n100\n"),
        "{}",
        cli("app", APP)
    );
    assert_eq!(
        cli("viewer", VIEWER),
        "NOPERM this user has no permissions to run the 'tollgate.check' command\n\n"
    );
}

#[tokio::test]
async fn the_resp_password_is_the_default_user_deciding_beside_the_tokens() {
    let (dir, config) = configured();
    let text = config_text("[\"read\"]").replace(
        "[resp]\nlisten = \"127.0.0.1:0\"\n",
        "[resp]\nlisten = \"127.0.0.1:0\"\npassword = \"pw-for-default\"\n",
    );
    std::fs::write(&config, &text).unwrap();
    let server = start(&config);
    let decide = command(&["TOLLGATE.CHECK", "api", "dave"]);
    for auth in [
        command(&["AUTH", "pw-for-default"]),
        command(&["AUTH", "default", "pw-for-default"]),
        command(&["AUTH", "app", APP]),
    ] {
        let replies = resp(server.resp_addr(), format!("{auth}{decide}").as_bytes());
        assert!(replies.starts_with("+OK\r\n*5\r\n"), "{auth}: {replies}");
    }
    // The password is RESP's: it opens nothing over HTTP.
    let body = Some(json!({"policy": "api", "key": "dave"}));
    let (status, _, _) = send(
        &Client::new(),
        &server,
        Method::POST,
        "/v1/check",
        Some("pw-for-default"),
        body,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A token cannot take the password's user name.
    let clash = text.replace("[auth.tokens.app]", "[auth.tokens.default]");
    let clash_file = dir.path().join("clash.toml");
    std::fs::write(&clash_file, clash).unwrap();
    let (ok, _, err) = config_check(&clash_file);
    assert!(!ok);
    assert!(
        err.contains("auth.tokens.default") && err.contains("[resp] password"),
        "{err}"
    );
}

#[test]
fn a_thousand_wrong_auths_pipelined_block_the_address_at_the_twentieth() {
    let (_dir, config) = configured();
    let server = start(&config);
    let wrong = command(&["AUTH", "app", WRONG]).repeat(1_000);
    let replies = resp(server.resp_addr(), wrong.as_bytes());
    let wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    let (before, last) = replies.split_at(wrongpass.len() * 19);
    assert_eq!(before, wrongpass.repeat(19));
    // The twentieth blocks the address, and closes the connection.
    assert!(
        last.starts_with("-ERR too many failed authentications from this address")
            && last.matches("\r\n").count() == 1,
        "{last}"
    );
}

#[tokio::test]
async fn a_reload_that_changes_a_tokens_scopes_takes_effect() {
    let (_dir, config) = configured();
    let server = start(&config);
    let client = Client::new();
    let check = || Some(json!({"policy": "api", "key": "erin"}));
    let (status, _, _) = send(
        &client,
        &server,
        Method::POST,
        "/v1/check",
        Some(VIEWER),
        check(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // viewer may now decide; app may only read.
    let text = config_text("[\"read\", \"check\"]").replace(
        "secret_file = \"app.secret\"\nscopes = [\"check\"]",
        "secret_file = \"app.secret\"\nscopes = [\"read\"]",
    );
    crate::support::envoy::write(config.parent().unwrap(), &[("tollgate.toml", &text)]);
    eventually("the reload", async || {
        let (status, _, _) = send(
            &client,
            &server,
            Method::POST,
            "/v1/check",
            Some(VIEWER),
            check(),
        )
        .await;
        status == StatusCode::OK
    })
    .await;
    let (status, _, _) = send(
        &client,
        &server,
        Method::POST,
        "/v1/check",
        Some(APP),
        check(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "app no longer decides");
    // A connection authenticated before the reload has its new scopes too.
    let decide = command(&["TOLLGATE.CHECK", "api", "erin"]);
    for (token, secret, allowed) in [("viewer", VIEWER, true), ("app", APP, false)] {
        let replies = resp(
            server.resp_addr(),
            format!("{}{decide}", command(&["AUTH", token, secret])).as_bytes(),
        );
        let decided = replies.starts_with("+OK\r\n*5\r\n");
        assert_eq!(decided, allowed, "{token}: {replies}");
    }

    // A bad auth table is refused as a whole: the running tokens stay.
    let bad = text.replace("secrets/ops", "secrets/missing");
    crate::support::envoy::write(config.parent().unwrap(), &[("tollgate.toml", &bad)]);
    let failed = "tollgate_config_reloads_total{result=\"failure\"}";
    eventually("the refusal of the bad edit", async || {
        let (_, _, metrics) =
            send(&client, &server, Method::GET, "/metrics", Some(OPS), None).await;
        metric(&metrics, failed) >= 1.0
    })
    .await;
    let (status, _, _) = send(
        &client,
        &server,
        Method::POST,
        "/v1/check",
        Some(VIEWER),
        check(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "the reloaded scopes stay in force");
}

#[tokio::test]
async fn secrets_never_show_in_logs_nor_in_config_check() {
    let (dir, config) = configured();
    let (server, logs) = Tollgate::start_logged(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
        &[(VIEWER_ENV, VIEWER), ("RUST_LOG", "trace")],
    );
    let client = Client::new();
    for token in [APP, VIEWER, OPS, WRONG] {
        let body = Some(json!({"policy": "api", "key": "frank"}));
        send(
            &client,
            &server,
            Method::POST,
            "/v1/check",
            Some(token),
            body,
        )
        .await;
        resp(
            server.resp_addr(),
            format!("{}PING\r\n", command(&["AUTH", "app", token])).as_bytes(),
        );
    }
    // A reload logs what it loaded, and a refused one why.
    std::fs::write(&config, config_text("[\"read\", \"admin\"]")).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::write(dir.path().join("app.secret"), "").unwrap();
    std::fs::write(&config, config_text("[\"read\"]")).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(server);
    let text = logs.text();
    assert!(text.contains("config reloaded"), "{text}");
    assert!(text.contains("holds no secret"), "{text}");
    for secret in [APP, VIEWER, OPS, WRONG] {
        assert!(!text.contains(secret), "{secret} in the logs:\n{text}");
    }

    std::fs::write(dir.path().join("app.secret"), APP).unwrap();
    let (ok, out, err) = config_check(&config);
    // The variable is not set for `config check` here: it says so, and shows no secret.
    assert!(!ok);
    assert!(
        err.contains(VIEWER_ENV) && err.contains("is not set"),
        "{err}"
    );
    let out_of_env = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["config", "check"])
        .arg(&config)
        .env(VIEWER_ENV, VIEWER)
        .output()
        .unwrap();
    let printed = format!(
        "{out}{err}{}{}",
        String::from_utf8_lossy(&out_of_env.stdout),
        String::from_utf8_lossy(&out_of_env.stderr)
    );
    assert!(out_of_env.status.success(), "{printed}");
    assert!(printed.contains("auth.tokens.viewer: read"), "{printed}");
    for secret in [APP, VIEWER, OPS] {
        assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
    }
}

#[test]
fn a_secret_written_in_the_config_file_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[auth.tokens.app]\nsecret = \"plain-text-secret\"\nscopes = [\"check\"]\n",
            "auth.tokens.app.secret: a secret is never written in the config file",
        ),
        (
            "[auth.tokens.app]\nscopes = [\"check\"]\n",
            "auth.tokens.app: the token needs a secret: secret_file",
        ),
        (
            "[auth.tokens.app]\nsecret_file = \"nowhere\"\nscopes = [\"check\"]\n",
            "auth.tokens.app.secret_file: cannot read",
        ),
        (
            "[auth.tokens.app]\nsecret_env = \"TOLLGATE_TEST_NO_SUCH_VARIABLE\"\nscopes = []\n",
            "auth.tokens.app.secret_env: the environment variable TOLLGATE_TEST_NO_SUCH_VARIABLE is not set",
        ),
        (
            "[auth.tokens.app]\nsecret_env = \"PATH\"\nscopes = [\"everything\"]\n",
            "auth.tokens.app.scopes",
        ),
        (
            "[auth.tokens.a]\nsecret_env = \"PATH\"\nscopes = [\"check\"]\n\
             [auth.tokens.b]\nsecret_env = \"PATH\"\nscopes = [\"admin\"]\n",
            "auth.tokens.b: has the same secret as auth.tokens.a",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let file = crate::support::write(dir.path(), &format!("c{i}.toml"), text);
        let (ok, _, err) = config_check(&file);
        assert!(!ok, "{text}");
        assert!(err.contains(expected), "{text}: {err}");
        assert!(!err.contains("plain-text-secret"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secrets_are_answered_ever_later_across_front_ends() {
    let (_dir, config) = configured();
    let server = start(&config);
    let clock = tollgate::MonotonicClock::new();
    let elapsed = |since: tollgate::Nanos| Duration::from(clock.now() - since);
    // Seven wrong secrets pipelined on one HTTP/1.1 connection (a client's pool may open
    // another at any time), the last asking to close it: the first at once, then 10 ms more
    // each time, 10 + 20 + ... + 60 = 210 ms in all.
    let mut requests =
        format!("GET /v1/policies HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {WRONG}\r\n\r\n")
            .repeat(6);
    requests.push_str(&format!(
        "GET /v1/policies HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {WRONG}\r\n\
         Connection: close\r\n\r\n"
    ));
    let started = clock.now();
    let answers = {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(requests.as_bytes()).unwrap();
        let mut answers = String::new();
        stream.read_to_string(&mut answers).unwrap();
        answers
    };
    assert_eq!(
        answers.matches("HTTP/1.1 401 Unauthorized").count(),
        7,
        "{answers}"
    );
    let http = elapsed(started);
    assert!(http >= Duration::from_millis(210), "HTTP: {http:?}");

    // The address's count goes on over gRPC: the 8th to 13th, 70 + ... + 120 = 570 ms.
    let mut grpc_client = crate::support::envoy::client(server.grpc_addr()).await;
    let started = clock.now();
    for _ in 0..6 {
        let mut call = tonic::Request::new(request("d", vec![descriptor(&[("k", "v")])]));
        let bearer = format!("Bearer {WRONG}").parse().unwrap();
        call.metadata_mut().insert("authorization", bearer);
        let refused = grpc_client.should_rate_limit(call).await.unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated);
    }
    let grpc = elapsed(started);
    assert!(grpc >= Duration::from_millis(570), "gRPC: {grpc:?}");

    // And over RESP: the 14th to 19th, 130 + ... + 180 = 930 ms.
    let started = clock.now();
    resp(
        server.resp_addr(),
        command(&["AUTH", "app", WRONG]).repeat(6).as_bytes(),
    );
    let resp_took = elapsed(started);
    assert!(
        resp_took >= Duration::from_millis(930),
        "RESP: {resp_took:?}"
    );
}

#[tokio::test]
async fn a_sighup_reads_a_rotated_secret_file_again() {
    let (dir, config) = configured();
    let server = start(&config);
    let client = Client::new();
    let check = || Some(json!({"policy": "api", "key": "gina"}));
    let rotated = "app-rotated-3b9d07e2";
    std::fs::write(dir.path().join("app.secret"), rotated).unwrap();
    // The config file is unchanged: only the signal reads the secret again. It is sent again
    // until it is seen: the server may not be watching for it yet just after it started.
    // Asked with ops's token, which stays: the rotated secret is not tried before it is in
    // force (each wrong try counts against the address).
    let clock = tollgate::MonotonicClock::new();
    let started = clock.now();
    let reloaded = "tollgate_config_reloads_total{result=\"success\"}";
    loop {
        let status = std::process::Command::new("kill")
            .args(["-HUP", &server.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (_, _, metrics) =
            send(&client, &server, Method::GET, "/metrics", Some(OPS), None).await;
        if metric(&metrics, reloaded) >= 1.0 {
            break;
        }
        let waited = Duration::from(clock.now() - started);
        assert!(waited < Duration::from_secs(20), "never reloaded");
    }
    let (status, _, _) = send(
        &client,
        &server,
        Method::POST,
        "/v1/check",
        Some(rotated),
        check(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "the rotated secret is in force");
    let (status, _, _) = send(
        &client,
        &server,
        Method::POST,
        "/v1/check",
        Some(APP),
        check(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the old secret is gone");
}

/// Waits until `ready`, asking every 50 ms, for at most 10 s.
async fn eventually(what: &str, mut ready: impl AsyncFnMut() -> bool) {
    let mut waited = Duration::ZERO;
    while !ready().await {
        assert!(waited < Duration::from_secs(10), "{what} never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
}
