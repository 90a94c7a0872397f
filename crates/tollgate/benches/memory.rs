//! The in-memory store beside `governor`: time per check, and heap bytes per key.
//!
//! Run with `cargo bench -p tollgate --bench memory` (a criterion filter after `--` runs a subset;
//! the summary then shows `—` for what did not run).
//!
//! **What is timed.** One check of cost 1 on a key that already has a bucket, as a server would
//! make it: the key is a `String` such as `user:42`, pre-built outside the timed loop. Contenders:
//!
//! - `tollgate_limiter`: [`MemoryLimiter::check`], bound to its policy once;
//! - `tollgate_store`: [`MemoryStore::check`], which also looks the policy's table up;
//! - `governor`: `DefaultKeyedRateLimiter<String>::check_key` (a `DashMap`, std `RandomState`,
//!   and, without governor's `quanta` feature, the same `Instant` clock as tollgate);
//! - `key_walk`: the loop alone (pick a key, read its bytes), the floor under every other row.
//!
//! Scenarios: one hot key, 100k keys and 1M keys, each with 1 and 2 threads. Over many keys the
//! keys are visited by a xorshift walk (identical for every contender) so that caches see a
//! spread of clients, not a sequential scan. With 2 threads, each thread walks its own half of
//! the keys (odd or even indices); on the hot key both hammer the same bucket.
//!
//! **What is reported.** Per check, at aggregate throughput: with 2 threads, criterion's time per
//! iteration is wall time ÷ (2 × iterations), so `checks/s = 1e9 ÷ ns` is the sum over both
//! threads. The summary table is computed in this run from the same routines that criterion
//! times: total time ÷ total checks over each benchmark's last [`SAMPLE_SIZE`] samples (its
//! measurement samples, not its warm-up).
//!
//! **The policy** is the same on both sides: a burst of `u32::MAX` refilled at 1000 per second
//! (governor `Quota::per_second(1000).allow_burst(u32::MAX)`, tollgate
//! `Policy::token_bucket(u32::MAX, 1000, 1 s)`). Every key is first charged [`PRECHARGE`] tokens,
//! which puts its bucket about 1000 s in debt. So every timed check is allowed and takes the
//! compare-and-swap write path on both sides, and tollgate never sweeps a benchmarked key as
//! idle (a key whose bucket is full again is dropped when new keys arrive). The run prints how
//! many timed checks (warm-up included) were denied, to show it.
//!
//! **Bytes per key.** A counting global allocator (over `System`) tracks the bytes requested and
//! blocks live. 1M distinct keys are charged once in a fresh limiter of each kind, and the
//! difference in live bytes ÷ 1M is reported; those limiters then serve the 1M-key scenario. The
//! counter is active during the timed groups too, but the timed loops do not allocate (the run
//! prints allocations per check to show it), so it costs them nothing. Bytes requested do not
//! include the allocator's own per-block overhead (at least 8 bytes, and 32-byte minimum blocks,
//! in glibc), hence the blocks-per-key column.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tollgate::{MemoryLimiter, MemoryStore, Policy};

/// Counts live heap bytes and blocks, so that memory per key can be read off around an insert.
struct CountingAllocator;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);
/// Every allocation ever made: tells whether a timed loop allocates.
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

impl CountingAllocator {
    fn allocated(size: usize) {
        LIVE_BYTES.fetch_add(size, Ordering::Relaxed);
        LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counters
// are only updated beside it and never affect what is returned.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from the caller, who upholds `GlobalAlloc::alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            Self::allocated(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            Self::allocated(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from `System`, with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator, hence from `System`, with this layout.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // One block before and after; only its size changed.
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Criterion's samples per benchmark; the summary reads this many last samples of each.
const SAMPLE_SIZE: usize = 20;
/// Keys in the large scenario and in the bytes-per-key measurement.
const MANY_KEYS: usize = 1_000_000;
/// Keys in the middle scenario (they fit in this machine's 32 MiB L3 cache; 1M keys do not).
const SOME_KEYS: usize = 100_000;
/// Tokens taken from every key before timing: 1000 s of refill at 1000 per second.
const PRECHARGE: u32 = 1_000_000;
/// Refill per second, for both limiters.
const RATE: u32 = 1000;

/// The wall clock, for timing only (clippy forbids `Instant::now` on tollgate's decision path).
#[allow(clippy::disallowed_methods)]
fn wall_clock() -> Instant {
    Instant::now()
}

/// The policy on tollgate's side: a burst of `u32::MAX`, refilled at [`RATE`] per second.
fn tollgate_policy() -> Policy {
    Policy::token_bucket(u64::from(u32::MAX), u64::from(RATE), Duration::from_secs(1))
        .expect("a valid policy")
}

/// The same policy on governor's side.
fn governor_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(RATE).expect("RATE > 0")).allow_burst(NonZeroU32::MAX)
}

