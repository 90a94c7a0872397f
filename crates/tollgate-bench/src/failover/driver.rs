//! The store-agnostic half of a failover run: clients deciding on a store at its limit, a fault
//! injected while they do, and what they saw, counted as it happens (a few atomics per key and
//! per slice of time, never a record per decision, so a long run holds no more than a short).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Check, Policy, Store};

use crate::BenchError;
use crate::clock::Stopwatch;

/// The width of the slices decisions are counted in.
const SLICE: Duration = Duration::from_millis(10);
/// The width of the slices each key's grants are counted in, for the over-grant.
const GRANTS: Duration = Duration::from_millis(100);
/// The longest run the slices cover (for the rates before and after); decisions after it
/// still count in the totals.
const MAX_RUN: Duration = Duration::from_secs(120);
/// How long the store must answer every decision, after the fault, for the failover to be over.
const SETTLED: Duration = Duration::from_secs(1);
/// The longest a failover may take before the run gives up waiting for it.
const GIVE_UP: Duration = Duration::from_secs(45);
/// Left out of the rate before the fault: connections and scripts warming up.
const WARM: Duration = Duration::from_millis(300);

/// What answers a decision the store could not make: the server's `fail_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailPolicy {
    /// Allow (`fail_policy = "open"`, the default).
    Open,
    /// Deny (`fail_policy = "deny"`).
    Deny,
}

impl FailPolicy {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FailPolicy::Open => "open",
            FailPolicy::Deny => "deny",
        }
    }
}

/// The clients and what they ask.
#[derive(Debug, Clone)]
pub(super) struct Load {
    /// Clients deciding at once, each one decision after the other.
    pub(super) clients: usize,
    /// The keys, the clients spread over them (one: every client on one hot key).
    pub(super) keys: usize,
    /// Every key's limit.
    pub(super) policy: Policy,
    /// Tokens per second the policy refills.
    pub(super) rate: u64,
    /// Tokens a bucket holds.
    pub(super) capacity: u64,
    pub(super) fail_policy: FailPolicy,
}

/// What the clients saw over one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Seen {
    /// Decisions the store made.
    pub decided: u64,
    /// Of them, those that started before the fault.
    pub decided_before: u64,
    /// Of them, allowed.
    pub allowed: u64,
    /// Decisions the store could not make (an error or its timeout), answered by the fail
    /// policy.
    pub fail_policy: u64,
    /// Of them, allowed (none under `deny`).
    pub fail_policy_allowed: u64,
    /// Tokens the store allowed beyond the exact bound, summed over the keys: per key, the
    /// most by which the tokens it allowed from any instant `s` (of the starts of 100 ms
    /// slices) to the end `e` exceed `capacity + rate × (e − s)`; 0 for an exact store.
    pub over_grant: u64,
    /// Seconds from the fault until the store answers again for good (its last failure ended),
    /// 0 when it never failed.
    pub exact_again: f64,
    /// Seconds the fault itself took to inject (a promotion waited for, say).
    pub fault_took: f64,
    /// Decisions per second the store made before the fault (after a warm-up).
    pub rate_before: f64,
    /// Decisions per second it made from a moment after it answered again to the end.
    pub rate_after: f64,
    /// The slowest decision, ms.
    pub slowest_ms: f64,
}

/// Counters the clients share.
struct Tally {
    clock: Stopwatch,
    stop: AtomicBool,
    /// Tokens the store allowed, per key and per [`GRANTS`] slice of its decision's start:
    /// `keys × slices`, key by key.
    allowed: Vec<AtomicU64>,
    /// Slices of [`GRANTS`] per key.
    grant_slices: usize,
    /// Decisions the store made, per slice since the start.
    slices: Vec<AtomicU64>,
    decided: AtomicU64,
    fail_policy: AtomicU64,
    fail_policy_allowed: AtomicU64,
    /// When the last failed decision ended, ns since the start (0: none yet).
    last_failure: AtomicU64,
    slowest: AtomicU64,
}

