//! A fault under load, measured from outside the server: 16 clients ask for 3.5 s, a fault is
//! injected at 1 s and healed at 2 s, and every answer is timed. The figures are the issue's:
//! the longest wait, the answers the fail policy gave, the time from the heal until the store
//! decides again, and the decisions allowed against the exact bound.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Client, StatusCode};
use tollgate::{Clock, MonotonicClock, Nanos};

/// When the fault starts and ends, and when the load stops, in seconds from the start.
pub const FAULT_AT: f64 = 1.0;
/// See [`FAULT_AT`].
pub const HEAL_AT: f64 = 2.0;
/// See [`FAULT_AT`].
pub const LOAD_FOR: f64 = 3.5;

/// What one request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 200.
    Allowed,
    /// 429.
    Denied,
    /// 503 (the fail policy `deny`), another status, or no answer.
    Failed,
}

/// One request.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When it was sent, in seconds from the start.
    pub sent: f64,
    /// How long it waited.
    pub took: f64,
    /// What it got.
    pub outcome: Outcome,
}

/// A run's figures.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Every request.
    pub samples: Vec<Sample>,
}

impl Figures {
    /// The longest wait, in seconds.
    pub fn longest_wait(&self) -> f64 {
        self.samples.iter().map(|s| s.took).fold(0.0, f64::max)
    }

    /// Requests that failed (the fail policy `deny` answers 503).
    pub fn failed(&self) -> usize {
        self.count(Outcome::Failed)
    }

    /// Requests allowed.
    pub fn allowed(&self) -> usize {
        self.count(Outcome::Allowed)
    }

    fn count(&self, outcome: Outcome) -> usize {
        self.samples.iter().filter(|s| s.outcome == outcome).count()
    }

    /// From the heal until the last failure answered, in seconds (0 when none came after it):
    /// the time back to decisions by the store.
    pub fn back_after(&self) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.outcome == Outcome::Failed)
            .map(|s| s.sent + s.took - HEAL_AT)
            .fold(0.0, f64::max)
    }

    /// Requests that failed outside the fault (it started before, or its effect lasted past
    /// `grace` after the heal).
    pub fn failed_outside(&self, grace: f64) -> usize {
        self.samples
            .iter()
            .filter(|s| s.outcome == Outcome::Failed)
            .filter(|s| s.sent + s.took < FAULT_AT || s.sent > HEAL_AT + grace)
            .count()
    }

    /// The figures on one line, for the README's table.
    pub fn line(&self, what: &str) -> String {
        format!(
            "FAULT {what}: longest wait {:.3} s, {} answered by the fail policy, back after \
             {:.3} s, {} allowed of {} requests",
            self.longest_wait(),
            self.failed(),
            self.back_after(),
            self.allowed(),
            self.samples.len()
        )
    }
}

/// Runs the load against the server at `addr` (`body`, a `/v1/check` request), calling
/// `inject` at [`FAULT_AT`] and `heal` at [`HEAL_AT`].
pub async fn under_load<I, H>(addr: SocketAddr, body: &str, inject: I, heal: H) -> Figures
where
    I: Future<Output = ()>,
    H: Future<Output = ()>,
{
    under_load_for(LOAD_FOR, addr, body, inject, heal).await
}

/// [`under_load`] for `seconds` rather than [`LOAD_FOR`].
pub async fn under_load_for<I, H>(
    load_for: f64,
    addr: SocketAddr,
    body: &str,
    inject: I,
    heal: H,
) -> Figures
where
    I: Future<Output = ()>,
    H: Future<Output = ()>,
{
    let clock = MonotonicClock::new();
    let start = clock.now();
    let at = move |s: f64| start + Nanos::new((s * 1e9) as u64);
    let seconds = move || Duration::from(clock.now() - start).as_secs_f64();
    let samples = Arc::new(Mutex::new(Vec::new()));
    // A request never waits past this: one that would is a failure, its wait this long.
    let client = Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client");
    let url = format!("http://{addr}/v1/check");
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (client, url, body, samples) = (
                client.clone(),
                url.clone(),
                body.to_owned(),
                Arc::clone(&samples),
            );
            tokio::spawn(async move {
                let end = at(load_for);
                while clock.now() < end {
                    let sent = seconds();
                    let answer = client.post(&url).body(body.clone()).send().await;
                    let took = seconds() - sent;
                    let outcome = match answer.map(|r| r.status()) {
                        Ok(StatusCode::OK) => Outcome::Allowed,
                        Ok(StatusCode::TOO_MANY_REQUESTS) => Outcome::Denied,
                        _ => Outcome::Failed,
                    };
                    samples.lock().expect("samples").push(Sample {
                        sent,
                        took,
                        outcome,
                    });
                    // Paced, so that the load does not starve the store's own recovery on
                    // two cores.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        })
        .collect();
    sleep_until(&clock, at(FAULT_AT)).await;
    inject.await;
    sleep_until(&clock, at(HEAL_AT)).await;
    heal.await;
    for task in tasks {
        task.await.expect("a load task panicked");
    }
    let samples = samples.lock().expect("samples").clone();
    Figures { samples }
}

async fn sleep_until(clock: &MonotonicClock, when: Nanos) {
    let now = clock.now();
    if when > now {
        tokio::time::sleep(Duration::from(when - now)).await;
    }
}

/// The most a bucket of `capacity` refilled by `capacity` a second allows in the load's
/// [`LOAD_FOR`] seconds (plus one for the rounding of the last instant).
pub fn bound(capacity: usize) -> usize {
    bound_for(capacity, LOAD_FOR)
}

/// [`bound`] over `seconds`.
pub fn bound_for(capacity: usize, seconds: f64) -> usize {
    capacity + (capacity as f64 * seconds).ceil() as usize + 1
}

impl Figures {
    /// Answers the store gave (allowed or denied) to requests sent at or after `from` seconds.
    pub fn decided_after(&self, from: f64) -> usize {
        self.samples
            .iter()
            .filter(|s| s.sent >= from && s.outcome != Outcome::Failed)
            .count()
    }
}
