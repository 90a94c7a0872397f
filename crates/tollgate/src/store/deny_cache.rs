//! A local cache of denials: "this bucket denies a cost of `c` or more until `t`".
//!
//! Exact, never a guess: a denial for cost `c` with `retry_after = r` means the bucket holds
//! fewer than `c` tokens until `r` has passed on the store's clock. Other clients can only take
//! tokens, never add them, so until then every check of cost `>= c` on that bucket is denied
//! wherever it is asked.
//!
//! The rest of a cached answer (remaining, and the retry of a larger cost) must be what the store
//! would say too, so it depends on the algorithm ([`Refill`]): a token bucket's is counted from its
//! backlog; a fixed window's stands until the window ends; but a sliding log's remaining grows
//! when its oldest entry leaves and a sliding counter's as its previous window slides out, so
//! the store says for how long (the *hold*, at most `r`) its answer stands, and a larger cost's
//! retry depends on state the cache does not have, so only the same cost is answered.
//!
//! The cached deadline counts `r` from the moment the request was *sent*, before the store read
//! its clock, so it can only end early (and ask the store again), never late.
//! Under a flood on a denied key this keeps the traffic off the store.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::{Decision, Nanos, Policy};

/// How a denied bucket's answer changes while the denial holds (nobody else taking).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refill {
    /// A token bucket refilling one token per interval: remaining, and the retry of any cost,
    /// counted from its backlog.
    Every(Nanos),
    /// A fixed window: remaining stands, and every denied cost waits for the window's end.
    /// (Only Redis remembers window denials: PostgreSQL decides windows apart.)
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    AtWindowEnd,
    /// A sliding window: the answer stands for the hold, for the same cost only.
    Sliding,
}

#[derive(Debug, Clone, Copy)]
struct Denial {
    /// When the cached answer stops being exact (the end of the hold).
    until: Nanos,
    /// When the same cost may pass: `retry_after` counts down to it.
    retry_at: Nanos,
    cost: u64,
    /// The decision as the store gave it, for the fields a cached answer repeats.
    decision: Decision,
    at: Nanos,
    refill: Refill,
    /// The policy the store decided with: a bucket is named by its policy's name, so its
    /// numbers may change, and a denial under other numbers says nothing.
    terms: Policy,
}

type Shard = Mutex<HashMap<Vec<u8>, Denial, foldhash::fast::FixedState>>;

