//! A timed measurement: every worker checks one token after another, each on its task, until
//! the time is up; their counts are merged at the end.

use std::time::Duration;

use tokio::task::JoinSet;

use super::approach::{Crew, Worker};
use super::outcome::Tally;
use super::scenario::Keys;
use crate::BenchError;
use crate::clock::{self, Stopwatch};

/// What one timed measurement counted.
pub(crate) struct Measured {
    pub(crate) tally: Tally,
    /// From the first call to the last answer.
    pub(crate) elapsed: Duration,
    /// CPU time the whole benchmark process used meanwhile (its clients, and tollgate's store
    /// inside it), where the OS reports it.
    pub(crate) cpu: Option<Duration>,
}

/// Runs `crew`'s workers, the i-th on `keys[i]`, for `duration`. The workers are used up (the
/// function's connections close as they finish); the crew still owns tollgate's store, whose
/// own retries are added to the count.
pub(crate) async fn run(
    crew: &mut Crew,
    keys: Vec<Keys>,
    duration: Duration,
) -> Result<Measured, BenchError> {
    let cpu_before = clock::process_cpu();
    let start = Stopwatch::start();
    let mut tasks = JoinSet::new();
    for (worker, keys) in crew.workers.drain(..).zip(keys) {
        tasks.spawn(drive(worker, keys, start, duration));
    }
    let mut tally = Tally::default();
    while let Some(worker) = tasks.join_next().await {
        tally.merge(worker?);
    }
    let elapsed = start.elapsed();
    let cpu = clock::process_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    tally.retried += crew.store_retried();
    tally.statements += crew.store_statements();
    tally.gave_up += crew.store_gave_up();
    Ok(Measured {
        tally,
        elapsed,
        cpu,
    })
}

/// Checks in a loop until `duration` has passed since `start`; no check starts after that.
async fn drive(worker: Worker, mut keys: Keys, start: Stopwatch, duration: Duration) -> Tally {
    let mut tally = Tally::default();
    loop {
        let call = Stopwatch::start();
        let checked = worker.check(keys.next()).await;
        tally.record(checked, call.elapsed());
        if start.elapsed() >= duration {
            return tally;
        }
        // A check answered locally (tollgate's deny cache) completes without yielding; spending
        // cooperative budget lets the runtime interleave the workers, as real requests would.
        tokio::task::coop::consume_budget().await;
    }
}
