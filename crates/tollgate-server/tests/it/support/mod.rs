//! Runs the `tollgate` binary as a black box: start it, read the address it announces, signal it.

// Each test file compiles this module on its own and uses part of it.
#![allow(dead_code)]

pub mod auth;
pub mod envoy;
pub mod faults;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::Value;
use tollgate::{Clock, MonotonicClock, Nanos};

/// For tests of exactness across servers, on a machine that may be busy: no call should time
/// out, and one that did would show as an error answer, not as a request let through by the
/// default fail-open policy (which once put 73 allowed where 40 was the bound).
pub const PATIENT: [&str; 4] = ["--on-store-error", "deny", "--store-timeout-ms", "2000"];

/// A running `tollgate serve`; killed when dropped.
pub struct Tollgate {
    child: Child,
    pub addr: SocketAddr,
    pub banner: String,
}

/// The address the banner gives after the first of `markers` it holds.
fn address(banner: &str, markers: &[&str]) -> Option<SocketAddr> {
    markers.iter().find_map(|marker| {
        banner
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
    })
}

impl Tollgate {
    /// Starts `tollgate --listen 127.0.0.1:0 <args>` and waits for its banner.
    pub fn start(args: &[&str]) -> Tollgate {
        Tollgate::start_with_env(args, &[])
    }

    /// [`start`](Self::start) with environment variables set.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Tollgate {
        let args = [&["--listen", "127.0.0.1:0"][..], args].concat();
        Tollgate::start_exactly(&args, env)
    }

    /// Starts `tollgate <args>`, nothing added, with environment variables `env` set.
    pub fn start_exactly(args: &[&str], env: &[(&str, &str)]) -> Tollgate {
        Tollgate::spawn(args, env)
    }

    /// [`start_exactly`](Self::start_exactly), what it writes on stderr (its logs) kept.
    pub fn start_logged(args: &[&str], env: &[(&str, &str)]) -> (Tollgate, Logs) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        command.args(args).envs(env.iter().copied());
        Tollgate::spawn_command(command, true)
    }

    /// Starts the binary under the name `program` (a link to it), with no argument and only
    /// the environment `env` (and `PATH`), as a container runs envoyproxy/ratelimit; its logs
    /// kept.
    pub fn start_as(program: &Path, env: &[(&str, &str)]) -> (Tollgate, Logs) {
        let mut command = Command::new(program);
        command.env_clear().envs(env.iter().copied());
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        Tollgate::spawn_command(command, true)
    }

    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Tollgate {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        command.args(args).envs(env.iter().copied());
        let (server, _) = Tollgate::spawn_command(command, false);
        server
    }

    /// Runs `command`, its stderr kept in the [`Logs`] when `keep_logs`, else inherited.
    fn spawn_command(mut command: Command, keep_logs: bool) -> (Tollgate, Logs) {
        let stderr = if keep_logs {
            Stdio::piped()
        } else {
            Stdio::inherit()
        };
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("the tollgate binary starts");
        let logs = Logs::default();
        if keep_logs && let Some(stderr) = child.stderr.take() {
            let kept = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut text = kept.0.lock().unwrap();
                    text.push_str(&line);
                    text.push('\n');
                }
            });
        }
        let mut banner = String::new();
        let stdout = child.stdout.take().expect("stdout is piped");
        BufReader::new(stdout)
            .read_line(&mut banner)
            .expect("tollgate prints its banner");
        let addr = address(&banner, &["listening on http://", "listening on https://"])
            .unwrap_or_else(|| panic!("no address in the banner {banner:?}: {}", logs.text()));
        (
            Tollgate {
                child,
                addr,
                banner,
            },
            logs,
        )
    }

    /// Where its RESP listener is (the banner's `redis://` address).
    pub fn resp_addr(&self) -> SocketAddr {
        address(&self.banner, &["redis://", "rediss://"])
            .unwrap_or_else(|| panic!("no RESP address in the banner {:?}", self.banner))
    }

    /// Where its gRPC listener is (the banner's `grpc://` address).
    pub fn grpc_addr(&self) -> SocketAddr {
        address(&self.banner, &["grpc://", "grpcs://"])
            .unwrap_or_else(|| panic!("no gRPC address in the banner {:?}", self.banner))
    }

    /// Where its admin listener is (the banner's `admin http://` address).
    pub fn admin_addr(&self) -> SocketAddr {
        address(&self.banner, &["admin http://", "admin https://"])
            .unwrap_or_else(|| panic!("no admin address in the banner {:?}", self.banner))
    }

    /// Where its Prometheus exporter is (the banner's `exporter http://` address).
    pub fn prometheus_addr(&self) -> SocketAddr {
        address(&self.banner, &["exporter http://"])
            .unwrap_or_else(|| panic!("no exporter address in the banner {:?}", self.banner))
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM, with kill(1): std can only send SIGKILL.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill -TERM failed: {status}");
    }

    /// Waits up to `limit` for the process to exit.
    pub fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let step = Duration::from_millis(20);
        let mut waited = Duration::ZERO;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if waited >= limit {
                return None;
            }
            std::thread::sleep(step);
            waited += step;
        }
    }
}

