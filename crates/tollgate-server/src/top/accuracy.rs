//! The summaries' promises checked against exact counts: skewed traffic (Zipf, seeded) read
//! over both windows, whose slices are merged; and a flood of unique keys, which must not grow
//! memory past the bound.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{Clock, ManualClock, Nanos};

use super::sample;
use super::summary::{BATCH_BYTES, BATCH_RECORDS, SHARDS};
use super::windows::{CLOSED, HOUR_SLICE, MINUTE_SLICE, Windows};
use super::{By, Summary, Window};

/// splitmix64: a seeded stream, the same on every run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Draws key ranks `0..n` with probability proportional to `1 / (rank + 1)^s`.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut total = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|i| {
                total += 1.0 / (i as f64).powf(s);
                total
            })
            .collect();
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    fn draw(&self, rng: &mut Seeded) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Checks a window's summary against the exact counts of the decisions it covers: every key
/// above `N / capacity` listed, every listed count within `[true, true + error]`, every error
/// at most `N / capacity`.
fn check_against(windows: &Windows, window: Window, exact: &HashMap<Vec<u8>, u64>, capacity: u64) {
    let n: u64 = exact.values().sum();
    let bound = n / capacity;
    let read = windows.read(window);
    let top = read.top();
    let listed: HashMap<&[u8], (u64, u64)> =
        top.iter().map(|c| (&*c.key, (c.count, c.error))).collect();
    assert!(read.len() <= capacity as usize);
    let mut heavy = 0;
    for (key, &count) in exact {
        if count > bound {
            heavy += 1;
            assert!(
                listed.contains_key(&key[..]),
                "{window:?}: {key:?} ({count} > {bound}) is not listed"
            );
        }
    }
    assert!(
        heavy > 3,
        "{window:?}: the traffic is skewed: {heavy} keys above {bound}"
    );
    for (key, &(count, error)) in &listed {
        let truth = exact.get(*key).copied().unwrap_or(0);
        assert!(
            count >= truth,
            "{window:?}: {key:?} counted {count} < {truth}"
        );
        assert!(
            count - error <= truth,
            "{window:?}: {key:?} {count} - {error} > {truth}"
        );
        assert!(
            error <= n / capacity,
            "{window:?}: {key:?} error {error} > N/m = {n}/{capacity}"
        );
    }
}

#[test]
fn zipf_traffic_over_many_slices_is_summarized_within_the_stated_bound() {
    const CAPACITY: usize = 50;
    let zipf = Zipf::new(5_000, 1.1);
    let mut rng = Seeded(49);
    let mut windows = Windows::new(CAPACITY);
    // 150,000 decisions over 50 minutes: 20 ms apart, every minute and hour slice merged.
    let start = Duration::from_secs(1_800_000_007);
    let step = Duration::from_millis(20);
    let mut log: Vec<(Duration, Vec<u8>)> = Vec::new();
    for i in 0..150_000u32 {
        let at = start + step * i;
        let key = format!("user-{}", zipf.draw(&mut rng)).into_bytes();
        windows.advance(at);
        windows.record(&key, 1);
        log.push((at, key));
    }
    let now = start + step * 149_999;
    // What each window covers: its open slice and the closed ones kept.
    let covered = |slice: Duration, at: Duration| {
        at.as_secs() / slice.as_secs() + CLOSED >= now.as_secs() / slice.as_secs()
    };
    for (window, slice) in [(Window::Minute, MINUTE_SLICE), (Window::Hour, HOUR_SLICE)] {
        let mut exact: HashMap<Vec<u8>, u64> = HashMap::new();
        for (at, key) in &log {
            if covered(slice, *at) {
                *exact.entry(key.clone()).or_default() += 1;
            }
        }
        check_against(&windows, window, &exact, CAPACITY as u64);
    }
}

