//! Several checks decided together, all or nothing.
//!
//! The buckets involved are held at once: first the shard read locks, then the cells, each in
//! one global order (table, shard, key), so two multi-bucket checks can never wait on each
//! other in a cycle. Writers (inserts, sweeps) hold one shard at a time and nothing else, so
//! they cannot close a cycle either. With every bucket held, the pure
//! [`decide_all`](crate::algorithm::decide_all) decides and the new states are written back.

use std::sync::atomic::AtomicU64;

use parking_lot::{Mutex, RwLockReadGuard};

use super::cell::Held;
use super::table::Shard;
use super::{AnyTable, MemoryStore};
use crate::algorithm::{BucketState, decide_all};
use crate::store::Check;
use crate::{CheckError, Clock, StoreError, Verdict};

enum ShardRead<'a> {
    TokenBucket(RwLockReadGuard<'a, Shard<AtomicU64>>),
    Window(RwLockReadGuard<'a, Shard<Mutex<BucketState>>>),
}

/// Where one check's bucket lives, and its place in the global lock order.
struct Place {
    check: usize,
    table: usize,
    shard: usize,
    hash: u64,
}

impl AnyTable {
    fn id(&self) -> usize {
        match self {
            AnyTable::TokenBucket(t) => std::sync::Arc::as_ptr(t) as *const () as usize,
            AnyTable::Window(t) => std::sync::Arc::as_ptr(t) as *const () as usize,
        }
    }

    fn hash_and_shard(&self, key: &[u8]) -> (u64, usize) {
        match self {
            AnyTable::TokenBucket(t) => (t.hash(key), t.shard_index(t.hash(key))),
            AnyTable::Window(t) => (t.hash(key), t.shard_index(t.hash(key))),
        }
    }

    fn read(&self, shard: usize) -> ShardRead<'_> {
        match self {
            AnyTable::TokenBucket(t) => ShardRead::TokenBucket(t.read(shard)),
            AnyTable::Window(t) => ShardRead::Window(t.read(shard)),
        }
    }
}

impl ShardRead<'_> {
    /// Locks the cell of `key`, or `None` if it was swept since it was inserted.
    fn lock(&self, hash: u64, key: &[u8]) -> Option<Held<'_>> {
        match self {
            ShardRead::TokenBucket(g) => g.find(hash, key).map(|s| Held::lock_tat(&s.cell)),
            ShardRead::Window(g) => g.find(hash, key).map(|s| Held::lock_window(&s.cell)),
        }
    }
}

pub(super) fn decide<C: Clock>(
    store: &MemoryStore<C>,
    checks: &[Check<'_>],
) -> Result<Verdict, StoreError> {
    for (index, check) in checks.iter().enumerate() {
        if checks[..index]
            .iter()
            .any(|c| c.policy == check.policy && c.key == check.key)
        {
            return Err(CheckError::DuplicateBucket { index }.into());
        }
    }
    let tables: Vec<AnyTable> = checks.iter().map(|c| store.table(&c.policy)).collect();
    let mut places: Vec<Place> = checks
        .iter()
        .zip(&tables)
        .enumerate()
        .map(|(check, (c, t))| {
            let (hash, shard) = t.hash_and_shard(c.key);
            Place {
                check,
                table: t.id(),
                shard,
                hash,
            }
        })
        .collect();
    places.sort_by(|a, b| {
        (a.table, a.shard, checks[a.check].key).cmp(&(b.table, b.shard, checks[b.check].key))
    });
    loop {
        // Insert missing keys first, one shard at a time, holding nothing else.
        let now = store.now();
        for (check, table) in checks.iter().zip(&tables) {
            match table {
                AnyTable::TokenBucket(t) => t.ensure(check.key, now, &store.inner.count)?,
                AnyTable::Window(t) => t.ensure(check.key, now, &store.inner.count)?,
            }
        }
        if let Some(verdict) = decide_held(store, checks, &tables, &places)? {
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
    tables: &[AnyTable],
    places: &[Place],
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
        match shard.lock(place.hash, checks[place.check].key) {
            Some(cell) => held[place.check] = Some(cell),
            None => return Ok(None),
        }
    }
    let mut held: Vec<Held<'_>> = held.into_iter().flatten().collect();
    let mut states: Vec<BucketState> = held.iter().map(Held::state).collect();
    let pairs: Vec<_> = checks.iter().map(|c| (&c.policy, c.cost)).collect();
    let verdict = decide_all(&pairs, &mut states, store.now())?;
    if verdict.allowed() {
        for (cell, state) in held.iter_mut().zip(states) {
            cell.set(state);
        }
    }
    Ok(Some(verdict))
}
