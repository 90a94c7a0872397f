//! A local cache of denials: "this bucket denies a cost of `c` or more until `t`".
//!
//! Exact, never a guess: a denial for cost `c` with `retry_after = r` means the bucket holds
//! fewer than `c` tokens until `r` has passed on the store's clock. Other clients can only take
//! tokens, never add them, so until then every check of cost `>= c` on that bucket is denied
//! wherever it is asked. The cached deadline counts `r` from the moment the request was *sent*,
//! before the store read its clock, so it can only end early (and ask the store again), never late.
//! Under a flood on a denied key this keeps the traffic off the store.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::time::Duration;

use parking_lot::Mutex;

use crate::{Decision, Nanos};

#[derive(Debug, Clone, Copy)]
struct Denial {
    until: Nanos,
    cost: u64,
    /// The decision as the store gave it, for the fields a cached answer repeats.
    decision: Decision,
    at: Nanos,
    /// The bucket's time per token, to count the tokens refilled since `at`.
    interval: Nanos,
}

type Shard = Mutex<HashMap<Vec<u8>, Denial, foldhash::fast::FixedState>>;

/// Shards of `bucket key -> denial`, bounded in size.
pub(crate) struct DenyCache {
    shards: Box<[Shard]>,
    hasher: foldhash::fast::FixedState,
    max_per_shard: usize,
}

const SHARDS: usize = 16;

impl DenyCache {
    pub(crate) fn new(max_entries: usize) -> DenyCache {
        let seed = std::collections::hash_map::RandomState::new().hash_one(0xde7e_u64);
        DenyCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(HashMap::with_hasher(foldhash::fast::FixedState::with_seed(
                        seed,
                    )))
                })
                .collect(),
            hasher: foldhash::fast::FixedState::with_seed(seed),
            max_per_shard: max_entries.div_ceil(SHARDS),
        }
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// The cached denial of `cost` on `key` at `now`, if one still holds.
    pub(crate) fn get(&self, key: &[u8], cost: u64, now: Nanos) -> Option<Decision> {
        if cost == 0 {
            return None;
        }
        let mut shard = self.shard(key).lock();
        let denial = *shard.get(key)?;
        if now >= denial.until {
            shard.remove(key);
            return None;
        }
        if cost < denial.cost {
            return None;
        }
        let elapsed = Duration::from(now - denial.at);
        let reset_after = denial.decision.reset_after.saturating_sub(elapsed);
        // Tokens held now, from the bucket's backlog: (tau - backlog) / t, as the store counts.
        let t = denial.interval.as_u64().max(1);
        let tau = t.saturating_mul(denial.decision.limit);
        let remaining = tau.saturating_sub(Nanos::from(reset_after).as_u64()) / t;
        Some(Decision {
            retry_after: Duration::from(denial.until - now),
            reset_after,
            remaining,
            ..denial.decision
        })
    }

    /// Records what the store answered for `cost` on `key` (a token bucket refilling one token
    /// per `interval`), asked at `sent`.
    pub(crate) fn record(
        &self,
        key: &[u8],
        cost: u64,
        interval: Nanos,
        sent: Nanos,
        decision: &Decision,
    ) {
        let mut shard = self.shard(key).lock();
        if decision.allowed {
            shard.remove(key);
            return;
        }
        if shard.len() >= self.max_per_shard && !shard.contains_key(key) {
            shard.retain(|_, d| d.until > sent);
            if shard.len() >= self.max_per_shard {
                return;
            }
        }
        shard.insert(
            key.to_vec(),
            Denial {
                until: sent + Nanos::from(decision.retry_after),
                cost,
                decision: *decision,
                at: sent,
                interval,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry_ms: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 10,
            remaining: 1,
            retry_after: Duration::from_millis(retry_ms),
            reset_after: Duration::from_millis(900),
        }
    }

    #[test]
    fn covers_larger_costs_until_the_deadline_only() {
        let cache = DenyCache::new(100);
        let t0 = Nanos::new(1_000_000_000);
        cache.record(b"k", 3, Nanos::new(100_000_000), t0, &denied(100));
        let at = t0 + Nanos::new(40_000_000);
        let hit = cache.get(b"k", 3, at).unwrap();
        assert_eq!(hit.retry_after, Duration::from_millis(60));
        assert_eq!(hit.reset_after, Duration::from_millis(860));
        assert_eq!(hit.remaining, 1, "(1000 - 860) / 100 ms per token");
        assert!(cache.get(b"k", 5, at).is_some());
        assert!(cache.get(b"k", 2, at).is_none(), "a smaller cost may pass");
        assert!(cache.get(b"k", 0, at).is_none(), "a peek always asks");
        assert!(cache.get(b"k", 3, t0 + Nanos::new(100_000_000)).is_none());
    }

    #[test]
    fn an_allowed_answer_clears_and_the_size_is_bounded() {
        let cache = DenyCache::new(16);
        let t0 = Nanos::new(1);
        let t = Nanos::new(100_000_000);
        cache.record(b"k", 1, t, t0, &denied(100));
        cache.record(
            b"k",
            1,
            t,
            t0,
            &Decision {
                allowed: true,
                ..denied(0)
            },
        );
        assert!(cache.get(b"k", 1, t0).is_none());
        for i in 0..1000u32 {
            cache.record(&i.to_be_bytes(), 1, t, t0, &denied(100));
        }
        let held: usize = cache.shards.iter().map(|s| s.lock().len()).sum();
        assert!(held <= 16);
    }
}
