//! [`Leased`]: hot buckets answered from tokens leased out of a shared store, without
//! over-granting.
//!
//! Every server of a fleet that shares one bucket (a limit for a whole API, a tenant, a model)
//! asks the store for each of its decisions, so such a bucket is decided at the speed of one
//! store core however many servers there are. A [`Leased`] store watches which buckets it is
//! asked about often (`hot` decisions in a lease's lifetime) and, for those, reserves `n` tokens
//! in one atomic call (a decision like any other, of cost `n`), answers the next decisions from
//! them without a call, and gives back what it did not spend once they have gone cold, at most
//! one lifetime later, and at [`close`](Leased::close).
//!
//! **Exact.** Tokens are paid in the store before they are handed out, so the exactness bound
//! of every store holds with a lease's tokens counted where they are, in the bucket or in a
//! lease: over any interval, what the fleet allows never exceeds what the bucket and the leases
//! held at its start plus the refill (over an interval with no lease at its start, the bound of
//! a store without leases). What a lease costs is a bounded, temporary under-grant: the
//! tokens leased and not yet spent, and a lease held by a server that dies (a crash cannot give
//! back; the refill pays it back, as it does any spent token). A return is a refund made once
//! (a [`Once`] id), so retried or replayed it gives nothing twice; one that fails is lost, an
//! under-grant again, never an over-grant.
//!
//! **Sizes adapt.** A lease holds twice this server's demand over one lifetime, never more than
//! an eighth of the tokens the bucket held at the last call (so that servers together never
//! hold most of it) nor of its capacity, and nothing when that is under two tokens: near empty,
//! the last tokens are decided one by one in the store, exactly, as without leases. A decision
//! the lease cannot cover goes to the store, and tops the lease up in the same call.
//!
//! **Limits that change.** A reset forgets this server's lease on the bucket (and a renewal in
//! flight keeps nothing), but not other servers' leases: until those are spent or given back,
//! the fleet may allow what they hold beyond the fresh bucket (a reset hands out a full bucket
//! anyway). A limit lowered under a name cuts the lease to a share of the new capacity (the
//! rest is dropped), and a cost above the new capacity goes to the store, which refuses it.
//!
//! **What an answer says under a lease.** `allowed` is exact. `remaining` is this server's view:
//! what the store said at its last call plus the tokens its lease still holds (other servers'
//! decisions since then are not in it); a denial comes from the store (a lease only ever
//! allows) and says what the store holds. `retry_after` is 0 for an allowed decision. `reset_after` is the store's, counted
//! down from its last answer.
//!
//! **Bounded.** Buckets are watched in a fixed table (`slots`, 4,096 by default): a bucket
//! whose slot is held by a hotter one, or by one with a lease, is decided by the store as if
//! nothing were leased, so what clients send never grows it. Only token buckets are leased (a
//! window cannot take a refund, so an unspent lease could not go back), only checks with a cost
//! (a peek is the store's to answer), and only those the filter ([`only`](LeasedBuilder::only))
//! lets through. Leasing on a [`MemoryStore`](crate::MemoryStore) gains nothing (its
//! decisions are already local); the server leases only on Redis and PostgreSQL.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::store::lease::Leased;
//! use tollgate::{Check, MemoryStore, Policy, Store};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A RedisStore or a PostgresStore in production: one shared bucket for the whole API.
//! let store = Leased::builder(MemoryStore::new())
//!     .only(|check| check.name() == Some("api"))
//!     .build();
//! let api = Policy::token_bucket(100_000, 100_000, Duration::from_secs(1))?;
//! for _ in 0..100 {
//!     assert!(store.decide(&[Check::new(api, b"all", 1).named("api")]).await?.allowed());
//! }
//! // Once hot, most decisions are answered from the lease.
//! assert!(store.stats().local_decisions() > 50);
//! store.close().await;
//! # Ok(())
//! # }
//! ```

mod pending;
mod size;
mod sweep;
mod table;

