//! Issue 47, point 2: the binary started as `ratelimit` (as Envoy Gateway's image runs it)
//! with only envoyproxy/ratelimit's environment: decisions from `RUNTIME_ROOT` on a real
//! redis-server, `/healthcheck` as upstream answers it, and refusals that name the variable.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;
use tollgate::{Clock, MonotonicClock, Nanos};
use tollgate_server::descriptors::config::EnvoyConfig;
use tollgate_testkit::{Reply, TestCa, TestRedis};

use crate::support::envoy::{ask, client, codes, descriptor, request, write};
use crate::support::{Logs, Tollgate};

const CONFIG: &str = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";

/// A directory holding a link named `ratelimit` to the tollgate binary.
pub(crate) fn ratelimit_program() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), &link).unwrap();
    (dir, link)
}

/// `RUNTIME_ROOT` with `ratelimit/config/config.yaml` in it.
fn runtime_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("ratelimit").join("config");
    std::fs::create_dir_all(&config).unwrap();
    write(&config, &[("config.yaml", CONFIG)]);
    root
}

/// Every listener on a free loopback port, statsd off (upstream's default sink is statsd).
pub(crate) const PORTS: [(&str, &str); 7] = [
    ("HOST", "127.0.0.1"),
    ("PORT", "0"),
    ("GRPC_HOST", "127.0.0.1"),
    ("GRPC_PORT", "0"),
    ("DEBUG_HOST", "127.0.0.1"),
    ("DEBUG_PORT", "0"),
    ("USE_STATSD", "false"),
];

fn start(program: &Path, extra: &[(&str, &str)]) -> (Tollgate, Logs) {
    let env: Vec<(&str, &str)> = PORTS.iter().chain(extra).copied().collect();
    Tollgate::start_as(program, &env)
}

async fn healthcheck(addr: std::net::SocketAddr) -> (StatusCode, String) {
    let response = reqwest::get(format!("http://{addr}/healthcheck"))
        .await
        .unwrap();
    (response.status(), response.text().await.unwrap())
}

#[tokio::test]
async fn started_as_ratelimit_it_serves_runtime_root_on_redis() {
    let redis = TestRedis::start().expect("start redis-server");
    let (_bin, program) = ratelimit_program();
    let root = runtime_root();
    let redis_addr = format!("127.0.0.1:{}", redis.port());
    let (server, logs) = start(
        &program,
        &[
            ("RUNTIME_ROOT", root.path().to_str().unwrap()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &redis_addr),
            ("LOG_LEVEL", "info"),
            ("REDIS_POOL_SIZE", "4"),
        ],
    );
    assert!(
        server.banner.contains("redis at redis://127.0.0.1"),
        "{}",
        server.banner
    );
    let mut grpc = client(server.grpc_addr()).await;
    let ask_once = || request("edge", vec![descriptor(&[("user", "alice")])]);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(codes(&ask(&mut grpc, ask_once()).await).0);
    }
    assert_eq!(seen, ["OK", "OK", "OVER"]);
    // Counted in Redis, not in the process.
    let keys = redis.cmd(&[b"KEYS", b"tollgate:*"]).unwrap();
    assert!(
        matches!(&keys, Reply::Array(items) if !items.is_empty()),
        "{keys:?}"
    );
    assert_eq!(
        healthcheck(server.addr).await,
        (StatusCode::OK, "OK".to_owned())
    );
    // The variable tollgate ignores is said, with why (logged before the banner; read from
    // stderr by a thread of the test's, so asked until it has come).
    let clock = MonotonicClock::new();
    let deadline = clock.now() + Nanos::new(10_000_000_000);
    while !logs.text().contains("REDIS_POOL_SIZE is ignored") {
        assert!(clock.now() < deadline, "{}", logs.text());
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Upstream's debug port: tollgate's admin endpoints, /rlconfig among them.
    let rlconfig = reqwest::get(format!("http://{}/rlconfig", server.admin_addr()))
        .await
        .unwrap();
    assert_eq!(rlconfig.status(), StatusCode::OK);
    assert!(rlconfig.text().await.unwrap().contains("edge.user"));
}

