//! The in-memory store beside `governor`: time per check, and memory per key.
//!
//! **What is timed.** One check of cost 1 on a key that already has a bucket, as a server would
//! make it: the key is a `String` such as `user:42`, built before anything is timed.
//! Contenders ([`Contender`]): `MemoryLimiter::check` (bound to its policy once),
//! `MemoryStore::check` (which also encodes the policy at every check), governor's keyed
//! limiter's `check_key` (a `DashMap` with std's `RandomState`), each on three clocks: the
//! `std::time::Instant` clock (tollgate's `MonotonicClock`, governor's `MonotonicClock`), the
//! time-stamp counter through `quanta` (tollgate's `QuantaClock`, governor's `QuantaClock`),
//! and one tollgate `CoarseClock` (a time a thread writes once a millisecond) read by both;
//! `MemoryLimiter::check` followed by the server's record of the key in its summary of who is
//! denied and allowed (`GET /v1/top`), beside the same check without it; and the key walk alone (the floor under every other figure). Each tollgate contender is
//! compared with governor on the same clock.
//!
//! Scenarios: one hot key, 100k keys (or a tenth of `--keys` if fewer) and `--keys` keys (1M),
//! each with 1 and 2 threads. Over many keys a xorshift walk, the same for every contender,
//! visits the keys; with 2 threads each walks its own half of them, and on the hot key both
//! hammer the same bucket. The policy (a burst of `u32::MAX`, every key charged 1,000,000
//! tokens first) keeps every timed check on the allow path, and the report counts denials to
//! show it.
//!
//! **How.** Each cell (scenario, threads, contender) is calibrated once, untimed, to find how
//! many checks last about `--seconds`; then `--rounds` rounds run every cell in turn, so that
//! drift of the machine hits every contender alike. A cell's figure is the median across
//! rounds of wall time ÷ the checks of every thread (so with 2 threads, `1e9 ÷ ns` is the
//! checks/s of both together).
//!
//! **The floor over many keys** (`chase.rs`): after the rounds, the time of a memory load that
//! depends on the one before, over 64 MB; the report gives the large scenario's checks in such
//! loads, for tollgate and governor alike.
//!
//! **Memory per key**: the growth of the process's resident memory while each limiter takes
//! the large scenario's keys (Linux; "not measured" elsewhere), and tollgate's
//! `MemoryStore::allocated_bytes`. A library cannot install a counting global allocator into
//! the binary that calls it; resident memory is what the process pays, measured alike for both.
//!
//! The run is synchronous and uses OS threads: from async code, call it where blocking is
//! allowed (`spawn_blocking`).

mod chase;
mod contenders;
mod measure;
mod report;
mod rss;
mod timing;
mod walk;

use std::path::PathBuf;

pub use contenders::Contender;
pub use report::{Footprint, GOAL_HOT_NS, GOAL_RATIO, GOAL_TOP_NS, MemoryReport, Row, Run};

use crate::BenchError;
use crate::args::seconds;
use crate::report::thousands;
use contenders::{Contenders, OnClock, Tally};
use measure::measure;

/// Thread counts each scenario runs with.
const THREADS: [usize; 2] = [1, 2];
/// Keys of the middle scenario, at most.
const MIDDLE_KEYS: usize = 100_000;
/// The fewest `--keys`: the middle scenario holds a tenth of them, in two lanes of at least
/// one key.
const MIN_KEYS: usize = 20;
/// A timed run first makes this fraction of its checks untimed.
const WARM_FRACTION: u64 = 20;

/// Arguments of the memory-store benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct MemoryBenchArgs {
    /// seconds per timed run (one scenario, thread count and contender, one round)
    #[arg(long, default_value = "0.5")]
    pub seconds: f64,
    /// rounds: every cell runs once per round, in turn
    #[arg(long, default_value = "5")]
    pub rounds: usize,
    /// distinct keys of the large scenario and of memory per key (the middle scenario has
    /// 100,000, or a tenth of these if fewer); at least 20
    #[arg(long, default_value = "1000000")]
    pub keys: usize,
    /// seconds of untimed checks per cell before the rounds, which size its runs
    #[arg(long, default_value = "0.1")]
    pub warmup: f64,
    /// directory to write memory.md and memory.svg to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
}

