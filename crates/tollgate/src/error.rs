//! Errors. A denial is not an error ([`Decision::allowed`](crate::Decision) is `false`); these
//! are checks that can never pass and stores that cannot answer.

use std::time::Duration;

/// A check that can never be decided as asked, whatever the bucket holds. Not transient.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    /// The store cannot decide this check as asked (see the message).
    #[error("{0}")]
    Unsupported(&'static str),
}

/// Why a store could not decide. [`StoreError::is_transient`] tells a caller whether to apply
/// its fail policy (open, closed, local) or to report a bad request.
#[derive(Debug, thiserror::Error)]
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
    /// The store could not be reached or failed.
    #[error("the store is unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// Whether asking again later may succeed (the store is down, slow or full), as opposed to
    /// a request that is wrong whatever the store's health.
    pub fn is_transient(&self) -> bool {
        !matches!(self, StoreError::Check(_))
    }
}
