//! The store-agnostic half of a failover run: clients deciding on a store at its limit, a fault
//! injected while they do, and what they saw, counted as it happens (a few atomics per key and
//! per slice of time, never a record per decision, so a long run holds no more than a short).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::store::guarded::{FailPolicy, GuardStats, Guarded};
use tollgate::{Check, Policy, Store};

use crate::BenchError;
use crate::clock::Stopwatch;

/// The width of the slices decisions and each key's grants are counted in.
const SLICE: Duration = Duration::from_millis(10);
/// How long the store must answer every decision, after the fault, for the failover to be over.
const SETTLED: Duration = Duration::from_secs(1);
/// The longest a failover may take before the run gives up waiting for it.
const GIVE_UP: Duration = Duration::from_secs(30);
/// Left out of the rate before the fault: connections and scripts warming up.
const WARM: Duration = Duration::from_millis(300);
/// The width of the latency histogram's buckets, and how many (the last holds every slower
/// decision).
const LATENCY_STEP: Duration = Duration::from_micros(20);
const LATENCY_BUCKETS: usize = 25_000;
/// Not yet: the fault's instant before it is injected.
const NOT_YET: u64 = u64::MAX;

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
    /// Whether the store is guarded by `FailPolicy::Deny` (else `FailPolicy::Allow`).
    pub(super) deny: bool,
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
    /// Decisions from the fault on that the store could not make (an error or its timeout),
    /// answered by the fail policy (`tollgate::store::guarded::Guarded`'s).
    pub fail_policy: u64,
    /// Of them, allowed (none under `deny`).
    pub fail_policy_allowed: u64,
    /// The guard's own counts over the whole run: calls the store failed, and of them those
    /// it answered "allowed".
    pub guard_errors: u64,
    /// See [`guard_errors`](Self::guard_errors).
    pub guard_failed_open: u64,
    /// Tokens the store allowed beyond the exact bound, summed over the keys (unlike the other
    /// benchmarks' over-grant tests, which compare one total with its `max_allowed` over a
    /// whole run, this is the worst window of each key, so a loss in the middle of a run
    /// shows however long the run goes on): per key, the
    /// most by which the tokens whose decisions started in any window of 10 ms slices `[s, e]`
    /// exceed `capacity + rate × (e − s + d)`, `d` the slowest decision the store made (its
    /// charge fell somewhere in its call); 0 for an exact store.
    pub over_grant: u64,
    /// The same counting every failed call as a grant too (it may have charged its token
    /// before it failed: a commit whose answer was lost, a write whose `WAIT` fell short), `d`
    /// the slowest call: the top of the over-grant's range.
    pub over_grant_high: u64,
    /// Seconds from the fault until the store answers again for good (its last failure ended),
    /// 0 when it never failed.
    pub answers_again: f64,
    /// Seconds from the fault to the end of the last window in which the over-grant grew: from
    /// then on the store's decisions are exact again. 0 when there was none.
    pub exact_again: f64,
    /// Seconds the fault itself took to inject (a promotion waited for, say).
    pub fault_took: f64,
    /// Decisions per second the store made before the fault (after a warm-up).
    pub rate_before: f64,
    /// Decisions per second it made from a moment after it answered again to the end.
    pub rate_after: f64,
    /// The slowest decision, ms.
    pub slowest_ms: f64,
    /// The median and 99th percentile of the store's decisions that started before the fault
    /// (after the warm-up), ms, to the histogram's 0.02 ms.
    pub p50_ms: f64,
    /// See [`p50_ms`](Self::p50_ms).
    pub p99_ms: f64,
}

