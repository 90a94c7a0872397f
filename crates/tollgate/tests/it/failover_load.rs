//! Load for failover tests, one harness for every store: workers deciding one token each on a
//! key until stopped, counting the tokens the store granted and the calls it could not answer
//! (an outage's errors; any other error fails the test), both shared as they happen so a test
//! can wait on them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Check, Clock, MonotonicClock, Policy, Store, StoreError};

/// What the workers saw, counted as it happens.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Tokens the store granted.
    pub(crate) allowed: AtomicU64,
    /// Calls the store could not answer (it may have charged their tokens: a commit whose
    /// answer was lost).
    pub(crate) failed: AtomicU64,
    /// The slowest call, ns.
    pub(crate) slowest: AtomicU64,
}

/// Workers deciding on a store until [`stop`](Load::stop).
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    pub(crate) counts: Arc<Counts>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// `workers` tasks deciding one token of `policy` on `key`.
    pub(crate) fn start<S>(store: &S, workers: u32, policy: Policy, key: &'static [u8]) -> Load
    where
        S: Store + Clone + Send + Sync + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let tasks = (0..workers)
            .map(|_| {
                let (store, stop, counts) = (store.clone(), Arc::clone(&stop), Arc::clone(&counts));
                tokio::spawn(async move {
                    let clock = MonotonicClock::new();
                    while !stop.load(Ordering::Relaxed) {
                        let start = clock.now();
                        let answer = store.decide(&[Check::new(policy, key, 1)]).await;
                        let took = Duration::from(clock.now() - start).as_nanos() as u64;
                        counts.slowest.fetch_max(took, Ordering::Relaxed);
                        match answer {
                            Ok(verdict) if verdict.allowed() => {
                                counts.allowed.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(_) => {}
                            Err(StoreError::Unavailable(_) | StoreError::Timeout(_)) => {
                                counts.failed.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("a failover is an outage, not {e:?}"),
                        }
                        // A denial from a deny cache comes without a wait: a worker that asks
                        // again at once would never let the runtime drive its timers.
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            counts,
            tasks,
        }
    }

    /// Tokens granted so far.
    pub(crate) fn allowed(&self) -> u64 {
        self.counts.allowed.load(Ordering::Relaxed)
    }

    /// Waits until the store has answered `at_least` calls, granted or failed (failing the
    /// test after 30 s).
    pub(crate) async fn until_answered(&self, at_least: u64) {
        for _ in 0..3_000 {
            let c = &self.counts;
            if c.allowed.load(Ordering::Relaxed) + c.failed.load(Ordering::Relaxed) >= at_least {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "only {:?} of {at_least} calls answered in 30 s",
            self.counts
        );
    }

    /// Stops the workers and returns what they saw: (granted, failed, slowest call).
    pub(crate) async fn stop(self) -> (u64, u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        let c = &self.counts;
        (
            c.allowed.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
            Duration::from_nanos(c.slowest.load(Ordering::Relaxed)),
        )
    }
}
