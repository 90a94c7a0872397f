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

    /// [`commit`](Self::commit), refused when `used` would put the bucket more than one
    /// `capacity` into debt: `Err` holds the most `used` may be (`reserved + capacity`). The
    /// one rule of every commit: the library's [`Reservation`], the server's.
    pub fn commit_within(
        reserved: u64,
        used: u64,
        capacity: u64,
        paid: bool,
    ) -> Result<Adjustment, u64> {
        let most = reserved.saturating_add(capacity);
        if used > most {
            return Err(most);
        }
        Ok(Adjustment::commit(reserved, used, paid))
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
/// let once = || Some(Once::new(b"reservation-42", Duration::from_secs(300)));
/// store.settle(once(), &refund).await?;
/// // The same id again (a retry, a replay): refused, nothing given back twice.
/// let again = store.settle(once(), &refund).await;
/// assert!(matches!(again, Err(StoreError::Check(CheckError::AlreadySettled))));
/// # Ok(())
/// # }
/// ```
///
/// Every store takes the same ids and times to live: an id of 1 to [`MAX_ONCE_ID`] bytes, a
/// `ttl` from [`MIN_ONCE_TTL`] to [`MAX_ONCE_TTL`]; anything else is refused with
/// [`CheckError::InvalidOnce`] before a store is asked, and settles nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Once<'a> {
    /// The settlement's identifier, unique per reservation (1 to [`MAX_ONCE_ID`] bytes).
    pub id: &'a [u8],
    /// How long the store remembers it ([`MIN_ONCE_TTL`] to [`MAX_ONCE_TTL`]).
    pub ttl: Duration,
}

