//! The store's latency over about the last minute, for the console: the quantiles of the
//! store calls' histogram (`tollgate_store_call_duration_seconds`) between now and a snapshot
//! of it taken about a minute ago, estimated within the histogram's buckets as Prometheus's
//! `histogram_quantile` does (linearly inside the bucket the rank falls in).
//!
//! Snapshots are taken when the status is read, at most one per [`EVERY`], and at most
//! [`KEPT`] are kept: the window is the time since the newest snapshot at least [`WINDOW`] old
//! (since start until a minute has passed, or after a quiet spell without readers, longer).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::Histogram;
use prometheus::core::Collector;
use tollgate::{Clock, MonotonicClock, Nanos};

/// How far back the quantiles look.
pub(super) const WINDOW: Duration = Duration::from_secs(60);
/// How often a snapshot is taken (when the status is read).
pub(super) const EVERY: Duration = Duration::from_secs(10);
/// The most snapshots kept.
const KEPT: usize = 8;

/// The histogram's counts at one time: the calls, and the calls at most each bucket's upper
/// bound (in seconds), cumulative.
#[derive(Debug, Clone, PartialEq)]
struct Counts {
    calls: u64,
    buckets: Vec<(f64, u64)>,
}

impl Counts {
    fn of(histogram: &Histogram) -> Counts {
        let families = histogram.collect();
        let Some(metric) = families.first().and_then(|f| f.get_metric().first()) else {
            return Counts {
                calls: 0,
                buckets: Vec::new(),
            };
        };
        let h = metric.get_histogram();
        Counts {
            calls: h.get_sample_count(),
            buckets: h
                .get_bucket()
                .iter()
                .map(|b| (b.upper_bound(), b.cumulative_count()))
                .collect(),
        }
    }

    /// The calls counted in `self` and not in `earlier`.
    fn since(&self, earlier: &Counts) -> Counts {
        let before = |i: usize| earlier.buckets.get(i).map_or(0, |b| b.1);
        Counts {
            calls: self.calls.saturating_sub(earlier.calls),
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .map(|(i, (bound, count))| (*bound, count.saturating_sub(before(i))))
                .collect(),
        }
    }

    /// The `q` quantile in seconds, `None` without calls. Past the last bucket, its bound.
    fn quantile(&self, q: f64) -> Option<f64> {
        if self.calls == 0 {
            return None;
        }
        let rank = q * self.calls as f64;
        let (mut lower, mut below) = (0.0, 0u64);
        for &(upper, count) in &self.buckets {
            if count as f64 >= rank {
                let inside = count.saturating_sub(below);
                if inside == 0 {
                    return Some(upper);
                }
                return Some(lower + (upper - lower) * (rank - below as f64) / inside as f64);
            }
            (lower, below) = (upper, count);
        }
        Some(lower)
    }
}

/// The store's latency over the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Latency {
    /// Calls in the window.
    pub(super) calls: u64,
    /// The median, in milliseconds; `None` without calls.
    pub(super) p50_ms: Option<f64>,
    /// The 99th percentile, in milliseconds.
    pub(super) p99_ms: Option<f64>,
    /// How long the window is.
    pub(super) window: Duration,
}

/// The snapshots of a histogram.
pub(super) struct Recent {
    clock: MonotonicClock,
    kept: Mutex<VecDeque<(Nanos, Counts)>>,
}

impl Recent {
    /// Starts with the histogram empty, now: until a minute has passed, the window is since
    /// start.
    pub(super) fn new() -> Recent {
        let clock = MonotonicClock::new();
        let empty = Counts {
            calls: 0,
            buckets: Vec::new(),
        };
        Recent {
            kept: Mutex::new(VecDeque::from([(clock.now(), empty)])),
            clock,
        }
    }

    /// The latency of the calls `histogram` counted over about the last minute.
    pub(super) fn latency(&self, histogram: &Histogram) -> Latency {
        let now = self.clock.now();
        let counts = Counts::of(histogram);
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let old = |at: Nanos| Duration::from(now.saturating_sub(at)) >= WINDOW;
        // The newest snapshot a window old is the base; older ones are no longer needed.
        while kept.len() > 1 && kept.get(1).is_some_and(|(at, _)| old(*at)) {
            kept.pop_front();
        }
        let (base_at, base) = kept.front().cloned().unwrap_or((now, counts.clone()));
        if kept
            .back()
            .is_none_or(|(at, _)| Duration::from(now.saturating_sub(*at)) >= EVERY)
        {
            kept.push_back((now, counts.clone()));
            if kept.len() > KEPT {
                kept.pop_front();
            }
        }
        drop(kept);
        let window = counts.since(&base);
        let ms = |seconds: f64| (seconds * 1e6).round() / 1e3;
        Latency {
            calls: window.calls,
            p50_ms: window.quantile(0.5).map(ms),
            p99_ms: window.quantile(0.99).map(ms),
            window: Duration::from(now.saturating_sub(base_at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::HistogramOpts;

    fn histogram() -> Histogram {
        Histogram::with_opts(HistogramOpts::new("h", "h").buckets(vec![0.001, 0.002, 0.004]))
            .unwrap()
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket_of_their_rank() {
        let h = histogram();
        // 50 calls in (0, 1 ms], 50 in (1, 2 ms].
        for _ in 0..50 {
            h.observe(0.0005);
            h.observe(0.0015);
        }
        let counts = Counts::of(&h);
        assert_eq!(counts.calls, 100);
        assert_eq!(counts.quantile(0.5), Some(0.001));
        let p99 = counts.quantile(0.99).unwrap();
        assert!((p99 - 0.00198).abs() < 1e-12, "{p99}");
        assert_eq!(counts.quantile(0.25), Some(0.0005));
    }

    #[test]
    fn past_the_last_bucket_the_quantile_is_its_bound_and_none_without_calls() {
        let h = histogram();
        assert_eq!(Counts::of(&h).quantile(0.5), None);
        h.observe(10.0);
        assert_eq!(Counts::of(&h).quantile(0.99), Some(0.004));
    }

    #[test]
    fn the_window_counts_only_the_calls_since_its_base() {
        let h = histogram();
        h.observe(0.003);
        let earlier = Counts::of(&h);
        h.observe(0.0005);
        let since = Counts::of(&h).since(&earlier);
        assert_eq!(since.calls, 1);
        assert_eq!(since.quantile(0.99), Some(0.001 * 0.99));
    }

    #[test]
    fn reads_keep_a_bounded_number_of_snapshots() {
        let recent = Recent::new();
        let h = histogram();
        h.observe(0.0015);
        let latency = recent.latency(&h);
        assert_eq!(latency.calls, 1);
        assert_eq!(latency.p50_ms, Some(1.5));
        for _ in 0..100 {
            recent.latency(&h);
        }
        assert!(recent.kept.lock().unwrap().len() <= KEPT);
    }
}
