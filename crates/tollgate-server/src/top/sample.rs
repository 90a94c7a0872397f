//! Which decisions a summary records: one in `sample_every`, picked by a countdown each thread
//! keeps, so the common path is a decrement of a thread-local number (no lock, no atomic, no
//! cache line shared with another thread).
//!
//! The gaps between recorded decisions are drawn at random from the geometric distribution of
//! mean `sample_every`: each decision is then recorded with probability `1 / sample_every`,
//! independently of every other (the distribution is memoryless), whatever its key, policy or
//! kind, and whichever summary the thread recorded in last. A recorded decision counts
//! `sample_every` (the summary adds that much for it), so a key's count is an unbiased estimate
//! of its true count, within [`error`] of it but for odds below one in a million (five
//! standard deviations of the binomial draw). A fixed countdown would not do: traffic whose
//! keys come round with a period dividing `sample_every` would see some keys always and others
//! never.
//!
//! A server has one `sample_every` (`[top] sample_every`); a thread recording for summaries of
//! different rates would draw its gaps at the rate of the last one recorded in.

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};

thread_local! {
    /// Decisions left until the thread records one; 0 before its first gap is drawn.
    static LEFT: Cell<u64> = const { Cell::new(0) };
    /// The thread's xorshift64* state (never 0 once seeded).
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// Whether this decision is recorded, at one in `every` (every one at 0 or 1).
#[inline]
pub fn sampled(every: u32) -> bool {
    if every <= 1 {
        return true;
    }
    LEFT.with(|left| {
        let mut n = left.get();
        if n == 0 {
            n = gap(every);
        }
        if n == 1 {
            left.set(gap(every));
            true
        } else {
            left.set(n - 1);
            false
        }
    })
}

/// How far from its true count a key's count may be through sampling alone, for a sampled
/// `count` at one in `every`: five standard deviations of the binomial draw (`sqrt(c ×
/// (every − 1))` for a true count `c`), taken at `count + every` to cover a true count above
/// the sampled one; 0 when every decision is recorded. Integer arithmetic, rounded up.
pub fn error(count: u64, every: u32) -> u64 {
    let every = u64::from(every);
    if every <= 1 {
        return 0;
    }
    let variance = count.saturating_add(every).saturating_mul(every - 1);
    5u64.saturating_mul(variance.isqrt() + 1)
}

/// Seeds this thread's draws, for a test that must draw the same gaps on every run.
#[cfg(test)]
pub(super) fn seed(seed: u64) {
    STATE.with(|s| s.set(seed | 1));
    LEFT.with(|left| left.set(0));
}

/// A gap of the geometric distribution of mean `every`: `1 + floor(ln u / ln(1 − 1/every))`
/// for `u` uniform in `(0, 1]`, drawn once per recorded decision (off the common path).
fn gap(every: u32) -> u64 {
    let u = (next() >> 11) as f64 + 1.0;
    let u = u / (1u64 << 53) as f64;
    let p = 1.0 / f64::from(every);
    let g = (u.ln() / (-p).ln_1p()).floor();
    // A float cast saturates: a huge gap (u near 0) is clamped, never wraps.
    (g as u64).saturating_add(1)
}

/// The thread's next random number, xorshift64*, seeded from std's per-process random keys.
fn next() -> u64 {
    STATE.with(|state| {
        let mut x = state.get();
        if x == 0 {
            x = RandomState::new().hash_one(std::thread::current().id()) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

#[cfg(test)]
mod tests {
    use super::{error, sampled, seed};

    #[test]
    fn one_in_every_is_recorded_on_average_and_every_one_at_one() {
        assert!((0..1000).all(|_| sampled(1)));
        seed(7);
        let every = 64u32;
        let draws = 640_000u64;
        let recorded = (0..draws).filter(|_| sampled(every)).count() as u64;
        // 10,000 expected, standard deviation about 99: five of them either side.
        let expected = draws / u64::from(every);
        assert!(
            recorded.abs_diff(expected) <= error(expected, every) / 64 + 500,
            "{recorded} recorded of {draws} at 1 in {every}"
        );
    }

    #[test]
    fn the_sampling_error_is_zero_unsampled_and_grows_with_the_root_of_the_count() {
        assert_eq!(error(1_000_000, 1), 0);
        // sqrt((0 + 16) × 15) = 15.49…: 5 × 16.
        assert_eq!(error(0, 16), 80);
        assert!(error(10_000, 16) >= 5 * 387);
        assert!(error(u64::MAX, u32::MAX) > 0);
    }
}
