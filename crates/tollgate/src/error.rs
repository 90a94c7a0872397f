//! Errors. A denial is not an error ([`Decision::allowed`](crate::Decision) is `false`); these
//! are checks that can never pass and stores that cannot answer.

use std::time::Duration;

/// A check that can never be decided as asked, whatever the bucket holds. Not transient.
///
/// ```
/// use tollgate::{CheckError, MemoryStore, Policy, StoreError};
///
/// let store = MemoryStore::new();
/// let policy = Policy::per_second(10)?;
/// match store.check(&policy, b"alice", 11) {
///     Err(StoreError::Check(CheckError::CostExceedsCapacity { cost, capacity })) => {
///         assert_eq!((cost, capacity), (11, 10));
///     }
///     other => panic!("a cost over the capacity can never pass: {other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// `cost > capacity`: no amount of waiting makes it pass.
    #[error("cost {cost} exceeds the capacity {capacity}: it can never be allowed")]
    CostExceedsCapacity {
        /// The cost asked for.
        cost: u64,
        /// The policy's capacity.
        capacity: u64,
    },
    /// The same key under the same policy appears twice in one set of checks.
    #[error("check {index} repeats the bucket of an earlier check; combine their costs")]
    DuplicateBucket {
        /// The position of the repeated check.
        index: usize,
    },
    /// A policy name that is empty or longer than [`MAX_NAME_LEN`](crate::store::MAX_NAME_LEN).
    #[error("check {index} has an empty policy name or one over 128 bytes")]
    InvalidName {
        /// The position of the check.
        index: usize,
    },
    /// A reservation (or another settlement done once) was settled already, here or on
    /// another process sharing the store.
    #[error("this reservation was committed already")]
    AlreadySettled,
    /// The store cannot decide this check as asked (see the message).
    #[error("{0}")]
    Unsupported(&'static str),
    /// The store's clock read a time past the latest a bucket can be decided at
    /// ([`MAX_NOW`](crate::algorithm::gcra::MAX_NOW), in 2116): nothing was decided or
    /// written. The clock is wrong, not the check: [`StoreError::kind`] reports it as
    /// [`ErrorKind::Incompatible`] (not transient), so the fail policy answers and it is
    /// reported loudly.
    #[error(
        "the clock reads {now:?} since the UNIX epoch, past the latest time a bucket can hold ({max:?})"
    )]
    ClockOutOfRange {
        /// The clock's reading, since the UNIX epoch.
        now: Duration,
        /// The latest reading decided.
        max: Duration,
    },
}

/// Why a store could not decide. [`StoreError::kind`] tells a caller what to do about it: a
/// bad check is the caller's to fix; a store that is down, slow or full is *transient* and the
/// caller's fail policy answers meanwhile; a store that answers what this program does not
/// understand is *incompatible*, a bug or a misconfiguration that waiting will not fix, which
/// the fail policy also answers but which must be reported loudly (see
/// [`Guarded`](crate::store::guarded::Guarded)).
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::{ErrorKind, MemoryStore, Policy};
///
/// let store = MemoryStore::builder().max_keys(NonZeroUsize::MIN).build(); // one key
/// let policy = Policy::per_second(1)?;
/// store.check(&policy, b"alice", 1)?;
/// // Alice's bucket is not idle yet, so there is no room for Bob: transient, the fail
/// // policy answers.
/// let error = store.check(&policy, b"bob", 1).unwrap_err();
/// assert_eq!(error.kind(), ErrorKind::Full);
/// assert!(error.is_transient());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The checks themselves are wrong.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The memory store holds its maximum of keys and none of them is idle.
    #[error("the store holds its maximum of {max_keys} keys and none is idle")]
    Full {
        /// The configured cap.
        max_keys: usize,
    },
    /// The store did not answer within the configured timeout.
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    /// The store could not be reached, or failed in a way that may pass (restarting, loading,
    /// out of connections, a failover).
    #[error("the store is unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store answered what this version of tollgate does not understand: a script or
    /// statement error, a value of another type under a bucket's key (another program wrote
    /// it), a reply of the wrong shape, a schema of another version, a permission refused.
    #[error("the store and this version of tollgate disagree: {0}")]
    Incompatible(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A store was configured with something it cannot work with (no URL, a bad name).
    #[error("invalid store configuration: {0}")]
    Config(String),
}

/// What kind of failure a [`StoreError`] is, for fail policies and metrics.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ErrorKind, StoreError};
///
/// let error = StoreError::Timeout(Duration::from_millis(50));
/// assert_eq!(error.kind(), ErrorKind::Timeout);
/// assert_eq!(error.kind().as_str(), "timeout"); // a metric label
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`StoreError::Check`]: the request is wrong.
    Check,
    /// [`StoreError::Full`]: transient.
    Full,
    /// [`StoreError::Timeout`]: transient.
    Timeout,
    /// [`StoreError::Unavailable`]: transient.
    Unavailable,
    /// [`StoreError::Incompatible`], and a clock out of range
    /// ([`CheckError::ClockOutOfRange`]): a bug or a misconfiguration.
    Incompatible,
    /// [`StoreError::Config`]: found when the store is built.
    Config,
}

impl ErrorKind {
    /// A short name, for logs and metric labels: `check`, `full`, `timeout`, `unavailable`,
    /// `incompatible`, `config`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Check => "check",
            ErrorKind::Full => "full",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Incompatible => "incompatible",
            ErrorKind::Config => "config",
        }
    }
}

impl StoreError {
    /// The kind of this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            // The store's clock, not the request, is wrong.
            StoreError::Check(CheckError::ClockOutOfRange { .. }) => ErrorKind::Incompatible,
            StoreError::Check(_) => ErrorKind::Check,
            StoreError::Full { .. } => ErrorKind::Full,
            StoreError::Timeout(_) => ErrorKind::Timeout,
            StoreError::Unavailable(_) => ErrorKind::Unavailable,
            StoreError::Incompatible(_) => ErrorKind::Incompatible,
            StoreError::Config(_) => ErrorKind::Config,
        }
    }

    /// Whether asking again later may succeed (the store is down, slow or full), as opposed to
    /// a request that is wrong whatever the store's health, or a store that disagrees with
    /// this program.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Full | ErrorKind::Timeout | ErrorKind::Unavailable
        )
    }

    /// A [`StoreError::Incompatible`] saying `message`: for a store, or a front end over one,
    /// that finds an answer it cannot use.
    pub fn incompatible(message: impl Into<String>) -> StoreError {
        StoreError::Incompatible(message.into().into())
    }
}
