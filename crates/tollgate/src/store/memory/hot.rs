//! Hot keys: a key that a thread checks again and again is decided without the table.
//!
//! Finding a key in the table costs a hash, a probe and its shard's read lock: two atomic
//! read-modify-writes on a word that every thread checking that shard writes, so on a key that
//! all threads check (a global limit, a busy tenant) the lock's word moves from core to core
//! along with the bucket's own. That is most of a check on a known key.
//!
//! So a token bucket that one thread finds in the table [`STREAK`] times in a row (checks of a key
//! it caches do not count, nor break the row) is *promoted*: under its
//! shard's write lock, its cell moves out of its slot to a hot cell of its own (an
//! `Arc<AtomicU64>` in the shard's short list of them, at most [`HOT_PER_SHARD`]), its slot
//! keeps only [`MOVED`](super::cell::MOVED) and the cell's index, and the thread keeps the key
//! and the cell in a thread-local. Its next checks of that key compare the key and update the
//! cell by compare-and-swap, as the table would, without hashing, probing or locking. Other
//! threads reach the cell through the table until they too have checked it `STREAK` times in a
//! row. Each thread caches one key (the last it promoted or found promoted).
//!
//! A cached cell can outlive its slot, so a slot that goes (swept idle, or reset by
//! [`Settle::reset`](crate::store::settle::Settle::reset)) first *retires* its hot cell, writing [`RETIRED`](super::cell::RETIRED): a sweep by
//! compare-and-swap from the idle state it saw, a reset unconditionally. A cached check's
//! compare-and-swap then fails, it sees `RETIRED`, drops its cache and goes to the table, where
//! the key is as new (an idle bucket is one). Of a check and a retirement racing on one cell
//! exactly one compare-and-swap lands, so no decision is ever taken on a bucket the table has
//! forgotten. Multi-bucket checks and sweeps reach a hot cell through its slot, under the shard
//! lock as before.
//!
//! Memory: a hot cell is 24 bytes (its `Arc`) plus its place in the shard's list; at most
//! `HOT_PER_SHARD` per shard, and each keeps a key the cap already counts. A thread's cache
//! holds one stored key and one `Arc`, freed when it caches another or exits; a cache outliving
//! its store holds only that (a table's id is never reused, so it matches nothing again).