/// Shards of `bucket key -> denial`, bounded in size.
pub(crate) struct DenyCache {
    shards: Box<[Shard]>,
    /// Entries in all shards: while there are none (a store that denies nothing), a lookup or
    /// an allowed answer costs one atomic read instead of a hash and a lock.
    entries: AtomicUsize,
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
            entries: AtomicUsize::new(0),
            hasher: foldhash::fast::FixedState::with_seed(seed),
            max_per_shard: max_entries.div_ceil(SHARDS),
        }
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// The cached denial of `cost` on `key` under `terms` at `now`, if one still holds.
    pub(crate) fn get(
        &self,
        key: &[u8],
        terms: &Policy,
        cost: u64,
        now: Nanos,
    ) -> Option<Decision> {
        if cost == 0 || self.entries.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut shard = self.shard(key).lock();
        let denial = *shard.get(key)?;
        if now >= denial.until {
            shard.remove(key);
            self.entries.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        if denial.terms != *terms
            || cost < denial.cost
            || (cost > denial.cost && denial.refill == Refill::Sliding)
        {
            return None;
        }
        let elapsed = Duration::from(now - denial.at);
        let reset_after = denial.decision.reset_after().saturating_sub(elapsed);
        let (remaining, retry_after) = match denial.refill {
            // Tokens held now, from the bucket's backlog: (tau - backlog) / t, as the store
            // counts; `cost` tokens are there once the backlog is down to tau - cost × t.
            Refill::Every(interval) => {
                let t = interval.as_u64().max(1);
                let tau = t.saturating_mul(denial.decision.limit());
                let backlog = Nanos::from(reset_after).as_u64();
                let retry = backlog.saturating_add(t.saturating_mul(cost));
                (
                    tau.saturating_sub(backlog) / t,
                    Duration::from_nanos(retry.saturating_sub(tau)),
                )
            }
            Refill::AtWindowEnd | Refill::Sliding => (
                denial.decision.remaining(),
                Duration::from(denial.retry_at - now),
            ),
        };
        Some(Decision::new(
            denial.decision.allowed(),
            denial.decision.limit(),
            remaining,
            retry_after,
            reset_after,
        ))
    }

    /// Forgets what is cached for `key` (its bucket was refunded, charged or reset).
    pub(crate) fn forget(&self, key: &[u8]) {
        if self.entries.load(Ordering::Relaxed) == 0 {
            return;
        }
        if self.shard(key).lock().remove(key).is_some() {
            self.entries.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Records what the store answered for `cost` on `key`, asked at `sent`, an answer that
    /// stands for `hold` (for a denial; at most its `retry_after`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &self,
        key: &[u8],
        terms: &Policy,
        cost: u64,
        refill: Refill,
        sent: Nanos,
        hold: Duration,
        decision: &Decision,
    ) {
        let forget = decision.allowed() || hold.is_zero();
        if forget && self.entries.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut shard = self.shard(key).lock();
        if forget {
            if shard.remove(key).is_some() {
                self.entries.fetch_sub(1, Ordering::Relaxed);
            }
            return;
        }
        if shard.len() >= self.max_per_shard && !shard.contains_key(key) {
            let before = shard.len();
            shard.retain(|_, d| d.until > sent);
            self.entries
                .fetch_sub(before - shard.len(), Ordering::Relaxed);
            if shard.len() >= self.max_per_shard {
                return;
            }
        }
        let replaced = shard.insert(
            key.to_vec(),
            Denial {
                until: sent + Nanos::from(hold.min(decision.retry_after())),
                retry_at: sent + Nanos::from(decision.retry_after()),
                cost,
                decision: *decision,
                at: sent,
                refill,
                terms: *terms,
            },
        );
        if replaced.is_none() {
            self.entries.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms() -> Policy {
        Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap()
    }

    fn denied(retry_ms: u64) -> Decision {
        Decision::new(
            false,
            10,
            1,
            Duration::from_millis(retry_ms),
            Duration::from_millis(900),
        )
    }

    #[test]
    fn covers_larger_costs_until_the_deadline_only() {
        let cache = DenyCache::new(100);
        let t0 = Nanos::new(1_000_000_000);
        // 10 tokens, one per 100 ms, a backlog of 900 ms: 1 token, cost 2 waits 100 ms.
        let refill = Refill::Every(Nanos::new(100_000_000));
        cache.record(
            b"k",
            &terms(),
            2,
            refill,
            t0,
            Duration::from_millis(100),
            &denied(100),
        );
        let at = t0 + Nanos::new(40_000_000);
        let hit = cache.get(b"k", &terms(), 2, at).unwrap();
        assert_eq!(hit.retry_after(), Duration::from_millis(60));
        assert_eq!(hit.reset_after(), Duration::from_millis(860));
        assert_eq!(hit.remaining(), 1, "(1000 - 860) / 100 ms per token");
        let other = Policy::token_bucket(20, 10, Duration::from_secs(1)).unwrap();
        assert!(
            cache.get(b"k", &other, 2, at).is_none(),
            "a denial under other numbers says nothing"
        );
        let larger = cache.get(b"k", &terms(), 5, at).unwrap();
        assert_eq!(
            larger.retry_after(),
            Duration::from_millis(360),
            "860 + 500 - 1000"
        );
        assert!(
            cache.get(b"k", &terms(), 1, at).is_none(),
            "a smaller cost may pass"
        );
        assert!(
            cache.get(b"k", &terms(), 0, at).is_none(),
            "a peek always asks"
        );
        assert!(
            cache
                .get(b"k", &terms(), 2, t0 + Nanos::new(100_000_000))
                .is_none()
        );
    }

    #[test]
    fn an_allowed_answer_clears_and_the_size_is_bounded() {
        let cache = DenyCache::new(16);
        let t0 = Nanos::new(1);
        let t = Refill::Every(Nanos::new(100_000_000));
        let hold = Duration::from_millis(100);
        cache.record(b"k", &terms(), 1, t, t0, hold, &denied(100));
        cache.record(
            b"k",
            &terms(),
            1,
            t,
            t0,
            hold,
            &Decision::new(true, 10, 1, Duration::ZERO, Duration::from_millis(900)),
        );
        assert!(cache.get(b"k", &terms(), 1, t0).is_none());
        for i in 0..1000u32 {
            cache.record(&i.to_be_bytes(), &terms(), 1, t, t0, hold, &denied(100));
        }
        let held: usize = cache.shards.iter().map(|s| s.lock().len()).sum();
        assert!(held <= 16);
    }

    #[test]
    fn a_window_denial_repeats_its_remaining_for_the_hold_only() {
        let cache = DenyCache::new(100);
        let t0 = Nanos::new(1_000_000_000);
        let ms = |n: u64| Nanos::new(n * 1_000_000);
        // Denied for 100 ms, but the oldest entry of a log leaves after 30 ms.
        cache.record(
            b"k",
            &terms(),
            2,
            Refill::Sliding,
            t0,
            Duration::from_millis(30),
            &denied(100),
        );
        let hit = cache.get(b"k", &terms(), 2, t0 + ms(20)).unwrap();
        assert_eq!(hit.remaining(), 1);
        assert_eq!(hit.retry_after(), Duration::from_millis(80));
        assert_eq!(hit.reset_after(), Duration::from_millis(880));
        assert!(
            cache.get(b"k", &terms(), 3, t0 + ms(20)).is_none(),
            "a larger cost waits longer"
        );
        assert!(
            cache.get(b"k", &terms(), 2, t0 + ms(30)).is_none(),
            "the hold is over"
        );
        // A denial that stands for no time is not cached.
        cache.record(
            b"k",
            &terms(),
            2,
            Refill::Sliding,
            t0,
            Duration::ZERO,
            &denied(100),
        );
        assert!(cache.get(b"k", &terms(), 2, t0).is_none());
    }
}