#[test]
fn sampled_zipf_traffic_is_counted_within_both_stated_bounds() {
    const CAPACITY: usize = 50;
    const EVERY: u32 = 16;
    let zipf = Zipf::new(5_000, 1.1);
    let mut rng = Seeded(4_949);
    sample::seed(49);
    let clock = Arc::new(ManualClock::new(Nanos::new(1_800_000_000_000_000_000)));
    let summary = Summary::new(CAPACITY, EVERY, Arc::clone(&clock) as Arc<dyn Clock>);
    // 400,000 denied decisions within one minute slice: what the minute reads is all of them.
    let mut exact: HashMap<Vec<u8>, u64> = HashMap::new();
    for i in 0..400_000u32 {
        let key = format!("user-{}", zipf.draw(&mut rng)).into_bytes();
        summary.record(&key, true);
        // As the ticker would, long before a buffer fills.
        if i % 4_096 == 0 {
            summary.drain();
        }
        *exact.entry(key).or_default() += 1;
    }
    let read = summary.read(Window::Minute, By::Denied);
    assert_eq!(summary.dropped(By::Denied), 0);
    let n: u64 = exact.values().sum();
    let top = read.top();
    // Every count is a multiple of the sampling: each recorded decision counts EVERY.
    assert!(top.iter().all(|c| c.count.is_multiple_of(u64::from(EVERY))));
    let listed: HashMap<&[u8], (u64, u64)> =
        top.iter().map(|c| (&*c.key, (c.count, c.error))).collect();
    let mut heavy = 0;
    for (key, &truth) in &exact {
        // A key's estimate is at least truth − sample_error; listed if above S / capacity
        // (S, the estimated total, itself within the sampling's error of n).
        let lowest = truth.saturating_sub(sample::error(truth, EVERY));
        let s = n + sample::error(n, EVERY);
        if lowest > s / CAPACITY as u64 {
            heavy += 1;
            assert!(
                listed.contains_key(&key[..]),
                "{key:?} ({truth}) is not listed"
            );
        }
    }
    assert!(heavy > 3, "the traffic is skewed: {heavy} heavy keys");
    for (key, &(count, error)) in &listed {
        let truth = exact.get(*key).copied().unwrap_or(0);
        let sampling = sample::error(count, EVERY);
        assert!(
            count + sampling >= truth,
            "{key:?} counted {count} + {sampling} < {truth}"
        );
        assert!(
            (count - error).saturating_sub(sampling) <= truth,
            "{key:?} {count} - {error} - {sampling} > {truth}"
        );
        // The heaviest keys' estimates are close: sampling errs by about sqrt(truth × 15).
        if truth > 10_000 {
            assert!(
                count.abs_diff(truth) < truth / 10,
                "{key:?} counted {count}, true {truth}"
            );
        }
    }
}

#[test]
fn a_full_buffer_drops_what_comes_next_and_counts_it_until_drained() {
    let clock = Arc::new(ManualClock::new(Nanos::new(1_800_000_000_000_000_000)));
    let summary = Summary::new(10, 4, Arc::clone(&clock) as Arc<dyn Clock>);
    sample::seed(3);
    let mut recorded = 0;
    // Recorded one in 4: well past what one buffer holds.
    for _ in 0..BATCH_RECORDS * 4 * 3 {
        summary.record(b"k", false);
    }
    let dropped = summary.dropped(By::Allowed);
    let counted = summary.read(Window::Minute, By::Allowed).top()[0].count;
    recorded += counted;
    assert_eq!(counted, 4 * BATCH_RECORDS as u64, "a buffer's worth");
    assert!(
        dropped > 0 && dropped.is_multiple_of(4),
        "{dropped} dropped"
    );
    assert_eq!(summary.dropped(By::Denied), 0);
    // Drained, the buffer takes records again.
    for _ in 0..100 {
        summary.record(b"k", false);
    }
    let counted = summary.read(Window::Minute, By::Allowed).top()[0].count;
    assert!(
        counted > recorded,
        "{counted} after drain, {recorded} before"
    );
    assert_eq!(summary.dropped(By::Allowed), dropped);
}

#[test]
fn a_flood_of_unique_keys_keeps_the_counters_and_bytes_within_the_bound() {
    const CAPACITY: usize = 100;
    const KEY: usize = 64;
    let clock = Arc::new(ManualClock::new(Nanos::new(1_800_000_000_000_000_000)));
    let summary = Summary::new(CAPACITY, 1, Arc::clone(&clock) as Arc<dyn Clock>);
    // Per counter: its key and its Arc's counts, the counter and its two heap numbers (twice,
    // for a Vec's growth), and its place in the map (twice, and the map's load factor).
    let per_counter = KEY + 16 + 2 * (32 + 16) + 2 * 25 * 8 / 7;
    let buffers = SHARDS * (BATCH_BYTES + 1024 + BATCH_RECORDS * 8 * 2);
    let most_bytes = 20 * CAPACITY * per_counter + buffers;
    let mut most_seen = (0, 0);
    // 200,000 unique keys over two hours, denied and allowed alike.
    for i in 0..200_000u64 {
        let key = format!("{i:0KEY$}");
        summary.record(key.as_bytes(), i % 2 == 0);
        if i % 1_000 == 999 {
            clock.advance(Duration::from_millis(36_000));
            summary.drain();
            most_seen.0 = most_seen.0.max(summary.entries());
            most_seen.1 = most_seen.1.max(summary.bytes());
        }
    }
    assert!(most_seen.0 <= 20 * CAPACITY, "{} counters", most_seen.0);
    assert!(
        most_seen.0 >= 10 * CAPACITY,
        "the flood filled the slices: {}",
        most_seen.0
    );
    assert!(
        most_seen.1 <= most_bytes,
        "{} bytes > {most_bytes}",
        most_seen.1
    );
    // Nothing stands out in a flood: each key was seen once, and so is counted at most
    // N / capacity above it.
    let read = summary.read(Window::Hour, By::Denied);
    assert_eq!(read.len(), CAPACITY);
    for c in read.top() {
        assert!(c.count - c.error <= 1);
    }
}
