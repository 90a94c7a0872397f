//! [`Settle`]: giving tokens back and taking them without asking, for costs known only after the
//! work (an LLM call's tokens, a query's rows, bytes sent); and [`Reservation`], built on it.
//!
//! A caller [`reserve`]s an estimate (a decision like any other: denied, it takes nothing),
//! does the work, then [`commit`](Reservation::commit)s what it used: `reserved - used` is given
//! back, or `used - reserved` taken without a denial (the bucket may go into debt and then
//! allows nothing until the refill has paid it back). [`cancel`](Reservation::cancel) gives
//! everything back; dropping a reservation keeps the charge, the safe default. A reservation is
//! consumed by its commit, so it commits at most once; a settlement given a [`Once`] id is
//! recorded in the store, so that it happens at most once across every process sharing the
//! store (the server's reservations travel as signed tokens, which a client could replay on
//! another server).
//!
//! A refund never lifts a bucket above its capacity, so over any interval the tokens allowed
//! (charges included) minus the tokens refunded never exceed a full bucket plus the refill plus
//! the debt still outstanding.
//!
//! **Debt is bounded.** A charge never puts a bucket more than one capacity into debt in total
//! ([`Gcra::charge`](crate::algorithm::gcra::Gcra::charge)), in every store, however large the
//! amount and however many reservations are committed over their estimates at once: the most
//! it can deny a key is the time to refill two capacities. The exactness bound above is
//! unchanged: debt only denies, so a cap on it can never let more through.
//!
//! **Token buckets only.** A window's count cannot tell in which window a refunded token was
//! taken: given back after the window rolled over, it would add room to a window that never
//! paid for it. So refunds and charges of the window algorithms are refused with
//! [`CheckError::Unsupported`]; [`Settle::reset`] works for every algorithm.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::store::settle::reserve;
//! use tollgate::{Check, MemoryStore, Policy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! // 10,000 LLM tokens a minute per user.
//! let budget = Policy::token_bucket(10_000, 10_000, Duration::from_secs(60))?;
//! let estimate = [Check::new(budget, b"alice", 2_000).named("llm")];
//! let (verdict, reservation) = reserve(&store, &estimate).await?;
//! assert!(verdict.allowed());
//! // ... the call used 1,200 tokens: 800 go back.
//! let after = reservation.expect("allowed").commit(&store, 1_200).await?;
//! assert_eq!(after.decisions()[0].remaining(), 8_800);
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{BoxFuture, Check, DynStore, Store};
use crate::{CheckError, Policy, PolicyError, StoreError, Verdict};

/// What to do to one bucket's tokens.
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::settle::{Adjustment, Settle};
/// use tollgate::{Check, MemoryStore, Policy, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let policy = Policy::token_bucket(10, 10, Duration::from_secs(60))?;
/// let bucket = Check::new(policy, b"alice", 0);
/// // Take 4 without asking, then give 1 back: 7 left.
/// store.settle(None, &[(bucket, Adjustment::Charge(4))]).await?;
/// let after = store.settle(None, &[(bucket, Adjustment::Refund(1))]).await?;
/// assert_eq!(after.decisions()[0].remaining(), 7);
/// // Reserved 5, used 3: 2 go back.
/// assert_eq!(Adjustment::commit(5, 3, true), Adjustment::Refund(2));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// Give back this many tokens (never above the capacity).
    Refund(u64),
    /// Take this many tokens without a denial (the bucket may go into debt).
    Charge(u64),
}

impl Adjustment {
    /// What committing `used` tokens makes of a reservation of `reserved`: the difference given
    /// back, or taken without a denial. A reservation the fail policy allowed (`paid` false:
    /// the store took nothing, see [`Verdict::by_fail_policy`]) gets nothing back, since a
    /// refund would hand out tokens nobody paid; a charge beyond it is still taken.
    pub fn commit(reserved: u64, used: u64, paid: bool) -> Adjustment {
        match used.checked_sub(reserved) {
            Some(over) if over > 0 => Adjustment::Charge(over),
            _ if paid => Adjustment::Refund(reserved - used),
            _ => Adjustment::Refund(0),
        }
    }

    /// Whether it changes nothing.
    pub fn is_nothing(self) -> bool {
        matches!(self, Adjustment::Refund(0) | Adjustment::Charge(0))
    }
}