/// `/healthcheck` is 500 until a config has been loaded when the Envoy front end is told to
/// wait for one (what `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` sets), then 200 once the same
/// path every loader takes (`Envoy::reload`) puts one in force; 500 again while stopping.
#[tokio::test]
async fn healthcheck_waits_for_a_first_config_when_asked_to() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("tollgate.toml");
    std::fs::write(
        &toml,
        "[grpc]\nlisten = \"127.0.0.1:0\"\nhealth_needs_config = true\n",
    )
    .unwrap();
    let settings = tollgate_server::cli::serve_settings([
        "--listen",
        "127.0.0.1:0",
        "--config",
        toml.to_str().unwrap(),
    ])
    .unwrap();
    let server = tollgate_server::Server::bind(settings).await.unwrap();
    let addr = server.local_addr();
    let envoy = Arc::clone(server.envoy().expect("gRPC is on"));
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(server.run(shutdown.clone()));
    assert_eq!(
        healthcheck(addr).await,
        (StatusCode::INTERNAL_SERVER_ERROR, String::new())
    );
    let yaml = dir.path().join("envoy");
    std::fs::create_dir(&yaml).unwrap();
    write(&yaml, &[("config.yaml", CONFIG)]);
    envoy
        .reload(EnvoyConfig::load_dir(&yaml, false).unwrap())
        .unwrap();
    assert_eq!(healthcheck(addr).await, (StatusCode::OK, "OK".to_owned()));
    envoy.stopping();
    assert_eq!(healthcheck(addr).await.0, StatusCode::INTERNAL_SERVER_ERROR);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

/// Without the variable, a server with no config yet is healthy, as upstream's is.
#[tokio::test]
async fn healthcheck_is_ok_without_a_config_unless_asked_to_wait() {
    let (_bin, program) = ratelimit_program();
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("config")).unwrap();
    let (server, _logs) = start(
        &program,
        &[
            ("RUNTIME_ROOT", root.path().to_str().unwrap()),
            ("REDIS_SOCKET_TYPE", "tcp"),
            // Nothing listens there: the fail policy answers meanwhile, and health says OK.
            ("REDIS_URL", "127.0.0.1:1"),
        ],
    );
    assert_eq!(
        healthcheck(server.addr).await,
        (StatusCode::OK, "OK".to_owned())
    );
}

/// Runs the program with `env` (and `PATH`) alone, and returns its exit code and stderr.
fn refused(program: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(PORTS.iter().copied())
        .envs(env.iter().copied());
    let output = command
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Variables set, and what stderr must say.
type Refusal<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);

