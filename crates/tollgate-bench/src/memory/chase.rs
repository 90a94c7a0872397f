//! The machine's floor under a check over many keys: the time of one memory load that depends
//! on the one before, over more memory than a cache holds. A check of a key not in any cache is
//! a chain of such loads (the caller's key, then the table's), so the report puts each
//! contender's large-scenario time in loads: how far apart two contenders can be is a matter of
//! how many loads each chains, whatever the machine.

use std::hint::black_box;

use crate::clock::Stopwatch;

/// Cache lines the chase spreads over: 2^20 of 64 bytes, 64 MB.
const LINES: usize = 1 << 20;
/// `u64`s per cache line.
const PER_LINE: usize = 8;
/// Loads timed per round.
const LOADS: usize = 2_000_000;

/// The median over `rounds` of the ns per load of a walk through every line of 64 MB, in a
/// random order in which each load's address is the value the one before read.
pub(super) fn dependent_load_ns(rounds: usize) -> f64 {
    let next = cycle(LINES);
    let mut times: Vec<f64> = (0..rounds.max(1))
        .map(|_| {
            let watch = Stopwatch::start();
            let mut at = 0usize;
            for _ in 0..LOADS {
                at = next[at] as usize;
            }
            black_box(at);
            watch.elapsed().as_nanos() as f64 / LOADS as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// `lines` cache lines of `u64`s whose first word holds the index of the next line's first
/// word, in one cycle through all of them in a random order (Sattolo's shuffle).
fn cycle(lines: usize) -> Vec<u64> {
    let mut order: Vec<usize> = (0..lines).collect();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for i in (1..lines).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Below i, never i itself: that is what makes it one cycle.
        let j = ((u128::from(state) * i as u128) >> 64) as usize;
        order.swap(i, j);
    }
    let mut next = vec![0u64; lines * PER_LINE];
    for (i, &line) in order.iter().enumerate() {
        next[line * PER_LINE] = (order[(i + 1) % lines] * PER_LINE) as u64;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chase_visits_every_line_once_before_it_returns() {
        let lines = 1000;
        let next = cycle(lines);
        let mut seen = vec![false; lines];
        let mut at = 0usize;
        for _ in 0..lines {
            assert_eq!(at % PER_LINE, 0, "a line's first word");
            assert!(!seen[at / PER_LINE], "line {} twice", at / PER_LINE);
            seen[at / PER_LINE] = true;
            at = next[at] as usize;
        }
        assert_eq!(at, 0, "back at the start after every line");
        // Not in order: a walk in address order would be a prefetcher's, not a chain of misses.
        assert_ne!(next[0], PER_LINE as u64);
    }

    #[test]
    fn a_dependent_load_is_timed() {
        let ns = dependent_load_ns(1);
        assert!(ns > 0.0 && ns < 100_000.0, "{ns} ns");
    }
}
