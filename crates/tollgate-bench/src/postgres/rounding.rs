//! Flaw (b): refill rounded to whole tokens. One client spends a bucket's burst, then calls
//! every 100 ms for 3 s at 2 tokens a second: each call of the function refills 0.2 of a
//! token, rounds `tk - 1 + 0.2` to a whole token and moves `ts` to now, so the fraction is lost
//! and the bucket never refills. The exact expectation is computed from the times the calls
//! were sent; tollgate keeps time, not tokens, and matches it (±1 where a call lands right on a
//! token's arrival).

use std::time::Duration;

use super::Isolation;
use super::approach::{Approach, Crew, Worker};
use super::database::Target;
use super::limit::{Limit, SLOW};
use super::report::Rounding;
use crate::BenchError;
use crate::clock::Stopwatch;

/// The time between calls after the burst.
pub(crate) const INTERVAL: Duration = Duration::from_millis(100);
/// Calls after the burst: 3 s worth.
pub(crate) const CALLS: u32 = 30;
/// The schedule's key (fresh: the run's tables hold no such row before).
const KEY: &str = "rounding";

/// Runs the schedule for `approach` on a fresh key, in real time (about 3 s).
pub(crate) async fn run(target: &Target, approach: Approach) -> Result<Rounding, BenchError> {
    let limit = SLOW;
    let crew = Crew::hire(approach, target, Isolation::ReadCommitted, 1, 1, limit).await?;
    let Some(worker) = crew.workers.first() else {
        return Err(BenchError::Args("no worker".into()));
    };
    let start = Stopwatch::start();
    let mut log = Log::default();
    // The burst: as many calls as the bucket holds, back to back.
    for _ in 0..limit.capacity() {
        log.call(worker, start, approach).await;
    }
    let burst_end = start.elapsed();
    for i in 1..=CALLS {
        let due = burst_end + INTERVAL * i;
        tokio::time::sleep(due.saturating_sub(start.elapsed())).await;
        log.call(worker, start, approach).await;
    }
    let Log {
        sent,
        allowed,
        errors,
    } = log;
    let expected = exact_allowed(limit, &sent);
    let burst = usize::try_from(limit.capacity()).unwrap_or(usize::MAX);
    let count = |v: &[bool]| v.iter().filter(|&&a| a).count() as u64;
    let rounding = Rounding {
        approach,
        capacity: limit.capacity(),
        rate: limit.rate(),
        interval: INTERVAL,
        burst_calls: burst as u64,
        burst_allowed: count(&allowed[..burst]),
        calls: u64::from(CALLS),
        allowed: count(&allowed[burst..]),
        expected: count(&expected[burst..]),
        errors,
    };
    eprintln!(
        "rounding {approach}: burst {}/{} allowed, then {} of {} calls allowed (exact: {})",
        rounding.burst_allowed,
        rounding.burst_calls,
        rounding.allowed,
        rounding.calls,
        rounding.expected
    );
    Ok(rounding)
}

/// The calls of a schedule: when each was sent, whether it was allowed.
#[derive(Default)]
struct Log {
    sent: Vec<Duration>,
    allowed: Vec<bool>,
    errors: u64,
}

impl Log {
    /// One call on the schedule's key; a failed call counts as refused (and as an error).
    async fn call(&mut self, worker: &Worker, start: Stopwatch, approach: Approach) {
        self.sent.push(start.elapsed());
        match worker.check(KEY).await.outcome {
            Ok(allowed) => self.allowed.push(allowed),
            Err(e) => {
                eprintln!("rounding {approach}: {e}");
                self.errors += 1;
                self.allowed.push(false);
            }
        }
    }
}

/// Which of the calls sent at `times` (from the first call, which finds a full bucket) an
/// exact token bucket allows: integer micro-tokens over integer microseconds, so the only
/// rounding is of the times to whole microseconds.
pub(crate) fn exact_allowed(limit: Limit, times: &[Duration]) -> Vec<bool> {
    const TOKEN: u128 = 1_000_000;
    let full = u128::from(limit.capacity()) * TOKEN;
    let mut tokens = full;
    let mut last = times.first().copied().unwrap_or_default();
    times
        .iter()
        .map(|&t| {
            // `rate` tokens a second is `rate` micro-tokens a microsecond.
            let waited = t.saturating_sub(last).as_micros();
            tokens = full.min(tokens + u128::from(limit.rate()) * waited);
            last = t;
            let allowed = tokens >= TOKEN;
            if allowed {
                tokens -= TOKEN;
            }
            allowed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_bucket_refills_fractions() {
        let ms = Duration::from_millis;
        // The burst of 10 at t = 0, then a call every 100 ms for 3 s: a token every 500 ms.
        let mut times = vec![ms(0); 10];
        times.extend((1..=30).map(|i| ms(1) + ms(100) * i));
        let allowed = exact_allowed(SLOW, &times);
        assert!(allowed[..10].iter().all(|&a| a));
        let after: Vec<usize> = (10..40).filter(|&i| allowed[i]).collect();
        // Tokens arrive at 0.5, 1.0, ... 3.0 s; the calls at 0.501 s, 1.001 s, ... take them.
        assert_eq!(after, [14, 19, 24, 29, 34, 39]);
        // A full bucket stays full; nothing is allowed beyond it.
        let late = exact_allowed(SLOW, &[ms(0), ms(60_000), ms(60_000)]);
        assert_eq!(late, [true, true, true]);
    }
}
