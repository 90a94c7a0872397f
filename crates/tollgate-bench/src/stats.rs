//! A latency histogram with exact counts and bounded relative error.
//!
//! Every call is counted (no sampling). Values below 128 ns are kept exactly; above, each power
//! of two is split into 64 equal buckets, so a reported percentile is at most 1/64 (1.6%) above
//! the true value and never below it. One histogram per worker, merged at the end: no sharing
//! on the measured path.

use std::time::Duration;

/// Values below this are their own bucket.
const EXACT: u64 = 128;
/// Sub-buckets per power of two above [`EXACT`]: 2^SUB_BITS.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Powers of two from 2^7 to 2^63.
const BUCKETS: usize = EXACT as usize + (64 - 7) * SUB as usize;

/// Counts of latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }

    /// Counts one latency.
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[index(ns)] += 1;
        self.total += 1;
        self.max = self.max.max(ns);
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// How many latencies were recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q`-quantile (0 < q <= 1) by the nearest-rank method: the smallest recorded value
    /// with at least `q × count` values at or below it, reported as the top of its bucket (never
    /// above the largest value recorded). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_nanos(highest(i).min(self.max)));
            }
        }
        Some(Duration::from_nanos(self.max))
    }
}

fn index(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    let exponent = 63 - ns.leading_zeros(); // >= 7
    let sub = (ns >> (exponent - SUB_BITS)) & (SUB - 1);
    EXACT as usize + (exponent as usize - 7) * SUB as usize + sub as usize
}

/// The largest value that lands in bucket `i`.
fn highest(i: usize) -> u64 {
    if i < EXACT as usize {
        return i as u64;
    }
    let i = (i - EXACT as usize) as u64;
    let exponent = i / SUB + 7;
    let sub = i % SUB;
    let width = 1u64 << (exponent - u64::from(SUB_BITS));
    ((SUB + sub) * width).saturating_add(width - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(n: u64) -> Duration {
        Duration::from_nanos(n)
    }

    #[test]
    fn small_values_are_exact_by_nearest_rank() {
        let mut h = Histogram::new();
        for v in 1..=100 {
            h.record(ns(v));
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.5), Some(ns(50)));
        assert_eq!(h.quantile(0.99), Some(ns(99)));
        assert_eq!(h.quantile(1.0), Some(ns(100)));
        assert_eq!(h.quantile(0.001), Some(ns(1)), "rank rounds up to 1");
    }

    #[test]
    fn rank_rounds_up() {
        let mut h = Histogram::new();
        for v in [10, 20, 30] {
            h.record(ns(v));
        }
        // ceil(0.5 × 3) = 2nd value; ceil(0.99 × 3) = 3rd.
        assert_eq!(h.quantile(0.5), Some(ns(20)));
        assert_eq!(h.quantile(0.99), Some(ns(30)));
        assert_eq!(Histogram::new().quantile(0.5), None);
    }

    #[test]
    fn large_values_are_within_one_sixty_fourth_above() {
        for v in [
            128,
            129,
            1_000,
            12_345,
            999_999,
            1 << 40,
            (1 << 40) + 12_345,
            u64::MAX / 3,
        ] {
            let mut h = Histogram::new();
            h.record(ns(1)); // the max clip must not hide the bucket's top for v
            h.record(ns(v));
            h.record(ns(v.saturating_mul(2)));
            let got = h.quantile(0.5).unwrap().as_nanos() as u64;
            assert!(got >= v, "{got} < {v}");
            assert!(got - v <= v / 64, "{got} too far above {v}");
        }
    }

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        for i in EXACT as usize..BUCKETS - 1 {
            assert_eq!(index(highest(i)), i);
            assert_eq!(index(highest(i) + 1), i + 1);
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn merge_adds_counts_and_keeps_the_max() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(ns(5));
        b.record(ns(7));
        b.record(ns(9));
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.quantile(0.5), Some(ns(7)));
        assert_eq!(a.quantile(1.0), Some(ns(9)));
    }
}
