//! A real Envoy in front of a backend, its routes' rate-limit actions shaped as Envoy Gateway's
//! translator sets them (`generic_key` for the route, `header_value_match` for an exact header
//! match as `rule-0-match-0`, `request_headers` for a distinct one, `masked_remote_address`),
//! asking tollgate over TLS with its client certificate; tollgate started as Envoy Gateway
//! starts envoyproxy/ratelimit (the program `ratelimit`, its environment alone: as upstream,
//! it serves TLS without checking Envoy's certificate, `GRPC_SERVER_TLS_CA_CERT` being unread)
//! and configured over xDS, over mutual TLS, by the test kit's management server. Requests
//! through Envoy are limited as the pushed versions say, a bad version changes nothing, and
//! the management server's restart loses nothing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use envoy_types::pb::ratelimit::config::ratelimit::v3::{RateLimitConfig, RateLimitUnit};
use tollgate_testkit::{Seen, TestCa, TestRedis, XdsServer, XdsServerTls};

use crate::envoy_mtls::{free_port, start_envoy};
use crate::ratelimit_env::{PORTS, ratelimit_program};
use crate::support::{Logs, Tollgate};
use crate::xds_fixtures::{self as fx, LISTENER};

/// The files tollgate is given, as Envoy Gateway mounts them under `/certs`: its gRPC
/// listener's certificate and key, and the CA (of Envoy's certificate, and of the management
/// server's); its client certificate and key to the management server.
struct Certs {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    xds_cert: PathBuf,
    xds_key: PathBuf,
}

/// How this test starts tollgate: as Envoy Gateway's Deployment does (its
/// `internal/infrastructure/kubernetes/ratelimit/resource.go`), the program `ratelimit` with
/// only environment variables, those it sets with their values, the files where the test made
/// them and Redis where the test runs it. The test adds only free loopback ports for the
/// listeners and short xDS backoffs (upstream's 10 s wait after a broken stream would only
/// slow the restart below).
fn start_tollgate(xds: SocketAddr, redis: &TestRedis, certs: &Certs) -> (Tollgate, Logs) {
    let p = |path: &PathBuf| path.to_str().unwrap().to_owned();
    let (cert, key, ca) = (p(&certs.cert), p(&certs.key), p(&certs.ca));
    let (xds_cert, xds_key) = (p(&certs.xds_cert), p(&certs.xds_key));
    let xds = xds.to_string();
    let redis_url = format!("127.0.0.1:{}", redis.port());
    let (_dir, program) = ratelimit_program();
    let envoy_gateway = [
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("LOG_LEVEL", "info"),
        ("USE_STATSD", "false"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", xds.as_str()),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", cert.as_str()),
        ("GRPC_SERVER_TLS_KEY", key.as_str()),
        ("GRPC_SERVER_TLS_CA_CERT", ca.as_str()),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", xds_cert.as_str()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", xds_key.as_str()),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ca.as_str()),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", redis_url.as_str()),
    ];
    let backoffs = [
        ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "50ms"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "200ms"),
    ];
    // The ports (and USE_STATSD=false, which Envoy Gateway sets too) as the environment mode's
    // own tests give them.
    let env: Vec<(&str, &str)> = envoy_gateway
        .iter()
        .chain(&PORTS)
        .chain(&backoffs)
        .copied()
        .collect();
    Tollgate::start_as(&program, &env)
}

/// The listener's rules: on `first-route`, the exact match of `x-user-id: one` (`exact` a day)
/// and each user's own bucket (10 an hour, room enough for `one`'s requests); on `second-route`, the client's address (`masked`
/// an hour).
fn rules(exact: u32, masked: u32) -> RateLimitConfig {
    fx::config(
        LISTENER,
        vec![
            fx::route(
                "first-route",
                vec![
                    fx::leaf(
                        "rule-0-match-0",
                        "rule-0-match-0",
                        exact,
                        RateLimitUnit::Day,
                    ),
                    fx::leaf("rule-0-match-1", "", 10, RateLimitUnit::Hour),
                ],
            ),
            fx::route(
                "second-route",
                vec![fx::leaf(
                    "masked_remote_address",
                    "127.0.0.1/32",
                    masked,
                    RateLimitUnit::Hour,
                )],
            ),
        ],
    )
}

/// Envoy's bootstrap: the routes `/first` and `/second` with their rate-limit actions, the
/// filter asking the domain `first-listener` (failing closed) over mutual TLS.
fn bootstrap(port: u16, grpc: SocketAddr, backend: SocketAddr, d: &Path, ca: &Path) -> String {
    let p = |name: &str| d.join(name).to_str().unwrap().to_owned();
    let generic = |route: &str| {
        format!("- generic_key: {{descriptor_key: {route}, descriptor_value: {route}}}")
    };
    format!(
        r#"static_resources:
  listeners:
  - address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - name: first-route
                match: {{prefix: "/first"}}
                route:
                  cluster: backend
                  prefix_rewrite: "/healthz"
                  rate_limits:
                  - actions:
                    {first}
                    - header_value_match:
                        descriptor_key: rule-0-match-0
                        descriptor_value: rule-0-match-0
                        expect_match: true
                        headers:
                        - name: x-user-id
                          string_match: {{exact: one}}
                  - actions:
                    {first}
                    - request_headers: {{header_name: x-user-id, descriptor_key: rule-0-match-1}}
              - name: second-route
                match: {{prefix: "/second"}}
                route:
                  cluster: backend
                  prefix_rewrite: "/healthz"
                  rate_limits:
                  - actions:
                    {second}
                    - masked_remote_address: {{v4_prefix_mask_len: 32}}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: {LISTENER}
              failure_mode_deny: true
              timeout: 2s
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{cluster_name: ratelimit}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: backend
    type: STATIC
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {backend_port}}}}}}}
  - name: ratelimit
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: ratelimit
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {grpc_port}}}}}}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          alpn_protocols: ["h2"]
          tls_certificates:
          - certificate_chain: {{filename: "{cert}"}}
            private_key: {{filename: "{key}"}}
          validation_context:
            trusted_ca: {{filename: "{ca}"}}