/// Runs `load` on `store` for `before`, injects `fault` (on a blocking thread: it may wait for
/// a promotion), waits until the store has answered every decision for a second, runs `after`
/// more, and stops the clients.
pub(super) async fn drive<S>(
    store: S,
    load: &Load,
    before: Duration,
    after: Duration,
    fault: impl FnOnce() -> Result<(), BenchError> + Send + 'static,
) -> Result<Seen, BenchError>
where
    S: Store + Clone + Send + Sync + 'static,
{
    let slices = (MAX_RUN.as_nanos() / SLICE.as_nanos()) as usize;
    // One more, for every grant past the last.
    let grant_slices = (MAX_RUN.as_nanos() / GRANTS.as_nanos()) as usize + 1;
    let tally = Arc::new(Tally {
        clock: Stopwatch::start(),
        stop: AtomicBool::new(false),
        allowed: (0..load.keys * grant_slices)
            .map(|_| AtomicU64::new(0))
            .collect(),
        grant_slices,
        slices: (0..slices).map(|_| AtomicU64::new(0)).collect(),
        decided: AtomicU64::new(0),
        fail_policy: AtomicU64::new(0),
        fail_policy_allowed: AtomicU64::new(0),
        last_failure: AtomicU64::new(0),
        slowest: AtomicU64::new(0),
    });
    let clients: Vec<_> = (0..load.clients)
        .map(|client| {
            let (store, tally, load) = (store.clone(), Arc::clone(&tally), load.clone());
            tokio::spawn(async move { decide(client, &store, &tally, &load).await })
        })
        .collect();
    tokio::time::sleep(before).await;
    let fault_at = tally.clock.elapsed();
    let injected = tokio::task::spawn_blocking(fault).await;
    let fault_took = tally.clock.elapsed().saturating_sub(fault_at);
    let outcome = match injected {
        Ok(Ok(())) => settle(&tally, fault_at).await,
        Ok(Err(e)) => Err(e),
        Err(e) => Err(BenchError::Join(e)),
    };
    let answering_since = match outcome {
        Ok(since) => since,
        Err(e) => {
            tally.stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    tokio::time::sleep(after).await;
    tally.stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await?;
    }
    let ran = tally.clock.elapsed();
    Ok(seen(
        &tally,
        load,
        fault_at,
        fault_took,
        answering_since,
        ran,
    ))
}

/// One client: decisions one after the other on its keys, until told to stop.
async fn decide<S: Store>(client: usize, store: &S, tally: &Tally, load: &Load) {
    let mut n = client;
    while !tally.stop.load(Ordering::Relaxed) {
        let key = n % load.keys;
        // Clients walk the keys with a stride, so that they meet on each key at random.
        n = n.wrapping_add(load.clients.max(1) * 7 + 1);
        let name = format!("failover:{key}");
        let started = tally.clock.elapsed();
        let answer = store
            .decide(&[Check::new(load.policy, name.as_bytes(), 1)])
            .await;
        let ended = tally.clock.elapsed();
        let took = ended.saturating_sub(started).as_nanos() as u64;
        tally.slowest.fetch_max(took, Ordering::Relaxed);
        match answer {
            Ok(verdict) => {
                if verdict.allowed() {
                    let slice = ((started.as_nanos() / GRANTS.as_nanos()) as usize)
                        .min(tally.grant_slices - 1);
                    tally.allowed[key * tally.grant_slices + slice].fetch_add(1, Ordering::Relaxed);
                }
                tally.decided.fetch_add(1, Ordering::Relaxed);
                let slice = (started.as_nanos() / SLICE.as_nanos()) as usize;
                if let Some(count) = tally.slices.get(slice) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                tally.fail_policy.fetch_add(1, Ordering::Relaxed);
                if load.fail_policy == FailPolicy::Open {
                    tally.fail_policy_allowed.fetch_add(1, Ordering::Relaxed);
                }
                tally
                    .last_failure
                    .fetch_max(ended.as_nanos() as u64, Ordering::Relaxed);
            }
        }
        // A store that answers at once (connections refused) would keep this client's worker
        // from ever driving the runtime's timers; a server answers its caller in between.
        tokio::task::yield_now().await;
    }
}

/// Waits until the store has answered every decision for [`SETTLED`] since the fault: the
/// instant it began to (the end of its last failure, or the fault if it never failed).
async fn settle(tally: &Tally, fault_at: Duration) -> Result<Duration, BenchError> {
    loop {
        let now = tally.clock.elapsed();
        let last = Duration::from_nanos(tally.last_failure.load(Ordering::Relaxed));
        let since = last.max(fault_at);
        if now.saturating_sub(since) >= SETTLED {
            return Ok(since);
        }
        if now.saturating_sub(fault_at) >= GIVE_UP {
            return Err(BenchError::Args(format!(
                "the store still failed {} s after the fault",
                GIVE_UP.as_secs()
            )));
        }
        tokio::time::sleep(SLICE).await;
    }
}

/// What the tally says, at the end of a run of `ran`.
fn seen(
    tally: &Tally,
    load: &Load,
    fault_at: Duration,
    fault_took: Duration,
    answering_since: Duration,
    ran: Duration,
) -> Seen {
    let allowed: Vec<u64> = tally
        .allowed
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    let over_grant = allowed
        .chunks(tally.grant_slices)
        .map(|grants| over_bound(grants, load, ran))
        .sum();
    let rate = |from: Duration, to: Duration| {
        let (a, b) = (
            (from.as_nanos() / SLICE.as_nanos()) as usize,
            (to.as_nanos() / SLICE.as_nanos()) as usize,
        );
        let b = b.min(tally.slices.len());
        if b <= a {
            return 0.0;
        }
        let count: u64 = tally.slices[a..b]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        count as f64 / (SLICE.as_secs_f64() * (b - a) as f64)
    };
    let fault_slice = (fault_at.as_nanos() / SLICE.as_nanos()) as usize;
    Seen {
        decided: tally.decided.load(Ordering::Relaxed),
        decided_before: tally.slices[..fault_slice.min(tally.slices.len())]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum(),
        allowed: allowed.iter().sum(),
        fail_policy: tally.fail_policy.load(Ordering::Relaxed),
        fail_policy_allowed: tally.fail_policy_allowed.load(Ordering::Relaxed),
        over_grant,
        exact_again: answering_since.saturating_sub(fault_at).as_secs_f64(),
        fault_took: fault_took.as_secs_f64(),
        rate_before: rate(WARM.min(fault_at / 2), fault_at),
        // From a moment after the store answered again (its connections remade): the end
        // slice is partial, left out.
        rate_after: rate(answering_since + WARM, ran.saturating_sub(SLICE)),
        slowest_ms: tally.slowest.load(Ordering::Relaxed) as f64 / 1e6,
    }
}

/// One key's over-grant: the most by which the tokens it granted from the start of a slice to
/// the end of the run (`ran`) exceed the exact bound over that time, `capacity + rate × time`
/// (integer arithmetic, rounded down). A grant counts in the slice its decision started in,
/// and was made after that start: the bound holds for every slice.
fn over_bound(grants: &[u64], load: &Load, ran: Duration) -> u64 {
    let mut since = 0u64;
    let mut worst = 0u64;
    for (slice, granted) in grants.iter().enumerate().rev() {
        since += granted;
        let start = GRANTS.as_nanos() * slice as u128;
        let time = ran.as_nanos().saturating_sub(start);
        let refilled = u128::from(load.rate) * time / 1_000_000_000;
        let bound = u128::from(load.capacity) + refilled;
        worst =
            worst.max(u64::try_from(u128::from(since).saturating_sub(bound)).unwrap_or(u64::MAX));
    }
    worst
}