#[test]
fn refused_variables_name_themselves() {
    let (_bin, program) = ratelimit_program();
    let cases: &[Refusal<'_>] = &[
        (
            &[("BACKEND_TYPE", "memcache")],
            &["BACKEND_TYPE", "memcache"],
        ),
        (
            &[
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_URL", "mymaster,127.0.0.1:26379"),
            ],
            &["REDIS_SOCKET_TYPE", "sentinels are reached over TCP"],
        ),
        (
            &[
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "127.0.0.1:26379"),
            ],
            &["REDIS_URL", "MASTER_NAME,HOST:PORT"],
        ),
        (
            &[("REDIS_PERSECOND", "true")],
            &["REDIS_PERSECOND", "per-second"],
        ),
        (
            &[("USE_STATSD", "true"), ("USE_PROMETHEUS", "true")],
            &["USE_STATSD, USE_PROMETHEUS", "one stats sink"],
        ),
        // Refused by the config reader, named by the variable behind its key.
        (
            &[("NEAR_LIMIT_RATIO", "1.5")],
            &["NEAR_LIMIT_RATIO", "grpc.near_limit_ratio"],
        ),
        (&[("SHADOW_MODE", "yes")], &["SHADOW_MODE", "not a boolean"]),
        (
            &[("REDIS_PERSECOND_TIMEOUT", "soon")],
            &["REDIS_PERSECOND_TIMEOUT", "not a duration"],
        ),
        (&[("CACHE_KEY_PREFIX", "rl_")], &["CACHE_KEY_PREFIX"]),
    ];
    for (env, says) in cases {
        let (code, stderr) = refused(&program, &[], env);
        assert_eq!(code, 1, "{env:?}: {stderr}");
        for said in *says {
            assert!(
                stderr.contains(said),
                "{env:?}: wanted {said:?} in {stderr}"
            );
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn the_flag_asks_for_the_mode_under_any_name_and_takes_nothing_else() {
    let tollgate = Path::new(env!("CARGO_BIN_EXE_tollgate"));
    let (code, stderr) = refused(
        tollgate,
        &["--envoy-ratelimit-env"],
        &[("BACKEND_TYPE", "memcache")],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("BACKEND_TYPE"), "{stderr}");
    let (code, stderr) = refused(tollgate, &["--envoy-ratelimit-env", "--listen", "1"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("environment"), "{stderr}");
}

/// `REDIS_SOCKET_TYPE=unix` (upstream's default) with `REDIS_URL` the socket's path: the
/// decisions are counted in the redis-server behind the socket.
#[tokio::test]
async fn redis_over_a_unix_socket() {
    let redis = TestRedis::start_unix().expect("start redis-server on a Unix socket");
    let socket = redis.unix_socket().unwrap().to_str().unwrap().to_owned();
    let (_bin, program) = ratelimit_program();
    let root = runtime_root();
    let (server, logs) = start(
        &program,
        &[
            ("RUNTIME_ROOT", root.path().to_str().unwrap()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("REDIS_URL", &socket),
        ],
    );
    assert!(server.banner.contains("redis+unix://"), "{}", server.banner);
    let mut grpc = client(server.grpc_addr()).await;
    let ask_once = || request("edge", vec![descriptor(&[("user", "bob")])]);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(codes(&ask(&mut grpc, ask_once()).await).0);
    }
    assert_eq!(seen, ["OK", "OK", "OVER"], "{}", logs.text());
    let keys = redis.cmd(&[b"KEYS", b"tollgate:*"]).unwrap();
    assert!(
        matches!(&keys, Reply::Array(items) if !items.is_empty()),
        "{keys:?}"
    );
}

/// Envoy Gateway's Redis with TLS and client certificates (`REDIS_TLS`,
/// `REDIS_TLS_CLIENT_CERT`/`KEY`, and the CA the server's certificate is checked against):
/// a redis-server that refuses clients without a certificate its CA signed decides; without
/// the certificate, nothing reaches it.
#[tokio::test]
async fn redis_tls_with_a_client_certificate_the_server_requires() {
    let certs = tempfile::tempdir().unwrap();
    let clients = TestCa::new(certs.path(), "clients").unwrap();
    let (cert, key) = clients
        .sign(certs.path(), "ratelimit", "ratelimit", "DNS:ratelimit")
        .unwrap();
    let redis = TestRedis::start_tls_requiring_clients(&clients.cert).expect("start redis-server");
    let host_port = redis
        .tls_url()
        .unwrap()
        .trim_start_matches("rediss://")
        .to_owned();
    let ca = redis.ca_file().unwrap().to_str().unwrap().to_owned();
    let (_bin, program) = ratelimit_program();
    let root = runtime_root();
    let common = [
        ("RUNTIME_ROOT", root.path().to_str().unwrap()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", host_port.as_str()),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", ca.as_str()),
    ];
    let ask_thrice = |addr| async move {
        let mut grpc = client(addr).await;
        let mut seen = Vec::new();
        for _ in 0..3 {
            let r = request("edge", vec![descriptor(&[("user", "carol")])]);
            seen.push(codes(&ask(&mut grpc, r).await).0);
        }
        seen
    };

    let with_cert: Vec<(&str, &str)> = common
        .iter()
        .copied()
        .chain([
            ("REDIS_TLS_CLIENT_CERT", cert.to_str().unwrap()),
            ("REDIS_TLS_CLIENT_KEY", key.to_str().unwrap()),
        ])
        .collect();
    let (server, logs) = start(&program, &with_cert);
    assert!(
        server.banner.contains("rediss://localhost"),
        "{}",
        server.banner
    );
    assert_eq!(
        ask_thrice(server.grpc_addr()).await,
        ["OK", "OK", "OVER"],
        "{}",
        logs.text()
    );
    // Carol's bucket is in Redis.
    let keys = redis.cmd(&[b"KEYS", b"tollgate:v3:*carol*"]).unwrap();
    assert!(
        matches!(&keys, Reply::Array(items) if items.len() == 1),
        "{keys:?}"
    );
    drop(server);

    // The server's handshake refuses a client without a certificate: every call fails, and
    // the fail policy (allow, as Envoy's default failure mode) answers.
    let (server, logs) = start(&program, &common);
    assert_eq!(
        ask_thrice(server.grpc_addr()).await,
        ["OK", "OK", "OK"],
        "{}",
        logs.text()
    );
}

/// `GRPC_UDS`: gRPC on a Unix socket instead of `GRPC_HOST:GRPC_PORT`, asked by a tonic client
/// over that socket.
#[tokio::test]
async fn grpc_over_a_unix_socket() {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    let sockets = tempfile::tempdir().unwrap();
    let socket = sockets.path().join("ratelimit.sock");
    let (_bin, program) = ratelimit_program();
    let root = runtime_root();
    let redis = TestRedis::start().expect("start redis-server");
    let redis_addr = format!("127.0.0.1:{}", redis.port());
    let (server, logs) = start(
        &program,
        &[
            ("RUNTIME_ROOT", root.path().to_str().unwrap()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &redis_addr),
            ("GRPC_UDS", socket.to_str().unwrap()),
        ],
    );
    assert!(
        server
            .banner
            .contains(&format!("grpc+unix://{}", socket.display())),
        "{}",
        server.banner
    );
    // Upstream listens on the socket alone.
    assert!(!server.banner.contains("grpc://"), "{}", server.banner);
    let path = socket.clone();
    let channel = tonic::transport::Endpoint::from_static("http://ratelimit.invalid")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .expect("connect over the Unix socket");
    let mut grpc = RateLimitServiceClient::new(channel);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = request("edge", vec![descriptor(&[("user", "dave")])]);
        seen.push(codes(&ask(&mut grpc, r).await).0);
    }
    assert_eq!(seen, ["OK", "OK", "OVER"], "{}", logs.text());
}

/// A mapping of the test's own, shaped as Envoy Gateway's (its statsd_conf.yaml): globs for a
/// domain and one key, regexes for deeper keys with `key2`, `match_metric_type`; and a drop.
const MAPPER: &str = r#"
mappings:
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    name: "dropped"
    action: drop
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.total_hits"
    match_type: regex
    name: "ratelimit_service_rate_limit_total_hits"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.over_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_over_limit"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.near_limit"
    match_type: regex
    action: drop
  - match: "ratelimit.service.config_load_success"
    name: "ratelimit_service_config_load_success"
    match_metric_type: counter
  - match: "ratelimit_server.*.total_requests"
    name: "ratelimit_service_total_requests"
    match_metric_type: counter
    labels:
      grpc_method: "$1"
"#;

/// Rules as Envoy Gateway's translator shapes them: a route's key and value with a header's
/// key under it, and a key and value alone.
const GATEWAY_RULES: &str = "domain: edge\ndescriptors:\n  - key: rule-0-match-0\n    \
    value: rule-0-match-0\n    descriptors:\n      - key: x-user\n        \
    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: route\n    value: a\n    \
    rate_limit: {unit: minute, requests_per_unit: 1}\n";

/// Envoy Gateway's metrics variables (`USE_STATSD=false`, `USE_PROMETHEUS=true`,
/// `PROMETHEUS_ADDR`, `PROMETHEUS_MAPPER_YAML`): upstream's statsd names of the decisions made,
/// under the names and labels the mapping gives, in a scrape promtool reads.
#[tokio::test]
async fn use_prometheus_serves_the_names_the_mapper_gives() {
    let redis = TestRedis::start().expect("start redis-server");
    let redis_addr = format!("127.0.0.1:{}", redis.port());
    let (_bin, program) = ratelimit_program();
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("ratelimit").join("config");
    std::fs::create_dir_all(&config).unwrap();
    write(&config, &[("config.yaml", GATEWAY_RULES)]);
    let mapper_dir = tempfile::tempdir().unwrap();
    let mapper = mapper_dir.path().join("conf.yaml");
    std::fs::write(&mapper, MAPPER).unwrap();
    let (server, _logs) = start(
        &program,
        &[
            ("RUNTIME_ROOT", root.path().to_str().unwrap()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &redis_addr),
            ("USE_PROMETHEUS", "true"),
            // Port 0: the banner says which port it got.
            ("PROMETHEUS_ADDR", "127.0.0.1:0"),
            ("PROMETHEUS_MAPPER_YAML", mapper.to_str().unwrap()),
        ],
    );
    let mut grpc = client(server.grpc_addr()).await;
    let route = || request("edge", vec![descriptor(&[("route", "a")])]);
    let user = || {
        request(
            "edge",
            vec![descriptor(&[
                ("rule-0-match-0", "rule-0-match-0"),
                ("x-user", "alice"),
            ])],
        )
    };
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(codes(&ask(&mut grpc, route()).await).0);
        seen.push(codes(&ask(&mut grpc, user()).await).0);
    }
    assert_eq!(seen, ["OK", "OK", "OVER", "OK", "OVER", "OVER"]);
    // A request upstream refuses as a service error: an empty domain.
    let refused = grpc
        .should_rate_limit(request("", vec![descriptor(&[("route", "a")])]))
        .await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::InvalidArgument);

    let base = format!("http://{}", server.prometheus_addr());
    let scrape = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(scrape.status(), StatusCode::OK);
    let text = scrape.text().await.unwrap();
    let hits = "ratelimit_service_rate_limit_total_hits";
    let over = "ratelimit_service_rate_limit_over_limit";
    let route_labels = r#"{domain="edge",key1="route_a"}"#;
    let user_labels = r#"{domain="edge",key1="rule-0-match-0_rule-0-match-0",key2="x-user"}"#;
    for (series, count) in [
        (format!("{hits}{route_labels}"), 3.0),
        (format!("{over}{route_labels}"), 2.0),
        (format!("{hits}{user_labels}"), 3.0),
        (format!("{over}{user_labels}"), 1.0),
        // Unmapped: statsd_exporter's name, the statsd name's dots as `_`.
        (
            "ratelimit_service_rate_limit_edge_route_a_within_limit".to_owned(),
            1.0,
        ),
        ("ratelimit_service_config_load_success".to_owned(), 1.0),
        ("ratelimit_service_config_load_error".to_owned(), 0.0),
        (
            r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}"#.to_owned(),
            7.0,
        ),
        (
            "ratelimit_service_call_should_rate_limit_service_error".to_owned(),
            1.0,
        ),
        (
            "ratelimit_service_call_should_rate_limit_redis_error".to_owned(),
            0.0,
        ),
    ] {
        assert_eq!(crate::support::metric(&text, &series), count, "{series}");
    }
    assert!(text.contains(&format!("# TYPE {hits} counter\n")), "{text}");
    assert!(!text.contains("near_limit"), "dropped:\n{text}");
    assert!(!text.contains("dropped"), "{text}");
    crate::support::promtool_check_upstream_names(&text);
    // One path, upstream's PROMETHEUS_PATH default.
    let other = reqwest::get(format!("{base}/stats")).await.unwrap();
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    // Its listener is capped as the admin listener is, and counted as the others are.
    let own = reqwest::get(format!("http://{}/metrics", server.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        crate::support::metric(&own, r#"tollgate_connections_max{listener="prometheus"}"#),
        10_000.0
    );
    assert!(
        crate::support::metric(&own, r#"tollgate_connections_total{listener="prometheus"}"#) >= 2.0
    );
}

/// A mapping file that cannot work stops the server at start, naming the variable, the
/// mapping's index and its key.
#[test]
fn a_bad_mapping_file_is_refused_at_start() {
    let (_bin, program) = ratelimit_program();
    let dir = tempfile::tempdir().unwrap();
    let mapper = dir.path().join("conf.yaml");
    std::fs::write(
        &mapper,
        "mappings:\n  - {match: a.b, name: x}\n  - {match: a.c, name: y, lables: {k: v}}\n",
    )
    .unwrap();
    let (code, stderr) = refused(
        &program,
        &[],
        &[
            ("USE_STATSD", "false"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_MAPPER_YAML", mapper.to_str().unwrap()),
        ],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("PROMETHEUS_MAPPER_YAML"), "{stderr}");
    assert!(
        stderr.contains("mappings[1].lables: unknown key"),
        "{stderr}"
    );
}
