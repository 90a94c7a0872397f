//! Several checks decided together, all or nothing.
//!
//! The buckets involved are held at once: first the shard read locks, then the cells, each in
//! one global order (table, shard, stored key), so two multi-bucket checks can never wait on
//! each other in a cycle. Writers (inserts, sweeps) hold one shard at a time and nothing else,
//! so they cannot close a cycle either. With every bucket held, the pure
//! [`decide_all`](crate::algorithm::decide_all) decides and the new states are written back.

use std::sync::atomic::AtomicU64;

use parking_lot::{Mutex, RwLockReadGuard};

use super::MemoryStore;
use super::cell::Held;
use super::name::{BucketKey, Prefix};
use super::table::{Shard, Table};
use super::window::Window;
use crate::algorithm::{BucketState, decide_all};
use crate::store::Check;
use crate::{Algorithm, Clock, Nanos, StoreError, Verdict};

/// One of the store's two tables.
#[derive(Clone, Copy)]
enum TableRef<'a> {
    Buckets(&'a Table<AtomicU64>),
    Windows(&'a Table<Mutex<Window>>),
}

enum ShardRead<'a> {
    Buckets(RwLockReadGuard<'a, Shard<AtomicU64>>),
    Windows(RwLockReadGuard<'a, Shard<Mutex<Window>>>),
}

/// Where one check's bucket lives, and its place in the global lock order.
struct Place {
    check: usize,
    table: usize,
    shard: usize,
    hash: u64,
}

impl<'a> TableRef<'a> {
    fn of<C: Clock>(store: &'a MemoryStore<C>, check: &Check<'_>) -> TableRef<'a> {
        // As `MemoryStore::check_in` places them: named token buckets beside their numbers.
        match check.policy.algorithm() {
            Algorithm::TokenBucket if check.name.is_none() => {
                TableRef::Buckets(&store.inner.buckets)
            }
            _ => TableRef::Windows(&store.inner.windows),
        }
    }

    /// The table's place in the lock order.
    fn id(self) -> usize {
        match self {
            TableRef::Buckets(_) => 0,
            TableRef::Windows(_) => 1,
        }
    }

    fn hash_and_shard(self, key: BucketKey<'_>) -> (u64, usize) {
        match self {
            TableRef::Buckets(t) => (t.hash(key), t.shard_index(t.hash(key))),
            TableRef::Windows(t) => (t.hash(key), t.shard_index(t.hash(key))),
        }
    }

    fn read(self, shard: usize) -> ShardRead<'a> {
        match self {
            TableRef::Buckets(t) => ShardRead::Buckets(t.read(shard)),
            TableRef::Windows(t) => ShardRead::Windows(t.read(shard)),
        }
    }
}

impl ShardRead<'_> {
    /// Locks the cell of `key`, or `None` if it was swept since it was inserted.
    fn lock(&self, hash: u64, key: BucketKey<'_>) -> Option<Held<'_>> {
        match self {
            ShardRead::Buckets(g) => g.find(hash, key).map(|s| Held::lock_tat(g.cell(s))),
            ShardRead::Windows(g) => g.find(hash, key).map(|s| Held::lock_window(g.cell(s))),
        }
    }
}