use std::hash::BuildHasher;
use std::num::{NonZeroU64, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use self::pending::Pending;
use self::table::{Table, leasable};
use super::settle::{Adjustment, Once, Settle};
use super::{Check, Store};
use crate::{NonZeroDuration, Policy, PolicyError, StoreError, Verdict};

/// A filter on the checks that may be leased.
type Only = Arc<dyn Fn(&Check<'_>) -> bool + Send + Sync>;

/// A store whose hot buckets are answered from leased tokens: see the [module](self).
///
/// ```
/// use tollgate::store::lease::Leased;
/// use tollgate::MemoryStore;
///
/// let store = Leased::new(MemoryStore::new());
/// assert_eq!(store.stats().renewals(), 0);
/// ```
pub struct Leased<S> {
    core: Arc<Core<S>>,
}

struct Core<S> {
    inner: S,
    table: Table,
    lifetime: Duration,
    divisor: u64,
    hot: u64,
    only: Option<Only>,
    stats: LeaseStats,
    /// Names this server's returns, so that each is made once across the fleet.
    server: u64,
    serial: AtomicU64,
    sweeping: AtomicBool,
    closed: AtomicBool,
}

/// Settings of a [`Leased`] store.
///
/// ```
/// use std::num::{NonZeroU64, NonZeroUsize};
/// use tollgate::store::lease::Leased;
/// use tollgate::{MemoryStore, NonZeroDuration};
///
/// let store = Leased::builder(MemoryStore::new())
///     .lifetime(NonZeroDuration::from_millis(100).unwrap())
///     .hot(NonZeroU64::new(32).unwrap())
///     .share(NonZeroU64::new(16).unwrap())
///     .slots(NonZeroUsize::new(1024).unwrap())
///     .build();
/// # drop(store);
/// ```
pub struct LeasedBuilder<S> {
    inner: S,
    lifetime: Duration,
    divisor: NonZeroU64,
    hot: NonZeroU64,
    slots: NonZeroUsize,
    only: Option<Only>,
}

const DIVISOR: NonZeroU64 = NonZeroU64::new(8).unwrap();
const HOT: NonZeroU64 = NonZeroU64::new(16).unwrap();
const SLOTS: NonZeroUsize = NonZeroUsize::new(4096).unwrap();
/// The longest lease (see [`LeasedBuilder::lifetime`]).
const MAX_LIFETIME: Duration = Duration::from_secs(3600);

impl<S: Settle> Leased<S> {
    /// Leases on `inner` with the default settings.
    pub fn new(inner: S) -> Leased<S> {
        Leased::builder(inner).build()
    }

    /// Leases on `inner`: 50 ms leases, on buckets decided 16 times in one, each at most an
    /// eighth of the bucket, 4,096 buckets watched.
    pub fn builder(inner: S) -> LeasedBuilder<S> {
        LeasedBuilder {
            inner,
            lifetime: Duration::from_millis(50),
            divisor: DIVISOR,
            hot: HOT,
            slots: SLOTS,
            only: None,
        }
    }

    /// The store the leases are taken from.
    pub fn inner(&self) -> &S {
        &self.core.inner
    }

    /// What the leases did.
    pub fn stats(&self) -> &LeaseStats {
        &self.core.stats
    }

    /// Gives every lease back and takes no new one: later decisions go to the store one by one.
    /// Call it before a server stops, or its leases are lost until the refill pays them back.
    ///
    /// # Cancel safety
    ///
    /// The store is closed from the first poll: dropped part way, it takes no new lease
    /// either. The leases it had not given back yet are given back by the background sweep
    /// within a lifetime or two, while the store lives; a return in flight when it is dropped
    /// reaches the store or not (a dropped [`Settle::settle`]), and is made at most once (it
    /// carries an id). What does not go back is an under-grant the refill pays back, never an
    /// over-grant.
    pub async fn close(&self) {
        self.core.closed.store(true, Ordering::Relaxed);
        self.core.give_back_all(Instant::now(), true).await;
    }
}

impl<S: Settle> LeasedBuilder<S> {
    /// How long a lease lasts before what it holds beyond the next lifetime's need is given
    /// back; the longest tokens wait unspent. 50 ms by default. Never zero: a lease would end
    /// before it served a decision. At most an hour: a longer one is taken as an hour (tokens
    /// left unspent that long are an under-grant nobody wants, and a lease's deadlines stay
    /// far from the end of the clock).
    ///
    /// ```compile_fail
    /// use std::time::Duration;
    /// use tollgate::store::lease::Leased;
    /// use tollgate::MemoryStore;
    ///
    /// // A zero `Duration` does not compile; a `NonZeroDuration` cannot be zero.
    /// let _ = Leased::builder(MemoryStore::new()).lifetime(Duration::ZERO);
    /// ```
    pub fn lifetime(mut self, lifetime: NonZeroDuration) -> Self {
        self.lifetime = lifetime.get().min(MAX_LIFETIME);
        self
    }

    /// Decisions in one lifetime that make a bucket hot enough to lease. 16 by default.
    pub fn hot(mut self, decisions: NonZeroU64) -> Self {
        self.hot = decisions;
        self
    }

    /// A lease takes at most `1 / divisor` of the tokens the bucket holds (and of its capacity).
    /// 8 by default.
    pub fn share(mut self, divisor: NonZeroU64) -> Self {
        self.divisor = divisor;
        self
    }

    /// How many buckets are watched at once (rounded up to a power of two): the cap on this
    /// store's memory, and on its leases. 4,096 by default.
    pub fn slots(mut self, slots: NonZeroUsize) -> Self {
        self.slots = slots;
        self
    }

    /// Leases only the checks `only` accepts (say, of named policies); every check by default.
    pub fn only(mut self, only: impl Fn(&Check<'_>) -> bool + Send + Sync + 'static) -> Self {
        self.only = Some(Arc::new(only));
        self
    }

    /// The store.
    pub fn build(self) -> Leased<S> {
        Leased {
            core: Arc::new(Core {
                inner: self.inner,
                table: Table::new(self.slots.get()),
                lifetime: self.lifetime,
                divisor: self.divisor.get(),
                hot: self.hot.get(),
                only: self.only,
                stats: LeaseStats::default(),
                server: foldhash::fast::RandomState::default().hash_one(std::process::id()),
                serial: AtomicU64::new(0),
                sweeping: AtomicBool::new(false),
                closed: AtomicBool::new(false),
            }),
        }
    }
}

/// Counters of a [`Leased`] store.
///
/// ```
/// use tollgate::store::lease::Leased;
/// use tollgate::MemoryStore;
///
/// let stats = Leased::new(MemoryStore::new()).stats().local_decisions();
/// assert_eq!(stats, 0);
/// ```
#[derive(Debug, Default)]
pub struct LeaseStats {
    local: AtomicU64,
    renewals: AtomicU64,
    leased: AtomicU64,
    returned: AtomicU64,
    lost: AtomicU64,
}

impl LeaseStats {
    /// Checks answered from a lease, without a store call.
    pub fn local_decisions(&self) -> u64 {
        self.local.load(Ordering::Relaxed)
    }

    /// Store calls that leased tokens (each also decided the check that made it).
    pub fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Tokens leased in all.
    pub fn tokens_leased(&self) -> u64 {
        self.leased.load(Ordering::Relaxed)
    }

    /// Tokens given back unspent.
    pub fn tokens_returned(&self) -> u64 {
        self.returned.load(Ordering::Relaxed)
    }

    /// Tokens whose return failed (the store did not answer): an under-grant, which the refill
    /// pays back.
    pub fn tokens_lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// How long a return's id is remembered. A lease never retries a return; the id guards against
/// the same call sent twice by a client that reconnects (within the store's timeout), and
/// every return leaves one such key in the store for this long.
const RETURN_ONCE_TTL: Duration = Duration::from_secs(5);

impl<S: Settle> Core<S> {
    fn may_lease(&self, check: &Check<'_>) -> bool {
        leasable(check) && self.only.as_ref().is_none_or(|only| only(check))
    }

    /// Gives `tokens` back to `bucket`'s bucket, once; whether the store took them.
    async fn give_back(&self, bucket: Check<'_>, tokens: u64) -> bool {
        let id = format!(
            "lease:{:016x}:{}",
            self.server,
            self.serial.fetch_add(1, Ordering::Relaxed)
        );
        let once = Once {
            id: id.as_bytes(),
            ttl: RETURN_ONCE_TTL,
        };
        let refund = [(bucket, Adjustment::Refund(tokens))];
        let returned = self.inner.settle(Some(once), &refund).await.is_ok();
        bump(
            if returned {
                &self.stats.returned
            } else {
                &self.stats.lost
            },
            tokens,
        );
        returned
    }

    /// Gives back what every lease holds beyond its next lifetime's need (everything, with
    /// `all`, when the store closes: then the first return that fails ends it, since a store
    /// that does not answer would make each of the others wait for its timeout too), one call
    /// per bucket.
    async fn give_back_all(&self, now: Instant, all: bool) {
        for index in 0..self.table.len() {
            let owed = {
                let mut slot = self.table.slot(index);
                let Some(entry) = slot.as_mut() else { continue };
                // A renewal in flight adds its own top-up later (and, closed, gives it back
                // itself); the lease it started from is this one's to return.
                let excess = if all {
                    std::mem::take(&mut entry.lease)
                } else {
                    entry.excess(now, self.lifetime, self.hot, self.divisor)
                };
                (excess > 0).then(|| (entry.owned(), excess))
            };
            let Some((bucket, excess)) = owed else {
                continue;
            };
            let sent = Instant::now();
            if self.give_back(bucket.check(), excess).await {
                // The bucket holds them again: this server's view says so.
                let mut slot = self.table.slot(index);
                if let Some(entry) = slot.as_mut().filter(|e| e.is(&bucket.check())) {
                    entry.returned(excess, sent);
                }
            } else if all {
                return;
            }
        }
    }
}

impl<S: Settle> Store for Leased<S> {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        Check::validate_all(checks)?;
        if checks.is_empty() || self.core.closed.load(Ordering::Relaxed) {
            return self.core.inner.decide(checks).await;
        }
        let pending = Pending::plan(&self.core, checks, Instant::now());
        pending.decide().await
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.core.inner.ready().await
    }

    fn name(&self) -> &'static str {
        self.core.inner.name()
    }

    fn supports(&self, policy: &Policy) -> Result<(), PolicyError> {
        self.core.inner.supports(policy)
    }
}

/// Settlements go to the store. A reset also forgets the bucket's lease: its tokens were paid
/// into a state that no longer exists, and handing them out beside a full bucket would be more
/// than the bucket holds.
impl<S: Settle> Settle for Leased<S> {
    async fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> Result<Verdict, StoreError> {
        self.core.inner.settle(once, adjustments).await
    }

    async fn reset(&self, buckets: &[Check<'_>]) -> Result<(), StoreError> {
        for bucket in buckets {
            self.core.table.forget(bucket);
        }
        let reset = self.core.inner.reset(buckets).await;
        // Again: a renewal that began while the reset was on its way may have been paid
        // before it, in the state it dropped.
        for bucket in buckets {
            self.core.table.forget(bucket);
        }
        reset
    }
}