/// Both limiters, each holding the same keys, every bucket charged [`PRECHARGE`] tokens.
struct Contenders {
    store: MemoryStore,
    policy: Policy,
    limiter: MemoryLimiter,
    governor: DefaultKeyedRateLimiter<String>,
}

fn tollgate_holding(keys: &[String]) -> (MemoryStore, MemoryLimiter) {
    let policy = tollgate_policy();
    // Room for every key, so the cap never interferes with the measurement.
    let store = MemoryStore::builder().max_keys(2 * keys.len()).build();
    let limiter = store.limiter(&policy);
    for key in keys {
        let charged = limiter.check(key.as_bytes(), u64::from(PRECHARGE));
        assert!(
            charged.is_ok_and(|d| d.allowed),
            "precharge of {key} denied"
        );
    }
    assert_eq!(store.len(), keys.len(), "tollgate dropped keys");
    (store, limiter)
}

fn governor_holding(keys: &[String]) -> DefaultKeyedRateLimiter<String> {
    let governor = RateLimiter::keyed(governor_quota());
    let cost = NonZeroU32::new(PRECHARGE).expect("PRECHARGE > 0");
    for key in keys {
        let charged = governor.check_key_n(key, cost);
        assert!(matches!(charged, Ok(Ok(()))), "precharge of {key} denied");
    }
    assert_eq!(governor.len(), keys.len(), "governor dropped keys");
    governor
}

/// Heap held by what `build` returns: bytes requested and blocks, both still live.
#[derive(Clone, Copy)]
struct Footprint {
    bytes: usize,
    blocks: usize,
}

fn measured<T>(build: impl FnOnce() -> T) -> (T, Footprint) {
    let (bytes, blocks) = (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_BLOCKS.load(Ordering::Relaxed),
    );
    let built = build();
    let footprint = Footprint {
        bytes: LIVE_BYTES.load(Ordering::Relaxed) - bytes,
        blocks: LIVE_BLOCKS.load(Ordering::Relaxed) - blocks,
    };
    (built, footprint)
}

/// A xorshift walk over the keys of one lane: indices `lane, lane + lanes, lane + 2 × lanes, ...`.
struct Walk {
    state: u64,
    lane: usize,
    lanes: usize,
    per_lane: u64,
}

impl Walk {
    fn new(keys: usize, lane: usize, lanes: usize) -> Walk {
        Walk {
            // A fixed odd seed per lane: every contender sees the same sequence of keys.
            state: 0x9e37_79b9_7f4a_7c15 ^ (lane as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            lane,
            lanes,
            per_lane: (keys / lanes) as u64,
        }
    }

    #[inline(always)]
    fn next_index(&mut self) -> usize {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        // Maps `x` onto `0..per_lane` with a multiply instead of a division.
        let slot = ((u128::from(x) * u128::from(self.per_lane)) >> 64) as usize;
        self.lane + self.lanes * slot
    }
}

/// `iters` checks on each of `threads` threads; returns wall time ÷ `threads`, so that criterion's
/// time per iteration is the time per check at aggregate throughput. Denials go to `denied`.
fn timed_checks<F>(
    keys: &[String],
    threads: usize,
    iters: u64,
    denied: &AtomicU64,
    check: &F,
) -> Duration
where
    F: Fn(&String) -> bool + Sync,
{
    // On one key every thread takes the same key; otherwise each its own lane.
    let lanes = if keys.len() == 1 { 1 } else { threads };
    let run = |thread: usize| {
        let mut walk = Walk::new(keys.len(), thread % lanes, lanes);
        let mut local_denied = 0;
        for _ in 0..iters {
            if !check(&keys[walk.next_index()]) {
                local_denied += 1;
            }
        }
        denied.fetch_add(local_denied, Ordering::Relaxed);
    };
    if threads == 1 {
        let start = wall_clock();
        run(0);
        return start.elapsed();
    }
    // The barrier lines the threads up, so that spawning them is not timed; leaving the scope
    // joins them, so the slower thread ends the timing.
    let barrier = Barrier::new(threads + 1);
    let start = std::thread::scope(|scope| {
        for thread in 0..threads {
            let (barrier, run) = (&barrier, &run);
            scope.spawn(move || {
                barrier.wait();
                run(thread);
            });
        }
        barrier.wait();
        wall_clock()
    });
    start.elapsed() / threads as u32
}

/// Which implementation a row measures.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Contender {
    TollgateLimiter,
    TollgateStore,
    Governor,
    KeyWalk,
}