"#,
        first = generic("first-route"),
        second = generic("second-route"),
        backend_port = backend.port(),
        grpc_port = grpc.port(),
        cert = p("envoy.pem"),
        key = p("envoy.key"),
        ca = ca.to_str().unwrap(),
    )
}

/// The statuses of `n` requests `GET path` through Envoy with the header `x-user-id: user`
/// (none when empty).
fn statuses(port: u16, path: &str, user: &str, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let header = if user.is_empty() {
                String::new()
            } else {
                format!("x-user-id: {user}\r\n")
            };
            write!(
                stream,
                "GET {path} HTTP/1.1\r\nHost: t\r\n{header}Connection: close\r\n\r\n"
            )
            .unwrap();
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            answer
                .split_whitespace()
                .nth(1)
                .and_then(|code| code.parse().ok())
                .unwrap_or_else(|| panic!("no status in {answer:?}"))
        })
        .collect()
}

#[test]
fn xds_a_real_envoy_is_limited_as_the_management_server_configures_tollgate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = TestCa::new(d, "ca").unwrap();
    let (cert, key) = ca
        .sign(d, "server", "localhost", "DNS:localhost,IP:127.0.0.1")
        .unwrap();
    ca.sign(d, "envoy", "envoy", "DNS:envoy.internal").unwrap();
    let (xds_cert, xds_key) = ca
        .sign(d, "ratelimit", "envoy-ratelimit", "DNS:envoy-ratelimit")
        .unwrap();
    let (server_cert, server_key) = ca
        .sign(
            d,
            "envoy-gateway",
            "envoy-gateway",
            "DNS:localhost,IP:127.0.0.1",
        )
        .unwrap();
    let mut xds = XdsServer::start(Some(XdsServerTls {
        cert: server_cert,
        key: server_key,
        client_ca: Some(ca.cert.clone()),
    }))
    .unwrap();
    xds.set("v1", &[rules(2, 1)]);
    let certs = Certs {
        cert,
        key,
        ca: ca.cert.clone(),
        xds_cert,
        xds_key,
    };
    let redis = TestRedis::start().expect("start redis-server");
    let (server, logs) = start_tollgate(xds.addr(), &redis, &certs);
    xds.wait_for("v1 ACKed", acked("v1"))
        .unwrap_or_else(|e| panic!("{e}: {}", logs.text()));

    let port = free_port();
    let config = bootstrap(port, server.grpc_addr(), server.addr, d, &ca.cert);
    let envoy = start_envoy(d, "envoy", &config, port);
    // The exact match: 2 a day.
    assert_eq!(statuses(envoy.port(), "/first", "one", 3), [200, 200, 429]);
    // A distinct match: each user 10 an hour, apart.
    let mut ten = vec![200; 10];
    ten.push(429);
    assert_eq!(statuses(envoy.port(), "/first", "two", 11), ten);
    assert_eq!(statuses(envoy.port(), "/first", "three", 1), [200]);
    // The client's address: 1 an hour.
    assert_eq!(statuses(envoy.port(), "/second", "", 2), [200, 429]);

    // A new version while Envoy runs: the exact match raised to 5, the address to 3; their
    // counts so far are kept (the rules' buckets are named by their descriptors).
    xds.set("v2", &[rules(5, 3)]);
    xds.wait_for("v2 ACKed", acked("v2")).unwrap();
    assert_eq!(
        statuses(envoy.port(), "/first", "one", 4),
        [200, 200, 200, 429]
    );
    assert_eq!(statuses(envoy.port(), "/second", "", 1), [200]);

    // A bad version is NACKed; v2 goes on deciding (the address has 1 left of 3).
    let mut bad = rules(100, 100);
    bad.descriptors[1].descriptors[0]
        .rate_limit
        .as_mut()
        .unwrap()
        .unit = 0;
    xds.set("v3", &[bad]);
    let seen = xds
        .wait_for("v3 NACKed", |seen| {
            seen.iter().any(|s| s.error_detail.is_some())
        })
        .unwrap();
    let nack = seen.iter().find(|s| s.error_detail.is_some()).unwrap();
    assert_eq!(nack.version_info, "v2");
    assert_eq!(statuses(envoy.port(), "/second", "", 2), [200, 429]);

    // The management server goes away: Envoy's requests are still decided by v2; it comes
    // back with v4, which tollgate picks up.
    xds.stop();
    assert_eq!(statuses(envoy.port(), "/first", "one", 1), [429]);
    xds.set("v4", &[rules(8, 10)]);
    xds.restart().unwrap();
    xds.wait_for("v4 ACKed after the restart", acked("v4"))
        .unwrap();
    // The exact match has 3 left of 8, but `one`'s own bucket (10 an hour) ends it after 2:
    // charged as envoyproxy/ratelimit charges (Envoy Gateway leaves
    // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false), the request the exact match denied
    // while the server was away still took one from it (3 + 4 + 1 = 8 of 10).
    assert_eq!(
        statuses(envoy.port(), "/first", "one", 4),
        [200, 200, 429, 429]
    );
}

fn acked(version: &'static str) -> impl Fn(&[Seen]) -> bool {
    move |seen: &[Seen]| seen.iter().any(|s| s.acks(version))
}
