//! The in-memory store: one process, exact, no exclusive lock on the common path.
//!
//! Buckets live in two tables (token buckets, and windows), sharded by a seeded hash of the
//! bucket's stored key: its policy's name (or numbers) and the user's key (keys come from
//! clients; a seeded hasher keeps them from aiming at one shard). A token-bucket check on a
//! known key takes its shard's read lock (shared: checks never wait for each other), reads the
//! key's cell and updates it with one compare-and-swap; a denial writes nothing. (A bucket named
//! by a policy name, whose numbers may change under it, is a window's cell instead: see
//! `check_window`.) A new key
//! takes its shard's write lock once, to insert. A key that a thread checks again and again
//! (a global limit, a busy tenant) moves to a cell of its own that the thread caches, and its
//! checks then skip the hash, the probe and the lock (see `hot.rs`: a few such keys per shard).
//!
//! **Memory is bounded by the configuration.** Every policy shares the two tables, so nothing
//! exists per policy: a client that invents a policy per request (inline numbers) only adds
//! keys, which the cap counts. Idle keys, whose bucket is full again (or whose window has
//! passed), are indistinguishable from keys never seen and are dropped, one shard at a time, as
//! new keys arrive. At most [`MemoryStoreBuilder::max_keys`] keys are held: when a new key
//! finds the store at its cap and sweeping frees nothing, its check fails with
//! [`StoreError::Full`], which is transient, so the caller's fail policy decides (allow, deny,
//! ...). Keys already held keep working. Dropping a live key instead would hand its client a
//! full bucket: an over-grant.
//!
//! In bytes ([`MemoryStore::allocated_bytes`] counts them): a token bucket's slot is 40 bytes
//! and a window's 120 (a named token bucket takes a window's: it keeps the policy it was
//! written under beside it, see `check_window`), plus hashbrown's control byte and its spare
//! capacity (a shard's table is at most 7/8 full, and at most twice as large as its entries
//! since its last sweep), plus the stored key's own length when the policy's name (or numbers)
//! and the key exceed 29 bytes, plus 16 bytes per entry of a sliding log (at most
//! [`MAX_LOG_LIMIT`](crate::MAX_LOG_LIMIT) per key), plus 64 bytes for a sliding counter whose
//! width changed under its name, out of its slot (see `window.rs`): allocated while the old
//! width's counts slide out, at most two old widths, and freed at the key's first charge after
//! or when the key is dropped. So `max_keys` short token-bucket keys take at most about
//! `max_keys × 41 × 2 / (7/8)` bytes: about 94 bytes per key, 197 MB at the default cap. A hot
//! key's own cell adds 24 bytes and its place in its shard's list 16, for at most four keys per
//! shard; a thread that caches one keeps a 32-byte copy of its stored key (plus the key's own
//! length, if long).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{MemoryStore, Policy};
//!
//! let store = MemoryStore::new();
//! let policy = Policy::token_bucket(2, 1, Duration::from_secs(1))?;
//! assert!(store.check(&policy, b"alice", 1)?.allowed());
//! assert!(store.check(&policy, b"alice", 1)?.allowed());
//! let third = store.check(&policy, b"alice", 1)?;
//! assert!(!third.allowed());
//! assert!(third.retry_after() <= Duration::from_secs(1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cell;
mod hot;
mod key;
mod multi;
mod name;
mod once;
mod settle;
mod table;
mod window;

use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::algorithm;
use crate::algorithm::gcra::Gcra;
use crate::store::{Check, Store};
use crate::{
    Algorithm, CheckError, Clock, Decision, MonotonicClock, Nanos, Policy, StoreError, Verdict,
};
use cell::{LOCKED, RETIRED};
use name::{BucketKey, Prefix};
pub use once::DEFAULT_MAX_SETTLED;
use table::{AtCap, KeyCount, Table};
use window::Window;

/// The default cap on keys held: about 197 MB at most for short token-bucket keys.
pub const DEFAULT_MAX_KEYS: usize = 1 << 21;

/// The most shards a table is split into.
pub const MAX_SHARDS: usize = 1 << 16;