impl Default for MemoryBenchArgs {
    fn default() -> MemoryBenchArgs {
        MemoryBenchArgs {
            seconds: 0.5,
            rounds: 5,
            keys: 1_000_000,
            warmup: 0.1,
            out: PathBuf::from("bench-report"),
        }
    }
}

/// A scenario: its keys, and the limiters holding them.
struct Scenario<'a> {
    keys: &'a [String],
    contenders: Contenders,
}

/// Builds the limiters, times every cell, writes `memory.md` and `memory.svg` to `args.out`,
/// and returns the report. Progress goes to stderr, a line per timed run.
pub fn run_memory(args: &MemoryBenchArgs) -> Result<MemoryReport, BenchError> {
    let run_time = seconds(args.seconds, "--seconds")?;
    let warmup = seconds(args.warmup, "--warmup")?;
    if args.rounds == 0 {
        return Err(BenchError::Args("--rounds must be at least 1".into()));
    }
    if args.keys < MIN_KEYS {
        return Err(BenchError::Args(format!(
            "--keys must be at least {MIN_KEYS}"
        )));
    }
    let middle = (args.keys / 10).min(MIDDLE_KEYS);
    let keys: Vec<String> = (0..args.keys).map(|i| format!("user:{i}")).collect();
    let policy = contenders::policy()?;
    let mut precharge = Tally::default();

    eprintln!(
        "tollgate-bench memory: charging {} keys into each limiter",
        thousands(args.keys as f64)
    );
    // The large scenario's limiters on `Instant` first, each measured as it takes the keys, in
    // a process that holds little else yet.
    let (clock, governor_clock) = contenders::instant_clocks();
    let (tollgate, tollgate_rss) =
        rss::grown(|| contenders::tollgate_holding(&keys, &policy, clock, &mut precharge));
    let (store, limiter) = tollgate?;
    let (governor, governor_rss) =
        rss::grown(|| contenders::governor_holding(&keys, governor_clock, &mut precharge));
    let footprint = Footprint {
        keys: args.keys,
        tollgate_tables: u64::try_from(store.allocated_bytes()).unwrap_or(u64::MAX),
        tollgate_rss,
        governor_rss,
    };
    let many = Contenders {
        policy,
        top: contenders::summary(),
        instant: OnClock {
            store,
            limiter,
            governor,
        },
        tsc: OnClock::holding(&keys, &policy, contenders::tsc_clocks(), &mut precharge)?,
        coarse: OnClock::holding(&keys, &policy, contenders::coarse_clocks(), &mut precharge)?,
    };
    let scenarios = [
        Scenario {
            keys: &keys[..1],
            contenders: Contenders::holding(&keys[..1], &policy, &mut precharge)?,
        },
        Scenario {
            keys: &keys[..middle],
            contenders: Contenders::holding(&keys[..middle], &policy, &mut precharge)?,
        },
        Scenario {
            keys: &keys,
            contenders: many,
        },
    ];

    let mut report = MemoryReport {
        seconds_per_run: args.seconds,
        warmup_seconds: args.warmup,
        rounds: args.rounds,
        scenarios: scenarios.iter().map(|s| s.keys.len()).collect(),
        threads: THREADS.to_vec(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        runs: Vec::new(),
        footprint,
        checks: 0,
        denied: 0,
        precharges: precharge.checks,
        precharges_denied: precharge.denied,
        load_ns: None,
    };
    measure(&scenarios, warmup, run_time, &mut report);
    report.load_ns = Some(chase::dependent_load_ns(3));
    report.report().write(&args.out)?;
    Ok(report)
}
