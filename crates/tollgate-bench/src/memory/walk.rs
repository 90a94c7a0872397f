//! The order in which a thread visits the keys: a xorshift walk over its lane of them.
//!
//! Every contender sees the same sequence of keys (a fixed seed per lane), and caches see a
//! spread of clients rather than a sequential scan.

/// A xorshift walk over the keys of one lane: indices `lane, lane + lanes, lane + 2 × lanes, ...`.
pub(super) struct Walk {
    state: u64,
    lane: usize,
    lanes: usize,
    per_lane: u64,
}

impl Walk {
    /// A walk over lane `lane` of `keys` keys split into `lanes` lanes. `lane < lanes <= keys`
    /// keeps every index it yields below `keys`.
    pub(super) fn new(keys: usize, lane: usize, lanes: usize) -> Walk {
        debug_assert!(lane < lanes && lanes <= keys, "{lane} {lanes} {keys}");
        Walk {
            // A fixed odd seed per lane (xorshift must not start at 0).
            state: 0x9e37_79b9_7f4a_7c15 ^ (lane as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            lane,
            lanes,
            per_lane: (keys / lanes) as u64,
        }
    }

    /// The next key's index.
    #[inline(always)]
    pub(super) fn next_index(&mut self) -> usize {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        // Maps `x` onto `0..per_lane` with a multiply instead of a division, which would cost
        // as much as the cheapest check.
        let slot = ((u128::from(x) * u128::from(self.per_lane)) >> 64) as usize;
        self.lane + self.lanes * slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_stays_in_its_lane_and_below_the_keys() {
        for (keys, lanes) in [(1, 1), (7, 2), (1000, 2), (20_001, 2)] {
            for lane in 0..lanes {
                let mut walk = Walk::new(keys, lane, lanes);
                let mut seen = std::collections::HashSet::new();
                for _ in 0..10_000 {
                    let i = walk.next_index();
                    assert!(i < keys, "{i} of {keys}");
                    assert_eq!(i % lanes, lane);
                    seen.insert(i);
                }
                // It spreads: most of a small lane is visited.
                assert!(
                    seen.len() >= (keys / lanes).min(10_000) / 2,
                    "{}",
                    seen.len()
                );
            }
        }
    }

    #[test]
    fn the_same_lane_walks_the_same_keys() {
        let (mut a, mut b) = (Walk::new(1000, 1, 2), Walk::new(1000, 1, 2));
        assert!((0..100).all(|_| a.next_index() == b.next_index()));
    }
}