struct Inner<C> {
    clock: C,
    count: KeyCount,
    buckets: Table<AtomicU64>,
    windows: Table<Mutex<Window>>,
    /// Ids of settlements done once ([`Settle`](crate::store::settle::Settle)).
    once: Mutex<once::OnceSet>,
}

/// The in-memory store. Cheap to clone: clones share the buckets.
///
/// ```
/// use tollgate::{MemoryStore, Policy};
///
/// let store = MemoryStore::new();
/// let copy = store.clone(); // the same buckets, e.g. for another thread
/// let policy = Policy::per_second(1)?;
/// assert!(store.check(&policy, b"alice", 1)?.allowed());
/// assert!(!copy.check(&policy, b"alice", 1)?.allowed());
/// assert_eq!(store.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryStore<C: Clock = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

impl<C: Clock> Clone for MemoryStore<C> {
    fn clone(&self) -> Self {
        MemoryStore {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// Configures a [`MemoryStore`].
///
/// ```
/// use std::num::NonZeroUsize;
/// use std::time::Duration;
/// use tollgate::{ManualClock, MemoryStore, Nanos, Policy};
///
/// // A clock the test moves, and a cap of 1,000 keys.
/// let clock = ManualClock::new(Nanos::ZERO);
/// let store = MemoryStore::builder()
///     .clock(clock.clone())
///     .max_keys(NonZeroUsize::new(1_000).unwrap())
///     .build();
/// let policy = Policy::per_second(1)?;
/// assert!(store.check(&policy, b"alice", 1)?.allowed());
/// assert!(!store.check(&policy, b"alice", 1)?.allowed());
/// clock.advance(Duration::from_secs(1));
/// assert!(store.check(&policy, b"alice", 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder<C> {
    clock: C,
    max_keys: usize,
    max_settled: usize,
    shards: usize,
}

impl MemoryStore {
    /// A store with the monotonic clock and the default cap.
    pub fn new() -> MemoryStore {
        MemoryStore::builder().build()
    }

    /// Configures a store.
    pub fn builder() -> MemoryStoreBuilder<MonotonicClock> {
        MemoryStoreBuilder {
            clock: MonotonicClock::new(),
            max_keys: DEFAULT_MAX_KEYS,
            max_settled: DEFAULT_MAX_SETTLED,
            shards: default_shards(),
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

fn default_shards() -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cores * 16).next_power_of_two().min(MAX_SHARDS)
}

impl<C: Clock> MemoryStoreBuilder<C> {
    /// The clock (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn clock<D: Clock>(self, clock: D) -> MemoryStoreBuilder<D> {
        MemoryStoreBuilder {
            clock,
            max_keys: self.max_keys,
            max_settled: self.max_settled,
            shards: self.shards,
        }
    }

    /// The most keys held at once, across all policies (default [`DEFAULT_MAX_KEYS`]).
    ///
    /// A `NonZeroUsize`, as governor's `Quota` takes a `NonZeroU32`: a store that may hold no
    /// key would fail every check, so zero is refused where it is written, by the compiler,
    /// and [`build`](Self::build) stays infallible.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::MemoryStore;
    ///
    /// let store = MemoryStore::builder().max_keys(NonZeroUsize::new(100_000).unwrap()).build();
    /// # drop(store);
    /// ```
    ///
    /// ```compile_fail
    /// // Zero is not a cap: it does not compile.
    /// let store = tollgate::MemoryStore::builder().max_keys(0).build();
    /// ```
    pub fn max_keys(mut self, max_keys: NonZeroUsize) -> Self {
        self.max_keys = max_keys.get();
        self
    }

    /// The most ids of settlements done once ([`Once`](crate::store::settle::Once): the
    /// server's committed reservations) remembered at once (default [`DEFAULT_MAX_SETTLED`]),
    /// apart from the key cap. When it is full, expired ids go first, then the first to expire
    /// is forgotten; a settlement that may be of a forgotten id is done without its refund, so
    /// none is ever given twice and none fails for want of room (see the guide on settling).
    /// Non-zero for the reason [`max_keys`](Self::max_keys) is.
    pub fn max_settled(mut self, max_settled: NonZeroUsize) -> Self {
        self.max_settled = max_settled.get();
        self
    }

    /// Shards per table, rounded up to a power of two and kept between 1 and [`MAX_SHARDS`]
    /// (default: 16 per core). A tuning knob, so a value out of range is brought into it
    /// rather than refused.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.clamp(1, MAX_SHARDS);
        self
    }

    /// Builds the store, with a hasher seeded at random.
    pub fn build(self) -> MemoryStore<C> {
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x7011_6a7e_u64);
        let hasher = foldhash::quality::FixedState::with_seed(seed);
        MemoryStore {
            inner: Arc::new(Inner {
                clock: self.clock,
                count: KeyCount {
                    keys: AtomicUsize::new(0),
                    max_keys: self.max_keys,
                },
                buckets: Table::new(hasher.clone(), self.shards),
                windows: Table::new(hasher, self.shards),
                once: Mutex::new(once::OnceSet::new(self.max_settled)),
            }),
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// Decides one check on the bucket named by `policy`'s numbers, synchronously: the fast
    /// path for in-process callers. [`MemoryStore::decide_sync`] takes named checks. The
    /// arguments come in [`Check::new`]'s order: policy, key (any bytes: `"alice"`,
    /// `b"alice"`, a `String`, a `Vec<u8>`), cost.
    ///
    /// ```
    /// use tollgate::{MemoryStore, Policy};
    ///
    /// let store = MemoryStore::new();
    /// let policy = Policy::per_second(1)?;
    /// assert!(store.check(&policy, "alice", 1)?.allowed());
    /// // The same bucket, whatever holds the bytes.
    /// assert!(!store.check(&policy, String::from("alice"), 1)?.allowed());
    /// assert!(!store.check(&policy, b"alice", 1)?.allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check(
        &self,
        policy: &Policy,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        let prefix = Prefix::shared_numbers(policy);
        self.check_in(policy, BucketKey::new(&prefix, key.as_ref()), cost)
    }

    /// A handle bound to one policy (its buckets named by its numbers), which encodes the
    /// policy once rather than at every check.
    pub fn limiter(&self, policy: &Policy) -> MemoryLimiter<C> {
        MemoryLimiter {
            store: self.clone(),
            policy: *policy,
            prefix: Prefix::numbers(policy),
        }
    }

    /// A handle bound to one policy whose buckets are named `name` (see [`Check::named`]).
    pub fn named_limiter(
        &self,
        name: &str,
        policy: &Policy,
    ) -> Result<MemoryLimiter<C>, CheckError> {
        Ok(MemoryLimiter {
            store: self.clone(),
            policy: *policy,
            prefix: Prefix::named(policy, name)?,
        })
    }

    /// Decides several checks together, synchronously: all allowed and charged, or none charged.
    pub fn decide_sync(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        Check::validate_all(checks)?;
        match checks {
            [] => Ok(Verdict::new(Vec::new())),
            [one] => {
                let prefix = Prefix::of_check(one)?;
                let bucket = BucketKey::new(&prefix, one.key);
                Ok(Verdict::new(vec![self.check_in(
                    &one.policy,
                    bucket,
                    one.cost,
                )?]))
            }
            _ => multi::decide(self, checks),
        }
    }

    /// Keys held now, across all policies.
    pub fn len(&self) -> usize {
        self.inner.count.keys.load(Ordering::Relaxed)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes the store's tables hold now (see the [module docs](self) for the bound): each
    /// slot, and what a key holds outside it (a long key, a sliding log's entries, a sliding
    /// counter's carried counts while it has some). Walks every shard, so it is for tests and
    /// diagnostics, not for every request.
    pub fn allocated_bytes(&self) -> usize {
        self.inner.buckets.allocated_bytes() + self.inner.windows.allocated_bytes()
    }

    /// The clock's reading, refused past [`MAX_NOW`](crate::algorithm::gcra::MAX_NOW): a
    /// later `tat` would set a cell's lock bit, on which every check would wait forever.
    #[inline]
    fn now(&self) -> Result<Nanos, CheckError> {
        let now = self.inner.clock.now();
        algorithm::gcra::check_now(now)?;
        Ok(now)
    }

    /// One check: reads the clock once, and builds the decision once, from what the bucket's
    /// compare-and-swap loop returns.
    #[inline]
    fn check_in(
        &self,
        policy: &Policy,
        key: BucketKey<'_>,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        let now = self.now()?;
        if policy.algorithm() != Algorithm::TokenBucket || key.is_named() {
            return self.check_window(policy, key, cost, now);
        }
        let gcra = Gcra::new(policy);
        // Checked before the bucket is touched, as the Redis store does: a cost that can
        // never pass inserts no key and is not retried.
        gcra.check_cost(cost)?;
        let table = &self.inner.buckets;
        let cached = if table.cached_here() {
            cached_tat(table, &gcra, &key, now, cost)
        } else {
            None
        };
        let tat = match cached {
            Some(tat) => tat,
            None => match table.known_bucket(key, now, &self.inner.count, |cell| {
                check_tat(&gcra, cell, now, cost)
            }) {
                Some(Some(tat)) => tat,
                // A new key, or a retired cell (whose key is then new).
                _ => self.check_new(&gcra, key, now, cost)?,
            },
        };
        // Evaluated again on the `tat` the loop decided on, the outcome is the loop's own
        // (a few integer operations), and its cost was taken iff it allows. This keeps
        // the loop's result one register wide instead of a whole outcome.
        Ok(gcra.evaluate(tat, now, cost).decision(true))
    }

    /// A token-bucket check of a key the table did not hold a moment ago, or whose hot cell was
    /// retired (its key is then as new): inserts it (sweeping first at the cap) and decides. Out
    /// of line, so that a known key's path stays short.
    #[inline(never)]
    fn check_new(
        &self,
        gcra: &Gcra,
        key: BucketKey<'_>,
        now: Nanos,
        cost: u64,
    ) -> Result<Nanos, StoreError> {
        let table = &self.inner.buckets;
        let count = &self.inner.count;
        let decide = |cell: &AtomicU64| check_tat(gcra, cell, now, cost);
        loop {
            let decided = self.with_room(now, || table.with_cell(key, now, count, decide));
            // `None`: the cell was retired; then the key is new, which the table decides.
            if let Some(tat) = decided.map_err(|AtCap| count.full())? {
                return Ok(tat);
            }
        }
    }

    /// One check of a window algorithm, or of a named token bucket, under its cell's mutex.
    /// Out of line: the token-bucket path, inlined into callers, does not carry it.
    ///
    /// A named token bucket lives here, beside the policy it was last written under, because
    /// its numbers may change under its name (a reload): its `tat` is then rebased to the new
    /// numbers (the same level, capped at the new capacity) and written so at once, even by a
    /// denial or a peek, so that it refills at the new pace from this moment on. A bucket
    /// named by its numbers never changes them, so it keeps the one-word cell.
    #[inline(never)]
    fn check_window(
        &self,
        policy: &Policy,
        key: BucketKey<'_>,
        cost: u64,
        now: Nanos,
    ) -> Result<Decision, StoreError> {
        let count = &self.inner.count;
        let table = &self.inner.windows;
        let decided: Result<Decision, CheckError> = self
            .with_room(now, || {
                table.with_cell(key, now, count, |cell| {
                    cell.lock().with_state(|state, last| {
                        if let Some(old) = *last
                            && old != *policy
                            && policy.algorithm() == Algorithm::TokenBucket
                        {
                            *state = algorithm::rebase(state, &old, policy, now);
                            *last = Some(*policy);
                        }
                        let outcome = algorithm::evaluate(policy, state, now, cost)?;
                        if outcome.allowed() && cost > 0 {
                            outcome.apply(state);
                            *last = Some(*policy);
                        }
                        Ok(outcome.decision(true))
                    })
                })
            })
            .map_err(|AtCap| count.full())?;
        Ok(decided?)
    }

    /// Runs `attempt`; if the store is at its cap, sweeps and runs it once more. Only the small
    /// result of the bucket's update passes through here, not a whole decision.
    #[inline]
    fn with_room<R>(&self, now: Nanos, attempt: impl Fn() -> Result<R, AtCap>) -> Result<R, AtCap> {
        match attempt() {
            Err(AtCap) => self.sweep_and_retry(now, attempt),
            done => done,
        }
    }

    /// At the cap: sweeps both tables' idle keys, shard by shard, and tries once more. Rare
    /// and slow, so kept out of line, out of the inlined path of every check.
    #[cold]
    #[inline(never)]
    fn sweep_and_retry<R>(
        &self,
        now: Nanos,
        attempt: impl FnOnce() -> Result<R, AtCap>,
    ) -> Result<R, AtCap> {
        self.inner.buckets.sweep_all(now, &self.inner.count);
        self.inner.windows.sweep_all(now, &self.inner.count);
        attempt()
    }
}

/// [`Table::with_cached`] for a token bucket: the `tat` decided on this thread's cached hot
/// cell, if it is `key`'s. Out of line, and `key` by reference. Inlined into every check, the
/// cached path made a check over many keys slower: it took the CPU's reordering window from
/// the next check's first loads. Passed by value, the key's four words were stored one by one
/// and reloaded two at a time, which stalls (store forwarding fails). The figures:
/// docs/performance.md, "The memory store".
#[inline(never)]
fn cached_tat(
    table: &Table<AtomicU64>,
    gcra: &Gcra,
    key: &BucketKey<'_>,
    now: Nanos,
    cost: u64,
) -> Option<Nanos> {
    table.with_cached(*key, |cell| check_tat(gcra, cell, now, cost))
}

/// One token-bucket check on its cell: a load, and a compare-and-swap when allowed. Returns the
/// `tat` it decided on: the cost was taken iff the outcome on it allows; `None` if the cell is
/// a retired hot cell, on which nothing was decided. `cost` has passed [`Gcra::check_cost`].
#[inline]
fn check_tat(gcra: &Gcra, cell: &AtomicU64, now: Nanos, cost: u64) -> Option<Nanos> {
    let mut current = cell.load(Ordering::Acquire);
    loop {
        if current & LOCKED != 0 {
            if current == RETIRED {
                return None;
            }
            // A multi-bucket check holds this bucket for a few nanoseconds.
            std::hint::spin_loop();
            current = cell.load(Ordering::Acquire);
            continue;
        }
        let outcome = gcra.evaluate(Nanos::new(current), now, cost);
        if !outcome.allowed() || cost == 0 {
            return Some(Nanos::new(current));
        }
        let new = outcome.new_tat().as_u64();
        debug_assert_eq!(new & LOCKED, 0, "clock beyond 2^63 ns");
        match cell.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(Nanos::new(current)),
            Err(seen) => current = seen,
        }
    }
}

impl<C: Clock> Store for MemoryStore<C> {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        self.decide_sync(checks)
    }

    async fn ready(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

/// A [`MemoryStore`] bound to one policy: `check(key, cost)` with the policy encoded once.
///
/// ```
/// use tollgate::{MemoryStore, Policy};
///
/// let store = MemoryStore::new();
/// let login = store.named_limiter("login", &Policy::per_minute(5)?)?;
/// for _ in 0..5 {
///     assert!(login.check(b"alice", 1)?.allowed());
/// }
/// assert!(!login.check(b"alice", 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryLimiter<C: Clock = MonotonicClock> {
    store: MemoryStore<C>,
    policy: Policy,
    prefix: Prefix,
}

impl<C: Clock> Clone for MemoryLimiter<C> {
    fn clone(&self) -> Self {
        MemoryLimiter {
            store: self.store.clone(),
            policy: self.policy,
            prefix: self.prefix.clone(),
        }
    }
}

impl<C: Clock> MemoryLimiter<C> {
    /// Takes `cost` tokens from the bucket of `key` (any bytes: `"alice"`, `b"alice"`, a
    /// `String`).
    #[inline]
    pub fn check(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, StoreError> {
        self.store.check_in(
            &self.policy,
            BucketKey::new(&self.prefix, key.as_ref()),
            cost,
        )
    }
}
