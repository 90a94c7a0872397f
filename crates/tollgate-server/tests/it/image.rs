//! The container image's root filesystem runs the server: `scripts/image --rootfs` prepares it
//! from this build's binary (the libraries it links, its loader, a user, the default config),
//! and the server, started in a chroot of it as the image's unprivileged user with the image's
//! environment, answers `/healthz`. What `deploy/Containerfile` names is in it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// The root of the repository.
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[tokio::test]
async fn the_image_root_filesystem_runs_the_server_as_its_user() {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
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

    // chroot needs root, as building an image does: scripts/test runs as root in CI.
    assert!(
        Command::new("id").arg("-u").output().unwrap().stdout == b"0\n",
        "this test chroots: run it as root"
    );
    let mut server = Command::new("chroot")
        .arg(format!("--userspec={user}"))
        .arg(&rootfs)
        .args([
            "/usr/local/bin/tollgate",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        // The image's environment: its config, and a PATH to find chroot by (nothing else).
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("TOLLGATE_CONFIG", &config)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("chroot runs");
    let mut banner = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned);
    let healthz = match &addr {
        Some(addr) => reqwest::get(format!("http://{addr}/healthz")).await.ok(),
        None => None,
    };
    let _ = server.kill();
    let _ = server.wait();
    assert!(banner.contains(&format!("config: {config}")), "{banner}");
    let healthz = healthz.unwrap_or_else(|| panic!("no answer at {addr:?}: {banner}"));
    assert_eq!(healthz.status(), reqwest::StatusCode::OK);
}
