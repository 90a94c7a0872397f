//! Many threads and tasks on one key: the count of allowed decisions against the exact bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use tollgate::{Check, Clock, ManualClock, MemoryStore, MonotonicClock, Nanos, Policy, Store};

fn ten_per_second() -> Policy {
    Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap()
}

/// Threads hammer one key while a driver moves a manual clock through 3 s in 1 ms steps; a last
/// round at exactly 3 s drains what is left. A full bucket plus 3 s of refill is exactly 40.
/// After each step the driver waits until a thread has checked again: on a busy machine
/// it would otherwise run a second of clock past threads that are not scheduled, and the
/// bucket, full, would rightly drop that second's tokens.
#[test]
fn threads_on_one_key_get_exactly_the_bound_in_simulated_time() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let policy = ten_per_second();
    // The bucket is first used at the start of the 3 s, not whenever the first thread runs.
    assert!(store.check(&policy, b"hot", 1).unwrap().allowed());
    let allowed = AtomicU64::new(1);
    let checks = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    if store.check(&policy, b"hot", 1).unwrap().allowed() {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                    checks.fetch_add(1, Ordering::Release);
                }
            });
        }
        for _ in 0..3000 {
            let seen = checks.load(Ordering::Acquire);
            clock.advance(Duration::from_millis(1));
            let mut spins = 0_u32;
            while checks.load(Ordering::Acquire) == seen {
                spins += 1;
                if spins.is_multiple_of(64) {
                    thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        done.store(true, Ordering::Release);
    });
    while store.check(&policy, b"hot", 1).unwrap().allowed() {
        allowed.fetch_add(1, Ordering::Relaxed);
    }
    assert_eq!(allowed.load(Ordering::Relaxed), 40);
}

/// Multi-bucket checks (per second and per hour, all or nothing) race with single checks on
/// the per-second bucket: neither bucket ever pays more than it holds.
#[test]
fn multi_bucket_checks_racing_single_checks_stay_exact() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let second = ten_per_second();
    let hour = Policy::token_bucket(25, 25, Duration::from_secs(3600)).unwrap();
    assert!(store.check(&second, b"k", 0).unwrap().allowed());
    let (multi, single) = (AtomicU64::new(0), AtomicU64::new(0));
    let attempts: [AtomicU64; 4] = Default::default();
    let done = AtomicBool::new(false);
    let ms = thread::scope(|s| {
        for worker in 0..4 {
            let (store, multi, single, done) = (&store, &multi, &single, &done);
            let attempts = &attempts[worker];
            s.spawn(move || {
                while !done.load(Ordering::Acquire) {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    if worker % 2 == 0 {
                        let checks = [Check::new(second, b"k", 1), Check::new(hour, b"k", 1)];
                        if store.decide_sync(&checks).unwrap().allowed() {
                            multi.fetch_add(1, Ordering::Relaxed);
                        }
                    } else if store.check(&second, b"k", 1).unwrap().allowed() {
                        single.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        // 3 s of time, 10 ms at a time, each step only once every worker has tried a check in
        // it: on a loaded machine the clock must not run ahead of the workers, or the bucket
        // would fill past its burst unspent.
        let mut ms = 0;
        while ms < 3000 {
            clock.advance(Duration::from_millis(10));
            let tried: Vec<u64> = attempts.iter().map(|a| a.load(Ordering::Relaxed)).collect();
            for (attempt, tried) in attempts.iter().zip(tried) {
                while attempt.load(Ordering::Relaxed) <= tried {
                    thread::yield_now();
                }
            }
            ms += 10;
        }
        done.store(true, Ordering::Release);
        ms
    });
    let (multi, single) = (
        multi.load(Ordering::Relaxed),
        single.load(Ordering::Relaxed),
    );
    assert!(multi <= 25, "hourly bucket paid {multi}");
    // The burst of 10, and a token every 100 ms.
    let bound = 10 + ms / 100;
    assert!(
        multi + single <= bound,
        "per-second bucket paid {multi} + {single} in {ms} ms"
    );
    // Both kinds made progress and the per-second budget was spent.
    assert!(multi > 0 && single > 0, "{multi} {single}");
    assert!(multi + single >= bound - 1, "{multi} + {single} in {ms} ms");
}

/// Real time: 64 tokio tasks on a 2-thread runtime and 2 plain threads for 3 s, at the
/// default clock.
#[test]
fn tasks_and_threads_on_one_key_over_real_time() {
    tasks_and_threads_on_one_key_at(MonotonicClock::new());
}

/// The same on the time-stamp counter's clock.
#[cfg(feature = "quanta")]
#[test]
fn tasks_and_threads_on_one_key_over_real_time_on_the_quanta_clock() {
    tasks_and_threads_on_one_key_at(tollgate::QuantaClock::new());
}

/// The same on the clock a thread writes once a millisecond.
#[test]
fn tasks_and_threads_on_one_key_over_real_time_on_the_coarse_clock() {
    tasks_and_threads_on_one_key_at(tollgate::CoarseClock::new());
}

fn tasks_and_threads_on_one_key_at<C: Clock + Clone>(clock: C) {
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let policy = ten_per_second();
    let allowed = Arc::new(AtomicU64::new(0));
    let start = clock.now();
    let deadline = start + Nanos::new(3_000_000_000);
    // The first decision starts the interval: a full bucket then, plus 3 s of refill.
    assert!(store.check(&policy, b"real", 1).unwrap().allowed());
    allowed.fetch_add(1, Ordering::Relaxed);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    thread::scope(|s| {
        for _ in 0..2 {
            let (store, allowed, clock) = (&store, &allowed, &clock);
            s.spawn(move || {
                while clock.now() < deadline {
                    if store.check(&policy, b"real", 1).unwrap().allowed() {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        runtime.block_on(async {
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (store, allowed, clock) =
                        (store.clone(), Arc::clone(&allowed), clock.clone());
                    tokio::spawn(async move {
                        let check = [tollgate::Check::new(policy, b"real", 1)];
                        while clock.now() < deadline {
                            if store.decide(&check).await.unwrap().allowed() {
                                allowed.fetch_add(1, Ordering::Relaxed);
                            }
                            tokio::task::yield_now().await;
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
    });
    let allowed = allowed.load(Ordering::Relaxed);
    assert!((38..=40).contains(&allowed), "allowed {allowed} in 3 s");
}