impl Contender {
    const ALL: [Contender; 4] = [
        Contender::TollgateLimiter,
        Contender::TollgateStore,
        Contender::Governor,
        Contender::KeyWalk,
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::TollgateLimiter => "tollgate_limiter",
            Contender::TollgateStore => "tollgate_store",
            Contender::Governor => "governor",
            Contender::KeyWalk => "key_walk",
        }
    }
}

/// One check by `contender` on `key`: whether it was allowed.
#[inline(always)]
fn check_with(contenders: &Contenders, contender: Contender, key: &String) -> bool {
    match contender {
        Contender::TollgateLimiter => contenders
            .limiter
            .check(key.as_bytes(), 1)
            .is_ok_and(|d| d.allowed),
        Contender::TollgateStore => contenders
            .store
            .check(key.as_bytes(), &contenders.policy, 1)
            .is_ok_and(|d| d.allowed),
        Contender::Governor => contenders.governor.check_key(key).is_ok(),
        // Reads the key's last byte, as hashing it would, and decides nothing.
        Contender::KeyWalk => black_box(key.as_bytes().last().copied()).is_some(),
    }
}

/// Times `iters` checks, with the contender fixed at compile time so that each loop is
/// monomorphized and inlined like a caller's own code would be.
fn time_contender(
    contenders: &Contenders,
    contender: Contender,
    keys: &[String],
    threads: usize,
    iters: u64,
    denied: &AtomicU64,
) -> Duration {
    macro_rules! timed {
        ($which:expr) => {
            timed_checks(keys, threads, iters, denied, &|key: &String| {
                check_with(contenders, $which, key)
            })
        };
    }
    match contender {
        Contender::TollgateLimiter => timed!(Contender::TollgateLimiter),
        Contender::TollgateStore => timed!(Contender::TollgateStore),
        Contender::Governor => timed!(Contender::Governor),
        Contender::KeyWalk => timed!(Contender::KeyWalk),
    }
}

/// What the timed routines saw, per benchmark: `(iterations, time)` per call from criterion.
type Samples = BTreeMap<(usize, usize, Contender), Vec<(u64, Duration)>>;

/// The mean time per check over the last [`SAMPLE_SIZE`] samples, in nanoseconds.
fn ns_per_check(samples: &Samples, key: (usize, usize, Contender)) -> Option<f64> {
    let runs = samples.get(&key)?;
    let measured = &runs[runs.len().saturating_sub(SAMPLE_SIZE)..];
    let iters: u64 = measured.iter().map(|(n, _)| n).sum();
    let time: Duration = measured.iter().map(|(_, t)| *t).sum();
    (iters > 0).then(|| time.as_nanos() as f64 / iters as f64)
}

struct Scenario<'a> {
    name: &'static str,
    keys: &'a [String],
    contenders: &'a Contenders,
}

