//! The store's health as the server sees it, reported to by every store call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tollgate::{Clock, ErrorKind, MonotonicClock, Nanos, StoreError};

use super::OnStoreError;
use crate::metrics::Metrics;

/// The store's health as the server sees it: failures counted by kind, a line logged when it
/// starts failing and when it answers again (never one per request), and what it answers that
/// this program does not understand logged at error level at most once a second.
pub struct StoreHealth {
    metrics: Arc<Metrics>,
    fail_policy: OnStoreError,
    failing: AtomicBool,
    incompatible: IncompatibleLog,
}

impl StoreHealth {
    /// Reports to `metrics`; the fail policy is named in the logs.
    pub fn new(metrics: Arc<Metrics>, fail_policy: OnStoreError) -> StoreHealth {
        StoreHealth {
            metrics,
            fail_policy,
            failing: AtomicBool::new(false),
            incompatible: IncompatibleLog::default(),
        }
    }

    /// A store call failed with `error`.
    pub fn failed(&self, error: &StoreError) {
        self.metrics.store_error(error.kind());
        if error.kind() == ErrorKind::Incompatible {
            self.incompatible.record(error);
        }
        if !self.failing.swap(true, Ordering::Relaxed) {
            let answer = match self.fail_policy {
                OnStoreError::Allow => "allowing every request (fail open)",
                OnStoreError::Deny => "answering 503 (fail closed)",
                OnStoreError::Local => "deciding in this process's memory",
            };
            tracing::warn!(%error, "the store is failing; {answer} until it answers again");
        }
    }

    /// Whether the store is failing now: its last call failed, and none has succeeded since.
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// What answers while the store fails.
    pub fn fail_policy(&self) -> OnStoreError {
        self.fail_policy
    }

    /// A store call succeeded.
    pub fn answered(&self) {
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("the store answers again; deciding on it");
        }
    }
}

/// Logs what the store answered that this program does not understand, at error level and at
/// most once a second, with how many such answers there were in between: loud enough to be
/// seen, never a line per request.
#[derive(Default)]
struct IncompatibleLog {
    clock: MonotonicClock,
    /// When the last line was logged, and the answers since.
    last: Mutex<(Option<Nanos>, u64)>,
}

impl IncompatibleLog {
    const EVERY: Nanos = Nanos::new(1_000_000_000);

    fn record(&self, error: &StoreError) {
        let now = self.clock.now();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.1 += 1;
        if last.0.is_none_or(|at| now - at >= Self::EVERY) {
            tracing::error!(
                %error,
                answers = last.1,
                "the store answered what this version of tollgate does not understand; the \
                 fail policy answers meanwhile"
            );
            *last = (Some(now), 0);
        }
    }
}
