//! How many tokens a lease reserves: a pure function of what the server saw, so that its rules
//! are tested on their own.

/// The fewest tokens worth a lease: a lease of one token saves no call.
pub(super) const MIN_LEASE: u64 = 2;

/// What a server knows of a bucket when it sizes its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    /// Tokens this server was asked for over the last lease lifetime (the larger of the last
    /// whole lifetime and the current one so far).
    pub(super) demand: u64,
    /// Tokens the bucket held after this server's last call to the store.
    pub(super) remaining: u64,
    /// The policy's capacity.
    pub(super) capacity: u64,
}

/// The tokens a lease should hold for the next lifetime: twice the recent demand (so that a
/// steady demand renews once per lifetime rather than running dry just before it), never more
/// than `1 / divisor` of what the bucket holds or of its capacity (so that servers together
/// never hold most of it: `k` servers each taking an eighth of what is left hold at most
/// `1 - (7/8)^k`), and 0 when that is below [`MIN_LEASE`]: near empty, the last tokens are
/// decided one by one in the store, exactly.
pub(super) fn target(seen: Seen, divisor: u64) -> u64 {
    let share = seen.remaining.min(seen.capacity) / divisor;
    let n = seen.demand.saturating_mul(2).min(share);
    if n < MIN_LEASE { 0 } else { n }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(demand: u64, remaining: u64, capacity: u64) -> Seen {
        Seen {
            demand,
            remaining,
            capacity,
        }
    }

    #[test]
    fn follows_demand_while_the_bucket_is_full() {
        assert_eq!(target(seen(100, 100_000, 100_000), 8), 200);
    }

    #[test]
    fn never_more_than_a_share_of_what_is_left() {
        // Demand of 10,000 a lifetime, 8,000 left: a lease of 1,000, not 20,000.
        assert_eq!(target(seen(10_000, 8_000, 100_000), 8), 1_000);
        // A bucket that reads fuller than its capacity (a limit lowered) is capped by it.
        assert_eq!(target(seen(10_000, 800, 80), 8), 10);
    }

    #[test]
    fn zero_near_empty_and_when_idle() {
        assert_eq!(target(seen(1_000, 15, 100_000), 8), 0);
        assert_eq!(target(seen(1_000, 16, 100_000), 8), 2);
        assert_eq!(target(seen(0, 100_000, 100_000), 8), 0);
        assert_eq!(target(seen(1, 100_000, 100_000), 8), 2);
    }

    #[test]
    fn never_overflows() {
        assert_eq!(target(seen(u64::MAX, u64::MAX, u64::MAX), 8), u64::MAX / 8);
    }
}