/// A settlement done at most once: `id` is recorded in the store (for `ttl`, after which a
/// settlement under it would be allowed again, so `ttl` must outlive whatever carries the id,
/// and count down to a fixed expiry: settled again later, the same id must expire at the same
/// time, which the memory store relies on when its record is full).
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::settle::{Adjustment, Once, Settle};
/// use tollgate::{Check, CheckError, MemoryStore, Policy, StoreError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let policy = Policy::token_bucket(10, 10, Duration::from_secs(60))?;
/// let refund = [(Check::new(policy, b"alice", 0), Adjustment::Refund(3))];
/// let once = || Some(Once { id: b"reservation-42", ttl: Duration::from_secs(300) });
/// store.settle(once(), &refund).await?;
/// // The same id again (a retry, a replay): refused, nothing given back twice.
/// let again = store.settle(once(), &refund).await;
/// assert!(matches!(again, Err(StoreError::Check(CheckError::AlreadySettled))));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Once<'a> {
    /// The settlement's identifier, unique per reservation (at most 64 bytes).
    pub id: &'a [u8],
    /// How long the store remembers it.
    pub ttl: Duration,
}

/// The longest [`Once::id`].
pub const MAX_ONCE_ID: usize = 64;

/// A store that can give tokens back, take them without asking, and empty buckets.
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::settle::Settle;
/// use tollgate::{Check, MemoryStore, Policy, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let policy = Policy::token_bucket(3, 3, Duration::from_secs(60))?;
/// let check = Check::new(policy, b"alice", 3);
/// assert!(store.decide(&[check]).await?.allowed());
/// // The work failed before it cost anything: give the tokens back.
/// store.refund(&[check]).await?;
/// assert!(store.decide(&[check]).await?.allowed());
/// // Or start the bucket over.
/// store.reset(&[check]).await?;
/// # Ok(())
/// # }
/// ```
pub trait Settle: Store {
    /// Adjusts every bucket of `adjustments` (a check names the bucket and its policy; its cost
    /// is ignored) at the store's clock, all together. With `once`, nothing happens and
    /// [`CheckError::AlreadySettled`] is returned if that id was settled before. Answers the
    /// state of each bucket afterwards, as a peek would.
    ///
    /// # Cancel safety
    ///
    /// As [`Store::decide`]: a settlement dropped before its call reached the store did
    /// nothing; one dropped after may have been applied, whole. With a `once` id, settling
    /// again is safe (the second answers [`CheckError::AlreadySettled`] if the first applied).
    fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send;

