//! A flood of distinct keys through the server, as an attacker rotating addresses sends: the
//! memory store holds at most `--max-keys` keys, so memory stays bounded (RSS measured); keys
//! held before the flood keep exact decisions; new keys past the cap get the fail policy; the
//! server keeps answering.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::{Client, StatusCode};
use support::Tollgate;

/// The server's resident memory, in KiB (Linux `/proc`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn body(key: &str) -> String {
    // Five an hour: a key's count never refills while the test runs.
    format!(r#"{{"key": "{key}", "capacity": 5, "refill": 5, "period_ms": 3600000}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_distinct_keys_is_held_to_the_cap() {
    const CAP: u64 = 5_000;
    const FLOOD: u64 = 30_000;
    let server = Tollgate::start(&["--max-keys", &CAP.to_string(), "--on-store-error", "deny"]);
    let url = format!("http://{}/v1/check", server.addr);
    let client = Client::new();
    let ask = move |key: String| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            client
                .post(&url)
                .body(body(&key))
                .send()
                .await
                .map(|r| r.status())
        }
    };
    // An honest client spends 3 of its 5 before the flood.
    for _ in 0..3 {
        assert_eq!(
            ask("honest".into()).await.expect("an answer"),
            StatusCode::OK
        );
    }
    // Warm the server's allocations up with a few thousand keys, then measure.
    for i in 0..2_000 {
        ask(format!("warm-{i}")).await.expect("an answer");
    }
    let before = rss_kib(server.pid());

    let counts: Arc<[AtomicU64; 3]> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (counts, next, ask) = (Arc::clone(&counts), Arc::clone(&next), ask.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= FLOOD {
                        return;
                    }
                    let slot = match ask(format!("attacker-{i}")).await {
                        Ok(StatusCode::OK) => 0,
                        Ok(StatusCode::SERVICE_UNAVAILABLE) => 1,
                        _ => 2,
                    };
                    counts[slot].fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a flood task");
    }
    let after = rss_kib(server.pid());
    let [allowed, full, other] = [0, 1, 2].map(|i| counts[i].load(Ordering::Relaxed));
    eprintln!(
        "FLOOD {FLOOD} keys at a cap of {CAP}: {allowed} allowed, {full} answered by the fail \
         policy, {other} other; RSS {before} KiB before, {after} KiB after"
    );
    assert_eq!(other, 0, "every request answered");
    // The cap held: the keys before the flood plus the flood's first ones fill it.
    assert!(allowed <= CAP, "{allowed} new keys held, the cap is {CAP}");
    assert!(full >= FLOOD - CAP, "past the cap, the fail policy answers");
    // 30,000 keys held would take some MiB; held to the cap, far less grows.
    assert!(
        after.saturating_sub(before) < 4 * 1024,
        "RSS grew {} KiB",
        after - before
    );
    // The honest client's bucket is exact: 2 left, then denied.
    for expected in [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        assert_eq!(ask("honest".into()).await.expect("an answer"), expected);
    }
    let health = reqwest::get(format!("http://{}/healthz", server.addr))
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
}
