//! A server with `[auth]` tokens on all three front ends, and clients that show a token in
//! each protocol's way.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use reqwest::{Client, Method, StatusCode, header::HeaderMap};
use serde_json::Value;

use super::Tollgate;

/// `app`'s secret (a file): it may decide.
pub const APP: &str = "app-9f2c4e71b0d5a3";
/// `viewer`'s secret (an environment variable): it may read.
pub const VIEWER: &str = "viewer-5d83aa10e4";
/// `ops`'s secret (a file): it may do everything.
pub const OPS: &str = "ops-c1e07b6d29f48e";
/// A secret no token has.
pub const WRONG: &str = "wrong-0000000000";
/// The variable `viewer`'s secret is in.
pub const VIEWER_ENV: &str = "TOLLGATE_TEST_VIEWER_SECRET";

/// The config file: HTTP, RESP and gRPC (a token-bucket domain `d` with descriptor `k`), the
/// policy `api`, and the tokens, `viewer`'s scopes as given.
pub fn config_text(viewer_scopes: &str) -> String {
    format!(
        "[resp]\nlisten = \"127.0.0.1:0\"\n\n\
         [grpc]\nlisten = \"127.0.0.1:0\"\nconfig_dir = \"envoy\"\nalgorithm = \"token_bucket\"\n\n\
         [policies.api]\ncapacity = 100\nrefill = 100\nperiod = \"1s\"\n\n\
         [auth.tokens.app]\nsecret_file = \"app.secret\"\nscopes = [\"check\"]\n\n\
         [auth.tokens.viewer]\nsecret_env = \"{VIEWER_ENV}\"\nscopes = {viewer_scopes}\n\n\
         [auth.tokens.ops]\nsecret_file = \"secrets/ops\"\nscopes = [\"check\", \"read\", \"admin\"]\n"
    )
}

/// A directory holding the config file ([`config_text`] with `viewer` reading only), the
/// secret files and the Envoy directory; the directory and the config file's path.
pub fn configured() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let envoy = dir.path().join("envoy");
    std::fs::create_dir(&envoy).unwrap();
    std::fs::write(
        envoy.join("d.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
    )
    .unwrap();
    // As `echo` writes them: the newline is not part of the secret.
    std::fs::write(dir.path().join("app.secret"), format!("{APP}\n")).unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/ops"), OPS).unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config_text("[\"read\"]")).unwrap();
    (dir, path)
}

/// Starts a server on `config`, `viewer`'s secret in its environment.
pub fn start(config: &Path) -> Tollgate {
    Tollgate::start_with_env(
        &["--config", config.to_str().unwrap()],
        &[(VIEWER_ENV, VIEWER)],
    )
}

/// `method path` with `body` (JSON), showing `token` as a bearer token: the status, the
/// headers and the body.
pub async fn send(
    client: &Client,
    server: &Tollgate,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, HeaderMap, String) {
    let mut request = client.request(method, format!("http://{}{path}", server.addr));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

/// `ShouldRateLimit(request)` with `token` in the `authorization` metadata.
pub async fn grpc(
    addr: SocketAddr,
    request: RateLimitRequest,
    token: Option<&str>,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut client = super::envoy::client(addr).await;
    let mut request = tonic::Request::new(request);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    client
        .should_rate_limit(request)
        .await
        .map(tonic::Response::into_inner)
}

/// Sends `bytes` on a new RESP connection and reads until the server closes it (or is
/// silent for 5 s, or resets it); what came back.
pub fn resp(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(out).unwrap()
}

/// A RESP command, as clients encode it.
pub fn command(args: &[&str]) -> String {
    let mut out = format!("*{}\r\n", args.len());
    for arg in args {
        out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    out
}
