//! The fixed-rate driver: a pacer thread releases request `i` at `i / rate` seconds after the
//! start, workers (one connection or call in flight each) take the released requests in order
//! and send them, and each latency is counted from the request's scheduled time, not from when
//! a worker got to send it. A server that stalls holds every worker; the requests scheduled
//! meanwhile wait in the pacer's queue, and their wait is counted (what `wrk2` does, and what
//! a closed loop, which sends nothing while it waits, leaves out).
//!
//! The pacer is an OS thread sleeping with `nanosleep`, not a tokio timer: tokio's timer wheel
//! ticks in milliseconds, which would add up to a millisecond of the client's own lateness to
//! every latency and drown the tails being compared.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::BenchError;
use crate::clock::Stopwatch;

/// One connection's (or call slot's) client: sends the `n`th request and reads its answer.
pub(super) trait Caller: Send + 'static {
    /// Sends request `n` (which picks its key) and reads the whole answer; what went wrong, if
    /// anything did.
    fn call(&mut self, n: usize) -> impl Future<Output = Result<(), String>> + Send;
}

/// One request: when it was scheduled (since the run's start), and its latency from then.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sample {
    /// The scheduled send time, from the start of the run.
    pub(super) scheduled: Duration,
    /// From the scheduled send time to the end of the answer.
    pub(super) latency: Duration,
}

/// What one run measured.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// Every request sent, failed ones included, in no particular order.
    pub(super) samples: Vec<Sample>,
    /// Requests that failed (transport error, or an answer other than the expected one).
    pub(super) errors: u64,
    /// The first failure, for the progress line.
    pub(super) first_error: Option<String>,
    /// From the start to the last answer.
    pub(super) elapsed: Duration,
}

/// Offers `rate` requests a second for `duration` to `callers` (one worker each), and waits
/// for every answer.
pub(super) async fn run<C: Caller>(
    callers: Vec<C>,
    rate: u32,
    duration: Duration,
) -> Result<Outcome, BenchError> {
    let interval = 1.0 / f64::from(rate);
    let slots = (f64::from(rate) * duration.as_secs_f64()).round().max(1.0) as usize;
    let (released, queue) = unbounded_channel();
    let queue = Arc::new(Mutex::new(queue));
    let clock = Stopwatch::start();
    let pacer = tokio::task::spawn_blocking(move || pace(&released, clock, slots, interval));
    let workers: Vec<_> = callers
        .into_iter()
        .map(|caller| tokio::spawn(work(caller, Arc::clone(&queue), clock, interval)))
        .collect();
    pacer.await?;
    let mut outcome = Outcome::default();
    for worker in workers {
        let done = worker.await?;
        outcome.samples.extend(done.samples);
        outcome.errors += done.errors;
        outcome.first_error = outcome.first_error.take().or(done.first_error);
    }
    outcome.elapsed = clock.elapsed();
    Ok(outcome)
}

/// Releases slots `0..slots`, each once `slot × interval` seconds have passed on `clock`; a
/// late wake-up releases every slot due at once.
fn pace(released: &UnboundedSender<usize>, clock: Stopwatch, slots: usize, interval: f64) {
    let mut next = 0;
    while next < slots {
        let due = ((clock.elapsed().as_secs_f64() / interval).floor() as usize + 1).min(slots);
        while next < due {
            if released.send(next).is_err() {
                return;
            }
            next += 1;
        }
        let at = Duration::from_secs_f64(next as f64 * interval);
        if let Some(wait) = at.checked_sub(clock.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// One worker: takes the next released slot (in order: tokio's mutex is fair), sends it, and
/// counts its latency from the slot's scheduled time, until the pacer is done and the queue
/// empty.
async fn work<C: Caller>(
    mut caller: C,
    queue: Arc<Mutex<UnboundedReceiver<usize>>>,
    clock: Stopwatch,
    interval: f64,
) -> Outcome {
    let mut outcome = Outcome::default();
    loop {
        let Some(slot) = queue.lock().await.recv().await else {
            return outcome;
        };
        let scheduled = Duration::from_secs_f64(slot as f64 * interval);
        let answer = caller.call(slot).await;
        outcome.samples.push(Sample {
            scheduled,
            latency: clock.elapsed().saturating_sub(scheduled),
        });
        if let Err(e) = answer {
            outcome.errors += 1;
            outcome.first_error.get_or_insert(e);
        }
    }
}
