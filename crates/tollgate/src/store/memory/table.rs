//! [`Table`]: buckets, in shards.
//!
//! Each shard is a `hashbrown` table behind a reader-writer lock. A check on a known key takes
//! the shard's read lock (shared: checks never wait for each other) and then works on the key's
//! cell alone: for a token bucket one `AtomicU64` updated by compare-and-swap. The write lock is
//! taken only to insert a new key or to sweep the shard; cells never move while a read lock is
//! held, so a cell's update can never land on an entry that has been dropped.
//!
//! Idle keys (whose state equals a new key's: a full bucket) are swept one shard at a time,
//! when that shard has doubled since its last sweep or the store is at its key cap. No sweep
//! ever locks more than one shard.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hashbrown::HashTable;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::key::Key;
use super::name::BucketKey;
use crate::{Nanos, StoreError};

/// What a table stores per key.
pub(crate) trait Cell: Send + Sync + 'static {
    /// The state of a key never seen.
    fn fresh() -> Self;
    /// Whether the cell equals a fresh one at `now` (checked under the shard's write lock).
    fn is_idle(&self, now: Nanos) -> bool;
    /// The bytes the cell holds outside its slot.
    fn heap_bytes(&self) -> usize;
}

pub(crate) struct Slot<V> {
    pub(crate) key: Key,
    pub(crate) cell: V,
}

pub(crate) struct Shard<V> {
    slots: HashTable<Slot<V>>,
    /// Entries left by the last sweep: the next sweep waits until the shard doubles.
    after_sweep: usize,
    /// When the shard was last swept.
    swept_at: Nanos,
}

impl<V> Shard<V> {
    #[inline]
    pub(crate) fn find(&self, hash: u64, key: BucketKey<'_>) -> Option<&Slot<V>> {
        self.slots.find(hash, |s| s.key.is(key))
    }
}

/// Keeps shard locks on separate cache lines, so two threads on two shards never share one.
#[repr(align(128))]
struct Padded<T>(T);

/// The count of keys across every table of a store, against its cap.
#[derive(Debug)]
pub(crate) struct KeyCount {
    pub(crate) keys: AtomicUsize,
    pub(crate) max_keys: usize,
}

impl KeyCount {
    /// What a check refused by the cap reports.
    pub(crate) fn full(&self) -> StoreError {
        StoreError::Full {
            max_keys: self.max_keys,
        }
    }
}

/// A new key refused: the store holds its maximum of keys and sweeping the key's shard freed
/// none. Kept apart from [`StoreError`] so that a check's result on its way out of the table
/// (`Result<Nanos, AtCap>`) fits in two registers. A `Result<_, StoreError>` goes through a stack
/// slot, and copying it out right after it was written stalls the check (about 5 ns of 55).
#[derive(Debug)]
pub(crate) struct AtCap;

/// Buckets in shards, each stored under its [`BucketKey`].
pub(crate) struct Table<V> {
    hasher: foldhash::quality::FixedState,
    shards: Box<[Padded<RwLock<Shard<V>>>]>,
    /// When every shard was last swept (nanoseconds of the store's clock).
    swept_all_at: AtomicU64,
}

/// A shard smaller than this is never swept just for having doubled.
const MIN_SWEEP: usize = 64;

/// At the cap, a shard (or the whole table) is swept again for a new key only after a gap: a
/// flood of new keys would otherwise scan it for every request. The gap grows with the keys
/// held, so that sweeping at the cap costs at most about a tenth of a core (a sweep looks at
/// a key in a few nanoseconds): 10 ms, or 50 ns per key held (100 ms at two million). A key
/// that turns idle meanwhile is freed at the next sweep, at most the gap later.
fn sweep_gap_at_cap(keys: usize) -> Nanos {
    let per_key = u64::try_from(keys).unwrap_or(u64::MAX).saturating_mul(50);
    Nanos::new(per_key.max(10_000_000))
}

impl<V: Cell> Table<V> {
    pub(crate) fn new(hasher: foldhash::quality::FixedState, shards: usize) -> Self {
        let shards = (0..shards.next_power_of_two())
            .map(|_| {
                Padded(RwLock::new(Shard {
                    slots: HashTable::new(),
                    after_sweep: 0,
                    swept_at: Nanos::ZERO,
                }))
            })
            .collect();
        Table {
            hasher,
            shards,
            swept_all_at: AtomicU64::new(0),
        }
    }

    /// The hash of a bucket key, part by part (so a stored key is split again to rehash it).
    #[inline]
    pub(crate) fn hash(&self, key: BucketKey<'_>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(key.prefix);
        hasher.write(key.key);
        hasher.finish()
    }

