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
//!
//! A shard also holds a few *hot cells*: the cells of keys that threads check again and again,
//! moved out of their slots so that those threads can update them without the table (see
//! `hot.rs`, which moves them). Their slots stay, marked as moved, and every reader of a slot
//! goes through [`Shard::cell`].

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hashbrown::HashTable;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::key::Key;
use super::name::BucketKey;
use crate::{Nanos, StoreError};

/// The most hot cells in one shard. A shard with none free frees an idle one for a new hot
/// key, and otherwise leaves the key in its slot.
pub(crate) const HOT_PER_SHARD: usize = 4;

/// What a table stores per key.
pub(crate) trait Cell: Send + Sync + 'static {
    /// The state of a key never seen.
    fn fresh() -> Self;
    /// Whether the cell equals a fresh one at `now` (checked under the shard's write lock).
    fn is_idle(&self, now: Nanos) -> bool;
    /// The bytes the cell holds outside its slot.
    fn heap_bytes(&self) -> usize;

    /// The index of the hot cell this slot's cell moved to, if it did (only token buckets
    /// move; the others keep these defaults).
    #[inline]
    fn moved(&self) -> Option<usize> {
        None
    }

    /// For a hot cell, which cached checks update without the shard's lock: marks it retired
    /// if it is idle, atomically against those checks; whether it did.
    fn retire_if_idle(&self, now: Nanos) -> bool {
        self.is_idle(now)
    }

    /// Marks a hot cell retired whatever its state (its key is being reset).
    fn retire(&self) {}
}

pub(crate) struct Slot<V> {
    pub(crate) key: Key,
    pub(crate) cell: V,
}

/// A cell moved out of its slot, shared with the threads that cache it.
pub(crate) struct Hot<V> {
    /// The hash of its key, to find its slot again.
    pub(crate) hash: u64,
    pub(crate) cell: Arc<V>,
}

pub(crate) struct Shard<V> {
    pub(crate) slots: HashTable<Slot<V>>,
    /// Hot cells, at most [`HOT_PER_SHARD`]; a moved slot names its index here.
    pub(crate) hot: Vec<Option<Hot<V>>>,
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

impl<V: Cell> Shard<V> {
    /// The cell of `slot`: its own, or the hot cell it moved to.
    #[inline]
    pub(crate) fn cell<'a>(&'a self, slot: &'a Slot<V>) -> &'a V {
        match slot.cell.moved() {
            None => &slot.cell,
            Some(index) => self.hot_cell(index).unwrap_or(&slot.cell),
        }
    }

    /// The `index`-th hot cell. A moved slot's hot cell lives as long as the slot, so this is
    /// `None` only for a `tat` that reads as moved, which the clock's range rules out.
    #[cold]
    fn hot_cell(&self, index: usize) -> Option<&V> {
        self.hot.get(index)?.as_ref().map(|hot| &*hot.cell)
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
/// slot, and copying it out right after it was written stalls the check.
#[derive(Debug)]
pub(crate) struct AtCap;

/// Buckets in shards, each stored under its [`BucketKey`].
pub(crate) struct Table<V> {
    /// Unique in the process, never reused: what a thread's cached hot cell belongs to.
    pub(crate) id: u64,
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
        static TABLES: AtomicU64 = AtomicU64::new(0);
        let shards = (0..shards.next_power_of_two())
            .map(|_| {
                Padded(RwLock::new(Shard {
                    slots: HashTable::new(),
                    hot: Vec::new(),
                    after_sweep: 0,
                    swept_at: Nanos::ZERO,
                }))
            })
            .collect();
        Table {
            id: TABLES.fetch_add(1, Ordering::Relaxed),
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

    /// The lock of the shard of `hash`.
    #[inline]
    pub(crate) fn shard_of(&self, hash: u64) -> &RwLock<Shard<V>> {
        &self.shards[self.shard_index(hash)].0
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
        let shard = self.shard_of(hash);
        {
            let guard = shard.read();
            if let Some(slot) = guard.find(hash, key) {
                return Ok(f(guard.cell(slot)));
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
        Ok(f(guard.cell(slot)))
    }

    /// Drops `key`'s cell, if it has one: its bucket is as new again.
    pub(crate) fn remove(&self, key: BucketKey<'_>, count: &KeyCount) {
        let hash = self.hash(key);
        let mut shard = self.shard_of(hash).write();
        let Shard { slots, hot, .. } = &mut *shard;
        if let Ok(slot) = slots.find_entry(hash, |s| s.key.is(key)) {
            if let Some(moved) = (slot.get().cell.moved())
                .and_then(|index| hot.get_mut(index))
                .and_then(Option::take)
            {
                moved.cell.retire();
            }
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
        let Shard { slots, hot, .. } = shard;
        slots.retain(|s| match s.cell.moved() {
            None => !s.cell.is_idle(now),
            Some(index) => !retire_if_idle(hot, index, now),
        });
        shard.slots.shrink_to(0, |s| self.hash(s.key.name()));
        shard.after_sweep = shard.slots.len();
        shard.swept_at = now;
        count
            .keys
            .fetch_sub(before - shard.after_sweep, Ordering::Relaxed);
    }

    /// The bytes the table holds: each shard's slots (allocated, used or not, with hashbrown's
    /// control byte each), keys too long to be stored inline, and cells' own heap (a sliding
    /// log's entries, a sliding counter's carried counts). Walks every shard.
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
                    .map(|s| s.key.heap_bytes() + shard.cell(s).heap_bytes())
                    .sum();
                // Each hot cell: its place in the shard's list, and its `Arc` (two counts and
                // the cell).
                let hot = shard.hot.capacity() * std::mem::size_of::<Option<Hot<V>>>()
                    + shard.hot.iter().flatten().count()
                        * (2 * std::mem::size_of::<usize>() + std::mem::size_of::<V>());
                slots + heap + hot
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

/// Retires the `index`-th hot cell if it is idle, freeing its place; whether it did (its slot
/// then goes too).
fn retire_if_idle<V: Cell>(hot: &mut [Option<Hot<V>>], index: usize, now: Nanos) -> bool {
    let Some(place) = hot.get_mut(index) else {
        return false;
    };
    let retired = place
        .as_ref()
        .is_some_and(|moved| moved.cell.retire_if_idle(now));
    if retired {
        *place = None;
    }
    retired
}