impl<'a> Once<'a> {
    /// A settlement under `id`, remembered for `ttl` (both checked when settled).
    pub const fn new(id: &'a [u8], ttl: Duration) -> Once<'a> {
        Once { id, ttl }
    }
}

/// The longest [`Once::id`].
pub const MAX_ONCE_ID: usize = 64;

/// The shortest [`Once::ttl`]: Redis remembers an id for whole milliseconds.
pub const MIN_ONCE_TTL: Duration = Duration::from_millis(1);

/// The longest [`Once::ttl`], a year: far beyond any reservation's life, and well within what
/// every store can hold (Redis's `PX`, PostgreSQL's `timestamptz`, the memory store's clock).
pub const MAX_ONCE_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

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
    ///
    /// # Cancel safety
    ///
    /// Dropped before its call reached the store, nothing was reset; after, the buckets may
    /// have been reset. Resetting again is harmless.
    fn reset(&self, buckets: &[Check<'_>]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives each check's `cost` back to its bucket.
    ///
    /// # Cancel safety
    ///
    /// As [`settle`](Self::settle) without a once-id: dropped after its call reached the
    /// store, the refund may have been given, whole; refunding again may give it twice
    /// (never above the capacity).
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
    if let Some(once) = once {
        if once.id.is_empty() || once.id.len() > MAX_ONCE_ID {
            return Err(CheckError::InvalidOnce(
                "a settlement's id must be 1 to 64 bytes",
            ));
        }
        if !(MIN_ONCE_TTL..=MAX_ONCE_TTL).contains(&once.ttl) {
            return Err(CheckError::InvalidOnce(
                "a settlement's ttl must be from 1 ms to 365 days",
            ));
        }
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
///
/// # Cancel safety
///
/// As [`Store::decide`]: dropped after the store took the tokens, the reservation is lost
/// and **keeps its charge** (nothing can commit or cancel it): the tokens come back by the
/// refill alone, as those of a reservation dropped uncommitted.
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
    /// Commits `used` tokens on every check reserved, when each reserved the same cost (one
    /// policy, or several charged alike): the difference to the reservation is given back, or
    /// taken without a denial. Answers the buckets' state afterwards.
    ///
    /// A reservation whose checks reserved different costs (requests per minute at 1 and
    /// tokens per minute at 2,000) is refused with [`CheckError::CommitNeedsEach`] and settles
    /// nothing: say what each used with [`commit_each`](Self::commit_each). A `used` above a
    /// check's reservation plus its capacity is refused with [`CheckError::UsedOverDebtCap`].
    /// A refused commit hands the reservation back ([`CommitError::into_reservation`]), to be
    /// committed again with sound amounts.
    ///
    /// # Cancel safety
    ///
    /// The reservation is consumed when the call starts. Dropped before the store was asked,
    /// nothing was settled and the reservation keeps its whole charge (as a reservation
    /// dropped uncommitted does); dropped after, the settlement may have been applied, whole.
    /// Keep a [`clone`](Clone::clone) to retry: it is settled under no once-id, so a retry of
    /// one that did apply settles again (the server's reservations settle under a
    /// [`Once`] id, and a retry of those is safe).
    pub async fn commit<S: Settle>(self, store: &S, used: u64) -> Result<Verdict, CommitError> {
        if self
            .buckets
            .windows(2)
            .any(|w| w[0].reserved != w[1].reserved)
        {
            return Err(CommitError::refused(CheckError::CommitNeedsEach, self));
        }
        let used = vec![used; self.buckets.len()];
        self.commit_each(store, &used).await
    }

    /// Commits what each check used, in the order the checks were reserved: requests per
    /// minute and tokens per minute reserved as `[1, 2_000]` commit as `[1, 1_200]`. Each
    /// difference is given back, or taken without a denial. Refused, settling nothing and
    /// handing the reservation back, when `used` has another length than the checks
    /// ([`CheckError::UsedCount`]) or an amount exceeds its reservation plus its capacity
    /// ([`CheckError::UsedOverDebtCap`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::store::settle::reserve;
    /// use tollgate::{Check, MemoryStore, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let rpm = Policy::per_minute(60)?;
    /// let tpm = Policy::token_bucket(10_000, 10_000, Duration::from_secs(60))?;
    /// let estimate = [
    ///     Check::new(rpm, b"alice", 1).named("requests"),
    ///     Check::new(tpm, b"alice", 2_000).named("tokens"),
    /// ];
    /// let (verdict, reservation) = reserve(&store, &estimate).await?;
    /// let reservation = reservation.expect("allowed");
    /// // One number cannot say what each used: refused, and the reservation comes back.
    /// let refused = reservation.commit(&store, 1_200).await.unwrap_err();
    /// let reservation = refused.into_reservation().expect("nothing was settled");
    /// // One request, 1,200 tokens.
    /// let after = reservation.commit_each(&store, &[1, 1_200]).await?;
    /// assert_eq!(after.decisions()[0].remaining(), 59);
    /// assert_eq!(after.decisions()[1].remaining(), 8_800);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`commit`](Self::commit).
    pub async fn commit_each<S: Settle>(
        self,
        store: &S,
        used: &[u64],
    ) -> Result<Verdict, CommitError> {
        let adjustments = match self.adjustments(used) {
            Ok(adjustments) => adjustments,
            Err(refused) => return Err(CommitError::refused(refused, self)),
        };
        store
            .settle(None, &adjustments)
            .await
            .map_err(CommitError::from)
    }

    /// Gives everything back.
    ///
    /// # Cancel safety
    ///
    /// As [`commit`](Self::commit).
    pub async fn cancel<S: Settle>(self, store: &S) -> Result<Verdict, CommitError> {
        let nothing = vec![0; self.buckets.len()];
        self.commit_each(store, &nothing).await
    }

    /// The costs each check reserved, in order.
    pub fn reserved(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.buckets.iter().map(|b| b.reserved)
    }

    /// The adjustments committing `used` (one amount per check) makes, or why it may not.
    fn adjustments(&self, used: &[u64]) -> Result<Vec<(Check<'_>, Adjustment)>, CheckError> {
        if used.len() != self.buckets.len() {
            return Err(CheckError::UsedCount {
                reserved: self.buckets.len(),
                given: used.len(),
            });
        }
        self.buckets
            .iter()
            .zip(used)
            .enumerate()
            .map(|(index, (bucket, &used))| {
                let capacity = bucket.policy.capacity();
                let adjustment =
                    Adjustment::commit_within(bucket.reserved, used, capacity, self.paid)
                        .map_err(|most| CheckError::UsedOverDebtCap { index, used, most })?;
                Ok((bucket.check(), adjustment))
            })
            .collect()
    }
}

/// Why a [`Reservation`] was not committed: the store's error, and when the amounts were
/// refused before the store was asked (nothing settled), the reservation back.
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::settle::reserve;
/// use tollgate::{Check, CheckError, MemoryStore, Policy, StoreError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let policy = Policy::per_second(10)?;
/// let (_, reservation) = reserve(&store, &[Check::new(policy, b"alice", 2)]).await?;
/// // Used 13 of 2 reserved: more than the reservation plus a capacity.
/// let refused = reservation.expect("allowed").commit(&store, 13).await.unwrap_err();
/// assert!(matches!(refused.error(), StoreError::Check(CheckError::UsedOverDebtCap { .. })));
/// let again = refused.into_reservation().expect("nothing settled").commit(&store, 2).await?;
/// assert_eq!(again.decisions()[0].remaining(), 8);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct CommitError {
    error: StoreError,
    reservation: Option<Reservation>,
}

/// Says the store error's words and hands on its cause, as the error itself would: a printed
/// chain says each cause once.
impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl CommitError {
    fn refused(error: CheckError, reservation: Reservation) -> CommitError {
        CommitError {
            error: error.into(),
            reservation: Some(reservation),
        }
    }

    /// The error.
    pub fn error(&self) -> &StoreError {
        &self.error
    }

    /// The error, without the reservation.
    pub fn into_error(self) -> StoreError {
        self.error
    }

    /// The reservation, when nothing was settled because the amounts were refused; `None`
    /// when the store was asked (it may have applied the settlement).
    pub fn into_reservation(self) -> Option<Reservation> {
        self.reservation
    }
}

impl From<StoreError> for CommitError {
    fn from(error: StoreError) -> CommitError {
        CommitError {
            error,
            reservation: None,
        }
    }
}

impl From<CommitError> for StoreError {
    fn from(error: CommitError) -> StoreError {
        error.error
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