    /// The shard of `hash`. hashbrown probes with the low bits and tags with the top seven,
    /// so shards take bits from the middle.
    #[inline]
    pub(crate) fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    pub(crate) fn read(&self, shard: usize) -> RwLockReadGuard<'_, Shard<V>> {
        self.shards[shard].0.read()
    }

    /// Runs `f` on the cell of `key`, inserting a fresh cell first if the key is new.
    #[inline]
    pub(crate) fn with_cell<R>(
        &self,
        key: BucketKey<'_>,
        now: Nanos,
        count: &KeyCount,
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, AtCap> {
        let hash = self.hash(key);
        let shard = &self.shards[self.shard_index(hash)].0;
        {
            let guard = shard.read();
            if let Some(slot) = guard.find(hash, key) {
                return Ok(f(&slot.cell));
            }
        }
        self.with_new_cell(shard, hash, key, now, count, f)
    }

    /// [`Table::with_cell`] for a key that was missing under the read lock: out of line, so that
    /// the read path of a known key, inlined into every caller, stays small.
    #[cold]
    #[inline(never)]
    fn with_new_cell<R>(
        &self,
        shard: &RwLock<Shard<V>>,
        hash: u64,
        key: BucketKey<'_>,
        now: Nanos,
        count: &KeyCount,
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, AtCap> {
        let mut guard = shard.write();
        if guard.find(hash, key).is_none() {
            self.insert(&mut guard, hash, key, now, count)?;
        }
        let slot = guard
            .find(hash, key)
            .expect("inserted under this write lock");
        Ok(f(&slot.cell))
    }

    /// Drops `key`'s cell, if it has one: its bucket is as new again.
    pub(crate) fn remove(&self, key: BucketKey<'_>, count: &KeyCount) {
        let hash = self.hash(key);
        let mut shard = self.shards[self.shard_index(hash)].0.write();
        if let Ok(slot) = shard.slots.find_entry(hash, |s| s.key.is(key)) {
            slot.remove();
            count.keys.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Makes sure `key` has a cell (for callers that then lock several shards themselves).
    pub(crate) fn ensure(
        &self,
        key: BucketKey<'_>,
        now: Nanos,
        count: &KeyCount,
    ) -> Result<(), StoreError> {
        self.with_cell(key, now, count, |_| ())
            .map_err(|AtCap| count.full())
    }

    fn insert(
        &self,
        shard: &mut RwLockWriteGuard<'_, Shard<V>>,
        hash: u64,
        key: BucketKey<'_>,
        now: Nanos,
        count: &KeyCount,
    ) -> Result<(), AtCap> {
        if shard.slots.len() >= (2 * shard.after_sweep).max(MIN_SWEEP) {
            self.sweep(shard, now, count);
        }
        if count.keys.load(Ordering::Relaxed) >= count.max_keys {
            let gap = sweep_gap_at_cap(count.keys.load(Ordering::Relaxed));
            if now.saturating_sub(shard.swept_at) >= gap {
                self.sweep(shard, now, count);
            }
            if count.keys.load(Ordering::Relaxed) >= count.max_keys {
                return Err(AtCap);
            }
        }
        count.keys.fetch_add(1, Ordering::Relaxed);
        shard.slots.insert_unique(
            hash,
            Slot {
                key: Key::new(key),
                cell: V::fresh(),
            },
            |s| self.hash(s.key.name()),
        );
        Ok(())
    }

    fn sweep(&self, shard: &mut Shard<V>, now: Nanos, count: &KeyCount) {
        let before = shard.slots.len();
        shard.slots.retain(|s| !s.cell.is_idle(now));
        shard.slots.shrink_to(0, |s| self.hash(s.key.name()));
        shard.after_sweep = shard.slots.len();
        shard.swept_at = now;
        count
            .keys
            .fetch_sub(before - shard.after_sweep, Ordering::Relaxed);
    }

    /// The bytes the table holds: each shard's slots (allocated, used or not, with hashbrown's
    /// control byte each), keys too long to be stored inline, and cells' own heap (a sliding
    /// log's entries). Walks every shard.
    pub(crate) fn allocated_bytes(&self) -> usize {
        let fixed = self.shards.len() * std::mem::size_of::<Padded<RwLock<Shard<V>>>>();
        let shards: usize = self
            .shards
            .iter()
            .map(|shard| {
                let shard = shard.0.read();
                let slots = shard.slots.capacity() * (std::mem::size_of::<Slot<V>>() + 1);
                let heap: usize = shard
                    .slots
                    .iter()
                    .map(|s| s.key.heap_bytes() + s.cell.heap_bytes())
                    .sum();
                slots + heap
            })
            .sum();
        fixed + shards
    }

    /// Sweeps every shard that is not busy, one at a time. Used when the store is at its cap,
    /// and then at most once per [`sweep_gap_at_cap`] by one caller: a flood of new keys at
    /// the cap would otherwise scan the whole table for every request (milliseconds each at
    /// the default cap's two million keys).
    pub(crate) fn sweep_all(&self, now: Nanos, count: &KeyCount) {
        let last = self.swept_all_at.load(Ordering::Relaxed);
        let gap = sweep_gap_at_cap(count.keys.load(Ordering::Relaxed));
        if now.as_u64() < last.saturating_add(gap.as_u64())
            || self
                .swept_all_at
                .compare_exchange(last, now.as_u64(), Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        for shard in self.shards.iter() {
            if let Some(mut guard) = shard.0.try_write() {
                self.sweep(&mut guard, now, count);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use parking_lot::Mutex;

    use super::Slot;
    use crate::store::memory::cell::Window;

    /// The sizes the store's documentation gives in bytes.
    #[test]
    fn slots_are_the_documented_size() {
        assert_eq!(std::mem::size_of::<Slot<AtomicU64>>(), 40);
        assert_eq!(std::mem::size_of::<Slot<Mutex<Window>>>(), 120);
    }
}