    /// Makes each bucket full again: its state is deleted.
    fn reset(&self, buckets: &[Check<'_>]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives each check's `cost` back to its bucket.
    fn refund(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send {
        let adjustments: Vec<_> = checks
            .iter()
            .map(|c| (*c, Adjustment::Refund(c.cost)))
            .collect();
        async move { self.settle(None, &adjustments).await }
    }
}

/// Refuses what no store settles: a window algorithm, a bad name, a bucket twice, an id too
/// long.
pub(crate) fn validate(
    once: Option<Once<'_>>,
    adjustments: &[(Check<'_>, Adjustment)],
) -> Result<(), CheckError> {
    if once.is_some_and(|o| o.id.is_empty() || o.id.len() > MAX_ONCE_ID) {
        return Err(CheckError::Unsupported(
            "a settlement id must be 1 to 64 bytes",
        ));
    }
    let checks: Vec<Check<'_>> = adjustments.iter().map(|(c, _)| *c).collect();
    Check::validate_all(&checks)?;
    if checks
        .iter()
        .any(|c| c.policy.algorithm() != crate::Algorithm::TokenBucket)
    {
        return Err(CheckError::Unsupported(
            "refunds and charges need a token bucket: a window cannot tell which window a \
             refunded token was taken in",
        ));
    }
    Ok(())
}

/// Reserves `checks`' costs: the decision, and when allowed, the [`Reservation`] to commit.
pub async fn reserve<S: Settle>(
    store: &S,
    checks: &[Check<'_>],
) -> Result<(Verdict, Option<Reservation>), StoreError> {
    let verdict = store.decide(checks).await?;
    let reservation = verdict.allowed().then(|| Reservation {
        buckets: checks.iter().map(Bucket::of).collect(),
        paid: !verdict.by_fail_policy,
    });
    Ok((verdict, reservation))
}

/// One reserved bucket, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bucket {
    policy: Policy,
    name: Option<Box<str>>,
    key: Box<[u8]>,
    reserved: u64,
}

impl Bucket {
    fn of(check: &Check<'_>) -> Bucket {
        Bucket {
            policy: check.policy,
            name: check.name.map(Into::into),
            key: check.key.into(),
            reserved: check.cost,
        }
    }

    fn check(&self) -> Check<'_> {
        let check = Check::new(self.policy, &self.key, self.reserved);
        match &self.name {
            Some(name) => check.named(name),
            None => check,
        }
    }
}

/// Tokens reserved on one or more buckets, to be committed once the actual cost is known.
/// Dropped without a commit, the reservation keeps its charge.
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::settle::reserve;
/// use tollgate::{Check, MemoryStore, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let rows = Policy::token_bucket(1_000, 1_000, Duration::from_secs(1))?;
/// let (verdict, reservation) = reserve(&store, &[Check::new(rows, b"report", 500)]).await?;
/// assert!(verdict.allowed());
/// // The query failed: nothing was used, everything goes back.
/// let after = reservation.expect("allowed").cancel(&store).await?;
/// assert_eq!(after.decisions()[0].remaining(), 1_000);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a reservation dropped keeps its whole charge; commit or cancel it"]
pub struct Reservation {
    buckets: Vec<Bucket>,
    /// Whether the store took the reserved tokens (not a fail policy's answer).
    paid: bool,
}

impl Reservation {
    /// Commits `used` tokens on every bucket reserved: the difference to each reservation is
    /// given back, or taken without a denial. Answers the buckets' state afterwards.
    pub async fn commit<S: Settle>(self, store: &S, used: u64) -> Result<Verdict, StoreError> {
        let adjustments = self.adjustments(used);
        store.settle(None, &adjustments).await
    }

    /// Gives everything back.
    pub async fn cancel<S: Settle>(self, store: &S) -> Result<Verdict, StoreError> {
        self.commit(store, 0).await
    }

    /// The adjustments committing `used` makes.
    fn adjustments(&self, used: u64) -> Vec<(Check<'_>, Adjustment)> {
        self.buckets
            .iter()
            .map(|b| (b.check(), Adjustment::commit(b.reserved, used, self.paid)))
            .collect()
    }
}

/// [`Settle`] behind a pointer, as [`DynStore`] is for [`Store`].
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::store::settle::{DynSettle, Settle};
/// use tollgate::{Check, MemoryStore, Policy, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Picked from configuration at run time; it still decides and settles.
/// let store: Arc<dyn DynSettle> = Arc::new(MemoryStore::new());
/// let check = Check::new(Policy::per_second(2)?, b"alice", 2);
/// assert!(store.decide(&[check]).await?.allowed());
/// store.refund(&[check]).await?;
/// assert!(store.decide(&[check]).await?.allowed());
/// # Ok(())
/// # }
/// ```
pub trait DynSettle: DynStore {
    /// See [`Settle::settle`].
    fn settle_dyn<'a>(
        &'a self,
        once: Option<Once<'a>>,
        adjustments: &'a [(Check<'a>, Adjustment)],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>>;
    /// See [`Settle::reset`].
    fn reset_dyn<'a>(&'a self, buckets: &'a [Check<'a>]) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<S: Settle> DynSettle for S {
    fn settle_dyn<'a>(
        &'a self,
        once: Option<Once<'a>>,
        adjustments: &'a [(Check<'a>, Adjustment)],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(self.settle(once, adjustments))
    }

    fn reset_dyn<'a>(&'a self, buckets: &'a [Check<'a>]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.reset(buckets))
    }
}

/// A store that settles, chosen at run time, is a store again.
impl Store for dyn DynSettle {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        self.decide_dyn(checks).await
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.ready_dyn().await
    }

    fn name(&self) -> &'static str {
        self.name_dyn()
    }

    fn supports(&self, policy: &Policy) -> Result<(), PolicyError> {
        self.supports_dyn(policy)
    }
}

/// ... and settles.
impl Settle for dyn DynSettle {
    async fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> Result<Verdict, StoreError> {
        self.settle_dyn(once, adjustments).await
    }

    async fn reset(&self, buckets: &[Check<'_>]) -> Result<(), StoreError> {
        self.reset_dyn(buckets).await
    }
}

/// A shared settling store settles.
impl<S: Settle + ?Sized> Settle for Arc<S> {
    fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send {
        (**self).settle(once, adjustments)
    }

    fn reset(&self, buckets: &[Check<'_>]) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).reset(buckets)
    }
}