/// Counters the clients share.
struct Tally {
    clock: Stopwatch,
    stop: AtomicBool,
    /// Which keys the clients decide on: 0 before the fault, 1 from it on. At the limit a
    /// replica's lag holds `rate × lag` tokens, which a failover longer than the lag refills
    /// anyway; fresh keys at the fault are drained in a burst during the lag, as keys new to
    /// a store are, and show what an asynchronous replica loses.
    epoch: AtomicU64,
    /// ns since the start when the fault began ([`NOT_YET`] before).
    fault_at: AtomicU64,
    /// Tokens the store allowed, per key of each epoch and per [`SLICE`] of its decision's
    /// start: `2 × keys × slices`, key by key.
    allowed: Vec<AtomicU64>,
    /// Calls the store failed, counted the same way (each may have charged its token).
    failed: Vec<AtomicU64>,
    /// Slices per key; decisions after the last count in the last.
    slices: usize,
    /// Decisions the store made, per slice since the start.
    decided_in: Vec<AtomicU64>,
    decided: AtomicU64,
    fail_policy: AtomicU64,
    fail_policy_allowed: AtomicU64,
    /// When the last failed decision ended, ns since the start (0: none yet).
    last_failure: AtomicU64,
    /// The slowest call, and the slowest the store answered, ns.
    slowest: AtomicU64,
    slowest_decided: AtomicU64,
    /// The store's decisions before the fault (after [`WARM`]), by how long they took, per
    /// [`LATENCY_STEP`].
    latency: Vec<AtomicU64>,
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
    // The longest a run can take (the fault's own time past GIVE_UP counts in the last slice):
    // a run's counters are sized by its phases, never by how many decisions it makes.
    let longest = before + GIVE_UP + SETTLED + after + SETTLED;
    let slices = (longest.as_nanos() / SLICE.as_nanos()) as usize + 1;
    let counters = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
    let tally = Arc::new(Tally {
        clock: Stopwatch::start(),
        stop: AtomicBool::new(false),
        epoch: AtomicU64::new(0),
        fault_at: AtomicU64::new(NOT_YET),
        allowed: counters(2 * load.keys * slices),
        failed: counters(2 * load.keys * slices),
        slices,
        decided_in: counters(slices),
        decided: AtomicU64::new(0),
        fail_policy: AtomicU64::new(0),
        fail_policy_allowed: AtomicU64::new(0),
        last_failure: AtomicU64::new(0),
        slowest: AtomicU64::new(0),
        slowest_decided: AtomicU64::new(0),
        latency: counters(LATENCY_BUCKETS),
    });
    // The library's own fail policy answers what the store cannot.
    let store = Guarded::new(
        store,
        if load.deny {
            FailPolicy::Deny
        } else {
            FailPolicy::Allow
        },
    );
    let clients: Vec<_> = (0..load.clients)
        .map(|client| {
            let (store, tally, load) = (store.clone(), Arc::clone(&tally), load.clone());
            tokio::spawn(async move { decide(client, &store, &tally, &load).await })
        })
        .collect();
    tokio::time::sleep(before).await;
    let fault_at = tally.clock.elapsed();
    tally
        .fault_at
        .store(fault_at.as_nanos() as u64, Ordering::Relaxed);
    tally.epoch.store(1, Ordering::Relaxed);
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
        store.stats(),
        load,
        fault_at,
        fault_took,
        answering_since,
        ran,
    ))
}

