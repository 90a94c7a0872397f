//! Live reload of the config file: in-place writes, renames, symlink swaps and SIGHUP; a good
//! edit applies within a second with buckets kept, a bad one is refused and counted.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::json;
use support::{MINIMAL, Tollgate, capacity_of, check, get, metric, until_policies, write};

/// The minimal file with `api` holding `capacity`, refilled over an hour (so that a spent
/// bucket stays spent while the test runs).
fn with_capacity(capacity: u64) -> String {
    MINIMAL
        .replace("capacity = 10 ", &format!("capacity = {capacity} "))
        .replace("refill = 10 ", &format!("refill = {capacity} "))
        .replace("period = \"1s\"", "period = \"1h\"")
}

/// Spends `key` on a server whose `api` holds 5, has the file changed by `change` to hold 8,
/// and checks that the change applies within a second and that the spent key stays spent.
async fn reload_keeps_buckets(change: impl FnOnce(&Path, &str)) {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "tollgate.toml", &with_capacity(5));
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    for _ in 0..5 {
        let (status, _) = check(&client, &server, json!({"policy": "api", "key": "spent"})).await;
        assert_eq!(status, StatusCode::OK);
    }
    change(&file, &with_capacity(8));
    let took = until_policies(&client, &server, |p| capacity_of(p, "api") == Some(8)).await;
    assert!(took < Duration::from_secs(1), "applied after {took:?}");
    // The bucket kept its state: spent under 5, it is still spent under 8 (the refill is an
    // hour away); a fresh key gets the new burst.
    let (status, body) = check(&client, &server, json!({"policy": "api", "key": "spent"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["limit"], 8);
    for _ in 0..8 {
        let (status, _) = check(&client, &server, json!({"policy": "api", "key": "fresh"})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let metrics = get(&client, &server, "/metrics").await;
    assert_eq!(
        metric(
            &metrics,
            "tollgate_config_reloads_total{result=\"success\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            "tollgate_config_reloads_total{result=\"failure\"}"
        ),
        0.0
    );
}

#[tokio::test]
async fn an_edit_in_place_applies_and_keeps_buckets() {
    reload_keeps_buckets(|file, text| std::fs::write(file, text).unwrap()).await;
}

#[tokio::test]
async fn a_file_renamed_over_applies_and_keeps_buckets() {
    reload_keeps_buckets(|file, text| {
        let new = file.with_extension("toml.new");
        std::fs::write(&new, text).unwrap();
        std::fs::rename(&new, file).unwrap();
    })
    .await;
}

/// Kubernetes mounts a ConfigMap as a symlink to `..data/FILE`, `..data` itself a symlink to
/// a timestamped directory that an update replaces by swapping `..data`.
#[tokio::test]
async fn a_symlink_swapped_as_kubernetes_does_applies_and_keeps_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path();
    let first = mount.join("..2026_01_01");
    std::fs::create_dir(&first).unwrap();
    write(&first, "tollgate.toml", &with_capacity(5));
    std::os::unix::fs::symlink("..2026_01_01", mount.join("..data")).unwrap();
    let file = mount.join("tollgate.toml");
    std::os::unix::fs::symlink("..data/tollgate.toml", &file).unwrap();

    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    for _ in 0..5 {
        check(&client, &server, json!({"policy": "api", "key": "spent"})).await;
    }
    let second = mount.join("..2026_01_02");
    std::fs::create_dir(&second).unwrap();
    write(&second, "tollgate.toml", &with_capacity(8));
    std::os::unix::fs::symlink("..2026_01_02", mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    std::fs::remove_dir_all(&first).unwrap();

    let took = until_policies(&client, &server, |p| capacity_of(p, "api") == Some(8)).await;
    assert!(took < Duration::from_secs(1), "applied after {took:?}");
    let (status, _) = check(&client, &server, json!({"policy": "api", "key": "spent"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn sighup_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "tollgate.toml", MINIMAL);
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    let reloads = |text: &str| metric(text, "tollgate_config_reloads_total{result=\"success\"}");
    assert_eq!(reloads(&get(&client, &server, "/metrics").await), 0.0);
    // The file is unchanged: only the signal can make this reload.
    let status = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    for _ in 0..100 {
        if reloads(&get(&client, &server, "/metrics").await) == 1.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("SIGHUP did not reload");
}

#[tokio::test]
async fn a_bad_edit_is_refused_counted_and_the_running_config_stays() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "tollgate.toml", &with_capacity(5));
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    let client = Client::new();
    for _ in 0..3 {
        check(&client, &server, json!({"policy": "api", "key": "k"})).await;
    }
    std::fs::write(
        &file,
        with_capacity(5).replace("capacity = 5 ", "capacity = 0 "),
    )
    .unwrap();
    let mut refused = 0.0;
    for _ in 0..100 {
        let metrics = get(&client, &server, "/metrics").await;
        refused = metric(
            &metrics,
            "tollgate_config_reloads_total{result=\"failure\"}",
        );
        if refused > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refused, 1.0, "the bad edit was not counted");
    // Decisions go on under the old numbers: 2 of 5 left.
    let (status, body) = check(&client, &server, json!({"policy": "api", "key": "k"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["limit"].as_u64(), body["remaining"].as_u64()),
        (Some(5), Some(1))
    );
    // And a good edit after it applies.
    std::fs::write(&file, with_capacity(7)).unwrap();
    until_policies(&client, &server, |p| capacity_of(p, "api") == Some(7)).await;
}

/// `count` policies of `name{i}`, as small as TOML writes them (47 bytes each for a million).
pub fn many_policies(count: usize) -> String {
    (0..count)
        .map(|i| format!("[policies.p{i}]\ncapacity = 10\nperiod = \"1s\"\n"))
        .collect()
}

/// The resident memory of process `pid`, in bytes; `None` once it is gone.
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// A way to put something at the config path.
type Put<'a> = Box<dyn Fn() + 'a>;

/// Issue 27: a file that is too large, holds too many policies, or is not a regular file at all
/// (a FIFO would block the reader for good, /dev/zero never ends) put at the config path is
/// refused, while the server keeps answering and its memory stays put; it once took 2 GB.
#[tokio::test]
async fn hostile_files_at_the_config_path_are_refused_without_stalls_or_memory() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "tollgate.toml", &with_capacity(5));
    let server = Tollgate::start(&["--config", file.to_str().unwrap()]);
    // A stalled server fails the test at once rather than hanging it.
    let client = Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    get(&client, &server, "/healthz").await;
    let before = rss(server.pid()).expect("the server runs");

    // /healthz asked all along, each answer within a second; the highest RSS seen meanwhile.
    let done = tokio_util::sync::CancellationToken::new();
    let prober = {
        let (client, addr, done) = (client.clone(), server.addr, done.clone());
        let pid = server.pid();
        tokio::spawn(async move {
            let clock = tollgate::MonotonicClock::new();
            let mut slowest = Duration::ZERO;
            while !done.is_cancelled() {
                let start = tollgate::Clock::now(&clock);
                let answer = client
                    .get(format!("http://{addr}/healthz"))
                    .timeout(Duration::from_secs(1))
                    .send()
                    .await;
                assert!(
                    answer.is_ok_and(|a| a.status() == StatusCode::OK),
                    "/healthz did not answer within 1 s (process {pid})"
                );
                slowest = slowest.max(Duration::from(tollgate::Clock::now(&clock) - start));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            slowest
        })
    };
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        let pid = server.pid();
        tokio::spawn(async move {
            while !done.is_cancelled() {
                if let Some(bytes) = rss(pid) {
                    peak.fetch_max(bytes, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    let failures =
        |metrics: &str| metric(metrics, "tollgate_config_reloads_total{result=\"failure\"}");
    let staged = dir.path().join("staged");
    let hostile: [(&str, Put<'_>); 5] = [
        (
            "a 47 MB file of a million policies",
            Box::new(|| {
                std::fs::write(&staged, many_policies(1_000_000)).unwrap();
                std::fs::rename(&staged, &file).unwrap();
            }),
        ),
        (
            "an 8 MB file of 180,000 policies, under the size cap",
            Box::new(|| {
                std::fs::write(&staged, many_policies(180_000)).unwrap();
                std::fs::rename(&staged, &file).unwrap();
            }),
        ),
        (
            "a FIFO",
            Box::new(|| {
                let made = Command::new("mkfifo").arg(&staged).status().unwrap();
                assert!(made.success());
                std::fs::rename(&staged, &file).unwrap();
            }),
        ),
        (
            "a link to /dev/zero",
            Box::new(|| {
                std::os::unix::fs::symlink("/dev/zero", &staged).unwrap();
                std::fs::rename(&staged, &file).unwrap();
            }),
        ),
        (
            "a directory",
            Box::new(|| {
                std::fs::remove_file(&file).unwrap();
                std::fs::create_dir(&file).unwrap();
            }),
        ),
    ];
    for (what, put) in &hostile {
        let refused = failures(&get(&client, &server, "/metrics").await);
        put();
        let mut now = refused;
        for _ in 0..250 {
            now = failures(&get(&client, &server, "/metrics").await);
            if now > refused {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(now > refused, "{what} was not refused");
    }
    // The running config stayed in force throughout, and a good file applies again.
    let (status, body) = check(&client, &server, json!({"policy": "api", "key": "k"})).await;
    assert_eq!((status, body["limit"].as_u64()), (StatusCode::OK, Some(5)));
    std::fs::remove_dir(&file).unwrap();
    std::fs::write(&file, with_capacity(7)).unwrap();
    until_policies(&client, &server, |p| capacity_of(p, "api") == Some(7)).await;

    done.cancel();
    let slowest = prober.await.unwrap();
    sampler.await.unwrap();
    let grew = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(before);
    assert!(
        grew < 64 << 20,
        "the server's RSS grew by {} MiB",
        grew >> 20
    );
    assert!(
        slowest < Duration::from_secs(1),
        "/healthz took {slowest:?}"
    );
}
