//! The container image's root filesystem runs the server: `scripts/image --rootfs` prepares it
//! from this build's binary (the libraries it links, its loader, a user, the default config),
//! and the server, started in a chroot of it as the image's unprivileged user with the image's
//! environment, answers `/healthz`. What `deploy/Containerfile` names is in it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use tollgate_testkit::{Reply, TestRedis};

/// The root of the repository.
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The image's root filesystem, made in `dir` by `scripts/image --rootfs`, and what the
/// Containerfile says it runs as.
struct Image {
    rootfs: std::path::PathBuf,
    /// `USER`.
    user: String,
    /// `TOLLGATE_CONFIG`.
    config: String,
}

impl Image {
    fn make(dir: &Path) -> Image {
        let rootfs = dir.join("rootfs");
        let made = Command::new("bash")
            .arg(root().join("scripts/image"))
            .arg("--rootfs")
            .arg(&rootfs)
            .arg(env!("CARGO_BIN_EXE_tollgate"))
            .status()
            .unwrap();
        assert!(made.success(), "scripts/image --rootfs");
        let containerfile = std::fs::read_to_string(root().join("deploy/Containerfile")).unwrap();
        let line = |directive: &str| {
            containerfile
                .lines()
                .find(|l| l.starts_with(directive))
                .unwrap_or_else(|| panic!("{directive} in the Containerfile"))
                .trim_start_matches(directive)
                .trim()
                .to_owned()
        };
        assert_eq!(line("ENTRYPOINT"), r#"["/usr/local/bin/tollgate"]"#);
        assert!(rootfs.join("usr/local/bin/tollgate").exists());
        let config = line("ENV")
            .trim_start_matches("TOLLGATE_CONFIG=")
            .to_owned();
        assert!(
            rootfs.join(config.trim_start_matches('/')).exists(),
            "{config}"
        );
        let user = line("USER");
        let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
        let uid = user.split(':').next().unwrap();
        assert!(passwd.contains(&format!(":x:{uid}:")), "{user} in {passwd}");
        Image {
            rootfs,
            user,
            config,
        }
    }

    /// `tollgate serve --listen 127.0.0.1:0 <args>` in a chroot of the root filesystem, as the
    /// image's user with the image's environment; its stderr kept.
    fn serve(&self, args: &[&str]) -> std::process::Child {
        // chroot needs root, as building an image does: scripts/test runs as root in CI.
        assert!(
            Command::new("id").arg("-u").output().unwrap().stdout == b"0\n",
            "this test chroots: run it as root"
        );
        Command::new("chroot")
            .arg(format!("--userspec={}", self.user))
            .arg(&self.rootfs)
            .args([
                "/usr/local/bin/tollgate",
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            // The image's environment: its config, and a PATH to find chroot by (nothing else).
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("TOLLGATE_CONFIG", &self.config)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chroot runs")
    }
}

/// The server's first line on stdout (its banner; empty if it exited), and the address it
/// gives.
fn first_line(server: &mut std::process::Child) -> (String, Option<String>) {
    let mut banner = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned);
    (banner, addr)
}

/// What a process that exited wrote on stderr.
fn stderr_of(mut server: std::process::Child) -> String {
    let _ = server.kill();
    let out = server.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn the_image_root_filesystem_runs_the_server_as_its_user() {
    let dir = tempfile::tempdir().unwrap();
    let image = Image::make(dir.path());
    let mut server = image.serve(&[]);
    let (banner, addr) = first_line(&mut server);
    let healthz = match &addr {
        Some(addr) => reqwest::get(format!("http://{addr}/healthz")).await.ok(),
        None => None,
    };
    let said = stderr_of(server);
    assert!(
        banner.contains(&format!("config: {}", image.config)),
        "{banner} {said}"
    );
    let healthz = healthz.unwrap_or_else(|| panic!("no answer at {addr:?}: {banner} {said}"));
    assert_eq!(healthz.status(), reqwest::StatusCode::OK);
}

/// Issue 44, point 3: the image had no CA certificates, so a `rediss://` store was never
/// trusted and every decision went to the fail policy (`allow` by default). It has the build
/// machine's bundle now, which an operator extends with a private CA as here; and without any,
/// the server refuses to start.
#[tokio::test]
async fn the_image_reaches_redis_over_tls_with_its_ca_bundle() {
    let redis = TestRedis::start_tls().expect("start redis-server with TLS");
    // The test CA's certificate names 127.0.0.1: the chroot has no /etc/hosts to find localhost.
    let url = format!(
        "rediss://127.0.0.1:{}",
        redis.tls_url().unwrap().rsplit(':').next().unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    let image = Image::make(dir.path());
    let bundle = image.rootfs.join("etc/ssl/certs/ca-certificates.crt");
    let public = std::fs::read_to_string(&bundle).expect("the image holds a CA bundle");
    assert!(public.matches("BEGIN CERTIFICATE").count() > 10, "{public}");
    let private = std::fs::read_to_string(redis.ca_file().unwrap()).unwrap();
    std::fs::write(&bundle, format!("{public}\n{private}")).unwrap();

    let mut server = image.serve(&["--store", &url, "--on-store-error", "deny"]);
    let (banner, addr) = first_line(&mut server);
    let checked = match &addr {
        Some(addr) => reqwest::Client::new()
            .post(format!("http://{addr}/v1/check"))
            .body(r#"{"key": "alice", "capacity": 10, "refill": 10, "period_ms": 1000}"#)
            .send()
            .await
            .ok(),
        None => None,
    };
    let said = stderr_of(server);
    let checked = checked.unwrap_or_else(|| panic!("no answer at {addr:?}: {banner} {said}"));
    assert_eq!(checked.status(), reqwest::StatusCode::OK, "{said}");
    // Outcome in Redis, not by the fail policy.
    let keys = redis.cmd(&[b"KEYS", b"tollgate:*:*"]).unwrap();
    assert!(
        matches!(&keys, Reply::Array(items) if !items.is_empty()),
        "{keys:?} {said}"
    );

    // No root certificates at all: refused at start, saying so.
    std::fs::remove_file(&bundle).unwrap();
    let mut server = image.serve(&["--store", &url]);
    let (banner, _) = first_line(&mut server);
    let said = stderr_of(server);
    assert!(banner.is_empty(), "started without trust roots: {banner}");
    assert!(said.contains("no root certificate"), "{said}");
}

/// Envoy Gateway runs the rate-limit image as `/bin/ratelimit` with environment variables
/// alone: the image's link of that name starts the server in the environment mode, which reads
/// upstream's default `RUNTIME_ROOT` and decides on Redis.
#[tokio::test]
async fn the_image_runs_as_bin_ratelimit_with_the_environment_alone() {
    use crate::support::envoy::{ask, client, codes, descriptor, request};
    let redis = TestRedis::start().expect("start redis-server");
    let dir = tempfile::tempdir().unwrap();
    let image = Image::make(dir.path());
    let config = image.rootfs.join("srv/runtime_data/current/config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.yaml"),
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    )
    .unwrap();
    let redis_url = format!("127.0.0.1:{}", redis.port());
    let mut server = Command::new("chroot")
        .arg(format!("--userspec={}", image.user))
        .arg(&image.rootfs)
        .arg("/bin/ratelimit")
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs([
            ("HOST", "127.0.0.1"),
            ("PORT", "0"),
            ("GRPC_HOST", "127.0.0.1"),
            ("GRPC_PORT", "0"),
            ("DEBUG_PORT", "0"),
            ("USE_STATSD", "false"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", redis_url.as_str()),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chroot runs");
    let (banner, addr) = first_line(&mut server);
    let grpc = banner
        .split("grpc://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok());
    let (Some(addr), Some(grpc)) = (addr, grpc) else {
        panic!("no addresses: {banner} {}", stderr_of(server));
    };
    let health = reqwest::get(format!("http://{addr}/healthcheck"))
        .await
        .unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);
    let mut grpc = client(grpc).await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        let r = request("edge", vec![descriptor(&[("user", "erin")])]);
        seen.push(codes(&ask(&mut grpc, r).await).0);
    }
    let said = stderr_of(server);
    assert_eq!(seen, ["OK", "OVER"], "{said}");
}
