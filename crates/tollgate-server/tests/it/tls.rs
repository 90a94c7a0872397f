//! TLS and mutual TLS on the listeners: only certificates the client CA signed (and carrying a
//! name of `client_san`) get in, and a certificate rotated on disk is served to new
//! connections while open ones keep theirs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tollgate_testkit::TestCa;

use crate::support::{self, Tollgate};

/// A CA, the server's certificate, a client's (named `envoy.internal`), one the CA signed for
/// another name, and one of another CA.
struct Pki {
    dir: tempfile::TempDir,
    ca: TestCa,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
    stranger: (PathBuf, PathBuf),
    wildcard: (PathBuf, PathBuf),
    rogue: (PathBuf, PathBuf),
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = TestCa::new(d, "ca").unwrap();
    let server = ca
        .sign(d, "server", "localhost", "DNS:localhost,IP:127.0.0.1")
        .unwrap();
    let client = ca.sign(d, "client", "envoy", "DNS:envoy.internal").unwrap();
    let stranger = ca
        .sign(d, "stranger", "other", "DNS:other.internal")
        .unwrap();
    let wildcard = ca.sign(d, "wildcard", "any", "DNS:*.internal").unwrap();
    let rogue = TestCa::new(d, "rogue-ca")
        .unwrap()
        .sign(d, "rogue", "envoy", "DNS:envoy.internal")
        .unwrap();
    Pki {
        dir,
        ca,
        server,
        client,
        stranger,
        wildcard,
        rogue,
    }
}

impl Pki {
    fn path(&self, p: &Path) -> String {
        p.to_str().unwrap().to_owned()
    }

    /// A `[NAME.tls]` table with the server's files, and mutual TLS when `mutual`.
    fn table(&self, name: &str, mutual: bool) -> String {
        let mut table = format!(
            "[{name}.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            self.path(&self.server.0),
            self.path(&self.server.1)
        );
        if mutual {
            table.push_str(&format!(
                "client_ca = \"{}\"\nclient_san = [\"envoy.internal\"]\n",
                self.path(&self.ca.cert)
            ));
        }
        table
    }

    fn connector(&self, client: Option<&(PathBuf, PathBuf)>, alpn: &[&[u8]]) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&self.ca.cert).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match client {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_file_iter(cert)
                        .unwrap()
                        .map(Result::unwrap)
                        .collect(),
                    PrivateKeyDer::from_pem_file(key).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsConnector::from(Arc::new(config))
    }
}