/// One client: decisions one after the other on its keys, until told to stop.
async fn decide<S: Store>(client: usize, store: &Guarded<S>, tally: &Tally, load: &Load) {
    let mut n = client;
    while !tally.stop.load(Ordering::Relaxed) {
        let key = n % load.keys;
        // Clients walk the keys with a stride, so that they meet on each key at random.
        n = n.wrapping_add(load.clients.max(1) * 7 + 1);
        let epoch = tally.epoch.load(Ordering::Relaxed);
        let name = format!("failover:{epoch}:{key}");
        let key = epoch as usize * load.keys + key;
        let started = tally.clock.elapsed();
        let answer = store
            .decide(&[Check::new(load.policy, name.as_bytes(), 1)])
            .await;
        let ended = tally.clock.elapsed();
        let took = ended.saturating_sub(started).as_nanos() as u64;
        tally.slowest.fetch_max(took, Ordering::Relaxed);
        let slice = ((started.as_nanos() / SLICE.as_nanos()) as usize).min(tally.slices - 1);
        let at = key * tally.slices + slice;
        // What the store decided, or `None` when the fail policy answered (an allowed verdict
        // it made, or under `deny` the store's error).
        let decided = match &answer {
            Ok(verdict) if !verdict.by_fail_policy() => Some(verdict.allowed()),
            _ => None,
        };
        match decided {
            Some(allowed) => {
                tally.slowest_decided.fetch_max(took, Ordering::Relaxed);
                if started >= WARM
                    && (started.as_nanos() as u64) < tally.fault_at.load(Ordering::Relaxed)
                {
                    let bucket = (took / LATENCY_STEP.as_nanos() as u64) as usize;
                    tally.latency[bucket.min(LATENCY_BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
                }
                if allowed {
                    tally.allowed[at].fetch_add(1, Ordering::Relaxed);
                }
                tally.decided.fetch_add(1, Ordering::Relaxed);
                tally.decided_in[slice].fetch_add(1, Ordering::Relaxed);
            }
            None => {
                tally.failed[at].fetch_add(1, Ordering::Relaxed);
                if started.as_nanos() as u64 >= tally.fault_at.load(Ordering::Relaxed) {
                    tally.fail_policy.fetch_add(1, Ordering::Relaxed);
                    if matches!(&answer, Ok(v) if v.allowed()) {
                        tally.fail_policy_allowed.fetch_add(1, Ordering::Relaxed);
                    }
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
    guard: &GuardStats,
    load: &Load,
    fault_at: Duration,
    fault_took: Duration,
    answering_since: Duration,
    ran: Duration,
) -> Seen {
    let load_all = |counters: &[AtomicU64]| -> Vec<u64> {
        counters.iter().map(|a| a.load(Ordering::Relaxed)).collect()
    };
    let allowed = load_all(&tally.allowed);
    let failed = load_all(&tally.failed);
    // Only the slices the run reached (the last holds any later decision).
    let used = ((ran.as_nanos() / SLICE.as_nanos()) as usize + 1).min(tally.slices);
    let bound = Bound {
        capacity: load.capacity,
        rate: load.rate,
    };
    let slowest_decided = Duration::from_nanos(tally.slowest_decided.load(Ordering::Relaxed));
    let slowest = Duration::from_nanos(tally.slowest.load(Ordering::Relaxed));
    let (mut over_grant, mut over_grant_high, mut grew_until) = (0, 0, 0);
    let mut either = vec![0; used];
    for key in 0..2 * load.keys {
        let grants = &allowed[key * tally.slices..][..used];
        let (over, grew) = bound.over(grants, slowest_decided);
        over_grant += over;
        grew_until = grew_until.max(grew);
        for (i, slot) in either.iter_mut().enumerate() {
            *slot = grants[i] + failed[key * tally.slices + i];
        }
        over_grant_high += bound.over(&either, slowest).0;
    }
    let rate = |from: Duration, to: Duration| {
        let (a, b) = (
            (from.as_nanos() / SLICE.as_nanos()) as usize,
            (to.as_nanos() / SLICE.as_nanos()) as usize,
        );
        let b = b.min(tally.decided_in.len());
        if b <= a {
            return 0.0;
        }
        let count: u64 = tally.decided_in[a..b]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        count as f64 / (SLICE.as_secs_f64() * (b - a) as f64)
    };
    let latency = load_all(&tally.latency);
    let quantile = |q: u64| {
        let total: u64 = latency.iter().sum();
        // The bucket holding the decision of rank ⌈total × q / 100⌉, by its upper edge.
        let rank = (total * q).div_ceil(100).max(1);
        let mut seen = 0;
        for (bucket, count) in latency.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return (LATENCY_STEP * (bucket as u32 + 1)).as_secs_f64() * 1e3;
            }
        }
        0.0
    };
    let fault_slice = (fault_at.as_nanos() / SLICE.as_nanos()) as usize;
    let grew_end = SLICE * grew_until as u32;
    Seen {
        decided: tally.decided.load(Ordering::Relaxed),
        decided_before: tally.decided_in[..fault_slice.min(tally.decided_in.len())]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum(),
        allowed: allowed.iter().sum(),
        fail_policy: tally.fail_policy.load(Ordering::Relaxed),
        fail_policy_allowed: tally.fail_policy_allowed.load(Ordering::Relaxed),
        guard_errors: guard.store_errors(),
        guard_failed_open: guard.failed_open(),
        over_grant,
        over_grant_high,
        answers_again: answering_since.saturating_sub(fault_at).as_secs_f64(),
        exact_again: if over_grant == 0 {
            0.0
        } else {
            grew_end.saturating_sub(fault_at).as_secs_f64()
        },
        fault_took: fault_took.as_secs_f64(),
        rate_before: rate(WARM.min(fault_at / 2), fault_at),
        // From a moment after the store answered again (its connections remade): the end
        // slice is partial, left out.
        rate_after: rate(answering_since + WARM, ran.saturating_sub(SLICE)),
        slowest_ms: slowest.as_secs_f64() * 1e3,
        p50_ms: quantile(50),
        p99_ms: quantile(99),
    }
}

/// The exact bound on one key: no window grants more than `capacity + rate × its length`.
struct Bound {
    capacity: u64,
    rate: u64,
}

impl Bound {
    /// The most by which the tokens of `grants` (per [`SLICE`], by their decision's start)
    /// in any window of slices `s..=e` exceed `capacity + rate × ((e + 1 − s) × SLICE +
    /// late)`, `late` the longest a call took (its charge fell somewhere in it); and the end
    /// (in slices) of the last window in which that most grew. Every pair of slices, integer
    /// arithmetic, refill rounded down: never less than the truth.
    ///
    /// In nanotokens, a window's excess is `(P[e] − P[s]) × 10⁹ − rate × SLICE × (e − s) −
    /// capacity × 10⁹ − rate × late` (`P` the prefix sums), so for each end the worst start is
    /// the one with the least `P[s] × 10⁹ − rate × SLICE × s` so far: one pass, not every pair
    /// (a run of 256 keys has hundreds of thousands of slice pairs per key).
    fn over(&self, grants: &[u64], late: Duration) -> (u64, usize) {
        const GIGA: i128 = 1_000_000_000;
        let rate = i128::from(self.rate);
        let step = rate * SLICE.as_nanos() as i128;
        let fixed = i128::from(self.capacity) * GIGA + rate * late.as_nanos() as i128;
        let (mut worst, mut grew) = (0u64, 0usize);
        let (mut prefix, mut least) = (0i128, 0i128);
        for (i, &g) in grants.iter().enumerate() {
            prefix += i128::from(g);
            let end = i as i128 + 1;
            let at_end = prefix * GIGA - step * end;
            let scaled = at_end - least - fixed;
            // Tokens over: granted − capacity − ⌊refill⌋ = ⌈scaled / 10⁹⌉.
            let over = u128::try_from(scaled).unwrap_or(0).div_ceil(GIGA as u128);
            let excess = u64::try_from(over).unwrap_or(u64::MAX);
            if excess > worst {
                (worst, grew) = (excess, i + 1);
            }
            least = least.min(at_end);
        }
        (worst, grew)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_counts_every_window_not_only_those_to_the_end() {
        let bound = Bound {
            capacity: 10,
            rate: 100,
        };
        // 10 tokens in the first slice (the capacity), 12 in the 101st, a second later (the
        // bucket full again): 1 more than the 10 of capacity and the 1 a 10 ms slice refills,
        // in that slice alone; every window to the end of the 300 slices refills far more.
        let mut grants = vec![0; 300];
        grants[0] = 10;
        grants[100] = 12;
        assert_eq!(bound.over(&grants, Duration::ZERO), (1, 101));
        // A call that may have charged up to 10 ms late: a slice more of refill.
        assert_eq!(bound.over(&grants, SLICE), (0, 0));
        // A token a slice is the rate: never over.
        assert_eq!(bound.over(&[1; 300], Duration::ZERO), (0, 0));
    }
}