/// Decides `checks`, which passed [`Check::validate_all`].
pub(super) fn decide<C: Clock>(
    store: &MemoryStore<C>,
    checks: &[Check<'_>],
) -> Result<Verdict, StoreError> {
    with_held(store, checks, |states, now| {
        let pairs: Vec<_> = checks.iter().map(|c| (&c.policy, c.cost)).collect();
        let verdict = decide_all(&pairs, states, now)?;
        let allowed = verdict.allowed();
        Ok((verdict, allowed))
    })
}

/// What runs with every bucket held: it reads and may change the states, at `now`, and says
/// whether to write them back.
type Holding<'s> = dyn FnMut(&mut [BucketState], Nanos) -> Result<(Verdict, bool), StoreError> + 's;

/// Holds the buckets of `checks` (which passed [`Check::validate_all`]), inserting the missing
/// ones, and runs `f` on their states; writes them back when it says so.
pub(super) fn with_held<C: Clock>(
    store: &MemoryStore<C>,
    checks: &[Check<'_>],
    mut f: impl FnMut(&mut [BucketState], Nanos) -> Result<(Verdict, bool), StoreError>,
) -> Result<Verdict, StoreError> {
    let prefixes = checks
        .iter()
        .map(Prefix::of_check)
        .collect::<Result<Vec<_>, _>>()?;
    let keys: Vec<BucketKey<'_>> = prefixes
        .iter()
        .zip(checks)
        .map(|(prefix, check)| BucketKey::new(prefix, check.key))
        .collect();
    let tables: Vec<TableRef<'_>> = checks.iter().map(|c| TableRef::of(store, c)).collect();
    let mut places: Vec<Place> = keys
        .iter()
        .zip(&tables)
        .enumerate()
        .map(|(check, (k, t))| {
            let (hash, shard) = t.hash_and_shard(*k);
            Place {
                check,
                table: t.id(),
                shard,
                hash,
            }
        })
        .collect();
    places.sort_by(|a, b| {
        let (x, y) = (keys[a.check], keys[b.check]);
        (a.table, a.shard, x.prefix, x.key).cmp(&(b.table, b.shard, y.prefix, y.key))
    });
    let count = &store.inner.count;
    loop {
        // Insert missing keys first, one shard at a time, holding nothing else.
        let now = store.now()?;
        for (key, table) in keys.iter().zip(&tables) {
            match table {
                TableRef::Buckets(t) => t.ensure(*key, now, count)?,
                TableRef::Windows(t) => t.ensure(*key, now, count)?,
            }
        }
        if let Some(verdict) = decide_held(store, checks, &keys, &tables, &places, &mut f)? {
            return Ok(verdict);
        }
        // A bucket was swept between its insert and the locks (it was idle, so nothing is
        // lost): insert it again.
    }
}

/// Holds every bucket and decides; `None` if one of them has vanished meanwhile.
fn decide_held<C: Clock>(
    store: &MemoryStore<C>,
    checks: &[Check<'_>],
    keys: &[BucketKey<'_>],
    tables: &[TableRef<'_>],
    places: &[Place],
    f: &mut Holding<'_>,
) -> Result<Option<Verdict>, StoreError> {
    let mut shards: Vec<(usize, usize, ShardRead<'_>)> = Vec::with_capacity(places.len());
    for place in places {
        if shards
            .last()
            .is_none_or(|(t, s, _)| (*t, *s) != (place.table, place.shard))
        {
            let read = tables[place.check].read(place.shard);
            shards.push((place.table, place.shard, read));
        }
    }
    let mut held: Vec<Option<Held<'_>>> = (0..checks.len()).map(|_| None).collect();
    for place in places {
        let (_, _, shard) = shards
            .iter()
            .find(|(t, s, _)| (*t, *s) == (place.table, place.shard))
            .expect("every place's shard was read above");
        match shard.lock(place.hash, keys[place.check]) {
            Some(cell) => held[place.check] = Some(cell),
            None => return Ok(None),
        }
    }
    let mut held: Vec<Held<'_>> = held.into_iter().flatten().collect();
    let now = store.now()?;
    let (mut states, rebased): (Vec<BucketState>, Vec<bool>) = held
        .iter()
        .zip(checks)
        .map(|(cell, check)| cell.state_for(&check.policy, now))
        .unzip();
    let (verdict, write) = f(&mut states, now)?;
    // A bucket rebased to new numbers is written so even when nothing is taken: it refills at
    // the new pace from now on.
    for (((cell, state), check), rebased) in held.iter_mut().zip(states).zip(checks).zip(rebased) {
        if write || rebased {
            cell.set(state, (check.cost > 0 || rebased).then_some(check.policy));
        }
    }
    Ok(Some(verdict))
}
