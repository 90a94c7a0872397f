//! How a cell is timed: its threads lined up on a barrier, each walking its own lane of keys,
//! and how many checks make a run of about the requested length.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::walk::Walk;
use crate::clock::Stopwatch;

/// The longest calibration run, in checks per thread: it ends a doubling that the clock would
/// otherwise never stop (a check too cheap to measure).
const MAX_CALIBRATION: u64 = 1 << 40;

/// `warm` untimed then `iters` timed checks on each of `threads` threads; returns the wall
/// time of the timed checks, from when every thread has warmed up until the last is done.
/// Denials (warm-up included) are added to `denied`.
///
/// On one key every thread takes that key; otherwise each walks its own lane (odd or even
/// indices with 2 threads), so that the threads contend on the store, not on one bucket.
pub(super) fn timed_checks<F>(
    keys: &[String],
    threads: usize,
    warm: u64,
    iters: u64,
    denied: &AtomicU64,
    check: &F,
) -> Duration
where
    F: Fn(&String) -> bool + Sync,
{
    let lanes = if keys.len() == 1 { 1 } else { threads };
    let checks = |walk: &mut Walk, n: u64| {
        let mut refused = 0;
        for _ in 0..n {
            refused += u64::from(!check(&keys[walk.next_index()]));
        }
        refused
    };
    if threads <= 1 {
        let mut walk = Walk::new(keys.len(), 0, 1);
        let mut refused = checks(&mut walk, warm);
        let watch = Stopwatch::start();
        refused += checks(&mut walk, iters);
        let elapsed = watch.elapsed();
        denied.fetch_add(refused, Ordering::Relaxed);
        return elapsed;
    }
    // The barrier lines the warmed-up threads up, so that neither spawning nor warming up is
    // timed; leaving the scope joins them, so the slower thread ends the timing.
    let barrier = Barrier::new(threads + 1);
    let watch = std::thread::scope(|scope| {
        for thread in 0..threads {
            let (barrier, checks) = (&barrier, &checks);
            scope.spawn(move || {
                let mut walk = Walk::new(keys.len(), thread % lanes, lanes);
                let mut refused = checks(&mut walk, warm);
                barrier.wait();
                refused += checks(&mut walk, iters);
                denied.fetch_add(refused, Ordering::Relaxed);
            });
        }
        barrier.wait();
        Stopwatch::start()
    });
    watch.elapsed()
}

/// Checks per thread for a timed run of about `run`: `time(n)` times `n` checks per thread,
/// doubling `n` until one lasts `warmup`, which also brings caches, branch predictors and the
/// core's clock up to speed. Returns the count and the checks made (per thread).
pub(super) fn calibrate(
    warmup: Duration,
    run: Duration,
    mut time: impl FnMut(u64) -> Duration,
) -> (u64, u64) {
    let (mut n, mut made) = (1u64, 0u64);
    loop {
        let took = time(n);
        made = made.saturating_add(n);
        if took >= warmup || n >= MAX_CALIBRATION {
            let per_second = n as f64 / took.as_secs_f64().max(1e-9);
            // `as` saturates, and at least one check is timed.
            return (
                (per_second * run.as_secs_f64()).ceil().max(1.0) as u64,
                made,
            );
        }
        n *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_scales_the_warm_up_rate_to_the_run() {
        // 1 µs per check: the doubling stops at 1024 checks (1.024 ms ≥ 1 ms).
        let (n, made) = calibrate(Duration::from_millis(1), Duration::from_millis(500), |n| {
            Duration::from_micros(n)
        });
        // (500,001 if the division rounds the rate a hair up.)
        assert!((500_000..=500_001).contains(&n), "{n}");
        assert_eq!(made, 2047);
        // A check the clock cannot see still ends, with a finite count.
        let (n, _) = calibrate(Duration::from_millis(1), Duration::from_secs(1), |_| {
            Duration::ZERO
        });
        assert!(n >= 1);
    }

    #[test]
    fn every_thread_makes_its_checks_and_denials_are_counted() {
        let keys: Vec<String> = (0..10).map(|i| format!("user:{i}")).collect();
        let seen = AtomicU64::new(0);
        let denied = AtomicU64::new(0);
        let even_allowed = |key: &String| {
            seen.fetch_add(1, Ordering::Relaxed);
            key.as_bytes().last().is_some_and(|b| b % 2 == 0)
        };
        timed_checks(&keys, 2, 5, 100, &denied, &even_allowed);
        assert_eq!(seen.load(Ordering::Relaxed), 2 * 105);
        // Lane 1 walks the odd indices only (`user:1`, `user:3`, ...): each denied.
        assert_eq!(denied.load(Ordering::Relaxed), 105);
        timed_checks(&keys[..1], 2, 0, 10, &denied, &even_allowed);
        assert_eq!(seen.load(Ordering::Relaxed), 2 * 105 + 20);
    }
}