async fn dial(
    addr: std::net::SocketAddr,
    connector: &TlsConnector,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

const CHECK: &str = r#"{"key": "k", "capacity": 100, "refill": 100, "period_ms": 1000}"#;

/// `POST /v1/check` on `stream` (kept alive); the answer's head and body, or why not.
async fn check_on(stream: &mut TlsStream<TcpStream>) -> std::io::Result<String> {
    let request = format!(
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{CHECK}",
        CHECK.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).ends_with('}') {
        let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

async fn check(addr: std::net::SocketAddr, connector: &TlsConnector) -> std::io::Result<String> {
    let mut stream = dial(addr, connector).await?;
    check_on(&mut stream).await
}

fn start(pki: &Pki, config: &str) -> Tollgate {
    let file = support::write(pki.dir.path(), "t.toml", config);
    Tollgate::start(&["--config", file.to_str().unwrap()])
}

#[tokio::test]
async fn mutual_tls_admits_only_certificates_the_ca_signed_for_a_listed_name() {
    let pki = pki();
    let server = start(&pki, &pki.table("http", true));
    assert!(server.banner.contains("https://"), "{}", server.banner);
    let ok = check(server.addr, &pki.connector(Some(&pki.client), &[])).await;
    assert!(
        ok.as_deref().is_ok_and(|a| a.starts_with("HTTP/1.1 200")),
        "{ok:?}"
    );
    for (who, client) in [
        ("no certificate", None),
        ("another CA's", Some(&pki.rogue)),
        ("a name not in client_san", Some(&pki.stranger)),
        ("a wildcard that covers the name", Some(&pki.wildcard)),
    ] {
        let refused = check(server.addr, &pki.connector(client, &[])).await;
        assert!(refused.is_err(), "{who}: {refused:?}");
    }
    // Plain HTTP on a TLS port gets no answer it could mistake for one.
    let mut plain = TcpStream::connect(server.addr).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(3), plain.read(&mut buf))
        .await
        .map_or(0, |r| r.unwrap_or(0));
    assert!(!String::from_utf8_lossy(&buf[..n]).contains("200"));
}

#[tokio::test]
async fn a_certificate_rotated_on_disk_is_served_to_new_connections_and_open_ones_keep_theirs() {
    let pki = pki();
    let server = start(&pki, &pki.table("http", false));
    let connector = pki.connector(None, &[]);
    let served =
        |stream: &TlsStream<TcpStream>| stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let mut open = dial(server.addr, &connector).await.unwrap();
    assert!(
        check_on(&mut open)
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    let first = served(&open);

    // cert-manager writes the new pair in place.
    let d = pki.dir.path();
    let (cert, key) = pki
        .ca
        .sign(d, "next", "localhost", "DNS:localhost,IP:127.0.0.1")
        .unwrap();
    std::fs::copy(&key, &pki.server.1).unwrap();
    std::fs::copy(&cert, &pki.server.0).unwrap();
    let mut rotated = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stream = dial(server.addr, &connector).await.unwrap();
        if served(&stream) != first {
            rotated = Some(served(&stream));
            break;
        }
    }
    let rotated = rotated.expect("the new certificate is served within 4 s");
    assert_eq!(
        rotated,
        std::fs::read(&cert)
            .map(|pem| { CertificateDer::from_pem_slice(&pem).unwrap().to_vec() })
            .unwrap()
    );
    // The connection opened before goes on with its own.
    assert!(
        check_on(&mut open)
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );

    // A bad pair is refused (and logged): the last good one stays.
    std::fs::write(&pki.server.0, "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let stream = dial(server.addr, &connector).await.unwrap();
    assert_eq!(served(&stream), rotated);
}

#[test]
fn tls_files_that_cannot_be_used_stop_the_server_at_start() {
    let pki = pki();
    let bad = support::write(
        pki.dir.path(),
        "bad.pem",
        "-----BEGIN CERTIFICATE-----\nnope\n",
    );
    for (table, expected) in [
        (
            format!(
                "[http.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                pki.path(&bad),
                pki.path(&pki.server.1)
            ),
            "[http.tls]",
        ),
        (
            format!(
                "[admin]\nlisten = \"127.0.0.1:0\"\n[admin.tls]\ncert = \"{}\"\nkey = \"/nonexistent/key.pem\"\n",
                pki.path(&pki.server.0)
            ),
            "/nonexistent/key.pem",
        ),
        (
            format!(
                "[http.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                pki.path(&pki.client.0),
                pki.path(&pki.server.1)
            ),
            "do not go together",
        ),
    ] {
        let file = support::write(pki.dir.path(), "t.toml", &table);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--config",
                file.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{table}: {stderr}");
        assert!(stderr.contains(expected), "{table}: {stderr}");
    }
}

#[test]
fn redis_cli_speaks_to_the_resp_port_over_tls() {
    let pki = pki();
    let config = format!(
        "[resp]\nlisten = \"127.0.0.1:0\"\n{}",
        pki.table("resp", false)
    );
    let server = start(&pki, &config);
    assert!(server.banner.contains("rediss://"), "{}", server.banner);
    let port = server.resp_addr().port().to_string();
    let cli = |extra: &[&str]| {
        let output = std::process::Command::new("redis-cli")
            .args(["-h", "localhost", "-p", &port])
            .args(extra)
            .args(["CL.THROTTLE", "k", "4", "5", "60"])
            .output()
            .expect("redis-cli runs (apt-get install redis-tools)");
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    };
    let ca = pki.path(&pki.ca.cert);
    let answer = cli(&["--tls", "--cacert", &ca]);
    assert_eq!(
        answer.lines().collect::<Vec<_>>(),
        ["0", "5", "4", "-1", "12"],
        "{answer}"
    );
    // Without TLS the port answers nothing a client could take for a reply.
    let plain = cli(&[]);
    assert!(!plain.contains("\n5\n"), "{plain}");
}

#[tokio::test]
async fn grpc_over_mutual_tls_with_a_client_certificate() {
    let pki = pki();
    let (_dir, path) = support::envoy::configured(
        &format!("listen = \"127.0.0.1:0\"\n{}", pki.table("grpc", true)),
        &[(
            "a.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n",
        )],
    );
    let server = Tollgate::start(&["--config", path.to_str().unwrap()]);
    assert!(server.banner.contains("grpcs://"), "{}", server.banner);
    let grpc = server.grpc_addr();
    let ask = |client: Option<&(PathBuf, PathBuf)>| {
        let connector = pki.connector(client, &[b"h2"]);
        async move {
            let channel = tonic::transport::Endpoint::from_static("http://localhost")
                .connect_with_connector(tower::service_fn(move |_| {
                    let connector = connector.clone();
                    async move {
                        let tls = dial(grpc, &connector).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
                    }
                }))
                .await
                .map_err(|e| e.to_string())?;
            let mut client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
            let request =
                support::envoy::request("d", vec![support::envoy::descriptor(&[("k", "v")])]);
            client
                .should_rate_limit(request)
                .await
                .map(|r| r.into_inner().overall_code)
                .map_err(|e| e.to_string())
        }
    };
    assert_eq!(ask(Some(&pki.client)).await, Ok(1));
    assert!(ask(Some(&pki.rogue)).await.is_err());
    assert!(ask(None).await.is_err());
}