/// What a server started with [`Tollgate::start_logged`] wrote on stderr so far.
#[derive(Clone, Default)]
pub struct Logs(Arc<std::sync::Mutex<String>>);

impl Logs {
    /// The text so far.
    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }
}

impl Drop for Tollgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// 64 concurrent HTTP clients, spread over `servers`, post `body` for 3 s; returns the number of
/// 200s and of answers other than 200 or 429.
pub async fn hammer(servers: &[SocketAddr], body: &str) -> (u64, u64) {
    let clock = MonotonicClock::new();
    let deadline = clock.now() + Nanos::new(3_000_000_000);
    let allowed = Arc::new(AtomicU64::new(0));
    let other = Arc::new(AtomicU64::new(0));
    let client = Client::new();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let url = format!("http://{}/v1/check", servers[i % servers.len()]);
            let (client, body) = (client.clone(), body.to_owned());
            let (allowed, other) = (allowed.clone(), other.clone());
            tokio::spawn(async move {
                while clock.now() < deadline {
                    let response = client.post(&url).body(body.clone()).send().await;
                    match response.map(|r| r.status()) {
                        Ok(StatusCode::OK) => allowed.fetch_add(1, Ordering::Relaxed),
                        Ok(StatusCode::TOO_MANY_REQUESTS) => 0,
                        _ => other.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client task panicked");
    }
    (
        allowed.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
    )
}

/// What [`reserve_and_commit`] saw.
#[derive(Debug, Default)]
pub struct Settled {
    /// Tokens reserved by reservations allowed.
    pub reserved: u64,
    /// Tokens given back by their commits.
    pub refunded: u64,
    /// Commits replayed on another server and refused with 409.
    pub replays_refused: u64,
    /// Answers that were none of 200, 429, or a replay's 409.
    pub other: u64,
    /// Seconds from the first request to the last answer.
    pub seconds: f64,
}

/// 48 concurrent clients spread over `servers` for 3 s: each reserves `cost` (the `body` of a
/// check) on one server, commits a varying part of it on the next, then replays that commit on
/// the third, which must be refused.
pub async fn reserve_and_commit(servers: &[SocketAddr], body: &str, cost: u64) -> Settled {
    use serde_json::{Value, json};
    let clock = MonotonicClock::new();
    let start = clock.now();
    let deadline = start + Nanos::new(3_000_000_000);
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let client = Client::new();
    let servers: Vec<SocketAddr> = servers.to_vec();
    let tasks: Vec<_> = (0..48usize)
        .map(|i| {
            let url = |n: usize, path: &str| format!("http://{}{path}", servers[n % servers.len()]);
            let (reserve, commit, replay) = (
                url(i, "/v1/reserve"),
                url(i + 1, "/v1/commit"),
                url(i + 2, "/v1/commit"),
            );
            let (client, body, counts) = (client.clone(), body.to_owned(), counts.clone());
            tokio::spawn(async move {
                let mut round = 0u64;
                while clock.now() < deadline {
                    round += 1;
                    let Ok(response) = client.post(&reserve).body(body.clone()).send().await else {
                        counts[3].fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    match response.status() {
                        StatusCode::OK => {}
                        StatusCode::TOO_MANY_REQUESTS => continue,
                        _ => {
                            counts[3].fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    let answer: Value = match response.bytes().await {
                        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                        Err(_) => Value::Null,
                    };
                    let used = (round + i as u64) % (cost + 1);
                    let commit_body =
                        json!({"reservation": answer["reservation"], "used": used}).to_string();
                    counts[0].fetch_add(cost, Ordering::Relaxed);
                    let committed = client.post(&commit).body(commit_body.clone()).send().await;
                    match committed.map(|r| r.status()) {
                        Ok(StatusCode::OK) => counts[1].fetch_add(cost - used, Ordering::Relaxed),
                        _ => counts[3].fetch_add(1, Ordering::Relaxed),
                    };
                    let replayed = client.post(&replay).body(commit_body).send().await;
                    match replayed.map(|r| r.status()) {
                        Ok(StatusCode::CONFLICT) => counts[2].fetch_add(1, Ordering::Relaxed),
                        _ => counts[3].fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client task panicked");
    }
    let load = |i: usize| counts[i].load(Ordering::Relaxed);
    Settled {
        reserved: load(0),
        refunded: load(1),
        replays_refused: load(2),
        other: load(3),
        seconds: Duration::from(clock.now() - start).as_secs_f64(),
    }
}

/// The shared secret the servers of a test sign reservations with.
pub const SECRET: (&str, &str) = ("TOLLGATE_RESERVATION_SECRET", "a secret the servers share");

/// Asserts the bound of reservations across servers: reserved minus refunded never exceeds a
/// full bucket (10) plus the refill (10/s) over the run, every replay was refused, and the run
/// was not trivially denied.
pub fn assert_settled_within_the_bound(settled: &Settled) {
    println!("{settled:?}");
    assert_eq!(
        settled.other, 0,
        "answers other than 200, 429 and a replay's 409"
    );
    let net = settled.reserved - settled.refunded;
    let bound = 10.0 + 10.0 * settled.seconds;
    assert!(
        (net as f64) <= bound,
        "{net} tokens kept, the bound is {bound:.1}"
    );
    assert!(
        net >= 25,
        "only {net} tokens kept: the servers denied too much"
    );
    assert!(settled.replays_refused > 0);
}

/// The minimal config file, as the docs show it.
pub const MINIMAL: &str = r#"[store]
url = "memory"            # or redis://…, rediss://…, a comma-separated cluster, postgres://…

[http]
listen = "127.0.0.1:8080"

[policies.api]
capacity = 10             # the burst
refill = 10               # tokens added every `period`
period = "1s"             # humantime durations: "100ms", "1s", "1m", "1h", "1d"
"#;

/// Helpers of the configured server's tests.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

pub async fn check(client: &Client, server: &Tollgate, body: Value) -> (StatusCode, Value) {
    let response = client
        .post(format!("http://{}/v1/check", server.addr))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

pub async fn get(client: &Client, server: &Tollgate, path: &str) -> String {
    client
        .get(format!("http://{}{path}", server.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the sample `series` (name and labels, as the text format writes them).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Polls `GET /v1/policies` until `ready` holds of it; how long that took.
pub async fn until_policies(
    client: &Client,
    server: &Tollgate,
    ready: impl Fn(&Value) -> bool,
) -> Duration {
    let clock = MonotonicClock::new();
    let start = clock.now();
    loop {
        let policies: Value =
            serde_json::from_str(&get(client, server, "/v1/policies").await).unwrap();
        let took = Duration::from(clock.now() - start);
        if ready(&policies) {
            return took;
        }
        assert!(took < Duration::from_secs(5), "never reloaded: {policies}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn capacity_of(policies: &Value, name: &str) -> Option<u64> {
    policies["policies"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)?["capacity"]
        .as_u64()
}

/// `promtool check metrics` passes `text`, a scrape of `/metrics`.
pub fn promtool_check(text: &str) {
    let out = promtool(text);
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `promtool check metrics` parses `text` and finds no fault but counters named without
/// `_total`, as envoyproxy/ratelimit's names are (promtool then exits 3, its code for lint
/// findings; 1 is a scrape it cannot parse).
pub fn promtool_check_upstream_names(text: &str) {
    let out = promtool(text);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let only_suffixes = said
        .lines()
        .filter(|l| !l.trim().is_empty())
        .all(|l| l.ends_with("counter metrics should have \"_total\" suffix"));
    assert!(
        out.status.success() || (out.status.code() == Some(3) && only_suffixes),
        "promtool check metrics ({:?}):\n{said}\n{text}",
        out.status
    );
}

fn promtool(text: &str) -> std::process::Output {
    use std::io::Write;
    let promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut promtool = match promtool {
        Ok(child) => child,
        Err(e) => panic!(
            "promtool ({e}) is needed to check /metrics: `apt-get install prometheus` \
             (scripts/test installs it)"
        ),
    };
    promtool
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    promtool.wait_with_output().expect("promtool runs")
}

/// `tollgate config check FILE`: its success, stdout and stderr.
pub fn config_check(file: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["config", "check"])
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Time since it was started, on the monotonic clock the decisions use.
pub struct Stopwatch {
    clock: MonotonicClock,
    started: Nanos,
}

impl Stopwatch {
    /// Started now.
    pub fn start() -> Stopwatch {
        let clock = MonotonicClock::new();
        let started = clock.now();
        Stopwatch { clock, started }
    }

    /// How long since it was started.
    pub fn elapsed(&self) -> Duration {
        Duration::from(self.clock.now().saturating_sub(self.started))
    }
}
