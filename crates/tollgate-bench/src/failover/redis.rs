//! Redis Sentinel's failover: a primary, two replicas and three sentinels (the test kit's
//! `SentinelSet`), the store on its `redis+sentinel://` URL, the primary killed (SIGKILL) or
//! paused (SIGSTOP past `down-after-milliseconds`, then resumed as a stale old primary), with
//! the durability option (`WAIT 1` after each write) off and on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::RedisStore;
use tollgate_testkit::{Reply, SentinelSet};

use super::driver::{Load, drive};
use super::{RedisCost, Run, STORE_TIMEOUT};
use crate::BenchError;
use crate::commandstats::CommandStats;

/// How long a decision waits for a replica's acknowledgement, with durability on (the
/// report's words say 100 ms).
const WAIT_TIMEOUT: Duration = Duration::from_millis(100);
/// How long the sentinels get to promote a replica.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// What is done to the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// SIGKILL, as in a crash.
    Kill,
    /// SIGSTOP until the sentinels promote a replica, then SIGCONT: the old primary comes back
    /// believing it is the primary, until the sentinels make it a replica.
    Pause,
}

impl Fault {
    fn words(self) -> &'static str {
        match self {
            Fault::Kill => "primary killed (SIGKILL)",
            Fault::Pause => "primary paused (SIGSTOP), resumed after the promotion",
        }
    }
}

/// One run: a fresh topology, `load` on it, `fault` done to the primary.
pub(super) async fn run(
    fault: Fault,
    durable: bool,
    load: &Load,
    load_name: &'static str,
    before: Duration,
    after: Duration,
) -> Result<Run, BenchError> {
    // Two replicas: once one is promoted, the other still acknowledges `WAIT 1`.
    let set = tokio::task::spawn_blocking(|| SentinelSet::start(2, 3))
        .await?
        .map_err(|e| BenchError::Args(format!("could not start Redis behind Sentinel: {e}")))?;
    let mut builder = RedisStore::builder(set.url())
        .timeout(STORE_TIMEOUT)
        // Every decision to Redis, a denial too: the failover's to meet.
        .deny_cache(false);
    if durable {
        builder = builder.wait_for_replicas(1, WAIT_TIMEOUT);
    }
    let store = builder.build().await?;
    let set = Arc::new(Mutex::new(set));
    let start = tokio::task::spawn_blocking({
        let set = Arc::clone(&set);
        move || commandstats(&set.lock().unwrap_or_else(|e| e.into_inner()))
    })
    .await??;
    let at_fault = Arc::new(Mutex::new(None));
    let faulted = Arc::clone(&set);
    let delta = Arc::clone(&at_fault);
    let seen = drive(store, load, before, after, move || {
        let mut set = faulted.lock().unwrap_or_else(|e| e.into_inner());
        // What the primary did for the decisions before the fault: Redis's time per decision.
        *delta.lock().unwrap_or_else(|e| e.into_inner()) = Some(commandstats(&set)?.since(&start)?);
        let failed = |e| BenchError::Args(format!("the failover failed: {e}"));
        match fault {
            Fault::Kill => set.kill_primary().map_err(failed)?,
            Fault::Pause => set.pause_primary().map_err(failed)?,
        }
        set.wait_for_new_primary(FAILOVER_TIMEOUT).map_err(failed)?;
        if fault == Fault::Pause {
            set.resume_old_primary().map_err(failed)?;
        }
        Ok(())
    })
    .await?;
    drop(set);
    let delta = at_fault.lock().unwrap_or_else(|e| e.into_inner()).take();
    let per = |n: u64| n as f64 / seen.decided_before.max(1) as f64;
    Ok(Run {
        redis: delta.map(|d| RedisCost {
            calls: per(d.client_calls()),
            us: per(d.client_usec()),
        }),
        store: "Redis Sentinel",
        fault: fault.words(),
        durability: if durable {
            "`wait_for_replicas(1, 100 ms)`"
        } else {
            "asynchronous (the default)"
        },
        durable,
        load: load_name,
        fail_policy: load.fail_policy,
        failover_s: seen.fault_took,
        seen,
    })
}

/// The primary's `INFO commandstats`.
fn commandstats(set: &SentinelSet) -> Result<CommandStats, BenchError> {
    match set.cmd_primary(&[b"INFO", b"commandstats"]) {
        Ok(Reply::Bulk(text)) => CommandStats::parse(&String::from_utf8_lossy(&text)),
        Ok(other) => Err(BenchError::Reply(format!("INFO commandstats: {other:?}"))),
        Err(e) => Err(BenchError::Args(format!("INFO commandstats: {e}"))),
    }
}
