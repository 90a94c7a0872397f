//! Errors. A denial is not an error (`Decision::allowed` is `false`); these
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
    /// A policy name that is empty or longer than `store::MAX_NAME_LEN`.
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
    /// A settlement's `Once` id or time to live is out of range
    /// (the message says which): refused alike by every store, before any is asked.
    #[error("{0}")]
    InvalidOnce(&'static str),
    /// `Reservation::commit` with one `used` on a
    /// reservation whose checks reserved different costs (requests and tokens, say): one number
    /// cannot say what each used. Nothing was settled, and the reservation comes back
    /// (`CommitError::into_reservation`) to commit with `commit_each`.
    #[error(
        "the reservation's checks reserved different costs: commit what each used with \
         commit_each"
    )]
    CommitNeedsEach,
    /// `Reservation::commit_each` given
    /// another number of amounts than the reservation has checks. Nothing was settled.
    #[error("{given} used amounts for a reservation of {reserved} checks: give one per check")]
    UsedCount {
        /// The checks reserved.
        reserved: usize,
        /// The amounts given.
        given: usize,
    },
    /// A commit's `used` exceeds what was reserved plus the bucket's capacity: a commit puts
    /// a bucket at most one capacity into debt. Nothing was settled, and the reservation comes
    /// back (`CommitError::into_reservation`) to be committed with a sound number.
    #[error(
        "check {index}: used {used} exceeds its reservation plus its capacity ({most}): a \
         commit puts a bucket at most one capacity into debt"
    )]
    UsedOverDebtCap {
        /// The position of the check.
        index: usize,
        /// The amount used.
        used: u64,
        /// The most it may be: reserved plus capacity.
        most: u64,
    },
    /// The store's clock read a time past the latest a bucket can be decided at
    /// (the algorithms' `MAX_NOW`, in 2116): nothing was decided or
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
/// the fail policy also answers but which must be reported loudly (see the fail policies);
/// settings that can never work are a
/// *configuration* error when the store is built (or probed before it serves), and an outage
/// once it serves.
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
///
/// Its message carries the words of the failure it wraps, so
/// [`source`](std::error::Error::source) skips them: it answers the first cause further down
/// whose words the message does not already hold (tokio-postgres's "error connecting to
/// server" is followed by the refused connection under it; the I/O error a Redis error
/// repeats is not). A report that prints the chain then says each thing once.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The checks themselves are wrong.
    Check(CheckError),
    /// The memory store holds its maximum of keys and none of them is idle.
    Full {
        /// The configured cap.
        max_keys: usize,
    },
    /// The store did not answer within the configured timeout.
    Timeout(Duration),
    /// The store could not be reached, or failed in a way that may pass (restarting, loading,
    /// out of connections, a failover), or, after it was built, refused what it accepted
    /// before (a password changed, a `pg_hba.conf` entry removed, a certificate replaced by
    /// one that does not match): an outage all the same, which the fail policy answers until
    /// the store or its settings are put right.
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
    /// The store answered what this version of tollgate does not understand: a script or
    /// statement error, a value of another type under a bucket's key (another program wrote
    /// it), a reply of the wrong shape, a schema of another version, a permission refused.
    Incompatible(Box<dyn std::error::Error + Send + Sync>),
    /// A store was configured with something it can never work with (no URL, a bad name,
    /// credentials refused, no such database). Only building a store and probing it with
    /// `Store::ready` answer it, never a decision: see
    /// [`ErrorKind::Config`].
    Config(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Check(e) => e.fmt(f),
            StoreError::Full { max_keys } => write!(
                f,
                "the store holds its maximum of {max_keys} keys and none is idle"
            ),
            StoreError::Timeout(limit) => write!(f, "the store did not answer within {limit:?}"),
            StoreError::Unavailable(e) => write!(f, "the store is unavailable: {e}"),
            StoreError::Incompatible(e) => {
                write!(f, "the store and this version of tollgate disagree: {e}")
            }
            StoreError::Config(why) => write!(f, "invalid store configuration: {why}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let wrapped: &(dyn std::error::Error + 'static) = match self {
            StoreError::Unavailable(e) | StoreError::Incompatible(e) => &**e,
            StoreError::Check(e) => return e.source(),
            _ => return None,
        };
        let said = wrapped.to_string();
        let mut cause = wrapped.source();
        while let Some(e) = cause {
            if !said.contains(&e.to_string()) {
                return Some(e);
            }
            cause = e.source();
        }
        None
    }
}

impl From<CheckError> for StoreError {
    fn from(e: CheckError) -> StoreError {
        StoreError::Check(e)
    }
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
    /// [`StoreError::Config`]: settings that can never work, found when the store is built
    /// or probed with `Store::ready` (what a program asks before it
    /// serves, to refuse to start). Never the answer to a decision: a store that was built
    /// and then refuses its settings (a password changed, a `pg_hba.conf` entry removed) is
    /// an outage, [`Unavailable`](ErrorKind::Unavailable), which the fail policy answers.
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

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::fmt;

    use super::StoreError;

    /// An error that says `words`, caused by `cause`.
    #[derive(Debug)]
    struct Said(&'static str, Option<Box<Said>>);

    impl fmt::Display for Said {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Said {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    /// The message and its causes, as a report prints them.
    fn chain(e: &StoreError) -> Vec<String> {
        let mut said = vec![e.to_string()];
        let mut cause = e.source();
        while let Some(c) = cause {
            said.push(c.to_string());
            cause = c.source();
        }
        said
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        // Redis's error repeats the I/O error under it, which repeats nothing.
        let refused = Said("Connection refused (os error 111)", None);
        let redis = Said("Connection refused (os error 111)", Some(Box::new(refused)));
        assert_eq!(
            chain(&StoreError::Unavailable(Box::new(redis))),
            ["the store is unavailable: Connection refused (os error 111)"]
        );
        // tokio-postgres names the step, the cause under it says why.
        let refused = Said("Connection refused (os error 111)", None);
        let pg = Said("error connecting to server", Some(Box::new(refused)));
        assert_eq!(
            chain(&StoreError::Incompatible(Box::new(pg))),
            [
                "the store and this version of tollgate disagree: error connecting to server",
                "Connection refused (os error 111)"
            ]
        );
    }
}