use std::cell::{Cell as LocalCell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use super::cell::MOVED;
use super::key::Key;
use super::name::BucketKey;
use super::table::{Cell, HOT_PER_SHARD, Hot, KeyCount, Shard, Table};
use crate::Nanos;

/// Checks of one key in a row by one thread that promote it.
pub(crate) const STREAK: u32 = 8;

/// A thread's cached hot cell (its table's id is in [`CACHED_TABLE`]).
struct Cached {
    key: Key,
    cell: Arc<AtomicU64>,
}

// What a thread keeps. The words every check reads or writes are plain `Cell`s (a check over
// many keys reads two and writes two, no `RefCell` borrow), written with `with(|c| c.set(..))`:
// `LocalKey::set` goes through an initializer that is not inlined, a call per check.
thread_local! {
    /// This thread's cached hot cell.
    static CACHED: RefCell<Option<Cached>> = const { RefCell::new(None) };
    /// The id + 1 of the table of the cell [`CACHED`] holds; 0 when it holds none.
    static CACHED_TABLE: LocalCell<u64> = const { LocalCell::new(0) };
    /// The hash of the key this thread checked last in a table.
    static LAST: LocalCell<u64> = const { LocalCell::new(0) };
    /// How many times in a row, after the first.
    static IN_A_ROW: LocalCell<u32> = const { LocalCell::new(0) };
}

impl Table<AtomicU64> {
    /// Whether this thread caches a hot cell of this table: one word read, so that a check
    /// over many keys (which caches none) goes straight to the table.
    #[inline]
    pub(crate) fn cached_here(&self) -> bool {
        CACHED_TABLE.get() == self.id + 1
    }

    /// Runs `f` on `key`'s cell if this thread caches it. `None` when it does not, or when
    /// `f` returns `None` (the cell is retired): then the table decides.
    #[inline]
    pub(crate) fn with_cached<R>(
        &self,
        key: BucketKey<'_>,
        f: impl FnOnce(&AtomicU64) -> Option<R>,
    ) -> Option<R> {
        if !self.cached_here() {
            return None;
        }
        CACHED
            .try_with(|cached| {
                let mut cached = cached.borrow_mut();
                let hot = cached.as_ref()?;
                if !hot.key.is(key) {
                    return None;
                }
                let decided = f(&hot.cell);
                if decided.is_none() {
                    *cached = None;
                    CACHED_TABLE.with(|cell| cell.set(0));
                }
                // Checks of another key around this one are not in a row: a thread that
                // checks a global key and then a user's, by turns, keeps the global one.
                IN_A_ROW.with(|cell| cell.set(0));
                decided
            })
            .ok()
            .flatten()
    }

    /// Runs `f` on `key`'s cell if the table holds the key, and counts the thread's checks of
    /// it in a row: on the [`STREAK`]-th caches its cell, promoting it first if need be.
    /// `None`, having changed nothing, if the key is new (then [`Table::with_cell`] inserts it;
    /// that first check is not in a row).
    #[inline]
    pub(crate) fn known_bucket<R>(
        &self,
        key: BucketKey<'_>,
        now: Nanos,
        count: &KeyCount,
        f: impl FnOnce(&AtomicU64) -> R,
    ) -> Option<R> {
        let hash = self.hash(key);
        let shard = self.shard_of(hash);
        let decided = {
            let guard = shard.read();
            let slot = guard.find(hash, key)?;
            f(guard.cell(slot))
        };
        if in_a_row(hash) {
            self.share(shard, hash, key, now, count);
        }
        Some(decided)
    }

    /// Caches `key`'s hot cell in this thread, moving the key's cell out of its slot first if
    /// it has not moved yet and its shard has room.
    #[cold]
    #[inline(never)]
    fn share(
        &self,
        shard: &RwLock<Shard<AtomicU64>>,
        hash: u64,
        key: BucketKey<'_>,
        now: Nanos,
        count: &KeyCount,
    ) {
        // A key another thread moved already is shared under the read lock.
        let moved = {
            let guard = shard.read();
            guard
                .find(hash, key)
                .and_then(|slot| guard.hot.get(slot.cell.moved()?)?.as_ref())
                .map(|moved| Arc::clone(&moved.cell))
        };
        if let Some(cell) = moved {
            cache(self.id, key, cell);
            return;
        }
        let mut guard = shard.write();
        let Shard { slots, hot, .. } = &mut *guard;
        let moved = match slots.find(hash, |s| s.key.is(key)) {
            // Swept since the check.
            None => return,
            Some(slot) => slot.cell.moved(),
        };
        let cell = match moved {
            Some(index) => match hot.get(index).and_then(Option::as_ref) {
                Some(moved) => Arc::clone(&moved.cell),
                None => return,
            },
            None => {
                let Some(index) = free_place(slots, hot, now, count) else {
                    return;
                };
                let Some(slot) = slots.find(hash, |s| s.key.is(key)) else {
                    return;
                };
                // Under the write lock nothing else touches the slot's cell: no check holds
                // it, and no thread caches it yet.
                let cell = Arc::new(AtomicU64::new(slot.cell.load(Ordering::Acquire)));
                slot.cell.store(MOVED + index as u64, Ordering::Release);
                hot[index] = Some(Hot {
                    hash,
                    cell: Arc::clone(&cell),
                });
                cell
            }
        };
        drop(guard);
        cache(self.id, key, cell);
    }
}

/// A free place in a shard's hot cells: an empty one, or else one whose cell is idle, which is
/// retired and dropped with its slot as a sweep would.
fn free_place(
    slots: &mut hashbrown::HashTable<super::table::Slot<AtomicU64>>,
    hot: &mut Vec<Option<Hot<AtomicU64>>>,
    now: Nanos,
    count: &KeyCount,
) -> Option<usize> {
    if let Some(index) = hot.iter().position(Option::is_none) {
        return Some(index);
    }
    if hot.len() < HOT_PER_SHARD {
        hot.push(None);
        return Some(hot.len() - 1);
    }
    let index = hot
        .iter()
        .position(|moved| moved.as_ref().is_some_and(|m| m.cell.retire_if_idle(now)))?;
    let moved = hot[index].take()?;
    if let Ok(slot) = slots.find_entry(moved.hash, |s| s.cell.moved() == Some(index)) {
        slot.remove();
        count.keys.fetch_sub(1, Ordering::Relaxed);
    }
    Some(index)
}

/// Notes a check of the key of `hash` in the table; true on the [`STREAK`]-th in a row.
#[inline]
fn in_a_row(hash: u64) -> bool {
    if LAST.get() == hash {
        let row = IN_A_ROW.get().saturating_add(1);
        IN_A_ROW.with(|cell| cell.set(row));
        row == STREAK - 1
    } else {
        LAST.with(|cell| cell.set(hash));
        IN_A_ROW.with(|cell| cell.set(0));
        false
    }
}

/// Makes `cell` this thread's cached cell, for `key` of table `table`.
fn cache(table: u64, key: BucketKey<'_>, cell: Arc<AtomicU64>) {
    let cached = Cached {
        key: Key::new(key),
        cell,
    };
    // A thread being torn down keeps nothing.
    let _ = CACHED.try_with(|slot| {
        *slot.borrow_mut() = Some(cached);
        CACHED_TABLE.with(|cell| cell.set(table + 1));
        // Should the cell be retired, the key's next streak in the table counts from zero.
        IN_A_ROW.with(|cell| cell.set(0));
    });
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::thread;
    use std::time::Duration;

    use super::{HOT_PER_SHARD, STREAK};
    use crate::store::memory::table::Cell;
    use crate::{ManualClock, MemoryStore, Nanos, Policy};

    /// Hot cells in the store's (only) token-bucket shard, after checking that each is named
    /// by exactly one slot, of the key it was moved for.
    fn hot_cells(store: &MemoryStore<ManualClock>) -> usize {
        let table = &store.inner.buckets;
        let shard = table.read(0);
        let mut named = 0;
        for slot in shard.slots.iter() {
            if let Some(index) = slot.cell.moved() {
                let moved = shard.hot[index].as_ref().expect("a moved slot's hot cell");
                assert_eq!(moved.hash, table.hash(slot.key.name()));
                named += 1;
            }
        }
        let cells = shard.hot.iter().flatten().count();
        assert_eq!(named, cells, "slots moved against hot cells");
        cells
    }

    fn store(max_keys: usize) -> (ManualClock, MemoryStore<ManualClock>) {
        let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .shards(1)
            .max_keys(NonZeroUsize::new(max_keys).unwrap())
            .build();
        (clock, store)
    }

    #[test]
    fn a_key_checked_in_a_row_moves_and_its_bucket_stays_exact() {
        let (_, store) = store(100);
        let policy = Policy::token_bucket(20, 1, Duration::from_secs(3600)).unwrap();
        let mut remaining = Vec::new();
        for check in 1..=25 {
            let decision = store.check(&policy, b"hot", 1).unwrap();
            remaining.push(decision.allowed().then(|| decision.remaining()));
            // The first check inserted the key; the next `STREAK` find it in the table.
            let moved = usize::from(check > STREAK);
            assert_eq!(hot_cells(&store), moved, "after check {check}");
        }
        // One token per check, through the slot and then through the hot cell alike.
        let expected: Vec<_> = (0..25).map(|i| (i < 20).then(|| 19 - i)).collect();
        assert_eq!(remaining, expected);
        assert_eq!(store.len(), 1);
        // Another thread reaches the moved cell through the table.
        let other = thread::scope(|s| s.spawn(|| store.check(&policy, b"hot", 1)).join());
        assert!(!other.unwrap().unwrap().allowed());
    }

    #[test]
    fn keys_checked_in_turn_stay_in_their_slots() {
        let (_, store) = store(100);
        let policy = Policy::per_second(1000).unwrap();
        for _ in 0..100 {
            for key in [&b"a"[..], b"b"] {
                assert!(store.check(&policy, key, 1).unwrap().allowed());
            }
        }
        assert_eq!(hot_cells(&store), 0);
    }

    /// A thread that checks a cached hot key and other keys by turns (a global limit, then a
    /// user's) keeps the hot key: the others' checks are not in a row.
    #[test]
    fn keys_checked_between_a_cached_key_stay_in_their_slots() {
        let (_, store) = store(100);
        let policy = Policy::per_second(1000).unwrap();
        for _ in 0..=STREAK {
            assert!(store.check(&policy, b"global", 1).unwrap().allowed());
        }
        assert_eq!(hot_cells(&store), 1);
        for _ in 0..4 * STREAK {
            assert!(store.check(&policy, b"global", 1).unwrap().allowed());
            assert!(store.check(&policy, b"user", 1).unwrap().allowed());
        }
        assert_eq!(hot_cells(&store), 1);
    }

    #[test]
    fn a_shard_moves_at_most_its_share_of_hot_keys_and_frees_idle_ones() {
        let (clock, store) = store(100);
        let policy = Policy::token_bucket(100, 1, Duration::from_secs(1)).unwrap();
        let keys: Vec<Vec<u8>> = (0..HOT_PER_SHARD + 1)
            .map(|i| format!("key{i}").into_bytes())
            .collect();
        for key in &keys {
            for _ in 0..=STREAK {
                assert!(store.check(&policy, key, 1).unwrap().allowed());
            }
        }
        // The last one found no room: every hot key is still charged.
        assert_eq!(hot_cells(&store), HOT_PER_SHARD);
        assert_eq!(store.len(), keys.len());
        // Once the first is idle (full again) and the others charged again, a new hot key
        // takes the idle one's place, and the idle key goes as a sweep would take it.
        clock.advance(Duration::from_secs(200));
        for key in &keys[1..] {
            assert_eq!(store.check(&policy, key, 1).unwrap().remaining(), 99);
        }
        for _ in 0..=STREAK {
            assert!(store.check(&policy, b"new", 1).unwrap().allowed());
        }
        assert_eq!(hot_cells(&store), HOT_PER_SHARD);
        assert_eq!(store.len(), keys.len());
        // The charged keys kept their buckets; the first is new again (it was full anyway).
        for key in &keys[1..HOT_PER_SHARD] {
            assert_eq!(store.check(&policy, key, 1).unwrap().remaining(), 98);
        }
        assert_eq!(store.check(&policy, &keys[0], 1).unwrap().remaining(), 99);
        assert_eq!(store.len(), keys.len() + 1);
    }

    /// Checks of several buckets, and a reset, reach a moved key's cell through its slot
    /// while another thread caches it; the cache sees both.
    #[test]
    fn multi_bucket_checks_and_resets_reach_a_cached_hot_cell() {
        let (_, store) = store(100);
        let policy = Policy::token_bucket(100, 1, Duration::from_secs(3600)).unwrap();
        let (to_cache, cached) = std::sync::mpsc::channel::<u64>();
        let (to_main, main) = std::sync::mpsc::channel::<u64>();
        thread::scope(|s| {
            let store = &store;
            s.spawn(move || {
                // Moves and caches the key, then checks it whenever asked, reporting what is left.
                for _ in 0..=STREAK {
                    store.check(&policy, b"hot", 1).unwrap();
                }
                to_main.send(0).unwrap();
                while cached.recv().is_ok() {
                    let left = store.check(&policy, b"hot", 1).unwrap().remaining();
                    to_main.send(left).unwrap();
                }
            });
            main.recv().unwrap();
            assert_eq!(hot_cells(store), 1);
            let both = [
                crate::Check::new(policy, b"hot", 5),
                crate::Check::new(policy, b"other", 1),
            ];
            assert!(store.decide_sync(&both).unwrap().allowed());
            to_cache.send(0).unwrap();
            // 9 taken by the other thread, 5 by the pair, 1 now.
            assert_eq!(main.recv().unwrap(), 85);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let reset = [crate::Check::new(policy, b"hot", 1)];
            runtime
                .block_on(crate::store::settle::Settle::reset(store, &reset))
                .unwrap();
            assert_eq!(hot_cells(store), 0);
            to_cache.send(0).unwrap();
            // The cached cell was retired: the check went to the table, to a full bucket.
            assert_eq!(main.recv().unwrap(), 99);
            drop(to_cache);
        });
    }

    /// A key whose hot cell a sweep retires, while this thread still caches it, is new again:
    /// the thread's next check decides on a fresh bucket in the table, not on the retired cell.
    #[test]
    fn a_swept_hot_key_is_decided_in_the_table_again() {
        let (clock, store) = store(2);
        let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
        for _ in 0..10 {
            assert!(store.check(&policy, b"hot", 1).unwrap().allowed());
        }
        assert!(!store.check(&policy, b"hot", 1).unwrap().allowed());
        assert_eq!(hot_cells(&store), 1);
        clock.advance(Duration::from_secs(10));
        // At the cap of two keys, a third sweeps the idle ones: the hot key's cell is retired.
        assert!(store.check(&policy, b"other", 1).unwrap().allowed());
        assert!(store.check(&policy, b"third", 1).unwrap().allowed());
        assert_eq!(hot_cells(&store), 0);
        assert_eq!(store.len(), 2);
        // The store is at its cap with two live keys, so the hot key, new again, is refused:
        // the check went to the table rather than to the cell this thread cached.
        assert!(store.check(&policy, b"hot", 1).is_err());
    }

    /// Each step, the clock moves 20 ms (the bucket, 5 tokens refilled in 10 ms, is full and
    /// idle again), and then two threads that cache the hot key's cell make a burst of checks
    /// while a third, at the key cap, sweeps idle keys (racing their compare-and-swaps, or
    /// before them) and checks the key through the table. A step can grant at most 5: a check decided on a cell
    /// the table no longer has would be granted on top of the fresh bucket that replaced it.
    #[test]
    fn sweeps_racing_cached_checks_never_over_grant() {
        let (clock, store) = store(2);
        let policy = Policy::token_bucket(5, 5, Duration::from_millis(10)).unwrap();
        let allowed = AtomicU64::new(0);
        let step = AtomicU64::new(0);
        let finished: [AtomicU64; 2] = Default::default();
        let steps = 300;
        // Every hot cell seen, kept so that no two can share an address.
        let mut cells: Vec<Arc<AtomicU64>> = Vec::new();
        thread::scope(|s| {
            for finished in &finished {
                let (store, allowed, step) = (&store, &allowed, &step);
                s.spawn(move || {
                    for n in 1..=steps {
                        while step.load(Ordering::Acquire) < n {
                            std::hint::spin_loop();
                        }
                        for _ in 0..2 * STREAK {
                            if store.check(&policy, b"hot", 1).unwrap().allowed() {
                                allowed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        finished.store(n, Ordering::Release);
                    }
                });
            }
            for n in 1..=steps {
                clock.advance(Duration::from_millis(20));
                // Released before the sweep, the workers mostly charge the bucket first; every
                // other step they are released after it, to find their cached cell retired.
                let race = n % 2 == 0;
                if race {
                    step.store(n, Ordering::Release);
                }
                // A new key at the cap sweeps the idle ones (cost 0: it stays idle itself).
                let filler = format!("filler{n}");
                assert!(store.check(&policy, filler.as_bytes(), 0).is_ok());
                step.store(n, Ordering::Release);
                if store.check(&policy, b"hot", 1).unwrap().allowed() {
                    allowed.fetch_add(1, Ordering::Relaxed);
                }
                for finished in &finished {
                    while finished.load(Ordering::Acquire) < n {
                        thread::yield_now();
                    }
                }
                let shard = store.inner.buckets.read(0);
                for moved in shard.hot.iter().flatten() {
                    if !cells.iter().any(|c| Arc::ptr_eq(c, &moved.cell)) {
                        cells.push(Arc::clone(&moved.cell));
                    }
                }
            }
        });
        // Every step's 5 tokens were asked for by 33 checks, and none more was granted.
        let allowed = allowed.load(Ordering::Relaxed);
        assert_eq!(allowed, 5 * steps, "{allowed} in {steps} steps");
        // The race was run: the hot cell was retired, and the key moved again, many times.
        assert!(
            cells.len() >= 10,
            "{} hot cells in {steps} steps",
            cells.len()
        );
    }
}
