//! Runs the `tollgate` binary as a black box: start it, read the address it announces, signal it.

// Each test file compiles this module on its own and uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::{Client, StatusCode};
use tollgate::{Clock, MonotonicClock, Nanos};

/// A running `tollgate serve`; killed when dropped.
pub struct Tollgate {
    child: Child,
    pub addr: SocketAddr,
    pub banner: String,
}

impl Tollgate {
    /// Starts `tollgate --listen 127.0.0.1:0 <args>` and waits for its banner.
    pub fn start(args: &[&str]) -> Tollgate {
        Tollgate::start_with_env(args, &[])
    }

    /// [`start`](Self::start) with environment variables set.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Tollgate {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the tollgate binary starts");
        let mut banner = String::new();
        let stdout = child.stdout.take().expect("stdout is piped");
        BufReader::new(stdout)
            .read_line(&mut banner)
            .expect("tollgate prints its banner");
        let addr = banner
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in the banner {banner:?}"));
        Tollgate {
            child,
            addr,
            banner,
        }
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