fn main() {
    let keys: Vec<String> = (0..MANY_KEYS).map(|i| format!("user:{i}")).collect();

    // Bytes per key first, in a quiet process; the limiters built here serve the 1M scenario.
    let ((store, limiter), tollgate_footprint) = measured(|| tollgate_holding(&keys));
    let (governor, governor_footprint) = measured(|| governor_holding(&keys));
    let many = Contenders {
        store,
        policy: tollgate_policy(),
        limiter,
        governor,
    };
    let some = {
        let (store, limiter) = tollgate_holding(&keys[..SOME_KEYS]);
        let governor = governor_holding(&keys[..SOME_KEYS]);
        Contenders {
            store,
            policy: tollgate_policy(),
            limiter,
            governor,
        }
    };
    let hot_key = &keys[..1];
    let hot = {
        let (store, limiter) = tollgate_holding(hot_key);
        let governor = governor_holding(hot_key);
        Contenders {
            store,
            policy: tollgate_policy(),
            limiter,
            governor,
        }
    };
    let scenarios = [
        Scenario {
            name: "hot_key",
            keys: hot_key,
            contenders: &hot,
        },
        Scenario {
            name: "keys_100k",
            keys: &keys[..SOME_KEYS],
            contenders: &some,
        },
        Scenario {
            name: "keys_1m",
            keys: &keys,
            contenders: &many,
        },
    ];

    // Whether the check paths allocate: 100k checks each on the 100k keys, untimed.
    let mut allocations = Vec::new();
    for contender in Contender::ALL {
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        time_contender(
            &some,
            contender,
            &keys[..SOME_KEYS],
            1,
            100_000,
            &AtomicU64::new(0),
        );
        allocations.push((contender, ALLOCATIONS.load(Ordering::Relaxed) - before));
    }

    let mut criterion = Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut samples = Samples::new();
    let denied = AtomicU64::new(0);
    let mut timed = 0u64;
    for (row, scenario) in scenarios.iter().enumerate() {
        let mut group = criterion.benchmark_group(scenario.name);
        group.throughput(Throughput::Elements(1));
        for threads in [1, 2] {
            for contender in Contender::ALL {
                let runs = samples.entry((row, threads, contender)).or_default();
                let id = BenchmarkId::new(contender.name(), format!("{threads}_thread"));
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let time = time_contender(
                            scenario.contenders,
                            contender,
                            scenario.keys,
                            threads,
                            iters,
                            &denied,
                        );
                        runs.push((iters, time));
                        time
                    })
                });
                timed += runs.iter().map(|(n, _)| n * threads as u64).sum::<u64>();
            }
        }
        group.finish();
    }
    criterion.final_summary();

    print_summary(&scenarios, &samples);
    println!("\n### Heap per key ({MANY_KEYS} distinct keys `user:N`, 6–11 bytes)\n");
    println!("| limiter | bytes requested per key | heap blocks per key |");
    println!("|---|---:|---:|");
    for (name, footprint) in [
        ("tollgate `MemoryStore`", tollgate_footprint),
        (
            "governor `DefaultKeyedRateLimiter<String>`",
            governor_footprint,
        ),
    ] {
        println!(
            "| {name} | {:.1} | {:.2} |",
            footprint.bytes as f64 / MANY_KEYS as f64,
            footprint.blocks as f64 / MANY_KEYS as f64,
        );
    }
    println!(
        "\nTimed checks denied: {} of {timed} (the policy keeps every check on the allow path).",
        denied.load(Ordering::Relaxed)
    );
    let allocations: Vec<String> = allocations
        .iter()
        .map(|(contender, n)| format!("{} {n}", contender.name()))
        .collect();
    println!(
        "Allocations in 100k untimed checks on existing keys (the counter is live while timing): {}.",
        allocations.join(", ")
    );
}

fn print_summary(scenarios: &[Scenario<'_>], samples: &Samples) {
    let cell = |ns: Option<f64>| ns.map_or("—".to_string(), |ns| format!("{ns:.1}"));
    let rate = |ns: Option<f64>| ns.map_or("—".to_string(), |ns| format!("{:.1}", 1e3 / ns));
    // Tollgate's throughput ÷ governor's, which is governor's time ÷ tollgate's.
    let ratio = |ours: Option<f64>, theirs: Option<f64>| match (ours, theirs) {
        (Some(ours), Some(theirs)) => format!("{:.2}", theirs / ours),
        _ => "—".to_string(),
    };
    println!("\n### Time per check (ns, aggregate over threads; M checks/s in parentheses)\n");
    println!(
        "| scenario | threads | tollgate limiter | tollgate store | governor | \
         ratio limiter | ratio store | key walk alone |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (row, scenario) in scenarios.iter().enumerate() {
        for threads in [1, 2] {
            let ns = |contender| ns_per_check(samples, (row, threads, contender));
            let (limiter, store, governor, walk) = (
                ns(Contender::TollgateLimiter),
                ns(Contender::TollgateStore),
                ns(Contender::Governor),
                ns(Contender::KeyWalk),
            );
            println!(
                "| {} | {threads} | {} ({}) | {} ({}) | {} ({}) | {} | {} | {} |",
                scenario.name,
                cell(limiter),
                rate(limiter),
                cell(store),
                rate(store),
                cell(governor),
                rate(governor),
                ratio(limiter, governor),
                ratio(store, governor),
                cell(walk),
            );
        }
    }
    println!("\nratio = tollgate checks/s ÷ governor checks/s (above 1: tollgate is faster).");
}
